package verbs

import (
	"runtime"
	"testing"

	"golang.org/x/sys/unix"

	"rdmafs/device"
)

// benchPair is a connected RC pair for benchmarks, through the library
// only, ringing doorbells only for NEED_WAKEUP or, with always, after
// every post batch.
func benchPair(b *testing.B, size int, always bool) *pair {
	b.Setenv("RDMAFS_ALWAYS_DOORBELL", "")
	e := mount(b, Options{AlwaysDoorbell: always})
	return e.rcPair(QPTypeRC, 256, QPCap{MaxSendWR: 128, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}, size)
}

// postPoll posts one signaled WRITE of n bytes and polls until it
// completes.
func postPoll(b *testing.B, p *pair, wr *SendWR, wc []WC) {
	if err := p.a.PostSend(*wr); err != nil {
		b.Fatal(err)
	}
	for {
		n, err := p.cq.PollCQ(wc)
		if err != nil {
			b.Fatal(err)
		}
		if n == 1 {
			if wc[0].Status != WCSuccess {
				b.Fatalf("wc: %+v", wc[0])
			}
			return
		}
		runtime.Gosched()
	}
}

func benchWrite(b *testing.B, size int) {
	b.Run("needwakeup", func(b *testing.B) { benchWriteWith(b, size, false) })
	b.Run("alwaysdoorbell", func(b *testing.B) { benchWriteWith(b, size, true) })
}

func benchWriteWith(b *testing.B, size int, always bool) {
	p := benchPair(b, size, always)
	wr := SendWR{WRID: 1, Opcode: WRRDMAWrite, SendFlags: SendSignaled, SGL: []SGE{p.ma.SGE(0, size)},
		RemoteAddr: p.mb.Addr(0), RKey: p.mb.RKey}
	wc := make([]WC, 1)
	postPoll(b, p, &wr, wc)
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		postPoll(b, p, &wr, wc)
	}
	b.StopTimer()
	b.ReportMetric(float64(p.a.Doorbells())/float64(b.N+1), "doorbells/op")
}

// BenchmarkPostPollWrite8B: one 8-byte RDMA WRITE between two loopback QPs,
// posted and polled to completion, one at a time (latency).
func BenchmarkPostPollWrite8B(b *testing.B) { benchWrite(b, 8) }

// BenchmarkWrite64K: one 64 KiB RDMA WRITE at a time (bandwidth).
func BenchmarkWrite64K(b *testing.B) { benchWrite(b, 64<<10) }

// BenchmarkWrite64KPipelined keeps 32 WRITEs of 64 KiB in flight, one
// doorbell per batch of 32.
func BenchmarkWrite64KPipelined(b *testing.B) {
	const size, depth = 64 << 10, 32
	p := benchPair(b, size, false)
	wrs := make([]SendWR, depth)
	for i := range wrs {
		wrs[i] = SendWR{WRID: uint64(i), Opcode: WRRDMAWrite, SendFlags: SendSignaled, SGL: []SGE{p.ma.SGE(0, size)},
			RemoteAddr: p.mb.Addr(0), RKey: p.mb.RKey}
	}
	wc := make([]WC, depth)
	b.SetBytes(size * depth)
	b.ReportAllocs()
	for b.Loop() {
		if err := p.a.PostSend(wrs...); err != nil {
			b.Fatal(err)
		}
		for got := 0; got < depth; {
			n, err := p.cq.PollCQ(wc)
			if err != nil {
				b.Fatal(err)
			}
			got += n
			if n == 0 {
				runtime.Gosched()
			}
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(p.a.Doorbells())/float64(b.N), "doorbells/op")
}

// BenchmarkDoorbell is the cost of one doorbell: a one-byte write to
// qp/N/sq, a FUSE request that kicks the engine (with nothing to do).
func BenchmarkDoorbell(b *testing.B) {
	p := benchPair(b, 8, false)
	var bell [1]byte
	for b.Loop() {
		if _, err := unix.Write(p.a.send.region.Fd(), bell[:]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPostPollWrite8BKickInProc is BenchmarkPostPollWrite8B with the
// doorbell replaced by a direct call into the in-process engine: what a
// WRITE costs without FUSE on the path (an engine that polls its rings
// would save the doorbell too).
func BenchmarkPostPollWrite8BKickInProc(b *testing.B) {
	b.Setenv("RDMAFS_ALWAYS_DOORBELL", "")
	e := mount(b, Options{})
	p := e.rcPair(QPTypeRC, 256, QPCap{MaxSendWR: 128, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}, 8)
	wr := SendWR{WRID: 1, Opcode: WRRDMAWrite, SendFlags: SendSignaled, SGL: []SGE{p.ma.SGE(0, 8)},
		RemoteAddr: p.mb.Addr(0), RKey: p.mb.RKey}
	q := e.dev.QP(p.a.QPN)
	wc := make([]WC, 1)
	for b.Loop() {
		if err := p.a.PostSend(wr); err != nil {
			b.Fatal(err)
		}
		q.Kick()
		for {
			n, err := p.cq.PollCQ(wc)
			if err != nil {
				b.Fatal(err)
			}
			if n == 1 {
				break
			}
			runtime.Gosched()
		}
	}
}

var sink []byte

// BenchmarkMemcpy8B and BenchmarkMemcpy64K: the same bytes copied by the
// CPU, for scale.
func BenchmarkMemcpy8B(b *testing.B)  { benchMemcpy(b, 8) }
func BenchmarkMemcpy64K(b *testing.B) { benchMemcpy(b, 64<<10) }

func benchMemcpy(b *testing.B, size int) {
	src, dst := make([]byte, size), make([]byte, size)
	b.SetBytes(int64(size))
	for b.Loop() {
		copy(dst, src)
	}
	sink = dst
}

// BenchmarkParkedEngine: one 8-byte WRITE posted and polled to completion
// with the engine parked before every post (no spinning), so every post
// pays a doorbell: the futex doorbell (MOUNT/doorbell) against the write()
// to the sq file. The difference is the cost of waking the engine.
func BenchmarkParkedEngine(b *testing.B) {
	for _, c := range []struct {
		name  string
		write bool
	}{{"futex", false}, {"write", true}} {
		b.Run(c.name, func(b *testing.B) {
			b.Setenv("RDMAFS_ALWAYS_DOORBELL", "")
			e := mountConfig(b, Options{WriteDoorbell: c.write}, func(cfg *device.Config) { cfg.SpinIdle = -1 })
			p := e.rcPair(QPTypeRC, 256, QPCap{MaxSendWR: 128, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}, 8)
			wr := SendWR{WRID: 1, Opcode: WRRDMAWrite, SendFlags: SendSignaled, SGL: []SGE{p.ma.SGE(0, 8)},
				RemoteAddr: p.mb.Addr(0), RKey: p.mb.RKey}
			wc := make([]WC, 1)
			postPoll(b, p, &wr, wc)
			before := p.a.Doorbells()
			b.ResetTimer()
			for b.Loop() {
				postPoll(b, p, &wr, wc)
			}
			b.StopTimer()
			b.ReportMetric(float64(p.a.Doorbells()-before)/float64(b.N), "doorbells/op")
		})
	}
}
