package verbs

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"rdmafs/device"
)

// steadySetup is a connected QP pair on a device whose engine, once it has
// run a QP, keeps polling its send ring for a minute instead of parking:
// the steady state of a busy client, in which NEED_WAKEUP stays clear. One
// WRITE is posted and completed first, the only one that rings a doorbell
// (the engine parks with NEED_WAKEUP set after creation).
func steadySetup(t testing.TB) (*env, *pair, SendWR) {
	if tt, ok := t.(*testing.T); ok {
		tt.Setenv("RDMAFS_ALWAYS_DOORBELL", "")
	}
	e := mountConfig(t, Options{}, func(c *device.Config) { c.SpinIdle = time.Minute })
	p := e.rcPair(QPTypeRC, 64, QPCap{MaxSendWR: 16, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}, 4096)
	wr := SendWR{WRID: 1, Opcode: WRRDMAWrite, SendFlags: SendSignaled, SGL: []SGE{p.ma.SGE(0, 8)},
		RemoteAddr: p.mb.Addr(0), RKey: p.mb.RKey}
	if err := p.a.PostSend(wr); err != nil {
		t.Fatal(err)
	}
	pollN(t, p.cq, 1)
	// The modifies ran the QP, so the engine may already be polling its
	// ring: zero or one doorbell.
	if p.a.Doorbells() > 1 {
		t.Fatalf("first post: %d doorbells", p.a.Doorbells())
	}
	// The daemon counts a doorbell when its goroutine wakes, which on a
	// loaded machine can be after the completion: let it count that one
	// before the tests take their baseline.
	for deadline := time.Now().Add(5 * time.Second); e.dev.Counters.Doorbells.Load() < p.a.Doorbells() && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	return e, p, wr
}

// postPollOne posts wr and polls until its completion arrives. With yield
// it gives up the P while the CQ is empty (AllocsPerRun runs with
// GOMAXPROCS=1, and the engine needs a turn); the Go scheduler then makes
// futex calls of its own.
func postPollOne(p *pair, wr *SendWR, wc []WC, yield bool) error {
	if err := p.a.PostSend(*wr); err != nil {
		return err
	}
	for {
		n, err := p.cq.PollCQ(wc)
		if err != nil {
			return err
		}
		if n == 1 {
			if wc[0].Status != WCSuccess {
				return fmt.Errorf("completion %v", wc[0].Status)
			}
			return nil
		}
		if yield {
			runtime.Gosched()
		}
	}
}

// TestLibraryNoDoorbellNoAlloc: with NEED_WAKEUP clear, PostSend rings no
// doorbell (neither the library's count nor the daemon's moves) and
// allocates nothing, and neither does PollCQ. testing.AllocsPerRun counts
// the whole process, daemon included, so the engine must be idle while it
// counts: the device never spins (it parks after every batch), the test
// clears NEED_WAKEUP through the client's mapping as a polling engine
// would, and afterwards runs the engine by a direct call, not a doorbell.
func TestLibraryNoDoorbellNoAlloc(t *testing.T) {
	const runs = 500
	t.Setenv("RDMAFS_ALWAYS_DOORBELL", "")
	e := mountConfig(t, Options{}, func(c *device.Config) { c.SpinIdle = -1 })
	p := e.rcPair(QPTypeRC, 4096, QPCap{MaxSendWR: 1024, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}, 4096)
	wr := SendWR{WRID: 1, Opcode: WRRDMAWrite, SendFlags: SendSignaled, SGL: []SGE{p.ma.SGE(0, 8)},
		RemoteAddr: p.mb.Addr(0), RKey: p.mb.RKey}
	e.dev.Quiesce()
	p.a.send.r.SetNeedWakeup(false)
	bells := e.dev.Counters.Doorbells.Load()
	done := e.dev.Counters.Completions.Load()
	if allocs := testing.AllocsPerRun(runs, func() {
		if err := p.a.PostSend(wr); err != nil {
			panic(err)
		}
	}); allocs != 0 {
		t.Errorf("PostSend: %v allocations per call", allocs)
	}
	copy(p.ma.Buf[64:], "inline")
	inl := SendWR{WRID: 2, Opcode: WRRDMAWrite, SendFlags: SendSignaled | SendInline, SGL: []SGE{p.ma.SGE(64, 6)},
		RemoteAddr: p.mb.Addr(64), RKey: p.mb.RKey}
	if allocs := testing.AllocsPerRun(100, func() {
		if err := p.a.PostSend(inl); err != nil {
			panic(err)
		}
	}); allocs != 0 {
		t.Errorf("inline PostSend (gathered from an MR): %v allocations per call", allocs)
	}
	if got := p.a.Doorbells(); got != 0 {
		t.Errorf("PostSend rang %d doorbells with NEED_WAKEUP clear", got)
	}
	if got := e.dev.Counters.Doorbells.Load() - bells; got != 0 {
		t.Errorf("the daemon saw %d doorbells", got)
	}
	e.kickAndWait(t, p.a, done, runs+1+100+1)
	e.dev.Quiesce()
	buf := make([]WC, 1)
	if allocs := testing.AllocsPerRun(runs, func() {
		if n, err := p.cq.PollCQ(buf); n != 1 || err != nil {
			panic(fmt.Sprint(n, err))
		}
	}); allocs != 0 {
		t.Errorf("PollCQ: %v allocations per call", allocs)
	}
	if string(p.mb.Buf[64:70]) != "inline" {
		t.Errorf("inline write: %q", p.mb.Buf[64:70])
	}
}

// TestSteadyStateNoDoorbell: a program that keeps posting and polling
// while the engine polls its ring rings no doorbell. The allocations of
// the whole round trip (engine included) are logged, not asserted: they
// are the daemon's business.
func TestSteadyStateNoDoorbell(t *testing.T) {
	e, p, wr := steadySetup(t)
	bells, libBells := e.dev.Counters.Doorbells.Load(), p.a.Doorbells()
	wc := make([]WC, 1)
	allocs := testing.AllocsPerRun(300, func() {
		if err := postPollOne(p, &wr, wc, true); err != nil {
			panic(err)
		}
	})
	if got := p.a.Doorbells() - libBells; got != 0 {
		t.Errorf("%d doorbells while the engine polled the ring", got)
	}
	if got := e.dev.Counters.Doorbells.Load() - bells; got != 0 {
		t.Errorf("the daemon saw %d doorbells", got)
	}
	t.Logf("RDMA WRITE round trip, whole process (library 0, the rest the in-process engine's): %v allocations", allocs)
}

// kickAndWait runs the engine for q without the library (a direct call
// into the in-process device, no FUSE) and waits for n completions
// counted from before.
func (e *env) kickAndWait(t testing.TB, q *QP, before uint64, n int) {
	e.dev.QP(q.QPN).Kick()
	deadline := time.Now().Add(10 * time.Second)
	for e.dev.Counters.Completions.Load() < before+uint64(n) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d completions", e.dev.Counters.Completions.Load()-before, n)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// TestDoorbellWhenParked: an engine that parks after every batch (it does
// not spin) sets NEED_WAKEUP, and the library rings for it; every WR
// completes, and no batch rings more than once.
func TestDoorbellWhenParked(t *testing.T) {
	t.Setenv("RDMAFS_ALWAYS_DOORBELL", "")
	e := mountConfig(t, Options{}, func(c *device.Config) { c.SpinIdle = -1 })
	p := e.rcPair(QPTypeRC, 64, QPCap{MaxSendWR: 16, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}, 4096)
	wr := SendWR{WRID: 1, Opcode: WRRDMAWrite, SendFlags: SendSignaled, SGL: []SGE{p.ma.SGE(0, 8)},
		RemoteAddr: p.mb.Addr(0), RKey: p.mb.RKey}
	const batches = 200
	for range batches {
		if err := p.a.PostSend(wr, wr); err != nil {
			t.Fatal(err)
		}
		pollN(t, p.cq, 2)
	}
	if n := p.a.Doorbells(); n < 1 || n > batches {
		t.Errorf("%d doorbells for %d batches", n, batches)
	}
	t.Logf("%d doorbells for %d batches with an engine that never spins", p.a.Doorbells(), batches)
}

// Markers the strace child makes around the measured loop: failing
// faccessat calls on impossible paths, easy to find in the trace.
const (
	markBegin  = "/rdmafs-verbs-steady-begin"
	markEnd    = "/rdmafs-verbs-steady-end"
	straceRuns = 1000
)

func mark(path string) { unix.Faccessat(unix.AT_FDCWD, path, unix.F_OK, 0) }

// runtimeSyscalls are what the Go scheduler may do on any thread it
// deschedules (async preemption of a locked thread); none is the library's.
var runtimeSyscalls = []string{"futex(", "sched_yield(", "nanosleep(", "rt_sigreturn(", "rt_sigprocmask(", "sigaltstack("}

// TestSteadyStateNoSyscalls proves with strace(1) that posting and polling
// make no system call in steady state: the test binary runs itself under
// strace -f; one goroutine locked to one OS thread posts and polls
// straceRuns RDMA WRITEs to completion between two markers, and that
// thread must show no system call there but those of the Go scheduler.
func TestSteadyStateNoSyscalls(t *testing.T) {
	if os.Getenv("RDMAFS_VERBS_STRACE_CHILD") == "1" {
		straceChild(t)
		return
	}
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("needs two Ps: the engine spins on one")
	}
	if raceEnabled {
		t.Skip("the race detector's runtime makes system calls of its own; run without -race")
	}
	strace, err := exec.LookPath("strace")
	if err != nil {
		t.Skip("strace not installed")
	}
	out := filepath.Join(t.TempDir(), "trace")
	cmd := exec.Command(strace, "-f", "-qq", "-o", out, os.Args[0],
		"-test.run=^TestSteadyStateNoSyscalls$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "RDMAFS_VERBS_STRACE_CHILD=1", "RDMAFS_ALWAYS_DOORBELL=")
	b, err := cmd.CombinedOutput()
	if strings.Contains(string(b), "--- SKIP") {
		t.Skipf("child skipped: %s", b)
	}
	if err != nil {
		if strings.Contains(strings.ToLower(string(b)), "ptrace") {
			t.Skipf("strace cannot trace here: %s", b)
		}
		t.Fatalf("child under strace: %v\n%s", err, b)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// Lines are "TID syscall(...) = ...". Collect what the thread that
	// made the begin marker did until its end marker.
	inside := map[string]bool{}
	var calls []string
	regions := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		tid, rest, _ := strings.Cut(sc.Text(), " ")
		rest = strings.TrimSpace(rest)
		switch {
		case strings.Contains(rest, markBegin):
			inside[tid] = true
			regions++
		case strings.Contains(rest, markEnd):
			delete(inside, tid)
		case inside[tid]:
			calls = append(calls, rest)
		}
	}
	if regions != 1 {
		t.Fatalf("found %d marked regions in the trace, want 1", regions)
	}
	var lib, rt []string
next:
	for _, c := range calls {
		// Signal deliveries, and the end of a marker call that another
		// thread's line interrupted, are not system calls of the loop.
		if strings.HasPrefix(c, "---") || strings.HasPrefix(c, "<... faccessat resumed>") {
			continue
		}
		for _, r := range runtimeSyscalls {
			if strings.HasPrefix(c, r) || strings.HasPrefix(c, "<... "+strings.TrimSuffix(r, "(")+" resumed>") {
				rt = append(rt, c)
				continue next
			}
		}
		lib = append(lib, c)
	}
	if len(lib) != 0 {
		t.Errorf("%d system calls while posting and polling:\n%s", len(lib), strings.Join(lib, "\n"))
	}
	t.Logf("strace: %d RDMA WRITEs posted and polled to completion by one thread: %d system calls (%d of the Go scheduler)",
		straceRuns, len(lib), len(rt))
}

// straceChild runs under strace: set up, then post and poll straceRuns
// WRITEs on one locked thread between the markers.
func straceChild(t *testing.T) {
	_, p, wr := steadySetup(t)
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		wc := make([]WC, 1)
		mark(markBegin)
		for range straceRuns {
			if err := postPollOne(p, &wr, wc, false); err != nil {
				errc <- err
				return
			}
		}
		mark(markEnd)
		errc <- nil
	}()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if n := p.a.Doorbells(); n > 1 {
		t.Fatalf("%d doorbells, want at most the first post's", n)
	}
}
