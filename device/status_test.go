package device

import (
	"fmt"
	"testing"

	"rdmafs/qp"
)

// The queue gauges follow a SEND held by an RNR NAK: two WRs posted, both
// sent before the NAK came back (in flight), the requester waiting; receive WRs posted
// and taken; completions pending in the CQ until polled, and the CQ's
// arming. Byte counters count payload each way.
func TestQueueGauges(t *testing.T) {
	e := newEnv(t)
	a, b, acq, bcq := e.pair(qp.TypeRC) // b's min_rnr_timer is 12
	src, dst := e.mr(8192, 0), e.mr(8192, qp.AccessLocalWrite)
	if s := a.Queues(); s != (QueueStatus{SendPSN: 500, ExpectedPSN: 500}) {
		t.Fatalf("idle QP: %+v", s)
	}
	e.postSend(a, fmt.Sprintf("opcode=send wr_id=1 send_flags=signaled sge=%d:0:3000", src.LKey),
		fmt.Sprintf("opcode=send wr_id=2 send_flags=signaled sge=%d:0:100", src.LKey))
	e.quiesce()
	if s := a.Queues(); s.SQPosted != 2 || s.SQInFlight != 2 || !s.RNRWait || s.RQPosted != 0 {
		t.Fatalf("waiting on RNR: %+v, want 2 posted, both sent (in flight), rnr_wait", s)
	}
	e.postRecv(b, fmt.Sprintf("wr_id=9 sge=%d:0:4096", dst.LKey), fmt.Sprintf("wr_id=10 sge=%d:4096:4096", dst.LKey),
		fmt.Sprintf("wr_id=11 sge=%d:0:64", dst.LKey))
	if s := b.Queues(); s.RQPosted != 3 {
		t.Fatalf("receiver: %+v, want 3 receive WRs posted", s)
	}
	bcq.ReqNotify(true)
	if s := bcq.Status(); s.Armed != "solicited" || s.Pending != 0 {
		t.Fatalf("armed CQ: %+v", s)
	}
	e.clk.Advance(qp.RNRDelay(12))
	e.quiesce()
	// 3000 bytes at path MTU 1024 and 100: PSNs 500-503.
	if s := a.Queues(); s != (QueueStatus{SendPSN: 504, ExpectedPSN: 500}) {
		t.Fatalf("after the WRs completed: %+v", s)
	}
	if s := b.Queues(); s.ExpectedPSN != 504 {
		t.Fatalf("receiver expects PSN %d, want 504", s.ExpectedPSN)
	}
	if s := b.Queues(); s.RQPosted != 1 {
		t.Fatalf("receiver after two messages: %+v", s)
	}
	if s := acq.Status(); s.Pending != 2 || s.CQE != 256 || s.Armed != "none" || s.Overflowed || s.Overflows != 0 {
		t.Fatalf("sender CQ: %+v", s)
	}
	e.expect(acq, sendWC(1, "success", "send", a, 3000), sendWC(2, "success", "send", a, 100))
	if s := acq.Status(); s.Pending != 0 {
		t.Fatalf("sender CQ after polling: %+v", s)
	}
	ca, cb := e.qpCounters(a), e.qpCounters(b)
	// Both SENDs went out before the RNR NAK came back, and again after
	// it: their 3100 payload bytes twice.
	if ca.BytesSent != 6200 || cb.BytesRecv != ca.BytesSent || cb.BytesSent != 0 || ca.BytesRecv != 0 {
		t.Fatalf("bytes: a sent %d recv %d, b sent %d recv %d", ca.BytesSent, ca.BytesRecv, cb.BytesSent, cb.BytesRecv)
	}
	e.healthy(a, b)
}

// A CQ counts its overflows; a resize clears the overflow, not the count.
func TestCQOverflowCount(t *testing.T) {
	e := newEnv(t)
	cq := e.cq(1)
	a := e.qp(qpOpts{scq: cq, rcq: cq})
	b := e.qp(qpOpts{scq: e.cq(16), rcq: e.cq(16)})
	e.connect(a, b.QPN, "")
	e.connect(b, a.QPN, "")
	mr := e.mr(64, qp.AccessLocalWrite|qp.AccessRemoteWrite)
	for i := 1; i <= 3; i++ {
		e.postSend(a, fmt.Sprintf("opcode=rdma_write wr_id=%d send_flags=signaled sge=%d:0:8 remote_addr=0 rkey=%d", i, mr.LKey, mr.RKey))
	}
	e.quiesce()
	if s := cq.Status(); !s.Overflowed || s.Overflows != 1 || s.Pending != 1 {
		t.Fatalf("overflowed CQ: %+v", s)
	}
	if err := cq.Resize(4); err != nil {
		t.Fatal(err)
	}
	if s := cq.Status(); s.Overflowed || s.Overflows != 1 || s.Pending != 1 || s.CQE != 4 {
		t.Fatalf("resized CQ: %+v", s)
	}
	if err := a.Destroy(); err != nil {
		t.Fatal(err)
	}
	if s := a.Queues(); s != (QueueStatus{}) {
		t.Fatalf("destroyed QP: %+v", s)
	}
}
