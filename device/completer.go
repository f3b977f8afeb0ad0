package device

import (
	"encoding/binary"
	"time"

	"rdmafs/qp"
	"rdmafs/roce"
)

// compState is the completer's transport state.
type compState struct {
	psn          qp.PSN    // first PSN not yet acknowledged
	acked        qp.PSN    // highest PSN an ACK covered (may lie past an unanswered READ)
	retryLeft    uint8     // retries left after timeouts / sequence NAKs
	rnrLeft      uint8     // RNR retries left (7 = infinite)
	timeoutFired bool      // the retransmit timer expired
	idle         bool      // nothing outstanding; a running retry timer is lapsing
	progress     bool      // an acknowledgement came since the timer was armed
	progressAt   time.Time // when the last one came
	// open is a swq index such that every WQE in [sqHead, open) is done
	// (firstOpenLocked): WQEs finish out of retire's order (a stream of
	// READs all answered in one turn), and the scans for the next one to
	// acknowledge start here instead of walking the finished ones again.
	open uint32
}

// firstOpenLocked is where the scans of the outstanding WQEs start: the
// remembered index when it still lies in [sqHead, reqIdx] (a retry moves
// reqIdx back, retire and flush move sqHead on), else sqHead. WQEs only
// ever become done, so what was done before open still is.
func (q *QP) firstOpenLocked() uint32 {
	if o := q.comp.open; o-q.sqHead <= q.reqIdx-q.sqHead {
		return o
	}
	return q.sqHead
}

// completeResponseLocked handles an ACK, NAK, read response or atomic
// acknowledgement arriving for this QP's requester (rxe_comp.c's job).
func (q *QP) completeResponseLocked(p *packet) {
	if !q.Type.Reliable() || !q.attr.QPState.CanPostSend() || q.attr.QPState == qp.StateErr {
		q.dropLocked(p)
		return
	}
	// A response beyond everything sent, or before the unacked window, is
	// stale or bogus. "Sent" counts from the last rewind: an ACK for
	// packets sent before a retry that arrives while the retry is under
	// way would otherwise complete WQEs the requester is sending again
	// (the duplicates it sends are acknowledged anew). A duplicate ACK of
	// the last acknowledged PSN is harmless and let through.
	beyond := p.psn().Sub(q.req.psn) >= 0
	old := p.psn().Before(q.comp.psn) && p.Opcode.Class()&roce.ClassRead == 0 &&
		(p.Opcode&roce.OpMask != roce.OpAcknowledge || p.psn().Before(q.comp.psn.Add(^uint32(0))))
	if beyond || old {
		q.Counters.DuplicateResps++
		q.dropLocked(p)
		return
	}
	op := p.Opcode & roce.OpMask
	switch op {
	case roce.OpAcknowledge:
		q.handleAETHLocked(p)
	case roce.OpReadResponseFirst, roce.OpReadResponseMiddle, roce.OpReadResponseLast, roce.OpReadResponseOnly:
		q.handleReadResponseLocked(p)
	case roce.OpAtomicAcknowledge:
		q.handleAtomicAckLocked(p)
	}
	q.eng().pool.put(p)
}

func (q *QP) dropLocked(p *packet) {
	q.Counters.Dropped++
	q.dev.Counters.DroppedPackets.Add(1)
	q.eng().pool.put(p)
}

// ackThroughLocked completes every SEND/WRITE WQE whose last PSN is at or
// before psn. It stops at a READ or atomic that has not got its response:
// an acknowledgement cannot complete those, so the first unacknowledged
// PSN stays at the READ's first unanswered one (its responses are late or
// lost; the retransmit timer asks again), and the WQEs behind it are
// completed from the remembered acknowledgement when it finishes
// (ackPendingLocked).
func (q *QP) ackThroughLocked(psn qp.PSN) {
	progressed := false
	next := psn.Add(1)
	if psn.Sub(q.comp.acked) > 0 {
		q.comp.acked = psn
	}
	// Every WQE the loop passes is done (it stops at the first it cannot
	// finish), so open follows it.
	for i := q.firstOpenLocked(); i != q.reqIdx; i, q.comp.open = i+1, i+1 {
		w := &q.swq[i&q.sqMask()]
		if w.state == wqeDone {
			continue
		}
		if w.state != wqePending && w.state != wqeSending {
			break
		}
		if w.info.Read || w.info.Atomic {
			if next.Sub(w.firstPSN) > 0 {
				next = w.firstPSN
			}
			break
		}
		if w.lastPSN.Sub(psn) > 0 {
			break
		}
		w.state, w.status = wqeDone, qp.WCSuccess
		progressed = true
	}
	// An acknowledgement can cover PSNs the requester has not sent again
	// since a go-back-N retry (an ACK of the first transmission, applied
	// when a READ before it finishes: ackPendingLocked); the loop stops at
	// reqIdx then, and the first unacknowledged PSN stays at the next one
	// to send, which the WQEs from reqIdx on will take again.
	if next.Sub(q.req.psn) > 0 {
		next = q.req.psn
	}
	if next.Sub(q.comp.psn) > 0 {
		q.comp.psn = next
		progressed = true
	}
	if progressed {
		q.progressLocked()
	}
}

// progressLocked notes that the responder acknowledged something: the
// retry counters start over, and the retransmit timer, which measures time
// without progress (rxe's reset_retry_timer), not the age of the oldest
// packet, is pushed back. Stopping and re-creating a timer for every ACK
// would cost more than the rest of the message, so the running timer is
// kept, and when it fires after progress it is re-armed for what is left
// of a timeout counted from the last progress.
func (q *QP) progressLocked() {
	q.comp.retryLeft = q.attr.RetryCnt
	q.comp.rnrLeft = q.attr.RNRRetry
	if q.retryTimer != nil {
		q.comp.progress = true
		q.comp.progressAt = q.eng().nowLocked()
	}
}

// ackPendingLocked applies an acknowledgement that arrived while a READ or
// atomic before the WQEs it covers was still unanswered.
func (q *QP) ackPendingLocked() {
	if q.comp.acked.Sub(q.comp.psn) >= 0 {
		q.ackThroughLocked(q.comp.acked)
	}
}

// handleAETHLocked processes an ACKNOWLEDGE: an ACK, an RNR NAK or a NAK.
func (q *QP) handleAETHLocked(p *packet) {
	d := q.dev
	syn := p.Syndrome
	switch syn & aethTypeMask {
	case aethACK:
		q.ackThroughLocked(p.psn())
		q.armRetryLocked()
	case aethRNR:
		q.Counters.RNRNaksRecv++
		d.Counters.RNRNaksRecv.Add(1)
		q.ackThroughLocked(p.psn().Add(^uint32(0)))
		w := q.wqeAtLocked(p.psn())
		if w == nil {
			return
		}
		if q.attr.RNRRetry != 7 {
			if q.comp.rnrLeft == 0 {
				q.failWQELocked(w, qp.WCRNRRetryExcErr)
				return
			}
			q.comp.rnrLeft--
		}
		q.stopRetryLocked()
		q.req.holdForRNR()
		if q.rnrTimer != nil {
			q.rnrTimer.Stop()
		}
		q.rnrSeq++
		seq := q.rnrSeq
		q.rnrTimer = d.clock.AfterFunc(qp.RNRDelay(syn&0x1F), func() { q.rnrExpired(seq) })
	case aethNAK:
		q.ackThroughLocked(p.psn().Add(^uint32(0)))
		switch syn {
		case aethNAKSeq:
			q.Counters.SeqErrNaks++
			q.Counters.SeqNaksRecv++
			d.Counters.SeqErrNaks.Add(1)
			if q.req.waitRNR {
				// The packets that followed an RNR-NAKed one arrive out
				// of sequence and draw this NAK. The RNR retry goes back
				// to the first unacknowledged PSN anyway; counting a
				// transport retry as well would fail a QP with a small
				// retry_cnt that only waited for a receive WQE.
				return
			}
			q.retryLocked()
			return
		}
		q.Counters.RemoteErrNak++
		d.Counters.RemoteErrNaks.Add(1)
		w := q.wqeAtLocked(p.psn())
		if w == nil {
			return
		}
		status := qp.WCRemOpErr
		switch syn {
		case aethNAKInvReq:
			status = qp.WCRemInvReqErr
			q.Counters.InvReqNaksRecv++
		case aethNAKRemAccess:
			status = qp.WCRemAccessErr
			q.Counters.RemAccessNaksRecv++
		default:
			q.Counters.RemOpNaksRecv++
		}
		q.failWQELocked(w, status)
	}
}

// wqeAtLocked finds the outstanding WQE whose PSN range holds psn.
func (q *QP) wqeAtLocked(psn qp.PSN) *sendWQE {
	for i := q.firstOpenLocked(); i != q.reqIdx+1 && i != q.sqFetched; i++ {
		w := &q.swq[i&q.sqMask()]
		if w.state == wqeDone || w.state == wqePosted || w.info.Local {
			continue
		}
		if psn.Sub(w.firstPSN) >= 0 && w.lastPSN.Sub(psn) >= 0 {
			return w
		}
	}
	return nil
}

// failWQELocked completes w with an error status. The QP goes to ERR when
// the completer reaches it (its error completion comes first, then flushes).
func (q *QP) failWQELocked(w *sendWQE, s qp.WCStatus) {
	w.state, w.status = wqeDone, s
	q.stopRetryLocked()
}

func (q *QP) handleReadResponseLocked(p *packet) {
	w := q.wqeAtLocked(p.psn())
	if w != nil && w.info.AtomicWrite {
		q.handleAtomicWriteResponseLocked(p)
		return
	}
	if w == nil || !w.info.Read || p.psn() != q.comp.psn {
		// Out of order or duplicate: rxe drops it and lets the retry
		// timer or a later response sort it out.
		q.Counters.DuplicateResps++
		q.dropLocked(&packet{})
		return
	}
	// A response implicitly acknowledges everything before it.
	q.ackThroughLocked(p.psn().Add(^uint32(0)))
	off := uint64(p.psn().Sub(w.firstPSN)) * uint64(q.mtu())
	if f := q.dev.scatterLocked(q.pd, &q.req.lkeyHint, w.wr.SGL, off, p.Payload); f != faultNone {
		q.failWQELocked(w, qp.WCLocProtErr)
		return
	}
	q.comp.psn = p.psn().Add(p.npsn())
	q.progressLocked()
	if op := p.Opcode & roce.OpMask; op == roce.OpReadResponseLast || op == roce.OpReadResponseOnly {
		w.state, w.status = wqeDone, qp.WCSuccess
		q.ackPendingLocked()
	}
	q.armRetryLocked()
}

// handleAtomicWriteResponseLocked takes the answer to an ATOMIC WRITE: an
// RDMA READ RESPONSE ONLY without data (IBA A19, as rxe answers it). It
// carries no result, so it acknowledges like an ACK of its PSN: the ATOMIC
// WRITE completes, and so does everything before it but an unanswered READ
// or atomic (ackThroughLocked). A plain ACK that covers the PSN completes
// an ATOMIC WRITE the same way (rxe's requester takes either).
func (q *QP) handleAtomicWriteResponseLocked(p *packet) {
	if p.Opcode&roce.OpMask != roce.OpReadResponseOnly || len(p.Payload) != 0 || p.Syndrome&aethTypeMask != aethACK {
		q.dropLocked(&packet{})
		return
	}
	q.ackThroughLocked(p.psn())
	q.armRetryLocked()
}

func (q *QP) handleAtomicAckLocked(p *packet) {
	w := q.wqeAtLocked(p.psn())
	if w == nil || !w.info.Atomic || p.psn() != q.comp.psn {
		// Out of order (responses before it were lost) or a duplicate:
		// taking it would move the window past a READ that has not got
		// its data. Dropped; the retry asks again and the responder
		// replays the saved result.
		q.Counters.DuplicateResps++
		q.dropLocked(&packet{})
		return
	}
	q.ackThroughLocked(p.psn().Add(^uint32(0)))
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], p.OrigData)
	if f := q.dev.scatterLocked(q.pd, &q.req.lkeyHint, w.wr.SGL, 0, b[:]); f != faultNone {
		q.failWQELocked(w, qp.WCLocProtErr)
		return
	}
	w.state, w.status = wqeDone, qp.WCSuccess
	q.comp.psn = p.psn().Add(1)
	q.progressLocked()
	q.ackPendingLocked()
	q.armRetryLocked()
}

// retryLocked starts a go-back-N retry, or fails the oldest WQE with
// RETRY_EXC_ERR when retry_cnt retries are used up.
func (q *QP) retryLocked() {
	w := q.wqeAtLocked(q.comp.psn)
	if w == nil {
		return
	}
	if q.comp.retryLeft == 0 {
		q.failWQELocked(w, qp.WCRetryExcErr)
		return
	}
	q.comp.retryLeft--
	q.req.goBack()
}

// retireLocked completes finished WQEs in order from the tail, writing
// their completions, and publishes the SQ consumer index. A WQE that failed
// takes the QP to ERR after its own completion.
//
// The slots go back to the client first, with one store of the consumer
// index for the whole run, and then the completions are written: a client
// that polls a CQE may post into its slot at once (as rxe), and the index,
// a cache line the client reads on every post, moves once a turn instead
// of once a WQE. The engine's copies stay valid until it fetches again.
func (q *QP) retireLocked() {
	first := q.sqHead
	failed := false
	for q.sqHead != q.reqIdx && q.sqHead != q.sqFetched {
		w := &q.swq[q.sqHead&q.sqMask()]
		if w.state != wqeDone {
			break
		}
		q.releaseSlotLocked(w)
		if w.status != qp.WCSuccess {
			if q.reqIdx == q.sqHead-1 {
				q.reqIdx = q.sqHead
			}
			failed = true
			break
		}
	}
	// A failed WQE the requester stopped at (it is at reqIdx) retires too.
	if q.sqHead == q.reqIdx && q.reqIdx != q.sqFetched {
		w := &q.swq[q.reqIdx&q.sqMask()]
		if w.state == wqeDone && w.status != qp.WCSuccess {
			q.releaseSlotLocked(w)
			q.reqIdx++
			failed = true
		}
	}
	if q.sqHead == first {
		return
	}
	q.sqCons.Publish()
	for i := first; i != q.sqHead; i++ {
		w := &q.swq[i&q.sqMask()]
		q.completeSendLocked(w, w.status)
	}
	if failed {
		q.enterErrLocked()
	}
	if q.sqHead == q.reqIdx {
		q.armRetryLocked() // nothing outstanding: lets the timer lapse
	}
}

// releaseSlotLocked takes the WQE at the head of swq off the send queue:
// a client's WQE gives its ring slot back (published by the caller), a
// reserved one is unreserved (reserved.go), so that its slot is free
// before its completion can be seen and the slot reused.
func (q *QP) releaseSlotLocked(w *sendWQE) {
	q.sqHead++
	if w.reserved {
		q.unreserveLocked(w, w.status)
	} else {
		q.sqCons.Advance(1)
	}
}

// popLocked retires the WQE at the head of swq with status, slot first,
// then completion (a flush, one WQE at a time).
func (q *QP) popLocked(w *sendWQE, status qp.WCStatus) {
	w.status = status
	q.releaseSlotLocked(w)
	q.sqCons.Publish()
	q.completeSendLocked(w, status)
}

// completeSendLocked writes a send completion when it is due: signaled, or
// sq_sig_all, or an error (IBA 10.7.3.1); never for a reserved WQE. It
// returns the initiator slot.
func (q *QP) completeSendLocked(w *sendWQE, status qp.WCStatus) {
	if w.rdAtomic {
		w.rdAtomic = false
		q.req.returnSlot()
	}
	if w.reserved {
		return
	}
	if status == qp.WCSuccess && !q.SQSigAll && w.wr.SendFlags&qp.SendSignaled == 0 {
		return
	}
	wc := qp.WC{WRID: w.wr.WRID, Status: status, Opcode: w.info.WC, QPNum: q.QPN}
	if status == qp.WCSuccess {
		wc.ByteLen = uint32(w.length)
	}
	if !w.wr.Opcode.Valid() {
		wc.Opcode = 0
	}
	if !q.sendCQ.postLocked(&wc, status != qp.WCSuccess, q.eng()) && status != qp.WCWRFlushErr {
		q.enterErrLocked()
	}
}

// armRetryLocked keeps the retransmit timer running while PSNs are
// unacknowledged (timeout 0 disables it, as in rxe).
//
// With nothing outstanding the running timer is not stopped but left to
// lapse (it then finds nothing to do and is not re-armed): a QP sending one
// message at a time would otherwise create a runtime timer per message.
// The next send on a lapsing timer counts as progress, so its timeout
// starts then.
func (q *QP) armRetryLocked() {
	if q.req.psn == q.comp.psn {
		q.comp.idle = true
		return
	}
	if q.attr.Timeout == 0 {
		return
	}
	if q.retryTimer != nil {
		if q.comp.idle {
			q.comp.idle = false
			q.comp.progress = true
			q.comp.progressAt = q.eng().nowLocked()
		}
		return
	}
	q.comp.idle = false
	q.armRetryAfterLocked(qp.AckTimeout(q.attr.Timeout))
}

func (q *QP) armRetryAfterLocked(after time.Duration) {
	q.comp.progress = false
	q.retrySeq++
	seq := q.retrySeq
	q.retryTimer = q.dev.clock.AfterFunc(after, func() { q.retryExpired(seq) })
}

func (q *QP) stopRetryLocked() {
	if q.retryTimer != nil {
		q.retryTimer.Stop()
		q.retryTimer = nil
		q.retrySeq++
	}
}

// Timer callbacks only mark the QP and wake the engine; the engine does the
// protocol work under Device.mu (rxe's retransmit_timer).
// retryExpired and rnrExpired are the timers' callbacks: they only leave
// the timer's sequence number for the QP's next turn and schedule it, so a
// timer never waits for Device.mu (the engine's turn does the rest:
// retryExpiredLocked, rnrExpiredLocked). A timer stopped or re-armed
// meanwhile has another sequence number and is ignored there.
func (q *QP) retryExpired(seq uint64) {
	q.retryFired.Store(seq)
	q.eng().schedule(q)
}

func (q *QP) rnrExpired(seq uint64) {
	q.rnrFired.Store(seq)
	q.eng().schedule(q)
}

// timersFiredLocked handles the timers that fired since the last turn.
func (q *QP) timersFiredLocked() {
	if s := q.retryFired.Swap(0); s != 0 {
		q.retryExpiredLocked(s)
	}
	if s := q.rnrFired.Swap(0); s != 0 {
		q.rnrExpiredLocked(s)
	}
}

func (q *QP) retryExpiredLocked(seq uint64) {
	d := q.dev
	if seq == q.retrySeq && !q.destroyed {
		q.retryTimer = nil
		left := time.Duration(0)
		if q.comp.progress {
			left = q.comp.progressAt.Add(qp.AckTimeout(q.attr.Timeout)).Sub(d.clock.Now())
		}
		switch {
		case q.req.psn == q.comp.psn:
			// Lapsed with nothing outstanding: done.
		case left > 0:
			// Acknowledgements (or a first send after idling) came
			// meanwhile: the timeout counts from the last of them.
			q.armRetryAfterLocked(left)
		default:
			q.comp.timeoutFired = true
		}
	}
}

func (q *QP) rnrExpiredLocked(seq uint64) {
	if seq == q.rnrSeq && !q.destroyed && q.req.waitRNR {
		q.rnrTimer = nil
		q.req.releaseRNR()
	}
}

// timeoutLocked handles a retransmit timeout.
func (q *QP) timeoutLocked() {
	q.comp.timeoutFired = false
	if q.req.psn == q.comp.psn || !q.attr.QPState.ProcessSend() {
		return
	}
	q.Counters.RetryTimeouts++
	q.dev.Counters.RetryTimeouts.Add(1)
	q.retryLocked()
}
