package device

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"

	"rdmafs/qp"
	"rdmafs/ring"
)

// qpnStart is the first QPN handed out; 0 and 1 are the special QPs of IB
// and QPNs below 16 stay free as in rxe (RXE_MIN_QP_INDEX).
const qpnStart = 16

// QP is a queue pair: its identity (QPN, owner, type), its wiring (PD,
// CQs, SRQ, rings, engine) and attributes, and the three roles of the
// transport that act for it (req, resp, comp: run.go), each a receiver
// over the state it owns. Its verbs state and its transport state are
// guarded by Device.mu; its home engine runs its turns.
type QP struct {
	dev   *Device
	QPN   uint32
	Owner Owner
	Type  qp.Type
	pd    *PD
	// mcastGroups counts the multicast groups q is attached to (mcast.go).
	mcastGroups int // lockcheck:guarded dev.mu
	sendCQ      *CQ
	recvCQ      *CQ
	srq         *SRQ
	Cap         qp.Cap // actual capacities, as ibv_create_qp reports them
	SQSigAll    bool
	// xrcd is an XRC_RECV QP's domain, holders how many leases hold it
	// (xrc.go). Such a QP has no pd, CQs or srq of its own: they are
	// those of the XRC SRQ its current message is for (nil before one).
	xrcd    *xrcDomain
	holders int

	attr qp.Attr // current attributes; attr.QPState is the state; lockcheck:guarded dev.mu

	sqRegion, rqRegion *ring.Region
	sq, rq             *ring.Ring

	postMu sync.Mutex // serializes in-daemon posters
	gone   bool       // destroyed: rings unmapped; lockcheck:guarded postMu

	destroyed bool        // lockcheck:guarded dev.mu
	queued    atomic.Bool // in its engine's run queue; set under engine.mu
	watched   atomic.Bool // its engine's spin loop polls the SQ (set by that engine)
	soon      bool        // in its engine's soon list (loopback.go); its stripe; lockcheck:guarded dev.mu
	inBell    bool        // in dev.bellQPs (written under bellMu too); lockcheck:guarded dev.mu
	// home is the engine that runs the QP's turns; it changes only under
	// all of Device.mu (moveLocked), and is read without a lock by
	// whoever schedules the QP. wantAll asks for the next turn under all
	// of Device.mu (exclusiveLocked); guarded by the home's stripe.
	home    atomic.Pointer[engine]
	wantAll bool // lockcheck:guarded dev.mu
	// inbox holds packets other engines delivered to the QP, accepted by
	// its own engine at its next turn (acceptLocked, takeInboxLocked);
	// guarded by inMu. inboxed is
	// len(inbox) > 0, read without inMu.
	inMu    sync.Mutex
	inbox   []*packet // lockcheck:guarded inMu
	spareIn []*packet // the home's stripe; lockcheck:guarded dev.mu
	inboxed atomic.Bool
	// retireLeft counts the engines that have not yet let go of the
	// destroyed QP's rings (Device.retire).
	retireLeft atomic.Int32
	// sqSeen is the SQ producer index the engine last fetched up to; the
	// spin loop compares it with the ring's without Device.mu.
	sqSeen atomic.Uint32

	// The three roles (run.go): each holds the state it owns and a back
	// pointer to q for the identity and wiring it reads. Their fields
	// carry their own lock annotations.
	req  requester
	resp responder
	comp completer

	// inPeak is the longest either receive queue (resp.reqIn, comp.respIn)
	// has been (for tests).
	inPeak int // lockcheck:guarded dev.mu

	drainSent bool // sq_drained raised for this SQD; lockcheck:guarded dev.mu
	lastWQE   bool // qp_last_wqe_reached raised; lockcheck:guarded dev.mu

	Counters QPCounters // lockcheck:guarded dev.mu
}

// QPCounters are per-QP statistics. NAKs are counted by kind, as the
// responder sends them and as the requester receives them; SeqErrNaks and
// RemoteErrNak are the older sums (sequence NAKs sent or received; error
// NAKs received).
type QPCounters struct {
	PacketsSent, PacketsRecv                uint64
	Retransmits, RetryTimeouts              uint64
	RNRNaksSent, RNRNaksRecv                uint64
	SeqErrNaks, DuplicateReqs, RemoteErrNak uint64
	Dropped                                 uint64
	SendWQEs, RecvWQEs                      uint64

	SeqNaksSent, SeqNaksRecv             uint64
	InvReqNaksSent, InvReqNaksRecv       uint64
	RemAccessNaksSent, RemAccessNaksRecv uint64
	RemOpNaksSent, RemOpNaksRecv         uint64
	// SeqErrors counts request packets that arrived out of sequence (past
	// the expected PSN: RC drops them after one NAK, UC drops the message).
	SeqErrors uint64
	// DuplicateResps counts stale or repeated responses the requester
	// dropped (ACKs of PSNs already acknowledged, read responses and
	// atomic acknowledgements out of order).
	DuplicateResps uint64
	// ICRCErrors counts wire packets naming this QP whose ICRC was bad
	// (the QPN is read from a packet that failed its check, so this is
	// best effort; the device counter is exact).
	ICRCErrors uint64
	// AcksSent counts ACKs (not NAKs) this QP's responder sent;
	// AcksCoalesced the ACKs it saved because a later ACK of the same run
	// covered them.
	AcksSent, AcksCoalesced uint64
	// QueueOverflows counts packets dropped because the QP's receive
	// queue was full (also in Dropped).
	QueueOverflows uint64
	// ForeignDropped counts packets for this connected QP that came from
	// a QP other than its peer (on loopback: any other QP of the device)
	// and were dropped before they could change anything.
	ForeignDropped uint64
	// BytesSent and BytesRecv count the payload bytes of the packets this
	// QP sent and of those that reached it (requests and responses).
	BytesSent, BytesRecv uint64
	// Probes counts the liveness probes (qp/N/ctl probe) sent through the
	// reserved WQEs, ProbesOK those acknowledged, ProbesFailed those that
	// ended otherwise (flushed, retries exhausted, NAKed); ProbeRTTMicros
	// is the last acknowledged probe's round trip.
	Probes, ProbesOK, ProbesFailed, ProbeRTTMicros uint64
}

// List names the counters in a fixed order.
func (c *QPCounters) List() []Counter {
	return []Counter{
		{"packets_sent", c.PacketsSent}, {"packets_recv", c.PacketsRecv},
		{"retransmits", c.Retransmits}, {"retry_timeouts", c.RetryTimeouts},
		{"rnr_naks_sent", c.RNRNaksSent}, {"rnr_naks_recv", c.RNRNaksRecv},
		{"seq_err_naks", c.SeqErrNaks}, {"duplicate_requests", c.DuplicateReqs},
		{"remote_err_naks", c.RemoteErrNak}, {"dropped_packets", c.Dropped},
		{"send_wqes", c.SendWQEs}, {"recv_wqes", c.RecvWQEs},
		{"seq_naks_sent", c.SeqNaksSent}, {"seq_naks_recv", c.SeqNaksRecv},
		{"inv_req_naks_sent", c.InvReqNaksSent}, {"inv_req_naks_recv", c.InvReqNaksRecv},
		{"rem_access_naks_sent", c.RemAccessNaksSent}, {"rem_access_naks_recv", c.RemAccessNaksRecv},
		{"rem_op_naks_sent", c.RemOpNaksSent}, {"rem_op_naks_recv", c.RemOpNaksRecv},
		{"seq_errors", c.SeqErrors}, {"duplicate_responses", c.DuplicateResps},
		{"icrc_errors", c.ICRCErrors},
		{"acks_sent", c.AcksSent}, {"acks_coalesced", c.AcksCoalesced},
		{"foreign_packets_dropped", c.ForeignDropped},
		{"queue_overflows", c.QueueOverflows},
		{"bytes_sent", c.BytesSent}, {"bytes_recv", c.BytesRecv},
		{"probes", c.Probes}, {"probes_ok", c.ProbesOK}, {"probes_failed", c.ProbesFailed},
		{"probe_rtt_us", c.ProbeRTTMicros},
	}
}

// CreateQP is ibv_create_qp. The capacities actually provided (at least
// those asked for) are in QP.Cap.
func (d *Device) CreateQP(owner Owner, req qp.CreateQP) (*QP, error) {
	const op = "create_qp"
	if !req.Type.Valid() {
		return nil, errf(op, syscall.EOPNOTSUPP, "qp_type: %v is not supported", req.Type)
	}
	c := req.Cap
	switch {
	case c.MaxSendWR > d.cfg.MaxQPWR:
		return nil, errf(op, syscall.EINVAL, "max_send_wr: %d exceeds max_qp_wr %d", c.MaxSendWR, d.cfg.MaxQPWR)
	case c.MaxSendSGE > d.cfg.MaxSGE:
		return nil, errf(op, syscall.EINVAL, "max_send_sge: %d exceeds max_sge %d", c.MaxSendSGE, d.cfg.MaxSGE)
	case c.MaxInlineData > d.cfg.MaxInlineData:
		return nil, errf(op, syscall.EINVAL, "max_inline_data: %d exceeds %d", c.MaxInlineData, d.cfg.MaxInlineData)
	case req.Type == qp.TypeXRCRecv && req.Open != 0:
		return nil, errf(op, syscall.EINVAL, "open: an existing qp is opened with OpenQP")
	case req.SRQ == 0 && c.MaxRecvWR > d.cfg.MaxQPWR:
		return nil, errf(op, syscall.EINVAL, "max_recv_wr: %d exceeds max_qp_wr %d", c.MaxRecvWR, d.cfg.MaxQPWR)
	case req.SRQ == 0 && c.MaxRecvSGE > d.cfg.MaxSGE:
		return nil, errf(op, syscall.EINVAL, "max_recv_sge: %d exceeds max_sge %d", c.MaxRecvSGE, d.cfg.MaxSGE)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if req.Type == qp.TypeXRCRecv {
		return d.createQPLocked(op, owner, req, nil, nil, nil, nil)
	}
	pd, err := d.openPDLocked(op, req.PD, owner)
	if err != nil {
		return nil, err
	}
	scq, err := useLocked(&d.cqs, op, "send_cq: cq", req.SendCQ, owner)
	if err != nil {
		return nil, err
	}
	rcq := scq // an xrc_send QP receives nothing: its recv_cq is only held
	if req.RecvCQ != 0 || req.Type != qp.TypeXRCSend {
		if rcq, err = useLocked(&d.cqs, op, "recv_cq: cq", req.RecvCQ, owner); err != nil {
			return nil, err
		}
	}
	var srq *SRQ
	if req.SRQ != 0 {
		if srq, err = useLocked(&d.srqs, op, "srq:", req.SRQ, owner); err != nil {
			return nil, err
		}
		if srq.PD != pd {
			return nil, errf(op, syscall.EINVAL, "srq: %d is on pd %d, not pd %d", req.SRQ, srq.PD.Handle, pd.Handle)
		}
		if srq.xrcd != nil {
			return nil, errf(op, syscall.EINVAL, "srq: %d is an XRC SRQ; only XRC_RECV QPs of its domain reach it", req.SRQ)
		}
		// IBA allows SRQs with RC, UC and UD alike.
	}
	return d.createQPLocked(op, owner, req, pd, scq, rcq, srq)
}

// createQPLocked is CreateQP past the lookups: pd, scq, rcq and srq are
// the objects the request names (all nil for an XRC_RECV QP, which names
// its domain instead).
func (d *Device) createQPLocked(op string, owner Owner, req qp.CreateQP, pd *PD, scq, rcq *CQ, srq *SRQ) (*QP, error) {
	c := req.Cap
	var dom *xrcDomain
	if req.Type == qp.TypeXRCRecv {
		var err error
		if dom, err = d.xrcRecvDomainLocked(op, req.XRCD, owner); err != nil {
			return nil, err
		}
	}
	if err := admitLocked(d, op, "qp", d.qps, d.cfg.MaxQP, owner); err != nil {
		return nil, err
	}
	qpn, ok := d.allocQPNLocked()
	if !ok {
		return nil, errf(op, syscall.ENOMEM, "no free QPN")
	}
	q := &QP{dev: d, QPN: qpn, Owner: owner, Type: req.Type, pd: pd, sendCQ: scq, recvCQ: rcq,
		srq: srq, SQSigAll: req.SQSigAll, xrcd: dom}
	q.req.q, q.resp.q, q.comp.q = q, q, q
	q.home.Store(d.nextEngineLocked())

	// Send ring: rxe's sizing (ring package doc); the slack of the power of
	// two is given to the user.
	sqSlots := ring.SlotCount(max(c.MaxSendWR, 1))
	sqSlot, capSGE, capInline := ring.SendSlotSize(c.MaxSendSGE, c.MaxInlineData)
	capSGE = min(capSGE, d.cfg.MaxSGE)
	capInline = min(capInline, d.cfg.MaxInlineData)
	q.Cap = qp.Cap{MaxSendWR: sqSlots, MaxSendSGE: capSGE, MaxInlineData: capInline}
	var err error
	q.sqRegion, err = ring.NewRegion(fmt.Sprintf("rdmafs-qp%d-sq", qpn), ring.Size(sqSlot, sqSlots))
	if err != nil {
		return nil, errf(op, syscall.ENOMEM, "send queue: %v", err)
	}
	if q.sq, err = ring.Init(q.sqRegion.Bytes(), ring.KindSQ, sqSlot, sqSlots); err != nil {
		q.sqRegion.Close()
		return nil, errf(op, syscall.ENOMEM, "send queue: %v", err)
	}
	q.req.sqCons = ring.NewConsumer(q.sq)
	// Nobody watches a new SQ: the first post rings the doorbell.
	q.sq.SetNeedWakeup(true)
	q.req.swq = make([]sendWQE, ring.SlotCount(sqSlots+d.cfg.ReservedOps))
	if req.Type.XRC() {
		// No receive queue: an XRC_SEND QP receives nothing, an
		// XRC_RECV QP takes WQEs from XRC SRQs. (An XRC_RECV QP's SQ
		// of one slot is never shown: it sends only responses.)
		q.Cap.MaxRecvWR, q.Cap.MaxRecvSGE = 0, 0
	} else if srq == nil {
		rqSlots := ring.SlotCount(max(c.MaxRecvWR, 1))
		rqSlot, capRSGE := ring.RecvSlotSize(max(c.MaxRecvSGE, 1))
		capRSGE = min(capRSGE, d.cfg.MaxSGE)
		q.Cap.MaxRecvWR, q.Cap.MaxRecvSGE = rqSlots, capRSGE
		q.rqRegion, err = ring.NewRegion(fmt.Sprintf("rdmafs-qp%d-rq", qpn), ring.Size(rqSlot, rqSlots))
		if err == nil {
			q.rq, err = ring.Init(q.rqRegion.Bytes(), ring.KindRQ, rqSlot, rqSlots)
		}
		if err != nil {
			q.sqRegion.Close()
			if q.rqRegion != nil {
				q.rqRegion.Close()
			}
			return nil, errf(op, syscall.ENOMEM, "receive queue: %v", err)
		}
		q.resp.rqCons = ring.NewConsumer(q.rq)
	} else {
		srq.users++
	}
	q.attr.QPState = qp.StateReset
	q.attr.PortNum = 1
	q.attr.PathMTU = d.cfg.ActiveMTU
	q.attr.Cap = q.Cap
	q.initLocked()
	if dom != nil {
		dom.users++
		q.holders = 1 // its maker's (Hold, Unhold)
		q.Cap.MaxSendWR, q.Cap.MaxSendSGE, q.Cap.MaxInlineData = 0, 0, 0
		q.attr.Cap = q.Cap
	} else {
		pd.users++
		scq.users++
		rcq.users++
	}
	d.qps[qpn] = q
	return q, nil
}

// allocQPNLocked hands out QPNs cyclically, like rxe's xa_alloc_cyclic: a
// destroyed QP's number comes back only after the whole space has been
// used, so packets and handles of the old QP cannot reach a new one.
func (d *Device) allocQPNLocked() (uint32, bool) {
	const space = 1 << 24
	for i := 0; i < space; i++ {
		n := d.nextQPN
		d.nextQPN++
		if d.nextQPN >= space {
			d.nextQPN = qpnStart
		}
		if _, used := d.qps[n]; !used {
			return n, true
		}
	}
	return 0, false
}

// QP looks a QP up by number.
func (d *Device) QP(qpn uint32) *QP {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.qps[qpn]
}

// SQ and RQ are the work-queue rings' shared memory (RQ is nil with an SRQ).
func (q *QP) SQ() *ring.Region { return q.sqRegion }
func (q *QP) RQ() *ring.Region { return q.rqRegion }

// PD, SendCQ, RecvCQ, SRQ report what the QP was created with.
// An XRC_RECV QP has none of them (0).
func (q *QP) PDHandle() uint32     { return q.handleOf(func() uint32 { return q.pd.Handle }) }
func (q *QP) SendCQHandle() uint32 { return q.handleOf(func() uint32 { return q.sendCQ.Handle }) }
func (q *QP) RecvCQHandle() uint32 { return q.handleOf(func() uint32 { return q.recvCQ.Handle }) }
func (q *QP) SRQHandle() uint32 {
	if q.srq == nil || q.Type == qp.TypeXRCRecv {
		return 0
	}
	return q.srq.Handle
}

func (q *QP) handleOf(h func() uint32) uint32 {
	if q.Type == qp.TypeXRCRecv {
		return 0
	}
	return h()
}

// State is the QP's current state.
func (q *QP) State() qp.State {
	q.dev.mu.Lock()
	defer q.dev.mu.Unlock()
	return q.attr.QPState
}

// Query is ibv_query_qp: every attribute, the state, the capacities and
// whether an SQD drain is still in progress.
func (q *QP) Query() qp.Attr {
	q.dev.mu.Lock()
	defer q.dev.mu.Unlock()
	a := q.attr
	a.CurQPState = a.QPState
	a.Cap = q.Cap
	a.SQDraining = a.QPState == qp.StateSQD && q.req.sqHead != q.req.reqIdx
	return a
}

// CountersSnapshot copies the QP's counters.
func (q *QP) CountersSnapshot() QPCounters {
	q.dev.mu.Lock()
	defer q.dev.mu.Unlock()
	return q.Counters
}

// Modify is ibv_modify_qp: the mask is checked against the transition table
// for the QP type, every attribute against its limits, and only then is
// anything applied. A failed modify changes nothing.
func (q *QP) Modify(attr *qp.Attr, mask qp.AttrMask) error {
	const op = "modify_qp"
	d := q.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	if q.destroyed {
		return errf(op, syscall.ENOENT, "qp %d was destroyed", q.QPN)
	}
	if err := d.checkOpenLocked(op); err != nil {
		return err // the rings are unmapped: a reset must not touch them
	}
	cur := q.attr.QPState
	if mask&qp.MaskCurState != 0 && attr.CurQPState != cur {
		return errf(op, syscall.EINVAL, "cur_qp_state: %v given but qp %d is in %v", attr.CurQPState, q.QPN, cur)
	}
	next := cur
	if mask&qp.MaskState != 0 {
		next = attr.QPState
	}
	if err := qp.ModifyOK(cur, next, q.Type, mask); err != nil {
		return fail(op, err)
	}
	if err := qp.CheckAttr(q.Type, attr, mask, d.limits()); err != nil {
		return fail(op, err)
	}
	if cur == qp.StateSQD && next != qp.StateErr && next != qp.StateReset && q.req.sqHead != q.req.reqIdx {
		// rxe: while the SQ drains only ERR (and RESET) are allowed.
		return errf(op, syscall.EBUSY, "qp_state: qp %d is still draining its send queue", q.QPN)
	}
	if mask&qp.MaskPathMTU != 0 && q.Type == qp.TypeUD {
		// UD uses the port MTU; the table does not allow path_mtu for UD anyway.
	}
	q.applyLocked(attr, mask, cur, next)
	return nil
}

// applyLocked applies a checked modify. It cannot fail.
func (q *QP) applyLocked(attr *qp.Attr, mask qp.AttrMask, cur, next qp.State) {
	qp.ApplyAttr(&q.attr, attr, mask)
	q.attr.QPState = cur // the state moves below, with its side effects
	if mask&qp.MaskSQPSN != 0 {
		q.req.psn = q.attr.SQPSN
		q.comp.psn = q.attr.SQPSN
		q.comp.acked = q.attr.SQPSN.Add(^uint32(0))
	}
	if mask&qp.MaskRQPSN != 0 {
		q.resp.psn = q.attr.RQPSN
	}
	if mask&qp.MaskMaxQPRdAtomic != 0 {
		q.req.rdAtomic = int(q.attr.MaxRdAtomic) - q.req.outstandingRdAtomicLocked()
	}
	if mask&qp.MaskMaxDestRdAtomic != 0 {
		q.resp.res = make([]respResource, max(int(q.attr.MaxDestRdAtomic), 1))
		q.resp.resNext = 0
	}
	if mask&qp.MaskRetryCnt != 0 {
		q.comp.retryLeft = q.attr.RetryCnt
	}
	if mask&qp.MaskRNRRetry != 0 {
		q.comp.rnrLeft = q.attr.RNRRetry
	}
	switch {
	case next == qp.StateReset:
		if cur != qp.StateReset {
			q.resetLocked()
		}
	case next == qp.StateErr:
		q.enterErrLocked()
	default:
		if next == qp.StateRTR && cur != qp.StateRTR {
			q.resp.commEst = false
			q.colocateLocked()
		}
		if next == qp.StateSQD && cur != qp.StateSQD {
			q.drainSent = false // SQD→SQD drains nothing new
		}
		q.attr.QPState = next
	}
	q.syncBellLocked()
	q.eng().schedule(q)
}

// eng is the engine that runs q's turns.
func (q *QP) eng() *engine { return q.home.Load() }

// nextEngineLocked is the engine a new QP starts on: the engines in turn.
func (d *Device) nextEngineLocked() *engine {
	e := d.engines[d.nextEngine%len(d.engines)]
	d.nextEngine++
	return e
}

// colocateLocked is the policy of where a connected QP runs: one whose
// peer is a QP of this device moves to the peer's engine (moveLocked), so
// that the two run in one engine's batches and each other's packets take
// the direct path without an inbox (a pair apart works too: through the
// inboxes, one path-MTU READ response at a time; the tests' -device.apart
// keeps pairs so).
func (q *QP) colocateLocked() {
	d := q.dev
	if len(d.engines) == 1 || q.Type == qp.TypeUD || !d.isLocalGID(q.attr.AH.DGID) {
		return
	}
	peer := d.qps[q.attr.DestQPNum]
	if peer == nil || peer == q || peer.destroyed {
		return
	}
	q.moveLocked(peer.eng())
}

// moveLocked makes to the engine that runs q's turns (all of Device.mu
// held): q leaves its old engine's run queue for to's, and the move is
// counted (engine_moves).
func (q *QP) moveLocked(to *engine) {
	from := q.eng()
	if from == to {
		return
	}
	from.mu.Lock()
	queued := q.queued.Load()
	if queued {
		from.unqueueLocked(q)
	}
	// A batch the old engine took, and waits to run, may still hold q:
	// it sees the new home and passes q on (runBatches). Its spin loop may
	// poll q's ring until it parks, scheduling q at its home.
	q.home.Store(to)
	from.mu.Unlock()
	if queued {
		to.schedule(q)
	}
	q.dev.Counters.EngineMoves.Add(1)
}

// enterErrLocked moves the QP to ERR; the engine then flushes every
// outstanding WQE with WR_FLUSH_ERR. The only place that starts a flush.
func (q *QP) enterErrLocked() {
	if q.attr.QPState == qp.StateErr || q.attr.QPState == qp.StateReset {
		return
	}
	q.attr.QPState = qp.StateErr
	q.stopTimersLocked()
	q.syncBellLocked()
	q.eng().schedule(q)
}

// fatalLocked is a transport error that ends the QP: ERR plus the async
// event the responder raises for it.
func (q *QP) fatalLocked(ev EventType) {
	if q.attr.QPState == qp.StateErr || q.attr.QPState == qp.StateReset {
		return
	}
	q.dev.raise(ev, "qp", q.QPN)
	q.enterErrLocked()
}

// resetLocked is rvt_init_qp: back to RESET, every queue emptied without
// completions, the transport state zeroed. Port, pkey, MTU, timeout,
// retry counts, the address vector and the rd_atomic limits are kept.
func (q *QP) resetLocked() {
	q.stopTimersLocked()
	q.req.emptyLocked()
	q.resp.emptyLocked()
	q.dropQueuedLocked()
	q.attr.QPState = qp.StateReset
	q.attr.DestQPNum = 0
	q.attr.QKey = 0
	q.attr.QPAccessFlags = 0
	q.attr.SQPSN, q.attr.RQPSN = 0, 0
	q.initLocked()
}

// initLocked sets the transport state a fresh or reset QP starts with.
func (q *QP) initLocked() {
	q.req.initLocked()
	q.comp.initLocked()
	q.resp.initLocked()
	q.drainSent, q.lastWQE = false, false
}

func (q *QP) stopTimersLocked() {
	if q.comp.retryTimer != nil {
		q.comp.retryTimer.Stop()
		q.comp.retryTimer = nil
	}
	if q.comp.rnrTimer != nil {
		q.comp.rnrTimer.Stop()
		q.comp.rnrTimer = nil
	}
	q.comp.retrySeq++
	q.comp.rnrSeq++
	q.comp.timeoutFired = false
	q.req.waitRNR = false
}

// Reset is a modify to RESET (the ctl file's "reset").
func (q *QP) Reset() error {
	return q.Modify(&qp.Attr{QPState: qp.StateReset}, qp.MaskState)
}

// Error is a modify to ERR (the ctl file's "error").
func (q *QP) Error() error {
	return q.Modify(&qp.Attr{QPState: qp.StateErr}, qp.MaskState)
}

// Destroy is ibv_destroy_qp: outstanding work is discarded (as rdmavt's
// destroy does, through a reset), the QPN retired and the rings unmapped.
func (q *QP) Destroy() error {
	d := q.dev
	q.postMu.Lock()
	defer q.postMu.Unlock()
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := q.liveLocked("destroy_qp"); err != nil {
		return err // after Close: it released everything already
	}
	q.stopTimersLocked()
	for _, mw := range d.mws.m {
		if mw.qp == q {
			mw.unbindLocked()
		}
	}
	d.detachAllMcastLocked(q)
	q.destroyed = true
	q.gone = true
	q.syncBellLocked()
	delete(d.qps, q.QPN)
	d.events.withdraw("qp", q.QPN)
	q.releaseLocked()
	// The engine may be polling the SQ without Device.mu: it unmaps.
	d.retire(q)
	return nil
}

func (q *QP) owner() Owner { return q.Owner }

// liveLocked is the check a verb on a QP makes first: the QP was not
// destroyed and the device is open (Close unmapped the rings). Unlike the
// tables' live it goes by q.destroyed: QPs are in Device.qps by QPN.
func (q *QP) liveLocked(op string) error {
	if q.destroyed {
		return errf(op, syscall.ENOENT, "qp %d does not exist", q.QPN)
	}
	return q.dev.checkOpenLocked(op)
}

// releaseLocked drops the QP's references and queued packets. The rings
// are unmapped by the engine (engine.retire) or, after it stopped, by Close.
func (q *QP) releaseLocked() {
	q.dropQueuedLocked()
	q.resp.reqIn, q.comp.respIn = nil, nil
	if q.Type == qp.TypeXRCRecv {
		q.xrcd.users--
		q.srq, q.recvCQ, q.pd = nil, nil, nil
		return
	}
	q.pd.users--
	q.sendCQ.users--
	q.recvCQ.users--
	if q.srq != nil {
		q.srq.users--
	}
}

// Kick is the doorbell: the client published new WQEs.
func (q *QP) Kick() {
	q.dev.Counters.Doorbells.Add(1)
	q.eng().schedule(q)
}

// PostSend is ibv_post_send from inside the daemon (the text post_send
// file): each WR is validated as libibverbs would, written into the SQ
// ring as a client would, and the engine is kicked once at the end. It
// returns how many WRs were posted; on error the rest (bad_wr on) were not.
func (q *QP) PostSend(wrs []qp.SendWR) (int, error) {
	const op = "post_send"
	q.postMu.Lock()
	defer q.postMu.Unlock()
	if q.gone {
		return 0, errf(op, syscall.ENOENT, "qp %d was destroyed", q.QPN)
	}
	n, err := q.postSendLocked(op, wrs)
	if n > 0 {
		q.Kick()
	}
	return n, err
}

func (q *QP) postSendLocked(op string, wrs []qp.SendWR) (int, error) {
	d := q.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	// Close unmaps the rings under Device.mu without taking postMu.
	if err := d.checkOpenLocked(op); err != nil {
		return 0, err
	}
	if st := q.attr.QPState; !st.CanPostSend() {
		return 0, errf(op, syscall.EINVAL, "qp %d is in %v; sends need RTS", q.QPN, st)
	}
	sp := ring.SendPoster{
		Type:    q.Type,
		Caps:    qp.SendCaps{MaxSGE: q.Cap.MaxSendSGE, MaxInline: q.Cap.MaxInlineData, MaxRdAtomic: q.attr.MaxRdAtomic},
		Gather:  q.gatherInlineLocked,
		CheckAH: func(h uint32) error { return q.checkAHLocked(op, h) },
	}
	n, err := sp.Post(ring.NewProducer(q.sq), wrs)
	if err != nil {
		err = postFailure(op, err, "send queue", "send queue", q.Cap.MaxSendWR)
	}
	return n, err
}

// postFailure gives a post loop's refusal its errno: ENOMEM for a full
// queue, EINVAL for corrupt indices (the client scribbled on them), and
// the WR's own error's otherwise. full and corrupt name the queue in the
// two messages.
func postFailure(op string, err error, full, corrupt string, slots uint32) error {
	switch {
	case errors.Is(err, ring.ErrFull):
		return errf(op, syscall.ENOMEM, "%s full (%d WRs)", full, slots)
	case errors.Is(err, ring.ErrCorrupt):
		return errf(op, syscall.EINVAL, "%s indices are corrupt: %v", corrupt, err)
	}
	return fail(op, err)
}

// gatherInlineLocked appends the bytes of one SGE of an inline send (in
// MR iova space, so it needs a valid lkey here, unlike a program's
// virtual addresses) to dst.
func (q *QP) gatherInlineLocked(dst []byte, s qp.SGE) ([]byte, error) {
	b, f := q.dev.lkeyLocked(q.pd, s.LKey, s.Addr, uint64(s.Length), 0)
	if f != faultNone {
		return nil, &qp.Error{Key: "sge", Msg: fmt.Sprintf("lkey %#x addr %#x length %d: %v", s.LKey, s.Addr, s.Length, f)}
	}
	return append(dst, b...), nil
}

// checkAHLocked refuses a UD send whose address handle does not exist or
// is on another PD than the QP.
func (q *QP) checkAHLocked(op string, h uint32) error {
	ah := q.dev.ahs.get(h)
	if ah == nil {
		return errf(op, syscall.EINVAL, "ah: %d does not exist", h)
	}
	if ah.PD != q.pd {
		return errf(op, syscall.EINVAL, "ah: %d is on pd %d, the qp on pd %d", h, ah.PD.Handle, q.pd.Handle)
	}
	return nil
}

// PostRecv is ibv_post_recv from inside the daemon. In ERR the WRs are
// accepted and flushed at once (rdmavt).
func (q *QP) PostRecv(wrs []qp.RecvWR) (int, error) {
	const op = "post_recv"
	d := q.dev
	q.postMu.Lock()
	defer q.postMu.Unlock()
	if q.gone {
		return 0, errf(op, syscall.ENOENT, "qp %d was destroyed", q.QPN)
	}
	// Device.mu is held across the ring write: Close unmaps the rings
	// under it without taking postMu.
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.checkOpenLocked(op); err != nil {
		return 0, err
	}
	st := q.attr.QPState
	if q.Type.XRC() {
		return 0, errf(op, syscall.EINVAL, "qp %d is %v: it has no receive queue", q.QPN, q.Type)
	}
	if q.srq != nil {
		return 0, errf(op, syscall.EINVAL, "qp %d receives from srq %d; post to the srq", q.QPN, q.srq.Handle)
	}
	if !st.CanPostRecv() {
		return 0, errf(op, syscall.EINVAL, "qp %d is in %v; receives need INIT or later", q.QPN, st)
	}
	n, err := postRecvRing(op, q.rq, q.Cap.MaxRecvSGE, wrs)
	if n > 0 && st == qp.StateErr {
		q.eng().schedule(q)
	}
	return n, err
}

// outstandingRdAtomicLocked counts READ/atomic WQEs that hold an initiator
// slot.
func (r *requester) outstandingRdAtomicLocked() int {
	n := 0
	for i := r.sqHead; i != r.reqIdx; i++ {
		if r.swq[i&r.sqMask()].rdAtomic {
			n++
		}
	}
	return n
}

// sqMask is the mask of an index into swq.
//
// lockcheck:locked
func (r *requester) sqMask() uint32 { return uint32(len(r.swq) - 1) }
