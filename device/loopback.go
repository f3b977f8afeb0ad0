package device

import (
	"encoding/binary"

	"rdmafs/link"
	"rdmafs/qp"
)

// The direct path between two QPs of one device, rdmavt's rvt_ruc_loopback
// in the shape of this engine. A packet for a QP of the same device does
// not go through the link chain: at the end of the sending QP's turn it is
// put on the receiving QP's queue, and that QP's turn runs next, in the
// same engine batch under the same hold of Device.mu, instead of waiting in
// the scheduler's run queue for a later batch; its ACKs come back the same
// way. Between two RC QPs a SEND, WRITE or READ response carries up to
// superSeg bytes per packet (whole path-MTU segments, each still a PSN):
// one copy per message instead of one per MTU.
//
// The transport does not know which path a packet took. The requester,
// responder and completer run exactly as for the packet path, so every
// rule holds on both: PSNs advance (a packet of n segments takes n PSNs),
// the receiver's RNR NAK carries min_rnr_timer and the sender's RNR timer
// and retry count work as on a link, NAKs and remote access errors move
// the QPs to ERR as VERBS.md §4.4 says, UD receives get their GRH, and the
// counters count the segments a link would have carried.
//
// A packet takes the chain instead whenever something must see it: a
// capture is open (so that what capture shows is every packet, at the path
// MTU), a fault rule applies to its QPs (so that drops, duplicates and
// delays hit it), something stands in front of the chain (a test's lossy
// link or its wire to the device's own address), or Config.PacketLoopback
// asks for the chain always.
// One function decides the way, localPathLocked; everything else asks it.
// The choice is made per packet when its turn's batch is flushed; the
// segment size when the packet is built, by the same rule, so a capture
// opened between the two sees one oversized packet at most.
//
// Where the packets could not be told apart from none at all, there are
// none: a WRITE, SEND, READ or atomic of at most superSeg bytes between two
// idle QPs of one engine is executed against the peer by the requester's
// turn (executeDirectLocked), the state of both QPs moving as the packets
// and their acknowledgement would have moved it; anything a packet would
// have been NAKed, RNR-NAKed or retried for goes as packets. The rules
// are the responder's own functions (respcheck.go), so the two paths
// cannot disagree on what is refused (TestResponderTable).

// superSeg is the most payload a packet on the direct path carries.
const superSeg = 64 << 10

// localPath is the way messages between two QPs of the device go.
type localPath uint8

const (
	// pathChain: packets of one path MTU through the link chain.
	pathChain localPath = iota
	// pathHanded: packets of one path MTU handed to the peer's queue
	// without the chain (directTxLocked).
	pathHanded
	// pathDirect: handed too, up to superSeg bytes a packet between RC
	// QPs, and executed without packets between idle QPs
	// (executeDirectLocked).
	pathDirect
)

// localPathLocked is the way messages between QPs src and dst of this
// device go, decided here and nowhere else. The chain, whenever something
// must see the packets: Config.PacketLoopback asks for it, something
// stands in front of the chain (the endpoint the device writes to is not
// the chain's own head: a test's lossy link or its wire), a capture is
// open, or a fault rule touches the QPs. Handed packets while an on-demand
// MR exists: the direct path writes into the memory it resolved, and an
// on-demand MR's bytes are copies that only the packets hand back.
func (d *Device) localPathLocked(src, dst uint32) localPath {
	switch {
	case d.cfg.PacketLoopback || d.link != d.chain.Head || d.chain.Capture.On() || d.chain.Faults.Touches(src, dst):
		return pathChain
	case d.odpMRs.Load() != 0:
		return pathHanded
	}
	return pathDirect
}

// directToPeerLocked reports whether q's messages to its connected peer
// take the direct path (localPathLocked): the peer on this device, the
// path open between them.
func (q *QP) directToPeerLocked() bool {
	return q.dev.isLocalGID(q.attr.AH.DGID) && q.dev.localPathLocked(q.QPN, q.attr.DestQPNum) == pathDirect
}

// segmentLocked is how many payload bytes q's next packet of w carries,
// at offset w.sent: one path MTU, or on the direct path between RC QPs as
// many whole MTUs as fit in superSeg and in the SGE the bytes come from
// (so that the payload aliases the MR instead of being gathered into a
// buffer of its own), within the PSN window.
func (r *requester) segmentLocked(w *sendWQE, mtu int, window int32) int {
	rest := w.length - w.sent
	if rest <= uint64(mtu) || window == maxUnackedPSNs {
		return int(min(rest, uint64(mtu)))
	}
	n := min(rest, superSeg)
	if w.wr.SendFlags&qp.SendInline == 0 {
		n = min(n, sgeRun(w.wr.SGL, w.sent))
	}
	room := int(window - r.psn.Sub(r.q.comp.psn))
	n = min(n, uint64(max(room, 1))*uint64(mtu))
	if n < rest {
		n -= n % uint64(mtu)
	}
	if n == 0 {
		return mtu
	}
	return int(n)
}

// windowLocked is how many PSNs q's requester may have unacknowledged: rxe's
// 128, or on the direct path between RC QPs (where segments go 64 KiB at a
// time and nothing is lost on the way) directWindow, so that a turn of the
// requester moves many large messages, not eight.
func (r *requester) windowLocked() int32 {
	if r.q.Type == qp.TypeRC && r.q.directToPeerLocked() {
		return directWindow
	}
	return maxUnackedPSNs
}

// directWindow is the PSN window of the direct path: 128 packets of 64
// KiB at a 1024-byte MTU, 512 at 4096.
const directWindow = 8192

// sgeRun is how many bytes of sgl follow offset off within one SGE.
func sgeRun(sgl []qp.SGE, off uint64) uint64 {
	for _, s := range sgl {
		if l := uint64(s.Length); off < l {
			return l - off
		} else {
			off -= l
		}
	}
	return 0
}

// directTxLocked hands the packets of pkts that engine e's turn (or a
// verb, with e not batching) sent to their QPs when they do not take the
// chain (localPathLocked), and returns the others, in their order, for
// the chain. Inside an engine turn the receiving QPs of the same engine
// run soon (runSoonLocked); others are scheduled.
func (d *Device) directTxLocked(pkts []link.Packet, e *engine) []link.Packet {
	rest := pkts[:0]
	var n, bytes uint64
	for _, lp := range pkts {
		p := lp.(*packet)
		if p.route != link.Local || d.localPathLocked(p.srcQPN, p.DestQP) == pathChain {
			rest = append(rest, lp)
			continue
		}
		n += uint64(p.npsn())
		bytes += uint64(len(p.Payload))
		p.local, p.handed = true, true
		d.acceptLocked(p, e)
	}
	// Sent and received at once (Counters.SentPackets and RecvPackets
	// count them both ways), once per batch, in e's share.
	if n > 0 {
		d.Counters.DirectPackets.Add(e.idx, n)
		d.Counters.DirectBytes.Add(e.idx, bytes)
	}
	return rest
}

// wakeLocked makes q run for a packet it was given by engine cur (nil:
// outside an engine's turns): soon if cur's turn handed it over
// (directTxLocked) and q is cur's, else through q's engine's scheduler.
func (d *Device) wakeLocked(q *QP, p *packet, cur *engine) {
	if cur != nil && p.handed && cur.txBatching && q.eng() == cur {
		if !q.soon {
			q.soon = true
			cur.soon = append(cur.soon, q)
		}
		return
	}
	q.eng().schedule(q)
}

// soonBudget bounds the turns runSoonLocked runs for one turn of the
// batch: a ping-pong of two QPs (a WRITE stream and its ACKs) goes on in
// the scheduler's next batch after that, so that the QPs of the batch and
// the verbs waiting for Device.mu get their turn.
const soonBudget = 64

// runSoonLocked runs the turns of the QPs that direct deliveries made
// runnable, in the order they were given packets, until none is left;
// past the budget, or when someone waits for Device.mu, the rest go to the
// scheduler. Called by the engine after each turn of its batch.
func (e *engine) runSoonLocked() {
	d := e.d
	for n := 0; e.soonHead < len(e.soon); n++ {
		q := e.soon[e.soonHead]
		e.soon[e.soonHead] = nil
		e.soonHead++
		q.soon = false
		if q.destroyed {
			continue
		}
		if n >= soonBudget || d.mu.contended() || q.wantAll && !e.exclusive {
			e.schedule(q)
			continue
		}
		e.runTurnLocked(q)
	}
	e.soon, e.soonHead = e.soon[:0], 0
}

// npsn is how many PSNs p takes: 1, but on the direct path, where it
// carries span path-MTU segments (loopback.go).
func (p *packet) npsn() uint32 {
	if p.span == 0 {
		return 1
	}
	return uint32(p.span)
}

// lastPSN is the PSN of p's last segment.
func (p *packet) lastPSN() qp.PSN { return p.psn().Add(p.npsn() - 1) }

// executeDirectLocked executes an RC WRITE or WRITE_WITH_IMM, a SEND or
// SEND_WITH_IMM, a READ or an atomic against the peer QP directly, as
// rvt_ruc_loopback does: no request packet, no acknowledgement, no turn
// of the peer. It does so only where that cannot be told from the
// packets: the two QPs on one engine, the direct path open between them,
// nothing of q's in flight (every PSN it sent is acknowledged, no
// response waits) and nothing of the peer's responder in progress (no
// request queued or half received, no READ being answered, no ACK held
// back, its expected PSN q's next) (directPeerLocked), and the checks of
// the peer's responder passing, the very ones its packets would meet
// (respcheck.go: access, the rkey, a usable receive WQE long enough), as
// well as the receive WQE's lkeys and the local SGEs, for at most
// superSeg bytes (a turn stays bounded: a larger message goes in
// segments). Anything else goes as packets, whose responder refuses them
// with the same verdicts and answers with the NAKs, RNRs and retries of
// the transport. The state moves as if the packets had gone both ways:
// the PSNs by the message's path-MTU segments on both sides, the peer's
// MSN, comm_est at a peer in RTR, the counters of the segments and the
// acknowledgement, and the WQE completes as an acknowledgement completes
// it (ackThroughLocked). A UC WQE goes to executeUCLocked. w has just
// started (wqeSending, its PSNs assigned); it reports whether it executed
// w, which then has moved past reqIdx.
func (r *requester) executeDirectLocked(w *sendWQE, mtu int) bool {
	switch {
	case r.q.Type != qp.TypeRC:
		return r.q.Type == qp.TypeUC && w.length <= superSeg && r.executeUCLocked(w, mtu)
	case w.info.Atomic:
		return r.executeAtomicLocked(w)
	case w.length > superSeg:
		return false
	case w.info.Write:
		return r.executeWriteLocked(w, mtu)
	case w.info.Send:
		return r.executeSendLocked(w, mtu)
	case w.info.Read:
		return r.executeReadLocked(w, mtu)
	}
	return false
}

// executeReadLocked is executeDirectLocked's RDMA READ: the responder's
// side of respReadLocked (the READ saved as a responder resource, its PSNs
// and MSN taken) and the requester's of the READ response, whose bytes go
// from the peer's memory into the WQE's SGEs in one copy.
func (r *requester) executeReadLocked(w *sendWQE, mtu int) bool {
	q := r.q
	peer := r.directPeerLocked(w)
	if peer == nil {
		return false
	}
	d := q.dev
	mr, off, e := peer.resp.checkReadLocked(w.wr.RemoteAddr, w.wr.RKey, w.length)
	if e != respOK {
		return false
	}
	var src []byte
	if w.length > 0 {
		b, f := mr.bytesLocked(off, w.length, qp.AccessRemoteRead)
		if f != faultNone {
			return false
		}
		src = b
	}
	n := npkts(w.length, mtu)
	first := w.firstPSN
	peer.Counters.PacketsRecv++ // the request
	peer.resp.inSeqLocked()
	res := peer.resp.acceptRdAtomicLocked(first, first.Add(n-1))
	res.va, res.rkey, res.length = w.wr.RemoteAddr, w.wr.RKey, uint32(w.length)
	peer.Counters.PacketsSent += uint64(n) // the responses
	peer.Counters.BytesSent += w.length
	q.Counters.PacketsSent++
	q.Counters.BytesRecv += w.length
	r.psn = r.psn.Add(n)
	w.sent = w.length
	w.state = wqePending
	r.reqIdx++
	q.comp.ackThroughLocked(first.Add(^uint32(0)))
	if f := d.scatterLocked(q.pd, &r.lkeyHint, w.wr.SGL, 0, src); f != faultNone {
		q.comp.failWQELocked(w, qp.WCLocProtErr)
	} else {
		q.comp.answeredLocked(w, first.Add(n))
	}
	c := &q.eng().counts
	c.packets += 1 + uint64(n)
	c.bytes += w.length
	c.ops++
	return true
}

// maxDirectSGEs bounds the SGEs of either side a direct operation takes
// (more go as packets).
const maxDirectSGEs = 4

// directSourceLocked resolves w's bytes (its SGEs, or its inline data)
// into src, or reports false.
func (r *requester) directSourceLocked(w *sendWQE, src *[maxDirectSGEs][]byte) ([][]byte, bool) {
	out := src[:0]
	if w.wr.SendFlags&qp.SendInline != 0 {
		return append(out, w.wr.InlineData), true
	}
	for _, s := range w.wr.SGL {
		if s.Length == 0 {
			continue
		}
		if len(out) == maxDirectSGEs {
			return nil, false
		}
		b, _, f := r.q.dev.lkeyMRLocked(r.q.pd, &r.lkeyHint, s.LKey, s.Addr, uint64(s.Length), 0)
		if f != faultNone {
			return nil, false
		}
		out = append(out, b)
	}
	return out, true
}

// copyChunks copies the bytes of src, in order, over those of dst (as
// long in all); the last bytes land last (copyOrdered).
func copyChunks(dst, src [][]byte) {
	if len(dst) == 1 && len(src) == 1 {
		copyOrdered(dst[0], src[0])
		return
	}
	i, off := 0, 0
	for _, b := range src {
		for len(b) > 0 {
			n := copy(dst[i][off:], b)
			b = b[n:]
			if off += n; off == len(dst[i]) {
				i, off = i+1, 0
			}
		}
	}
}

// executeWriteLocked is executeDirectLocked's RDMA WRITE and
// WRITE_WITH_IMM: the responder's side of a WRITE ONLY (respWriteLocked),
// the latter's receive completion where the packet's would be written.
func (r *requester) executeWriteLocked(w *sendWQE, mtu int) bool {
	peer := r.directPeerLocked(w)
	if peer == nil {
		return false
	}
	dst, ok := peer.resp.directWriteTargetLocked(w)
	if !ok {
		return false
	}
	// WRITE_WITH_IMM takes a receive WQE of the peer's RQ or SRQ (none
	// goes as packets: the packets' RNR NAK).
	if w.info.Imm {
		if srq := peer.srq; srq != nil {
			// Peeked and taken under one hold: QPs of other engines
			// take from it too.
			srq.lockTake()
			defer srq.unlockTake()
		}
		if peer.resp.checkRecvLocked() != respOK {
			return false
		}
	}
	var srcs [maxDirectSGEs][]byte
	src, ok := r.directSourceLocked(w, &srcs)
	if !ok {
		return false
	}
	peer.resp.ownReadRepliesLocked()
	copyChunks([][]byte{dst}, src)
	peer.resp.wroteLocked(w.wr.RemoteAddr, w.wr.RKey, w.length)
	var recv func()
	if w.info.Imm {
		peer.resp.takeRecvLocked()
		recv = func() { peer.resp.completeWriteImmLocked(w.wr.ImmData, w.wr.SendFlags&qp.SendSolicited != 0) }
	}
	r.directDoneLocked(peer, w, mtu, recv)
	return true
}

// directWriteTargetLocked is the memory a direct WRITE of w writes into
// (nil for no bytes), or false when the responder's check refuses it.
func (r *responder) directWriteTargetLocked(w *sendWQE) ([]byte, bool) {
	mr, off, e := r.checkWriteLocked(w.wr.RemoteAddr, w.wr.RKey, w.length)
	if e != respOK {
		return nil, false
	}
	if mr == nil {
		return nil, true
	}
	b, f := mr.bytesLocked(off, w.length, qp.AccessRemoteWrite)
	return b, f == faultNone
}

// executeSendLocked is executeDirectLocked's SEND, SEND_WITH_IMM and
// SEND_WITH_INV: the responder's side of a SEND ONLY (respSendLocked) into
// the next receive WQE of the peer's RQ or SRQ, checked whole before it is
// taken (none goes as packets: the packets' RNR NAK). SEND_WITH_INV's
// invalidation must succeed and, as the packet's does, needs all of
// Device.mu (its key change detaches other QPs' packets); otherwise it goes
// as packets, which answer with the NAK.
func (r *requester) executeSendLocked(w *sendWQE, mtu int) bool {
	q := r.q
	peer := r.directPeerLocked(w)
	if peer == nil {
		return false
	}
	pr := &peer.resp
	if srq := peer.srq; srq != nil {
		// Peeked and taken under one hold: QPs of other engines take
		// from it too.
		srq.lockTake()
		defer srq.unlockTake()
	}
	if pr.checkRecvLocked() != respOK {
		return false
	}
	var dsts [maxDirectSGEs][]byte
	dst, ok := r.recvTargetLocked(peer, w.length, &dsts)
	if !ok {
		return false
	}
	var srcs [maxDirectSGEs][]byte
	src, ok := r.directSourceLocked(w, &srcs)
	if !ok {
		return false
	}
	var invMR *MR
	var invMW *MW
	inv := w.wr.Opcode == qp.WRSendWithInv
	data := w.wr.ImmData
	if inv {
		e := q.eng()
		if len(q.dev.engines) > 1 && !e.exclusive {
			return false
		}
		var st qp.WCStatus
		if invMR, invMW, st = q.dev.invalidationLocked(peer, w.wr.InvalidateRKey, true); st != qp.WCSuccess {
			return false
		}
		data = w.wr.InvalidateRKey
	}
	pr.takeRecvLocked()
	pr.ownReadRepliesLocked()
	copyChunks(dst, src)
	pr.offset = w.length
	r.directDoneLocked(peer, w, mtu, func() {
		// After the bytes are placed, as the last packet does it.
		q.dev.invalidateLocked(invMR, invMW)
		pr.recvDoneLocked(uint32(w.length), w.info.Imm, inv, data, w.wr.SendFlags&qp.SendSolicited != 0)
	})
	return true
}

// recvTargetLocked resolves the first length bytes of the receive WQE the
// peer has peeked (peekRecvLocked) into dsts, or reports false: too short,
// more than maxDirectSGEs pieces, or a bad lkey (each an error the packets
// report).
func (r *requester) recvTargetLocked(peer *QP, length uint64, dsts *[maxDirectSGEs][]byte) ([][]byte, bool) {
	pr := &peer.resp
	if pr.recvFitsLocked(0, length) != respOK {
		return nil, false
	}
	dst := dsts[:0]
	for left, i := length, 0; left > 0; i++ {
		s := pr.rwqe.SGL[i]
		take := min(uint64(s.Length), left)
		if take == 0 {
			continue
		}
		if len(dst) == maxDirectSGEs {
			return nil, false
		}
		b, _, f := r.q.dev.lkeyMRLocked(peer.pd, &pr.lkeyHint, s.LKey, s.Addr, take, qp.AccessLocalWrite)
		if f != faultNone {
			return nil, false
		}
		dst = append(dst, b)
		left -= take
	}
	return dst, true
}

// directDoneLocked moves both QPs as the message's packets and its ACK
// would have: the peer's receive counters, PSN, MSN and comm_est, then
// (recv, the peer's completion, if any) the ACK's effect on q.
func (r *requester) directDoneLocked(peer *QP, w *sendWQE, mtu int, recv func()) {
	q := r.q
	r.directMovedLocked(peer, w, npkts(w.length, mtu))
	peer.resp.msn++
	if recv != nil {
		recv()
	}
	// The acknowledgement.
	peer.Counters.AcksSent++
	peer.Counters.PacketsSent++
	q.eng().counts.packets++
	r.sinceAck = 0
	w.state = wqePending
	q.comp.ackThroughLocked(w.lastPSN)
	q.comp.armRetryLocked()
}

// directMovedLocked moves both QPs as the n packets of w's message would
// have, what every direct SEND and WRITE shares, RC or UC: the peer's
// receive counters, comm_est and PSN, q's send counters and PSN, and w past
// the requester. The device's counters go once per turn
// (engine.flushCountsLocked): six atomic adds per WRITE were a fifth of the
// engine at 8 B.
func (r *requester) directMovedLocked(peer *QP, w *sendWQE, n uint32) {
	q := r.q
	peer.resp.receivedDirectLocked(n, w.length)
	q.Counters.PacketsSent += uint64(n)
	q.Counters.BytesSent += w.length
	r.psn = r.psn.Add(n)
	w.sent = w.length
	r.reqIdx++
	c := &q.eng().counts
	c.packets += uint64(n)
	c.bytes += w.length
	c.ops++
}

// directPeerLocked is the peer QP that w may be executed against directly
// (executeDirectLocked), or nil: the conditions every operation shares, RC
// or UC. q between messages (and for RC with nothing unacknowledged); the
// peer connected back to q on q's engine, as acceptLocked would take its
// packets, with the direct path open between them (localPathLocked); its
// responder between messages and expecting w's first PSN, nothing of its
// queued, no READ being answered, no ACK held back, no aborted UC
// message's receive WQE held.
func (r *requester) directPeerLocked(w *sendWQE) *QP {
	q := r.q
	d := q.dev
	if !d.isLocalGID(q.attr.AH.DGID) || r.psn != w.firstPSN || q.inboxed.Load() ||
		q.Type == qp.TypeRC && (q.comp.psn != w.firstPSN || len(q.comp.respIn) > 0) {
		return nil
	}
	// The peer of q's last direct operation, while it lives, saves the
	// map lookup (3.5 % of the engine at WRITE 8 B): a live QP with the
	// number is the one the table holds.
	peer := r.peerHint
	if peer == nil || peer.destroyed || peer.QPN != q.attr.DestQPNum {
		peer = d.qps[q.attr.DestQPNum]
		r.peerHint = peer
	}
	if peer == nil || peer == q || peer.destroyed || peer.eng() != q.eng() || !peer.takesFromLocked(q) ||
		!peer.attr.QPState.ProcessRecv() || d.localPathLocked(q.QPN, peer.QPN) != pathDirect {
		return nil
	}
	pr := &peer.resp
	if pr.psn != w.firstPSN || len(pr.reqIn) > 0 || peer.inboxed.Load() || pr.inSend || pr.inWrite ||
		pr.reading || pr.ackDue || pr.ucDrop || pr.haveRWQE {
		return nil
	}
	return peer
}

// executeUCLocked is executeDirectLocked on a UC QP: a SEND, SEND_WITH_IMM,
// WRITE or WRITE_WITH_IMM executed against the peer as respondUCLocked
// would take its packets, when every check passes (anything else goes as
// packets, which the peer drops as UC does: the requester's completion is
// a success either way). The WQE completes as its last packet's departure
// completes it; there is no acknowledgement.
func (r *requester) executeUCLocked(w *sendWQE, mtu int) bool {
	op := w.wr.Opcode
	if op != qp.WRSend && op != qp.WRSendWithImm && op != qp.WRRDMAWrite && op != qp.WRRDMAWriteWithImm {
		return false
	}
	peer := r.directPeerLocked(w)
	if peer == nil {
		return false
	}
	pr := &peer.resp
	var dsts [maxDirectSGEs][]byte
	dst := dsts[:0]
	if w.info.Write {
		b, ok := pr.directWriteTargetLocked(w)
		if !ok {
			return false
		}
		if b != nil {
			dst = append(dst, b)
		}
	}
	if w.info.Send || w.info.Imm {
		if srq := peer.srq; srq != nil {
			srq.lockTake()
			defer srq.unlockTake()
		}
		if pr.checkRecvLocked() != respOK {
			return false
		}
		if w.info.Send {
			var ok bool
			if dst, ok = r.recvTargetLocked(peer, w.length, &dsts); !ok {
				return false
			}
		}
	}
	var srcs [maxDirectSGEs][]byte
	src, ok := r.directSourceLocked(w, &srcs)
	if !ok {
		return false
	}
	if w.info.Send || w.info.Imm {
		pr.takeRecvLocked()
	}
	copyChunks(dst, src)
	r.directMovedLocked(peer, w, npkts(w.length, mtu))
	se := w.wr.SendFlags&qp.SendSolicited != 0
	switch {
	case w.info.Send:
		pr.msn++
		pr.recvDoneLocked(uint32(w.length), w.info.Imm, false, w.wr.ImmData, se)
	case w.info.Imm:
		pr.wroteLocked(w.wr.RemoteAddr, w.wr.RKey, w.length)
		pr.msn++
		pr.completeWriteImmLocked(w.wr.ImmData, se)
	default:
		pr.wroteLocked(w.wr.RemoteAddr, w.wr.RKey, w.length)
	}
	w.state, w.status = wqeDone, qp.WCSuccess
	return true
}

// executeAtomicLocked is executeDirectLocked's FETCH_ADD and CMP_SWAP:
// the responder's side of respAtomicLocked (the word changed with a real
// atomic, the result saved as a responder resource for duplicates, one
// PSN and one MSN) and the requester's of handleAtomicAckLocked (the
// original value scattered into the WQE's SGE, the WQE done).
func (r *requester) executeAtomicLocked(w *sendWQE) bool {
	q := r.q
	peer := r.directPeerLocked(w)
	if peer == nil {
		return false
	}
	d := q.dev
	b, mr, e := peer.resp.checkAtomicLocked(w.wr.RemoteAddr, w.wr.RKey, qp.AccessRemoteAtomic)
	if e != respOK {
		return false
	}
	peer.resp.ownReadRepliesLocked()
	cmpSwap, compare, swapAdd := atomicArgs(&w.wr)
	// The MR is not on demand (directLocked), so nothing can fail past
	// the check.
	orig, _ := applyAtomicLocked(b, mr, w.wr.RemoteAddr, cmpSwap, compare, swapAdd)
	psn := w.firstPSN
	peer.Counters.PacketsRecv++
	peer.resp.inSeqLocked()
	res := peer.resp.acceptRdAtomicLocked(psn, psn)
	res.atomic, res.orig = true, orig
	peer.Counters.PacketsSent++ // the atomic acknowledgement
	q.Counters.PacketsSent++
	r.psn = r.psn.Add(1)
	w.state = wqePending
	r.reqIdx++
	q.comp.ackThroughLocked(psn.Add(^uint32(0)))
	var v [8]byte
	binary.LittleEndian.PutUint64(v[:], orig)
	if f := d.scatterLocked(q.pd, &r.lkeyHint, w.wr.SGL, 0, v[:]); f != faultNone {
		q.comp.failWQELocked(w, qp.WCLocProtErr)
	} else {
		q.comp.answeredLocked(w, psn.Add(1))
	}
	c := &q.eng().counts
	c.packets += 2
	c.ops++
	return true
}

// directCounts are the device counters of an engine's direct WRITEs not
// yet added to Device.Counters; guarded by its stripe.
type directCounts struct {
	packets, bytes, ops uint64
}

// flushCountsLocked adds what the turn's direct WRITEs count to the
// device's counters (sent and received at once, as directTxLocked does).
func (e *engine) flushCountsLocked() {
	c := &e.counts
	if c.ops == 0 {
		return
	}
	dc := &e.d.Counters
	dc.DirectPackets.Add(e.idx, c.packets)
	dc.DirectBytes.Add(e.idx, c.bytes)
	dc.DirectOps.Add(e.idx, c.ops)
	*c = directCounts{}
}
