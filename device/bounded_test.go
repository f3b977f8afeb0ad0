package device

import (
	"flag"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"rdmafs/qp"
	"rdmafs/roce"
)

// Work is bounded per turn (issue 13, finding 6): one user's large READ
// must not hold the device for the length of the message, nor leave its
// size behind in the heap.

var bigReadMiB = flag.Int("device.bigread", 512, "MiB of the READ in TestBigReadKeepsControlLatency")

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// A 512 MiB RDMA READ between one user's QPs, while another user
// allocates and frees PDs (pd/new) in a loop: AllocPD keeps its latency
// (printed; asserted against generous bounds), and once everything is
// destroyed the live heap is back within a few MiB of where it was.
func TestBigReadKeepsControlLatency(t *testing.T) {
	if *wireFlag {
		// Across RoCEv2 nothing paces READ responses but the receiver's
		// socket buffer; a READ this size overflows it and the test
		// would measure go-back-N recovery, not the engine's turns.
		t.Skip("one device, loopback: what is measured is the engine's turn")
	}
	size := uint64(*bigReadMiB) << 20
	base := heapInUse()
	e := newEnv(t, func(c *Config) { c.Clock = nil }) // real timers: a long READ must not time out
	a, b, acq, bcq := e.pairX(qp.TypeRC, "path_mtu=4096", "path_mtu=4096")
	src := e.mr(size, rwAccess)
	dst := e.mr(size, qp.AccessLocalWrite)
	mem := src.Mem()
	for i := 0; i < len(mem); i += 4096 {
		mem[i] = byte(i >> 12)
	}
	mem[len(mem)-1] = 0x5A

	var (
		wg      sync.WaitGroup
		stop    = make(chan struct{})
		worst   time.Duration
		samples int
		sum     time.Duration
		lat     []time.Duration
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			t0 := time.Now()
			pd, err := e.d.AllocPD(1000)
			dt := time.Since(t0)
			if err != nil {
				t.Error(err)
				return
			}
			pd.Dealloc()
			samples++
			sum += dt
			lat = append(lat, dt)
			worst = max(worst, dt)
			time.Sleep(200 * time.Microsecond)
		}
	}()
	start := time.Now()
	e.postSend(a, fmt.Sprintf("opcode=rdma_read wr_id=1 send_flags=signaled sge=%d:0:%d remote_addr=0 rkey=%d", dst.LKey, size, src.RKey))
	var wcs []qp.WC
	for len(wcs) == 0 && time.Since(start) < 5*time.Minute {
		got, err := acq.Poll(1)
		if err != nil {
			t.Fatal(err)
		}
		wcs = got
		time.Sleep(time.Millisecond)
	}
	took := time.Since(start)
	close(stop)
	wg.Wait()
	if len(wcs) != 1 || wcs[0].Status != qp.WCSuccess || wcs[0].ByteLen != uint32(size) {
		t.Fatalf("READ completions %+v after %v", wcs, took)
	}
	for i := 0; i < len(mem); i += 4096 {
		if dst.Mem()[i] != byte(i>>12) {
			t.Fatalf("byte %d differs", i)
		}
	}
	if dst.Mem()[len(mem)-1] != 0x5A {
		t.Fatalf("last byte differs")
	}
	slices.Sort(lat)
	pct := func(p float64) time.Duration {
		if len(lat) == 0 {
			return 0
		}
		return lat[min(len(lat)-1, int(p*float64(len(lat))))]
	}
	t.Logf("READ of %d MiB took %v (%.0f MB/s); AllocPD while it ran: %d calls, mean %v, median %v, 99th %v, worst %v",
		size>>20, took, float64(size)/took.Seconds()/1e6, samples, sum/time.Duration(max(samples, 1)), pct(0.5), pct(0.99), worst)
	// Bounds relative to the READ's own time, because CI runs the script
	// suites' real programs beside this package and a loaded machine
	// slows both alike (unloaded, with -race: median 0.2 ms, 99th
	// percentile under 4 ms; in one CI run, 54 ms of a 2.3 s READ). The
	// READ used to hold the device for all of its 7 s: then the calls are
	// a handful and one of them waits for nearly all of it.
	if samples < 10 || pct(0.99) > took/5 || worst > took/2 {
		t.Errorf("AllocPD: %d calls, 99th percentile %v, worst %v while the READ ran", samples, pct(0.99), worst)
	}
	e.expect(bcq)
	e.healthy(a, b)

	for _, q := range []*QP{a, b} {
		if err := q.Destroy(); err != nil {
			t.Fatal(err)
		}
	}
	src.Dereg()
	dst.Dereg()
	acq.Destroy()
	bcq.Destroy()
	e.quiesce()
	after := heapInUse()
	t.Logf("live heap: %d KiB before, %d KiB after", base>>10, after>>10)
	if after > base+8<<20 {
		t.Errorf("live heap grew by %d MiB", (after-base)>>20)
	}
}

// Duplicate READ requests, as a requester retrying (or a forger using the
// requester's identity) sends them, are answered from the responder's
// saved resources one reply at a time: eleven duplicates of a 4 MiB READ
// that arrive together cost about one replay, not eleven, the requester's
// queue never holds more than the READ window, and the heap does not grow
// by the replies (eleven replies queued at once would be 44 MiB).
func TestDuplicateReadsBounded(t *testing.T) {
	const size = 4 << 20
	e := newEnv(t)
	a, b, acq, bcq := e.pairX(qp.TypeRC, "path_mtu=4096", "path_mtu=4096")
	src, dst := e.mr(size, rwAccess), e.mr(size, qp.AccessLocalWrite)
	fill(src.Mem()[:4096], 8)
	e.postSend(a, fmt.Sprintf("opcode=rdma_read wr_id=1 send_flags=signaled sge=%d:0:%d remote_addr=0 rkey=%d", dst.LKey, size, src.RKey))
	e.expect(acq, sendWC(1, "success", "rdma_read", a, size))
	sameBytes(t, dst.Mem()[:4096], src.Mem()[:4096])

	d := a.dev
	d.mu.Lock()
	first := a.req.swq[0].firstPSN
	a.inPeak = 0
	d.mu.Unlock()
	before := e.qpCounters(b)
	base := heapInUse()
	var peak uint64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapInuse)
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	d.mu.Lock()
	for i := 0; i < 11; i++ {
		p := d.engines[0].pool.get()
		p.Opcode = roce.TransportRC | roce.OpReadRequest
		p.setPSN(first)
		p.VA, p.RKey, p.DMALen = 0, src.RKey, size
		p.AckReq = true
		p.sgid, p.dgid = d.cfg.GID, a.attr.AH.DGID
		p.srcQPN, p.DestQP = a.QPN, b.QPN
		injectLocked(d, p)
	}
	d.mu.Unlock()
	e.quiesce()
	close(stop)
	<-done
	after := e.qpCounters(b)
	e.d.mu.Lock()
	inPeak := a.inPeak
	e.d.mu.Unlock()
	const perReply = size / 4096
	sent := after.PacketsSent - before.PacketsSent
	t.Logf("11 duplicate READs of %d MiB: %d response packets (one reply is %d), requester queue peak %d, heap in use +%d KiB",
		size>>20, sent, perReply, inPeak, (max(peak, base)-base)>>10)
	if after.DuplicateReqs-before.DuplicateReqs != 11 {
		t.Fatalf("duplicates counted %d", after.DuplicateReqs-before.DuplicateReqs)
	}
	if sent < perReply || sent > 2*perReply {
		t.Fatalf("%d response packets for 11 duplicates of a %d-packet READ", sent, perReply)
	}
	if !*wireFlag && inPeak > readWindow {
		t.Fatalf("the requester's queue held %d packets (window %d)", inPeak, readWindow)
	}
	if peak > base+16<<20 {
		t.Fatalf("heap in use peaked %d MiB above its base", (peak-base)>>20)
	}
	e.expect(acq)
	e.expect(bcq)
	e.healthy(a, b)
}
