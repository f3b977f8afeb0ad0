package bench

import (
	"encoding/json"
	"fmt"
	"io"
)

// ---------------------------------------------------------------- output

type printer interface {
	header()
	row(*Result)
	footer()
}

type jsonPrinter struct{ enc *json.Encoder }

func (p *jsonPrinter) header()       {}
func (p *jsonPrinter) row(r *Result) { p.enc.Encode(r) }
func (p *jsonPrinter) footer()       {}

type tablePrinter struct {
	w    io.Writer
	c    *Config
	rows []*Result
}

const benchRule = "---------------------------------------------------------------------------------------"

func (p *tablePrinter) header() {
	c := p.c
	kind := map[string]string{"bw": "BW", "lat": "Latency"}[c.Mode]
	transport := "rdmafs loopback"
	if c.Peer != "" {
		transport = "rdmafs RoCEv2"
	}
	title := fmt.Sprintf("%s %s Test (%s)", Ops[c.Op], kind, transport)
	fmt.Fprintln(p.w, benchRule)
	fmt.Fprintf(p.w, "%*s\n", (len(benchRule)+len(title))/2, title)
	if c.Op != "memcpy" {
		fmt.Fprintf(p.w, " Number of qps   : %-14d Transport type : %s\n", c.QPs, transport)
		if c.Threads > 1 {
			fmt.Fprintf(p.w, " Threads         : %d (%d qps each; the rows are their sum)\n", c.Threads, c.QPs/c.Threads)
		}
		fmt.Fprintf(p.w, " Connection type : RC             Mount          : %s\n", c.Mount)
		if c.Peer != "" {
			fmt.Fprintf(p.w, "                                  Peer mount     : %s\n", c.Peer)
		}
		fmt.Fprintf(p.w, " TX depth        : %d\n", c.TxDepth)
		if c.Op == "send" {
			fmt.Fprintf(p.w, " RX depth        : %d\n", c.RxDepth)
		}
		fmt.Fprintf(p.w, " CQ Moderation   : %d\n", c.CQMod)
		fmt.Fprintf(p.w, " Post list       : %d\n", c.PostList)
		fmt.Fprintf(p.w, " Mtu             : %d[B]\n", c.MTU)
		if c.Op == "read" || c.Op == "fetch_add" || c.Op == "cmp_swap" {
			fmt.Fprintf(p.w, " Outstand reads  : %d\n", c.Outs)
		}
		fmt.Fprintf(p.w, " Max inline data : %d[B]\n", c.Inline)
	}
	fmt.Fprintln(p.w, benchRule)
	if c.Mode == "bw" {
		fmt.Fprintln(p.w, " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]")
	} else {
		fmt.Fprintln(p.w, " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec]")
	}
}

func (p *tablePrinter) row(r *Result) {
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
	if p.c.Op == "memcpy" {
		return
	}
	var s Result
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
	if p.c.Peer != "" {
		fmt.Fprintf(p.w, " wire: %d packets sent and received by %s's device, %d retransmissions\n", s.WirePackets, p.c.Mount, s.Retransmits)
	}
	if s.Check == "" {
		fmt.Fprintln(p.w, " data check: ok")
	} else {
		fmt.Fprintf(p.w, " data check: FAILED: %s\n", s.Check)
	}
	fmt.Fprintln(p.w, benchRule)
}
