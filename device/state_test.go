package device

import (
	"fmt"
	"reflect"
	"testing"

	"rdmafs/qp"
)

// b has no receive WQE, so a's first send waits for an RNR timer the test
// never fires and the WQEs behind it stay outstanding when a goes to ERR.
func TestRCFlushOnError(t *testing.T) {
	e := newEnv(t)
	a, b, acq, bcq := e.pair(qp.TypeRC)
	buf := e.mr(4096, qp.AccessLocalWrite|qp.AccessRemoteRead)
	e.postSend(a,
		fmt.Sprintf("opcode=send wr_id=1 sge=%d:0:100", buf.LKey),
		fmt.Sprintf("opcode=rdma_write wr_id=2 sge=%d:0:100 remote_addr=0 rkey=%d", buf.LKey, buf.RKey),
		fmt.Sprintf("opcode=rdma_read wr_id=3 sge=%d:0:100 remote_addr=0 rkey=%d", buf.LKey, buf.RKey),
		"opcode=send wr_id=4 send_flags=signaled")
	e.postRecv(a, "wr_id=11", "wr_id=12", fmt.Sprintf("wr_id=13 sge=%d:0:10", buf.LKey))
	e.expect(acq)
	if err := a.Error(); err != nil {
		t.Fatal(err)
	}
	e.expect(acq, cat(
		flushed(a, "send", 1), flushed(a, "rdma_write", 2), flushed(a, "rdma_read", 3), flushed(a, "send", 4),
		flushed(a, "recv", 11, 12, 13))...)
	e.state(a, qp.StateErr)
	// Receives posted in ERR complete at once, flushed; so do sends.
	e.postRecv(a, "wr_id=14")
	e.expect(acq, flushed(a, "recv", 14)...)
	e.postSend(a, "opcode=send wr_id=5")
	e.expect(acq, flushed(a, "send", 5)...)
	e.expect(bcq)
	e.state(b, qp.StateRTS)
	e.expectEvents()
	if e.clk.Pending() != 0 {
		t.Fatalf("%d timers pending in ERR", e.clk.Pending())
	}
	// The late RNR retry finds nothing to do.
	e.clk.Advance(qp.RNRDelay(0))
	e.expect(acq)
	e.expect(bcq)
}

func TestSRQQPLastWQEReached(t *testing.T) {
	e := newEnv(t)
	s := e.srq(16, 0)
	acq, bcq := e.cq(64), e.cq(64)
	a := e.qp(qpOpts{scq: acq, rcq: acq})
	b := e.qp(qpOpts{scq: bcq, rcq: bcq, srq: s})
	e.connect(a, b.QPN, "")
	e.connect(b, a.QPN, "")
	e.postSRQ(s, "wr_id=1", "wr_id=2")
	if err := b.Error(); err != nil {
		t.Fatal(err)
	}
	// The SRQ's WQEs belong to the SRQ: none is flushed.
	e.expect(bcq)
	e.state(b, qp.StateErr)
	e.expectEvents(fmt.Sprintf("event=qp_last_wqe_reached qp=%d", b.QPN))
	if n := s.Attr().Pending; n != 2 {
		t.Fatalf("srq has %d WQEs, want 2", n)
	}
	if _, err := b.PostRecv([]qp.RecvWR{{WRID: 3}}); Errno(err) != 22 {
		t.Fatalf("post_recv on an SRQ QP: %v, want EINVAL", err)
	}
}

func TestResetDiscardsWithoutCompletions(t *testing.T) {
	e := newEnv(t)
	a, b, acq, bcq := e.pairX(qp.TypeRC, "path_mtu=2048 timeout=10 retry_cnt=5", "")
	buf := e.mr(4096, qp.AccessLocalWrite)
	e.postSend(a, "opcode=send wr_id=1 send_flags=signaled", "opcode=send wr_id=2 send_flags=signaled")
	e.postRecv(a, "wr_id=11", "wr_id=12")
	e.expect(acq)
	before := a.Query()
	if err := a.Reset(); err != nil {
		t.Fatal(err)
	}
	e.expect(acq)
	e.state(a, qp.StateReset)
	e.expectEvents()
	after := a.Query()
	if after.SQPSN != 0 || after.RQPSN != 0 || after.DestQPNum != 0 || after.QKey != 0 || after.QPAccessFlags != 0 {
		t.Fatalf("after reset: sq_psn %d rq_psn %d dest_qp_num %d qkey %d access %v", after.SQPSN, after.RQPSN, after.DestQPNum, after.QKey, after.QPAccessFlags)
	}
	if after.PortNum != before.PortNum || after.PathMTU != qp.MTU2048 || after.Timeout != 10 || after.RetryCnt != 5 {
		t.Fatalf("reset lost port %d mtu %v timeout %d retry_cnt %d", after.PortNum, after.PathMTU, after.Timeout, after.RetryCnt)
	}
	if e.clk.Pending() != 0 {
		t.Fatal("timers left after reset")
	}
	// The old RNR timer cannot disturb the new life.
	e.clk.Advance(qp.RNRDelay(0))
	e.expect(acq)
	// Connect again: traffic flows, and the discarded WQEs stay gone.
	e.connect(a, b.QPN, "")
	e.postRecv(b, fmt.Sprintf("wr_id=9 sge=%d:0:100", buf.LKey))
	e.postSend(a, fmt.Sprintf("opcode=send wr_id=3 send_flags=signaled sge=%d:0:10", buf.LKey))
	e.expect(acq, sendWC(3, "success", "send", a, 10))
	e.expect(bcq, recvWC(9, "success", "recv", b, 10, a, ""))
	// b kept its rq_psn from the first life plus the message it got.
	e.healthy(a, b)
}

func TestModifyInvalidChangesNothing(t *testing.T) {
	e := newEnv(t)
	cq := e.cq(16)
	a := e.qp(qpOpts{scq: cq, rcq: cq})
	b := e.qp(qpOpts{scq: cq, rcq: cq})
	e.modify(a, "qp_state=INIT pkey_index=0 port_num=1 qp_access_flags=remote_write")
	for _, bad := range []string{
		"qp_state=RTS sq_psn=1",               // INIT→RTS is not a transition
		"qp_state=RTR path_mtu=1024 rq_psn=1", // missing required attributes
		"qp_state=INIT qkey=5",                // qkey is not for RC
		"qp_state=SQE",                        // never by modify
		"qp_state=RTR path_mtu=1024 rq_psn=1 max_dest_rd_atomic=4 min_rnr_timer=40 dest_qp_num=17 dgid=::1", // min_rnr_timer > 31
		"cur_qp_state=RTR qp_state=INIT", // cur_qp_state lies
		"qp_state=INIT port_num=2",       // no such port
		"qp_state=INIT max_send_wr=10",   // cap cannot change
	} {
		before := a.Query()
		if err := e.tryModify(a, bad); err == nil {
			t.Errorf("modify %q succeeded", bad)
		}
		if after := a.Query(); !reflect.DeepEqual(before, after) {
			t.Errorf("failed modify %q changed the QP:\n%+v\n%+v", bad, before, after)
		}
	}
	e.state(a, qp.StateInit)
	// RESET→ERR is not legal either.
	if err := e.tryModify(b, "qp_state=ERR"); err == nil {
		t.Fatal("RESET→ERR succeeded")
	}
	e.state(b, qp.StateReset)
	// cur_qp_state that matches is accepted where it is allowed.
	e.connect(b, a.QPN, "")
	e.modify(b, "cur_qp_state=RTS qp_state=RTS min_rnr_timer=3")
	if got := b.Query().MinRNRTimer; got != 3 {
		t.Fatalf("min_rnr_timer %d after RTS→RTS", got)
	}
	e.expectEvents()
}

func TestSQDDrain(t *testing.T) {
	e := newEnv(t)
	a, b, acq, bcq := e.pair(qp.TypeRC)
	buf := e.mr(4096, qp.AccessLocalWrite)
	e.postSend(a, "opcode=send wr_id=1 send_flags=signaled")
	e.expect(acq) // waiting for an RNR timer
	e.modify(a, "qp_state=SQD")
	// Posting is allowed in SQD, but the WQE does not start.
	e.postSend(a, "opcode=send wr_id=2 send_flags=signaled")
	if !a.Query().SQDraining {
		t.Fatal("sq_draining is false with a send in flight")
	}
	if err := e.tryModify(a, "qp_state=RTS"); Errno(err) != 16 {
		t.Fatalf("SQD→RTS while draining: %v, want EBUSY", err)
	}
	e.expectEvents()
	e.postRecv(b, fmt.Sprintf("wr_id=9 sge=%d:0:100", buf.LKey), fmt.Sprintf("wr_id=10 sge=%d:0:100", buf.LKey))
	e.clk.Advance(qp.RNRDelay(12))
	e.expect(acq, sendWC(1, "success", "send", a, 0))
	e.expect(bcq, recvWC(9, "success", "recv", b, 0, a, ""))
	e.state(a, qp.StateSQD)
	e.expectEvents(fmt.Sprintf("event=sq_drained qp=%d", a.QPN))
	if a.Query().SQDraining {
		t.Fatal("still draining")
	}
	e.modify(a, "qp_state=RTS")
	e.expect(acq, sendWC(2, "success", "send", a, 0))
	e.expect(bcq, recvWC(10, "success", "recv", b, 0, a, ""))
	e.healthy(a, b)
}

func TestSQDIdleDrainsAtOnce(t *testing.T) {
	e := newEnv(t)
	a, b, _, _ := e.pair(qp.TypeRC)
	e.modify(a, "qp_state=SQD")
	e.expectEvents(fmt.Sprintf("event=sq_drained qp=%d", a.QPN))
	e.modify(a, "qp_state=SQD") // SQD→SQD: no second event
	e.modify(a, "qp_state=RTS")
	e.expectEvents()
	e.healthy(a, b)
}

func TestCommEstInRTR(t *testing.T) {
	e := newEnv(t)
	acq, bcq := e.cq(16), e.cq(16)
	a := e.qp(qpOpts{scq: acq, rcq: acq})
	b := e.qp(qpOpts{scq: bcq, rcq: bcq})
	e.connect(a, b.QPN, "")
	gid := GIDString(e.d.Port().GID)
	e.modify(b, "qp_state=INIT pkey_index=0 port_num=1 qp_access_flags="+allAccess)
	e.modify(b, "qp_state=RTR path_mtu=1024 rq_psn=500 max_dest_rd_atomic=4 min_rnr_timer=12 dest_qp_num="+itoa(a.QPN)+" dgid="+gid)
	buf := e.mr(64, qp.AccessLocalWrite)
	e.postRecv(b, fmt.Sprintf("wr_id=9 sge=%d:0:64", buf.LKey), fmt.Sprintf("wr_id=10 sge=%d:0:64", buf.LKey))
	e.postSend(a, "opcode=send wr_id=1 send_flags=signaled", "opcode=send wr_id=2 send_flags=signaled")
	// A responder in RTR answers: the requester gets its ACKs.
	e.expect(acq, sendWC(1, "success", "send", a, 0), sendWC(2, "success", "send", a, 0))
	e.expect(bcq, recvWC(9, "success", "recv", b, 0, a, ""), recvWC(10, "success", "recv", b, 0, a, ""))
	e.state(b, qp.StateRTR)
	e.expectEvents(fmt.Sprintf("event=comm_est qp=%d", b.QPN))
	e.modify(b, "qp_state=RTS sq_psn=500 timeout=14 retry_cnt=7 rnr_retry=7 max_rd_atomic=4")
	e.postRecv(b, fmt.Sprintf("wr_id=11 sge=%d:0:64", buf.LKey))
	e.postSend(a, "opcode=send wr_id=3 send_flags=signaled")
	e.expect(acq, sendWC(3, "success", "send", a, 0))
	e.expect(bcq, recvWC(11, "success", "recv", b, 0, a, ""))
	e.expectEvents()
}

func TestPostSendStateGating(t *testing.T) {
	e := newEnv(t)
	cq := e.cq(16)
	a := e.qp(qpOpts{scq: cq, rcq: cq})
	if err := e.trySend(a, "opcode=send"); Errno(err) != 22 {
		t.Fatalf("post_send in RESET: %v", err)
	}
	if _, err := a.PostRecv([]qp.RecvWR{{WRID: 1}}); Errno(err) != 22 {
		t.Fatalf("post_recv in RESET: %v", err)
	}
	e.modify(a, "qp_state=INIT pkey_index=0 port_num=1 qp_access_flags=0")
	if err := e.trySend(a, "opcode=send"); Errno(err) != 22 {
		t.Fatalf("post_send in INIT: %v", err)
	}
	e.postRecv(a, "wr_id=1")
	e.expect(cq)
}
