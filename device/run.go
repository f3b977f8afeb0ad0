package device

// The pipeline of one QP's turn, and what each role may do to another.
// The roles are rxe's, and each is a type over the state it owns, embedded
// in the QP: the requester (QP.req, requester.go; loopback.go's direct
// path) turns send WQEs into request packets, the responder (QP.resp,
// responder.go, respcheck.go) executes requests against this QP's memory
// and answers them, the completer (QP.comp, completer.go) takes the
// answers and retires WQEs. Each reads the QP's identity and wiring
// through its back pointer q (attributes, PD, CQs, counters, device,
// engine); what crosses between them is listed here and nowhere else. The
// *QP keeps what is the QP's as a whole: the verbs, state changes and
// their side effects (applyLocked, enterErrLocked, fatalLocked,
// resetLocked, stopTimersLocked), the flushes below and this pipeline.
//
//	timers ──(retryFired, rnrFired: a sequence number and a schedule)──▶ turn
//	comp.respIn ──▶ completer ──▶ retire ──▶ send CQ
//	resp.reqIn  ──▶ responder ──▶ ACK/NAK/READ responses ──▶ link ──▶ peer's comp.respIn
//	SQ ring ──▶ requester ──▶ requests ──▶ link ──▶ peer's resp.reqIn
//
//   - completer → requester: goBack (timeout, sequence NAK), holdForRNR and
//     releaseRNR (an RNR NAK and its timer), returnSlot (a retired READ or
//     atomic gives back its max_rd_atomic slot), and retirement: the send
//     queue (swq and its indices) is the requester's, the WQEs it has
//     started ([sqHead, reqIdx)) are the completer's to finish (their
//     state and status), and the completer takes finished ones off the
//     head with releaseSlotLocked, publishSlotsLocked and
//     passRetiredLocked. It also reads the requester's psn and uses its
//     lkeyHint (a lookup's cache) to scatter READ and atomic responses.
//     Nothing else.
//   - requester → completer: none but reads of comp.psn for its PSN
//     window; it arms the retransmit timer (armRetryLocked) when it sends.
//   - responder ↔ the others: none on this QP; it talks to the peer's
//     completer only through packets. The receive WQE it takes and the
//     completions it writes are its own.
//   - every role → the QP: an error moves the QP to ERR (enterErrLocked,
//     fatalLocked), after which the flushes below complete what is left.
//
// A packet for a QP of the same device takes the direct path (loopback.go):
// the peer's turn runs right after this one, in the same engine batch, so a
// WRITE and its ACK cost two turns and no packets on a link; the roles and
// what crosses between them are the same.
//
//   - requester → the peer's responder, and back to this completer: the
//     one crossing the packets do not carry. Between two idle QPs of one
//     engine the requester executes a WQE against the peer itself
//     (requester.executeDirectLocked, executeUCLocked): it runs the peer
//     responder's checks (respcheck.go), and only when all pass moves the
//     peer's responder (its applies: receivedDirectLocked,
//     acceptRdAtomicLocked, takeRecvLocked, wroteLocked, recvDoneLocked,
//     the MSN) and this QP's completer (ackThroughLocked, answeredLocked,
//     armRetryLocked) as the request and its acknowledgement would have.
//     Anything the checks refuse goes as packets.

import (
	"encoding/binary"

	"rdmafs/qp"
)

// Budgets of one turn of a QP, in packets: so that one QP's large message
// (a READ of gigabytes, a burst of responses) takes the engine, and
// Device.mu, for a bounded time, after which the other QPs and the verbs
// waiting for the lock get their turn and the QP is scheduled again.
const (
	responseBudget = 256 // responses the requester takes per turn
	respondBudget  = 256 // requests taken plus READ response packets sent per turn
)

// runLocked is one turn of the engine for q: received packets, timers, the
// requester, completions, flushing and the SQD drain, in that order. Each
// part does a bounded amount of work; a QP with work left is scheduled
// again.
func (q *QP) runLocked() {
	// What the client published before this run is handled now or, if the
	// state forbids it, when a modify reschedules the QP; the spin loop
	// looks only for what comes after.
	q.sqSeen.Store(q.sq.LoadProducer())
	more := q.takeInboxLocked()
	if q.attr.QPState == qp.StateReset {
		q.dropQueuedLocked()
		return
	}
	q.comp.timersFiredLocked()
	// Responses for the requester. Packets that arrive while we work
	// (a QP connected to itself) are appended and wait for the next turn.
	n := min(len(q.comp.respIn), responseBudget)
	for i := 0; i < n; i++ {
		p := q.comp.respIn[i]
		q.comp.respIn[i] = nil
		q.comp.completeResponseLocked(p)
	}
	q.comp.respIn = shiftQueue(q.comp.respIn, n)
	more = more || len(q.comp.respIn) > 0
	more = q.resp.responderTurnLocked() || more
	q.resp.flushAckLocked()
	if q.comp.timeoutFired {
		q.comp.timeoutLocked()
	}
	q.comp.retireLocked()
	more = q.req.requesterLocked() || more
	q.comp.retireLocked()
	if q.attr.QPState.FlushSend() {
		q.flushSendLocked()
	}
	if q.attr.QPState.FlushRecv() {
		q.flushRecvLocked()
	}
	if q.attr.QPState == qp.StateSQD && !q.drainSent && q.req.sqHead == q.req.reqIdx {
		q.drainSent = true
		q.dev.raise(qp.EventSQDrained, "qp", q.QPN)
	}
	if more {
		q.eng().schedule(q)
	}
}

// shiftQueue drops the first n packets of a receive queue (already taken)
// and keeps the rest at the front of the same array.
func shiftQueue(in []*packet, n int) []*packet {
	if n == 0 {
		return in
	}
	m := copy(in, in[n:])
	clear(in[m:])
	return in[:m]
}

// dropQueuedLocked discards every packet waiting in q's receive queues.
func (q *QP) dropQueuedLocked() {
	q.inMu.Lock()
	inbox := q.inbox
	q.inbox = nil
	q.inboxed.Store(false)
	q.inMu.Unlock()
	pool := q.dev.poolLocked(q.eng())
	for _, in := range [][]*packet{q.resp.reqIn, q.comp.respIn, inbox} {
		for _, p := range in {
			if p != nil {
				pool.put(p)
			}
		}
	}
	clear(q.resp.reqIn)
	clear(q.comp.respIn)
	q.resp.reqIn, q.comp.respIn = q.resp.reqIn[:0], q.comp.respIn[:0]
}

// flushSendLocked completes every outstanding send WQE, fetched or still in
// the ring, with WR_FLUSH_ERR. A WQE that ran and failed but was not yet
// retired keeps its own status; one the engine rejected before it ran is
// flushed like the rest.
func (q *QP) flushSendLocked() {
	r := &q.req
	r.fetchLocked()
	for r.sqHead != r.sqFetched {
		w := &r.swq[r.sqHead&r.sqMask()]
		status := qp.WCWRFlushErr
		if w.state == wqeDone && w.status != qp.WCSuccess && !w.rejected {
			status = w.status
		}
		q.comp.popLocked(w, status)
	}
	r.reqIdx = r.sqFetched
	r.publishSlotsLocked()
}

// flushRecvLocked completes the receive WQE in progress and every posted
// one with WR_FLUSH_ERR. A QP on an SRQ leaves the SRQ's WQEs to the other
// QPs and raises qp_last_wqe_reached instead.
func (q *QP) flushRecvLocked() {
	if q.resp.haveRWQE {
		q.resp.completeRecvLocked(qp.WCWRFlushErr, 0, 0, 0, false)
	}
	if q.Type.XRC() {
		return // no receive queue; an XRC SRQ's WQEs stay for the domain's other QPs
	}
	if q.srq != nil {
		if !q.lastWQE {
			q.lastWQE = true
			q.dev.raise(qp.EventQPLastWQEReached, "qp", q.QPN)
		}
		return
	}
	n, err := q.resp.rqCons.Pending()
	if err != nil {
		return
	}
	var wr qp.RecvWR
	for i := uint32(0); i < n; i++ {
		wr.WRID = 0
		_ = decodeRecvWRID(q.resp.rqCons.Peek(i), &wr)
		wc := qp.WC{WRID: wr.WRID, Status: qp.WCWRFlushErr, Opcode: qp.WCRecv, QPNum: q.QPN}
		q.recvCQ.postLocked(&wc, true, q.eng())
	}
	q.resp.rqCons.Advance(n)
	q.resp.rqCons.Publish()
}

// decodeRecvWRID reads only the wr_id of a receive WQE (its first 8 bytes),
// which is all a flush needs even from a slot that does not decode.
func decodeRecvWRID(slot []byte, wr *qp.RecvWR) error {
	if len(slot) >= 8 {
		wr.WRID = binary.LittleEndian.Uint64(slot)
	}
	return nil
}
