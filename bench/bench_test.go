package bench

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"rdmafs/device"
	"rdmafs/fsnode"
	"rdmafs/internal/testmount"
	"rdmafs/verbs"
)

func benchMount(t testing.TB) string {
	t.Helper()
	dir, _ := testmount.Mount(t, testmount.Device(t, device.DefaultConfig()), fsnode.Options{})
	return dir
}

// The data check is not vacuous: memory spoiled after the run fails it,
// and the bench exits 1.
func TestBenchCheckCatchesBadData(t *testing.T) {
	mnt := benchMount(t)
	for _, op := range []string{"write", "read", "fetch_add"} {
		beforeCheck = func(b *bench, size int) {
			p := b.pairs[0]
			switch op {
			case "write":
				p.mb.Buf[b.buf+size/2]++
			case "read":
				p.ma.Buf[b.buf+size/2]++
			case "fetch_add":
				p.mb.Buf[p.atomicWord]++
			}
		}
		c := Config{Op: op, Mode: "bw", Sizes: []int{64}, Iters: 10, Warmup: -1, RxDepth: 512, QPs: 1, PostList: 1, Mount: mnt}
		if err := c.Complete(); err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		err := Run(&c, &out)
		if err == nil || !strings.Contains(err.Error(), "data check failed") || !strings.Contains(out.String(), "data check: FAILED") {
			t.Errorf("%s: spoiled memory passed: %v\n%s", op, err, &out)
		}
	}
	beforeCheck = nil
}

// --threads 2 with --qps 2: two OS threads, one pair each, and the result
// is their sum: every pair did its iterations (on its own CQs), each
// thread its pair's, the aggregate both; with a duration, the aggregate is
// still the threads' sum.
func TestBenchThreadsSum(t *testing.T) {
	mnt := benchMount(t)
	const iters, qps, threads = 200, 2, 2
	var stats []threadStat
	var done []uint64
	beforeCheck = func(b *bench, size int) {
		stats = append([]threadStat(nil), b.threads...)
		done = done[:0]
		for _, p := range b.pairs {
			done = append(done, p.done)
		}
		cqs := map[*verbs.CQ]bool{}
		for _, p := range b.pairs {
			for _, cq := range []*verbs.CQ{p.aSCQ, p.aRCQ, p.bSCQ, p.bRCQ} {
				if cqs[cq] {
					t.Errorf("a CQ is shared between QPs")
				}
				cqs[cq] = true
			}
		}
	}
	defer func() { beforeCheck = nil }()
	for _, dur := range []time.Duration{0, 50 * time.Millisecond} {
		c := Config{Op: "write", Mode: "bw", Sizes: []int{4096}, Iters: iters, Duration: dur, Warmup: 0, RxDepth: 512,
			QPs: qps, Threads: threads, PostList: 1, Mount: mnt, JSON: true}
		if err := c.Complete(); err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		if err := Run(&c, &out); err != nil {
			t.Fatalf("duration %v: %v\n%s", dur, err, &out)
		}
		var r Result
		if err := json.Unmarshal(out.Bytes(), &r); err != nil {
			t.Fatalf("%q: %v", &out, err)
		}
		if r.Check != "ok" || r.Threads != threads || r.QPs != qps || !strings.Contains(out.String(), `"threads":2`) {
			t.Errorf("duration %v: result %+v", dur, r)
		}
		if len(stats) != threads || stats[0].tid == 0 || stats[0].tid == stats[1].tid {
			t.Fatalf("duration %v: threads %+v, want %d on distinct OS threads", dur, stats, threads)
		}
		var sum uint64
		for i, s := range stats {
			sum += s.wrs
			// Thread i drove pair i alone (no warm-up: done counts this
			// phase only).
			if s.wrs != done[i] {
				t.Errorf("duration %v: thread %d completed %d WRs, its pair %d", dur, i, s.wrs, done[i])
			}
			if dur == 0 && s.wrs != iters*qps/threads {
				t.Errorf("thread %d: %d WRs, want %d", i, s.wrs, iters*qps/threads)
			}
		}
		if r.WRs != sum || r.Iterations != sum/qps || r.Seconds <= 0 || r.MsgRate <= 0 || r.BWPeak < r.BWAvg {
			t.Errorf("duration %v: aggregate %+v, threads' sum %d WRs", dur, r, sum)
		}
		if dur == 0 && (r.WRs != iters*qps || r.Iterations != iters) {
			t.Errorf("aggregate %d WRs, %d iterations; want %d and %d", r.WRs, r.Iterations, iters*qps, iters)
		}
	}
}

// --threads must divide --qps, and is for bw mode only.
func TestBenchThreadsConfig(t *testing.T) {
	for _, c := range []Config{
		{Op: "write", Mode: "bw", QPs: 2, Threads: 3},
		{Op: "write", Mode: "bw", QPs: 3, Threads: 2},
		{Op: "write", Mode: "bw", QPs: 1, Threads: -1},
		{Op: "write", Mode: "lat", QPs: 2, Threads: 2},
		{Op: "memcpy", Mode: "bw", QPs: 2, Threads: 2},
	} {
		c.RxDepth, c.PostList, c.Warmup = 512, 1, -1
		if err := c.Complete(); err == nil || !strings.Contains(err.Error(), "--threads") {
			t.Errorf("qps %d threads %d %s: %v", c.QPs, c.Threads, c.Mode, err)
		}
	}
	for _, q := range [][2]int{{1, 0}, {1, 1}, {4, 2}, {4, 4}, {3, 3}} {
		c := Config{Op: "write", Mode: "bw", QPs: q[0], Threads: q[1], RxDepth: 512, PostList: 1, Warmup: -1}
		if err := c.Complete(); err != nil || c.Threads != max(1, q[1]) {
			t.Errorf("qps %d threads %d: %v (threads %d)", q[0], q[1], err, c.Threads)
		}
	}
}
