package verbs

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"rdmafs/device"
)

// TestStressLifecycles: many goroutines at once create objects, connect
// QPs, post and poll, move QPs to ERR or RESET in the middle of traffic,
// and destroy everything, on one device whose fault injector drops and
// duplicates packets. Every signaled WR must complete exactly once
// (success, error or flush) — or not at all after a RESET, which discards
// without completions — no goroutine may hang (bounded by deadlines) and
// the race detector watches.
func TestStressLifecycles(t *testing.T) {
	workers, rounds, wrs := 6, 6, 48
	if testing.Short() {
		workers, rounds = 3, 3
	}
	e := mount(t, testOpts)
	if err := e.dev.SetFaults(faultSpec(0.02, 0.02)); err != nil {
		t.Fatal(err)
	}
	before := runtime.NumGoroutine()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var stats [4]int // success, error, flush, discarded
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for r := 0; r < rounds; r++ {
				s, err := stressRound(e, rng, wrs)
				if err != nil {
					t.Errorf("worker %d round %d: %v", w, r, err)
					return
				}
				mu.Lock()
				for i := range stats {
					stats[i] += s[i]
				}
				mu.Unlock()
			}
		}(w)
	}
	wg.Wait()
	t.Logf("completions: %d success, %d error, %d flushed, %d discarded by reset; goroutines %d -> %d",
		stats[0], stats[1], stats[2], stats[3], before, runtime.NumGoroutine())
	if stats[0] == 0 {
		t.Fatal("no work succeeded")
	}
}

// stressRound runs one lifecycle and counts completions by kind.
func stressRound(e *env, rng *rand.Rand, wrs int) (s [4]int, err error) {
	c := e.ctx
	pd, err := c.AllocPD()
	if err != nil {
		return s, err
	}
	cq, err := c.CreateCQ(4 * wrs)
	if err != nil {
		return s, err
	}
	mr, err := pd.RegMR(1<<16, allAccess)
	if err != nil {
		return s, err
	}
	capa := QPCap{MaxSendWR: uint32(wrs), MaxRecvWR: uint32(wrs), MaxSendSGE: 1, MaxRecvSGE: 1}
	a, err := pd.CreateQP(QPInitAttr{Type: QPTypeRC, SendCQ: cq, RecvCQ: cq, Cap: capa})
	if err != nil {
		return s, err
	}
	b, err := pd.CreateQP(QPInitAttr{Type: QPTypeRC, SendCQ: cq, RecvCQ: cq, Cap: capa})
	if err != nil {
		return s, err
	}
	// A short retransmit timeout so that dropped packets are resent soon.
	ca := ConnectAttr{DestQPN: b.QPN, DGID: e.gid, Timeout: 8}
	cb := ConnectAttr{DestQPN: a.QPN, DGID: e.gid, Timeout: 8}
	if err := a.Connect(ca); err != nil {
		return s, err
	}
	if err := b.Connect(cb); err != nil {
		return s, err
	}
	for i := 0; i < wrs; i++ {
		if err := b.PostRecv(RecvWR{WRID: uint64(1000 + i), SGL: []SGE{mr.SGE(32768+i*64, 64)}}); err != nil {
			return s, err
		}
	}
	outstanding := map[uint64]bool{}
	for i := 0; i < wrs; i++ {
		wr := SendWR{WRID: uint64(i), Opcode: WRRDMAWrite, SendFlags: SendSignaled,
			SGL: []SGE{mr.SGE(i*64, 64)}, RemoteAddr: mr.Addr(16384 + i*64), RKey: mr.RKey}
		if i%3 == 0 {
			wr = SendWR{WRID: uint64(i), Opcode: WRSend, SendFlags: SendSignaled, SGL: []SGE{mr.SGE(i*64, 32)}}
		}
		if err := a.PostSend(wr); err != nil {
			return s, err
		}
		outstanding[uint64(i)] = true
	}
	for i := 0; i < wrs/3+1; i++ {
		outstanding[uint64(1000+i*3)] = false // receives the sends will use
	}
	// Disturb: nothing, an ERR, or a RESET in the middle of the traffic.
	disturb := rng.IntN(3)
	time.Sleep(time.Duration(rng.IntN(200)) * time.Microsecond)
	reset := false
	switch disturb {
	case 1:
		if err := a.Modify(&QPAttr{QPState: StateErr}, QPAttrState); err != nil {
			return s, err
		}
	case 2:
		if err := a.Modify(&QPAttr{QPState: StateReset}, QPAttrState); err != nil {
			return s, err
		}
		reset = true
	}
	// Collect the sender's completions: each WR at most once, all of them
	// unless a RESET discarded some.
	seen := map[uint64]int{}
	buf := make([]WC, 32)
	deadline := time.Now().Add(20 * time.Second)
	for {
		n, err := cq.PollCQ(buf)
		if err != nil {
			return s, err
		}
		for _, wc := range buf[:n] {
			if wc.QPNum != a.QPN {
				continue
			}
			seen[wc.WRID]++
			if seen[wc.WRID] > 1 {
				return s, fmt.Errorf("wr %d completed twice", wc.WRID)
			}
			switch {
			case wc.Status == WCSuccess:
				s[0]++
			case wc.Status == WCWRFlushErr:
				s[2]++
			default:
				s[1]++
			}
		}
		if len(seen) == wrs || (reset && n == 0 && time.Since(deadline.Add(-20*time.Second)) > 100*time.Millisecond) {
			break
		}
		if time.Now().After(deadline) {
			return s, fmt.Errorf("%d of %d send completions after 20 s (disturb %d)", len(seen), wrs, disturb)
		}
		if n == 0 {
			time.Sleep(50 * time.Microsecond)
		}
	}
	if reset {
		s[3] += wrs - len(seen)
	}
	// Tear down in the verbs order; a QP may still be busy flushing.
	for _, q := range []*QP{a, b} {
		if err := q.Destroy(); err != nil {
			return s, err
		}
	}
	if err := cq.Destroy(); err != nil {
		return s, err
	}
	if err := mr.Dereg(); err != nil {
		return s, err
	}
	return s, pd.Dealloc()
}

func faultSpec(drop, dup float64) device.Faults {
	return device.Faults{Drop: drop, Dup: dup, Seed: 11}
}

// TestUnmountRacingWork: the device is unmounted while goroutines create,
// post, poll and destroy. Every call returns (an error is fine), nothing
// hangs, nothing panics, mapped memory stays readable.
func TestUnmountRacingWork(t *testing.T) {
	e := mount(t, testOpts)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 9))
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := stressRound(e, rng, 8); err != nil {
					return // the device went away under us: expected
				}
			}
		}(w)
	}
	time.Sleep(30 * time.Millisecond) // let the work get going (not an assertion)
	if err := e.srv.Unmount(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		close(stop)
		t.Fatal("workers hung after the unmount")
	}
	close(stop)
}
