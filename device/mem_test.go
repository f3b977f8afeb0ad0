package device

import (
	"testing"

	"rdmafs/qp"
)

func TestInRange(t *testing.T) {
	const max = ^uint64(0)
	for _, c := range []struct {
		addr, n, base, size uint64
		off                 uint64
		ok                  bool
	}{
		{100, 10, 100, 10, 0, true},
		{105, 5, 100, 10, 5, true},
		{110, 0, 100, 10, 10, true}, // empty, at the end
		{110, 1, 100, 10, 0, false},
		{99, 1, 100, 10, 0, false},
		{105, 6, 100, 10, 0, false},
		{max, 2, max - 10, 11, 0, false}, // addr+n wraps
		{max - 1, 1, max - 10, 10, 9, true},
		{100, max, 100, 10, 0, false},
		{max, max, 0, max, 0, false},
		{0, max, 0, max, 0, true},
	} {
		off, ok := inRange(c.addr, c.n, c.base, c.size)
		if ok != c.ok || (ok && off != c.off) {
			t.Errorf("inRange(%#x, %#x, %#x, %#x) = %d, %v; want %d, %v", c.addr, c.n, c.base, c.size, off, ok, c.off, c.ok)
		}
	}
}

func TestKeyChecks(t *testing.T) {
	e := newEnv(t)
	d := e.d
	const hiIOVA = 1<<64 - 8192
	reg := func(pd *PD, n, iova uint64, acc qp.Access) *MR {
		mr, err := d.RegMR(0, qp.CreateMR{PD: pd.Handle, Length: n, IOVA: iova, HasIOVA: true, Access: acc})
		if err != nil {
			t.Fatal(err)
		}
		return mr
	}
	pd2, _ := d.AllocPD(0)
	rw := reg(e.pd, 4096, 0x10000, rwAccess|qp.AccessMWBind)
	ro := reg(e.pd, 4096, 0, 0)
	hi := reg(e.pd, 4096, hiIOVA, rwAccess)
	other := reg(pd2, 4096, 0, rwAccess)
	inval := reg(e.pd, 4096, 0, rwAccess)
	gone := reg(e.pd, 4096, 0, rwAccess)
	goneKey := gone.LKey
	if err := gone.Dereg(); err != nil {
		t.Fatal(err)
	}
	if _, err := d.RegMR(0, qp.CreateMR{PD: e.pd.Handle, Length: 4096, IOVA: 1<<64 - 4096, HasIOVA: true}); Errno(err) != 22 {
		t.Fatalf("MR whose end wraps: %v, want EINVAL", err)
	}
	cq := e.cq(4)
	q := e.qp(qpOpts{scq: cq, rcq: cq})
	q2 := e.qp(qpOpts{scq: cq, rcq: cq})
	qOther, err := d.CreateQP(0, qp.CreateQP{PD: pd2.Handle, Type: qp.TypeRC, SendCQ: cq.Handle, RecvCQ: cq.Handle,
		Cap: qp.Cap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	mw1, mw2, mwZB, mwUnbound, mwDead := e.mw(1), e.mw(2), e.mw(2), e.mw(2), e.mw(2)
	deadMR := reg(e.pd, 4096, 0, rwAccess|qp.AccessMWBind)
	bind := func(mw *MW, mr *MR, addr, n uint64, acc qp.Access) {
		t.Helper()
		d.mu.Lock()
		defer d.mu.Unlock()
		if st := d.bindMWLocked(q, &qp.SendWR{MW: mw.Handle, RKey: 0x33, BindLKey: mr.LKey, BindAddr: addr, BindLength: n, BindAccess: acc}); st != qp.WCSuccess {
			t.Fatalf("bind: %v", st)
		}
	}
	bind(mw1, rw, 0x10100, 256, qp.AccessRemoteRead)
	bind(mw2, rw, 0x10200, 256, qp.AccessRemoteWrite|qp.AccessRemoteRead)
	bind(mwZB, rw, 0x10400, 512, qp.AccessRemoteRead|qp.AccessZeroBased)
	bind(mwDead, deadMR, 0, 64, qp.AccessRemoteRead)
	d.mu.Lock()
	if st := d.invalidateKeyLocked(q, inval.LKey, false); st != qp.WCSuccess {
		t.Fatal(st)
	}
	deadMR.valid = false // as if invalidated while the window was bound
	d.mu.Unlock()

	type lc struct {
		name string
		pd   *PD
		key  uint32
		addr uint64
		n    uint64
		acc  qp.Access
		want keyFault
		mr   *MR
		off  uint64
	}
	for _, c := range []lc{
		{"ok", e.pd, rw.LKey, 0x10010, 100, qp.AccessLocalWrite, faultNone, rw, 0x10},
		{"okReadOnly", e.pd, ro.LKey, 0, 4096, 0, faultNone, ro, 0},
		{"okHigh", e.pd, hi.LKey, hiIOVA + 4000, 96, 0, faultNone, hi, 4000},
		{"okEmptyAtEnd", e.pd, rw.LKey, 0x11000, 0, 0, faultNone, rw, 0x1000},
		{"keyIndexZero", e.pd, 0x12, 0, 1, 0, faultKey, nil, 0},
		{"keyIndexUnknown", e.pd, 0xFFFF00, 0, 1, 0, faultKey, nil, 0},
		{"keyByte", e.pd, rw.LKey ^ 0x80, 0x10000, 1, 0, faultKey, nil, 0},
		{"keyOfMW", e.pd, mw1.Attr().RKey, 0x10100, 1, 0, faultKey, nil, 0},
		{"keyDeregistered", e.pd, goneKey, 0, 1, 0, faultKey, nil, 0},
		{"invalidated", e.pd, inval.LKey, 0, 1, 0, faultInvalid, nil, 0},
		{"otherPD", e.pd, other.LKey, 0, 1, 0, faultPD, nil, 0},
		{"noLocalWrite", e.pd, ro.LKey, 0, 1, qp.AccessLocalWrite, faultAccess, nil, 0},
		{"beforeStart", e.pd, rw.LKey, 0xFFFF, 2, 0, faultRange, nil, 0},
		{"pastEnd", e.pd, rw.LKey, 0x10F00, 0x101, 0, faultRange, nil, 0},
		{"tooLong", e.pd, rw.LKey, 0x10000, 4097, 0, faultRange, nil, 0},
		{"wrapHigh", e.pd, hi.LKey, 1<<64 - 1, 2, 0, faultRange, nil, 0},
		{"wrapHuge", e.pd, hi.LKey, hiIOVA + 1, 1<<64 - 1, 0, faultRange, nil, 0},
	} {
		d.mu.Lock()
		b, f := d.lkeyLocked(c.pd, c.key, c.addr, c.n, c.acc)
		d.mu.Unlock()
		if f != c.want {
			t.Errorf("lkey %s: fault %v, want %v", c.name, f, c.want)
			continue
		}
		if f == faultNone && (uint64(len(b)) != c.n || c.n > 0 && &b[0] != &c.mr.Mem()[c.off]) {
			t.Errorf("lkey %s: wrong bytes", c.name)
		}
	}

	type rc struct {
		name string
		q    *QP
		key  uint32
		va   uint64
		n    uint64
		acc  qp.Access
		want keyFault
		mr   *MR
		off  uint64
	}
	for _, c := range []rc{
		{"mr", q, rw.RKey, 0x10800, 8, qp.AccessRemoteAtomic, faultNone, rw, 0x800},
		{"mrHigh", q, hi.RKey, hiIOVA, 4096, qp.AccessRemoteRead, faultNone, hi, 0},
		{"mw1", q2, mw1.Attr().RKey, 0x10100, 256, qp.AccessRemoteRead, faultNone, rw, 0x100},
		{"mw2", q, mw2.Attr().RKey, 0x102F0, 16, qp.AccessRemoteWrite, faultNone, rw, 0x2F0},
		{"zeroBased", q, mwZB.Attr().RKey, 10, 100, qp.AccessRemoteRead, faultNone, rw, 0x40A},
		{"zeroBasedWholeWindow", q, mwZB.Attr().RKey, 0, 512, qp.AccessRemoteRead, faultNone, rw, 0x400},
		{"keyIndexZero", q, 0x7, 0, 1, qp.AccessRemoteRead, faultKey, nil, 0},
		{"keyIndexUnknown", q, 0xFFFF07, 0, 1, qp.AccessRemoteRead, faultKey, nil, 0},
		{"mrKeyByte", q, rw.RKey + 1, 0x10000, 1, qp.AccessRemoteRead, faultKey, nil, 0},
		{"mwKeyByte", q, mw1.Attr().RKey ^ 1, 0x10100, 1, qp.AccessRemoteRead, faultKey, nil, 0},
		{"mwKeyBeforeBind", q, mwUnbound.RKey ^ 0, 0, 1, qp.AccessRemoteRead, faultInvalid, nil, 0},
		{"deregistered", q, goneKey, 0, 1, qp.AccessRemoteRead, faultKey, nil, 0},
		{"mrInvalidated", q, inval.RKey, 0, 1, qp.AccessRemoteRead, faultInvalid, nil, 0},
		{"mwOfInvalidatedMR", q, mwDead.Attr().RKey, 0, 1, qp.AccessRemoteRead, faultInvalid, nil, 0},
		{"mrOtherPD", q, other.RKey, 0, 1, qp.AccessRemoteRead, faultPD, nil, 0},
		{"mrFromQPOfOtherPD", qOther, rw.RKey, 0x10000, 1, qp.AccessRemoteRead, faultPD, nil, 0},
		{"mwFromQPOfOtherPD", qOther, mw1.Attr().RKey, 0x10100, 1, qp.AccessRemoteRead, faultPD, nil, 0},
		{"mw2OtherQP", q2, mw2.Attr().RKey, 0x10200, 1, qp.AccessRemoteRead, faultPD, nil, 0},
		{"mrNoAccess", q, ro.RKey, 0, 1, qp.AccessRemoteRead, faultAccess, nil, 0},
		{"mwNoWrite", q, mw1.Attr().RKey, 0x10100, 1, qp.AccessRemoteWrite, faultAccess, nil, 0},
		{"mwNoAtomic", q, mw2.Attr().RKey, 0x10200, 8, qp.AccessRemoteAtomic, faultAccess, nil, 0},
		{"mrPastEnd", q, rw.RKey, 0x10FFF, 2, qp.AccessRemoteRead, faultRange, nil, 0},
		{"mrBefore", q, rw.RKey, 0, 1, qp.AccessRemoteRead, faultRange, nil, 0},
		{"mrWrap", q, hi.RKey, 1<<64 - 4, 8, qp.AccessRemoteRead, faultRange, nil, 0},
		{"mwBeforeWindow", q2, mw1.Attr().RKey, 0x100FF, 1, qp.AccessRemoteRead, faultRange, nil, 0},
		{"mwPastWindow", q2, mw1.Attr().RKey, 0x10100, 257, qp.AccessRemoteRead, faultRange, nil, 0},
		{"mwInsideMRButOutsideWindow", q2, mw1.Attr().RKey, 0x10300, 1, qp.AccessRemoteRead, faultRange, nil, 0},
		{"zeroBasedPastWindow", q, mwZB.Attr().RKey, 500, 13, qp.AccessRemoteRead, faultRange, nil, 0},
		{"zeroBasedIOVAIsNotVA", q, mwZB.Attr().RKey, 0x10400, 1, qp.AccessRemoteRead, faultRange, nil, 0},
		{"zeroBasedWrap", q, mwZB.Attr().RKey, 1<<64 - 1, 2, qp.AccessRemoteRead, faultRange, nil, 0},
	} {
		d.mu.Lock()
		b, f := d.rkeyLocked(c.q, c.key, c.va, c.n, c.acc)
		d.mu.Unlock()
		if f != c.want {
			t.Errorf("rkey %s: fault %v, want %v", c.name, f, c.want)
			continue
		}
		if f == faultNone && (uint64(len(b)) != c.n || &b[0] != &c.mr.Mem()[c.off]) {
			t.Errorf("rkey %s: wrong bytes", c.name)
		}
	}
	for f := faultNone; f <= faultRange; f++ {
		if f.String() == "" {
			t.Errorf("fault %d has no name", f)
		}
	}
}

func TestGatherScatter(t *testing.T) {
	e := newEnv(t)
	a, b := e.mr(100, qp.AccessLocalWrite), e.mr(100, 0)
	fill(a.Mem(), 1)
	fill(b.Mem(), 101)
	sgl := []qp.SGE{{Addr: 10, Length: 20, LKey: a.LKey}, {Addr: 0, Length: 0, LKey: 0}, {Addr: 50, Length: 30, LKey: b.LKey}}
	d := e.d
	d.mu.Lock()
	defer d.mu.Unlock()
	// Within one SGE: aliased, no copy.
	got, mr, f := d.gatherLocked(e.pd, nil, sgl, 5, 10, nil)
	if f != faultNone || mr != a || &got[0] != &a.mem[15] {
		t.Fatalf("single-SGE gather: %v %v", mr, f)
	}
	// Across SGEs (and the empty one): copied into scratch.
	got, mr, f = d.gatherLocked(e.pd, nil, sgl, 15, 20, make([]byte, 0, 64))
	if f != faultNone || mr != nil {
		t.Fatalf("spanning gather: %v %v", mr, f)
	}
	sameBytes(t, got, append(append([]byte(nil), a.mem[25:30]...), b.mem[50:65]...))
	if _, _, f = d.gatherLocked(e.pd, nil, sgl, 40, 11, make([]byte, 0, 64)); f != faultRange {
		t.Fatalf("gather past the SGL: %v", f)
	}
	// Scatter needs LOCAL_WRITE on every SGE it touches.
	if f := d.scatterLocked(e.pd, nil, sgl, 0, make([]byte, 20)); f != faultNone {
		t.Fatalf("scatter into a: %v", f)
	}
	if f := d.scatterLocked(e.pd, nil, sgl, 0, make([]byte, 21)); f != faultAccess {
		t.Fatalf("scatter into read-only b: %v", f)
	}
	if f := d.scatterLocked(e.pd, nil, sgl[:1], 0, make([]byte, 21)); f != faultRange {
		t.Fatalf("scatter past the SGL: %v", f)
	}
}
