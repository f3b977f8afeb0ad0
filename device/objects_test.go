package device

import (
	"syscall"
	"testing"

	"rdmafs/qp"
)

func TestQPNAllocation(t *testing.T) {
	e := newEnv(t)
	cq := e.cq(16)
	var last uint32
	var qps []*QP
	for i := 0; i < 10; i++ {
		q := e.qp(qpOpts{scq: cq, rcq: cq})
		if q.QPN <= 1 {
			t.Fatalf("QPN %d handed out", q.QPN)
		}
		if q.QPN <= last {
			t.Fatalf("QPN %d after %d: not increasing", q.QPN, last)
		}
		last = q.QPN
		qps = append(qps, q)
	}
	gone := qps[3].QPN
	if err := qps[3].Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := qps[3].Destroy(); Errno(err) != syscall.ENOENT {
		t.Fatalf("second destroy: %v", err)
	}
	if e.d.QP(gone) != nil {
		t.Fatal("destroyed QP still found")
	}
	for i := 0; i < 10; i++ {
		q := e.qp(qpOpts{scq: cq, rcq: cq})
		if q.QPN == gone || q.QPN <= last {
			t.Fatalf("QPN %d reused or not increasing (last %d, destroyed %d)", q.QPN, last, gone)
		}
		last = q.QPN
	}
	// Packets to a destroyed QP go nowhere.
	a := qps[0]
	e.connectX(a, gone, "timeout=0")
	e.postSend(a, "opcode=send wr_id=1")
	e.quiesce()
	if n := e.d.Counters.DroppedPackets.Load(); n == 0 {
		t.Fatal("packet to a destroyed QPN was not dropped")
	}
}

func TestQPNWrapSkipsLiveAndReserved(t *testing.T) {
	e := newEnv(t)
	cq := e.cq(16)
	q1 := e.qp(qpOpts{scq: cq, rcq: cq})
	e.d.mu.Lock()
	e.d.nextQPN = 1<<24 - 1
	e.d.mu.Unlock()
	q2 := e.qp(qpOpts{scq: cq, rcq: cq})
	q3 := e.qp(qpOpts{scq: cq, rcq: cq})
	if q2.QPN != 1<<24-1 || q3.QPN <= 1 || q3.QPN == q1.QPN {
		t.Fatalf("QPNs around the wrap: %d %d (live %d)", q2.QPN, q3.QPN, q1.QPN)
	}
}

func TestDestroyRules(t *testing.T) {
	e := newEnv(t)
	cq := e.cq(16)
	mr := e.mr(4096, qp.AccessLocalWrite|qp.AccessMWBind)
	s := e.srq(8, 0)
	q := e.qp(qpOpts{scq: cq, rcq: cq, srq: s})
	busy := func(what string, err error) {
		t.Helper()
		if Errno(err) != syscall.EBUSY {
			t.Fatalf("%s: %v, want EBUSY", what, err)
		}
	}
	busy("dealloc pd with objects", e.pd.Dealloc())
	busy("destroy cq used by a qp", cq.Destroy())
	busy("destroy srq with a qp", s.Destroy())

	// An MR with a bound window cannot go; after unbinding it can.
	a, b, acq, _ := e.pair(qp.TypeRC)
	mw := e.mw(1)
	e.postSend(a, "opcode=bind_mw wr_id=1 send_flags=signaled rkey=1 mw="+itoa(mw.Handle)+" bind_lkey="+itoa(mr.LKey)+" bind_addr=0 bind_length=100 bind_access=remote_read")
	e.expect(acq, sendWC(1, "success", "bind_mw", a, 0))
	busy("dereg mr with a bound mw", mr.Dereg())
	if err := mw.Dealloc(); err != nil {
		t.Fatal(err)
	}
	if err := mr.Dereg(); err != nil {
		t.Fatal(err)
	}
	if err := mr.Dereg(); Errno(err) != syscall.ENOENT {
		t.Fatalf("second dereg: %v", err)
	}

	if err := q.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := s.Destroy(); err != nil {
		t.Fatal(err)
	}
	for _, x := range []*QP{a, b} {
		if err := x.Destroy(); err != nil {
			t.Fatal(err)
		}
	}
	if err := cq.Destroy(); err != nil {
		t.Fatal(err)
	}
	// Nothing is left on the PD now (CQs do not belong to one).
	if err := e.pd.Dealloc(); err != nil {
		t.Fatal(err)
	}
	if _, err := cq.Poll(1); Errno(err) != syscall.ENOENT {
		t.Fatalf("poll of a destroyed cq: %v", err)
	}
}

func TestDestroyQPWithWorkOutstanding(t *testing.T) {
	e := newEnv(t)
	a, b, acq, bcq := e.pair(qp.TypeRC)
	e.postSend(a, "opcode=send wr_id=1 send_flags=signaled") // RNR wait
	e.postRecv(a, "wr_id=2")
	e.quiesce()
	if err := a.Destroy(); err != nil {
		t.Fatal(err)
	}
	e.clk.Advance(qp.RNRDelay(0))
	e.expect(acq)
	e.expect(bcq)
	if e.clk.Pending() != 0 {
		t.Fatal("timers left by a destroyed QP")
	}
	if err := e.trySend(a, "opcode=send"); Errno(err) != syscall.ENOENT {
		t.Fatalf("post to a destroyed QP: %v", err)
	}
	if err := a.Modify(&qp.Attr{QPState: qp.StateErr}, qp.MaskState); Errno(err) != syscall.ENOENT {
		t.Fatalf("modify of a destroyed QP: %v", err)
	}
	e.state(b, qp.StateRTS)
}

func TestClosedDeviceRefusesPosts(t *testing.T) {
	e := newEnv(t)
	a, b, _, _ := e.pair(qp.TypeRC)
	e.d.Close()
	if err := e.trySend(a, "opcode=send"); err == nil {
		t.Fatal("post_send on a closed device succeeded")
	}
	if _, err := b.PostRecv([]qp.RecvWR{{WRID: 1}}); err == nil {
		t.Fatal("post_recv on a closed device succeeded")
	}
}
