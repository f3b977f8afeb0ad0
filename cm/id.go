package cm

import (
	"fmt"
	"net/netip"
	"strings"
	"syscall"
	"time"

	"rdmafs/clock"
	"rdmafs/qp"
)

// State is an id's state: rdma_cm's address states, then the IB CM's
// connection states.
//
//	idle → addr_bound → listen
//	idle|addr_bound → addr_query → addr_resolved → route_query → route_resolved
//	route_resolved → req_sent → rep_rcvd → established          (active)
//	listen ⇒ (new id) req_rcvd → rep_sent → established          (passive)
//	established → dreq_sent → timewait → closed                  (we disconnect)
//	established → dreq_rcvd → timewait → closed                  (the peer does)
//	req_sent|req_rcvd|rep_sent|rep_rcvd → closed                 (rejected, timed out)
//
// addr_query and route_query are never seen: resolution is local and
// finishes inside the command.
type State uint8

const (
	StateIdle State = iota
	StateAddrBound
	StateAddrQuery
	StateAddrResolved
	StateRouteQuery
	StateRouteResolved
	StateListen
	StateReqSent
	StateReqRcvd
	StateRepSent
	StateRepRcvd
	StateEstablished
	StateDreqSent
	StateDreqRcvd
	StateTimewait
	StateClosed
)

var stateNames = [...]string{"idle", "addr_bound", "addr_query", "addr_resolved", "route_query",
	"route_resolved", "listen", "req_sent", "req_rcvd", "rep_sent", "rep_rcvd", "established",
	"dreq_sent", "dreq_rcvd", "timewait", "closed"}

func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// connected reports the states in which the peer holds a connection
// (a disconnect sends DREQ or DREP).
func (s State) connected() bool {
	return s == StateEstablished || s == StateDreqRcvd
}

// Route is the path of a connection, built locally as the kernel does on
// RoCE (no subnet administrator).
type Route struct {
	SGID, DGID     [16]byte
	HopLimit       uint8
	TrafficClass   uint8
	FlowLabel      uint32
	PathMTU        qp.MTU
	PacketLifeTime uint8
	PKey           uint16
	SL             uint8
	SLID, DLID     uint16
}

// ID is one rdma_cm_id. Every field is guarded by Agent.mu.
type ID struct {
	a     *Agent
	Num   uint32
	Owner uint32

	ps     PortSpace
	qpType qp.Type
	ch     *Channel
	// queued counts the events queued on a channel that are this id's to
	// read: its own, and the connect requests of a listener (the reader
	// counts records the same way); migratedAt is queued at the last
	// migrate, so the library knows how many records the old channel
	// still owes it (cm/CONTRACT.md, "migrate").
	queued, migratedAt uint64
	state              State
	destroyed          bool // a zombie: gone for its owner, still answering its peer

	src, dst     netip.AddrPort
	bound        bool
	reuseaddr    bool
	afonly       bool
	routeOK      bool
	route        Route
	tos          uint8
	tosSet       bool
	ackTimeout   uint8
	ackTimeoutOK bool

	// listening: the backlog, the half-open requests it holds (pending)
	// and how many of them each remote port sent
	backlog, pending int
	pendingBy        map[[16]byte]int
	// made by a connect request
	listener *ID
	// ListenID is the listener a connect request's id came from (0 for
	// others); it never changes.
	ListenID uint32
	// source is the port GID a connect request came from, when another
	// device's (Agent.bySource counts them).
	source       [16]byte
	remoteSource bool

	// the connection
	localComm, remoteComm uint32
	remoteKey             remoteKey
	hasRemoteKey          bool
	serviceID             uint64
	tid                   uint64
	peerGID               [16]byte // where MADs go
	qpNum, psn            uint32
	remoteQPN, remotePSN  uint32
	remoteQKey            uint32
	qkey                  uint32
	responderResources    uint8
	initiatorDepth        uint8
	flowControl           bool
	retryCount            uint8
	rnrRetryCount         uint8
	srq                   bool
	peerCMTimeout         uint8 // the peer's CM response timeout
	localAckTimeout       uint8

	// retransmission of the last request (REQ, REP, DREQ, SIDR_REQ)
	timer     clock.Timer
	timerGen  uint64
	tries     int
	retryMAD  [MADSize]byte
	retryWait time.Duration
	lastRTU   *[MADSize]byte // resent for a duplicate REP
	lastDREP  uint64         // TID of the DREP sent, for a duplicate DREQ
}

// State is the id's state now.
func (id *ID) State() State {
	id.a.mu.Lock()
	defer id.a.mu.Unlock()
	return id.state
}

// ChannelNum is the channel the id reports to.
func (id *ID) ChannelNum() uint32 {
	id.a.mu.Lock()
	defer id.a.mu.Unlock()
	return id.ch.Num
}

// halfOpen are the states in which an id a connect request made holds
// a place in its listener's backlog: not answered yet, or answered and
// waiting for the peer's RTU (what a peer that forges its requests can
// keep an id in).
func halfOpen(s State) bool { return s == StateReqRcvd || s == StateRepSent }

// setStateLocked moves id to s, keeping its listener's count of
// half-open requests (pending).
func (id *ID) setStateLocked(s State) {
	if l := id.listener; l != nil && halfOpen(id.state) && !halfOpen(s) {
		l.pending--
		if id.remoteSource {
			if l.pendingBy[id.source]--; l.pendingBy[id.source] <= 0 {
				delete(l.pendingBy, id.source)
			}
		}
	}
	id.state = s
}

// emitLocked queues an event for the id's owner (none for a zombie).
func (id *ID) emitLocked(e Event) {
	if id.destroyed {
		return
	}
	e.ID = id.Num
	if !id.ch.push(e) {
		return
	}
	if e.Name == EvConnectRequest && id.listener != nil {
		id.listener.queued++
	} else {
		id.queued++
	}
}

func (id *ID) event(name string, status int) Event {
	return Event{Name: name, ID: id.Num, Status: status}
}

// --- timers --------------------------------------------------------------

// armLocked starts the id's one timer; a timer already running is
// replaced (a callback of an old one sees another generation and does
// nothing).
func (id *ID) armLocked(d time.Duration, f func()) {
	id.stopTimerLocked()
	gen := id.timerGen
	a := id.a
	id.timer = a.clock.AfterFunc(d, func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		if id.timerGen != gen || a.closed {
			return
		}
		id.timer = nil
		f()
	})
}

func (id *ID) stopTimerLocked() {
	id.timerGen++
	if id.timer != nil {
		id.timer.Stop()
		id.timer = nil
	}
}

// The device's bounds on the times a peer's REQ (or an application's
// ack_timeout) asks for: the kernel's cm.c takes the REQ's packet life
// time and CM response timeout as they come, up to 2^23 ms (2.3 h) each,
// so one forged REQ kept an accepted id retrying its REP for about 75
// hours. Here a try waits at most 2 * 2^(20-8) ms + 2^(22-8) ms, about
// 25 s, the 16 sends about 6.7 minutes; the timewait at most 2^(21-8) ms
// (8.4 s); an MRA's service timeout at most the 67 s rdma_cm asks for
// itself. Real peers ask 18 and 20 (rdma_cm on RoCE): 6.1 s a try, as before.
const (
	maxLifeTime       = 20
	maxPeerCMTimeout  = 22
	maxServiceTimeout = mraServiceTimeout
)

// lifeTime is the route's packet life time within the device's bound.
func (id *ID) lifeTime() uint8 { return min(id.route.PacketLifeTime, maxLifeTime) }

// requestTimeout is how long a REQ, REP or DREQ waits for its answer:
// twice the packet life time plus the peer's CM response time.
func (id *ID) requestTimeout() time.Duration {
	return 2*ibTime(id.lifeTime()) + ibTime(min(id.peerCMTimeout, maxPeerCMTimeout))
}

// timewait is how long a closed connection's comm IDs stay reserved
// (stray packets of the old connection die out).
func (id *ID) timewait() time.Duration { return ibTime(id.lifeTime() + 1) }

// sendRequestLocked sends a request MAD and retries it until answered,
// maxCMRetries times; then expire runs.
func (id *ID) sendRequestLocked(m Msg, tid uint64, wait time.Duration, expire func()) {
	id.retryMAD = Encode(tid, m)
	id.tries = 0
	id.retryWait = wait
	id.a.sendRawLocked(id.peerGID, id.retryMAD)
	id.armRetryLocked(expire)
}

func (id *ID) armRetryLocked(expire func()) {
	id.armLocked(id.retryWait, func() {
		if id.tries >= maxCMRetries {
			id.a.Counters.Timeouts.Add(1)
			expire()
			return
		}
		id.tries++
		id.a.Counters.Retries.Add(1)
		id.a.sendRawLocked(id.peerGID, id.retryMAD)
		id.armRetryLocked(expire)
	})
}

// enterTimewaitLocked holds the connection's comm IDs for the timewait,
// then reports timewait_exit and closes (a zombie then goes for good).
func (id *ID) enterTimewaitLocked() {
	id.setStateLocked(StateTimewait)
	id.armLocked(id.timewait(), func() {
		id.setStateLocked(StateClosed)
		id.emitLocked(id.event(EvTimewaitExit, 0))
		id.a.forgetCommLocked(id)
	})
}

// closeLocked ends a connection attempt (rejected, timed out).
func (id *ID) closeLocked() {
	id.stopTimerLocked()
	id.setStateLocked(StateClosed)
	id.a.forgetCommLocked(id)
}

// forgetCommLocked drops the id's comm IDs from the tables (and a zombie
// altogether).
func (a *Agent) forgetCommLocked(id *ID) {
	if id.localComm != 0 && a.byComm[id.localComm] == id {
		delete(a.byComm, id.localComm)
	}
	if id.hasRemoteKey && a.byRemote[id.remoteKey] == id {
		delete(a.byRemote, id.remoteKey)
	}
	if id.destroyed {
		for i, z := range a.zombies {
			if z == id {
				a.zombies = append(a.zombies[:i], a.zombies[i+1:]...)
				break
			}
		}
	}
}

// --- destroy -------------------------------------------------------------

// Destroy is rdma_destroy_id: a pending or answered request is rejected,
// a connection disconnected, a listener removed, the port released. It
// never waits for the peer.
func (id *ID) Destroy() error {
	a := id.a
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.ids[id.Num] != id {
		return nil
	}
	a.destroyLocked(id)
	return nil
}

func (a *Agent) destroyLocked(id *ID) {
	delete(a.ids, id.Num)
	a.perUser[id.Owner]--
	if a.perUser[id.Owner] <= 0 {
		delete(a.perUser, id.Owner)
	}
	id.ch.ids--
	if id.listener != nil {
		a.requestIDs--
	}
	if id.remoteSource {
		if a.bySource[id.source]--; a.bySource[id.source] <= 0 {
			delete(a.bySource, id.source)
		}
	}
	a.unbindLocked(id)
	if id.state == StateListen {
		a.unlistenLocked(id)
	}
	id.destroyed = true
	linger := false
	switch id.state {
	case StateReqSent:
		if id.qpType == qp.TypeRC {
			// As the kernel: the requester gives up with a timeout REJ
			// that names its CA GUID.
			rej := &REJ{LocalCommID: id.localComm, RemoteCommID: id.remoteComm, MessageRejected: MsgOther, Reason: RejTimeout, ARILength: 8}
			be.PutUint64(rej.ARI[:], a.cfg.NodeGUID)
			a.sendLocked(id.peerGID, id.tid, rej)
		}
	case StateReqRcvd:
		if id.qpType == qp.TypeUD {
			a.sendLocked(id.peerGID, id.tid, &SIDRRep{RequestID: id.remoteComm, Status: SIDRReject, ServiceID: id.serviceID})
		} else {
			a.sendLocked(id.peerGID, id.tid, &REJ{LocalCommID: id.localComm, RemoteCommID: id.remoteComm,
				MessageRejected: MsgREQ, Reason: RejConsumerDefined})
		}
	case StateRepSent, StateRepRcvd:
		msg := uint8(MsgREP)
		if id.state == StateRepSent {
			msg = MsgOther
		}
		a.sendLocked(id.peerGID, id.tid, &REJ{LocalCommID: id.localComm, RemoteCommID: id.remoteComm,
			MessageRejected: msg, Reason: RejConsumerDefined})
	case StateEstablished:
		if id.qpType == qp.TypeRC {
			a.sendLocked(id.peerGID, a.nextTIDLocked(), &DREQ{LocalCommID: id.localComm, RemoteCommID: id.remoteComm, RemoteQPN: id.remoteQPN})
			linger = true
		}
	case StateDreqRcvd:
		a.sendLocked(id.peerGID, id.tid, &DREP{LocalCommID: id.localComm, RemoteCommID: id.remoteComm})
		linger = true
	case StateDreqSent, StateTimewait:
		linger = true
	}
	id.stopTimerLocked()
	if !linger {
		id.setStateLocked(StateClosed) // keeps the listener's pending count
		a.forgetCommLocked(id)
		return
	}
	// The comm IDs stay reserved for the timewait, so the peer's retries
	// and stray MADs still find their connection (a DREP for the DREQ, a
	// stale REQ its REJ), as the kernel's CM keeps a destroyed id.
	if len(a.zombies) >= a.cfg.MaxIDs {
		old := a.zombies[0]
		old.stopTimerLocked()
		a.forgetCommLocked(old)
	}
	a.zombies = append(a.zombies, id)
	id.enterTimewaitLocked()
}

func (a *Agent) unlistenLocked(id *ID) {
	l := a.listeners[id.serviceID]
	for i, o := range l {
		if o == id {
			l = append(l[:i], l[i+1:]...)
			break
		}
	}
	if len(l) == 0 {
		delete(a.listeners, id.serviceID)
	} else {
		a.listeners[id.serviceID] = l
	}
}

// --- attr ----------------------------------------------------------------

// Attr is cm/I/attr: key=value lines; what is not known yet is absent.
func (id *ID) Attr() string {
	a := id.a
	a.mu.Lock()
	defer a.mu.Unlock()
	var b strings.Builder
	kv := func(k string, v any) { fmt.Fprintf(&b, "%s=%v\n", k, v) }
	kv(qp.KeyState, id.state)
	kv(KeyPs, id.ps)
	kv(qp.KeyQPType, id.qpType)
	kv(KeyChannel, id.ch.Num)
	kv(KeyEventsQueued, id.queued)
	kv(KeyMigratedAfter, id.migratedAt)
	if id.bound || id.src.Addr().IsValid() {
		kv(KeySrcAddr, id.src.Addr())
		kv(KeySrcPort, id.src.Port())
	}
	if id.dst.Addr().IsValid() {
		kv(KeyDstAddr, id.dst.Addr())
		kv(KeyDstPort, id.dst.Port())
	}
	if id.ListenID != 0 {
		kv(KeyListenID, id.ListenID)
	}
	if id.state == StateListen {
		kv(KeyBacklog, id.backlog)
		kv(qp.KeyPending, id.pending)
	}
	if id.routeOK {
		r := &id.route
		kv(KeySGID, qp.FormatGID(r.SGID))
		kv(qp.KeyDGID, qp.FormatGID(r.DGID))
		kv(KeySLID, r.SLID)
		kv(qp.KeyDLID, r.DLID)
		kv(qp.KeyHopLimit, r.HopLimit)
		kv(qp.KeyTrafficClass, r.TrafficClass)
		kv(qp.KeyFlowLabel, r.FlowLabel)
		kv(qp.KeyPathMTU, r.PathMTU.Bytes())
		kv(KeyPacketLifeTime, r.PacketLifeTime)
		kv(KeyPKey, fmt.Sprintf("0x%04x", r.PKey))
		kv(qp.KeySL, r.SL)
	}
	kv(KeyTOS, id.tos)
	if id.ackTimeoutOK {
		kv(KeyAckTimeout, id.ackTimeout)
	}
	if id.localComm != 0 {
		kv(KeyLocalCommID, id.localComm)
	}
	if id.remoteComm != 0 {
		kv(KeyRemoteCommID, id.remoteComm)
	}
	if id.serviceID != 0 {
		kv(KeyServiceID, fmt.Sprintf("0x%016x", id.serviceID))
	}
	if id.state >= StateReqSent && id.state != StateListen {
		if id.qpNum != 0 {
			kv(qp.KeyQPNum, id.qpNum)
			kv(KeyPSN, id.psn)
		}
		if id.remoteQPN != 0 {
			kv(KeyRemoteQPNum, id.remoteQPN)
			kv(KeyRemotePSN, id.remotePSN)
		}
		if id.remoteQKey != 0 {
			kv(KeyRemoteQKey, id.remoteQKey)
		}
		kv(KeyResponderResources, id.responderResources)
		kv(KeyInitiatorDepth, id.initiatorDepth)
		kv(KeyFlowControl, boolNum(id.flowControl))
		kv(KeyRetryCount, id.retryCount)
		kv(KeyRNRRetryCount, id.rnrRetryCount)
		kv(qp.KeySRQ, boolNum(id.srq))
		kv(KeyLocalAckTimeout, id.localAckTimeout)
	}
	return b.String()
}

func boolNum(b bool) int {
	if b {
		return 1
	}
	return 0
}

// opError is a failed command: EINVAL unless said otherwise.
func opError(op string, errno syscall.Errno, format string, args ...any) error {
	return cmErr(op, errno, format, args...)
}
