package main

// rdmafs bench: perftest-style benchmarks (ib_write_bw, ib_write_lat,
// ib_read_bw, ib_send_lat, ib_atomic_bw, ...) run by a client of a mounted
// device through the verbs library, so the daemon's engine does the work
// exactly as for any program: loopback between two QPs of one device, or
// (--peer) between two devices over RoCEv2.

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"rdmafs/qp"
	"rdmafs/verbs"
)

// benchConfig is what the flags ask for.
type benchConfig struct {
	op            string
	writeDoorbell bool
	mode          string
	sizes         []int
	iters         int
	duration      time.Duration
	warmup        int
	txDepth       int
	rxDepth       int
	qps           int
	cqMod         int
	postList      int
	inline        int
	mtu           int
	outs          int
	json          bool
	mount         string
	peer          string // the responders' mount (--peer); "" for loopback
}

// benchResult is one size's measurement: a table row, and a JSON line.
type benchResult struct {
	Op         string  `json:"op"`
	Mode       string  `json:"mode"`
	Bytes      int     `json:"bytes"`
	Iterations uint64  `json:"iterations"` // per QP, as perftest counts them
	QPs        int     `json:"qps"`
	TxDepth    int     `json:"tx_depth"`
	CQMod      int     `json:"cq_mod"`
	PostList   int     `json:"post_list"`
	Seconds    float64 `json:"seconds"`
	// bw mode: MB is 2^20 bytes, as perftest and ucx_perftest count.
	BWPeak  float64 `json:"bw_peak_mbs"`
	BWAvg   float64 `json:"bw_avg_mbs"`
	MsgRate float64 `json:"msg_rate_mpps"`
	// lat mode, microseconds: one way (half the round trip) for the
	// ping-pongs (write, send), the whole post-to-completion time for read
	// and atomics, as ib_*_lat report them.
	TMin     float64 `json:"t_min_us"`
	TMax     float64 `json:"t_max_us"`
	TTypical float64 `json:"t_typical_us"`
	TAvg     float64 `json:"t_avg_us"`
	TStdev   float64 `json:"t_stdev_us"`
	T99      float64 `json:"t_99_us"`
	T999     float64 `json:"t_99_9_us"`
	// What the measured phase cost besides the data: doorbells the library
	// rang (writes to qp/N/sq) and the device counted, engine parks, the
	// read and write system calls of this process (/proc/self/io, the
	// doorbell is a write), its context switches, and CPU seconds of this
	// process and of the daemon (when its pid file is found).
	WRs          uint64  `json:"wrs"`
	LibDoorbells uint64  `json:"lib_doorbells"`
	DevDoorbells uint64  `json:"dev_doorbells"`
	EngineParks  uint64  `json:"engine_parks"`
	ReadCalls    uint64  `json:"read_syscalls"`
	WriteCalls   uint64  `json:"write_syscalls"`
	CtxSwitches  uint64  `json:"ctx_switches"`
	CPUUser      float64 `json:"cpu_user_s"`
	CPUSys       float64 `json:"cpu_sys_s"`
	DaemonCPU    float64 `json:"daemon_cpu_s"`
	DaemonPID    int     `json:"daemon_pid,omitempty"`
	// --peer: the peer's daemon, and what crossed the wire (packets
	// MOUNTPOINT's device sent and received; retransmissions of both).
	PeerDaemonCPU float64 `json:"peer_daemon_cpu_s,omitempty"`
	PeerDaemonPID int     `json:"peer_daemon_pid,omitempty"`
	WirePackets   uint64  `json:"wire_packets,omitempty"`
	Retransmits   uint64  `json:"retransmits,omitempty"`
	Check         string  `json:"check"`
}

const benchSynopsis = `bench [flags] [--peer MOUNT2] MOUNTPOINT  (no MOUNTPOINT with --op memcpy)

Loopback between two QPs of MOUNTPOINT's device; with --peer MOUNT2 the
requesters stay on MOUNTPOINT and their partners live on MOUNT2, the two
devices talking RoCEv2 over UDP (both mounted with --addr).`

var benchOps = map[string]string{
	"write":     "RDMA_Write",
	"read":      "RDMA_Read",
	"send":      "Send",
	"fetch_add": "Atomic FETCH_AND_ADD",
	"cmp_swap":  "Atomic CMP_AND_SWAP",
	"memcpy":    "memcpy",
}

func cmdBench(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("bench", benchSynopsis, stderr)
	var c benchConfig
	fs.StringVar(&c.op, "op", "write", "operation: write, read, send, fetch_add, cmp_swap, or memcpy (the CPU copying the same bytes, no device)")
	fs.StringVar(&c.mode, "mode", "bw", "bw (bandwidth and message rate) or lat (latency)")
	size := fs.IntP("size", "s", 0, "bytes per message (default 65536 for bw, 2 for lat; atomics are 8)")
	all := fs.BoolP("all", "a", false, "every size from 2 bytes to 8 MiB by powers of two")
	fs.IntVarP(&c.iters, "iters", "n", 0, "iterations per QP (default 5000 for bw, 1000 for lat)")
	fs.DurationVarP(&c.duration, "duration", "D", 0, "run for this long instead of --iters (e.g. 2s)")
	fs.IntVar(&c.warmup, "warmup", -1, "untimed iterations before each size (default: tx-depth*8 for bw, 100 for lat)")
	fs.IntVarP(&c.txDepth, "tx-depth", "t", 0, "send WRs in flight per QP (default 128 for bw, 1 for lat)")
	fs.IntVarP(&c.rxDepth, "rx-depth", "r", 512, "receive WRs posted per QP (send)")
	fs.IntVarP(&c.qps, "qps", "q", 1, "QP pairs (bw mode); posts go round-robin from one thread, as perftest does")
	fs.IntVarP(&c.cqMod, "cq-mod", "Q", 0, "signal every Nth send WR (default: bw min(tx-depth/2, 100); lat 100 for write and send, 1 for read and atomics)")
	fs.IntVarP(&c.postList, "post-list", "l", 1, "WRs per PostSend call")
	fs.IntVarP(&c.inline, "inline-size", "I", 0, "send write/send payloads of up to this many bytes inline")
	fs.IntVarP(&c.mtu, "mtu", "m", 0, "path MTU in bytes (default: the port's active_mtu)")
	fs.IntVarP(&c.outs, "outs", "o", 0, "outstanding READs/atomics (max_rd_atomic; default: the device's limit, at most 128)")
	fs.BoolVar(&c.json, "json", false, "print one JSON object per size instead of the table")
	fs.BoolVar(&c.writeDoorbell, "write-doorbell", false, "wake a parked engine with a write() to the sq file instead of the futex doorbell")
	fs.StringVar(&c.peer, "peer", "", "put the responder/receiver/echo QPs on this second mount and connect across RoCEv2 by GID and QPN (both mounted with --addr; --mtu defaults to the smaller active_mtu)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if _, ok := benchOps[c.op]; !ok {
		return usageError{fmt.Errorf("--op %q: one of write, read, send, fetch_add, cmp_swap, memcpy", c.op)}
	}
	if c.mode != "bw" && c.mode != "lat" {
		return usageError{fmt.Errorf("--mode %q: bw or lat", c.mode)}
	}
	if c.op == "memcpy" && c.mode == "lat" {
		return usageError{errors.New("--op memcpy measures bandwidth only (--mode bw)")}
	}
	if c.op == "memcpy" && c.peer != "" {
		return usageError{errors.New("--op memcpy uses no device (no --peer)")}
	}
	switch {
	case c.op == "memcpy" && fs.NArg() == 0:
	case fs.NArg() == 1:
		c.mount = fs.Arg(0)
	default:
		fs.Usage()
		return usageError{errors.New("need exactly one MOUNTPOINT")}
	}
	atomicOp := c.op == "fetch_add" || c.op == "cmp_swap"
	switch {
	case atomicOp:
		c.sizes = []int{8}
	case *all:
		for s := 2; s <= 8<<20; s *= 2 {
			c.sizes = append(c.sizes, s)
		}
	case *size > 0:
		c.sizes = []int{*size}
	case *size < 0:
		return usageError{fmt.Errorf("--size %d", *size)}
	case c.mode == "bw":
		c.sizes = []int{65536}
	default:
		c.sizes = []int{2}
	}
	if c.iters == 0 {
		c.iters = map[string]int{"bw": 5000, "lat": 1000}[c.mode]
	}
	if c.txDepth == 0 {
		c.txDepth = map[string]int{"bw": 128, "lat": 1}[c.mode]
	}
	if c.cqMod == 0 {
		c.cqMod = max(1, min(c.txDepth/2, 100))
		if c.mode == "lat" && c.op != "write" && c.op != "send" {
			c.cqMod = 1
		} else if c.mode == "lat" {
			c.cqMod = 100
		}
	}
	if c.mode == "bw" {
		c.cqMod = min(c.cqMod, c.txDepth)
	}
	if c.warmup < 0 {
		c.warmup = map[string]int{"bw": c.txDepth * 8, "lat": 100}[c.mode]
	}
	if c.mode == "lat" {
		c.qps = 1
	}
	if c.iters < 1 || c.txDepth < 1 || c.qps < 1 || c.postList < 1 || c.rxDepth < 1 || c.inline < 0 {
		return usageError{errors.New("--iters, --tx-depth, --qps, --post-list and --rx-depth must be positive")}
	}
	c.postList = min(c.postList, c.txDepth)
	if c.op == "send" && c.mode == "bw" && c.rxDepth < c.postList {
		return usageError{errors.New("--rx-depth must be at least --post-list")}
	}

	var out benchPrinter = &tablePrinter{w: stdout, c: &c}
	if c.json {
		out = &jsonPrinter{enc: json.NewEncoder(stdout)}
	}
	if c.op == "memcpy" {
		out.header()
		for _, s := range c.sizes {
			r, err := benchMemcpy(&c, s)
			if err != nil {
				return err
			}
			out.row(r)
		}
		out.footer()
		return nil
	}

	b, err := newBench(&c)
	if err != nil {
		return err
	}
	defer b.close()
	if b.pid != 0 && os.Getenv("GOMAXPROCS") == "" {
		// The bench is one thread, as perftest is. With a second P the Go
		// scheduler's idle M makes futex calls whenever the spinning
		// goroutine yields, which would pass for the data path's system
		// calls. Not when the device is served by this very process (the
		// tests), whose engine needs a P of its own.
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	}
	out.header()
	var failed error
	for _, s := range c.sizes {
		r, err := b.run(s)
		if err != nil {
			return fmt.Errorf("%s %s %d bytes: %w", c.op, c.mode, s, err)
		}
		out.row(r)
		if r.Check != "ok" && failed == nil {
			failed = fmt.Errorf("%s %s %d bytes: data check failed: %s", c.op, c.mode, s, r.Check)
		}
	}
	out.footer()
	return failed
}

// ---------------------------------------------------------------- output

type benchPrinter interface {
	header()
	row(*benchResult)
	footer()
}

type jsonPrinter struct{ enc *json.Encoder }

func (p *jsonPrinter) header()            {}
func (p *jsonPrinter) row(r *benchResult) { p.enc.Encode(r) }
func (p *jsonPrinter) footer()            {}

type tablePrinter struct {
	w    io.Writer
	c    *benchConfig
	rows []*benchResult
}

const benchRule = "---------------------------------------------------------------------------------------"

func (p *tablePrinter) header() {
	c := p.c
	kind := map[string]string{"bw": "BW", "lat": "Latency"}[c.mode]
	transport := "rdmafs loopback"
	if c.peer != "" {
		transport = "rdmafs RoCEv2"
	}
	title := fmt.Sprintf("%s %s Test (%s)", benchOps[c.op], kind, transport)
	fmt.Fprintln(p.w, benchRule)
	fmt.Fprintf(p.w, "%*s\n", (len(benchRule)+len(title))/2, title)
	if c.op != "memcpy" {
		fmt.Fprintf(p.w, " Number of qps   : %-14d Transport type : %s\n", c.qps, transport)
		fmt.Fprintf(p.w, " Connection type : RC             Mount          : %s\n", c.mount)
		if c.peer != "" {
			fmt.Fprintf(p.w, "                                  Peer mount     : %s\n", c.peer)
		}
		fmt.Fprintf(p.w, " TX depth        : %d\n", c.txDepth)
		if c.op == "send" {
			fmt.Fprintf(p.w, " RX depth        : %d\n", c.rxDepth)
		}
		fmt.Fprintf(p.w, " CQ Moderation   : %d\n", c.cqMod)
		fmt.Fprintf(p.w, " Post list       : %d\n", c.postList)
		fmt.Fprintf(p.w, " Mtu             : %d[B]\n", c.mtu)
		if c.op == "read" || c.op == "fetch_add" || c.op == "cmp_swap" {
			fmt.Fprintf(p.w, " Outstand reads  : %d\n", c.outs)
		}
		fmt.Fprintf(p.w, " Max inline data : %d[B]\n", c.inline)
	}
	fmt.Fprintln(p.w, benchRule)
	if c.mode == "bw" {
		fmt.Fprintln(p.w, " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]")
	} else {
		fmt.Fprintln(p.w, " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec]")
	}
}

func (p *tablePrinter) row(r *benchResult) {
	p.rows = append(p.rows, r)
	if r.Mode == "bw" {
		fmt.Fprintf(p.w, " %-10d %-14d %-18.2f %-20.2f %.6f\n", r.Bytes, r.Iterations, r.BWPeak, r.BWAvg, r.MsgRate)
	} else {
		fmt.Fprintf(p.w, " %-7d %-10d     %-14.2f %-12.2f %-18.2f %-14.2f %-15.2f %-22.2f %.2f\n",
			r.Bytes, r.Iterations, r.TMin, r.TMax, r.TTypical, r.TAvg, r.TStdev, r.T99, r.T999)
	}
}

func (p *tablePrinter) footer() {
	fmt.Fprintln(p.w, benchRule)
	if p.c.op == "memcpy" {
		return
	}
	var s benchResult
	for _, r := range p.rows {
		s.WRs += r.WRs
		s.LibDoorbells += r.LibDoorbells
		s.DevDoorbells += r.DevDoorbells
		s.EngineParks += r.EngineParks
		s.ReadCalls += r.ReadCalls
		s.WriteCalls += r.WriteCalls
		s.CtxSwitches += r.CtxSwitches
		s.CPUUser += r.CPUUser
		s.CPUSys += r.CPUSys
		s.DaemonCPU += r.DaemonCPU
		s.PeerDaemonCPU += r.PeerDaemonCPU
		s.WirePackets += r.WirePackets
		s.Retransmits += r.Retransmits
		if r.Check != "ok" && s.Check == "" {
			s.Check = fmt.Sprintf("%d bytes: %s", r.Bytes, r.Check)
		}
	}
	per := func(n uint64) float64 { return float64(n) / float64(max(s.WRs, 1)) }
	fmt.Fprintf(p.w, " timed phases: %d WRs; doorbells %d by the library, %d by the device (%.6f/WR); engine parks %d\n",
		s.WRs, s.LibDoorbells, s.DevDoorbells, per(s.DevDoorbells), s.EngineParks)
	fmt.Fprintf(p.w, " this process: %d read + %d write syscalls (%.6f/WR), %d context switches, cpu %.2fs user %.2fs sys",
		s.ReadCalls, s.WriteCalls, per(s.ReadCalls+s.WriteCalls), s.CtxSwitches, s.CPUUser, s.CPUSys)
	if len(p.rows) > 0 && p.rows[0].DaemonPID != 0 {
		fmt.Fprintf(p.w, "; daemon (pid %d) cpu %.2fs", p.rows[0].DaemonPID, s.DaemonCPU)
	}
	if len(p.rows) > 0 && p.rows[0].PeerDaemonPID != 0 {
		fmt.Fprintf(p.w, "; peer daemon (pid %d) cpu %.2fs", p.rows[0].PeerDaemonPID, s.PeerDaemonCPU)
	}
	fmt.Fprintln(p.w)
	if p.c.peer != "" {
		fmt.Fprintf(p.w, " wire: %d packets sent and received by %s's device, %d retransmissions\n", s.WirePackets, p.c.mount, s.Retransmits)
	}
	if s.Check == "" {
		fmt.Fprintln(p.w, " data check: ok")
	} else {
		fmt.Fprintf(p.w, " data check: FAILED: %s\n", s.Check)
	}
	fmt.Fprintln(p.w, benchRule)
}

// ---------------------------------------------------------------- setup

// bench is the device side of a run: one PD per device, and per QP pair
// two QPs, four CQs (each QP's send and receive CQ) and two MRs. The A
// side (requesters) is on ctx; the B side on ctxB, which is ctx itself
// unless --peer names another mount.
type bench struct {
	c         *benchConfig
	ctx, ctxB *verbs.Context
	pd, pdB   *verbs.PD
	pairs     []*benchPair
	buf       int // bytes of each half of an MR: the largest size, rounded up
	pid, pidB int // the daemons', 0 when unknown (pidB only with --peer)
	rng       uint64
	over      snapshot // what a snapshot costs
}

// benchPair is A, the requester, and B, its peer. Each MR is [send half |
// receive half | atomic word | atomic result]: A's writes go from A's send
// half to B's receive half, READs from B's send half into A's receive half,
// atomics hit B's word and return into A's result; in the ping-pongs B
// answers from its send half into A's receive half.
type benchPair struct {
	a, b             *verbs.QP
	aSCQ, aRCQ       *verbs.CQ
	bSCQ, bRCQ       *verbs.CQ
	ma, mb           *verbs.MR
	wrs              []verbs.SendWR
	bwr              []verbs.SendWR // B's answer (ping-pongs)
	rwrA, rwrB       []verbs.RecvWR
	wc               []verbs.WC
	posted, done     uint64 // send WRs of A posted and known complete
	bPosted          uint64 // B's sends (ping-pongs)
	recvA, recvB     uint64 // receive WRs posted, in all
	recvDoneB        uint64 // receive completions on B
	atomicN          uint64 // atomics posted on this pair since the word was zeroed
	lastByteLen      uint32
	errWC            *verbs.WC
	atomicWord, atom int // offsets of the word (in mb) and the result (in ma)
}

// benchDev is what the bench needs to know of a device it opens.
type benchDev struct {
	port *verbs.PortAttr
	dev  *verbs.DeviceAttr
}

func queryBenchDev(ctx *verbs.Context) (benchDev, error) {
	var d benchDev
	var err error
	if d.port, err = ctx.QueryPort(1); err != nil {
		return d, err
	}
	d.dev, err = ctx.QueryDevice()
	return d, err
}

func newBench(c *benchConfig) (*bench, error) {
	opts := verbs.Options{WriteDoorbell: c.writeDoorbell}
	ctx, err := verbs.OpenWithOptions(c.mount, opts)
	if err != nil {
		return nil, err
	}
	b := &bench{c: c, ctx: ctx, ctxB: ctx, rng: uint64(time.Now().UnixNano()) | 1}
	ok := false
	defer func() {
		if !ok {
			b.close()
		}
	}()
	da, err := queryBenchDev(ctx)
	if err != nil {
		return nil, err
	}
	db := da
	if c.peer != "" {
		if b.ctxB, err = verbs.OpenWithOptions(c.peer, opts); err != nil {
			return nil, fmt.Errorf("--peer: %w", err)
		}
		if db, err = queryBenchDev(b.ctxB); err != nil {
			return nil, err
		}
		// Two devices reach each other only over the wire link, whose
		// GID is the IPv4-mapped address given to mount --addr.
		for _, d := range []struct {
			mnt string
			gid [16]byte
		}{{c.mount, da.port.GID}, {c.peer, db.port.GID}} {
			if a := netip.AddrFrom16(d.gid); !a.Is4In6() {
				return nil, fmt.Errorf("--peer: %s has port GID %s, not an IPv4-mapped ::ffff:a.b.c.d: mount it with --addr IPv4 to bench over RoCEv2", d.mnt, a)
			}
		}
		b.pidB = daemonPID(c.peer)
	}
	port, dev := da.port, da.dev
	mtu := min(port.ActiveMTU, db.port.ActiveMTU)
	if c.mtu != 0 {
		m, okm := qp.MTUFromBytes(c.mtu)
		if !okm {
			return nil, usageError{fmt.Errorf("--mtu %d: not one of 256 512 1024 2048 4096", c.mtu)}
		}
		mtu = m
	}
	c.mtu = mtu.Bytes()
	if c.outs == 0 {
		// A initiates, B responds (and initiates the ping-pong answers).
		c.outs = int(min(dev.MaxQPInitRdAtom, dev.MaxQPRdAtom, db.dev.MaxQPInitRdAtom, db.dev.MaxQPRdAtom, 128))
	}
	c.outs = max(1, min(c.outs, 255))
	if maxInline := min(dev.MaxInlineData, db.dev.MaxInlineData); c.inline > int(maxInline) {
		return nil, usageError{fmt.Errorf("--inline-size %d: the devices' max_inline_data is %d", c.inline, maxInline)}
	}
	b.buf = (slices.Max(c.sizes) + 63) &^ 63
	b.pid = daemonPID(ctx.Mount())
	if b.pd, err = ctx.AllocPD(); err != nil {
		return nil, err
	}
	b.pdB = b.pd
	if b.ctxB != ctx {
		if b.pdB, err = b.ctxB.AllocPD(); err != nil {
			return nil, err
		}
	}
	all := verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
	rx := 4
	if c.op == "send" {
		rx = c.rxDepth
	}
	capa := verbs.QPCap{MaxSendWR: uint32(max(c.txDepth, 2)), MaxRecvWR: uint32(rx), MaxSendSGE: 1, MaxRecvSGE: 1,
		MaxInlineData: uint32(c.inline)}
	for range c.qps {
		p := &benchPair{atomicWord: 2 * b.buf, atom: 2*b.buf + 8}
		b.pairs = append(b.pairs, p)
		cqs := []struct {
			cq  **verbs.CQ
			ctx *verbs.Context
		}{{&p.aSCQ, ctx}, {&p.aRCQ, ctx}, {&p.bSCQ, b.ctxB}, {&p.bRCQ, b.ctxB}}
		for _, q := range cqs {
			if *q.cq, err = q.ctx.CreateCQ(max(c.txDepth, rx) + 16); err != nil {
				return nil, err
			}
		}
		if p.ma, err = b.pd.RegMR(2*b.buf+64, all); err != nil {
			return nil, err
		}
		if p.mb, err = b.pdB.RegMR(2*b.buf+64, all); err != nil {
			return nil, err
		}
		if p.a, err = b.pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: p.aSCQ, RecvCQ: p.aRCQ, Cap: capa}); err != nil {
			return nil, err
		}
		if p.b, err = b.pdB.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: p.bSCQ, RecvCQ: p.bRCQ, Cap: capa}); err != nil {
			return nil, err
		}
		// Each QP reaches its partner by the partner's port GID and QPN
		// (the same GID twice in loopback).
		ca := verbs.ConnectAttr{DGID: db.port.GID, DestQPN: p.b.QPN, PathMTU: mtu, MaxRdAtomic: uint8(c.outs)}
		if err := p.a.Connect(ca); err != nil {
			return nil, err
		}
		ca.DGID, ca.DestQPN = port.GID, p.a.QPN
		if err := p.b.Connect(ca); err != nil {
			return nil, err
		}
		p.wrs = make([]verbs.SendWR, c.postList)
		p.bwr = make([]verbs.SendWR, 1)
		for i := range p.wrs {
			p.wrs[i].SGL = make([]verbs.SGE, 1)
		}
		p.bwr[0].SGL = make([]verbs.SGE, 1)
		p.rwrA = make([]verbs.RecvWR, rx)
		p.rwrB = make([]verbs.RecvWR, rx)
		for i := range rx {
			p.rwrA[i].SGL = make([]verbs.SGE, 1)
			p.rwrB[i].SGL = make([]verbs.SGE, 1)
		}
		p.wc = make([]verbs.WC, max(c.txDepth, rx)+16)
		// Distinct contents on each side, so a check cannot pass on
		// memory that was never written.
		b.fill(p.ma.Buf[:2*b.buf])
		b.fill(p.mb.Buf[:2*b.buf])
	}
	b.calibrate()
	ok = true
	return b, nil
}

func (b *bench) fill(p []byte) {
	for i := 0; i+8 <= len(p); i += 8 {
		b.rng ^= b.rng << 13
		b.rng ^= b.rng >> 7
		b.rng ^= b.rng << 17
		binary.LittleEndian.PutUint64(p[i:], b.rng)
	}
}

func (b *bench) close() {
	for _, p := range b.pairs {
		for _, q := range []*verbs.QP{p.a, p.b} {
			if q != nil {
				q.Destroy()
			}
		}
		for _, m := range []*verbs.MR{p.ma, p.mb} {
			if m != nil {
				m.Dereg()
			}
		}
		for _, cq := range []*verbs.CQ{p.aSCQ, p.aRCQ, p.bSCQ, p.bRCQ} {
			if cq != nil {
				cq.Destroy()
			}
		}
	}
	if b.pdB != nil && b.pdB != b.pd {
		b.pdB.Dealloc()
	}
	if b.pd != nil {
		b.pd.Dealloc()
	}
	if b.ctxB != nil && b.ctxB != b.ctx {
		b.ctxB.Close()
	}
	b.ctx.Close()
}

// ---------------------------------------------------------------- one size

// run measures one size: a warm-up, then the timed phase, then the data
// check, with the counters read around the timed phase only.
func (b *bench) run(size int) (*benchResult, error) {
	c := b.c
	r := &benchResult{Op: c.op, Mode: c.mode, Bytes: size, QPs: c.qps, TxDepth: c.txDepth, CQMod: c.cqMod,
		PostList: c.postList, DaemonPID: b.pid, PeerDaemonPID: b.pidB}
	for _, p := range b.pairs {
		b.prepare(p, size)
	}
	if c.warmup > 0 {
		var err error
		if c.mode == "bw" {
			_, _, err = b.bw(uint64(c.warmup), 0, nil)
		} else {
			_, err = b.lat(size, c.warmup, 0, nil)
		}
		if err != nil {
			return nil, fmt.Errorf("warm-up: %w", err)
		}
	}
	before := b.snapshot()
	var err error
	if c.mode == "bw" {
		err = b.measureBW(size, r)
	} else {
		err = b.measureLat(size, r)
	}
	if err != nil {
		return nil, err
	}
	after := b.snapshot()
	after.sub(&before, &b.over, r)
	if benchBeforeCheck != nil {
		benchBeforeCheck(b, size)
	}
	r.Check = b.check(size)
	return r, nil
}

// benchBeforeCheck lets tests look at (or spoil) the memory before the
// data check of a size.
var benchBeforeCheck func(b *bench, size int)

// prepare fills in the WR templates of a pair for size.
func (b *bench) prepare(p *benchPair, size int) {
	c := b.c
	for i := range p.wrs {
		w := &p.wrs[i]
		*w = verbs.SendWR{SGL: w.SGL[:1]}
		switch c.op {
		case "write":
			w.Opcode = verbs.WRRDMAWrite
			w.SGL[0] = p.ma.SGE(0, size)
			w.RemoteAddr, w.RKey = p.mb.Addr(b.buf), p.mb.RKey
		case "read":
			w.Opcode = verbs.WRRDMARead
			w.SGL[0] = p.ma.SGE(b.buf, size)
			w.RemoteAddr, w.RKey = p.mb.Addr(0), p.mb.RKey
		case "send":
			w.Opcode = verbs.WRSend
			w.SGL[0] = p.ma.SGE(0, size)
		case "fetch_add", "cmp_swap":
			w.Opcode = verbs.WRAtomicFetchAndAdd
			if c.op == "cmp_swap" {
				w.Opcode = verbs.WRAtomicCmpAndSwp
			}
			w.SGL[0] = p.ma.SGE(p.atom, 8)
			w.RemoteAddr, w.RKey = p.mb.Addr(p.atomicWord), p.mb.RKey
			w.CompareAdd = 1
		}
		if size <= c.inline && (c.op == "write" || c.op == "send") {
			w.SendFlags |= verbs.SendInline
		}
	}
	// B's answer in the ping-pongs: from B's send half to A's receive half.
	w := &p.bwr[0]
	*w = verbs.SendWR{SGL: w.SGL[:1]}
	w.SGL[0] = p.mb.SGE(0, size)
	if c.op == "write" {
		w.Opcode, w.RemoteAddr, w.RKey = verbs.WRRDMAWrite, p.ma.Addr(b.buf), p.ma.RKey
	} else {
		w.Opcode = verbs.WRSend
	}
	if size <= c.inline {
		w.SendFlags |= verbs.SendInline
	}
	// Receives land in the receive halves, whole: receives posted for
	// one size may take the next size's messages.
	for i := range p.rwrA {
		p.rwrA[i].SGL[0] = p.ma.SGE(b.buf, b.buf)
		p.rwrB[i].SGL[0] = p.mb.SGE(b.buf, b.buf)
	}
	binary.LittleEndian.PutUint64(p.mb.Buf[p.atomicWord:], 0)
	binary.LittleEndian.PutUint64(p.ma.Buf[p.atom:], ^uint64(0))
	p.atomicN = 0
}

// check compares the memory after a size with what the operations must
// have left there.
func (b *bench) check(size int) string {
	for i, p := range b.pairs {
		bad := func(format string, args ...any) string {
			return fmt.Sprintf("qp pair %d (qpn %d→%d): ", i, p.a.QPN, p.b.QPN) + fmt.Sprintf(format, args...)
		}
		if p.errWC != nil {
			return bad("completion %+v", *p.errWC)
		}
		switch b.c.op {
		case "write", "send":
			if got, want := p.mb.Buf[b.buf:b.buf+size], p.ma.Buf[:size]; !bytes.Equal(got, want) {
				return bad("B's memory differs from A's source at byte %d", firstDiffAt(got, want))
			}
			if b.c.mode == "lat" {
				if got, want := p.ma.Buf[b.buf:b.buf+size], p.mb.Buf[:size]; !bytes.Equal(got, want) {
					return bad("A's memory differs from B's answer at byte %d", firstDiffAt(got, want))
				}
			}
			if b.c.op == "send" && p.lastByteLen != uint32(size) {
				return bad("receive completion byte_len %d, want %d", p.lastByteLen, size)
			}
		case "read":
			if got, want := p.ma.Buf[b.buf:b.buf+size], p.mb.Buf[:size]; !bytes.Equal(got, want) {
				return bad("the data read differs from B's memory at byte %d", firstDiffAt(got, want))
			}
		case "fetch_add", "cmp_swap":
			// Every atomic added 1 (or swapped k for k+1) in order.
			word := binary.LittleEndian.Uint64(p.mb.Buf[p.atomicWord:])
			res := binary.LittleEndian.Uint64(p.ma.Buf[p.atom:])
			if word != p.atomicN || res != p.atomicN-1 {
				return bad("after %d atomics the word is %d and the last returned %d (want %d and %d)",
					p.atomicN, word, res, p.atomicN, p.atomicN-1)
			}
		}
	}
	return "ok"
}

func firstDiffAt(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// ---------------------------------------------------------------- bw

// stallAfter is how long a phase may go without a completion before the
// bench gives up (a lost completion must not hang it).
const stallAfter = 10 * time.Second

type benchSample struct {
	t int64  // ns since the phase started
	n uint64 // WRs completed by then
}

func (b *bench) measureBW(size int, r *benchResult) error {
	c := b.c
	samples := make([]benchSample, 0, 1<<14)
	n, ns, err := b.bw(uint64(c.iters), c.duration, &samples)
	if err != nil {
		return err
	}
	secs := float64(ns) / 1e9
	r.WRs, r.Seconds = n, secs
	r.Iterations = n / uint64(c.qps)
	r.MsgRate = float64(n) / secs / 1e6
	r.BWAvg = float64(n) * float64(size) / secs / (1 << 20)
	r.BWPeak = peakRate(samples, ns) * float64(size) * 1e9 / (1 << 20)
	r.BWPeak = max(r.BWPeak, r.BWAvg)
	return nil
}

// peakRate is the best rate (WRs per ns) over any stretch of at least a
// tenth of the run (and at least a millisecond) between two samples.
func peakRate(s []benchSample, total int64) float64 {
	window := max(total/10, int64(time.Millisecond))
	best := 0.0
	j := 0
	for i := range s {
		for j < len(s) && s[j].t-s[i].t < window {
			j++
		}
		if j == len(s) {
			break
		}
		best = max(best, float64(s[j].n-s[i].n)/float64(s[j].t-s[i].t))
	}
	return best
}

// bw keeps tx-depth send WRs in flight on every pair, signalling every
// cq-mod-th (and the last), until iters WRs per pair completed or, with a
// duration, until it is over (then the WRs up to the next signalled one are
// finished and counted). It returns the WRs completed and the time from the
// first post to the last completion.
func (b *bench) bw(iters uint64, dur time.Duration, samples *[]benchSample) (uint64, int64, error) {
	c := b.c
	cqMod, depth := uint64(c.cqMod), uint64(c.txDepth)
	type lim struct{ start, limit uint64 }
	lims := make([]lim, len(b.pairs))
	for i, p := range b.pairs {
		lims[i] = lim{p.posted, p.posted + iters}
		if dur > 0 {
			lims[i].limit = math.MaxUint64
		}
		// Signals fall on multiples of cq-mod counted from the start of
		// the phase; the previous phase ended on a signalled WR.
		if c.op == "send" && p.recvB == 0 {
			if err := b.postRecvs(p.b, p.rwrB, &p.recvB, uint64(len(p.rwrB))); err != nil {
				return 0, 0, err
			}
		}
	}
	var startSum uint64
	for _, l := range lims {
		startSum += l.start
	}
	stopping := dur == 0
	start := time.Now()
	var lastDone, lastSample int64
	sampleEvery := int64(50 * time.Microsecond)
	if samples != nil {
		*samples = append(*samples, benchSample{0, 0})
	}
	idle := 0
	for {
		progress := false
		finished := true
		for i, p := range b.pairs {
			l := &lims[i]
			// Post.
			for p.posted < l.limit && p.posted-p.done < depth {
				n := min(uint64(len(p.wrs)), l.limit-p.posted, depth-(p.posted-p.done))
				if c.op == "send" {
					n = min(n, p.recvB-p.posted)
					if n == 0 {
						break
					}
				}
				for k := range n {
					w := &p.wrs[k]
					idx := p.posted + k
					w.WRID = idx
					w.SendFlags &^= verbs.SendSignaled
					if (idx-l.start+1)%cqMod == 0 || idx+1 == l.limit {
						w.SendFlags |= verbs.SendSignaled
					}
					if c.op == "cmp_swap" {
						w.CompareAdd, w.Swap = p.atomicN+k, p.atomicN+k+1
					}
				}
				posted, err := postSends(p.a, p.wrs[:n])
				p.posted += posted
				if c.op == "fetch_add" || c.op == "cmp_swap" {
					p.atomicN += posted
				}
				if err != nil {
					return 0, 0, err
				}
				if posted < n {
					break // the ring is full: poll
				}
			}
			// Poll A's send completions.
			k, err := p.aSCQ.PollCQ(p.wc)
			if err != nil {
				return 0, 0, err
			}
			for _, wc := range p.wc[:k] {
				if wc.Status != verbs.WCSuccess {
					p.errWC = &wc
					return 0, 0, fmt.Errorf("qp %d: wr %d: %v", p.a.QPN, wc.WRID, wc.Status)
				}
				p.done = wc.WRID + 1
			}
			if k > 0 {
				progress = true
			}
			// Receives (send): count them and post as many again.
			if c.op == "send" {
				k, err := p.bRCQ.PollCQ(p.wc)
				if err != nil {
					return 0, 0, err
				}
				for _, wc := range p.wc[:k] {
					if wc.Status != verbs.WCSuccess {
						p.errWC = &wc
						return 0, 0, fmt.Errorf("qp %d: receive %d: %v", p.b.QPN, wc.WRID, wc.Status)
					}
					p.lastByteLen = wc.ByteLen
				}
				p.recvDoneB += uint64(k)
				if free := p.recvDoneB + uint64(len(p.rwrB)) - p.recvB; free >= uint64(min(len(p.rwrB)/4, 64)) || free > 0 && p.recvB == p.posted {
					if err := b.postRecvs(p.b, p.rwrB, &p.recvB, free); err != nil {
						return 0, 0, err
					}
				}
				if k > 0 {
					progress = true
				}
			}
			if p.done < l.limit {
				finished = false
			}
		}
		if progress {
			idle = 0
			now := int64(time.Since(start))
			lastDone = now
			if samples != nil && now-lastSample >= sampleEvery {
				*samples = append(*samples, benchSample{now, b.completed() - startSum})
				lastSample = now
			}
			if !stopping && now >= int64(dur) {
				stopping = true
				for i, p := range b.pairs {
					// Finish on the next signalled WR.
					n := p.posted - lims[i].start
					lims[i].limit = lims[i].start + (n+cqMod-1)/cqMod*cqMod
					if lims[i].limit == lims[i].start {
						lims[i].limit += cqMod
					}
				}
				continue
			}
		} else {
			idle++
			if idle&1023 == 0 {
				if time.Duration(int64(time.Since(start))-lastDone) > stallAfter {
					return 0, 0, fmt.Errorf("no completion for %v (posted %d, completed %d)", stallAfter, b.pairs[0].posted, b.pairs[0].done)
				}
				runtime.Gosched()
			}
		}
		if finished && stopping {
			break
		}
	}
	var n uint64
	for i, p := range b.pairs {
		n += p.done - lims[i].start
	}
	if samples != nil {
		*samples = append(*samples, benchSample{lastDone, n})
	}
	return n, max(lastDone, 1), nil
}

// completed counts the WRs completed on all pairs since they were made.
func (b *bench) completed() uint64 {
	var n uint64
	for _, p := range b.pairs {
		n += p.done
	}
	return n
}

// postSends posts wrs and returns how many went in; a full ring is not an
// error (the caller polls and tries again).
func postSends(q *verbs.QP, wrs []verbs.SendWR) (uint64, error) {
	err := q.PostSend(wrs...)
	if err == nil {
		return uint64(len(wrs)), nil
	}
	var pe *verbs.PostError
	if errors.As(err, &pe) && pe.Errno == syscall.ENOMEM {
		return uint64(pe.Index), nil
	}
	return 0, err
}

// postRecvs posts n receives (at most the template's length).
func (b *bench) postRecvs(q *verbs.QP, tmpl []verbs.RecvWR, count *uint64, n uint64) error {
	n = min(n, uint64(len(tmpl)))
	for i := range n {
		tmpl[i].WRID = *count + i
	}
	if err := q.PostRecv(tmpl[:n]...); err != nil {
		return err
	}
	*count += n
	return nil
}

// ---------------------------------------------------------------- lat

func (b *bench) measureLat(size int, r *benchResult) error {
	c := b.c
	lat := make([]int64, 0, c.iters)
	if c.duration > 0 {
		lat = make([]int64, 0, 1<<16)
	}
	ns, err := b.lat(size, c.iters, c.duration, &lat)
	if err != nil {
		return err
	}
	r.WRs = uint64(len(lat))
	r.Iterations = uint64(len(lat))
	if c.op == "write" || c.op == "send" {
		r.WRs *= 2 // a ping and a pong
	}
	r.Seconds = float64(ns) / 1e9
	fillLatency(r, lat, c.op == "write" || c.op == "send")
	return nil
}

// fillLatency computes perftest's statistics; ping-pong round trips count
// half (one way).
func fillLatency(r *benchResult, lat []int64, half bool) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	div := 1000.0
	if half {
		div = 2000.0
	}
	us := func(v int64) float64 { return float64(v) / div }
	var sum, sq float64
	for _, v := range lat {
		sum += us(v)
	}
	avg := sum / float64(len(lat))
	for _, v := range lat {
		d := us(v) - avg
		sq += d * d
	}
	pct := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(lat)))) - 1
		return us(lat[max(0, min(i, len(lat)-1))])
	}
	r.TMin, r.TMax = us(lat[0]), us(lat[len(lat)-1])
	r.TTypical = us(lat[len(lat)/2])
	r.TAvg, r.TStdev = avg, math.Sqrt(sq/float64(len(lat)))
	r.T99, r.T999 = pct(0.99), pct(0.999)
}

// lat runs iters round trips (or until dur is over), recording each one's
// time in ns into out when it is not nil. It returns the phase's length.
func (b *bench) lat(size, iters int, dur time.Duration, out *[]int64) (int64, error) {
	p := b.pairs[0]
	start := time.Now()
	var err error
	for i := 0; ; i++ {
		if dur > 0 && time.Since(start) >= dur || dur == 0 && i >= iters {
			break
		}
		t0 := time.Since(start)
		switch b.c.op {
		case "write":
			err = b.pingPongWrite(p, size)
		case "send":
			err = b.pingPongSend(p)
		default:
			err = b.postPollOne(p)
		}
		if err != nil {
			return 0, err
		}
		if out != nil {
			*out = append(*out, int64(time.Since(start)-t0))
		}
	}
	return int64(time.Since(start)), nil
}

// seqByte is the ping-pong's marker for round i: never 0, never repeated
// between consecutive rounds.
func seqByte(n uint64) byte { return byte(n%255) + 1 }

// loadByte reads mem[off] with an atomic load of the aligned word around
// it: the device writes it from another process.
func loadByte(mem []byte, off int) byte {
	w := (*uint32)(unsafe.Pointer(&mem[off&^3]))
	return byte(atomic.LoadUint32(w) >> (8 * (off & 3)))
}

// signal marks the WR of index idx signalled when cq-mod says so.
func (b *bench) signal(w *verbs.SendWR, idx uint64) {
	w.SendFlags &^= verbs.SendSignaled
	if (idx+1)%uint64(b.c.cqMod) == 0 {
		w.SendFlags |= verbs.SendSignaled
	}
}

// pingPongWrite is ib_write_lat's round: A WRITEs size bytes whose last
// byte is the round's marker into B's receive half; B polls that byte,
// then WRITEs back from its send half (with the marker) into A's receive
// half, which A polls.
func (b *bench) pingPongWrite(p *benchPair, size int) error {
	s := seqByte(p.posted)
	p.ma.Buf[size-1] = s
	w := &p.wrs[0]
	w.WRID = p.posted
	b.signal(w, p.posted)
	if err := postRetry(p.a, p.wrs[:1]); err != nil {
		return err
	}
	p.posted++
	if err := b.waitByte(p, p.mb.Buf, b.buf+size-1, s); err != nil {
		return err
	}
	p.mb.Buf[size-1] = s
	w = &p.bwr[0]
	w.WRID = p.bPosted
	b.signal(w, p.bPosted)
	if err := postRetry(p.b, p.bwr); err != nil {
		return err
	}
	p.bPosted++
	if err := b.waitByte(p, p.ma.Buf, b.buf+size-1, s); err != nil {
		return err
	}
	return b.drainSends(p)
}

// waitByte spins until mem[off] == want, draining send completions
// meanwhile (a failed WRITE would otherwise leave it spinning).
func (b *bench) waitByte(p *benchPair, mem []byte, off int, want byte) error {
	var t0 time.Time
	for i := 0; loadByte(mem, off) != want; i++ {
		if i&1023 == 1023 {
			if err := b.drainSends(p); err != nil {
				return err
			}
			if t0.IsZero() {
				t0 = time.Now()
			} else if time.Since(t0) > stallAfter {
				return fmt.Errorf("ping-pong: byte %d never became %d", off, want)
			}
			runtime.Gosched()
		}
	}
	return nil
}

// drainSends consumes the signalled send completions of both sides.
func (b *bench) drainSends(p *benchPair) error {
	for _, cq := range []*verbs.CQ{p.aSCQ, p.bSCQ} {
		k, err := cq.PollCQ(p.wc)
		if err != nil {
			return err
		}
		for _, wc := range p.wc[:k] {
			if wc.Status != verbs.WCSuccess {
				p.errWC = &wc
				return fmt.Errorf("send completion: wr %d: %v", wc.WRID, wc.Status)
			}
		}
	}
	return nil
}

// pingPongSend is ib_send_lat's round: A SENDs, B polls its receive CQ and
// SENDs back, A polls its receive CQ; each reposts the receive it used.
func (b *bench) pingPongSend(p *benchPair) error {
	if p.recvA == 0 {
		if err := b.postRecvs(p.a, p.rwrA, &p.recvA, uint64(len(p.rwrA))); err != nil {
			return err
		}
		if err := b.postRecvs(p.b, p.rwrB, &p.recvB, uint64(len(p.rwrB))); err != nil {
			return err
		}
	}
	w := &p.wrs[0]
	w.WRID = p.posted
	b.signal(w, p.posted)
	if err := postRetry(p.a, p.wrs[:1]); err != nil {
		return err
	}
	p.posted++
	if err := b.waitRecv(p, p.bRCQ, p.b, p.rwrB, &p.recvB); err != nil {
		return err
	}
	w = &p.bwr[0]
	w.WRID = p.bPosted
	b.signal(w, p.bPosted)
	if err := postRetry(p.b, p.bwr); err != nil {
		return err
	}
	p.bPosted++
	if err := b.waitRecv(p, p.aRCQ, p.a, p.rwrA, &p.recvA); err != nil {
		return err
	}
	return b.drainSends(p)
}

// waitRecv polls a receive CQ for one completion and posts a receive in
// its place.
func (b *bench) waitRecv(p *benchPair, cq *verbs.CQ, q *verbs.QP, tmpl []verbs.RecvWR, count *uint64) error {
	var t0 time.Time
	for i := 0; ; i++ {
		k, err := cq.PollCQ(p.wc[:1])
		if err != nil {
			return err
		}
		if k == 1 {
			wc := p.wc[0]
			if wc.Status != verbs.WCSuccess {
				p.errWC = &wc
				return fmt.Errorf("receive: %v", wc.Status)
			}
			p.lastByteLen = wc.ByteLen
			tmpl[0].WRID = *count
			if err := q.PostRecv(tmpl[0]); err != nil {
				return err
			}
			*count++
			return nil
		}
		if i&1023 == 1023 {
			if err := b.drainSends(p); err != nil {
				return err
			}
			if t0.IsZero() {
				t0 = time.Now()
			} else if time.Since(t0) > stallAfter {
				return errors.New("ping-pong: no receive completion")
			}
			runtime.Gosched()
		}
	}
}

// postPollOne is ib_read_lat's and ib_atomic_lat's round: post one
// signalled WR and poll until it completes.
func (b *bench) postPollOne(p *benchPair) error {
	w := &p.wrs[0]
	w.WRID = p.posted
	w.SendFlags |= verbs.SendSignaled
	if b.c.op == "cmp_swap" {
		w.CompareAdd, w.Swap = p.atomicN, p.atomicN+1
	}
	if err := postRetry(p.a, p.wrs[:1]); err != nil {
		return err
	}
	p.posted++
	if b.c.op == "fetch_add" || b.c.op == "cmp_swap" {
		p.atomicN++
	}
	var t0 time.Time
	for i := 0; ; i++ {
		k, err := p.aSCQ.PollCQ(p.wc[:1])
		if err != nil {
			return err
		}
		if k == 1 {
			if wc := p.wc[0]; wc.Status != verbs.WCSuccess {
				p.errWC = &wc
				return fmt.Errorf("wr %d: %v", wc.WRID, wc.Status)
			}
			return nil
		}
		if i&1023 == 1023 {
			if t0.IsZero() {
				t0 = time.Now()
			} else if time.Since(t0) > stallAfter {
				return errors.New("no completion")
			}
			runtime.Gosched()
		}
	}
}

// postRetry posts, waiting while the ring is full.
func postRetry(q *verbs.QP, wrs []verbs.SendWR) error {
	var t0 time.Time
	for {
		n, err := postSends(q, wrs)
		if err != nil || n == uint64(len(wrs)) {
			return err
		}
		wrs = wrs[n:]
		if t0.IsZero() {
			t0 = time.Now()
		} else if time.Since(t0) > stallAfter {
			return errors.New("the send queue stayed full")
		}
		runtime.Gosched()
	}
}

// ---------------------------------------------------------------- memcpy

var memcpySink []byte

// benchMemcpy is the CPU copying size bytes from one buffer to another,
// over and over: the scale against which the device's copies are judged.
func benchMemcpy(c *benchConfig, size int) (*benchResult, error) {
	src, dst := make([]byte, size), make([]byte, size)
	for i := range src {
		src[i] = byte(i*7 + 1)
	}
	batch := max(1, (64<<10)/size)
	r := &benchResult{Op: "memcpy", Mode: "bw", Bytes: size, QPs: 1, PostList: 1}
	copyN := func(n int) {
		for range n {
			copy(dst, src)
		}
	}
	copyN(max(c.warmup, batch))
	var before rusage
	before.read()
	samples := make([]benchSample, 0, 1<<14)
	samples = append(samples, benchSample{0, 0})
	start := time.Now()
	var done uint64
	var now int64
	for {
		copyN(batch)
		done += uint64(batch)
		now = int64(time.Since(start))
		if now-samples[len(samples)-1].t >= int64(50*time.Microsecond) {
			samples = append(samples, benchSample{now, done})
		}
		if c.duration > 0 && now >= int64(c.duration) || c.duration == 0 && done >= uint64(c.iters) {
			break
		}
	}
	samples = append(samples, benchSample{now, done})
	memcpySink = dst
	var after rusage
	after.read()
	r.CPUUser, r.CPUSys = after.user-before.user, after.sys-before.sys
	secs := float64(now) / 1e9
	r.WRs, r.Iterations, r.Seconds = done, done, secs
	r.MsgRate = float64(done) / secs / 1e6
	r.BWAvg = float64(done) * float64(size) / secs / (1 << 20)
	r.BWPeak = max(r.BWAvg, peakRate(samples, now)*float64(size)*1e9/(1<<20))
	r.Check = "ok"
	if !bytes.Equal(src, dst) {
		r.Check = "the copy differs"
	}
	return r, nil
}

// ---------------------------------------------------------------- counters

// snapshot is what the bench reads before and after a timed phase.
type snapshot struct {
	libDoorbells        uint64
	devDoorbells, parks uint64 // of both devices with --peer
	wirePkts, retrans   uint64
	syscr, syscw        uint64
	ctxsw               uint64
	ru                  rusage
	daemonTicks         uint64
	peerTicks           uint64
}

func (b *bench) snapshot() snapshot {
	var s snapshot
	for _, p := range b.pairs {
		s.libDoorbells += p.a.Doorbells() + p.b.Doorbells()
	}
	ctxs := []*verbs.Context{b.ctx}
	if b.ctxB != b.ctx {
		ctxs = append(ctxs, b.ctxB)
	}
	for i, ctx := range ctxs {
		if m, err := readKV(filepath.Join(ctx.Mount(), "counters")); err == nil {
			s.devDoorbells += m["doorbells"]
			s.parks += m["engine_parks"]
			s.retrans += m["retransmits"]
			if i == 0 {
				s.wirePkts = m["wire_packets_sent"] + m["wire_packets_recv"]
			}
		}
	}
	if b.pid > 0 {
		s.daemonTicks = procTicks(b.pid)
	}
	if b.pidB > 0 {
		s.peerTicks = procTicks(b.pidB)
	}
	s.ctxsw = ctxSwitches()
	s.ru.read()
	if m, err := readKV("/proc/self/io"); err == nil {
		s.syscr, s.syscw = m["syscr"], m["syscw"]
	}
	return s
}

// calibrate measures what a snapshot itself costs in reads, writes and
// context switches (its file reads, one of them from the FUSE mount), so
// that sub can take it out: two snapshots back to back.
func (b *bench) calibrate() {
	s0 := b.snapshot()
	s1 := b.snapshot()
	b.over = snapshot{syscr: s1.syscr - s0.syscr, syscw: s1.syscw - s0.syscw, ctxsw: s1.ctxsw - s0.ctxsw}
}

// sub fills r with the deltas from s0 to s, less one snapshot's own cost.
func (s *snapshot) sub(s0, over *snapshot, r *benchResult) {
	r.LibDoorbells = s.libDoorbells - s0.libDoorbells
	r.DevDoorbells = s.devDoorbells - s0.devDoorbells
	r.EngineParks = s.parks - s0.parks
	r.CtxSwitches = sat(s.ctxsw - s0.ctxsw - over.ctxsw)
	r.CPUUser, r.CPUSys = s.ru.user-s0.ru.user, s.ru.sys-s0.ru.sys
	if s.daemonTicks > 0 {
		r.DaemonCPU = float64(s.daemonTicks-s0.daemonTicks) / clockTicks
	}
	if s.peerTicks > 0 {
		r.PeerDaemonCPU = float64(s.peerTicks-s0.peerTicks) / clockTicks
	}
	r.WirePackets = s.wirePkts - s0.wirePkts
	r.Retransmits = s.retrans - s0.retrans
	r.ReadCalls = sat(s.syscr - s0.syscr - over.syscr)
	r.WriteCalls = sat(s.syscw - s0.syscw - over.syscw)
}

func sat(v uint64) uint64 {
	if int64(v) < 0 {
		return 0
	}
	return v
}

// readKV reads "key=value" or "key: value" lines of numbers.
func readKV(path string) (map[string]uint64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	m := map[string]uint64{}
	for l := range strings.Lines(string(data)) {
		k, v, ok := strings.Cut(l, "=")
		if !ok {
			k, v, ok = strings.Cut(l, ":")
		}
		if !ok {
			continue
		}
		if n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64); err == nil {
			m[strings.TrimSpace(k)] = n
		}
	}
	return m, nil
}

func ctxSwitches() uint64 {
	m, err := readKV("/proc/self/status")
	if err != nil {
		return 0
	}
	return m["voluntary_ctxt_switches"] + m["nonvoluntary_ctxt_switches"]
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat's times (100 on every
// Linux that Go runs on).
const clockTicks = 100.0

// procTicks is utime+stime of a process, in clock ticks.
func procTicks(pid int) uint64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseUint(f[11], 10, 64)
	st, _ := strconv.ParseUint(f[12], 10, 64)
	return u + st
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

type rusage struct{ user, sys float64 }

func (r *rusage) read() {
	var u unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &u) == nil {
		r.user = float64(u.Utime.Sec) + float64(u.Utime.Usec)/1e6
		r.sys = float64(u.Stime.Sec) + float64(u.Stime.Usec)/1e6
	}
}
