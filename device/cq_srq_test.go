package device

import (
	"context"
	"fmt"
	"testing"
	"time"

	"rdmafs/qp"
)

func TestCQOverflow(t *testing.T) {
	e := newEnv(t)
	small, bcq := e.cq(4), e.cq(64)
	if small.CQE != 4 {
		t.Fatalf("cqe %d, want 4", small.CQE)
	}
	a := e.qp(qpOpts{scq: small, rcq: small})
	b := e.qp(qpOpts{scq: bcq, rcq: bcq})
	e.connect(a, b.QPN, "")
	e.connect(b, a.QPN, "")
	buf := e.mr(64, qp.AccessLocalWrite)
	for i := 0; i < 8; i++ {
		e.postRecv(b, fmt.Sprintf("wr_id=%d sge=%d:0:64", 100+i, buf.LKey))
	}
	for i := 1; i <= 6; i++ {
		e.postSend(a, fmt.Sprintf("opcode=send wr_id=%d send_flags=signaled", i))
	}
	e.quiesce()
	// The fifth completion does not fit: cq_err (once), and a goes to ERR.
	e.state(a, qp.StateErr)
	e.expectEvents(fmt.Sprintf("event=cq_err cq=%d", small.Handle))
	if !small.Overflowed() {
		t.Fatal("not marked overflowed")
	}
	e.expect(small, sendWC(1, "success", "send", a, 0), sendWC(2, "success", "send", a, 0),
		sendWC(3, "success", "send", a, 0), sendWC(4, "success", "send", a, 0))
	// Overflow is sticky until a resize: the room just made is not used.
	e.postSend(a, "opcode=send wr_id=7")
	e.expect(small)
	e.expectEvents()
	if n := e.d.Counters.CQOverflows.Load(); n != 1 {
		t.Fatalf("cq_overflows %d", n)
	}
	e.state(b, qp.StateRTS)
}

func TestCQResize(t *testing.T) {
	e := newEnv(t)
	cq, bcq := e.cq(8), e.cq(64)
	a := e.qp(qpOpts{scq: cq, rcq: cq})
	b := e.qp(qpOpts{scq: bcq, rcq: bcq})
	e.connect(a, b.QPN, "")
	e.connect(b, a.QPN, "")
	buf := e.mr(64, qp.AccessLocalWrite)
	for i := 0; i < 20; i++ {
		e.postRecv(b, fmt.Sprintf("wr_id=%d sge=%d:0:64", 100+i, buf.LKey))
	}
	for i := 1; i <= 6; i++ {
		e.postSend(a, fmt.Sprintf("opcode=send wr_id=%d send_flags=signaled", i))
	}
	e.quiesce()
	if err := cq.Resize(4); Errno(err) != 22 {
		t.Fatalf("resize below the queued count: %v, want EINVAL", err)
	}
	if err := cq.Resize(0); Errno(err) != 22 {
		t.Fatalf("resize to 0: %v, want EINVAL", err)
	}
	if err := cq.Resize(32); err != nil {
		t.Fatal(err)
	}
	if cq.CQE != 32 {
		t.Fatalf("cqe %d after resize to 32", cq.CQE)
	}
	for i := 7; i <= 20; i++ {
		e.postSend(a, fmt.Sprintf("opcode=send wr_id=%d send_flags=signaled", i))
	}
	var want []string
	for i := 1; i <= 20; i++ {
		want = append(want, sendWC(uint64(i), "success", "send", a, 0))
	}
	e.expect(cq, want...)
	e.healthy(a, b)
	// After an overflow, a resize makes the CQ usable again.
	for i := 21; i <= 60; i++ {
		e.postRecv(b, fmt.Sprintf("wr_id=%d", i))
		e.postSend(a, fmt.Sprintf("opcode=send wr_id=%d send_flags=signaled", i))
	}
	e.state(a, qp.StateErr)
	e.expectEvents(fmt.Sprintf("event=cq_err cq=%d", cq.Handle))
	if err := cq.Resize(128); err != nil {
		t.Fatal(err)
	}
	if cq.Overflowed() {
		t.Fatal("still overflowed after resize")
	}
	if got := len(e.poll(cq)); got != 32 {
		t.Fatalf("%d completions kept, want 32", got)
	}
}

func TestCQNotifyNext(t *testing.T) {
	e := newEnv(t)
	a, b, acq, _ := e.pair(qp.TypeRC)
	buf := e.mr(64, qp.AccessLocalWrite)
	e.postRecv(b, fmt.Sprintf("wr_id=8 sge=%d:0:64", buf.LKey), fmt.Sprintf("wr_id=9 sge=%d:0:64", buf.LKey))
	acq.ReqNotify(false)
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		done <- acq.WaitEvent(ctx)
	}()
	e.postSend(a, "opcode=send wr_id=1") // unsignaled: no completion, no event
	e.quiesce()
	select {
	case err := <-done:
		t.Fatalf("event without a completion: %v", err)
	case <-time.After(20 * time.Millisecond):
	}
	e.postSend(a, "opcode=send wr_id=2 send_flags=signaled")
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// Disarmed after firing: the next completion raises nothing.
	e.postRecv(b, fmt.Sprintf("wr_id=10 sge=%d:0:64", buf.LKey))
	e.postSend(a, "opcode=send wr_id=3 send_flags=signaled")
	e.quiesce()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := acq.WaitEvent(ctx); err == nil {
		t.Fatal("event fired while not armed")
	}
	e.poll(acq)
}

func TestCQNotifySolicited(t *testing.T) {
	e := newEnv(t)
	a, b, _, bcq := e.pair(qp.TypeRC)
	buf := e.mr(64, qp.AccessLocalWrite)
	for i := 0; i < 3; i++ {
		e.postRecv(b, fmt.Sprintf("wr_id=%d sge=%d:0:64", 10+i, buf.LKey))
	}
	bcq.ReqNotify(true)
	e.postSend(a, "opcode=send wr_id=1")
	e.quiesce()
	short := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		return bcq.WaitEvent(ctx)
	}
	if short() == nil {
		t.Fatal("solicited-only CQ fired for an unsolicited receive")
	}
	// Arming for the next completion upgrades the request; solicited
	// never downgrades it.
	e.postSend(a, "opcode=send wr_id=2 send_flags=solicited")
	if err := short(); err != nil {
		t.Fatalf("no event for a solicited receive: %v", err)
	}
	e.expect(bcq, recvWC(10, "success", "recv", b, 0, a, ""), recvWC(11, "success", "recv", b, 0, a, ""))
	// An error completion fires a solicited-only CQ too.
	bcq.ReqNotify(true)
	if err := b.Error(); err != nil {
		t.Fatal(err)
	}
	if err := short(); err != nil {
		t.Fatalf("no event for an error completion: %v", err)
	}
	e.expect(bcq, flushed(b, "recv", 12)...)
}

func TestSRQSharedByTwoQPs(t *testing.T) {
	e := newEnv(t)
	s := e.srq(16, 0)
	cq := e.cq(64)
	r1 := e.qp(qpOpts{scq: cq, rcq: cq, srq: s})
	r2 := e.qp(qpOpts{scq: cq, rcq: cq, srq: s})
	scq := e.cq(64)
	s1 := e.qp(qpOpts{scq: scq, rcq: scq})
	s2 := e.qp(qpOpts{scq: scq, rcq: scq})
	e.connect(s1, r1.QPN, "")
	e.connect(r1, s1.QPN, "")
	e.connect(s2, r2.QPN, "")
	e.connect(r2, s2.QPN, "")
	src, dst := e.mr(4096, 0), e.mr(4096, qp.AccessLocalWrite)
	fill(src.Mem(), 4)
	e.postSRQ(s, fmt.Sprintf("wr_id=1 sge=%d:0:100", dst.LKey), fmt.Sprintf("wr_id=2 sge=%d:100:100", dst.LKey), fmt.Sprintf("wr_id=3 sge=%d:200:100", dst.LKey))
	e.postSend(s1, fmt.Sprintf("opcode=send wr_id=11 send_flags=signaled sge=%d:0:50", src.LKey))
	e.quiesce()
	e.postSend(s2, fmt.Sprintf("opcode=send wr_id=21 send_flags=signaled sge=%d:50:60", src.LKey))
	e.quiesce()
	e.postSend(s1, fmt.Sprintf("opcode=send wr_id=12 send_flags=signaled sge=%d:110:70", src.LKey))
	e.expect(scq, sendWC(11, "success", "send", s1, 50), sendWC(21, "success", "send", s2, 60), sendWC(12, "success", "send", s1, 70))
	e.expect(cq, recvWC(1, "success", "recv", r1, 50, s1, ""), recvWC(2, "success", "recv", r2, 60, s2, ""), recvWC(3, "success", "recv", r1, 70, s1, ""))
	sameBytes(t, dst.Mem()[:50], src.Mem()[:50])
	sameBytes(t, dst.Mem()[100:160], src.Mem()[50:110])
	sameBytes(t, dst.Mem()[200:270], src.Mem()[110:180])
	e.healthy(r1, r2, s1, s2)
}

func TestSRQLimitEvent(t *testing.T) {
	e := newEnv(t)
	s := e.srq(16, 3)
	cq, scq := e.cq(64), e.cq(64)
	r := e.qp(qpOpts{scq: cq, rcq: cq, srq: s})
	a := e.qp(qpOpts{scq: scq, rcq: scq})
	e.connect(a, r.QPN, "")
	e.connect(r, a.QPN, "")
	for i := 0; i < 6; i++ {
		e.postSRQ(s, fmt.Sprintf("wr_id=%d", i))
	}
	send := func() {
		e.postSend(a, "opcode=send wr_id=1")
		e.quiesce()
	}
	send() // 5 left
	send() // 4
	send() // 3: not below 3
	e.expectEvents()
	send() // 2 < 3: fires and disarms
	e.expectEvents(fmt.Sprintf("event=srq_limit_reached srq=%d", s.Handle))
	if got := s.Attr().SRQLimit; got != 0 {
		t.Fatalf("srq_limit %d after the event, want 0 (disarmed)", got)
	}
	send() // 1
	e.expectEvents()
	if err := s.Modify(s.MaxWR + 1); Errno(err) != 22 {
		t.Fatalf("limit above max_wr: %v", err)
	}
	if err := s.Modify(2); err != nil {
		t.Fatal(err)
	}
	send() // 0 < 2: fires again
	e.expectEvents(fmt.Sprintf("event=srq_limit_reached srq=%d", s.Handle))
	if got := len(e.poll(cq)); got != 6 {
		t.Fatalf("%d receive completions, want 6", got)
	}
	e.healthy(a, r)
}
