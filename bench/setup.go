package bench

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"rdmafs/qp"
	"rdmafs/verbs"
)

// ---------------------------------------------------------------- setup

// bench is the device side of a run: one PD per device, and per QP pair
// two QPs, four CQs (each QP's send and receive CQ) and two MRs. The A
// side (requesters) is on ctx; the B side on ctxB, which is ctx itself
// unless --peer names another mount.
type bench struct {
	c         *Config
	ctx, ctxB *verbs.Context
	pd, pdB   *verbs.PD
	pairs     []*benchPair
	buf       int // bytes of each half of an MR: the largest size, rounded up
	pid, pidB int // the daemons', 0 when unknown (pidB only with --peer)
	rng       uint64
	over      snapshot     // what a snapshot costs
	threads   []threadStat // what each thread did in the last bw phase
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

func newBench(c *Config) (*bench, error) {
	opts := verbs.Options{WriteDoorbell: c.WriteDoorbell}
	ctx, err := verbs.OpenWithOptions(c.Mount, opts)
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
	if c.Peer != "" {
		if b.ctxB, err = verbs.OpenWithOptions(c.Peer, opts); err != nil {
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
		}{{c.Mount, da.port.GID}, {c.Peer, db.port.GID}} {
			if a := netip.AddrFrom16(d.gid); !a.Is4In6() {
				return nil, fmt.Errorf("--peer: %s has port GID %s, not an IPv4-mapped ::ffff:a.b.c.d: mount it with --addr IPv4 to bench over RoCEv2", d.mnt, a)
			}
		}
		b.pidB = c.daemonPID(c.Peer)
	}
	port, dev := da.port, da.dev
	mtu := min(port.ActiveMTU, db.port.ActiveMTU)
	if c.MTU != 0 {
		m, okm := qp.MTUFromBytes(c.MTU)
		if !okm {
			return nil, UsageError{fmt.Errorf("--mtu %d: not one of 256 512 1024 2048 4096", c.MTU)}
		}
		mtu = m
	}
	c.MTU = mtu.Bytes()
	if c.Outs == 0 {
		// A initiates, B responds (and initiates the ping-pong answers).
		c.Outs = int(min(dev.MaxQPInitRdAtom, dev.MaxQPRdAtom, db.dev.MaxQPInitRdAtom, db.dev.MaxQPRdAtom, 128))
	}
	c.Outs = max(1, min(c.Outs, 255))
	if maxInline := min(dev.MaxInlineData, db.dev.MaxInlineData); c.Inline > int(maxInline) {
		return nil, UsageError{fmt.Errorf("--inline-size %d: the devices' max_inline_data is %d", c.Inline, maxInline)}
	}
	b.buf = (slices.Max(c.Sizes) + 63) &^ 63
	b.pid = c.daemonPID(ctx.Mount())
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
	if c.Op == "send" {
		rx = c.RxDepth
	}
	capa := verbs.QPCap{MaxSendWR: uint32(max(c.TxDepth, 2)), MaxRecvWR: uint32(rx), MaxSendSGE: 1, MaxRecvSGE: 1,
		MaxInlineData: uint32(c.Inline)}
	for range c.QPs {
		p := &benchPair{atomicWord: 2 * b.buf, atom: 2*b.buf + 8}
		b.pairs = append(b.pairs, p)
		cqs := []struct {
			cq  **verbs.CQ
			ctx *verbs.Context
		}{{&p.aSCQ, ctx}, {&p.aRCQ, ctx}, {&p.bSCQ, b.ctxB}, {&p.bRCQ, b.ctxB}}
		for _, q := range cqs {
			if *q.cq, err = q.ctx.CreateCQ(max(c.TxDepth, rx) + 16); err != nil {
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
		ca := verbs.ConnectAttr{DGID: db.port.GID, DestQPN: p.b.QPN, PathMTU: mtu, MaxRdAtomic: uint8(c.Outs)}
		if err := p.a.Connect(ca); err != nil {
			return nil, err
		}
		ca.DGID, ca.DestQPN = port.GID, p.a.QPN
		if err := p.b.Connect(ca); err != nil {
			return nil, err
		}
		p.wrs = make([]verbs.SendWR, c.PostList)
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
		p.wc = make([]verbs.WC, max(c.TxDepth, rx)+16)
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
