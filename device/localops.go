package device

import (
	"rdmafs/qp"
)

// localOpLocked executes LOCAL_INV and BIND_MW, the work requests that act
// on this device's key table instead of sending packets. A failure ends the
// QP like any other send error: LOC_QP_OP_ERR for LOCAL_INV, MW_BIND_ERR
// for BIND_MW (rxe_do_local_ops).
func (r *requester) localOpLocked(w *sendWQE) {
	q := r.q
	d := q.dev
	status := qp.WCSuccess
	switch w.wr.Opcode {
	case qp.WRLocalInv:
		status = d.invalidateKeyLocked(q, w.wr.InvalidateRKey, false)
	case qp.WRBindMW:
		status = d.bindMWLocked(q, &w.wr)
	}
	w.state, w.status = wqeDone, status
}

// invalidateKeyLocked invalidates the MR or type 2 MW that key names, for
// QP q (same PD). remote is true for SEND_WITH_INV, which may invalidate
// only remote-access keys.
func (d *Device) invalidateKeyLocked(q *QP, key uint32, remote bool) qp.WCStatus {
	mr, mw, status := d.invalidationLocked(q, key, remote)
	d.invalidateLocked(mr, mw)
	return status
}

// invalidateLocked invalidates what invalidationLocked found (nil, nil:
// nothing).
func (d *Device) invalidateLocked(mr *MR, mw *MW) {
	switch {
	case mr != nil:
		mr.valid = false
		// lockcheck:ok all of Device.mu is held: a verb's, or a turn's
		// past exclusiveLocked, which the checker cannot follow
		d.detachPacketsLocked(mr)
	case mw != nil:
		mw.unbindLocked()
	}
}

// invalidationLocked is what invalidateKeyLocked would invalidate (one of
// an MR and an MW) and its status, without changing anything: the direct
// path asks first, and goes as packets when the answer is an error.
func (d *Device) invalidationLocked(q *QP, key uint32, remote bool) (*MR, *MW, qp.WCStatus) {
	e, _ := d.keys.lookup(key)
	switch {
	case e.mr != nil:
		mr := e.mr
		if mr.PD != q.pd || (mr.RKey != key && mr.LKey != key) || mr.boundMWs > 0 {
			return nil, nil, qp.WCLocQPOpErr
		}
		if remote && mr.Access&qp.AccessRemote == 0 {
			return nil, nil, qp.WCLocQPOpErr
		}
		return mr, nil, qp.WCSuccess
	case e.mw != nil:
		mw := e.mw
		// Type 1 windows are not invalidated by work requests (o10-36.2.4).
		if mw.Type != 2 || mw.PD != q.pd || mw.RKey != key {
			return nil, nil, qp.WCLocQPOpErr
		}
		// A SEND_WITH_INV may only invalidate a window bound through the
		// QP it arrives on, the one QP that may use its rkey at all.
		if remote && mw.qp != q {
			return nil, nil, qp.WCLocQPOpErr
		}
		return nil, mw, qp.WCSuccess
	}
	return nil, nil, qp.WCLocQPOpErr
}

// bindMWLocked binds a memory window through QP q (IBA 10.6.7; VERBS.md
// §6.5): the MW and the MR on q's PD, the MR allowing MW_BIND and not zero
// based, remote write or atomic windows only over MRs with local write, the
// window inside the MR. Type 2 windows must be free; type 1 may be rebound,
// and a zero length unbinds it. The rkey's low byte comes from the WR.
func (d *Device) bindMWLocked(q *QP, wr *qp.SendWR) qp.WCStatus {
	mw := d.mws.get(wr.MW)
	if mw == nil || mw.PD != q.pd {
		return qp.WCMWBindErr
	}
	if mw.Type == 2 && mw.valid {
		return qp.WCMWBindErr
	}
	if wr.BindAccess&^qp.AccessSupportedMW != 0 {
		return qp.WCMWBindErr
	}
	if mw.Type == 1 && wr.BindAccess&qp.AccessZeroBased != 0 {
		// o10-36.2.2: only type 2 windows may be zero based.
		return qp.WCMWBindErr
	}
	if wr.BindLength == 0 {
		if mw.Type == 2 {
			return qp.WCMWBindErr
		}
		mw.unbindLocked()
		mw.RKey = mw.RKey&^0xFF | wr.RKey&0xFF
		return qp.WCSuccess
	}
	e, _ := d.keys.lookup(wr.BindLKey)
	mr := e.mr
	if mr == nil {
		return qp.WCMWBindErr
	}
	if mr.LKey != wr.BindLKey || !mr.valid || mr.PD != q.pd || mr.Access&qp.AccessMWBind == 0 ||
		mr.Access&qp.AccessZeroBased != 0 {
		return qp.WCMWBindErr
	}
	if wr.BindAccess&(qp.AccessRemoteWrite|qp.AccessRemoteAtomic) != 0 && mr.Access&qp.AccessLocalWrite == 0 {
		return qp.WCMWBindErr
	}
	if _, ok := inRange(wr.BindAddr, wr.BindLength, mr.IOVA, mr.Length); !ok {
		return qp.WCMWBindErr
	}
	mw.unbindLocked()
	mw.mr = mr
	mr.boundMWs++
	mw.addr, mw.length, mw.access = wr.BindAddr, wr.BindLength, wr.BindAccess
	mw.RKey = mw.RKey&^0xFF | wr.RKey&0xFF
	mw.valid = true
	if mw.Type == 2 {
		mw.qp = q
	}
	return qp.WCSuccess
}
