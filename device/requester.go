package device

import (
	"encoding/binary"
	"time"

	"rdmafs/qp"
	"rdmafs/ring"
	"rdmafs/roce"
)

// wqeState is where a send WQE is in its life.
type wqeState uint8

const (
	wqePosted  wqeState = iota // fetched, not started
	wqeSending                 // packets going out
	wqePending                 // all sent, waiting for ACK / response (RC)
	wqeDone                    // finished with status; completes in order
)

// sendWQE is the engine's private copy of a send WQE.
type sendWQE struct {
	wr       qp.SendWR
	info     qp.OpInfo
	length   uint64 // bytes the WR moves
	state    wqeState
	status   qp.WCStatus
	rejected bool // failed the engine's checks when fetched; never started
	firstPSN qp.PSN
	lastPSN  qp.PSN
	sent     uint64 // bytes sent (SEND, WRITE) so far
	rdAtomic bool   // holds an initiator (max_rd_atomic) slot
	dgid     [16]byte
	qkey     uint32 // UD: the Q_Key to send
	reserved bool   // the device's own (reserved.go): no ring slot, no CQE
	posted   time.Time
}

// requester is the requester role (run.go): it fetches the client's send
// WQEs out of the SQ ring into its own queue and turns them into request
// packets, or executes them against a peer on the direct path
// (loopback.go). It owns the send queue and the sending state; q is the
// QP it works for, whose identity and wiring (attributes, PD, CQs,
// counters, device, engine) it reads.
type requester struct {
	q *QP // set when the QP is made, never changed

	// The send queue. WQEs in [sqHead, sqFetched) of swq are the engine's:
	// the client's WQEs copied out of the ring (the client may scribble on
	// the ring, never on swq) and the device's own reserved ones, in the
	// order they execute. ringFetched is how far the client's ring has
	// been copied; the ring's consumer index (sqCons) moves when a client
	// WQE retires. swq has room for the ring's slots plus the reserved
	// operations, so reserved WQEs never take a slot of the client's
	// queue. The completer marks the WQEs in [sqHead, reqIdx) done and
	// retires them from the head (releaseSlotLocked).
	sqCons      *ring.Consumer // lockcheck:guarded q.dev.mu
	swq         []sendWQE      // lockcheck:guarded q.dev.mu
	sqHead      uint32         // lockcheck:guarded q.dev.mu
	sqFetched   uint32         // lockcheck:guarded q.dev.mu
	ringFetched uint32         // lockcheck:guarded q.dev.mu
	resv        reserved       // the device's own send WQEs (reserved.go); lockcheck:guarded q.dev.mu
	reqIdx      uint32         // the current WQE; lockcheck:guarded q.dev.mu
	ssn         uint32         // lockcheck:guarded q.dev.mu

	// lkeyHint is the MR the last lkey check or gather found
	// (lookupMRLocked); peerHint the peer of the last direct operation
	// (directPeerLocked).
	lkeyHint  *MR    // lockcheck:guarded q.dev.mu
	peerHint  *QP    // lockcheck:guarded q.dev.mu
	psn       qp.PSN // next PSN to send; lockcheck:guarded q.dev.mu
	rdAtomic  int    // free initiator slots (max_rd_atomic); lockcheck:guarded q.dev.mu
	needRetry bool   // go back to comp.psn; lockcheck:guarded q.dev.mu
	waitRNR   bool   // an RNR NAK holds the requester until its timer fires; lockcheck:guarded q.dev.mu
	sinceAck  int    // packets since the last AckReq; lockcheck:guarded q.dev.mu
}

// initLocked sets the sending state a fresh or reset QP starts with (the
// send queue's indices are reset by the QP's resetLocked).
func (r *requester) initLocked() {
	r.lkeyHint, r.peerHint = nil, nil
	r.psn = r.q.attr.SQPSN
	r.rdAtomic = int(r.q.attr.MaxRdAtomic)
	r.needRetry, r.waitRNR = false, false
	r.sinceAck = 0
	r.ssn = 0
}

// emptyLocked empties the send queue without completions (a reset): the
// ring's consumer index jumps to its producer's, every WQE fetched is
// forgotten and the reserved ones are free.
func (r *requester) emptyLocked() {
	r.sqCons.Reset(r.q.sq.LoadProducer())
	r.sqCons.Publish()
	r.ringFetched = r.sqCons.Tail()
	r.sqHead, r.sqFetched, r.reqIdx = 0, 0, 0
	r.resv.used = 0
	clear(r.swq)
}

// What the completer may do to the requester (run.go's pipeline): these,
// and nothing else of the requester's.

// goBack asks for a go-back-N retry from the first unacknowledged PSN at
// the requester's next run (a timeout, a sequence NAK, the end of an RNR
// wait).
//
// lockcheck:locked
func (r *requester) goBack() { r.needRetry = true }

// holdForRNR stops the requester until releaseRNR: an RNR NAK came, and
// nothing is sent until its timer fires.
//
// lockcheck:locked
func (r *requester) holdForRNR() { r.waitRNR = true }

// releaseRNR ends the RNR wait and goes back to the NAKed PSN.
//
// lockcheck:locked
func (r *requester) releaseRNR() {
	r.waitRNR = false
	r.goBack()
}

// returnSlot gives back the initiator slot (max_rd_atomic) of a retired
// READ or atomic.
//
// lockcheck:locked
func (r *requester) returnSlot() { r.rdAtomic++ }

// Bounds of the requester, as rxe's: unacknowledged PSNs in flight, and
// packets between requests for an acknowledgement.
const (
	maxUnackedPSNs = 128
	maxPktsPerAck  = 64
	requestBudget  = 256 // packets per run before other QPs get a turn
)

// mtu is the packets' payload size: the path MTU, the port's for UD.
//
// lockcheck:locked
func (q *QP) mtu() int {
	if q.Type == qp.TypeUD {
		return q.dev.cfg.ActiveMTU.Bytes()
	}
	return q.attr.PathMTU.Bytes()
}

// npkts is how many PSNs a message of n bytes takes: at least one.
func npkts(n uint64, mtu int) uint32 {
	if n <= uint64(mtu) {
		return 1 // no division for the common short message (2 % at 8 B)
	}
	return uint32((n + uint64(mtu) - 1) / uint64(mtu))
}

// fetchLocked copies newly posted WQEs out of the SQ ring and validates
// them; a bad one is marked done with its error status so that it completes
// in order and then takes the QP to ERR. It returns false if the ring's
// indices are corrupt (the QP has been moved to ERR).
func (r *requester) fetchLocked() bool {
	avail, err := r.sqCons.Pending()
	if err != nil {
		r.q.fatalLocked(qp.EventQPFatal)
		return false
	}
	end := r.sqCons.Tail() + avail
	for ; r.ringFetched != end; r.ringFetched, r.sqFetched = r.ringFetched+1, r.sqFetched+1 {
		w := &r.swq[r.sqFetched&r.sqMask()]
		sgl, inl := w.wr.SGL[:0], w.wr.InlineData[:0]
		*w = sendWQE{}
		w.wr.SGL, w.wr.InlineData = sgl, inl
		r.q.Counters.SendWQEs++
		slot := r.sqCons.Peek(r.ringFetched - r.sqCons.Tail())
		if derr := ring.DecodeSendWQE(slot, &w.wr); derr != nil {
			// The completion still names the WR: its wr_id and, when
			// it is one, its opcode are where they always are.
			w.wr.WRID = binary.LittleEndian.Uint64(slot[ring.SendOffWRID:])
			if op := qp.WROpcode(slot[ring.SendOffOpcode]); op.Valid() {
				w.wr.Opcode = op
				w.info, _ = op.Info()
			}
			w.reject(qp.WCLocQPOpErr)
			continue
		}
		r.checkWQELocked(w)
	}
	return true
}

func (w *sendWQE) fail(s qp.WCStatus) {
	w.state = wqeDone
	w.status = s
}

// reject fails a WQE that the engine refuses to start. If the QP is in
// ERR by the time it is flushed, it completes with WR_FLUSH_ERR like every
// other WQE that never ran; otherwise with s, and it takes the QP to ERR.
func (w *sendWQE) reject(s qp.WCStatus) {
	w.fail(s)
	w.rejected = true
}

// checkWQELocked is the post-time validation again, on the engine side:
// a client writing the ring directly may have skipped it (or lied).
func (r *requester) checkWQELocked(w *sendWQE) {
	q := r.q
	d := q.dev
	info, ok := w.wr.Opcode.Info()
	w.info = info
	if !ok || !w.wr.Opcode.AllowedOn(q.Type) {
		w.reject(qp.WCLocQPOpErr)
		return
	}
	caps := qp.SendCaps{MaxSGE: q.Cap.MaxSendSGE, MaxInline: q.Cap.MaxInlineData, MaxRdAtomic: q.attr.MaxRdAtomic}
	if err := qp.ValidateSendWRInfo(q.Type, &w.wr, caps, &w.info); err != nil {
		// Lengths past 2^31 are length errors; everything else malformed.
		if total, ok := sglLength(w.wr.SGL); !ok || total > qp.MaxMsgSize {
			w.reject(qp.WCLocLenErr)
		} else {
			w.reject(qp.WCLocQPOpErr)
		}
		return
	}
	if info.AtomicWrite {
		w.length = 8 // compare_add; byte_len of the completion, as rxe's
	} else if w.wr.SendFlags&qp.SendInline != 0 {
		w.length = uint64(len(w.wr.InlineData))
	} else {
		w.length, _ = sglLength(w.wr.SGL)
		if f := d.checkSGLLocked(q.pd, &r.lkeyHint, w.wr.SGL, info.SGEAccess); f != faultNone {
			w.reject(qp.WCLocProtErr)
			return
		}
	}
	if q.Type == qp.TypeUD {
		ah := d.ahs.get(w.wr.AH)
		if ah == nil || ah.PD != q.pd {
			w.reject(qp.WCLocQPOpErr)
			return
		}
		w.dgid = ah.Attr.DGID
		w.qkey = w.wr.RemoteQKey
		if w.qkey&0x80000000 != 0 {
			// IBA 10.2.5: a Q_Key with the high bit set means "use the
			// QP's own Q_Key".
			w.qkey = q.attr.QKey
		}
	}
}

// requesterLocked sends packets for posted WQEs while the state, the PSN
// window, fences and initiator slots allow. It reports whether it stopped
// with work left that it could do right away (the budget ran out).
func (r *requester) requesterLocked() bool {
	q := r.q
	st := q.attr.QPState
	if !st.ProcessSend() || r.waitRNR {
		return false
	}
	if r.needRetry {
		r.rewindLocked()
	}
	if !r.fetchLocked() {
		return false
	}
	mtu := q.mtu()
	window := r.windowLocked()
	apart := q.apartPeerLocked()
	direct := false
	for budget := requestBudget; budget > 0; {
		if r.reqIdx == r.sqFetched {
			return false
		}
		w := &r.swq[r.reqIdx&r.sqMask()]
		if w.state == wqeDone {
			if w.status == qp.WCSuccess {
				// Finished already: a local operation (or UC/UD WQE)
				// that a go-back-N retry of an earlier WQE walks over
				// again. It is not executed twice.
				r.reqIdx++
				continue
			}
			// Failed (validation, or a local operation): stop here; the
			// completer retires it and moves the QP to ERR. Nothing
			// after it may start.
			return false
		}
		if w.state == wqePosted {
			if !st.ProcessNextSend() || !r.mayStartLocked(w) {
				// A WRITE executed here completed without the ACK whose
				// arrival would run the QP again: a LOCAL_INV waiting
				// for it to retire goes next turn.
				return direct
			}
			if w.info.Local {
				if !q.exclusiveLocked() {
					// It changes the key table (and may detach other
					// QPs' packets): the next turn runs it, under all
					// of Device.mu.
					return true
				}
				r.localOpLocked(w)
				r.reqIdx++
				if w.status != qp.WCSuccess {
					return false
				}
				continue
			}
			if q.Type == qp.TypeUD && w.length > uint64(mtu) {
				// A datagram larger than the MTU is not sent, and the
				// WQE completes successfully (C10-93.1.1, as rxe does).
				q.dev.Counters.UDOversizeDrops.Add(1)
				w.state, w.status = wqeDone, qp.WCSuccess
				r.reqIdx++
				continue
			}
			if q.Type.Reliable() && r.psn.Sub(q.comp.psn) >= window {
				return false
			}
			w.firstPSN = r.psn
			w.lastPSN = w.firstPSN.Add(npkts(w.length, mtu) - 1)
			if w.info.RdAtomic() {
				w.rdAtomic = true
				r.rdAtomic--
			}
			w.state = wqeSending
			w.sent = 0
			r.ssn++
			if r.executeDirectLocked(w, mtu) {
				direct = true
				budget--
				continue
			}
		}
		if w.state != wqeSending {
			r.reqIdx++
			continue
		}
		if q.Type.Reliable() && r.psn.Sub(q.comp.psn) >= window {
			return false
		}
		if apart != nil && apart.inboxLen() >= maxQueuedPackets/2 {
			// The peer's engine has not caught up: wait for it rather
			// than lose packets at its queue (UC would lose messages).
			return true
		}
		if !r.sendPacketLocked(w, mtu, window) {
			return false
		}
		budget--
		if w.state != wqeSending {
			r.reqIdx++
		}
	}
	return true
}

// apartPeerLocked is q's connected peer when it is a QP of this device run
// by another engine, else nil.
func (q *QP) apartPeerLocked() *QP {
	d := q.dev
	if len(d.engines) == 1 || q.Type == qp.TypeUD || !d.isLocalGID(q.attr.AH.DGID) {
		return nil
	}
	if p := d.qps[q.attr.DestQPNum]; p != nil && p.eng() != q.eng() {
		return p
	}
	return nil
}

// mayStartLocked applies fences and initiator limits (rxe_wqe_is_fenced,
// check_init_depth): LOCAL_INV waits for every earlier WQE; a fenced WQE
// waits for earlier READs and atomics; READs, atomics and ATOMIC WRITEs
// need a free slot.
func (r *requester) mayStartLocked(w *sendWQE) bool {
	if w.wr.Opcode == qp.WRLocalInv && r.sqHead != r.reqIdx {
		return false
	}
	if w.wr.SendFlags&qp.SendFence != 0 && r.rdAtomic < int(r.q.attr.MaxRdAtomic) {
		return false
	}
	if w.info.RdAtomic() && r.rdAtomic <= 0 {
		return false
	}
	return true
}

// sendPacketLocked builds and transmits the next packet of w, within the
// window of unacknowledged PSNs.
func (r *requester) sendPacketLocked(w *sendWQE, mtu int, window int32) bool {
	q := r.q
	d := q.dev
	p := q.eng().pool.get()
	p.sgid = d.cfg.GID
	p.srcQPN = q.QPN
	p.setPSN(r.psn)
	if q.Type == qp.TypeUD {
		p.dgid = w.dgid
		p.DestQP = w.wr.RemoteQPN
		p.QKey = w.qkey
		p.SrcQP = q.QPN
	} else {
		p.dgid = q.attr.AH.DGID
		p.DestQP = q.attr.DestQPNum
		p.XRCSRQ = w.wr.RemoteQPN & roce.QPNMask // XRC_SEND: the remote XRC SRQ (0 and unused otherwise)
	}
	trans := transportOf(q.Type)
	op := w.wr.Opcode
	switch {
	case w.info.Read:
		p.Opcode = trans | roce.OpReadRequest
		p.VA, p.RKey, p.DMALen = w.wr.RemoteAddr+w.sent, w.wr.RKey, uint32(w.length-w.sent)
		p.AckReq = true
		r.psn = r.psn.Add(npkts(w.length-w.sent, mtu))
		w.sent = w.length
		w.state = wqePending
	case w.info.Atomic:
		var cmpSwap bool
		cmpSwap, p.Compare, p.SwapAdd = atomicArgs(&w.wr)
		if cmpSwap {
			p.Opcode = trans | roce.OpCompareSwap
		} else {
			p.Opcode = trans | roce.OpFetchAdd
		}
		p.VA, p.RKey = w.wr.RemoteAddr, w.wr.RKey
		p.AckReq = true
		r.psn = r.psn.Add(1)
		w.state = wqePending
	case w.info.AtomicWrite:
		// RETH for the target and the 8 bytes as the payload, in the
		// order the WQE's compare_add holds them (ring/doc.go).
		p.Opcode = trans | roce.OpAtomicWrite
		p.VA, p.RKey, p.DMALen = w.wr.RemoteAddr, w.wr.RKey, 8
		p.buf = binary.LittleEndian.AppendUint64(p.buf[:0], w.wr.CompareAdd)
		p.Payload = p.buf
		p.AckReq = true
		r.psn = r.psn.Add(1)
		w.sent = w.length
		w.state = wqePending
	default: // SEND and WRITE families carry payload
		n := r.segmentLocked(w, mtu, window)
		span := npkts(uint64(n), mtu)
		if span > 1 {
			p.span = uint16(span)
		}
		first := w.sent == 0
		last := w.sent+uint64(n) == w.length
		var fail keyFault
		if w.wr.SendFlags&qp.SendInline != 0 {
			p.Payload = w.wr.InlineData[w.sent : w.sent+uint64(n)]
			p.buf = append(p.buf[:0], p.Payload...)
			p.Payload = p.buf
		} else {
			// A packet longer than the MTU (the direct path) aliases
			// one SGE (segmentLocked) and needs no buffer.
			if cap(p.buf) < min(n, mtu) {
				p.buf = make([]byte, 0, mtu)
			}
			p.Payload, p.mr, fail = d.gatherLocked(q.pd, &r.lkeyHint, w.wr.SGL, w.sent, n, p.buf)
			if fail != faultNone {
				q.eng().pool.put(p)
				w.fail(qp.WCLocProtErr)
				return false
			}
			if p.mr == nil {
				p.buf = p.Payload[:0]
			} else if !q.Type.Reliable() {
				// UC and UD complete the WQE as soon as its last packet
				// is out, before the receiver has run: the client may
				// then reuse the buffer, so the packet needs its own
				// copy. RC completes only after the ACK, which the
				// receiver sends after it has copied the data.
				p.own()
			}
		}
		p.Opcode = trans | dataOpcode(w.info, first, last)
		if first && w.info.Write {
			p.VA, p.RKey, p.DMALen = w.wr.RemoteAddr, w.wr.RKey, uint32(w.length)
		}
		if last {
			p.Imm = w.wr.ImmData
			if op == qp.WRSendWithInv {
				p.InvRKey = w.wr.InvalidateRKey
			}
			p.SE = w.wr.SendFlags&qp.SendSolicited != 0 && (w.info.Send || w.info.Imm)
		}
		r.sinceAck += int(span)
		p.AckReq = q.Type.Reliable() && (last || r.sinceAck >= maxPktsPerAck)
		if p.AckReq {
			r.sinceAck = 0
		}
		r.psn = r.psn.Add(span)
		w.sent += uint64(n)
		if last {
			if q.Type.Reliable() {
				w.state = wqePending
			} else {
				w.state = wqeDone // UC and UD complete once sent
				w.status = qp.WCSuccess
			}
		}
	}
	q.Counters.PacketsSent += uint64(p.npsn())
	q.Counters.BytesSent += uint64(len(p.Payload))
	if q.Type.Reliable() {
		q.comp.armRetryLocked()
	}
	q.eng().xmitLocked(p)
	return true
}

// dataOpcode picks FIRST / MIDDLE / LAST / ONLY for a SEND or WRITE packet.
func dataOpcode(info qp.OpInfo, first, last bool) roce.Opcode {
	if info.Write {
		switch {
		case first && last && info.Imm:
			return roce.OpWriteOnlyImm
		case first && last:
			return roce.OpWriteOnly
		case first:
			return roce.OpWriteFirst
		case last && info.Imm:
			return roce.OpWriteLastImm
		case last:
			return roce.OpWriteLast
		}
		return roce.OpWriteMiddle
	}
	switch {
	case first && last && info.Imm:
		return roce.OpSendOnlyImm
	case first && last && info.Inv:
		return roce.OpSendOnlyInv
	case first && last:
		return roce.OpSendOnly
	case first:
		return roce.OpSendFirst
	case last && info.Imm:
		return roce.OpSendLastImm
	case last && info.Inv:
		return roce.OpSendLastInv
	case last:
		return roce.OpSendLast
	}
	return roce.OpSendMiddle
}

// releaseSlotLocked takes the WQE at the head of swq off the send queue:
// a client's WQE gives its ring slot back (published by the caller), a
// reserved one is unreserved (reserved.go), so that its slot is free
// before its completion can be seen and the slot reused.
func (r *requester) releaseSlotLocked(w *sendWQE) {
	r.sqHead++
	if w.reserved {
		r.unreserveLocked(w, w.status)
	} else {
		r.sqCons.Advance(1)
	}
}

// publishSlotsLocked gives the ring slots released since the last call
// back to the client: one store of the consumer index for a run of them.
func (r *requester) publishSlotsLocked() { r.sqCons.Publish() }

// passRetiredLocked moves the requester past a failed WQE the completer
// has just retired from the head of the queue, when the requester had
// stopped at it: reqIdx never lies behind sqHead.
func (r *requester) passRetiredLocked() {
	if r.reqIdx == r.sqHead-1 {
		r.reqIdx = r.sqHead
	}
}

// rewindLocked is go-back-N: the requester restarts at the first
// unacknowledged PSN, inside the WQE that holds it (rxe's req_retry).
func (r *requester) rewindLocked() {
	q := r.q
	r.needRetry = false
	r.sinceAck = 0
	mtu := q.mtu()
	psn := q.comp.psn
	r.psn = psn
	for i := r.sqHead; i != r.reqIdx+1 && i != r.sqFetched; i++ {
		w := &r.swq[i&r.sqMask()]
		if w.state == wqeDone || w.info.Local || w.state == wqePosted {
			continue
		}
		r.reqIdx = i
		off := uint64(0)
		if d := psn.Sub(w.firstPSN); d > 0 {
			off = uint64(d) * uint64(mtu)
		}
		if w.info.Atomic || w.info.AtomicWrite {
			off = 0 // one packet, sent again whole
		}
		w.sent = min(off, w.length)
		w.state = wqeSending
		// Later WQEs start again from the beginning when reached.
		for j := i + 1; j != r.sqFetched; j++ {
			x := &r.swq[j&r.sqMask()]
			if x.state == wqeSending || x.state == wqePending {
				x.state = wqeSending
				x.sent = 0
			}
		}
		q.Counters.Retransmits++
		q.dev.Counters.Retransmits.Add(1)
		return
	}
}
