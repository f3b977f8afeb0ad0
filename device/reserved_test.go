package device

import (
	"fmt"
	"syscall"
	"testing"

	"rdmafs/qp"
)

// Reserved operations: the device's own WQEs (the probe) take no slot of
// the client's queue, write no CQE, and are unreserved before their slot
// can be reused.

// stuckPair is an RC pair whose B side is not connected yet: A's packets
// are dropped until connectB, so A's WQEs stay in flight.
func stuckPair(e *env) (a, b *QP, acq, bcq *CQ, connectB func()) {
	acq, bcq = e.cq(256), e.cq(256)
	a = e.qp(qpOpts{scq: acq, rcq: acq})
	b = e.qp(qpOpts{scq: bcq, rcq: bcq})
	e.connect(a, b.QPN, "")
	return a, b, acq, bcq, func() { e.connect(b, a.QPN, "") }
}

func errnoIs(err error, want syscall.Errno) bool { return err != nil && Errno(err) == want }

func TestProbeTakesNoSlotAndNoCQE(t *testing.T) {
	e := newEnv(t)
	a, b, acq, bcq, connectB := stuckPair(e)
	src := e.mr(4096, 0)
	for i := uint32(0); i < e.d.cfg.ReservedOps; i++ {
		if err := a.Probe(); err != nil {
			t.Fatalf("probe %d: %v", i, err)
		}
	}
	if err := a.Probe(); !errnoIs(err, syscall.EBUSY) {
		t.Fatalf("a probe beyond the reserved operations: %v, want EBUSY", err)
	}
	// The client's whole queue is still its own while the probes are in
	// flight.
	depth := a.Cap.MaxSendWR
	for i := uint32(0); i < depth; i++ {
		if err := e.trySend(a, fmt.Sprintf("opcode=send wr_id=%d send_flags=signaled sge=%d:0:8", i+1, src.LKey)); err != nil {
			t.Fatalf("post %d of %d with %d probes in flight: %v", i+1, depth, e.d.cfg.ReservedOps, err)
		}
	}
	if err := e.trySend(a, fmt.Sprintf("opcode=send wr_id=999 sge=%d:0:8", src.LKey)); !errnoIs(err, syscall.ENOMEM) {
		t.Fatalf("post beyond max_send_wr: %v, want ENOMEM", err)
	}
	e.expect(acq) // nothing completes while B drops everything
	if s := a.Queues(); s.SQPosted != depth {
		t.Fatalf("sq_posted %d, want %d (probes are not the client's)", s.SQPosted, depth)
	}
	connectB()
	dst := e.mr(8*uint64(depth), qp.AccessLocalWrite)
	for i := uint32(0); i < depth; i++ {
		e.postRecv(b, fmt.Sprintf("wr_id=%d sge=%d:%d:8", i+1, dst.LKey, 8*i))
	}
	wait := qp.AckTimeout(14)
	e.clk.Advance(wait) // A retries; B answers this time
	var want []string
	for i := uint32(0); i < depth; i++ {
		want = append(want, sendWC(uint64(i+1), "success", "send", a, 8))
	}
	e.expect(acq, want...)
	if got := len(e.poll(bcq)); got != int(depth) {
		t.Fatalf("B received %d, want %d", got, depth)
	}
	c := e.qpCounters(a)
	if c.Probes != uint64(e.d.cfg.ReservedOps) || c.ProbesOK != c.Probes || c.ProbesFailed != 0 {
		t.Fatalf("probes %d ok %d failed %d, want %d acknowledged", c.Probes, c.ProbesOK, c.ProbesFailed, e.d.cfg.ReservedOps)
	}
	if c.ProbeRTTMicros < uint64(wait.Microseconds()) {
		t.Fatalf("probe_rtt_us %d: the probe waited out a %v retry", c.ProbeRTTMicros, wait)
	}
	e.healthy(a, b)
}

// A reserved WQE is unreserved when it retires, before its slot can be
// taken again: with one reserved operation, probe after probe succeeds
// once the previous one is acknowledged, and never while it is in flight.
func TestProbeUnreservesBeforeReuse(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.ReservedOps = 1 })
	a, b, acq, bcq := e.pair(qp.TypeRC)
	src := e.mr(4096, 0)
	dst := e.mr(4096, qp.AccessLocalWrite|qp.AccessRemoteWrite)
	for i := 1; i <= 200; i++ {
		if err := a.Probe(); err != nil {
			t.Fatalf("probe %d: %v", i, err)
		}
		// Client work interleaves: the probe and the WRITE share swq.
		e.postSend(a, fmt.Sprintf("opcode=rdma_write wr_id=%d send_flags=signaled sge=%d:0:8 remote_addr=0 rkey=%d", i, src.LKey, dst.RKey))
		e.expect(acq, sendWC(uint64(i), "success", "rdma_write", a, 8))
	}
	c := e.qpCounters(a)
	if c.Probes != 200 || c.ProbesOK != 200 {
		t.Fatalf("probes %d ok %d, want 200", c.Probes, c.ProbesOK)
	}
	e.expect(bcq)
	e.healthy(a, b)
}

// A probe in flight when the QP enters ERR is flushed without a CQE; the
// client's WQEs behind it flush as usual.
func TestProbeFlushedSilently(t *testing.T) {
	e := newEnv(t)
	a, _, acq, _, _ := stuckPair(e)
	src := e.mr(4096, 0)
	if err := a.Probe(); err != nil {
		t.Fatal(err)
	}
	e.postSend(a, fmt.Sprintf("opcode=send wr_id=5 send_flags=signaled sge=%d:0:8", src.LKey))
	if err := a.Error(); err != nil {
		t.Fatal(err)
	}
	e.expect(acq, flushed(a, "send", 5)...)
	c := e.qpCounters(a)
	if c.Probes != 1 || c.ProbesOK != 0 || c.ProbesFailed != 1 {
		t.Fatalf("probes %d ok %d failed %d, want 1 failed", c.Probes, c.ProbesOK, c.ProbesFailed)
	}
	// Reset and reconnect: the reserved operations are all free again.
	e.d.mu.Lock()
	used := a.req.resv.used
	e.d.mu.Unlock()
	if used != 0 {
		t.Fatalf("%d reserved WQEs still counted after the flush", used)
	}
}

// Probes exhaust the retries of a QP whose peer is gone: the QP goes to
// ERR as for any WQE, with no completion of its own.
func TestProbeOfDeadPeer(t *testing.T) {
	e := newEnv(t)
	a, _, acq, _, _ := stuckPair(e)
	if err := a.Probe(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 9; i++ { // retry_cnt=7: the first send and 7 retries
		e.clk.Advance(qp.AckTimeout(14))
		e.quiesce()
	}
	e.state(a, qp.StateErr)
	e.expect(acq)
	if c := e.qpCounters(a); c.ProbesFailed != 1 {
		t.Fatalf("probes_failed %d, want 1", c.ProbesFailed)
	}
}

func TestProbeRefused(t *testing.T) {
	e := newEnv(t)
	cq := e.cq(16)
	ud := e.qp(qpOpts{typ: qp.TypeUD, scq: cq, rcq: cq})
	e.connect(ud, 0, "")
	if err := ud.Probe(); !errnoIs(err, syscall.EOPNOTSUPP) {
		t.Errorf("probe on UD: %v, want EOPNOTSUPP", err)
	}
	rc := e.qp(qpOpts{scq: cq, rcq: cq})
	if err := rc.Probe(); !errnoIs(err, syscall.EINVAL) {
		t.Errorf("probe in RESET: %v, want EINVAL", err)
	}
	e.expect(cq)
}
