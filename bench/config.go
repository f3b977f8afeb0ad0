package bench

import (
	"errors"
	"fmt"
	"time"
)

// Config is what the flags ask for.
type Config struct {
	Op            string
	WriteDoorbell bool
	Mode          string
	Sizes         []int
	Iters         int
	Duration      time.Duration
	Warmup        int
	TxDepth       int
	RxDepth       int
	QPs           int
	Threads       int // bw mode: goroutines on OS threads of their own, QPs/Threads pairs each (0: 1)
	CQMod         int
	PostList      int
	Inline        int
	MTU           int
	Outs          int
	JSON          bool
	Mount         string
	Peer          string // the responders' mount (--peer); "" for loopback
	// DaemonPID finds the process serving a mount (0: unknown, or served
	// by this process), whose CPU the results include; nil knows none.
	DaemonPID func(mount string) int
}

func (c *Config) daemonPID(mount string) int {
	if c.DaemonPID == nil {
		return 0
	}
	return c.DaemonPID(mount)
}

// UsageError is a Config the devices cannot run (a path MTU or an inline
// size they do not offer): the command's usage was wrong, not the run.
type UsageError struct{ Err error }

func (e UsageError) Error() string { return e.Err.Error() }
func (e UsageError) Unwrap() error { return e.Err }

// Result is one size's measurement: a table row, and a JSON line.
type Result struct {
	Op         string  `json:"op"`
	Mode       string  `json:"mode"`
	Bytes      int     `json:"bytes"`
	Iterations uint64  `json:"iterations"` // per QP, as perftest counts them
	QPs        int     `json:"qps"`
	Threads    int     `json:"threads"`
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

var Ops = map[string]string{
	"write":     "RDMA_Write",
	"read":      "RDMA_Read",
	"send":      "Send",
	"fetch_add": "Atomic FETCH_AND_ADD",
	"cmp_swap":  "Atomic CMP_AND_SWAP",
	"memcpy":    "memcpy",
}

// Complete checks c and fills what is left to perftest's defaults, which
// depend on the operation and mode: the sizes (atomics are 8 bytes), the
// iterations, the TX depth, CQ moderation and the warm-up (Warmup < 0).
func (c *Config) Complete() error {
	if _, ok := Ops[c.Op]; !ok {
		return fmt.Errorf("--op %q: one of write, read, send, fetch_add, cmp_swap, memcpy", c.Op)
	}
	if c.Mode != "bw" && c.Mode != "lat" {
		return fmt.Errorf("--mode %q: bw or lat", c.Mode)
	}
	if c.Op == "memcpy" && c.Mode == "lat" {
		return errors.New("--op memcpy measures bandwidth only (--mode bw)")
	}
	if c.Op == "memcpy" && c.Peer != "" {
		return errors.New("--op memcpy uses no device (no --peer)")
	}
	switch {
	case c.Op == "fetch_add" || c.Op == "cmp_swap":
		c.Sizes = []int{8}
	case len(c.Sizes) > 0:
	case c.Mode == "bw":
		c.Sizes = []int{65536}
	default:
		c.Sizes = []int{2}
	}
	if c.Iters == 0 {
		c.Iters = map[string]int{"bw": 5000, "lat": 1000}[c.Mode]
	}
	if c.TxDepth == 0 {
		c.TxDepth = map[string]int{"bw": 128, "lat": 1}[c.Mode]
	}
	if c.CQMod == 0 {
		c.CQMod = max(1, min(c.TxDepth/2, 100))
		if c.Mode == "lat" && c.Op != "write" && c.Op != "send" {
			c.CQMod = 1
		} else if c.Mode == "lat" {
			c.CQMod = 100
		}
	}
	if c.Mode == "bw" {
		c.CQMod = min(c.CQMod, c.TxDepth)
	}
	if c.Warmup < 0 {
		c.Warmup = map[string]int{"bw": c.TxDepth * 8, "lat": 100}[c.Mode]
	}
	if c.Mode == "lat" {
		c.QPs = 1
	}
	if c.Iters < 1 || c.TxDepth < 1 || c.QPs < 1 || c.PostList < 1 || c.RxDepth < 1 || c.Inline < 0 {
		return errors.New("--iters, --tx-depth, --qps, --post-list and --rx-depth must be positive")
	}
	if c.Threads == 0 {
		c.Threads = 1
	}
	switch {
	case c.Threads < 1:
		return fmt.Errorf("--threads %d: must be positive", c.Threads)
	case c.Threads == 1:
	case c.Op == "memcpy":
		return errors.New("--threads: --op memcpy is one thread (no device)")
	case c.Mode != "bw":
		return errors.New("--threads: bandwidth mode only (--mode bw; a latency test is one QP pair)")
	case c.Threads > c.QPs || c.QPs%c.Threads != 0:
		return fmt.Errorf("--threads %d: must divide --qps %d (each thread drives --qps/--threads QP pairs of its own)", c.Threads, c.QPs)
	}
	c.PostList = min(c.PostList, c.TxDepth)
	if c.Op == "send" && c.Mode == "bw" && c.RxDepth < c.PostList {
		return errors.New("--rx-depth must be at least --post-list")
	}

	return nil
}
