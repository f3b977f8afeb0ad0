package device

import (
	"encoding/binary"
	"fmt"
	"syscall"
	"testing"

	"rdmafs/qp"
	"rdmafs/ring"
	"rdmafs/roce"
)

// postRaw writes a WR into the SQ ring as a client would, without ringing
// the doorbell.
func (e *env) postRaw(q *QP, line string) {
	e.t.Helper()
	wr, err := qp.ParseSendWR(line)
	if err != nil {
		e.t.Fatal(err)
	}
	p := ring.NewProducer(q.sq)
	if err := ring.EncodeSendWQE(p.Next(), &wr); err != nil {
		e.t.Fatal(err)
	}
	p.Advance()
	p.Publish()
}

// A UC send completes when its last packet is out, before the receiver
// has copied the data; the sender may reuse its buffer right away.
func TestUCSendBufferReusableAtCompletion(t *testing.T) {
	e := newEnv(t)
	a, b, acq, bcq := e.pair(qp.TypeUC)
	src, dst := e.mr(8192, 0), e.mr(8192, qp.AccessLocalWrite)
	fill(src.Mem(), 10)
	want := append([]byte(nil), src.Mem()[:3000]...)
	e.postRecv(b, fmt.Sprintf("wr_id=9 sge=%d:0:8192", dst.LKey))
	e.quiesce()
	e.postRaw(a, fmt.Sprintf("opcode=send wr_id=1 send_flags=signaled sge=%d:0:3000", src.LKey))
	e.d.mu.Lock()
	a.runLocked() // the requester alone: b has not run yet
	e.d.mu.Unlock()
	wcs, err := acq.Poll(10)
	if err != nil || len(wcs) != 1 || wcs[0].Status != qp.WCSuccess {
		t.Fatalf("send not complete: %v %v", wcs, err)
	}
	clear(src.Mem()) // the client reuses its buffer
	e.expect(bcq, recvWC(9, "success", "recv", b, 3000, a, ""))
	sameBytes(t, dst.Mem()[:3000], want)
}

func TestRCQPConnectedToItself(t *testing.T) {
	e := newEnv(t)
	cq := e.cq(64)
	q := e.qp(qpOpts{scq: cq, rcq: cq})
	e.connect(q, q.QPN, "")
	src, dst := e.mr(8192, rwAccess), e.mr(8192, rwAccess)
	fill(src.Mem(), 12)
	e.postRecv(q, fmt.Sprintf("wr_id=9 sge=%d:0:8192", dst.LKey))
	e.postSend(q,
		fmt.Sprintf("opcode=send wr_id=1 send_flags=signaled sge=%d:0:3000", src.LKey),
		fmt.Sprintf("opcode=rdma_read wr_id=2 send_flags=signaled sge=%d:4000:3000 remote_addr=0 rkey=%d", dst.LKey, src.RKey))
	e.expect(cq, recvWC(9, "success", "recv", q, 3000, q, ""), sendWC(1, "success", "send", q, 3000), sendWC(2, "success", "rdma_read", q, 3000))
	sameBytes(t, dst.Mem()[:3000], src.Mem()[:3000])
	sameBytes(t, dst.Mem()[4000:7000], src.Mem()[:3000])
	e.healthy(q)
}

func TestRCInitiatorDepthAndFence(t *testing.T) {
	e := newEnv(t)
	a, b, acq, _ := e.pairX(qp.TypeRC, "max_rd_atomic=1", "")
	local, remote := e.mr(8192, qp.AccessLocalWrite), e.mr(8192, rwAccess)
	fill(remote.Mem(), 13)
	var reads int
	l := e.link(func(p *packet) linkAction {
		if p.Opcode&roce.OpMask == roce.OpReadRequest {
			reads++
		}
		if p.Opcode&roce.OpMask == roce.OpReadResponseOnly {
			return hold
		}
		return deliver
	})
	e.postSend(a,
		fmt.Sprintf("opcode=rdma_read wr_id=1 send_flags=signaled sge=%d:0:100 remote_addr=0 rkey=%d", local.LKey, remote.RKey),
		fmt.Sprintf("opcode=rdma_read wr_id=2 send_flags=signaled sge=%d:100:100 remote_addr=100 rkey=%d", local.LKey, remote.RKey))
	e.quiesce()
	if reads != 1 {
		t.Fatalf("%d reads in flight with max_rd_atomic=1", reads)
	}
	e.release(l, -1)
	e.quiesce()
	if reads != 2 {
		t.Fatalf("second read not started after the first completed (%d)", reads)
	}
	e.release(l, -1)
	e.expect(acq, sendWC(1, "success", "rdma_read", a, 100), sendWC(2, "success", "rdma_read", a, 100))

	// A fenced WQE waits for earlier READs; an unfenced SEND does not.
	e.healthy(a, b)
	a, b, acq, _ = e.pair(qp.TypeRC)
	buf := e.mr(64, qp.AccessLocalWrite)
	e.postRecv(b, fmt.Sprintf("wr_id=9 sge=%d:0:64", buf.LKey), fmt.Sprintf("wr_id=10 sge=%d:0:64", buf.LKey))
	var sends int
	l.filter = func(p *packet) linkAction {
		if p.Opcode&roce.OpMask == roce.OpSendOnly {
			sends++
		}
		if p.Opcode&roce.OpMask == roce.OpReadResponseOnly {
			return hold
		}
		return deliver
	}
	e.postSend(a,
		fmt.Sprintf("opcode=rdma_read wr_id=3 send_flags=signaled sge=%d:0:100 remote_addr=0 rkey=%d", local.LKey, remote.RKey),
		"opcode=send wr_id=4 send_flags=signaled",
		"opcode=send wr_id=5 send_flags=signaled,fence")
	e.quiesce()
	if sends != 1 {
		t.Fatalf("%d sends out while a READ is outstanding; want only the unfenced one", sends)
	}
	e.release(l, -1)
	e.expect(acq, sendWC(3, "success", "rdma_read", a, 100), sendWC(4, "success", "send", a, 0), sendWC(5, "success", "send", a, 0))
	if sends != 2 {
		t.Fatalf("fenced send never went (%d)", sends)
	}
	e.healthy(a, b)
}

// LOCAL_INV waits for every earlier WQE: a READ into the MR it
// invalidates finishes first.
func TestRCLocalInvWaitsForEarlierWork(t *testing.T) {
	e := newEnv(t)
	a, b, acq, _ := e.pair(qp.TypeRC)
	local, remote := e.mr(8192, qp.AccessLocalWrite), e.mr(8192, rwAccess)
	fill(remote.Mem(), 14)
	l := e.link(func(p *packet) linkAction {
		if p.Opcode&roce.OpMask == roce.OpReadResponseOnly {
			return hold
		}
		return deliver
	})
	e.postSend(a,
		fmt.Sprintf("opcode=rdma_read wr_id=1 send_flags=signaled sge=%d:0:100 remote_addr=0 rkey=%d", local.LKey, remote.RKey),
		fmt.Sprintf("opcode=local_inv wr_id=2 send_flags=signaled invalidate_rkey=%d", local.LKey))
	e.quiesce()
	if !local.Valid() {
		t.Fatal("local_inv ran before the READ into that MR completed")
	}
	e.release(l, -1)
	e.expect(acq, sendWC(1, "success", "rdma_read", a, 100), sendWC(2, "success", "local_inv", a, 0))
	sameBytes(t, local.Mem()[:100], remote.Mem()[:100])
	if local.Valid() {
		t.Fatal("not invalidated")
	}
	e.healthy(a, b)
}

// Deregistering the source MR of packets still queued at the receiver
// must not let the receiver read freed memory: the packets keep a copy.
func TestMRDeregWithPacketsInFlight(t *testing.T) {
	if *wireFlag {
		t.Skip("about packets queued inside the device, which the wire never queues")
	}
	e := newEnv(t)
	a, b, acq, bcq := e.pair(qp.TypeRC)
	// Past 64 KiB, so that the SEND goes as packets (executeDirectLocked
	// takes smaller ones without any).
	const size = 70000
	src, dst := e.mr(1<<17, 0), e.mr(1<<17, qp.AccessLocalWrite)
	fill(src.Mem(), 15)
	want := append([]byte(nil), src.Mem()[:size]...)
	e.postRecv(b, fmt.Sprintf("wr_id=9 sge=%d:0:%d", dst.LKey, 1<<17))
	e.quiesce()
	e.postRaw(a, fmt.Sprintf("opcode=send wr_id=1 send_flags=signaled sge=%d:0:%d", src.LKey, size))
	e.d.mu.Lock()
	a.runLocked()                              // packets aliasing src now wait in b's queue
	queued := len(b.resp.reqIn) + b.inboxLen() // b's inbox when on another engine
	e.d.mu.Unlock()
	// 69 MTU-sized packets, or on the direct path a 64 KiB segment and
	// the rest.
	wantQueued := 2
	if *packetsFlag {
		wantQueued = 69
	}
	if queued != wantQueued {
		t.Fatalf("%d packets queued, want %d", queued, wantQueued)
	}
	if err := src.Dereg(); err != nil {
		t.Fatal(err)
	}
	e.expect(bcq, recvWC(9, "success", "recv", b, size, a, ""))
	e.expect(acq, sendWC(1, "success", "send", a, size))
	sameBytes(t, dst.Mem()[:size], want)
}

func TestSendWithInvOfType2MW(t *testing.T) {
	e := newEnv(t)
	a, b, acq, bcq := e.pair(qp.TypeRC)
	c, _, ccq, _ := e.pair(qp.TypeRC)
	mr := e.mr(4096, qp.AccessLocalWrite|qp.AccessMWBind)
	buf := e.mr(4096, qp.AccessLocalWrite)
	mw := e.mw(2)
	// Bound through c: a SEND_WITH_INV arriving at b may not invalidate it.
	e.postSend(c, fmt.Sprintf("opcode=bind_mw wr_id=1 send_flags=signaled rkey=5 mw=%d bind_lkey=%d bind_addr=0 bind_length=64 bind_access=remote_read", mw.Handle, mr.LKey))
	e.expect(ccq, sendWC(1, "success", "bind_mw", c, 0))
	rkey := mw.Attr().RKey
	e.postRecv(b, fmt.Sprintf("wr_id=9 sge=%d:0:64", buf.LKey))
	e.postSend(a, fmt.Sprintf("opcode=send_with_inv wr_id=2 invalidate_rkey=%d", rkey))
	e.expect(acq, sendWC(2, "rem_inv_req_err", "send", a, 0))
	e.expect(bcq, recvWC(9, "rem_inv_req_err", "recv", b, 0, nil, ""))
	if !mw.Attr().Bound {
		t.Fatal("window bound through another QP was invalidated")
	}
	e.expectEvents(fmt.Sprintf("event=qp_req_err qp=%d", b.QPN))

	// Bound through b itself: invalidated, and its rkey then fails.
	e2 := newEnv(t)
	a2, b2, acq2, bcq2 := e2.pair(qp.TypeRC)
	mr2 := e2.mr(4096, qp.AccessLocalWrite|qp.AccessMWBind)
	buf2 := e2.mr(4096, qp.AccessLocalWrite)
	mw2 := e2.mw(2)
	e2.postSend(b2, fmt.Sprintf("opcode=bind_mw wr_id=1 send_flags=signaled rkey=5 mw=%d bind_lkey=%d bind_addr=0 bind_length=64 bind_access=remote_read", mw2.Handle, mr2.LKey))
	e2.expect(bcq2, sendWC(1, "success", "bind_mw", b2, 0))
	rkey2 := mw2.Attr().RKey
	e2.postRecv(b2, fmt.Sprintf("wr_id=9 sge=%d:0:64", buf2.LKey))
	e2.postSend(a2, fmt.Sprintf("opcode=send_with_inv wr_id=2 send_flags=signaled invalidate_rkey=%d", rkey2))
	e2.expect(acq2, sendWC(2, "success", "send", a2, 0))
	e2.expect(bcq2, fmt.Sprintf("wr_id=9 status=success opcode=recv qp_num=%d byte_len=0 invalidate_rkey=%d src_qp=%d wc_flags=with_inv", b2.QPN, rkey2, a2.QPN))
	if mw2.Attr().Bound {
		t.Fatal("window still bound")
	}
	e2.postSend(a2, fmt.Sprintf("opcode=rdma_read wr_id=3 sge=%d:0:8 remote_addr=0 rkey=%d", buf2.LKey, rkey2))
	e2.expect(acq2, sendWC(3, "rem_access_err", "rdma_read", a2, 0))
}

// A malformed WQE written straight into the ring (an opcode rdmafs does
// not know) completes with an error and ends the QP; nothing is sent.
func TestMalformedRingWQE(t *testing.T) {
	e := newEnv(t)
	a, b, acq, _ := e.pair(qp.TypeRC)
	p := ring.NewProducer(a.sq)
	slot := p.Next()
	if err := ring.EncodeSendWQE(slot, &qp.SendWR{WRID: 7, Opcode: qp.WRSend, SendFlags: qp.SendSignaled}); err != nil {
		t.Fatal(err)
	}
	slot[ring.SendOffOpcode] = 200
	p.Advance()
	slot = p.Next()
	if err := ring.EncodeSendWQE(slot, &qp.SendWR{WRID: 8, Opcode: qp.WRSend}); err != nil {
		t.Fatal(err)
	}
	slot[ring.SendOffNumSGE] = 255 // SGEs past the slot
	p.Advance()
	p.Publish()
	a.Kick()
	e.expect(acq, "wr_id=7 status=loc_qp_op_err opcode=send qp_num="+itoa(a.QPN)+" byte_len=0", flushed(a, "send", 8)[0])
	e.state(a, qp.StateErr)
	e.state(b, qp.StateRTS)
	if c := e.qpCounters(a); c.PacketsSent != 0 {
		t.Fatal("packets sent")
	}
	_ = binary.LittleEndian
}

// PSNs are 24 bits: messages, READ reservations and ACKs across the wrap.
func TestRCPSNWrap(t *testing.T) {
	e := newEnv(t)
	over := "sq_psn=0xfffffd rq_psn=0xfffffd path_mtu=256"
	a, b, acq, bcq := e.pairX(qp.TypeRC, over, over)
	src := e.mr(8192, qp.AccessLocalWrite|qp.AccessRemoteRead)
	dst := e.mr(8192, rwAccess)
	fill(src.Mem(), 17)
	e.postRecv(b, fmt.Sprintf("wr_id=9 sge=%d:0:8192", dst.LKey))
	e.postSend(a,
		fmt.Sprintf("opcode=send wr_id=1 send_flags=signaled sge=%d:0:1000", src.LKey),                                         // 4 PSNs: fffffd..0
		fmt.Sprintf("opcode=rdma_read wr_id=2 send_flags=signaled sge=%d:4096:1500 remote_addr=0 rkey=%d", src.LKey, dst.RKey), // 6: 1..6
		fmt.Sprintf("opcode=rdma_write wr_id=3 send_flags=signaled sge=%d:0:700 remote_addr=2000 rkey=%d", src.LKey, dst.RKey))
	e.expect(acq, sendWC(1, "success", "send", a, 1000), sendWC(2, "success", "rdma_read", a, 1500), sendWC(3, "success", "rdma_write", a, 700))
	e.expect(bcq, recvWC(9, "success", "recv", b, 1000, a, ""))
	sameBytes(t, src.Mem()[4096:4096+1500], dst.Mem()[:1500])
	sameBytes(t, dst.Mem()[2000:2700], src.Mem()[:700])
	e.d.mu.Lock()
	psn, epsn := a.req.psn, b.resp.psn
	e.d.mu.Unlock()
	if psn != 10 || epsn != 10 {
		t.Fatalf("psn %#x epsn %#x after the wrap, want 10", psn, epsn)
	}
	e.healthy(a, b)
}

func TestSQSigAll(t *testing.T) {
	e := newEnv(t)
	acq, bcq := e.cq(16), e.cq(16)
	a := e.qp(qpOpts{scq: acq, rcq: acq, sigAll: true})
	b := e.qp(qpOpts{scq: bcq, rcq: bcq})
	e.connect(a, b.QPN, "")
	e.connect(b, a.QPN, "")
	e.postRecv(b, "wr_id=9")
	e.postSend(a, "opcode=send wr_id=1", fmt.Sprintf("opcode=rdma_write wr_id=2 remote_addr=0 rkey=%d", 0))
	e.expect(acq, sendWC(1, "success", "send", a, 0), sendWC(2, "success", "rdma_write", a, 0))
	e.expect(bcq, recvWC(9, "success", "recv", b, 0, a, ""))
}

// Indices a client corrupted end the QP with qp_fatal, never a panic.
func TestCorruptSQRing(t *testing.T) {
	e := newEnv(t)
	a, b, acq, _ := e.pair(qp.TypeRC)
	a.sq.StoreProducer(a.sq.LoadConsumer() + a.sq.SlotCount() + 5)
	a.Kick()
	e.state(a, qp.StateErr)
	e.expectEvents(fmt.Sprintf("event=qp_fatal qp=%d", a.QPN))
	e.expect(acq)
	e.state(b, qp.StateRTS)
}

func TestCorruptRQRing(t *testing.T) {
	e := newEnv(t)
	a, b, acq, bcq := e.pair(qp.TypeRC)
	b.rq.StoreProducer(b.rq.LoadConsumer() + b.rq.SlotCount() + 1)
	e.postSend(a, "opcode=send wr_id=1")
	e.expect(acq, sendWC(1, "rem_op_err", "send", a, 0))
	e.expect(bcq)
	e.state(a, qp.StateErr)
	e.state(b, qp.StateErr)
	e.expectEvents(fmt.Sprintf("event=qp_req_err qp=%d", b.QPN))
}

func TestQueueFull(t *testing.T) {
	e := newEnv(t)
	acq, bcq := e.cq(256), e.cq(256)
	caps := qp.Cap{MaxSendWR: 8, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}
	a := e.qp(qpOpts{scq: acq, rcq: acq, cap: caps})
	b := e.qp(qpOpts{scq: bcq, rcq: bcq, cap: caps})
	e.connect(a, b.QPN, "")
	e.connect(b, a.QPN, "")
	if a.Cap.MaxSendWR != 8 || a.Cap.MaxRecvWR != 4 {
		t.Fatalf("caps %+v", a.Cap)
	}
	// b has no receive WQE: the sends stay in the SQ.
	wrs := make([]qp.SendWR, 10)
	for i := range wrs {
		wrs[i] = qp.SendWR{WRID: uint64(i), Opcode: qp.WRSend, SendFlags: qp.SendSignaled}
	}
	n, err := a.PostSend(wrs)
	if n != 8 || Errno(err) != 12 {
		t.Fatalf("posted %d: %v, want 8 and ENOMEM", n, err)
	}
	rwrs := make([]qp.RecvWR, 6)
	for i := range rwrs {
		rwrs[i].WRID = uint64(100 + i)
	}
	n, err = b.PostRecv(rwrs)
	if n != 4 || Errno(err) != 12 {
		t.Fatalf("posted %d receives: %v, want 4 and ENOMEM", n, err)
	}
	e.clk.Advance(qp.RNRDelay(12))
	var want []string
	for i := 0; i < 4; i++ {
		want = append(want, sendWC(uint64(i), "success", "send", a, 0))
	}
	e.expect(acq, want...)
	// Room again, in both queues.
	if _, err := b.PostRecv(rwrs[:4]); err != nil {
		t.Fatal(err)
	}
	if _, err := a.PostSend(wrs[8:]); err != nil {
		t.Fatal(err)
	}
	e.clk.Advance(qp.RNRDelay(12))
	want = nil
	for i := 4; i < 8; i++ {
		want = append(want, sendWC(uint64(i), "success", "send", a, 0))
	}
	e.expect(acq, want...)
	e.postRecv(b, "wr_id=200", "wr_id=201")
	e.clk.Advance(qp.RNRDelay(12))
	e.expect(acq, sendWC(8, "success", "send", a, 0), sendWC(9, "success", "send", a, 0))
	if got := len(e.poll(bcq)); got != 10 {
		t.Fatalf("%d receive completions, want 10", got)
	}
	e.healthy(a, b)
}

// Deregistering an MR that an outstanding WQE still names fails that WQE
// with a local protection error when it next needs the memory.
func TestMRDeregUnderOutstandingWQE(t *testing.T) {
	e := newEnv(t)
	a, b, acq, bcq := e.pair(qp.TypeRC)
	src, dst := e.mr(4096, 0), e.mr(4096, qp.AccessLocalWrite)
	e.postSend(a, fmt.Sprintf("opcode=send wr_id=1 sge=%d:0:100", src.LKey), "opcode=send wr_id=2")
	e.quiesce() // RNR: waiting to retransmit
	if err := src.Dereg(); err != nil {
		t.Fatal(err)
	}
	e.postRecv(b, fmt.Sprintf("wr_id=9 sge=%d:0:4096", dst.LKey))
	e.clk.Advance(qp.RNRDelay(12))
	e.expect(acq, sendWC(1, "loc_prot_err", "send", a, 0), flushed(a, "send", 2)[0])
	e.expect(bcq)
	e.state(a, qp.StateErr)
	e.state(b, qp.StateRTS)
}

// TestSharedMRBacking: MRs registered with share=H use H's memory at an
// offset (the C library's re-backed buffers); a WRITE through one is seen
// through the other and through the backing, the memory outlives the MR it
// came from until the last MR on it goes, and the device's byte total
// counts it once.
func TestSharedMRBacking(t *testing.T) {
	e := newEnv(t)
	a, _, acq, _ := e.pair(qp.TypeRC)
	base := e.mr(8192, qp.AccessLocalWrite)
	pd := base.PD.Handle
	share, err := e.d.RegMR(0, qp.CreateMR{PD: pd, Length: 100, IOVA: 0x1010, HasIOVA: true,
		Access: qp.AccessLocalWrite | qp.AccessRemoteWrite, Share: base.Handle, Offset: 0x10})
	if err != nil {
		t.Fatal(err)
	}
	e.d.mu.Lock()
	got := e.d.mrBytes
	e.d.mu.Unlock()
	if got != 8192 {
		t.Fatalf("mrBytes %d after a shared registration, want 8192", got)
	}
	src := e.mr(64, 0)
	fill(src.Mem(), 3)
	e.postSend(a, fmt.Sprintf("opcode=rdma_write wr_id=1 send_flags=signaled sge=%d:0:64 remote_addr=%d rkey=%d", src.LKey, 0x1010+4, share.RKey))
	e.expect(acq, sendWC(1, "success", "rdma_write", a, 64))
	sameBytes(t, base.Mem()[0x14:0x14+64], src.Mem())
	// Beyond the shared MR's 100 bytes (still inside the backing): refused.
	e.postSend(a, fmt.Sprintf("opcode=rdma_write wr_id=2 send_flags=signaled sge=%d:0:64 remote_addr=%d rkey=%d", src.LKey, 0x1010+64, share.RKey))
	e.expect(acq, sendWC(2, "rem_access_err", "rdma_write", a, 0))
	if err := base.Dereg(); err != nil {
		t.Fatal(err)
	}
	if got := share.Mem()[4]; got != src.Mem()[0] {
		t.Fatalf("shared bytes changed after the base MR went: %d", got)
	}
	if err := share.Dereg(); err != nil {
		t.Fatal(err)
	}
	e.d.mu.Lock()
	got = e.d.mrBytes
	e.d.mu.Unlock()
	if got != 64 {
		t.Fatalf("mrBytes %d after both went, want 64 (src)", got)
	}
	if z, err := e.d.RegMR(0, qp.CreateMR{PD: pd, Length: 0, Share: src.Handle}); err != nil || len(z.Mem()) != 0 {
		t.Fatalf("zero-length shared MR: %v", err)
	}
	for _, bad := range []qp.CreateMR{
		{PD: pd, Length: 0},
		{PD: pd, Length: 10, Share: 999},
		{PD: pd, Length: 10, Offset: 4},
		{PD: pd, Length: 100, Share: src.Handle, Offset: 1},
	} {
		if _, err := e.d.RegMR(0, bad); Errno(err) != syscall.EINVAL {
			t.Errorf("RegMR(%+v) = %v, want EINVAL", bad, err)
		}
	}
}

// TestReregMR: rereg changes the access, the PD and the memory of an MR and
// keeps its keys, so the peer's rkey reaches the new state; nothing changes
// on a refused rereg.
func TestReregMR(t *testing.T) {
	e := newEnv(t)
	a, _, acq, _ := e.pair(qp.TypeRC)
	src := e.mr(64, 0)
	fill(src.Mem(), 9)
	dst := e.mr(4096, qp.AccessLocalWrite)
	lkey, rkey := dst.LKey, dst.RKey
	write := func(wrid uint64, status string, n int) {
		t.Helper()
		e.postSend(a, fmt.Sprintf("opcode=rdma_write wr_id=%d send_flags=signaled sge=%d:0:64 remote_addr=0 rkey=%d", wrid, src.LKey, rkey))
		e.expect(acq, sendWC(wrid, status, "rdma_write", a, n))
	}
	if err := dst.Rereg(0, qp.ReregMR{Access: qp.AccessLocalWrite | qp.AccessRemoteWrite, HasAccess: true}); err != nil {
		t.Fatal(err)
	}
	write(1, "success", 64)
	sameBytes(t, dst.Mem()[:64], src.Mem())
	if dst.LKey != lkey || dst.RKey != rkey {
		t.Fatalf("keys changed: %#x/%#x, were %#x/%#x", dst.LKey, dst.RKey, lkey, rkey)
	}
	// A new translation: another MR's memory at an offset.
	base := e.mr(8192, qp.AccessLocalWrite)
	if err := dst.Rereg(0, qp.ReregMR{HasTranslation: true, Share: base.Handle, Offset: 100, Length: 64}); err != nil {
		t.Fatal(err)
	}
	fill(src.Mem(), 5)
	write(2, "success", 64)
	sameBytes(t, base.Mem()[100:164], src.Mem())
	// Refused: remote write without local write; the MR keeps working.
	if err := dst.Rereg(0, qp.ReregMR{Access: qp.AccessRemoteWrite, HasAccess: true}); Errno(err) != syscall.EINVAL {
		t.Fatalf("rereg to remote_write alone: %v, want EINVAL", err)
	}
	write(3, "success", 64)
	// Another PD: the QP's PD no longer owns the rkey.
	pd2, err := e.d.AllocPD(0)
	if err != nil {
		t.Fatal(err)
	}
	if err := dst.Rereg(0, qp.ReregMR{PD: pd2.Handle}); err != nil {
		t.Fatal(err)
	}
	write(4, "rem_access_err", 0)
	if err := base.Dereg(); err != nil {
		t.Fatal(err)
	}
	if err := dst.Dereg(); err != nil {
		t.Fatal(err)
	}
	if err := pd2.Dealloc(); err != nil {
		t.Fatalf("pd2 still used after the MR went: %v", err)
	}
}

func TestNpkts(t *testing.T) {
	for _, c := range []struct {
		n    uint64
		mtu  int
		want uint32
	}{
		{0, 256, 1}, {1, 256, 1}, {256, 256, 1}, {257, 256, 2}, {768, 256, 3}, {769, 256, 4},
		{65536, 4096, 16}, {1 << 31, 1024, 1 << 21},
	} {
		if got := npkts(c.n, c.mtu); got != c.want {
			t.Errorf("npkts(%d, %d) = %d, want %d", c.n, c.mtu, got, c.want)
		}
	}
}
