package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"rdmafs/bench"
	"rdmafs/device"
	"rdmafs/fsnode"
	"rdmafs/internal/testmount"
)

// benchMount mounts a device served by this process in a temporary
// directory. Mounting needs root and /dev/fuse: without them the test
// skips, except in CI, where it fails.
func benchMount(t testing.TB) string {
	t.Helper()
	dev := testmount.Device(t, device.DefaultConfig())
	dir, _ := testmount.Mount(t, dev, fsnode.Options{RuntimeDir: filepath.Join(t.TempDir(), "run")})
	return dir
}

// runBench runs `rdmafs bench args...` and returns its stdout.
func runBench(t testing.TB, wantRC int, args ...string) string {
	t.Helper()
	var out, errb bytes.Buffer
	if rc := run(append([]string{"bench"}, args...), &out, &errb); rc != wantRC {
		t.Fatalf("rdmafs bench %s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), rc, wantRC, &out, &errb)
	}
	return out.String()
}

func parseJSONResults(t testing.TB, out string) []bench.Result {
	t.Helper()
	var rs []bench.Result
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var r bench.Result
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("not JSON: %q: %v", sc.Text(), err)
		}
		rs = append(rs, r)
	}
	return rs
}

// Every operation in both modes: the output parses, the numbers are
// plausible (no timing bounds), and the data moved is what it must be
// (the bench checks the memory after each size and reports it).
func TestBenchEveryOpAndMode(t *testing.T) {
	mnt := benchMount(t)
	for _, op := range []string{"write", "read", "send", "fetch_add", "cmp_swap"} {
		for _, mode := range []string{"bw", "lat"} {
			t.Run(op+"_"+mode, func(t *testing.T) {
				size := "4096"
				if mode == "lat" {
					size = "2"
				}
				out := runBench(t, 0, "--op", op, "--mode", mode, "-s", size, "--iters", "300", "--warmup", "10", "--json", mnt)
				rs := parseJSONResults(t, out)
				if len(rs) != 1 {
					t.Fatalf("%d results, want 1:\n%s", len(rs), out)
				}
				r := rs[0]
				want := 4096
				if op == "fetch_add" || op == "cmp_swap" {
					want = 8
				} else if mode == "lat" {
					want = 2
				}
				if r.Op != op || r.Mode != mode || r.Bytes != want || r.Iterations != 300 || r.Check != "ok" {
					t.Errorf("result %+v", r)
				}
				if mode == "bw" && (r.BWAvg <= 0 || r.MsgRate <= 0 || r.BWPeak < r.BWAvg || r.WRs != 300) {
					t.Errorf("bw numbers: %+v", r)
				}
				if mode == "lat" && !(r.TMin > 0 && r.TMin <= r.TTypical && r.TTypical <= r.T99 && r.T99 <= r.T999 && r.T999 <= r.TMax) {
					t.Errorf("latency numbers out of order: %+v", r)
				}
			})
		}
	}
}

// The table is perftest's: a title, a column header, one row per size
// (--all: 2 bytes to 8 MiB), a trailer with the doorbell and syscall
// counts.
func TestBenchTableAllSizes(t *testing.T) {
	mnt := benchMount(t)
	out := runBench(t, 0, "--op", "write", "--all", "--iters", "8", "--warmup", "1", "--tx-depth", "4", mnt)
	if !strings.Contains(out, "RDMA_Write BW Test") || !strings.Contains(out, "BW average[MB/sec]") {
		t.Fatalf("no perftest header:\n%s", out)
	}
	var sizes []int
	for l := range strings.Lines(out) {
		f := strings.Fields(l)
		if len(f) != 5 {
			continue
		}
		n, err := strconv.Atoi(f[0])
		if err != nil {
			continue
		}
		if it, err := strconv.Atoi(f[1]); err != nil || it != 8 {
			t.Errorf("row %q: iterations", l)
		}
		// Rates of a few tiny messages can round to 0.00 on a busy
		// machine: check the form, not the speed.
		for _, v := range f[2:] {
			if x, err := strconv.ParseFloat(v, 64); err != nil || x < 0 {
				t.Errorf("row %q: %q is not a rate", l, v)
			}
		}
		sizes = append(sizes, n)
	}
	if len(sizes) != 23 || sizes[0] != 2 || sizes[22] != 8<<20 {
		t.Errorf("sizes %v, want 2..8388608 by powers of two", sizes)
	}
	if !strings.Contains(out, "data check: ok") || !strings.Contains(out, "doorbells") {
		t.Errorf("trailer:\n%s", out)
	}

	out = runBench(t, 0, "--op", "send", "--mode", "lat", "-s", "64", "--iters", "50", mnt)
	if !strings.Contains(out, "t_typical[usec]") || !strings.Contains(out, "99.9% percentile[usec]") {
		t.Fatalf("no latency header:\n%s", out)
	}
}

// Several QP pairs, a post list, a duration, sizes that change under
// posted receives (send --all reuses the receives of the smaller size).
func TestBenchQPsDurationSend(t *testing.T) {
	mnt := benchMount(t)
	rs := parseJSONResults(t, runBench(t, 0, "--op", "write", "--qps", "3", "--post-list", "4", "-s", "1000", "--iters", "400", "--json", mnt))
	if len(rs) != 1 || rs[0].Check != "ok" || rs[0].WRs != 1200 || rs[0].Iterations != 400 || rs[0].QPs != 3 {
		t.Errorf("3 qps: %+v", rs)
	}
	rs = parseJSONResults(t, runBench(t, 0, "--op", "read", "-s", "8192", "--duration", "50ms", "--json", mnt))
	if len(rs) != 1 || rs[0].Check != "ok" || rs[0].WRs == 0 || rs[0].WRs%uint64(rs[0].CQMod) != 0 {
		t.Errorf("duration: %+v", rs)
	}
	rs = parseJSONResults(t, runBench(t, 0, "--op", "send", "--qps", "2", "--all", "--iters", "20", "--tx-depth", "8", "--rx-depth", "16", "--json", mnt))
	if len(rs) != 23 {
		t.Fatalf("send --all: %d results", len(rs))
	}
	for _, r := range rs {
		if r.Check != "ok" {
			t.Errorf("send %d bytes: %s", r.Bytes, r.Check)
		}
	}
	rs = parseJSONResults(t, runBench(t, 0, "--op", "cmp_swap", "--qps", "2", "--iters", "1000", "--json", mnt))
	if len(rs) != 1 || rs[0].Check != "ok" {
		t.Errorf("cmp_swap 2 qps: %+v", rs)
	}
}

// memcpy needs no mount; bad flags are usage errors.
func TestBenchMemcpyAndFlags(t *testing.T) {
	rs := parseJSONResults(t, runBench(t, 0, "--op", "memcpy", "-s", "65536", "--iters", "1000", "--json"))
	if len(rs) != 1 || rs[0].Check != "ok" || rs[0].BWAvg <= 0 || rs[0].Iterations < 1000 {
		t.Errorf("memcpy: %+v", rs)
	}
	for _, args := range [][]string{
		{"--op", "bogus", "/x"},
		{"--mode", "both", "/x"},
		{"--op", "memcpy", "--mode", "lat"},
		{"--op", "write"},
		{"--tx-depth", "-1", "/x"},
		{"--op", "memcpy", "--peer", "/y"},
		{"--qps", "3", "--threads", "2", "/x"},
		{"--mode", "lat", "--threads", "2", "/x"},
	} {
		runBench(t, 2, args...)
	}
	var out, errb bytes.Buffer
	if rc := run([]string{"bench", "--help"}, &out, &errb); rc != 0 {
		t.Fatalf("bench --help: exit %d", rc)
	}
	for _, f := range []string{"--op", "--mode", "--size", "--all", "--iters", "--duration", "--tx-depth", "--qps", "--threads", "--json", "--peer"} {
		if !strings.Contains(errb.String(), f) {
			t.Errorf("bench --help does not document %s", f)
		}
	}
}

// BenchmarkLoopback runs the bench in-process (device, FUSE server and
// client in one process) for profiles of where the time goes:
//
//	go test ./cmd/rdmafs -run '^$' -bench 'Loopback/write_bw_64K' -cpuprofile cpu.out
//	go tool pprof -top cpu.out
func BenchmarkLoopback(b *testing.B) {
	cases := []struct{ name, op, mode, size string }{
		{"write_bw_64K", "write", "bw", "65536"},
		{"write_bw_8B", "write", "bw", "8"},
		{"write_lat_8B", "write", "lat", "8"},
		{"read_bw_64K", "read", "bw", "65536"},
		{"fetch_add_bw", "fetch_add", "bw", "8"},
	}
	mnt := benchMount(b)
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			// Each iteration is a whole bench run of RDMAFS_BENCH_DURATION
			// (default 2s), so the benchmark runs once.
			d := os.Getenv("RDMAFS_BENCH_DURATION")
			if d == "" {
				d = "2s"
			}
			var rs []bench.Result
			for b.Loop() {
				out := runBench(b, 0, "--op", c.op, "--mode", c.mode, "-s", c.size, "--duration", d, "--json", mnt)
				if rs = parseJSONResults(b, out); len(rs) != 1 {
					b.Fatalf("results: %s", out)
				}
			}
			b.ReportMetric(rs[0].MsgRate, "Mpps")
			b.ReportMetric(rs[0].BWAvg, "MB/s")
			if c.mode == "lat" {
				b.ReportMetric(rs[0].TTypical, "t_typical_us")
			}
		})
	}
}
