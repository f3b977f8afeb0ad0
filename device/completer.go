package device

import (
	"encoding/binary"
	"sync/atomic"
	"time"

	"rdmafs/clock"
	"rdmafs/qp"
	"rdmafs/roce"
)

// completer is the completer role (run.go): it takes the responses to
// what the requester sent (ACKs, NAKs, READ responses, atomic
// acknowledgements), finishes the WQEs they answer, retires them with
// their completions, and runs the retransmit and RNR timers. q is the QP
// it works for (its identity and wiring).
type completer struct {
	q *QP // set when the QP is made, never changed

	// respIn holds the responses received and not yet taken (acceptLocked
	// appends, the turn takes them).
	respIn []*packet // lockcheck:guarded q.dev.mu

	psn          qp.PSN    // first PSN not yet acknowledged; lockcheck:guarded q.dev.mu
	acked        qp.PSN    // highest PSN an ACK covered (may lie past an unanswered READ); lockcheck:guarded q.dev.mu
	retryLeft    uint8     // retries left after timeouts / sequence NAKs; lockcheck:guarded q.dev.mu
	rnrLeft      uint8     // RNR retries left (7 = infinite); lockcheck:guarded q.dev.mu
	timeoutFired bool      // the retransmit timer expired; lockcheck:guarded q.dev.mu
	idle         bool      // nothing outstanding; a running retry timer is lapsing; lockcheck:guarded q.dev.mu
	progress     bool      // an acknowledgement came since the timer was armed; lockcheck:guarded q.dev.mu
	progressAt   time.Time // when the last one came; lockcheck:guarded q.dev.mu
	// open is a swq index such that every WQE in [sqHead, open) is done
	// (firstOpenLocked): WQEs finish out of retire's order (a stream of
	// READs all answered in one turn), and the scans for the next one to
	// acknowledge start here instead of walking the finished ones again.
	open uint32 // lockcheck:guarded q.dev.mu

	retryTimer clock.Timer // lockcheck:guarded q.dev.mu
	rnrTimer   clock.Timer // lockcheck:guarded q.dev.mu
	// Bumped whenever the timer is armed or stopped: a callback that
	// already fired and waits for Device.mu while its timer is stopped and
	// a new one armed must not act (Stop cannot recall it).
	retrySeq, rnrSeq uint64 // lockcheck:guarded q.dev.mu
	// retryFired and rnrFired are the sequence numbers of timers that
	// fired and wait for the QP's turn (0: none); the timers' only writes.
	retryFired, rnrFired atomic.Uint64
}

// initLocked sets the acknowledgement state a fresh or reset QP starts
// with (the timers are stopped by the QP's stopTimersLocked).
func (c *completer) initLocked() {
	a := &c.q.attr
	c.psn, c.acked = a.SQPSN, a.SQPSN.Add(^uint32(0))
	c.retryLeft, c.rnrLeft = a.RetryCnt, a.RNRRetry
	c.timeoutFired, c.idle, c.progress = false, false, false
	c.progressAt = time.Time{}
	c.open = 0
}

// firstOpenLocked is where the scans of the outstanding WQEs start: the
// remembered index when it still lies in [sqHead, reqIdx] (a retry moves
// reqIdx back, retire and flush move sqHead on), else sqHead. WQEs only
// ever become done, so what was done before open still is.
func (c *completer) firstOpenLocked() uint32 {
	q := c.q
	r := &q.req
	if o := c.open; o-r.sqHead <= r.reqIdx-r.sqHead {
		return o
	}
	return r.sqHead
}

// completeResponseLocked handles an ACK, NAK, read response or atomic
// acknowledgement arriving for this QP's requester (rxe_comp.c's job).
func (c *completer) completeResponseLocked(p *packet) {
	q := c.q
	if !q.Type.Reliable() || !q.attr.QPState.CanPostSend() || q.attr.QPState == qp.StateErr {
		c.dropLocked(p)
		return
	}
	// A response beyond everything sent, or before the unacked window, is
	// stale or bogus. "Sent" counts from the last rewind: an ACK for
	// packets sent before a retry that arrives while the retry is under
	// way would otherwise complete WQEs the requester is sending again
	// (the duplicates it sends are acknowledged anew). A duplicate ACK of
	// the last acknowledged PSN is harmless and let through.
	beyond := p.psn().Sub(q.req.psn) >= 0
	old := p.psn().Before(c.psn) && p.Opcode.Class()&roce.ClassRead == 0 &&
		(p.Opcode&roce.OpMask != roce.OpAcknowledge || p.psn().Before(c.psn.Add(^uint32(0))))
	if beyond || old {
		q.Counters.DuplicateResps++
		c.dropLocked(p)
		return
	}
	op := p.Opcode & roce.OpMask
	switch op {
	case roce.OpAcknowledge:
		c.handleAETHLocked(p)
	case roce.OpReadResponseFirst, roce.OpReadResponseMiddle, roce.OpReadResponseLast, roce.OpReadResponseOnly:
		c.handleReadResponseLocked(p)
	case roce.OpAtomicAcknowledge:
		c.handleAtomicAckLocked(p)
	}
	q.eng().pool.put(p)
}

func (c *completer) dropLocked(p *packet) {
	q := c.q
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
func (c *completer) ackThroughLocked(psn qp.PSN) {
	q := c.q
	r := &q.req
	progressed := false
	next := psn.Add(1)
	if psn.Sub(c.acked) > 0 {
		c.acked = psn
	}
	// Every WQE the loop passes is done (it stops at the first it cannot
	// finish), so open follows it.
	for i := c.firstOpenLocked(); i != r.reqIdx; i, c.open = i+1, i+1 {
		w := &r.swq[i&r.sqMask()]
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
	if next.Sub(r.psn) > 0 {
		next = r.psn
	}
	if next.Sub(c.psn) > 0 {
		c.psn = next
		progressed = true
	}
	if progressed {
		c.progressLocked()
	}
}

// progressLocked notes that the responder acknowledged something: the
// retry counters start over, and the retransmit timer, which measures time
// without progress (rxe's reset_retry_timer), not the age of the oldest
// packet, is pushed back. Stopping and re-creating a timer for every ACK
// would cost more than the rest of the message, so the running timer is
// kept, and when it fires after progress it is re-armed for what is left
// of a timeout counted from the last progress.
func (c *completer) progressLocked() {
	q := c.q
	c.retryLeft = q.attr.RetryCnt
	c.rnrLeft = q.attr.RNRRetry
	if c.retryTimer != nil {
		c.progress = true
		c.progressAt = q.eng().nowLocked()
	}
}

// ackPendingLocked applies an acknowledgement that arrived while a READ or
// atomic before the WQEs it covers was still unanswered.
func (c *completer) ackPendingLocked() {
	if c.acked.Sub(c.psn) >= 0 {
		c.ackThroughLocked(c.acked)
	}
}

// handleAETHLocked processes an ACKNOWLEDGE: an ACK, an RNR NAK or a NAK.
func (c *completer) handleAETHLocked(p *packet) {
	q := c.q
	r := &q.req
	d := q.dev
	syn := p.Syndrome
	switch syn & aethTypeMask {
	case aethACK:
		c.ackThroughLocked(p.psn())
		c.armRetryLocked()
	case aethRNR:
		q.Counters.RNRNaksRecv++
		d.Counters.RNRNaksRecv.Add(1)
		c.ackThroughLocked(p.psn().Add(^uint32(0)))
		w := c.wqeAtLocked(p.psn())
		if w == nil {
			return
		}
		if q.attr.RNRRetry != 7 {
			if c.rnrLeft == 0 {
				c.failWQELocked(w, qp.WCRNRRetryExcErr)
				return
			}
			c.rnrLeft--
		}
		c.stopRetryLocked()
		r.holdForRNR()
		if c.rnrTimer != nil {
			c.rnrTimer.Stop()
		}
		c.rnrSeq++
		seq := c.rnrSeq
		c.rnrTimer = d.clock.AfterFunc(qp.RNRDelay(syn&0x1F), func() { c.rnrExpired(seq) })
	case aethNAK:
		c.ackThroughLocked(p.psn().Add(^uint32(0)))
		switch syn {
		case aethNAKSeq:
			q.Counters.SeqErrNaks++
			q.Counters.SeqNaksRecv++
			d.Counters.SeqErrNaks.Add(1)
			if r.waitRNR {
				// The packets that followed an RNR-NAKed one arrive out
				// of sequence and draw this NAK. The RNR retry goes back
				// to the first unacknowledged PSN anyway; counting a
				// transport retry as well would fail a QP with a small
				// retry_cnt that only waited for a receive WQE.
				return
			}
			c.retryLocked()
			return
		}
		q.Counters.RemoteErrNak++
		d.Counters.RemoteErrNaks.Add(1)
		w := c.wqeAtLocked(p.psn())
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
		c.failWQELocked(w, status)
	}
}

// wqeAtLocked finds the outstanding WQE whose PSN range holds psn.
func (c *completer) wqeAtLocked(psn qp.PSN) *sendWQE {
	q := c.q
	r := &q.req
	for i := c.firstOpenLocked(); i != r.reqIdx+1 && i != r.sqFetched; i++ {
		w := &r.swq[i&r.sqMask()]
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
func (c *completer) failWQELocked(w *sendWQE, s qp.WCStatus) {
	w.state, w.status = wqeDone, s
	c.stopRetryLocked()
}

func (c *completer) handleReadResponseLocked(p *packet) {
	q := c.q
	w := c.wqeAtLocked(p.psn())
	if w != nil && w.info.AtomicWrite {
		c.handleAtomicWriteResponseLocked(p)
		return
	}
	if w == nil || !w.info.Read || p.psn() != c.psn {
		// Out of order or duplicate: rxe drops it and lets the retry
		// timer or a later response sort it out.
		q.Counters.DuplicateResps++
		c.dropLocked(&packet{})
		return
	}
	// A response implicitly acknowledges everything before it.
	c.ackThroughLocked(p.psn().Add(^uint32(0)))
	off := uint64(p.psn().Sub(w.firstPSN)) * uint64(q.mtu())
	if f := q.dev.scatterLocked(q.pd, &q.req.lkeyHint, w.wr.SGL, off, p.Payload); f != faultNone {
		c.failWQELocked(w, qp.WCLocProtErr)
		return
	}
	c.psn = p.psn().Add(p.npsn())
	c.progressLocked()
	if op := p.Opcode & roce.OpMask; op == roce.OpReadResponseLast || op == roce.OpReadResponseOnly {
		w.state, w.status = wqeDone, qp.WCSuccess
		c.ackPendingLocked()
	}
	c.armRetryLocked()
}

// handleAtomicWriteResponseLocked takes the answer to an ATOMIC WRITE: an
// RDMA READ RESPONSE ONLY without data (IBA A19, as rxe answers it). It
// carries no result, so it acknowledges like an ACK of its PSN: the ATOMIC
// WRITE completes, and so does everything before it but an unanswered READ
// or atomic (ackThroughLocked). A plain ACK that covers the PSN completes
// an ATOMIC WRITE the same way (rxe's requester takes either).
func (c *completer) handleAtomicWriteResponseLocked(p *packet) {
	if p.Opcode&roce.OpMask != roce.OpReadResponseOnly || len(p.Payload) != 0 || p.Syndrome&aethTypeMask != aethACK {
		c.dropLocked(&packet{})
		return
	}
	c.ackThroughLocked(p.psn())
	c.armRetryLocked()
}

func (c *completer) handleAtomicAckLocked(p *packet) {
	q := c.q
	w := c.wqeAtLocked(p.psn())
	if w == nil || !w.info.Atomic || p.psn() != c.psn {
		// Out of order (responses before it were lost) or a duplicate:
		// taking it would move the window past a READ that has not got
		// its data. Dropped; the retry asks again and the responder
		// replays the saved result.
		q.Counters.DuplicateResps++
		c.dropLocked(&packet{})
		return
	}
	c.ackThroughLocked(p.psn().Add(^uint32(0)))
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], p.OrigData)
	if f := q.dev.scatterLocked(q.pd, &q.req.lkeyHint, w.wr.SGL, 0, b[:]); f != faultNone {
		c.failWQELocked(w, qp.WCLocProtErr)
		return
	}
	c.answeredLocked(w, p.psn().Add(1))
}

// answeredLocked finishes a READ or atomic WQE whose response came (or,
// on the direct path, would have come): w done, the first unacknowledged
// PSN next, and what progress then does (the acknowledgement held back
// behind w applied, the retransmit timer kept).
func (c *completer) answeredLocked(w *sendWQE, next qp.PSN) {
	w.state, w.status = wqeDone, qp.WCSuccess
	c.psn = next
	c.progressLocked()
	c.ackPendingLocked()
	c.armRetryLocked()
}

// retryLocked starts a go-back-N retry, or fails the oldest WQE with
// RETRY_EXC_ERR when retry_cnt retries are used up.
func (c *completer) retryLocked() {
	w := c.wqeAtLocked(c.psn)
	if w == nil {
		return
	}
	if c.retryLeft == 0 {
		c.failWQELocked(w, qp.WCRetryExcErr)
		return
	}
	c.retryLeft--
	c.q.req.goBack()
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
func (c *completer) retireLocked() {
	q := c.q
	r := &q.req
	first := r.sqHead
	failed := false
	for r.sqHead != r.reqIdx && r.sqHead != r.sqFetched {
		w := &r.swq[r.sqHead&r.sqMask()]
		if w.state != wqeDone {
			break
		}
		r.releaseSlotLocked(w)
		if w.status != qp.WCSuccess {
			r.passRetiredLocked()
			failed = true
			break
		}
	}
	// A failed WQE the requester stopped at (it is at reqIdx) retires too.
	if r.sqHead == r.reqIdx && r.reqIdx != r.sqFetched {
		w := &r.swq[r.reqIdx&r.sqMask()]
		if w.state == wqeDone && w.status != qp.WCSuccess {
			r.releaseSlotLocked(w)
			r.passRetiredLocked()
			failed = true
		}
	}
	if r.sqHead == first {
		return
	}
	r.publishSlotsLocked()
	for i := first; i != r.sqHead; i++ {
		w := &r.swq[i&r.sqMask()]
		c.completeSendLocked(w, w.status)
	}
	if failed {
		q.enterErrLocked()
	}
	if r.sqHead == r.reqIdx {
		c.armRetryLocked() // nothing outstanding: lets the timer lapse
	}
}

// popLocked retires the WQE at the head of swq with status, slot first,
// then completion (a flush, one WQE at a time).
func (c *completer) popLocked(w *sendWQE, status qp.WCStatus) {
	w.status = status
	r := &c.q.req
	r.releaseSlotLocked(w)
	r.publishSlotsLocked()
	c.completeSendLocked(w, status)
}

// completeSendLocked writes a send completion when it is due: signaled, or
// sq_sig_all, or an error (IBA 10.7.3.1); never for a reserved WQE. It
// returns the initiator slot.
func (c *completer) completeSendLocked(w *sendWQE, status qp.WCStatus) {
	q := c.q
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
func (c *completer) armRetryLocked() {
	q := c.q
	if q.req.psn == c.psn {
		c.idle = true
		return
	}
	if q.attr.Timeout == 0 {
		return
	}
	if c.retryTimer != nil {
		if c.idle {
			c.idle = false
			c.progress = true
			c.progressAt = q.eng().nowLocked()
		}
		return
	}
	c.idle = false
	c.armRetryAfterLocked(qp.AckTimeout(q.attr.Timeout))
}

func (c *completer) armRetryAfterLocked(after time.Duration) {
	c.progress = false
	c.retrySeq++
	seq := c.retrySeq
	c.retryTimer = c.q.dev.clock.AfterFunc(after, func() { c.retryExpired(seq) })
}

func (c *completer) stopRetryLocked() {
	if c.retryTimer != nil {
		c.retryTimer.Stop()
		c.retryTimer = nil
		c.retrySeq++
	}
}

// Timer callbacks only mark the QP and wake the engine; the engine does the
// protocol work under Device.mu (rxe's retransmit_timer).
// retryExpired and rnrExpired are the timers' callbacks: they only leave
// the timer's sequence number for the QP's next turn and schedule it, so a
// timer never waits for Device.mu (the engine's turn does the rest:
// retryExpiredLocked, rnrExpiredLocked). A timer stopped or re-armed
// meanwhile has another sequence number and is ignored there.
func (c *completer) retryExpired(seq uint64) {
	c.retryFired.Store(seq)
	c.q.eng().schedule(c.q)
}

func (c *completer) rnrExpired(seq uint64) {
	c.rnrFired.Store(seq)
	c.q.eng().schedule(c.q)
}

// timersFiredLocked handles the timers that fired since the last turn.
func (c *completer) timersFiredLocked() {
	if s := c.retryFired.Swap(0); s != 0 {
		c.retryExpiredLocked(s)
	}
	if s := c.rnrFired.Swap(0); s != 0 {
		c.rnrExpiredLocked(s)
	}
}

func (c *completer) retryExpiredLocked(seq uint64) {
	q := c.q
	d := q.dev
	if seq == c.retrySeq && !q.destroyed {
		c.retryTimer = nil
		left := time.Duration(0)
		if c.progress {
			left = c.progressAt.Add(qp.AckTimeout(q.attr.Timeout)).Sub(d.clock.Now())
		}
		switch {
		case q.req.psn == c.psn:
			// Lapsed with nothing outstanding: done.
		case left > 0:
			// Acknowledgements (or a first send after idling) came
			// meanwhile: the timeout counts from the last of them.
			c.armRetryAfterLocked(left)
		default:
			c.timeoutFired = true
		}
	}
}

func (c *completer) rnrExpiredLocked(seq uint64) {
	q := c.q
	r := &q.req
	if seq == c.rnrSeq && !q.destroyed && r.waitRNR {
		c.rnrTimer = nil
		r.releaseRNR()
	}
}

// timeoutLocked handles a retransmit timeout.
func (c *completer) timeoutLocked() {
	q := c.q
	c.timeoutFired = false
	if q.req.psn == c.psn || !q.attr.QPState.ProcessSend() {
		return
	}
	q.Counters.RetryTimeouts++
	q.dev.Counters.RetryTimeouts.Add(1)
	c.retryLocked()
}
