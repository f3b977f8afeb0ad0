package device

import (
	"fmt"
	"testing"

	"rdmafs/qp"
)

func TestRCRNRThenRecvPosted(t *testing.T) {
	e := newEnv(t)
	a, b, acq, bcq := e.pair(qp.TypeRC) // b's min_rnr_timer is 12: 640 µs
	src, dst := e.mr(64, 0), e.mr(64, qp.AccessLocalWrite)
	fill(src.Mem(), 1)
	e.postSend(a, fmt.Sprintf("opcode=send wr_id=1 send_flags=signaled sge=%d:0:40", src.LKey))
	e.expect(acq)
	if c := e.qpCounters(a); c.RNRNaksRecv != 1 {
		t.Fatalf("rnr_naks_recv %d, want 1", c.RNRNaksRecv)
	}
	e.postRecv(b, fmt.Sprintf("wr_id=9 sge=%d:0:64", dst.LKey))
	delay := qp.RNRDelay(12)
	e.clk.Advance(delay - 1)
	e.expect(acq) // still waiting for the RNR timer
	e.clk.Advance(1)
	e.expect(acq, sendWC(1, "success", "send", a, 40))
	e.expect(bcq, recvWC(9, "success", "recv", b, 40, a, ""))
	sameBytes(t, dst.Mem()[:40], src.Mem()[:40])
	if c := e.qpCounters(b); c.RNRNaksSent != 1 {
		t.Fatalf("rnr_naks_sent %d, want 1", c.RNRNaksSent)
	}
	if n := e.d.Counters.RNRNaksRecv.Load(); n != 1 {
		t.Fatalf("device rnr_naks_recv %d", n)
	}
	e.healthy(a, b)
}

func TestRCRNRRetryExceeded(t *testing.T) {
	e := newEnv(t)
	a, b, acq, bcq := e.pairX(qp.TypeRC, "rnr_retry=2", "min_rnr_timer=1")
	src := e.mr(64, 0)
	e.postSend(a, fmt.Sprintf("opcode=send wr_id=1 sge=%d:0:40", src.LKey), "opcode=send wr_id=2")
	e.quiesce()
	for i := 0; i < 2; i++ {
		e.expect(acq)
		e.clk.Advance(qp.RNRDelay(1))
	}
	e.expect(acq, sendWC(1, "rnr_retry_exc_err", "send", a, 0), flushed(a, "send", 2)[0])
	e.expect(bcq)
	e.state(a, qp.StateErr)
	e.state(b, qp.StateRTS)
	e.expectEvents()
	if c := e.qpCounters(a); c.RNRNaksRecv != 3 {
		t.Fatalf("rnr_naks_recv %d, want 3 (first try and 2 retries)", c.RNRNaksRecv)
	}
	if c := e.qpCounters(b); c.RNRNaksSent != 3 {
		t.Fatalf("rnr_naks_sent %d, want 3", c.RNRNaksSent)
	}
}

func TestRCRNRRetryInfinite(t *testing.T) {
	e := newEnv(t)
	a, b, acq, bcq := e.pairX(qp.TypeRC, "rnr_retry=7", "min_rnr_timer=0x1f")
	src, dst := e.mr(64, 0), e.mr(64, qp.AccessLocalWrite)
	e.postSend(a, fmt.Sprintf("opcode=send wr_id=1 send_flags=signaled sge=%d:0:40", src.LKey))
	e.quiesce()
	for i := 0; i < 100; i++ {
		e.clk.Advance(qp.RNRDelay(0x1f))
		e.quiesce()
	}
	e.expect(acq)
	e.postRecv(b, fmt.Sprintf("wr_id=9 sge=%d:0:64", dst.LKey))
	e.clk.Advance(qp.RNRDelay(0x1f))
	e.expect(acq, sendWC(1, "success", "send", a, 40))
	e.expect(bcq, recvWC(9, "success", "recv", b, 40, a, ""))
	if c := e.qpCounters(a); c.RNRNaksRecv != 101 {
		t.Fatalf("rnr_naks_recv %d, want 101", c.RNRNaksRecv)
	}
	e.healthy(a, b)
}

// A multi-packet SEND that meets an RNR NAK: its later packets reach the
// responder out of sequence and draw a PSN sequence NAK too. That must not
// cost a transport retry: with retry_cnt=0 the message still gets through.
func TestRCRNRMultiPacketNoRetryCost(t *testing.T) {
	e := newEnv(t)
	a, b, acq, bcq := e.pairX(qp.TypeRC, "retry_cnt=0 rnr_retry=7", "")
	src, dst := e.mr(8192, 0), e.mr(8192, qp.AccessLocalWrite)
	fill(src.Mem(), 3)
	e.postSend(a, fmt.Sprintf("opcode=send wr_id=1 send_flags=signaled sge=%d:0:3000", src.LKey),
		fmt.Sprintf("opcode=send wr_id=2 send_flags=signaled sge=%d:0:10", src.LKey))
	e.quiesce()
	for i := 0; i < 3; i++ {
		e.clk.Advance(qp.RNRDelay(12))
		e.quiesce()
	}
	e.expect(acq)
	e.postRecv(b, fmt.Sprintf("wr_id=9 sge=%d:0:4096", dst.LKey), fmt.Sprintf("wr_id=10 sge=%d:4096:4096", dst.LKey))
	e.clk.Advance(qp.RNRDelay(12))
	e.expect(acq, sendWC(1, "success", "send", a, 3000), sendWC(2, "success", "send", a, 10))
	e.expect(bcq, recvWC(9, "success", "recv", b, 3000, a, ""), recvWC(10, "success", "recv", b, 10, a, ""))
	sameBytes(t, dst.Mem()[:3000], src.Mem()[:3000])
	e.healthy(a, b)
}

func testRetryExceeded(t *testing.T, over string) {
	e := newEnv(t)
	acq := e.cq(16)
	a := e.qp(qpOpts{scq: acq, rcq: acq})
	e.connectX(a, 0xABCDE, "timeout=14 retry_cnt=3 "+over)
	src := e.mr(8192, 0)
	e.postSend(a, fmt.Sprintf("opcode=send wr_id=1 sge=%d:0:3000", src.LKey), "opcode=send wr_id=2 send_flags=signaled")
	e.quiesce()
	to := qp.AckTimeout(14)
	for i := 0; i < 3; i++ {
		e.clk.Advance(to)
		e.expect(acq)
		e.state(a, qp.StateRTS)
	}
	e.clk.Advance(to)
	e.expect(acq, sendWC(1, "retry_exc_err", "send", a, 0), flushed(a, "send", 2)[0])
	e.state(a, qp.StateErr)
	e.expectEvents()
	c := e.qpCounters(a)
	if c.Retransmits != 3 || c.RetryTimeouts != 4 {
		t.Fatalf("retransmits %d retry_timeouts %d, want 3 and 4", c.Retransmits, c.RetryTimeouts)
	}
	// 3 + 1 packets sent 4 times.
	if c.PacketsSent != 16 {
		t.Fatalf("packets_sent %d, want 16", c.PacketsSent)
	}
	if e.clk.Pending() != 0 {
		t.Fatalf("%d timers left after the QP failed", e.clk.Pending())
	}
}

func TestRCRetryExceededNoSuchQP(t *testing.T) { testRetryExceeded(t, "") }

func TestRCRetryExceededForeignGID(t *testing.T) {
	testRetryExceeded(t, "dgid=2001:db8::1")
}

func TestRCTimeoutZeroNeverRetries(t *testing.T) {
	e := newEnv(t)
	acq := e.cq(16)
	a := e.qp(qpOpts{scq: acq, rcq: acq})
	e.connectX(a, 0xABCDE, "timeout=0 retry_cnt=0")
	e.postSend(a, "opcode=send wr_id=1")
	e.quiesce()
	if e.clk.Pending() != 0 {
		t.Fatal("timeout=0 armed a retransmit timer")
	}
	e.clk.Advance(qp.AckTimeout(31))
	e.expect(acq)
	e.state(a, qp.StateRTS)
}
