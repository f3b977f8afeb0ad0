package device

import (
	"rdmafs/qp"
)

// Memory access. Every byte the engine moves goes through these functions:
// a key is resolved through the key table on every use (never cached across
// a verb), so deregistration or invalidation takes effect at once and the
// engine never touches memory it was not given by a valid key of the right
// PD with the right access (IBA 10.6; VERBS.md §6.3).

// keyFault says why a key check failed; the caller picks the completion
// status (local: loc_prot_err; remote: a NAK remote access error).
type keyFault uint8

const (
	faultNone    keyFault = iota
	faultKey              // no such key, or its generation byte differs
	faultInvalid          // invalidated
	faultPD               // another PD
	faultAccess           // the key lacks the access
	faultRange            // outside the region
	faultPage             // on demand: the program maps no such memory
)

func (f keyFault) String() string {
	return [...]string{"ok", "bad key", "invalidated key", "key of another PD", "access not granted", "out of range", "page not mapped"}[f]
}

// inRange reports whether [addr, addr+n) lies in [base, base+size) without
// overflowing, and returns the offset.
func inRange(addr, n, base, size uint64) (uint64, bool) {
	if addr < base {
		return 0, false
	}
	off := addr - base
	if off > size || n > size-off {
		return 0, false
	}
	return off, true
}

// lkeyLocked resolves n bytes at addr through lkey for local access acc
// (LOCAL_WRITE to write into it, 0 to read).
func (d *Device) lkeyLocked(pd *PD, lkey uint32, addr, n uint64, acc qp.Access) ([]byte, keyFault) {
	b, _, f := d.lkeyMRLocked(pd, nil, lkey, addr, n, acc)
	return b, f
}

// lookupMRLocked is the key table's answer for key, an MR's lkey (or its
// rkey), through hint: the MR a caller's last lookup found, if any (a
// QP's, used by its turns only). A valid MR that still has the key is
// what the table holds for it (keys are unique among registered MRs, and
// deregistration, invalidation and rereg all leave the hint's MR invalid
// or with other keys), so the hint saves the map lookup of a QP that
// uses the same MR WR after WR; anything else goes to the table.
func (d *Device) lookupMRLocked(hint **MR, key uint32, rkey bool) keyEntry {
	if hint != nil {
		if m := *hint; m != nil && m.valid && (!rkey && m.LKey == key || rkey && m.RKey == key) {
			return keyEntry{mr: m}
		}
	}
	e, _ := d.keys.lookup(key)
	if hint != nil && e.mr != nil {
		*hint = e.mr
	}
	return e
}

// lkeyCheckLocked is lkeyMRLocked's check alone: it reads no memory (an
// on-demand MR's pages are reached when the bytes move, not at the check).
func (d *Device) lkeyCheckLocked(pd *PD, hint **MR, lkey uint32, addr, n uint64, acc qp.Access) (*MR, keyFault) {
	e := d.lookupMRLocked(hint, lkey, false)
	mr := e.mr
	switch {
	case mr == nil || mr.LKey != lkey:
		return nil, faultKey
	case !mr.valid:
		return nil, faultInvalid
	case mr.PD != pd:
		return nil, faultPD
	case mr.Access&acc != acc:
		return nil, faultAccess
	}
	if _, ok := inRange(addr, n, mr.IOVA, mr.Length); !ok {
		return nil, faultRange
	}
	return mr, faultNone
}

// lkeyMRLocked is lkeyLocked that also names the MR (through hint, which
// may be nil; lookupMRLocked).
func (d *Device) lkeyMRLocked(pd *PD, hint **MR, lkey uint32, addr, n uint64, acc qp.Access) ([]byte, *MR, keyFault) {
	e := d.lookupMRLocked(hint, lkey, false)
	mr := e.mr
	if mr == nil || mr.LKey != lkey {
		return nil, nil, faultKey
	}
	if !mr.valid {
		return nil, nil, faultInvalid
	}
	if mr.PD != pd {
		return nil, nil, faultPD
	}
	if mr.Access&acc != acc {
		return nil, nil, faultAccess
	}
	off, ok := inRange(addr, n, mr.IOVA, mr.Length)
	if !ok {
		return nil, nil, faultRange
	}
	b, f := mr.bytesLocked(off, n, acc)
	return b, mr, f
}

// rkeyLocked resolves n bytes at va through rkey for remote access acc on
// behalf of QP q (whose PD must own the key; a type 2 window must be bound
// through q).
func (d *Device) rkeyLocked(q *QP, rkey uint32, va, n uint64, acc qp.Access) ([]byte, keyFault) {
	b, _, f := d.rkeyMRLocked(q, rkey, va, n, acc)
	return b, f
}

// rkeyMRLocked is rkeyLocked that also names the MR whose memory it is.
func (d *Device) rkeyMRLocked(q *QP, rkey uint32, va, n uint64, acc qp.Access) ([]byte, *MR, keyFault) {
	mr, off, f := d.rkeyFindLocked(q, rkey, va, n, acc)
	if f != faultNone {
		return nil, nil, f
	}
	b, f := mr.bytesLocked(off, n, acc)
	return b, mr, f
}

// rkeyFindLocked checks rkey for n bytes at va and returns the MR and the
// offset in it.
func (d *Device) rkeyFindLocked(q *QP, rkey uint32, va, n uint64, acc qp.Access) (*MR, uint64, keyFault) {
	e := d.lookupMRLocked(&q.resp.rkeyHint, rkey, true)
	switch {
	case e.mr != nil:
		mr := e.mr
		switch {
		case mr.RKey != rkey:
			return nil, 0, faultKey
		case !mr.valid:
			return nil, 0, faultInvalid
		case mr.PD != q.pd:
			return nil, 0, faultPD
		case mr.Access&acc != acc:
			return nil, 0, faultAccess
		}
		off, ok := inRange(va, n, mr.IOVA, mr.Length)
		if !ok {
			return nil, 0, faultRange
		}
		return mr, off, faultNone
	case e.mw != nil:
		mw := e.mw
		switch {
		case mw.RKey != rkey:
			return nil, 0, faultKey
		case !mw.valid || mw.mr == nil || !mw.mr.valid:
			return nil, 0, faultInvalid
		case mw.PD != q.pd || (mw.Type == 2 && mw.qp != q):
			return nil, 0, faultPD
		case mw.access&acc != acc || mw.mr.odpLocked():
			// A window on an on-demand MR is not offered: its writes
			// could not be handed back through the MR's iova.
			return nil, 0, faultAccess
		}
		base := mw.addr
		if mw.access&qp.AccessZeroBased != 0 {
			base = 0
		}
		woff, ok := inRange(va, n, base, mw.length)
		if !ok {
			return nil, 0, faultRange
		}
		// The window lies inside its MR (checked at bind).
		return mw.mr, mw.addr - mw.mr.IOVA + woff, faultNone
	}
	return nil, 0, faultKey
}

// sglLength sums an SGL's lengths; ok is false past 2^31 (the IB message
// size limit).
func sglLength(sgl []qp.SGE) (uint64, bool) {
	var n uint64
	for _, s := range sgl {
		n += uint64(s.Length)
	}
	return n, n <= 1<<31
}

// checkSGLLocked validates every SGE of a WQE once, when the engine takes
// it, so a bad lkey fails the WQE before any packet is sent.
func (d *Device) checkSGLLocked(pd *PD, hint **MR, sgl []qp.SGE, acc qp.Access) keyFault {
	for _, s := range sgl {
		if s.Length == 0 {
			continue // zero-length SGEs are skipped, as rdmavt does
		}
		if _, f := d.lkeyCheckLocked(pd, hint, s.LKey, s.Addr, uint64(s.Length), acc); f != faultNone {
			return f
		}
	}
	return faultNone
}

// gatherLocked returns n bytes at offset off of the SGL's concatenation.
// When they lie in one SGE the result aliases that MR, which it returns (no
// copy); otherwise they are copied into scratch (mr is nil).
func (d *Device) gatherLocked(pd *PD, hint **MR, sgl []qp.SGE, off uint64, n int, scratch []byte) (data []byte, mr *MR, f keyFault) {
	if n == 0 {
		return nil, nil, faultNone
	}
	out := scratch[:0]
	need := uint64(n)
	for _, s := range sgl {
		l := uint64(s.Length)
		if off >= l {
			off -= l
			continue
		}
		take := min(l-off, need)
		b, m, f := d.lkeyMRLocked(pd, hint, s.LKey, s.Addr+off, take, 0)
		if f != faultNone {
			return nil, nil, f
		}
		if take == uint64(n) {
			return b, m, faultNone
		}
		out = append(out, b...)
		need -= take
		off = 0
		if need == 0 {
			return out, nil, faultNone
		}
	}
	return nil, nil, faultRange
}

// scatterLocked copies data into the SGL at offset off, needing
// LOCAL_WRITE on each SGE it touches; hint (may be nil) as for
// lookupMRLocked.
func (d *Device) scatterLocked(pd *PD, hint **MR, sgl []qp.SGE, off uint64, data []byte) keyFault {
	for _, s := range sgl {
		if len(data) == 0 {
			return faultNone
		}
		l := uint64(s.Length)
		if off >= l {
			off -= l
			continue
		}
		take := min(l-off, uint64(len(data)))
		b, m, f := d.lkeyMRLocked(pd, hint, s.LKey, s.Addr+off, take, qp.AccessLocalWrite)
		if f != faultNone {
			return f
		}
		copyOrdered(b, data[:take])
		if f := m.wroteLocked(s.Addr+off, b); f != faultNone {
			return f
		}
		data = data[take:]
		off = 0
	}
	if len(data) != 0 {
		return faultRange
	}
	return faultNone
}

// copyOrdered copies src to dst so that the last bytes land last: a client
// that polls the tail of a buffer for a flag sees the rest of the data
// first (rdmavt's copy_last for RDMA WRITE into user memory).
func copyOrdered(dst, src []byte) {
	if len(src) <= 8 {
		copy(dst, src)
		return
	}
	k := len(src) - 8
	copy(dst[:k], src[:k])
	copy(dst[k:], src[k:])
}

// bytesLocked is n bytes of mr at offset off for access acc: its mapping,
// or for an on-demand MR a copy read from the program now (faultPage where
// the program maps nothing), which a writer hands back with wroteLocked.
// A plain write (local or remote) overwrites all n bytes, so its copy
// starts empty instead of read.
func (mr *MR) bytesLocked(off, n uint64, acc qp.Access) ([]byte, keyFault) {
	if o := mr.backing.odp; o != nil {
		if acc == qp.AccessLocalWrite || acc == qp.AccessRemoteWrite {
			return make([]byte, n), faultNone
		}
		b, ok := o.Read(mr.odpVA+off, n)
		if !ok {
			return nil, faultPage
		}
		return b, faultNone
	}
	return mr.mem[off : off+n : off+n], faultNone
}

// wroteLocked hands bytes b, resolved through mr at iova va and written
// since, to the program: a no-op for mapped memory, a write into the
// program for an on-demand MR. mr may be nil (nothing to hand back).
func (mr *MR) wroteLocked(va uint64, b []byte) keyFault {
	if mr == nil || mr.backing.odp == nil || len(b) == 0 {
		return faultNone
	}
	if !mr.backing.odp.Write(mr.odpVA+(va-mr.IOVA), b) {
		return faultPage
	}
	return faultNone
}

// odpLocked reports whether mr reaches the program on demand.
func (mr *MR) odpLocked() bool { return mr != nil && mr.backing.odp != nil }
