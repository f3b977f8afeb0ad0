package device

import (
	"encoding/binary"

	"rdmafs/link"
	"rdmafs/qp"
	"rdmafs/ring"
	"rdmafs/roce"
)

// responder is the responder role (run.go): it executes the requests
// that reach this QP against its memory and receive queue, and answers
// them (ACKs, NAKs, READ responses, atomic acknowledgements). Its checks
// and applies (respcheck.go) are also what the peer's requester runs on
// the direct path (loopback.go). q is the QP it works for (its identity
// and wiring).
type responder struct {
	q *QP // set when the QP is made, never changed

	// reqIn holds the requests received and not yet taken (acceptLocked
	// appends, the turn takes them); rqCons is the receive ring's
	// consumer (nil with an SRQ or on an XRC QP).
	reqIn  []*packet      // lockcheck:guarded q.dev.mu
	rqCons *ring.Consumer // lockcheck:guarded q.dev.mu
	// commEst: comm_est raised since the last move to RTR.
	commEst bool // lockcheck:guarded q.dev.mu

	// rkeyHint is the MR the last rkey check found, lkeyHint the one the
	// last write into a receive WQE's SGEs found (lookupMRLocked).
	rkeyHint, lkeyHint *MR    // lockcheck:guarded q.dev.mu
	psn                qp.PSN // expected PSN (ePSN); lockcheck:guarded q.dev.mu
	msn                uint32 // messages completed (AETH MSN); lockcheck:guarded q.dev.mu
	inSend             bool   // a multi-packet SEND is in progress; lockcheck:guarded q.dev.mu
	inWrite            bool   // a multi-packet WRITE is in progress; lockcheck:guarded q.dev.mu
	// The receive WQE being filled.
	rwqe     qp.RecvWR // lockcheck:guarded q.dev.mu
	haveRWQE bool      // lockcheck:guarded q.dev.mu
	offset   uint64    // bytes placed into rwqe; lockcheck:guarded q.dev.mu
	// The WRITE being executed: next address, rkey and bytes left.
	writeVA    uint64 // lockcheck:guarded q.dev.mu
	writeRKey  uint32 // lockcheck:guarded q.dev.mu
	writeResid uint64 // lockcheck:guarded q.dev.mu
	writeLen   uint32 // RETH length, for the WITH_IMM completion; lockcheck:guarded q.dev.mu
	nakSent    bool   // a PSN sequence NAK went out for this gap (one per gap); lockcheck:guarded q.dev.mu
	ucDrop     bool   // UC: dropping until the next FIRST/ONLY; lockcheck:guarded q.dev.mu
	// Saved READ and atomic requests, replayed for duplicates.
	res     []respResource // lockcheck:guarded q.dev.mu
	resNext int            // lockcheck:guarded q.dev.mu
	// The READ being answered: its resource and the PSN of the next
	// response packet. Its packets go out a few per turn (readStepLocked),
	// never a whole message at once; later requests wait until it is
	// done, except a retried READ that goes back before readNext, which
	// replaces it (replacesReplyLocked).
	reading  bool         // lockcheck:guarded q.dev.mu
	readRes  respResource // lockcheck:guarded q.dev.mu
	readNext qp.PSN       // lockcheck:guarded q.dev.mu
	// aliasedReplies: READ responses of the direct path alias this QP's
	// memory and may not have reached the requester yet.
	aliasedReplies bool // lockcheck:guarded q.dev.mu
	// ACK coalescing. ACKs are cumulative, so while more packets wait in
	// this run of the QP (moreQueued, set by runLocked) an ACK is only
	// noted (ackDue, ackPSN); the next response of any kind sends it
	// first, or the end of the run does. A burst of requests that arrive
	// together costs one ACK, as on hardware (IBA 9.7.5.1.1).
	moreQueued bool   // lockcheck:guarded q.dev.mu
	ackDue     bool   // lockcheck:guarded q.dev.mu
	ackPSN     qp.PSN // lockcheck:guarded q.dev.mu
}

// initLocked sets the transport state a fresh or reset QP starts with:
// everything but the receive queues zero, the expected PSN, a resource
// per max_dest_rd_atomic.
func (r *responder) initLocked() {
	a := &r.q.attr
	*r = responder{q: r.q, reqIn: r.reqIn, rqCons: r.rqCons,
		psn: a.RQPSN, res: make([]respResource, max(int(a.MaxDestRdAtomic), 1))}
}

// emptyLocked empties the receive queue without completions (a reset):
// the ring's consumer index jumps to its producer's.
func (r *responder) emptyLocked() {
	if r.rqCons != nil {
		r.rqCons.Reset(r.q.rq.LoadProducer())
		r.rqCons.Publish()
	}
}

// respResource remembers a READ, atomic or ATOMIC WRITE request (one per
// max_dest_rd_atomic) so a duplicate is answered without executing again.
type respResource struct {
	used        bool
	atomic      bool
	atomicWrite bool
	firstPSN    qp.PSN
	lastPSN     qp.PSN
	va          uint64
	rkey        uint32
	length      uint32
	orig        uint64
}

// respondLocked executes one request packet against this QP
// (rxe_resp.c's job, with rdmavt's loopback semantics for errors).
func (r *responder) respondLocked(p *packet) {
	q := r.q
	defer q.eng().pool.put(p)
	if !q.attr.QPState.ProcessRecv() {
		q.Counters.Dropped++
		q.dev.Counters.DroppedPackets.Add(1)
		return
	}
	q.Counters.PacketsRecv += uint64(p.npsn())
	if q.Type == qp.TypeXRCRecv && !q.xrcSelectLocked(p) {
		return
	}
	switch q.Type {
	case qp.TypeUD:
		r.respondUDLocked(p)
	case qp.TypeUC:
		r.respondUCLocked(p)
	default:
		r.respondRCLocked(p)
	}
}

// inSeqLocked notes an RC request at the expected PSN, packet or direct:
// the next gap may be NAKed again, and comm_est goes up in RTR.
func (r *responder) inSeqLocked() {
	r.nakSent = false
	r.noteCommEstLocked()
}

// noteCommEstLocked raises comm_est for the first packet received in RTR.
func (r *responder) noteCommEstLocked() {
	if r.q.attr.QPState == qp.StateRTR && !r.commEst {
		r.commEstLocked()
	}
}

// commEstLocked is noteCommEstLocked's rare part, a call of its own so
// that the check inlines into every request's path.
func (r *responder) commEstLocked() {
	r.commEst = true
	r.q.dev.raise(qp.EventCommEst, "qp", r.q.QPN)
}

// sendAckLocked answers the requester (ACKNOWLEDGE with an AETH). Credits
// follow rdmavt: the number of posted receive WQEs, or "invalid" (no flow
// control) with an SRQ.
func (r *responder) sendAckLocked(psn qp.PSN, syndrome uint8) {
	if syndrome == aethACK {
		// This ACK covers the one held back, if any.
		if r.ackDue {
			r.q.Counters.AcksCoalesced++
			r.ackDue = false
		}
		if r.moreQueued {
			r.ackDue, r.ackPSN = true, psn
			return
		}
	}
	r.sendAETHLocked(psn, syndrome)
}

// flushAckLocked sends the ACK that coalescing holds back, if any.
func (r *responder) flushAckLocked() {
	if r.ackDue {
		r.ackDue = false
		r.sendAETHLocked(r.ackPSN, aethACK)
	}
}

// sendAETHLocked sends an ACK or NAK now. The MSN and credits are the
// current ones, which for a coalesced ACK are those of its last message.
func (r *responder) sendAETHLocked(psn qp.PSN, syndrome uint8) {
	q := r.q
	pk := q.eng().pool.get()
	pk.Opcode = transportOf(q.Type) | roce.OpAcknowledge
	pk.setPSN(psn)
	pk.Syndrome = syndrome
	switch syndrome {
	case aethACK:
		pk.Syndrome = r.creditCodeLocked()
		q.Counters.AcksSent++
	case aethNAKSeq:
		q.Counters.SeqNaksSent++
	case aethNAKInvReq:
		q.Counters.InvReqNaksSent++
	case aethNAKRemAccess:
		q.Counters.RemAccessNaksSent++
	case aethNAKRemOp:
		q.Counters.RemOpNaksSent++
	}
	pk.MSN = r.msn & 0xFFFFFF
	r.xmitResponseLocked(pk)
}

func (r *responder) creditCodeLocked() uint8 {
	if r.rqCons == nil {
		return 0x1F
	}
	n, err := r.rqCons.Pending()
	if err != nil {
		return 0
	}
	return qp.CreditCode(n)
}

func (r *responder) xmitResponseLocked(pk *packet) {
	q := r.q
	r.flushAckLocked() // responses go out in PSN order
	d := q.dev
	pk.sgid = d.cfg.GID
	pk.srcQPN = q.QPN
	pk.dgid = q.attr.AH.DGID
	pk.DestQP = q.attr.DestQPNum
	q.Counters.PacketsSent += uint64(pk.npsn())
	q.Counters.BytesSent += uint64(len(pk.Payload))
	q.eng().xmitLocked(pk)
}

// nakLocked sends a NAK for psn and, for errors of class C/J, ends the
// responder QP: the receive WQE in progress completes with status and the
// QP goes to ERR (VERBS.md §4.4).
func (r *responder) nakLocked(psn qp.PSN, syndrome uint8, status qp.WCStatus) {
	r.sendAckLocked(psn, syndrome)
	if r.haveRWQE {
		r.completeRecvLocked(status, 0, 0, 0, false)
	}
	if syndrome == aethNAKRemAccess {
		r.q.fatalLocked(qp.EventQPAccessErr)
	} else {
		r.q.fatalLocked(qp.EventQPReqErr)
	}
}

func (r *responder) respondRCLocked(p *packet) {
	q := r.q
	d := q.dev
	flags := p.Opcode.Class()
	if flags&roce.ClassRequest == 0 {
		q.Counters.Dropped++
		return
	}
	switch diff := p.psn().Sub(r.psn); {
	case diff > 0:
		// A gap: NAK the expected PSN once, then drop until it arrives.
		q.Counters.SeqErrors++
		if !r.nakSent {
			r.nakSent = true
			q.Counters.SeqErrNaks++
			d.Counters.SeqErrNaks.Add(1)
			r.sendAckLocked(r.psn, aethNAKSeq)
		}
		q.Counters.Dropped++
		return
	case diff < 0:
		r.duplicateLocked(p, flags)
		return
	}
	r.inSeqLocked()

	// Opcode sequence (IBA 9.8.3.1): a message in progress continues with
	// MIDDLE/LAST of the same kind; otherwise a new one starts.
	if !r.seqOKLocked(flags) {
		r.refuseLocked(p.psn(), respInvReq)
		return
	}
	switch {
	case flags&roce.ClassSend != 0:
		r.respSendLocked(p, flags)
	case flags&roce.ClassWrite != 0:
		r.respWriteLocked(p, flags)
	case flags&roce.ClassRead != 0:
		r.respReadLocked(p)
	case flags&roce.ClassAtomic != 0:
		r.respAtomicLocked(p)
	case flags&roce.ClassAtomicWrite != 0:
		r.respAtomicWriteLocked(p)
	}
}

// seqOKLocked checks the opcode against the message in progress.
func (r *responder) seqOKLocked(flags roce.Class) bool {
	switch {
	case r.inSend:
		return flags&roce.ClassSend != 0 && flags&roce.ClassFirst == 0
	case r.inWrite:
		return flags&roce.ClassWrite != 0 && flags&roce.ClassFirst == 0
	}
	return flags&roce.ClassFirst != 0
}

// packetLenOK applies the packet length rules of C9-95..C9-97: FIRST and
// MIDDLE carry exactly one MTU, LAST and ONLY at most one; a packet of the
// direct path as many as its PSNs (loopback.go).
//
// lockcheck:locked
func (r *responder) packetLenOK(p *packet, flags roce.Class) bool {
	n, mtu := len(p.Payload), r.q.mtu()*int(p.npsn())
	if flags&roce.ClassLast == 0 {
		return n == mtu
	}
	return n <= mtu
}

// takeRWQELocked takes the next receive WQE from the RQ or SRQ, with
// checkRecvLocked's verdict on it. A malformed one that is there is taken
// too (its completion reports it: r.haveRWQE).
func (r *responder) takeRWQELocked() respErr {
	q := r.q
	if q.srq != nil {
		q.srq.lockTake()
		defer q.srq.unlockTake()
	}
	present, malformed := r.peekRecvLocked()
	if present {
		r.takeRecvLocked()
	}
	return recvVerdict(present, malformed)
}

// peekRecvLocked decodes the next receive WQE of q's RQ or SRQ (whose
// lockTake the caller holds) into r.rwqe without taking it: present
// says there is one, malformed that it cannot be used (it does not decode,
// has too many SGEs or a length past 2^31). A direct SEND looks before it
// takes one (checkRecvLocked); a packet takes what it finds.
func (r *responder) peekRecvLocked() (present, malformed bool) {
	q := r.q
	r.rwqe = qp.RecvWR{SGL: r.rwqe.SGL[:0]}
	if q.srq != nil {
		present, malformed = q.srq.peekLocked(&r.rwqe)
	} else {
		n, err := r.rqCons.Pending()
		if err != nil {
			return false, true
		}
		if n == 0 {
			return false, false
		}
		derr := ring.DecodeRecvWQE(r.rqCons.Peek(0), &r.rwqe)
		present, malformed = true, derr != nil || uint32(len(r.rwqe.SGL)) > q.Cap.MaxRecvSGE
	}
	if present && !malformed {
		if _, lenOK := sglLength(r.rwqe.SGL); !lenOK {
			malformed = true
		}
	}
	return present, malformed
}

// takeRecvLocked takes the receive WQE peekRecvLocked found (the SRQ's
// lockTake still held) as the one the responder works on.
func (r *responder) takeRecvLocked() {
	q := r.q
	if q.srq != nil {
		q.srq.commitLocked()
	} else {
		r.rqCons.Advance(1)
		r.rqCons.Publish()
	}
	q.Counters.RecvWQEs++
	r.haveRWQE = true
	r.offset = 0
}

// rnrLocked answers "no receive WQE": an RNR NAK carrying min_rnr_timer
// (rdmavt's loopback simulates exactly this AETH).
func (r *responder) rnrLocked(psn qp.PSN) {
	q := r.q
	q.Counters.RNRNaksSent++
	q.dev.Counters.RNRNaksSent.Add(1)
	r.sendAckLocked(psn, aethRNR|q.attr.MinRNRTimer&0x1F)
}

func (r *responder) respSendLocked(p *packet, flags roce.Class) {
	if flags&roce.ClassFirst != 0 {
		if e := r.takeRWQELocked(); e != respOK {
			r.refuseLocked(p.psn(), e)
			return
		}
	}
	if !r.packetLenOK(p, flags) {
		r.refuseLocked(p.psn(), respInvReq)
		return
	}
	if !r.placeLocked(p) {
		return
	}
	r.psn = r.psn.Add(p.npsn())
	r.inSend = flags&roce.ClassLast == 0
	if flags&roce.ClassLast != 0 {
		inv := flags&roce.ClassInv != 0
		data := p.Imm
		if inv {
			if !r.invalidateLocked(p.InvRKey) {
				r.refuseLocked(p.psn(), respInvReq)
				return
			}
			data = p.InvRKey
		}
		r.msn++
		r.recvDoneLocked(uint32(r.offset), flags&roce.ClassImm != 0, inv, data, p.SE)
	}
	if p.AckReq {
		r.sendAckLocked(p.lastPSN(), aethACK)
	}
}

// placeLocked copies a SEND payload into the receive WQE, refusing it
// (and ending the QP) when it does not fit or a receive SGE's lkey fails.
func (r *responder) placeLocked(p *packet) bool {
	if e := r.recvFitsLocked(r.offset, uint64(len(p.Payload))); e != respOK {
		r.refuseLocked(p.psn(), e)
		return false
	}
	if f := r.q.dev.scatterLocked(r.q.pd, &r.lkeyHint, r.rwqe.SGL, r.offset, p.Payload); f != faultNone {
		r.refuseLocked(p.psn(), respRecvProt)
		return false
	}
	r.offset += uint64(len(p.Payload))
	return true
}

// completeRecvLocked writes the receive completion of the current RWQE.
// flags says whether imm is immediate data (WithImm) or an invalidated rkey
// (WithInv).
func (r *responder) completeRecvLocked(status qp.WCStatus, byteLen uint32, flags qp.WCFlags, imm uint32, se bool) {
	wc := qp.WC{WRID: r.rwqe.WRID, Status: status, Opcode: qp.WCRecv, QPNum: r.q.QPN}
	if status == qp.WCSuccess {
		wc.ByteLen = byteLen
		wc.SrcQP = r.q.attr.DestQPNum
		wc.WCFlags = flags
		if flags != 0 {
			wc.ImmData = imm
		}
	}
	r.haveRWQE = false
	r.offset = 0
	r.postRecvCQELocked(&wc, se)
}

// completeWriteImmLocked writes the receive completion of an RDMA WRITE
// with immediate data, whose writeLen bytes have landed, into the receive
// WQE taken for it.
func (r *responder) completeWriteImmLocked(imm uint32, se bool) {
	wc := qp.WC{WRID: r.rwqe.WRID, Status: qp.WCSuccess, Opcode: qp.WCRecvRDMAWithImm,
		QPNum: r.q.QPN, ByteLen: r.writeLen, SrcQP: r.q.attr.DestQPNum,
		WCFlags: qp.WCWithImm, ImmData: imm}
	r.haveRWQE = false
	r.postRecvCQELocked(&wc, se)
}

// wroteLocked leaves the WRITE state a whole message of n bytes at va
// through rkey leaves (the direct path's; the packets' is built packet by
// packet in respWriteLocked).
func (r *responder) wroteLocked(va uint64, rkey uint32, n uint64) {
	r.writeVA, r.writeRKey = va+n, rkey
	r.writeResid, r.writeLen = 0, uint32(n)
}

// postRecvCQELocked writes a receive completion; an overflowing CQ takes
// the QP to ERR (rdmavt's rvt_recv_cq).
func (r *responder) postRecvCQELocked(wc *qp.WC, se bool) {
	q := r.q
	if q.recvCQ == nil {
		return // an XRC_RECV QP whose XRC SRQ (and its WQE) is gone
	}
	if !q.recvCQ.postLocked(wc, se || wc.Status != qp.WCSuccess, q.eng()) && wc.Status != qp.WCWRFlushErr {
		q.enterErrLocked()
	}
}

// invalidateLocked executes SEND_WITH_INV's invalidation on the
// responder's side: an MR or type 2 MW of this QP's PD.
func (r *responder) invalidateLocked(rkey uint32) bool {
	return r.q.dev.invalidateKeyLocked(r.q, rkey, true) == qp.WCSuccess
}

func (r *responder) respWriteLocked(p *packet, flags roce.Class) {
	var whole []byte
	if !r.allowsLocked(qp.AccessRemoteWrite) {
		r.refuseLocked(p.psn(), respInvReq)
		return
	}
	if flags&roce.ClassFirst != 0 {
		mr, off, e := r.checkWriteLocked(p.VA, p.RKey, uint64(p.DMALen))
		if e != respOK {
			r.refuseLocked(p.psn(), e)
			return
		}
		r.writeVA, r.writeRKey = p.VA, p.RKey
		r.writeResid, r.writeLen = uint64(p.DMALen), p.DMALen
		// The whole message's target: an ONLY packet (every WRITE of
		// the direct path up to 64 KiB) copies into it without
		// resolving the rkey a second time. (An on-demand MR's bytes are
		// reached packet by packet.)
		if mr != nil && !mr.odpLocked() {
			whole, _ = mr.bytesLocked(off, uint64(p.DMALen), qp.AccessRemoteWrite)
		}
	}
	n := uint64(len(p.Payload))
	if !r.packetLenOK(p, flags) || n > r.writeResid || (flags&roce.ClassLast != 0 && n != r.writeResid) {
		r.refuseLocked(p.psn(), respInvReq)
		return
	}
	if flags&roce.ClassRecvWQE != 0 && !r.haveRWQE {
		// WRITE_WITH_IMM consumes a receive WQE (at its last packet).
		if e := r.takeRWQELocked(); e != respOK {
			r.refuseLocked(p.psn(), e)
			return
		}
	}
	if n > 0 {
		dst := whole
		if dst == nil || flags&roce.ClassOnly != roce.ClassOnly {
			// Resolved again for every packet: the MR may have gone
			// meanwhile.
			var f keyFault
			var mr *MR
			dst, mr, f = r.q.dev.rkeyMRLocked(r.q, r.writeRKey, r.writeVA, n, qp.AccessRemoteWrite)
			if f == faultNone {
				copyOrdered(dst, p.Payload)
				f = mr.wroteLocked(r.writeVA, dst)
			}
			if f != faultNone {
				r.refuseLocked(p.psn(), respRemAccess)
				return
			}
		} else {
			copyOrdered(dst, p.Payload)
		}
	}
	r.writeVA += n
	r.writeResid -= n
	r.psn = r.psn.Add(p.npsn())
	r.inWrite = flags&roce.ClassLast == 0
	if flags&roce.ClassLast != 0 {
		r.msn++
		if flags&roce.ClassImm != 0 {
			r.completeWriteImmLocked(p.Imm, p.SE)
		}
	}
	if p.AckReq {
		r.sendAckLocked(p.lastPSN(), aethACK)
	}
}

// saveResourceLocked records a READ or atomic for duplicate replay: the
// next slot, used, its PSNs first..last, the rest for the caller to fill.
// It fills the slot in place: a respResource built on the stack and
// copied in is narrow stores reloaded by wide ones, a store-forwarding
// stall per READ or atomic.
func (r *responder) saveResourceLocked(first, last qp.PSN) *respResource {
	res := &r.res[r.resNext]
	r.resNext = (r.resNext + 1) % len(r.res)
	*res = respResource{used: true, firstPSN: first, lastPSN: last}
	return res
}

func (r *responder) respReadLocked(p *packet) {
	if _, _, e := r.checkReadLocked(p.VA, p.RKey, uint64(p.DMALen)); e != respOK {
		r.refuseLocked(p.psn(), e)
		return
	}
	n := npkts(uint64(p.DMALen), r.q.mtu())
	res := r.acceptRdAtomicLocked(p.psn(), p.psn().Add(n-1))
	res.va, res.rkey, res.length = p.VA, p.RKey, p.DMALen
	r.startReadReplyLocked(res, p.psn())
}

// startReadReplyLocked makes r, from PSN from on, the READ being answered;
// responderTurnLocked sends its packets.
func (r *responder) startReadReplyLocked(res *respResource, from qp.PSN) {
	r.reading = true
	r.readRes = *res
	r.readNext = from
}

// Loopback's READ window: a responder whose requester is on the same
// device sends a READ response packet only while fewer than readWindow
// responses wait in the requester's queue. The requester runs in the same
// engine and drains them, so the window costs no throughput and the
// packets of a message never pile up (the IBA leaves READ responses
// without flow control; hardware paces them by the link).
const readWindow = 64

// responderTurnLocked is the responder's share of a turn: it continues the
// READ being answered and takes queued requests, at most respondBudget
// packets in and out together. It reports whether work is left.
func (r *responder) responderTurnLocked() bool {
	budget := respondBudget
	i := 0
	for budget > 0 {
		// A duplicate READ that goes back to or before the PSN being
		// answered is taken even while a READ is being answered (it
		// replaces it); other requests wait until the answer is out.
		if i < len(r.reqIn) && (!r.reading || r.replacesReplyLocked(r.reqIn[i])) {
			p := r.reqIn[i]
			if p.Opcode.Class()&roce.ClassInv != 0 && !r.q.exclusiveLocked() {
				// Its invalidation changes the key table and detaches
				// packets of other QPs: the next turn, under all of
				// Device.mu, takes it.
				break
			}
			r.reqIn[i] = nil
			i++
			r.moreQueued = i < len(r.reqIn)
			if p.Opcode&roce.OpMask != roce.OpReadRequest {
				r.ownReadRepliesLocked()
			}
			r.respondLocked(p)
			budget--
			continue
		}
		if !r.reading {
			break
		}
		left := r.readStepLocked(budget)
		if left == budget && r.reading {
			break // the requester's queue is full
		}
		budget = left
	}
	r.moreQueued = false
	r.reqIn = shiftQueue(r.reqIn, i)
	return len(r.reqIn) > 0 || r.reading
}

// replacesReplyLocked reports whether p, arriving while a READ is being
// answered, replaces that answer: a READ request for a PSN already
// executed (a retry) at or before the next response PSN. The requester
// has gone back to it and wants everything from there, so what is being
// sent now is of no use to it. A duplicate for a later PSN (the retry's
// next READ) waits its turn like any request; answering it now would skip
// the responses the requester is waiting for.
func (r *responder) replacesReplyLocked(p *packet) bool {
	return p.Opcode&roce.OpMask == roce.OpReadRequest && p.psn().Sub(r.psn) < 0 && p.psn().Sub(r.readNext) <= 0
}

// readStepLocked sends READ response packets of the READ being answered,
// at most budget of them and, on loopback, as the requester's queue has
// room; it returns the budget left. The data is read from the MR packet by
// packet, as it goes out.
func (r *responder) readStepLocked(budget int) int {
	q := r.q
	d := q.dev
	if !q.attr.QPState.ProcessRecv() {
		r.reading = false
		return budget
	}
	var peer *QP
	// A peer on another engine is not ours to look at: its queue fills
	// through its inbox, a path-MTU packet at a time, and the window
	// counts what waits there.
	var apart *QP
	if s := d.qps[q.attr.DestQPNum]; s != nil && !s.destroyed && d.isLocalGID(q.attr.AH.DGID) {
		if s.eng() == q.eng() {
			peer = s
		} else {
			apart = s
		}
	}
	res := &r.readRes
	mtu := uint64(q.mtu())
	n := npkts(uint64(res.length), int(mtu))
	// On the direct path a response packet carries up to superSeg bytes.
	seg := uint32(1)
	if peer != nil && q.directToPeerLocked() {
		seg = uint32(max(superSeg/mtu, 1))
	}
	for budget > 0 && r.reading {
		if peer != nil && len(peer.comp.respIn) >= readWindow || apart != nil && apart.inboxLen() >= readWindow {
			break // the requester has not taken the last ones yet
		}
		i := uint32(r.readNext.Sub(res.firstPSN))
		if i >= n {
			r.reading = false
			break
		}
		k := min(seg, n-i)
		if !r.readReplyPacketLocked(res, i, k, n, mtu) {
			r.reading = false // NAKed; the QP is in ERR
			break
		}
		budget--
		r.readNext = r.readNext.Add(k)
		if i+k == n {
			r.reading = false
		}
	}
	return budget
}

// readReplyPacketLocked sends the response packet of READ r (n PSNs in
// all) that starts at PSN i and holds k of them (1 but on the direct
// path). It returns false if the MR went away (the READ is NAKed).
func (r *responder) readReplyPacketLocked(res *respResource, i, k, n uint32, mtu uint64) bool {
	q := r.q
	d := q.dev
	off := uint64(i) * mtu
	size := min(uint64(k)*mtu, uint64(res.length)-min(off, uint64(res.length)))
	var src []byte
	var mr *MR
	if size > 0 {
		var f keyFault
		src, mr, f = d.rkeyMRLocked(q, res.rkey, res.va+off, size, qp.AccessRemoteRead)
		if f != faultNone {
			// The MR went away mid-read (rxe_recheck_mr).
			r.nakLocked(res.firstPSN.Add(i), aethNAKRemAccess, qp.WCRemAccessErr)
			return false
		}
	}
	rp := q.eng().pool.get()
	switch {
	case i == 0 && k == n:
		rp.Opcode = transportOf(q.Type) | roce.OpReadResponseOnly
	case i == 0:
		rp.Opcode = transportOf(q.Type) | roce.OpReadResponseFirst
	case i+k == n:
		rp.Opcode = transportOf(q.Type) | roce.OpReadResponseLast
	default:
		rp.Opcode = transportOf(q.Type) | roce.OpReadResponseMiddle
	}
	if k > 1 {
		rp.span = uint16(k)
	}
	rp.setPSN(res.firstPSN.Add(i))
	rp.Syndrome = r.creditCodeLocked()
	rp.MSN = r.msn & 0xFFFFFF
	// On a link the data is copied as the packet goes out: once the
	// READ's last packet is sent the responder goes on to later requests
	// (a WRITE to the same bytes) before the requester takes the packet,
	// and a READ must not return what a later request wrote (rxe copies
	// into the skb). On the direct path the packet aliases the MR, which
	// saves a copy of every byte, and a later request that writes memory
	// first gives the packets still waiting at the requester their own
	// copy (ownReadRepliesLocked).
	if k > 1 && mr != nil {
		rp.Payload, rp.mr = src, mr
		r.aliasedReplies = true
	} else {
		rp.buf = append(rp.buf[:0], src...)
		rp.Payload = rp.buf
	}
	r.xmitResponseLocked(rp)
	return true
}

// ownReadRepliesLocked gives the READ response packets of q that alias
// its memory and still wait to be sent or taken by the requester a copy
// of their own, before q executes a request that may write that memory.
func (r *responder) ownReadRepliesLocked() {
	q := r.q
	if !r.aliasedReplies {
		return
	}
	r.aliasedReplies = false
	d := q.dev
	for _, lp := range q.eng().txq {
		if p := lp.(*packet); p.mr != nil && p.srcQPN == q.QPN && p.Opcode.Class()&roce.ClassResponse != 0 {
			p.own()
		}
	}
	// Only a peer on q's engine is given aliased responses (readStepLocked).
	if peer := d.qps[q.attr.DestQPNum]; peer != nil && d.isLocalGID(q.attr.AH.DGID) && peer.eng() == q.eng() {
		for _, p := range peer.comp.respIn {
			if p != nil && p.mr != nil {
				p.own()
			}
		}
	}
}

func (r *responder) respAtomicLocked(p *packet) {
	b, mr, e := r.checkAtomicLocked(p.VA, p.RKey, qp.AccessRemoteAtomic)
	if e != respOK {
		r.refuseLocked(p.psn(), e)
		return
	}
	orig, e := applyAtomicLocked(b, mr, p.VA, p.Opcode&roce.OpMask == roce.OpCompareSwap, p.Compare, p.SwapAdd)
	if e != respOK {
		r.refuseLocked(p.psn(), e)
		return
	}
	res := r.acceptRdAtomicLocked(p.psn(), p.psn())
	res.atomic, res.orig = true, orig
	r.atomicAckLocked(p.psn(), orig)
}

func (r *responder) atomicAckLocked(psn qp.PSN, orig uint64) {
	pk := r.q.eng().pool.get()
	pk.Opcode = transportOf(r.q.Type) | roce.OpAtomicAcknowledge
	pk.setPSN(psn)
	pk.Syndrome = r.creditCodeLocked()
	pk.MSN = r.msn & 0xFFFFFF
	pk.OrigData = orig
	r.xmitResponseLocked(pk)
}

// respAtomicWriteLocked executes an ATOMIC WRITE (IBA 1.5, A19; rxe's
// atomic_write_reply): the 8-byte payload is stored at the RETH's address
// as one aligned word, so that a client reading the word through its own
// mapping sees the old value or the new one, never a mix. It needs remote
// write access on the QP and the MR, as rxe checks it, and a responder
// resource (max_dest_rd_atomic), and it is answered with an RDMA READ
// RESPONSE ONLY without data, which the requester takes as its ACK.
func (r *responder) respAtomicWriteLocked(p *packet) {
	if p.DMALen != 8 || len(p.Payload) != 8 {
		r.refuseLocked(p.psn(), respInvReq)
		return
	}
	b, mr, e := r.checkAtomicLocked(p.VA, p.RKey, qp.AccessRemoteWrite)
	if e != respOK {
		r.refuseLocked(p.psn(), e)
		return
	}
	// The payload's bytes land as they came: read in host order, stored
	// in host order (ring/doc.go).
	atomicStore(b, binary.NativeEndian.Uint64(p.Payload))
	if mr.wroteLocked(p.VA, b) != faultNone {
		r.refuseLocked(p.psn(), respRemAccess)
		return
	}
	r.acceptRdAtomicLocked(p.psn(), p.psn()).atomicWrite = true
	r.atomicWriteAckLocked(p.psn())
}

// atomicWriteAckLocked answers an ATOMIC WRITE: RDMA READ RESPONSE ONLY
// with an AETH and no payload.
func (r *responder) atomicWriteAckLocked(psn qp.PSN) {
	pk := r.q.eng().pool.get()
	pk.Opcode = transportOf(r.q.Type) | roce.OpReadResponseOnly
	pk.setPSN(psn)
	pk.Syndrome = r.creditCodeLocked()
	pk.MSN = r.msn & 0xFFFFFF
	r.xmitResponseLocked(pk)
}

// duplicateLocked answers a request whose PSN was already executed: SEND
// and WRITE are acknowledged again, READ is replayed from its saved
// resource (re-reading memory), an atomic's saved result is sent again
// without executing it twice (IBA 9.9.3; rxe's duplicate_request). An
// ATOMIC WRITE is not executed again either: its answer is sent again from
// its resource, or, once the resource has been reused, it is acknowledged
// again like a WRITE (rxe drops it then, a class D error, and leaves the
// requester to retry).
func (r *responder) duplicateLocked(p *packet, flags roce.Class) {
	q := r.q
	d := q.dev
	q.Counters.DuplicateReqs++
	d.Counters.DuplicateReqs.Add(1)
	switch {
	case flags&(roce.ClassRead|roce.ClassAtomic|roce.ClassAtomicWrite) != 0:
		for i := range r.res {
			res := &r.res[i]
			if !res.used || p.psn().Sub(res.firstPSN) < 0 || res.lastPSN.Sub(p.psn()) < 0 {
				continue
			}
			if res.atomic {
				r.atomicAckLocked(res.firstPSN, res.orig)
			} else if res.atomicWrite {
				r.atomicWriteAckLocked(res.firstPSN)
			} else {
				// Replayed from the PSN asked for, in place of any READ
				// being answered: the requester went back to it, and
				// one reply at a time is all a flood of duplicates gets.
				r.startReadReplyLocked(res, p.psn())
			}
			return
		}
		if flags&roce.ClassAtomicWrite != 0 {
			r.sendAckLocked(r.psn.Add(^uint32(0)), aethACK)
			return
		}
		q.Counters.Dropped++
	default:
		if p.AckReq || flags&roce.ClassLast != 0 {
			r.sendAckLocked(r.psn.Add(^uint32(0)), aethACK)
		}
	}
}

// respondUCLocked: no ACKs; a PSN gap or any error drops the message in
// progress (its receive WQE is reused) until the next FIRST or ONLY.
func (r *responder) respondUCLocked(p *packet) {
	q := r.q
	flags := p.Opcode.Class()
	if p.psn() != r.psn {
		q.Counters.SeqErrors++
		r.ucAbortLocked()
	}
	r.psn = p.psn().Add(p.npsn())
	if r.ucDrop {
		if flags&roce.ClassFirst == 0 {
			q.Counters.Dropped++
			return
		}
		r.ucDrop = false
	}
	r.noteCommEstLocked()
	if !r.seqOKLocked(flags) {
		r.ucAbortLocked()
		if flags&roce.ClassFirst == 0 {
			q.Counters.Dropped++
			return
		}
		r.ucDrop = false
	}
	switch {
	case flags&roce.ClassSend != 0:
		if flags&roce.ClassFirst != 0 && !r.ucRWQELocked() {
			return
		}
		if !r.packetLenOK(p, flags) || r.recvFitsLocked(r.offset, uint64(len(p.Payload))) != respOK {
			r.ucAbortLocked()
			return
		}
		if f := q.dev.scatterLocked(q.pd, &r.lkeyHint, r.rwqe.SGL, r.offset, p.Payload); f != faultNone {
			r.completeRecvLocked(qp.WCLocProtErr, 0, 0, 0, false)
			q.fatalLocked(qp.EventQPFatal)
			return
		}
		r.offset += uint64(len(p.Payload))
		r.inSend = flags&roce.ClassLast == 0
		if flags&roce.ClassLast != 0 {
			r.msn++
			r.recvDoneLocked(uint32(r.offset), flags&roce.ClassImm != 0, false, p.Imm, p.SE)
		}
	case flags&roce.ClassWrite != 0:
		if !r.allowsLocked(qp.AccessRemoteWrite) {
			r.ucAbortLocked()
			return
		}
		if flags&roce.ClassFirst != 0 {
			if _, _, e := r.checkWriteLocked(p.VA, p.RKey, uint64(p.DMALen)); e != respOK {
				r.ucAbortLocked()
				return
			}
			r.writeVA, r.writeRKey = p.VA, p.RKey
			r.writeResid, r.writeLen = uint64(p.DMALen), p.DMALen
		}
		n := uint64(len(p.Payload))
		if !r.packetLenOK(p, flags) || n > r.writeResid || (flags&roce.ClassLast != 0 && n != r.writeResid) {
			r.ucAbortLocked()
			return
		}
		if n > 0 {
			dst, mr, f := q.dev.rkeyMRLocked(q, r.writeRKey, r.writeVA, n, qp.AccessRemoteWrite)
			if f == faultNone {
				copyOrdered(dst, p.Payload)
				f = mr.wroteLocked(r.writeVA, dst)
			}
			if f != faultNone {
				r.ucAbortLocked()
				return
			}
		}
		r.writeVA += n
		r.writeResid -= n
		r.inWrite = flags&roce.ClassLast == 0
		if flags&roce.ClassLast != 0 && flags&roce.ClassImm != 0 {
			if !r.ucRWQELocked() {
				return
			}
			r.msn++
			r.completeWriteImmLocked(p.Imm, p.SE)
		}
	default:
		q.Counters.Dropped++
	}
}

// ucRWQELocked makes a receive WQE ready for a UC message: the one an
// aborted message left behind (it was never completed, so it is reused, as
// rxe leaves a dropped message's WQE on the queue), else the next posted
// one. Without one the message is dropped; a malformed one ends the QP.
func (r *responder) ucRWQELocked() bool {
	if r.haveRWQE {
		r.offset = 0
		return true
	}
	switch e := r.takeRWQELocked(); {
	case e == respOK:
		return true
	case !r.haveRWQE:
		r.ucAbortLocked()
	default:
		_, st := e.nak()
		r.completeRecvLocked(st, 0, 0, 0, false)
		r.q.fatalLocked(qp.EventQPFatal)
	}
	return false
}

// ucAbortLocked forgets the UC message in progress; a receive WQE it had
// taken is reused for the next message (not completed).
func (r *responder) ucAbortLocked() {
	if r.inSend || r.inWrite {
		r.q.Counters.Dropped++
	}
	r.inSend, r.inWrite = false, false
	r.offset = 0
	r.ucDrop = true
}

// grhSize is the room a UD receive buffer reserves for the GRH.
const grhSize = 40

func (r *responder) respondUDLocked(p *packet) {
	q := r.q
	d := q.dev
	if p.Opcode&roce.OpMask != roce.OpSendOnly && p.Opcode&roce.OpMask != roce.OpSendOnlyImm {
		q.Counters.Dropped++
		return
	}
	if p.QKey != q.attr.QKey {
		d.Counters.QKeyViolations.Add(1)
		q.Counters.Dropped++
		return
	}
	if len(p.Payload) > q.mtu() {
		q.Counters.Dropped++
		return
	}
	if !r.haveRWQE {
		switch e := r.takeRWQELocked(); {
		case e == respOK:
		case !r.haveRWQE:
			q.Counters.Dropped++ // UD: no receive WQE, the datagram is lost
			return
		default:
			_, st := e.nak()
			r.completeRecvLocked(st, 0, 0, 0, false)
			q.fatalLocked(qp.EventQPFatal)
			return
		}
	}
	if r.recvFitsLocked(0, uint64(grhSize+len(p.Payload))) != respOK {
		// Too small for this datagram: drop it and keep the WQE for the
		// next one (hfi1's UD receive).
		q.Counters.Dropped++
		return
	}
	var grh [grhSize]byte
	if p.hasIPHdr {
		// From the wire: the IPv4 header as it arrived (rxe copies the
		// network header into the GRH slot).
		copy(grh[20:], p.ipHdr[:])
	} else {
		buildGRH(grh[:], p.sgid, p.dgid, len(p.Payload))
	}
	if f := d.scatterLocked(q.pd, &r.lkeyHint, r.rwqe.SGL, 0, grh[:]); f != faultNone {
		r.completeRecvLocked(qp.WCLocProtErr, 0, 0, 0, false)
		q.fatalLocked(qp.EventQPFatal)
		return
	}
	if f := d.scatterLocked(q.pd, &r.lkeyHint, r.rwqe.SGL, grhSize, p.Payload); f != faultNone {
		r.completeRecvLocked(qp.WCLocProtErr, 0, 0, 0, false)
		q.fatalLocked(qp.EventQPFatal)
		return
	}
	r.noteCommEstLocked()
	wc := qp.WC{WRID: r.rwqe.WRID, Status: qp.WCSuccess, Opcode: qp.WCRecv, QPNum: q.QPN,
		ByteLen: uint32(grhSize + len(p.Payload)), SrcQP: p.SrcQP, WCFlags: qp.WCGRH}
	if p.Opcode&roce.OpMask == roce.OpSendOnlyImm {
		wc.WCFlags |= qp.WCWithImm
		wc.ImmData = p.Imm
	}
	r.haveRWQE = false
	r.postRecvCQELocked(&wc, p.SE)
}

// buildGRH writes the 40 bytes a UD receive buffer starts with. For an
// IPv4-mapped GID (RoCEv2 over IPv4) that is 20 zero bytes and the IPv4
// header; otherwise an IPv6 header, as rxe does (union rdma_network_hdr).
// Both are the headers the datagram would have had on the wire (roce's
// builders).
func buildGRH(b []byte, sgid, dgid [16]byte, payload int) {
	clear(b)
	const ib = roce.BTHLen + roce.DETHLen
	if isV4Mapped(sgid) && isV4Mapped(dgid) {
		roce.PutIPv4Header(b[20:40], [4]byte(sgid[12:]), [4]byte(dgid[12:]),
			roce.HeadroomIPv4+ib+payload+roce.ICRCLen, 0, 0, 64)
		return
	}
	roce.PutIPv6Header(b, sgid, dgid, 8+ib+payload+roce.ICRCLen, 0, 0, 64)
}

// isV4Mapped reports whether g is an IPv4-mapped GID (link.V4Mapped).
func isV4Mapped(g [16]byte) bool { return link.V4Mapped(g) }
