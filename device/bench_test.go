package device

import (
	"fmt"
	"runtime"
	"testing"

	"rdmafs/clock"
	"rdmafs/qp"
	"rdmafs/ring"
)

// benchWrite measures RDMA WRITEs of size bytes through the engine: posted
// 16 at a time with only the last signaled, up to 64 outstanding, completed
// by polling the CQ, the way a verbs program streams writes.
// With wire, the two QPs are on two devices that talk RoCEv2 over lo.
func benchWrite(b *testing.B, size int, wire bool) {
	var ea, eb *env
	var a *QP
	var acq *CQ
	if wire {
		ea, eb = newWirePair(b)
		a, _, acq, _ = wireQPs(ea, eb, qp.TypeRC, "path_mtu=4096", "path_mtu=4096")
	} else {
		ea = newEnv(b, func(c *Config) { c.Clock = clock.Real{} })
		eb = ea
		a, _, acq, _ = ea.pairX(qp.TypeRC, "path_mtu=4096", "path_mtu=4096")
	}
	src := ea.mr(uint64(size)+64, 0)
	dst := eb.mr(uint64(size)+64, qp.AccessLocalWrite|qp.AccessRemoteWrite)
	fill(src.Mem(), 1)
	const batch, depth = 16, 64
	wrs := make([]qp.SendWR, batch)
	for i := range wrs {
		wrs[i] = qp.SendWR{WRID: uint64(i), Opcode: qp.WRRDMAWrite, SGL: []qp.SGE{{Addr: 0, Length: uint32(size), LKey: src.LKey}},
			RemoteAddr: 0, RKey: dst.RKey}
	}
	wrs[batch-1].SendFlags = qp.SendSignaled
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	posted, done := 0, 0
	for done < b.N {
		for posted-done < depth && posted < b.N {
			if _, err := a.PostSend(wrs); err != nil {
				b.Fatal(err)
			}
			posted += batch
		}
		wcs, err := acq.Poll(depth / batch)
		if err != nil {
			b.Fatal(err)
		}
		for _, wc := range wcs {
			if wc.Status != qp.WCSuccess {
				b.Fatalf("completion %v", wc.Status)
			}
		}
		done += batch * len(wcs)
		if len(wcs) == 0 {
			runtime.Gosched()
		}
	}
	b.StopTimer()
	sameBytes(b, dst.Mem()[:size], src.Mem()[:size])
}

func BenchmarkRDMAWrite8B(b *testing.B)      { benchWrite(b, 8, false) }
func BenchmarkRDMAWrite64K(b *testing.B)     { benchWrite(b, 64<<10, false) }
func BenchmarkWireRDMAWrite8B(b *testing.B)  { benchWrite(b, 8, true) }
func BenchmarkWireRDMAWrite64K(b *testing.B) { benchWrite(b, 64<<10, true) }

var memcpySink []byte

func benchMemcpy(b *testing.B, size int) {
	src, dst := make([]byte, size), make([]byte, size)
	fill(src, 1)
	b.SetBytes(int64(size))
	b.ResetTimer()
	for range b.N {
		copy(dst, src)
	}
	memcpySink = dst
}

func BenchmarkMemcpy8B(b *testing.B)  { benchMemcpy(b, 8) }
func BenchmarkMemcpy64K(b *testing.B) { benchMemcpy(b, 64<<10) }

// BenchmarkBellWake is what one doorbell wake costs the daemon with n QPs
// that can send (connected pairs, RTS) and nothing posted: the work of
// the doorbell's goroutine between two sleeps for a client that rang for
// one QP (it marks the QP, as RingBell does), which issue #25 wants the
// same at 4,096 QPs as at 16 (scripts/bench-qps.sh).
func BenchmarkBellWake(b *testing.B) {
	for _, n := range []int{16, 4096} {
		b.Run(fmt.Sprintf("qps=%d", n), func(b *testing.B) {
			e := newEnv(b, func(c *Config) { c.MaxQP, c.MaxCQ, c.UserShare = uint32(n)+16, uint32(n)+16, 100 })
			var qs []*QP
			for len(qs) < n {
				a, bq, _, _ := e.pair(qp.TypeRC)
				qs = append(qs, a, bq)
			}
			e.quiesce()
			q := qs[len(qs)/2]
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				e.d.bell.r.MarkBell(q.QPN)
				e.d.bellWake()
			}
		})
	}
}

// BenchmarkWriteQPs is bench/c/qpscale.c in the daemon's process: one
// goroutine posts 8-byte RDMA WRITEs round-robin over n RC QPs connected
// in pairs (one QP: to itself), straight into their mapped send rings as
// a client does, signalling one in 16, and rings the doorbell for the QP
// when NEED_WAKEUP asks. It reaches 4,096 QPs where the C program, whose
// ring files the daemon keeps descriptors for, hits this host's limit of
// 20,000 (scripts/bench-qps.sh).
func BenchmarkWriteQPs(b *testing.B) {
	for _, n := range []int{1, 16, 256, 4096} {
		b.Run(fmt.Sprintf("qps=%d", n), func(b *testing.B) { benchWriteQPs(b, n) })
	}
}

func benchWriteQPs(b *testing.B, n int) {
	const depth, sig = 64, 16
	e := newEnv(b, func(c *Config) {
		c.Clock = clock.Real{}
		c.MaxQP, c.UserShare = uint32(n)+16, 100
	})
	cq := e.cq(uint32(n * depth / sig))
	qs := make([]*QP, n)
	for i := range qs {
		qs[i] = e.qp(qpOpts{scq: cq, rcq: cq, cap: qp.Cap{MaxSendWR: depth, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	}
	for i, q := range qs {
		peer := q
		if n > 1 {
			peer = qs[i^1]
		}
		e.connect(q, peer.QPN, "")
	}
	src := e.mr(64, qp.AccessLocalWrite)
	dst := e.mr(uint64(8*n), qp.AccessLocalWrite|qp.AccessRemoteWrite)
	bell, err := ring.Attach(e.d.Doorbell().Bytes(), ring.KindDoorbell)
	if err != nil {
		b.Fatal(err)
	}
	type sender struct {
		p            *ring.Producer
		posted, done int
	}
	s := make([]sender, n)
	for i, q := range qs {
		s[i].p = ring.NewProducer(q.sq)
	}
	reap := func() {
		wcs, err := cq.Poll(64)
		if err != nil {
			b.Fatal(err)
		}
		for _, wc := range wcs {
			if wc.Status != qp.WCSuccess {
				b.Fatalf("completion %v", wc.Status)
			}
			s[wc.WRID].done += sig
		}
		if len(wcs) == 0 {
			runtime.Gosched()
		}
	}
	w := qp.SendWR{Opcode: qp.WRRDMAWrite, SGL: []qp.SGE{{Length: 8, LKey: src.LKey}}, RKey: dst.RKey}
	b.ResetTimer()
	for k, i := 0, 0; k < b.N; k, i = k+1, (i+1)%n {
		x := &s[i]
		for x.posted-x.done >= depth {
			reap()
		}
		w.WRID, w.RemoteAddr = uint64(i), uint64(8*i)
		w.SendFlags = 0
		if x.posted%sig == sig-1 {
			w.SendFlags = qp.SendSignaled
		}
		if err := ring.EncodeSendWQE(x.p.Next(), &w); err != nil {
			b.Fatal(err)
		}
		x.p.Advance()
		x.p.Publish()
		x.posted++
		if qs[i].sq.NeedWakeup() {
			bell.RingBell(qs[i].QPN)
		}
	}
	for i := range s {
		for s[i].done+sig <= s[i].posted {
			reap()
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds()/1e6, "Mpps")
}
