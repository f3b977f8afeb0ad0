package main

// rdmafs bench: the flags of package bench (perftest-style benchmarks of a
// mounted device through the verbs library), parsed into a bench.Config.

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"rdmafs/bench"
)

const benchSynopsis = `bench [flags] [--peer MOUNT2] MOUNTPOINT  (no MOUNTPOINT with --op memcpy)

Loopback between two QPs of MOUNTPOINT's device; with --peer MOUNT2 the
requesters stay on MOUNTPOINT and their partners live on MOUNT2, the two
devices talking RoCEv2 over UDP (both mounted with --addr).`

func cmdBench(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("bench", benchSynopsis, stderr)
	var c bench.Config
	fs.StringVar(&c.Op, "op", "write", "operation: write, read, send, fetch_add, cmp_swap, or memcpy (the CPU copying the same bytes, no device)")
	fs.StringVar(&c.Mode, "mode", "bw", "bw (bandwidth and message rate) or lat (latency)")
	size := fs.IntP("size", "s", 0, "bytes per message (default 65536 for bw, 2 for lat; atomics are 8)")
	all := fs.BoolP("all", "a", false, "every size from 2 bytes to 8 MiB by powers of two")
	fs.IntVarP(&c.Iters, "iters", "n", 0, "iterations per QP (default 5000 for bw, 1000 for lat)")
	fs.DurationVarP(&c.Duration, "duration", "D", 0, "run for this long instead of --iters (e.g. 2s)")
	fs.IntVar(&c.Warmup, "warmup", -1, "untimed iterations before each size (default: tx-depth*8 for bw, 100 for lat)")
	fs.IntVarP(&c.TxDepth, "tx-depth", "t", 0, "send WRs in flight per QP (default 128 for bw, 1 for lat)")
	fs.IntVarP(&c.RxDepth, "rx-depth", "r", 512, "receive WRs posted per QP (send)")
	fs.IntVarP(&c.QPs, "qps", "q", 1, "QP pairs (bw mode); posts go round-robin from one thread, as perftest does, or from each of --threads")
	fs.IntVar(&c.Threads, "threads", 1, "bw mode: threads (goroutines locked to OS threads), each posting to and polling its own --qps/--threads QP pairs; started together, the result is their sum (as perftest processes summed); must divide --qps")
	fs.IntVarP(&c.CQMod, "cq-mod", "Q", 0, "signal every Nth send WR (default: bw min(tx-depth/2, 100); lat 100 for write and send, 1 for read and atomics)")
	fs.IntVarP(&c.PostList, "post-list", "l", 1, "WRs per PostSend call")
	fs.IntVarP(&c.Inline, "inline-size", "I", 0, "send write/send payloads of up to this many bytes inline")
	fs.IntVarP(&c.MTU, "mtu", "m", 0, "path MTU in bytes (default: the port's active_mtu)")
	fs.IntVarP(&c.Outs, "outs", "o", 0, "outstanding READs/atomics (max_rd_atomic; default: the device's limit, at most 128)")
	fs.BoolVar(&c.JSON, "json", false, "print one JSON object per size instead of the table")
	fs.BoolVar(&c.WriteDoorbell, "write-doorbell", false, "wake a parked engine with a write() to the sq file instead of the futex doorbell")
	fs.StringVar(&c.Peer, "peer", "", "put the responder/receiver/echo QPs on this second mount and connect across RoCEv2 by GID and QPN (both mounted with --addr; --mtu defaults to the smaller active_mtu)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	switch {
	case c.Op == "memcpy" && fs.NArg() == 0:
	case fs.NArg() == 1:
		c.Mount = fs.Arg(0)
	default:
		fs.Usage()
		return usageError{errors.New("need exactly one MOUNTPOINT")}
	}
	switch {
	case *all:
		for s := 2; s <= 8<<20; s *= 2 {
			c.Sizes = append(c.Sizes, s)
		}
	case *size > 0:
		c.Sizes = []int{*size}
	case *size < 0:
		return usageError{fmt.Errorf("--size %d", *size)}
	}
	if err := c.Complete(); err != nil {
		return usageError{err}
	}
	c.DaemonPID = daemonPID
	err := bench.Run(&c, stdout)
	var ue bench.UsageError
	if errors.As(err, &ue) {
		return usageError{ue.Err}
	}
	return err
}

// daemonPID finds the daemon serving mnt from its pid file, if it is
// alive.
func daemonPID(mnt string) int {
	data, err := os.ReadFile(filepath.Join(stateDir, mountID(mnt)+".pid"))
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.SplitN(string(data), "\n", 2)[0])
	if err != nil || pid <= 0 || syscall.Kill(pid, 0) != nil {
		return 0
	}
	return pid
}
