package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"rdmafs/verbs"
)

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
func (s *snapshot) sub(s0, over *snapshot, r *Result) {
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

type rusage struct{ user, sys float64 }

func (r *rusage) read() {
	var u unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &u) == nil {
		r.user = float64(u.Utime.Sec) + float64(u.Utime.Usec)/1e6
		r.sys = float64(u.Stime.Sec) + float64(u.Stime.Usec)/1e6
	}
}
