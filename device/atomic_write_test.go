package device

import (
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"rdmafs/qp"
	"rdmafs/roce"
)

// ATOMIC WRITE (IBA 1.5, the Memory Placement Extensions; rxe since Linux
// 6.2): 8 bytes from the WR stored at an aligned remote address as one
// word, answered with an RDMA READ RESPONSE ONLY without data.

func TestRCAtomicWrite(t *testing.T) {
	e := newEnv(t)
	a, b, acq, bcq := e.pair(qp.TypeRC)
	remote := e.mr(64, qp.AccessLocalWrite|qp.AccessRemoteWrite)
	fill(remote.Mem(), 3)
	before := append([]byte(nil), remote.Mem()...)
	e.postSend(a, fmt.Sprintf("opcode=atomic_write wr_id=1 send_flags=signaled remote_addr=16 rkey=%d compare_add=0x0102030405060708", remote.RKey))
	e.expect(acq, sendWC(1, "success", "atomic_write", a, 8))
	e.expect(bcq) // no receive WQE taken, no receive completion
	// compare_add's bytes in the WQE's (little-endian) order: the word
	// reads as the number given.
	sameBytes(t, remote.Mem()[16:24], []byte{8, 7, 6, 5, 4, 3, 2, 1})
	sameBytes(t, remote.Mem()[:16], before[:16])
	sameBytes(t, remote.Mem()[24:], before[24:])
	// The answer is one RDMA READ RESPONSE ONLY without data: no ACK.
	if cb := e.qpCounters(b); cb.PacketsSent != 1 || cb.AcksSent != 0 || cb.PacketsRecv != 1 {
		t.Fatalf("responder %+v", cb)
	}
	e.healthy(a, b)

	// Unsignaled, then signaled, back to back: the second completion
	// covers both, the word holds the last value, MSNs advance once each.
	e.postSend(a,
		fmt.Sprintf("opcode=atomic_write wr_id=2 remote_addr=56 rkey=%d compare_add=0xffffffffffffffff", remote.RKey),
		fmt.Sprintf("opcode=atomic_write wr_id=3 send_flags=signaled remote_addr=16 rkey=%d compare_add=42", remote.RKey))
	e.expect(acq, sendWC(3, "success", "atomic_write", a, 8))
	if got := binary.LittleEndian.Uint64(remote.Mem()[16:]); got != 42 {
		t.Fatalf("word %#x, want 42", got)
	}
	if got := binary.LittleEndian.Uint64(remote.Mem()[56:]); got != ^uint64(0) {
		t.Fatalf("last word %#x, want all ones", got)
	}
	e.d.mu.Lock()
	msn := b.resp.msn
	e.d.mu.Unlock()
	if msn != 3 {
		t.Fatalf("responder msn %d, want 3", msn)
	}
	e.healthy(a, b)
}

// An ATOMIC WRITE is the flag after a WRITE of the data: posted behind it,
// it lands after it, and both complete.
func TestRCAtomicWriteAfterWrite(t *testing.T) {
	e := newEnv(t)
	a, b, acq, _ := e.pair(qp.TypeRC)
	src := e.mr(8192, 0)
	dst := e.mr(8192, qp.AccessLocalWrite|qp.AccessRemoteWrite)
	fill(src.Mem(), 7)
	e.postSend(a,
		fmt.Sprintf("opcode=rdma_write wr_id=1 send_flags=signaled sge=%d:0:5000 remote_addr=8 rkey=%d", src.LKey, dst.RKey),
		fmt.Sprintf("opcode=atomic_write wr_id=2 send_flags=signaled remote_addr=0 rkey=%d compare_add=1", dst.RKey))
	e.expect(acq, sendWC(1, "success", "rdma_write", a, 5000), sendWC(2, "success", "atomic_write", a, 8))
	sameBytes(t, dst.Mem()[8:5008], src.Mem()[:5000])
	if got := binary.LittleEndian.Uint64(dst.Mem()); got != 1 {
		t.Fatalf("flag %d, want 1", got)
	}
	e.healthy(a, b)
}

// Post-time checks: RC only, an aligned target, the 8 bytes in the WR and
// no SGEs, an initiator slot.
func TestAtomicWritePostChecks(t *testing.T) {
	e := newEnv(t)
	rc, _, _, _ := e.pair(qp.TypeRC)
	uc, _, _, _ := e.pair(qp.TypeUC)
	norq, _, _, _ := e.pairX(qp.TypeRC, "max_rd_atomic=0", "")
	mr := e.mr(64, qp.AccessLocalWrite|qp.AccessRemoteWrite)
	for _, c := range []struct {
		name string
		q    *QP
		wr   string
	}{
		{"UC", uc, "opcode=atomic_write remote_addr=0 rkey=%d"},
		{"Misaligned", rc, "opcode=atomic_write remote_addr=12 rkey=%d"},
		{"SGE", rc, "opcode=atomic_write remote_addr=0 rkey=%[1]d sge=%[1]d:0:8"},
		{"Inline", rc, "opcode=atomic_write remote_addr=0 rkey=%d inline_data=0102030405060708"},
		{"NoMaxRdAtomic", norq, "opcode=atomic_write remote_addr=0 rkey=%d"},
	} {
		if err := e.trySend(c.q, fmt.Sprintf(c.wr, mr.RKey)); Errno(err) != 22 {
			t.Errorf("%s: %v, want EINVAL", c.name, err)
		}
	}
}

func TestRCAtomicWriteRemoteAccessErrors(t *testing.T) {
	for _, c := range []struct {
		name string
		acc  qp.Access // of the target MR
		addr uint64
		key  func(mr *MR) uint32
	}{
		{"BadRKey", rwAccess, 0, func(mr *MR) uint32 { return mr.RKey ^ 1 }},
		{"UnknownKey", rwAccess, 0, func(mr *MR) uint32 { return 0x7fff00 }},
		{"OutOfRange", rwAccess, 64, func(mr *MR) uint32 { return mr.RKey }},
		{"Straddles", rwAccess, 1<<64 - 8, func(mr *MR) uint32 { return mr.RKey }},
		// Remote write is what an ATOMIC WRITE needs (rxe's check_rkey),
		// not remote atomic.
		{"AtomicAccessOnly", qp.AccessLocalWrite | qp.AccessRemoteAtomic | qp.AccessRemoteRead, 0, func(mr *MR) uint32 { return mr.RKey }},
		{"NoRemoteAccess", qp.AccessLocalWrite, 0, func(mr *MR) uint32 { return mr.RKey }},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			a, b, acq, bcq := e.pair(qp.TypeRC)
			target := e.mr(64, c.acc)
			buf := e.mr(64, qp.AccessLocalWrite)
			e.postRecv(b, fmt.Sprintf("wr_id=9 sge=%d:0:64", buf.LKey))
			e.postSend(a,
				fmt.Sprintf("opcode=atomic_write wr_id=1 remote_addr=%d rkey=%d compare_add=0x5555", c.addr, c.key(target)),
				fmt.Sprintf("opcode=send wr_id=2 sge=%d:0:8", buf.LKey))
			e.expect(acq, sendWC(1, "rem_access_err", "atomic_write", a, 0), flushed(a, "send", 2)[0])
			e.expect(bcq, flushed(b, "recv", 9)...)
			e.state(a, qp.StateErr)
			e.state(b, qp.StateErr)
			e.expectEvents(fmt.Sprintf("event=qp_access_err qp=%d", b.QPN))
			for _, x := range target.Mem() {
				if x != 0 {
					t.Fatal("a refused ATOMIC WRITE changed memory")
				}
			}
			if ca, cb := e.qpCounters(a), e.qpCounters(b); ca.RemAccessNaksRecv != 1 || cb.RemAccessNaksSent != 1 {
				t.Fatalf("requester %+v responder %+v", ca, cb)
			}
		})
	}
}

// The QP's own access flags: remote write, as for an RDMA WRITE (rxe's
// check_op_valid); and a responder resource, as for READ and atomics.
func TestRCAtomicWriteInvalidRequest(t *testing.T) {
	for _, c := range []struct{ name, over string }{
		{"NoRemoteWriteOnQP", "qp_access_flags=local_write,remote_read,remote_atomic"},
		{"NoResponderResources", "max_dest_rd_atomic=0"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			a, b, acq, bcq := e.pairX(qp.TypeRC, "", c.over)
			remote := e.mr(64, rwAccess)
			e.postSend(a, fmt.Sprintf("opcode=atomic_write wr_id=1 remote_addr=0 rkey=%d compare_add=7", remote.RKey))
			e.expect(acq, sendWC(1, "rem_inv_req_err", "atomic_write", a, 0))
			e.expect(bcq)
			e.state(a, qp.StateErr)
			e.state(b, qp.StateErr)
			e.expectEvents(fmt.Sprintf("event=qp_req_err qp=%d", b.QPN))
			if binary.LittleEndian.Uint64(remote.Mem()) != 0 {
				t.Fatal("a refused ATOMIC WRITE changed memory")
			}
		})
	}
}

// remote_addr is aligned in the MR's iova space (post checks that), but
// the MR's iova is 3 bytes off its memory: the store could not be one
// aligned word, so the responder refuses it.
func TestRCMisalignedAtomicWrite(t *testing.T) {
	e := newEnv(t)
	a, b, acq, bcq := e.pair(qp.TypeRC)
	remote, err := e.d.RegMR(0, qp.CreateMR{PD: e.pd.Handle, Length: 64, IOVA: 3, HasIOVA: true, Access: rwAccess})
	if err != nil {
		t.Fatal(err)
	}
	e.postSend(a, fmt.Sprintf("opcode=atomic_write wr_id=1 send_flags=signaled remote_addr=8 rkey=%d compare_add=1", remote.RKey))
	e.expect(acq, sendWC(1, "rem_inv_req_err", "atomic_write", a, 0))
	e.expect(bcq)
	e.state(a, qp.StateErr)
	e.state(b, qp.StateErr)
	e.expectEvents(fmt.Sprintf("event=qp_req_err qp=%d", b.QPN))
	for _, x := range remote.Mem() {
		if x != 0 {
			t.Fatal("misaligned ATOMIC WRITE changed memory")
		}
	}
}

// A request the responder checks itself, whatever the requester sent: a
// RETH length other than 8, or a payload other than 8 bytes.
func TestRCAtomicWriteMalformed(t *testing.T) {
	for _, c := range []struct {
		name string
		mod  func(p *packet)
	}{
		{"DMALen16", func(p *packet) { p.DMALen = 16 }},
		{"Payload4", func(p *packet) { p.Payload = p.Payload[:4] }},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			a, b, acq, _ := e.pair(qp.TypeRC)
			remote := e.mr(64, rwAccess)
			e.link(func(p *packet) linkAction {
				if p.Opcode&roce.OpMask == roce.OpAtomicWrite {
					c.mod(p)
				}
				return deliver
			})
			e.postSend(a, fmt.Sprintf("opcode=atomic_write wr_id=1 remote_addr=0 rkey=%d compare_add=7", remote.RKey))
			e.expect(acq, sendWC(1, "rem_inv_req_err", "atomic_write", a, 0))
			e.state(b, qp.StateErr)
			if binary.LittleEndian.Uint64(remote.Mem()) != 0 {
				t.Fatal("a malformed ATOMIC WRITE changed memory")
			}
		})
	}
}

// The answer is lost: the requester sends the ATOMIC WRITE again, and the
// responder answers the duplicate from its resource without storing again,
// so a value written since (here by the responder's own program) stays.
func TestRCLostAtomicWriteResponseNotExecutedTwice(t *testing.T) {
	e := newEnv(t)
	a, b, acq, bcq := e.pair(qp.TypeRC)
	remote := e.mr(64, rwAccess)
	e.link(once(1, isOp(roce.OpReadResponseOnly), drop))
	e.postSend(a, fmt.Sprintf("opcode=atomic_write wr_id=1 send_flags=signaled remote_addr=8 rkey=%d compare_add=0x1111", remote.RKey))
	e.expect(acq)
	if got := binary.LittleEndian.Uint64(remote.Mem()[8:]); got != 0x1111 {
		t.Fatalf("word %#x after the first execution, want 0x1111", got)
	}
	binary.LittleEndian.PutUint64(remote.Mem()[8:], 0x2222)
	e.clk.Advance(qp.AckTimeout(14))
	e.expect(acq, sendWC(1, "success", "atomic_write", a, 8))
	e.expect(bcq)
	if got := binary.LittleEndian.Uint64(remote.Mem()[8:]); got != 0x2222 {
		t.Fatalf("word %#x, want 0x2222: the duplicate was executed again", got)
	}
	ca, cb := e.qpCounters(a), e.qpCounters(b)
	if ca.RetryTimeouts != 1 || ca.Retransmits != 1 || cb.DuplicateReqs != 1 || cb.PacketsSent != 2 {
		t.Fatalf("requester %+v responder %+v", ca, cb)
	}
	e.healthy(a, b)
}

// With one responder resource, a READ behind the ATOMIC WRITE takes it
// over. The ATOMIC WRITE's answer is lost, so the requester drops the
// READ's (out of order) and sends both again: the duplicate ATOMIC WRITE,
// whose resource is gone, is acknowledged like a duplicate WRITE (not
// stored again), and the READ is answered from its resource.
func TestRCAtomicWriteDuplicateAfterResourceReused(t *testing.T) {
	e := newEnv(t)
	a, b, acq, bcq := e.pairX(qp.TypeRC, "", "max_dest_rd_atomic=1")
	local := e.mr(64, qp.AccessLocalWrite)
	remote := e.mr(64, rwAccess)
	fill(remote.Mem()[32:], 9)
	e.link(once(1, isOp(roce.OpReadResponseOnly), drop))
	e.postSend(a,
		fmt.Sprintf("opcode=atomic_write wr_id=1 send_flags=signaled remote_addr=0 rkey=%d compare_add=0xaaaa", remote.RKey),
		fmt.Sprintf("opcode=rdma_read wr_id=2 send_flags=signaled sge=%d:0:16 remote_addr=32 rkey=%d", local.LKey, remote.RKey))
	e.expect(acq)
	binary.LittleEndian.PutUint64(remote.Mem(), 0xbbbb)
	e.clk.Advance(qp.AckTimeout(14))
	e.expect(acq, sendWC(1, "success", "atomic_write", a, 8), sendWC(2, "success", "rdma_read", a, 16))
	e.expect(bcq)
	sameBytes(t, local.Mem()[:16], remote.Mem()[32:48])
	if got := binary.LittleEndian.Uint64(remote.Mem()); got != 0xbbbb {
		t.Fatalf("word %#x, want 0xbbbb: the duplicate was executed again", got)
	}
	if cb := e.qpCounters(b); cb.DuplicateReqs != 2 {
		t.Fatalf("responder %+v", cb)
	}
	e.healthy(a, b)
}

// A plain ACK that covers an ATOMIC WRITE's PSN completes it: the answer
// carries no data, so a later acknowledgement may stand for it (rxe's
// requester does the same).
func TestRCAtomicWriteCompletedByLaterAck(t *testing.T) {
	e := newEnv(t)
	a, b, acq, bcq := e.pair(qp.TypeRC)
	src := e.mr(64, 0)
	remote := e.mr(64, rwAccess)
	e.link(once(1, isOp(roce.OpReadResponseOnly), drop))
	e.postSend(a,
		fmt.Sprintf("opcode=atomic_write wr_id=1 send_flags=signaled remote_addr=0 rkey=%d compare_add=5", remote.RKey),
		fmt.Sprintf("opcode=rdma_write wr_id=2 send_flags=signaled sge=%d:0:8 remote_addr=8 rkey=%d", src.LKey, remote.RKey))
	e.expect(acq, sendWC(1, "success", "atomic_write", a, 8), sendWC(2, "success", "rdma_write", a, 8))
	e.expect(bcq)
	if ca := e.qpCounters(a); ca.Retransmits != 0 {
		t.Fatalf("requester %+v", ca)
	}
	e.healthy(a, b)
}

// A reader polling the word through its own mapping while ATOMIC WRITEs
// alternate two values sees one or the other, never a mix of the two.
func TestRCAtomicWriteNotTorn(t *testing.T) {
	e := newEnv(t)
	a, b, acq, _ := e.pair(qp.TypeRC)
	remote := e.mr(64, rwAccess)
	const x, y = uint64(0x0123456789abcdef), ^uint64(0x0123456789abcdef)
	w := word(remote.Mem()[24:32])
	atomic.StoreUint64(w, x)
	var stop atomic.Bool
	var wg sync.WaitGroup
	var reads, bad atomic.Uint64
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			if v := atomic.LoadUint64(w); v != x && v != y {
				bad.Store(v)
			}
			reads.Add(1)
		}
	}()
	const n = 400
	for i := 0; i < n; i++ {
		v := x
		if i%2 == 0 {
			v = y
		}
		flags := ""
		if i%50 == 49 {
			flags = "send_flags=signaled "
		}
		e.postSend(a, fmt.Sprintf("opcode=atomic_write wr_id=%d %sremote_addr=24 rkey=%d compare_add=%d", i, flags, remote.RKey, v))
		if i%50 == 49 {
			e.expect(acq, sendWC(uint64(i), "success", "atomic_write", a, 8))
		}
	}
	for reads.Load() < 1000 {
		time.Sleep(time.Millisecond)
	}
	stop.Store(true)
	wg.Wait()
	if v := bad.Load(); v != 0 {
		t.Fatalf("reader saw %#x, neither %#x nor %#x", v, x, y)
	}
	if got := atomic.LoadUint64(w); got != x {
		t.Fatalf("word %#x after %d writes, want %#x", got, n, x)
	}
	e.healthy(a, b)
}
