// Package bench is `rdmafs bench`: perftest-style benchmarks (ib_write_bw,
// ib_write_lat, ib_read_bw, ib_send_lat, ib_atomic_bw, ...) run by a
// client of a mounted device through the verbs library, so the daemon's
// engine does the work exactly as for any program: loopback between two
// QPs of one device, or (Config.Peer) between two devices over RoCEv2.
// cmd/rdmafs parses the flags into a Config; this package runs it.
//
// # Pieces
//
//   - config.go: Config (what the flags asked for), Result (one size's
//     measurement, a table row or a JSON line), the operation names.
//   - print.go: the perftest-like table and the JSON printer.
//   - setup.go: the device side of a run (PD, QP pairs, CQs, MRs; one
//     mount, or two with Peer).
//   - run.go: one size: prepare, warm up, measure, check the data.
//   - bw.go, lat.go: the bandwidth and latency loops.
//   - memcpy.go: the CPU's copy of the same bytes, the baseline.
//   - counters.go: snapshots of what a phase cost (doorbells, engine
//     parks, system calls, context switches, CPU of this process and of
//     the daemons).
//   - bench_unsafe.go: the one volatile load the ping-pongs poll with.
//
// A run is one goroutine: the bench posts and polls from it, as perftest
// does from one thread, and Run pins GOMAXPROCS to 1 for its duration when
// the device is served by another process. With Config.Threads T > 1 (bw
// mode) the bandwidth phases run on T goroutines, each locked to an OS
// thread and driving its own QPs/T pairs, and GOMAXPROCS is pinned to T.
package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
)

// Run measures every size of c and prints the results to stdout. A data
// check that fails is an error after all sizes have been printed.
func Run(c *Config, stdout io.Writer) error {
	var out printer = &tablePrinter{w: stdout, c: c}
	if c.JSON {
		out = &jsonPrinter{enc: json.NewEncoder(stdout)}
	}
	if c.Op == "memcpy" {
		out.header()
		for _, s := range c.Sizes {
			r, err := benchMemcpy(c, s)
			if err != nil {
				return err
			}
			out.row(r)
		}
		out.footer()
		return nil
	}

	b, err := newBench(c)
	if err != nil {
		return err
	}
	defer b.close()
	if b.pid != 0 && os.Getenv("GOMAXPROCS") == "" {
		// The bench is one thread, as perftest is. With a second P the Go
		// scheduler's idle M makes futex calls whenever the spinning
		// goroutine yields, which would pass for the data path's system
		// calls. Not when the device is served by this very process (the
		// tests), whose engine needs a P of its own. With --threads, a P
		// for each thread.
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(max(1, c.Threads)))
	}
	out.header()
	var failed error
	for _, s := range c.Sizes {
		r, err := b.run(s)
		if err != nil {
			return fmt.Errorf("%s %s %d bytes: %w", c.Op, c.Mode, s, err)
		}
		out.row(r)
		if r.Check != "ok" && failed == nil {
			failed = fmt.Errorf("%s %s %d bytes: data check failed: %s", c.Op, c.Mode, s, r.Check)
		}
	}
	out.footer()
	return failed
}
