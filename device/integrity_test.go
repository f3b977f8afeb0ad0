package device

import (
	"encoding/binary"
	"flag"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"rdmafs/qp"
)

// TestDataIntegrityRandomMix drives a seeded random mix of SEND, WRITE,
// WRITE_WITH_IMM, READ, atomics and ATOMIC WRITE of random sizes and SGLs through an RC
// pair (and SEND/WRITE through a UC pair), and checks every byte against a
// model of the responder's memory kept here, and every completion.
//
// -integrity.seeds=N runs N seeds instead of the fixed one.
func TestDataIntegrityRandomMix(t *testing.T) {
	for i := 0; i < *integritySeeds; i++ {
		for _, typ := range []qp.Type{qp.TypeRC, qp.TypeUC} {
			seed := uint64(0x5eed) + uint64(typ) + uint64(i)<<8
			t.Run(fmt.Sprintf("%v/%#x", typ, seed), func(t *testing.T) { integrityRun(t, typ, seed, false) })
		}
		seed := uint64(0x1055) + uint64(i)<<8
		t.Run(fmt.Sprintf("rc-lossy/%#x", seed), func(t *testing.T) { integrityRun(t, qp.TypeRC, seed, true) })
		seed = uint64(0xfa17) + uint64(i)<<8
		t.Run(fmt.Sprintf("rc-faults/%#x", seed), func(t *testing.T) { integrityFaultsRun(t, seed) })
	}
}

var (
	integritySeeds = flag.Int("integrity.seeds", 1, "seeds for TestDataIntegrityRandomMix")
	integrityLoss  = flag.Int("integrity.loss", 10, "packets in 1000 the lossy link loses")
)

type integ struct {
	t        *testing.T
	ea, eb   *env // the requester's device and the responder's (the same on loopback)
	rng      *rand.Rand
	a, b     *QP
	acq, bcq *CQ
	src      *MR // requester's source memory (never written by the device)
	dst      *MR // requester's READ/atomic results (bump-allocated per batch)
	rem      *MR // responder memory for WRITE/READ/atomics
	rcv      *MR // responder receive buffers (bump-allocated per batch)
	bsrc     *MR // the responder's own SEND source, for traffic the other way
	bindMR   *MR // a window over it is rebound now and then (a local op in the stream)
	mw       *MW
	arcv     *MR // the requester's receive buffers for it
	model    []byte
	maxMsg   int
	lossy    bool
	ops      int
	// collect gathers the completions of a batch: at least want of them
	// on cq, waiting (and, on a lossy link, driving the retry timers) as
	// needed.
	collect func(e *env, cq *CQ, want int) []string
	id      uint64
	// per batch
	dstNext, rcvNext uint64
	sends, recvs     []qp.SendWR
	wantA, wantB     []string
	checks           []func()
	bsends, arecvs   []qp.SendWR
	arcvNext         uint64
	reads            []readSpan
}

// readSpan is a READ of this batch: a duplicate READ re-reads memory
// (IBA 9.9.3, rxe), so on a lossy link a READ whose bytes a later WRITE of
// the batch overwrites may return either version and is not checked.
type readSpan struct {
	from, to uint64
	skip     *bool
}

const atomicArea = 4096 // the first bytes of rem hold the atomic words

// With lossy, the link loses 1% of all packets (-integrity.loss), requests and responses
// alike, and the RC transport has to recover every one by retransmission.
func integrityRun(t *testing.T, typ qp.Type, seed uint64, lossy bool) {
	e := newEnv(t)
	g := newInteg(t, e, e, typ, seed, "")
	if lossy {
		g.ops, g.maxMsg, g.lossy = 600, 256<<10, true
		lrng := rand.New(rand.NewPCG(seed, 99))
		e.link(func(p *packet) linkAction {
			if lrng.IntN(1000) < *integrityLoss {
				return drop
			}
			return deliver
		})
	}
	g.collect = g.collectFake
	g.run(typ)
}

// integrityFaultsRun is the RC mix behind the fault injector: 1% of the
// packets each way dropped, 1% duplicated, 1% reordered.
func integrityFaultsRun(t *testing.T, seed uint64) {
	e := newEnv(t)
	g := newInteg(t, e, e, qp.TypeRC, seed, "")
	g.ops, g.maxMsg, g.lossy = 400, 256<<10, true
	l := e.faults(seed, 10, 10, 10)
	g.collect = g.collectFake
	g.run(qp.TypeRC)
	e.d.mu.Lock()
	t.Logf("%d dropped %d duplicated %d reordered", l.dropped, l.duped, l.reo)
	e.d.mu.Unlock()
	if c := g.b.CountersSnapshot(); c.DuplicateReqs == 0 {
		t.Fatalf("no duplicates: %+v", c)
	}
}

// newInteg makes the QP pair (a on ea, b on eb) and the memory of a
// random-mix run; over adds connect attributes to both sides.
func newInteg(t *testing.T, ea, eb *env, typ qp.Type, seed uint64, over string) *integ {
	rng := rand.New(rand.NewPCG(seed, seed*7))
	mtus := []int{256, 512, 1024, 2048, 4096}
	mtu := mtus[rng.IntN(len(mtus))]
	over = fmt.Sprintf("path_mtu=%d %s", mtu, over)
	var a, b *QP
	var acq, bcq *CQ
	if ea == eb {
		a, b, acq, bcq = ea.pairX(typ, over, over)
	} else {
		a, b, acq, bcq = wireQPs(ea, eb, typ, over, over)
	}
	const memSize = 8 << 20
	g := &integ{t: t, ea: ea, eb: eb, rng: rng, a: a, b: b, acq: acq, bcq: bcq,
		src: ea.mr(memSize, 0), dst: ea.mr(2*memSize, qp.AccessLocalWrite),
		rem: eb.mr(memSize, rwAccess), rcv: eb.mr(2*memSize, qp.AccessLocalWrite),
		bsrc: eb.mr(1<<20, 0), arcv: ea.mr(4<<20, qp.AccessLocalWrite),
		bindMR: ea.mr(1<<16, qp.AccessLocalWrite|qp.AccessMWBind), mw: ea.mw(1),
		maxMsg: 2 << 20, ops: 2000}
	if typ == qp.TypeUC {
		g.ops = 600
	}
	t.Logf("seed %#x path_mtu %d", seed, mtu)
	return g
}

// run drives the random mix and checks the responder's memory at the end.
func (g *integ) run(typ qp.Type) {
	t := g.t
	if testing.Short() {
		g.ops /= 4
		g.maxMsg = 256 << 10
	}
	fill(g.rem.Mem(), 77)
	fill(g.bsrc.Mem(), 78)
	g.model = append([]byte(nil), g.rem.Mem()...)
	for done := 0; done < g.ops; {
		done += g.batch(typ)
	}
	sameBytes(t, g.rem.Mem(), g.model)
	if g.ea == g.eb {
		g.ea.healthy(g.a, g.b)
	} else {
		wireSettle(t, g.ea, g.eb)
		g.ea.healthy(g.a)
		g.eb.healthy(g.b)
	}
}

// collectFake is collect on one device with the fake clock: the engine
// is quiesced, and on a lossy link the clock is advanced by a retransmit
// timeout until everything has come.
func (g *integ) collectFake(e *env, cq *CQ, want int) []string {
	t := g.t
	got := e.poll(cq)
	for i := 0; g.lossy && len(got) < want; i++ {
		if i == 10000 {
			e.d.mu.Lock()
			a, b := g.a, g.b
			t.Logf("a %v req.psn %d comp.psn %d acked %d reqIdx %d tail %d fetched %d waitRNR %v needRetry %v timer %v retryLeft %d",
				a.attr.QPState, a.req.psn, a.comp.psn, a.comp.acked, a.req.reqIdx, a.req.sqHead, a.req.sqFetched, a.req.waitRNR, a.req.needRetry, a.comp.retryTimer != nil, a.comp.retryLeft)
			for i := a.req.sqHead; i != a.req.sqFetched; i++ {
				w := &a.req.swq[i&a.req.sqMask()]
				t.Logf("  wqe %d %v state %d status %v psn %d..%d len %d sent %d", i, w.wr.Opcode, w.state, w.status, w.firstPSN, w.lastPSN, w.length, w.sent)
			}
			t.Logf("b %v resp.psn %d inSend %v inWrite %v", b.attr.QPState, b.resp.psn, b.resp.inSend, b.resp.inWrite)
			e.d.mu.Unlock()
			t.Fatalf("stuck: %d of %d completions on cq %d:\n%s", len(got), want, cq.Handle, strings.Join(got, "\n"))
		}
		e.clk.Advance(qp.AckTimeout(14))
		got = append(got, e.poll(cq)...)
	}
	return got
}

// size picks a message size: mostly small, some medium, a few large.
func (g *integ) size() int {
	switch r := g.rng.IntN(100); {
	case r < 5:
		return 0
	case r < 70:
		return g.rng.IntN(4097)
	case r < 95:
		return g.rng.IntN(256 << 10)
	default:
		return g.rng.IntN(g.maxMsg + 1)
	}
}

// split cuts n into 1..4 lengths (some may be 0).
func (g *integ) split(n int) []int {
	k := 1 + g.rng.IntN(4)
	cuts := []int{0, n}
	for i := 1; i < k; i++ {
		cuts = append(cuts, g.rng.IntN(n+1))
	}
	sortInts(cuts)
	var out []int
	for i := 1; i < len(cuts); i++ {
		out = append(out, cuts[i]-cuts[i-1])
	}
	return out
}

func sortInts(s []int) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

// srcSGL builds a gather list of n bytes anywhere in src and returns the
// bytes it names.
func (g *integ) srcSGL(n int) ([]qp.SGE, []byte) {
	var sgl []qp.SGE
	var data []byte
	for _, l := range g.split(n) {
		off := g.rng.IntN(len(g.src.Mem()) - l + 1)
		sgl = append(sgl, qp.SGE{Addr: uint64(off), Length: uint32(l), LKey: g.src.LKey})
		data = append(data, g.src.Mem()[off:off+l]...)
	}
	return sgl, data
}

// dstSGL bump-allocates n bytes (plus slack) in mr as 1..4 disjoint SGEs
// with random gaps; ok is false when the batch's space is used up.
func (g *integ) dstSGL(mr *MR, next *uint64, n, slack int) (sgl []qp.SGE, spans [][2]uint64, ok bool) {
	lens := g.split(n)
	lens[len(lens)-1] += slack
	pos := *next
	for _, l := range lens {
		pos += uint64(g.rng.IntN(64))
		if pos+uint64(l) > uint64(len(mr.Mem())) {
			return nil, nil, false
		}
		sgl = append(sgl, qp.SGE{Addr: pos, Length: uint32(l), LKey: mr.LKey})
		spans = append(spans, [2]uint64{pos, pos + uint64(l)})
		pos += uint64(l)
	}
	*next = pos
	return sgl, spans, true
}

func gatherSpans(mem []byte, spans [][2]uint64, n int) []byte {
	var out []byte
	for _, s := range spans {
		out = append(out, mem[s[0]:s[1]]...)
	}
	return out[:n]
}

// batch posts up to 48 random operations, waits for them and checks.
func (g *integ) batch(typ qp.Type) int {
	t := g.t
	g.dstNext, g.rcvNext = 0, 0
	g.sends, g.recvs, g.wantA, g.wantB, g.checks, g.reads = nil, nil, nil, nil, nil, nil
	g.bsends, g.arecvs, g.arcvNext = nil, nil, 0
	// New source bytes for this batch (nothing is in flight).
	for i := 0; i < 8; i++ {
		off := g.rng.IntN(len(g.src.Mem()) - 4096)
		for j := 0; j < 4096; j += 8 {
			binary.LittleEndian.PutUint64(g.src.Mem()[off+j:], g.rng.Uint64())
		}
	}
	n := 1 + g.rng.IntN(48)
	posted := 0
	for i := 0; i < n; i++ {
		var ok bool
		switch r := g.rng.IntN(100); {
		case r < 3:
			ok = g.opBind()
		case r < 6:
			ok = g.opReverseSend()
		case r < 30:
			ok = g.opSend()
		case r < 55:
			ok = g.opWrite(false)
		case r < 62:
			ok = g.opWrite(true)
		case typ == qp.TypeUC:
			ok = g.opSend()
		case r < 85:
			ok = g.opRead()
		default:
			ok = g.opAtomic()
		}
		if !ok {
			break
		}
		posted++
	}
	if len(g.recvs) > 0 {
		rwrs := make([]qp.RecvWR, len(g.recvs))
		for i, s := range g.recvs {
			rwrs[i] = qp.RecvWR{WRID: s.WRID, SGL: s.SGL}
		}
		if _, err := g.b.PostRecv(rwrs); err != nil {
			t.Fatal(err)
		}
	}
	if len(g.arecvs) > 0 {
		rwrs := make([]qp.RecvWR, len(g.arecvs))
		for i, s := range g.arecvs {
			rwrs[i] = qp.RecvWR{WRID: s.WRID, SGL: s.SGL}
		}
		if _, err := g.a.PostRecv(rwrs); err != nil {
			t.Fatal(err)
		}
		// The other direction runs at the same time.
		if _, err := g.b.PostSend(g.bsends); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := g.a.PostSend(g.sends); err != nil {
		t.Fatal(err)
	}
	wantA, wantB := g.wantA, g.wantB
	g.wantA, g.wantB = nil, nil
	for _, w := range g.bsends {
		wantB = append(wantB, sendWC(w.WRID, "success", "send", g.b, int(w.InvalidateRKey)))
	}
	for _, w := range g.arecvs {
		wantA = append(wantA, recvWC(w.WRID, "success", "recv", g.a, int(w.InvalidateRKey), g.b, ""))
	}
	got := g.collect(g.ea, g.acq, len(wantA))
	gotB := g.collect(g.eb, g.bcq, len(wantB))
	// Each CQ holds two streams (sends, receives), each in order; how
	// they interleave depends on the engine's schedule.
	sameStreams(t, "a", got, wantA)
	sameStreams(t, "b", gotB, wantB)
	for _, c := range g.checks {
		c()
	}
	return posted
}

func (g *integ) next() uint64 { g.id++; return g.id }

// sameStreams compares completions split into receive and send streams,
// each in order.
func sameStreams(t *testing.T, name string, got, want []string) {
	t.Helper()
	split := func(l []string) (r, s []string) {
		for _, x := range l {
			if strings.Contains(x, "opcode=recv") {
				r = append(r, x)
			} else {
				s = append(s, x)
			}
		}
		return
	}
	gr, gs := split(got)
	wr, ws := split(want)
	if strings.Join(gr, "\n") != strings.Join(wr, "\n") || strings.Join(gs, "\n") != strings.Join(ws, "\n") {
		t.Fatalf("%s completions:\n got %s\nwant %s", name, strings.Join(got, "\n     "), strings.Join(want, "\n     "))
	}
}

// opBind rebinds the type 1 window: a local operation between the others.
func (g *integ) opBind() bool {
	if len(g.sends) >= 60 {
		return false
	}
	id := g.next()
	addr := uint64(g.rng.IntN(1 << 15))
	g.sends = append(g.sends, qp.SendWR{WRID: id, Opcode: qp.WRBindMW, SendFlags: qp.SendSignaled, MW: g.mw.Handle,
		RKey: uint32(id), BindLKey: g.bindMR.LKey, BindAddr: addr, BindLength: 1 + uint64(g.rng.IntN(1<<15)), BindAccess: qp.AccessRemoteRead})
	g.wantA = append(g.wantA, sendWC(id, "success", "bind_mw", g.a, 0))
	g.checks = append(g.checks, func() {
		if at := g.mw.Attr(); !at.Bound {
			g.t.Fatalf("window not bound: %+v", at)
		}
	})
	return true
}

// opReverseSend queues a SEND from b to a, posted alongside a's batch.
func (g *integ) opReverseSend() bool {
	if len(g.bsends) >= 60 {
		return false
	}
	n := g.rng.IntN(20000)
	off := g.rng.IntN(len(g.bsrc.Mem()) - n)
	data := g.bsrc.Mem()[off : off+n]
	rsgl, spans, ok := g.dstSGL(g.arcv, &g.arcvNext, n, g.rng.IntN(10))
	if !ok {
		return false
	}
	id := g.next()
	// InvalidateRKey carries the length to the expectation builder.
	g.bsends = append(g.bsends, qp.SendWR{WRID: id, Opcode: qp.WRSend, SendFlags: qp.SendSignaled,
		SGL: []qp.SGE{{Addr: uint64(off), Length: uint32(n), LKey: g.bsrc.LKey}}, InvalidateRKey: uint32(n)})
	g.arecvs = append(g.arecvs, qp.SendWR{WRID: id, SGL: rsgl, InvalidateRKey: uint32(n)})
	g.checks = append(g.checks, func() {
		g.t.Helper()
		sameBytes(g.t, gatherSpans(g.arcv.Mem(), spans, n), data)
	})
	return true
}

func (g *integ) opSend() bool {
	n := g.size()
	sgl, data := g.srcSGL(n)
	rsgl, spans, ok := g.dstSGL(g.rcv, &g.rcvNext, n, g.rng.IntN(100))
	if !ok || len(g.sends) >= 60 {
		return false
	}
	id := g.next()
	wr := qp.SendWR{WRID: id, Opcode: qp.WRSend, SendFlags: qp.SendSignaled, SGL: sgl}
	extra := ""
	if g.rng.IntN(4) == 0 {
		wr.Opcode, wr.ImmData = qp.WRSendWithImm, uint32(id)
		extra = fmt.Sprintf(" imm_data=%d", id)
	}
	g.sends = append(g.sends, wr)
	g.recvs = append(g.recvs, qp.SendWR{WRID: id, SGL: rsgl})
	g.wantA = append(g.wantA, sendWC(id, "success", "send", g.a, n))
	w := fmt.Sprintf("wr_id=%d status=success opcode=recv qp_num=%d byte_len=%d%s src_qp=%d", id, g.b.QPN, n, extra, g.a.QPN)
	if extra != "" {
		w += " wc_flags=with_imm"
	}
	g.wantB = append(g.wantB, w)
	g.checks = append(g.checks, func() {
		g.t.Helper()
		sameBytes(g.t, gatherSpans(g.rcv.Mem(), spans, n), data)
	})
	return true
}

func (g *integ) remRange(n int) uint64 {
	return atomicArea + uint64(g.rng.IntN(len(g.model)-atomicArea-n+1))
}

func (g *integ) opWrite(imm bool) bool {
	if len(g.sends) >= 60 {
		return false
	}
	n := g.size()
	sgl, data := g.srcSGL(n)
	va := g.remRange(n)
	id := g.next()
	wr := qp.SendWR{WRID: id, Opcode: qp.WRRDMAWrite, SendFlags: qp.SendSignaled, SGL: sgl, RemoteAddr: va, RKey: g.rem.RKey}
	if imm {
		wr.Opcode, wr.ImmData = qp.WRRDMAWriteWithImm, uint32(id)
		g.recvs = append(g.recvs, qp.SendWR{WRID: id})
		g.wantB = append(g.wantB, fmt.Sprintf("wr_id=%d status=success opcode=recv_rdma_with_imm qp_num=%d byte_len=%d imm_data=%d src_qp=%d wc_flags=with_imm",
			id, g.b.QPN, n, id, g.a.QPN))
	}
	if n == 0 && g.rng.IntN(2) == 0 {
		wr.RKey = 0xdead00 // a zero-length write needs no valid rkey
	}
	g.sends = append(g.sends, wr)
	g.wantA = append(g.wantA, sendWC(id, "success", "rdma_write", g.a, n))
	copy(g.model[va:], data)
	for _, r := range g.reads {
		if g.lossy && va < r.to && r.from < va+uint64(n) {
			*r.skip = true
		}
	}
	return true
}

func (g *integ) opRead() bool {
	if len(g.sends) >= 60 {
		return false
	}
	n := g.size()
	sgl, spans, ok := g.dstSGL(g.dst, &g.dstNext, n, 0)
	if !ok {
		return false
	}
	va := g.remRange(n)
	id := g.next()
	want := append([]byte(nil), g.model[va:va+uint64(n)]...)
	g.sends = append(g.sends, qp.SendWR{WRID: id, Opcode: qp.WRRDMARead, SendFlags: qp.SendSignaled, SGL: sgl, RemoteAddr: va, RKey: g.rem.RKey})
	g.wantA = append(g.wantA, sendWC(id, "success", "rdma_read", g.a, n))
	skip := new(bool)
	g.reads = append(g.reads, readSpan{va, va + uint64(n), skip})
	g.checks = append(g.checks, func() {
		g.t.Helper()
		if !*skip {
			sameBytes(g.t, gatherSpans(g.dst.Mem(), spans, n), want)
		}
	})
	return true
}

func (g *integ) opAtomic() bool {
	if len(g.sends) >= 60 {
		return false
	}
	if g.rng.IntN(4) == 0 {
		// ATOMIC WRITE: a word of the atomic area, which the atomics of
		// this and later batches read back (a duplicate stored again
		// after one of them would show there and in the model).
		va := uint64(g.rng.IntN(atomicArea/8)) * 8
		id := g.next()
		wr := qp.SendWR{WRID: id, Opcode: qp.WRAtomicWrite, SendFlags: qp.SendSignaled, RemoteAddr: va, RKey: g.rem.RKey,
			CompareAdd: g.rng.Uint64()}
		g.sends = append(g.sends, wr)
		g.wantA = append(g.wantA, sendWC(id, "success", "atomic_write", g.a, 8))
		binary.LittleEndian.PutUint64(g.model[va:], wr.CompareAdd)
		return true
	}
	sgl, spans, ok := g.dstSGL(g.dst, &g.dstNext, 8, 0)
	if !ok {
		return false
	}
	// One SGE of 8 bytes: merge what dstSGL split.
	sgl = []qp.SGE{{Addr: spans[0][0], Length: 8, LKey: g.dst.LKey}}
	g.dstNext = spans[0][0] + 8
	va := uint64(g.rng.IntN(atomicArea/8)) * 8
	cur := binary.LittleEndian.Uint64(g.model[va:])
	id := g.next()
	wr := qp.SendWR{WRID: id, SendFlags: qp.SendSignaled, SGL: sgl, RemoteAddr: va, RKey: g.rem.RKey}
	var after uint64
	if g.rng.IntN(2) == 0 {
		wr.Opcode = qp.WRAtomicFetchAndAdd
		wr.CompareAdd = g.rng.Uint64()
		after = cur + wr.CompareAdd
		g.wantA = append(g.wantA, sendWC(id, "success", "fetch_add", g.a, 8))
	} else {
		wr.Opcode = qp.WRAtomicCmpAndSwp
		wr.CompareAdd, wr.Swap = cur, g.rng.Uint64()
		if g.rng.IntN(3) == 0 {
			wr.CompareAdd = ^cur
		}
		after = cur
		if wr.CompareAdd == cur {
			after = wr.Swap
		}
		g.wantA = append(g.wantA, sendWC(id, "success", "comp_swap", g.a, 8))
	}
	binary.LittleEndian.PutUint64(g.model[va:], after)
	g.sends = append(g.sends, wr)
	addr := sgl[0].Addr
	g.checks = append(g.checks, func() {
		g.t.Helper()
		if got := binary.LittleEndian.Uint64(g.dst.Mem()[addr:]); got != cur {
			g.t.Fatalf("atomic %d returned %#x, want %#x", id, got, cur)
		}
	})
	return true
}
