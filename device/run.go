package device

import (
	"encoding/binary"

	"rdmafs/qp"
)

// runLocked is one turn of the engine for q: received packets, timers, the
// requester, completions, flushing and the SQD drain, in that order.
func (q *QP) runLocked() {
	// What the client published before this run is handled now or, if the
	// state forbids it, when a modify reschedules the QP; the spin loop
	// looks only for what comes after.
	q.sqSeen.Store(q.sq.LoadProducer())
	if q.attr.QPState == qp.StateReset {
		for _, p := range q.inq {
			q.dev.pool.put(p)
		}
		q.inq = q.inq[:0]
		return
	}
	// Packets that arrive while we work are appended; take them all.
	for i := 0; i < len(q.inq); i++ {
		p := q.inq[i]
		q.inq[i] = nil
		if opInfo(p.opcode)&ofRequest != 0 {
			q.resp.moreQueued = i+1 < len(q.inq)
			q.respondLocked(p)
		} else {
			q.completeResponseLocked(p)
		}
	}
	q.inq = q.inq[:0]
	q.resp.moreQueued = false
	q.flushAckLocked()
	if q.comp.timeoutFired {
		q.timeoutLocked()
	}
	q.retireLocked()
	more := q.requesterLocked()
	q.retireLocked()
	if q.attr.QPState.FlushSend() {
		q.flushSendLocked()
	}
	if q.attr.QPState.FlushRecv() {
		q.flushRecvLocked()
	}
	if q.attr.QPState == qp.StateSQD && !q.drainSent && q.sqCons.Tail() == q.reqIdx {
		q.drainSent = true
		q.dev.raise(EventSQDrained, "qp", q.QPN)
	}
	if more {
		q.dev.engine.schedule(q)
	}
}

// flushSendLocked completes every outstanding send WQE, fetched or still in
// the ring, with WR_FLUSH_ERR. A WQE that ran and failed but was not yet
// retired keeps its own status; one the engine rejected before it ran is
// flushed like the rest.
func (q *QP) flushSendLocked() {
	q.fetchLocked()
	for q.sqCons.Tail() != q.sqFetched {
		w := &q.swq[q.sqCons.Tail()&q.sqMask()]
		status := qp.WCWRFlushErr
		if w.state == wqeDone && w.status != qp.WCSuccess && !w.rejected {
			status = w.status
		}
		q.sqCons.Advance(1)
		q.sqCons.Publish() // free before the completion shows, as in retireLocked
		q.completeSendLocked(w, status)
	}
	q.reqIdx = q.sqFetched
	q.sqCons.Publish()
}

// flushRecvLocked completes the receive WQE in progress and every posted
// one with WR_FLUSH_ERR. A QP on an SRQ leaves the SRQ's WQEs to the other
// QPs and raises qp_last_wqe_reached instead.
func (q *QP) flushRecvLocked() {
	if q.resp.haveRWQE {
		q.completeRecvLocked(qp.WCWRFlushErr, 0, 0, 0, false)
	}
	if q.srq != nil {
		if !q.lastWQE {
			q.lastWQE = true
			q.dev.raise(EventQPLastWQEReached, "qp", q.QPN)
		}
		return
	}
	n, err := q.rqCons.Pending()
	if err != nil {
		return
	}
	var wr qp.RecvWR
	for i := uint32(0); i < n; i++ {
		wr.WRID = 0
		_ = decodeRecvWRID(q.rqCons.Peek(i), &wr)
		wc := qp.WC{WRID: wr.WRID, Status: qp.WCWRFlushErr, Opcode: qp.WCRecv, QPNum: q.QPN}
		q.recvCQ.postLocked(&wc, true)
	}
	q.rqCons.Advance(n)
	q.rqCons.Publish()
}

// decodeRecvWRID reads only the wr_id of a receive WQE (its first 8 bytes),
// which is all a flush needs even from a slot that does not decode.
func decodeRecvWRID(slot []byte, wr *qp.RecvWR) error {
	if len(slot) >= 8 {
		wr.WRID = binary.LittleEndian.Uint64(slot)
	}
	return nil
}
