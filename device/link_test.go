package device

import (
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"rdmafs/link"
	"rdmafs/qp"
	"rdmafs/roce"
)

// testLink stands between the transport and the device's link (in front
// of the chain's capture and route, in place of its fault injector) so a
// test can lose, hold and later deliver packets, as a real network would.
type testLink struct {
	filter func(p *packet) linkAction // under Device.mu
	held   []heldPacket
	seen   int
}

type heldPacket struct {
	d *Device // the sender
	p *packet
}

// devLink is a testLink as one device's link.
type devLink struct {
	l *testLink
	d *Device
}

type linkAction int

const (
	deliver linkAction = iota
	hold
	drop
)

// WritePackets implements link.Endpoint.
//
// lockcheck:ok the device calls it holding the chain's lock, Device.mu
func (dl devLink) WritePackets(pkts []link.Packet) {
	for _, lp := range pkts {
		p := lp.(*packet)
		l := dl.l
		l.seen++
		act := deliver
		if l.filter != nil {
			act = l.filter(p)
		}
		switch act {
		case deliver:
			injectLocked(dl.d, p)
		case hold:
			p.own()
			l.held = append(l.held, heldPacket{dl.d, p})
		case drop:
			dl.d.poolLocked(dl.d.chainEngine()).put(p)
		}
	}
}

func (devLink) Attach(link.Dispatcher) {}
func (devLink) Close()                 {}

// injectLocked sends p as the device would, but below its fault injector
// (or a test's link in its place): capture and route.
func injectLocked(d *Device, p *packet) {
	d.routeLocked(p)
	if *wireFlag {
		wireToSelf(d, p)
	}
	d.chain.Capture.WritePackets([]link.Packet{p})
}

func (e *env) link(filter func(p *packet) linkAction) *testLink {
	l := &testLink{filter: filter}
	e.d.mu.Lock()
	e.d.link = devLink{l, e.d}
	e.d.mu.Unlock()
	return l
}

// release delivers the first n held packets (all if n < 0).
func (e *env) release(l *testLink, n int) {
	e.quiesce()
	e.d.mu.Lock()
	if n < 0 || n > len(l.held) {
		n = len(l.held)
	}
	hs := l.held[:n]
	l.held = append([]heldPacket(nil), l.held[n:]...)
	for _, h := range hs {
		injectLocked(h.d, h.p)
	}
	e.d.mu.Unlock()
}

// once returns a filter that applies act to the k-th packet (counted from
// 1) that match selects, and delivers everything else.
func once(k int, match func(p *packet) bool, act linkAction) func(*packet) linkAction {
	n := 0
	return func(p *packet) linkAction {
		if match(p) {
			n++
			if n == k {
				return act
			}
		}
		return deliver
	}
}

func isOp(ops ...roce.Opcode) func(p *packet) bool {
	return func(p *packet) bool {
		for _, o := range ops {
			if p.Opcode&roce.OpMask == o {
				return true
			}
		}
		return false
	}
}

func TestRCLostPacketSeqNak(t *testing.T) {
	e := newEnv(t)
	a, b, acq, bcq := e.pair(qp.TypeRC)
	src, dst := e.mr(8192, 0), e.mr(8192, qp.AccessLocalWrite)
	fill(src.Mem(), 3)
	e.postRecv(b, fmt.Sprintf("wr_id=9 sge=%d:0:8192", dst.LKey))
	e.link(once(1, isOp(roce.OpSendMiddle), drop))
	e.postSend(a, fmt.Sprintf("opcode=send wr_id=1 send_flags=signaled sge=%d:0:3000", src.LKey))
	e.expect(acq, sendWC(1, "success", "send", a, 3000))
	e.expect(bcq, recvWC(9, "success", "recv", b, 3000, a, ""))
	sameBytes(t, dst.Mem()[:3000], src.Mem()[:3000])
	ca, cb := e.qpCounters(a), e.qpCounters(b)
	if cb.SeqErrNaks != 1 || ca.SeqErrNaks != 1 || ca.Retransmits != 1 || ca.RetryTimeouts != 0 ||
		cb.SeqNaksSent != 1 || ca.SeqNaksRecv != 1 || cb.SeqErrors == 0 || ca.SeqNaksSent != 0 {
		t.Fatalf("requester %+v responder %+v", ca, cb)
	}
	e.healthy(a, b)
}

func TestRCLostAckTimeout(t *testing.T) {
	e := newEnv(t)
	a, b, acq, bcq := e.pair(qp.TypeRC)
	src, dst := e.mr(8192, 0), e.mr(8192, qp.AccessLocalWrite|qp.AccessRemoteWrite)
	fill(src.Mem(), 4)
	e.postRecv(b, fmt.Sprintf("wr_id=9 sge=%d:0:8192", dst.LKey))
	e.link(once(1, isOp(roce.OpAcknowledge), drop))
	// One at a time, so that each is acknowledged on its own (requests
	// that arrive together share one ACK: TestRCAcksCoalesced).
	e.postSend(a, fmt.Sprintf("opcode=send wr_id=1 send_flags=signaled sge=%d:0:100", src.LKey))
	e.quiesce()
	e.postSend(a, fmt.Sprintf("opcode=rdma_write wr_id=2 send_flags=signaled sge=%d:0:2000 remote_addr=4096 rkey=%d", src.LKey, dst.RKey))
	// The WRITE's ACK covers the SEND too (cumulative acknowledgement).
	e.expect(acq, sendWC(1, "success", "send", a, 100), sendWC(2, "success", "rdma_write", a, 2000))
	e.expect(bcq, recvWC(9, "success", "recv", b, 100, a, ""))

	e.postRecv(b, fmt.Sprintf("wr_id=10 sge=%d:0:8192", dst.LKey))
	e.link(once(1, isOp(roce.OpAcknowledge), drop))
	e.postSend(a, fmt.Sprintf("opcode=send wr_id=3 send_flags=signaled sge=%d:0:100", src.LKey))
	e.expect(acq)
	e.expect(bcq, recvWC(10, "success", "recv", b, 100, a, ""))
	e.clk.Advance(qp.AckTimeout(14))
	// The resent SEND is a duplicate: acknowledged again, not delivered again.
	e.expect(acq, sendWC(3, "success", "send", a, 100))
	e.expect(bcq)
	ca, cb := e.qpCounters(a), e.qpCounters(b)
	if ca.RetryTimeouts != 1 || ca.Retransmits != 1 || cb.DuplicateReqs != 1 || cb.SeqErrors != 0 {
		t.Fatalf("requester %+v responder %+v", ca, cb)
	}
	e.healthy(a, b)
}

func TestRCLostReadResponse(t *testing.T) {
	e := newEnv(t)
	a, b, acq, bcq := e.pair(qp.TypeRC)
	local, remote := e.mr(16384, qp.AccessLocalWrite), e.mr(16384, rwAccess)
	fill(remote.Mem(), 5)
	e.link(once(2, isOp(roce.OpReadResponseMiddle), drop))
	e.postSend(a, fmt.Sprintf("opcode=rdma_read wr_id=1 send_flags=signaled sge=%d:0:6000 remote_addr=100 rkey=%d", local.LKey, remote.RKey))
	e.expect(acq)
	e.clk.Advance(qp.AckTimeout(14))
	e.expect(acq, sendWC(1, "success", "rdma_read", a, 6000))
	e.expect(bcq)
	sameBytes(t, local.Mem()[:6000], remote.Mem()[100:6100])
	ca, cb := e.qpCounters(a), e.qpCounters(b)
	if ca.RetryTimeouts != 1 || cb.DuplicateReqs != 1 {
		t.Fatalf("requester %+v responder %+v", ca, cb)
	}
	// Only the missing part was asked for again: 6 + 4 responses.
	if cb.PacketsSent != 10 {
		t.Fatalf("responder sent %d packets, want 10", cb.PacketsSent)
	}
	e.healthy(a, b)
}

func TestRCLostAtomicAckNotExecutedTwice(t *testing.T) {
	e := newEnv(t)
	a, b, acq, _ := e.pair(qp.TypeRC)
	local, remote := e.mr(64, qp.AccessLocalWrite), e.mr(64, rwAccess)
	binary.LittleEndian.PutUint64(remote.Mem(), 10)
	e.link(once(1, isOp(roce.OpAtomicAcknowledge), drop))
	e.postSend(a, fmt.Sprintf("opcode=atomic_fetch_and_add wr_id=1 send_flags=signaled sge=%d:0:8 remote_addr=0 rkey=%d compare_add=5", local.LKey, remote.RKey))
	e.expect(acq)
	e.clk.Advance(qp.AckTimeout(14))
	e.expect(acq, sendWC(1, "success", "fetch_add", a, 8))
	if got := binary.LittleEndian.Uint64(remote.Mem()); got != 15 {
		t.Fatalf("memory %d, want 15 (added once)", got)
	}
	if got := binary.LittleEndian.Uint64(local.Mem()); got != 10 {
		t.Fatalf("original %d, want 10", got)
	}
	if c := e.qpCounters(b); c.DuplicateReqs != 1 {
		t.Fatalf("duplicates %d", c.DuplicateReqs)
	}
	e.healthy(a, b)
}

// The retransmit timer measures time without progress: an ACK that
// arrives restarts it.
func TestRCRetryTimerRestartsOnProgress(t *testing.T) {
	e := newEnv(t)
	a, b, acq, bcq := e.pair(qp.TypeRC)
	buf := e.mr(64, qp.AccessLocalWrite)
	e.postRecv(b, fmt.Sprintf("wr_id=9 sge=%d:0:64", buf.LKey), fmt.Sprintf("wr_id=10 sge=%d:0:64", buf.LKey))
	l := e.link(func(p *packet) linkAction {
		if p.Opcode&roce.OpMask == roce.OpAcknowledge {
			return hold
		}
		return deliver
	})
	// One at a time, so that each has an ACK of its own.
	e.postSend(a, "opcode=send wr_id=1 send_flags=signaled")
	e.quiesce()
	e.postSend(a, "opcode=send wr_id=2 send_flags=signaled")
	e.expect(bcq, recvWC(9, "success", "recv", b, 0, a, ""), recvWC(10, "success", "recv", b, 0, a, ""))
	to := qp.AckTimeout(14)
	step := to * 6 / 10
	e.clk.Advance(step)
	e.release(l, 1)
	e.expect(acq, sendWC(1, "success", "send", a, 0))
	e.clk.Advance(step)
	e.quiesce()
	if c := e.qpCounters(a); c.RetryTimeouts != 0 {
		t.Fatalf("timed out %d times although an ACK came %v ago", c.RetryTimeouts, step)
	}
	e.release(l, -1)
	e.expect(acq, sendWC(2, "success", "send", a, 0))
	e.clk.Advance(10 * to)
	e.quiesce()
	if c := e.qpCounters(a); c.RetryTimeouts != 0 {
		t.Fatalf("timed out %d times with nothing outstanding", c.RetryTimeouts)
	}
	e.healthy(a, b)
	_ = time.Second
}

// A response arriving long after a retry made it redundant is harmless.
func TestRCLateDuplicateResponses(t *testing.T) {
	e := newEnv(t)
	a, b, acq, _ := e.pair(qp.TypeRC)
	local, remote := e.mr(8192, qp.AccessLocalWrite), e.mr(8192, rwAccess)
	fill(remote.Mem(), 8)
	l := e.link(once(1, isOp(roce.OpReadResponseOnly), hold))
	e.postSend(a, fmt.Sprintf("opcode=rdma_read wr_id=1 send_flags=signaled sge=%d:0:500 remote_addr=0 rkey=%d", local.LKey, remote.RKey))
	e.expect(acq)
	e.clk.Advance(qp.AckTimeout(14))
	e.expect(acq, sendWC(1, "success", "rdma_read", a, 500))
	fill(remote.Mem(), 9)
	e.postSend(a, fmt.Sprintf("opcode=rdma_read wr_id=2 send_flags=signaled sge=%d:1000:500 remote_addr=0 rkey=%d", local.LKey, remote.RKey))
	e.expect(acq, sendWC(2, "success", "rdma_read", a, 500))
	e.release(l, -1) // the first response to READ 1, long stale
	e.expect(acq)
	sameBytes(t, local.Mem()[1000:1500], remote.Mem()[:500])
	e.healthy(a, b)
}

// The READ's response is lost but the ACK of a SEND behind it arrives: the
// ACK cannot complete the READ, the READ is asked again after a timeout,
// and both complete in order.
func TestRCLostReadResponseLaterAck(t *testing.T) {
	e := newEnv(t)
	a, b, acq, bcq := e.pair(qp.TypeRC)
	local, remote := e.mr(8192, qp.AccessLocalWrite), e.mr(8192, rwAccess)
	fill(remote.Mem(), 16)
	e.postRecv(b, fmt.Sprintf("wr_id=9 sge=%d:0:64", local.LKey))
	e.link(once(1, isOp(roce.OpReadResponseOnly), drop))
	e.postSend(a,
		fmt.Sprintf("opcode=rdma_read wr_id=1 send_flags=signaled sge=%d:100:200 remote_addr=0 rkey=%d", local.LKey, remote.RKey),
		"opcode=send wr_id=2 send_flags=signaled")
	e.expect(acq)
	e.expect(bcq, recvWC(9, "success", "recv", b, 0, a, ""))
	e.clk.Advance(qp.AckTimeout(14))
	e.expect(acq, sendWC(1, "success", "rdma_read", a, 200), sendWC(2, "success", "send", a, 0))
	e.expect(bcq) // the resent SEND was a duplicate
	sameBytes(t, local.Mem()[100:300], remote.Mem()[:200])
	e.healthy(a, b)
}

// An acknowledgement of PSNs not (or no longer) outstanding is dropped; it
// neither completes WQEs nor moves the window.
func TestRCAckBeyondSentDropped(t *testing.T) {
	e := newEnv(t)
	acq := e.cq(16)
	a := e.qp(qpOpts{scq: acq, rcq: acq})
	e.connectX(a, 0xABCDE, "")
	e.postSend(a, "opcode=send wr_id=1 send_flags=signaled")
	e.quiesce()
	e.d.mu.Lock()
	before := a.comp.psn
	p := e.d.engines[0].pool.get()
	p.Opcode, p.Syndrome = roce.TransportRC|roce.OpAcknowledge, aethACK
	p.setPSN(a.req.psn.Add(3))
	a.comp.completeResponseLocked(p)
	after := a.comp.psn
	e.d.mu.Unlock()
	if after != before {
		t.Fatalf("comp psn moved from %d to %d on an ACK beyond the sent PSNs", before, after)
	}
	e.expect(acq)
	e.state(a, qp.StateRTS)
}

// A local operation between two SENDs runs once; when the SEND before it
// is retransmitted, the requester steps over it to resend the one after.
func TestRCRetryAcrossLocalOp(t *testing.T) {
	e := newEnv(t)
	a, b, acq, bcq := e.pair(qp.TypeRC)
	mr := e.mr(4096, qp.AccessLocalWrite|qp.AccessMWBind)
	mw := e.mw(2)
	e.postRecv(b, "wr_id=8", "wr_id=9")
	e.link(once(1, isOp(roce.OpSendOnly), drop))
	e.postSend(a, "opcode=send wr_id=1 send_flags=signaled",
		fmt.Sprintf("opcode=bind_mw wr_id=2 send_flags=signaled rkey=3 mw=%d bind_lkey=%d bind_addr=0 bind_length=64 bind_access=remote_read", mw.Handle, mr.LKey),
		"opcode=send wr_id=3 send_flags=signaled")
	e.expect(acq, sendWC(1, "success", "send", a, 0), sendWC(2, "success", "bind_mw", a, 0), sendWC(3, "success", "send", a, 0))
	e.expect(bcq, recvWC(8, "success", "recv", b, 0, a, ""), recvWC(9, "success", "recv", b, 0, a, ""))
	e.healthy(a, b)
}

// UC on a lossy link: a message that loses a packet is dropped whole and
// its receive WQE goes to the next message; what arrives is complete,
// in order and exact.
func TestUCLossyWholeMessagesOnly(t *testing.T) {
	e := newEnv(t)
	over := "path_mtu=256"
	a, b, acq, bcq := e.pairX(qp.TypeUC, over, over)
	src, dst := e.mr(1<<20, 0), e.mr(1<<20, qp.AccessLocalWrite)
	rng := uint64(1)
	next := func(n uint64) uint64 { rng = rng*6364136223846793005 + 1442695040888963407; return (rng >> 33) % n }
	e.link(func(p *packet) linkAction {
		if next(100) < 5 {
			return drop
		}
		return deliver
	})
	const msgs = 300
	sizes := make([]int, msgs)
	offs := make([]int, msgs)
	for i := range sizes {
		sizes[i] = 8 + int(next(3000))
		offs[i] = i * 3200 // disjoint: each starts with its own index
		binary.LittleEndian.PutUint64(src.Mem()[offs[i]:], uint64(i))
	}
	const slot = 4096
	for i := 0; i < 64; i++ {
		e.postRecv(b, fmt.Sprintf("wr_id=%d sge=%d:%d:%d", i, dst.LKey, i*slot, slot))
	}
	posted, recvd, last := 0, 0, -1
	for posted < msgs {
		for k := 0; k < 16 && posted < msgs; k++ {
			e.postSend(a, fmt.Sprintf("opcode=send wr_id=%d sge=%d:%d:%d", posted, src.LKey, offs[posted], sizes[posted]))
			posted++
		}
		e.quiesce()
		wcs, err := bcq.Poll(64)
		if err != nil {
			t.Fatal(err)
		}
		for _, wc := range wcs {
			if wc.Status != qp.WCSuccess || wc.WRID != uint64(recvd%64) {
				t.Fatalf("receive %d: %+v", recvd, wc)
			}
			buf := dst.Mem()[int(wc.WRID)*slot:]
			idx := int(binary.LittleEndian.Uint64(buf))
			if idx <= last || idx >= posted || int(wc.ByteLen) != sizes[idx] {
				t.Fatalf("receive %d holds message %d (%d bytes) after %d", recvd, idx, wc.ByteLen, last)
			}
			sameBytes(t, buf[:wc.ByteLen], src.Mem()[offs[idx]:offs[idx]+sizes[idx]])
			last = idx
			e.postRecv(b, fmt.Sprintf("wr_id=%d sge=%d:%d:%d", wc.WRID, dst.LKey, int(wc.WRID)*slot, slot))
			recvd++
		}
		e.poll(acq)
	}
	if recvd == 0 || recvd == msgs {
		t.Fatalf("%d of %d messages arrived; the link should lose some, not all", recvd, msgs)
	}
	e.healthy(a, b)
}

// Requests that reach the responder together are acknowledged once: ACKs
// are cumulative, so the last one of the run covers the others, with the
// MSN of the last message; a READ among them flushes the ACK held back
// before its response, so responses stay in PSN order.
func TestRCAcksCoalesced(t *testing.T) {
	e := newEnv(t)
	a, b, acq, bcq := e.pair(qp.TypeRC)
	src, dst := e.mr(4096, qp.AccessLocalWrite), e.mr(4096, rwAccess)
	fill(src.Mem(), 51)
	isReq := func(p *packet) bool { return p.Opcode.Class()&roce.ClassRequest != 0 }
	acks := 0
	l := e.link(func(p *packet) linkAction {
		if isReq(p) {
			return hold
		}
		if p.Opcode == roce.TransportRC|roce.OpAcknowledge && p.Syndrome>>5 == 0 {
			acks++
		}
		return deliver
	})
	for i := 0; i < 10; i++ {
		e.postSend(a, fmt.Sprintf("opcode=rdma_write wr_id=%d send_flags=signaled sge=%d:%d:8 remote_addr=%d rkey=%d", i, src.LKey, i*8, i*8, dst.RKey))
	}
	e.postSend(a, fmt.Sprintf("opcode=rdma_read wr_id=10 send_flags=signaled sge=%d:1000:16 remote_addr=0 rkey=%d", src.LKey, dst.RKey))
	for i := 11; i < 14; i++ {
		e.postSend(a, fmt.Sprintf("opcode=rdma_write wr_id=%d send_flags=signaled sge=%d:%d:8 remote_addr=%d rkey=%d", i, src.LKey, i*8, i*8, dst.RKey))
	}
	e.quiesce()
	e.release(l, -1)
	var want []string
	for i := 0; i < 14; i++ {
		if i == 10 {
			want = append(want, sendWC(10, "success", "rdma_read", a, 16))
			continue
		}
		want = append(want, sendWC(uint64(i), "success", "rdma_write", a, 8))
	}
	e.expect(acq, want...)
	e.expect(bcq)
	sameBytes(t, dst.Mem()[:80], src.Mem()[:80])
	sameBytes(t, src.Mem()[1000:1016], dst.Mem()[:16])
	c := e.qpCounters(b)
	if c.AcksSent != uint64(acks) || c.AcksSent+c.AcksCoalesced != 13 {
		t.Fatalf("acks sent %d (seen %d), coalesced %d; want 13 in all", c.AcksSent, acks, c.AcksCoalesced)
	}
	if !*wireFlag && c.AcksSent != 2 {
		// One before the READ response, one at the end of the run.
		t.Fatalf("%d ACKs for 13 WRITEs arriving together, want 2", c.AcksSent)
	}
	e.healthy(a, b)
}
