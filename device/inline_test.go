package device

import (
	"fmt"
	"testing"

	"rdmafs/qp"
)

// The turns that datagrams from the wire make runnable run on the wire's
// receive goroutine while the engine sleeps (engine.runHeldLocked), and
// the SQs of the QPs it ran take posts without a doorbell only while it
// runs them: once the devices are quiet, every SQ asks for a doorbell
// again, or a client's next post would wait for nobody. SpinIdle < 0
// keeps the engine goroutine from watching the SQs itself.
func TestWireInlineTurnsRearmDoorbells(t *testing.T) {
	nospin := func(c *Config) { c.SpinIdle = -1 }
	ea, eb := newWirePair(t, nospin)
	envs := []*env{ea, eb}
	a, b, acq, bcq := wireQPs(ea, eb, qp.TypeRC, "", "")
	ma, mb := ea.mr(4096, qp.AccessLocalWrite), eb.mr(4096, qp.AccessLocalWrite)
	const rounds = 20
	for i := 0; i < rounds; i++ {
		eb.postRecv(b, fmt.Sprintf("wr_id=%d sge=%d:0:64", 100+i, mb.LKey))
		ea.postRecv(a, fmt.Sprintf("wr_id=%d sge=%d:0:64", 200+i, ma.LKey))
		ea.postSend(a, fmt.Sprintf("opcode=send wr_id=%d send_flags=signaled sge=%d:0:8", i, ma.LKey))
		wexpect(t, bcq, envs, recvWC(uint64(100+i), "success", "recv", b, 8, a, ""))
		eb.postSend(b, fmt.Sprintf("opcode=send wr_id=%d send_flags=signaled sge=%d:0:8", 300+i, mb.LKey))
		wexpect(t, acq, envs, sendWC(uint64(i), "success", "send", a, 8), recvWC(uint64(200+i), "success", "recv", a, 8, b, ""))
		wexpect(t, bcq, envs, sendWC(uint64(300+i), "success", "send", b, 8))
	}
	for _, e := range envs {
		e.d.Quiesce()
		if e.d.Counters.InlineRuns.Load() == 0 {
			t.Errorf("device %s: no turn ran on the receive goroutine: %v", gidText(e), e.d.Counters.List())
		}
	}
	for _, q := range []*QP{a, b} {
		if !q.sq.NeedWakeup() {
			t.Errorf("qp %d: the SQ does not ask for a doorbell on a quiet device", q.QPN)
		}
	}
	ea.healthy(a)
	eb.healthy(b)
}
