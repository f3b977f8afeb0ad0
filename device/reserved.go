package device

import (
	"syscall"
	"time"

	"rdmafs/qp"
)

// Reserved operations, as rdmavt's reserved_operations: every QP keeps
// Config.ReservedOps send WQEs for the device's own work. They live in the
// engine's queue (swq) beside the client's WQEs, in execution order, but
// take no slot of the client's ring: the client's queue depth is what it
// asked for whatever the device has in flight, and the ring keeps one
// producer (the client). A reserved WQE is counted when posted (used++),
// runs through the requester and completer like any other, and is
// unreserved (used--) as its swq entry is released (releaseSlotLocked), so a
// new reserved WQE never finds its slot taken. It never writes a CQE, not
// even when flushed.
type reserved struct {
	used uint32 // reserved WQEs posted and not retired
}

// Probe sends a zero-length RDMA WRITE on the connected RC QP through a
// reserved WQE: a liveness check of the path and the peer that costs the
// program none of its queue and none of its completions. Its outcome and
// round trip show in the QP's counters (probes, probes_ok, probes_failed,
// probe_rtt_us). It follows the client's WQEs posted before it, as a WQE
// posted at that moment would. The peer answers it as any RDMA WRITE: a
// peer QP without remote_write NAKs it (as rxe does), and the QP goes to
// ERR as for any failed WQE.
func (q *QP) Probe() error {
	const op = "probe"
	d := q.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := q.liveLocked(op); err != nil {
		return err
	}
	if q.Type != qp.TypeRC {
		return errf(op, syscall.EOPNOTSUPP, "a probe needs a connected RC QP, qp %d is %v", q.QPN, q.Type)
	}
	if st := q.attr.QPState; st != qp.StateRTS {
		return errf(op, syscall.EINVAL, "qp %d is in %v; a probe needs RTS", q.QPN, st)
	}
	r := &q.req
	if r.resv.used >= d.cfg.ReservedOps {
		return errf(op, syscall.EBUSY, "qp %d has %d probes in flight, all its reserved operations", q.QPN, r.resv.used)
	}
	// What the client posted before the probe runs before it.
	if !r.fetchLocked() {
		return errf(op, syscall.EIO, "qp %d: its send ring is corrupt", q.QPN)
	}
	r.postReservedLocked(qp.WRRDMAWrite, d.nowLocked())
	q.Counters.Probes++
	q.eng().schedule(q)
	return nil
}

// postReservedLocked puts a reserved WQE of opcode op, posted at now, at
// the end of the send queue, behind every WQE fetched so far.
func (r *requester) postReservedLocked(op qp.WROpcode, now time.Time) {
	w := &r.swq[r.sqFetched&r.sqMask()]
	sgl, inl := w.wr.SGL[:0], w.wr.InlineData[:0]
	*w = sendWQE{reserved: true, posted: now}
	w.wr.SGL, w.wr.InlineData = sgl, inl
	w.wr.Opcode = op
	w.info, _ = w.wr.Opcode.Info()
	r.sqFetched++
	r.resv.used++
}

// unreserveLocked accounts for a reserved WQE that retires with status.
func (r *requester) unreserveLocked(w *sendWQE, status qp.WCStatus) {
	q := r.q
	r.resv.used--
	if status != qp.WCSuccess {
		q.Counters.ProbesFailed++
		return
	}
	q.Counters.ProbesOK++
	q.Counters.ProbeRTTMicros = uint64(q.eng().nowLocked().Sub(w.posted).Microseconds())
}
