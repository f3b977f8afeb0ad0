package device

import (
	"testing"

	"rdmafs/clock"
	"rdmafs/qp"
	"rdmafs/ring"
)

// benchTurn measures the engine's own work per WR on the direct path: the
// WRs of one batch (the last signalled) are written into the SQ ring as a
// client would, and the sender's turns run on the benchmark's goroutine,
// executing them against the peer (executeDirectLocked) and completing
// them. No second thread, no cache line crossing cores: what is left is
// the code's cost, which a machine shared with other work disturbs less
// than it does the cross-core benchmarks.
func benchTurn(b *testing.B, wr qp.SendWR, dstAcc qp.Access) {
	e := newEnv(b, func(c *Config) { c.Clock = clock.Real{}; c.SpinIdle = -1 })
	a, _, acq, _ := e.pairX(qp.TypeRC, "path_mtu=4096", "path_mtu=4096")
	src := e.mr(4096, qp.AccessLocalWrite)
	dst := e.mr(4096, dstAcc)
	wr.SGL = []qp.SGE{{Addr: 0, Length: 8, LKey: src.LKey}}
	wr.RKey = dst.RKey
	const batch = 32
	wrs := make([]qp.SendWR, batch)
	for i := range wrs {
		wrs[i] = wr
		wrs[i].WRID = uint64(i)
	}
	wrs[batch-1].SendFlags = qp.SendSignaled
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; done += batch {
		p := ring.NewProducer(a.sq)
		for i := range wrs {
			if err := ring.EncodeSendWQE(p.Next(), &wrs[i]); err != nil {
				b.Fatal(err)
			}
			p.Advance()
		}
		p.Publish()
		// A turn stops at max_rd_atomic outstanding READs and atomics;
		// their slots come back as they retire, for the next turn.
		var wcs []qp.WC
		for turns := 0; len(wcs) == 0; turns++ {
			if turns == batch {
				b.Fatal("the batch did not complete")
			}
			e.d.mu.Lock()
			a.runLocked()
			e.d.mu.Unlock()
			var err error
			if wcs, err = acq.Poll(4); err != nil || len(wcs) > 1 || len(wcs) == 1 && wcs[0].Status != qp.WCSuccess {
				b.Fatalf("completions %v, %v", wcs, err)
			}
		}
	}
	b.StopTimer()
	e.d.mu.Lock()
	a.eng().flushCountsLocked() // an engine's batch would have, at its end
	e.d.mu.Unlock()
	if c := e.d.Counters.DirectOps.Load(); c < uint64(b.N) {
		b.Fatalf("direct_ops %d of %d WRs: the benchmark left the direct path", c, b.N)
	}
}

func BenchmarkTurnWrite8B(b *testing.B) {
	benchTurn(b, qp.SendWR{Opcode: qp.WRRDMAWrite}, qp.AccessLocalWrite|qp.AccessRemoteWrite)
}

func BenchmarkTurnFetchAdd(b *testing.B) {
	benchTurn(b, qp.SendWR{Opcode: qp.WRAtomicFetchAndAdd, CompareAdd: 1}, qp.AccessLocalWrite|qp.AccessRemoteAtomic)
}
