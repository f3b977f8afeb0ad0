package cm

import (
	"encoding/hex"
	"net/netip"

	"rdmafs/qp"
)

// HandleMAD takes one MAD received on QP1 from the port with GID sgid.
// Whatever the bytes, it answers as the IB CM does or drops and counts;
// it never panics and never grows a table beyond its bound.
func (a *Agent) HandleMAD(sgid [16]byte, mad []byte) {
	h, m, err := Decode(mad)
	if err != nil {
		a.Counters.DroppedMalformed.Add(1)
		return
	}
	a.Counters.recv[h.AttrID].Add(1)
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return
	}
	switch m := m.(type) {
	case *REQ:
		a.onREQ(sgid, h.TID, m)
	case *MRA:
		a.onMRA(m)
	case *REJ:
		a.onREJ(m)
	case *REP:
		a.onREP(m)
	case *RTU:
		a.onRTU(m)
	case *DREQ:
		a.onDREQ(sgid, h.TID, m)
	case *DREP:
		a.onDREP(m)
	case *SIDRReq:
		a.onSIDRReq(sgid, h.TID, m)
	case *SIDRRep:
		a.onSIDRRep(m)
	}
}

// connID finds the id a MAD of a connection names: its remote comm ID
// field is our local one, and once we know the peer's, its local comm ID
// must be that.
func (a *Agent) connID(ours, theirs uint32) *ID {
	id := a.byComm[ours]
	if id == nil || ours == 0 {
		a.Counters.DroppedUnknown.Add(1)
		return nil
	}
	if id.remoteComm != 0 && theirs != 0 && id.remoteComm != theirs {
		a.Counters.DroppedUnknown.Add(1) // a stale MAD of another connection
		return nil
	}
	return id
}

func hexPrivate(b []byte) string { return hex.EncodeToString(b) }

func (a *Agent) onREQ(sgid [16]byte, tid uint64, m *REQ) {
	var guid [16]byte
	be.PutUint64(guid[:], m.LocalCAGUID)
	key := remoteKey{commID: m.LocalCommID, node: guid}
	if id := a.byRemote[key]; id != nil {
		// A retry of a REQ already taken: an MRA while the application
		// decides (the first one too: none went out with the REQ), a REJ for a connection in timewait, else
		// nothing (our answer's own retries cover it).
		a.Counters.DroppedDuplicate.Add(1)
		switch id.state {
		case StateReqRcvd:
			a.sendLocked(id.peerGID, id.tid, &MRA{LocalCommID: id.localComm, RemoteCommID: id.remoteComm,
				MessageMRAed: MsgREQ, ServiceTimeout: mraServiceTimeout})
		case StateTimewait, StateClosed:
			a.Counters.RejectedStale.Add(1)
			a.sendLocked(sgid, tid, &REJ{LocalCommID: id.localComm, RemoteCommID: m.LocalCommID,
				MessageRejected: MsgREQ, Reason: RejStaleConn})
		}
		return
	}
	ps, port, hdr, l := a.requestListener(m.ServiceID, m.PrivateData[:])
	if l == nil {
		a.Counters.RejectedNoListener.Add(1)
		a.rejectLocked(sgid, tid, m.LocalCommID, MsgREQ, RejInvalidServiceID)
		return
	}
	if l.qpType != qp.TypeRC || m.TransportType != 0 {
		a.rejectLocked(sgid, tid, m.LocalCommID, MsgREQ, RejInvalidTransport)
		return
	}
	if !a.admitRequestLocked(l, sgid) {
		a.rejectLocked(sgid, tid, m.LocalCommID, MsgREQ, RejNoResources)
		return
	}
	id := a.requestIDLocked(l, qp.TypeRC, ps, port, hdr, m.ServiceID, tid, sgid, key)
	id.localComm = a.newCommIDLocked()
	a.byComm[id.localComm] = id
	id.remoteQPN, id.remotePSN = m.LocalQPN, m.StartingPSN
	// As the kernel reports them to the passive side: what the peer can
	// take is what this side may issue, and the other way round.
	id.responderResources, id.initiatorDepth = m.InitiatorDepth, m.ResponderResources
	id.flowControl, id.srq = m.FlowControl, m.SRQ
	id.retryCount, id.rnrRetryCount = m.RetryCount, m.RNRRetryCount
	id.peerCMTimeout = m.RemoteCMResponseTimeout
	id.localAckTimeout = m.Primary.LocalACKTimeout
	plt := m.Primary.LocalACKTimeout
	if plt > 0 {
		plt--
	}
	mtu := qp.MTU(m.PathMTU)
	if !mtu.Valid() || mtu > a.cfg.ActiveMTU {
		mtu = a.cfg.ActiveMTU
	}
	id.route = Route{SGID: a.cfg.GID, DGID: m.Primary.LocalGID, HopLimit: m.Primary.HopLimit,
		TrafficClass: m.Primary.TrafficClass, FlowLabel: m.Primary.FlowLabel, PathMTU: mtu,
		PacketLifeTime: plt, PKey: m.PKey, SL: m.Primary.SL,
		SLID: m.Primary.RemoteLID, DLID: m.Primary.LocalLID}
	id.routeOK = true
	if a.cfg.NewID != nil {
		a.cfg.NewID(id)
	}
	// The application answers in its own time. Like the kernel's rdma_cm
	// (cma.c: CMA_CM_MRA_SETTING is IB_CM_MRA_FLAG_DELAY | 24, so cm.c
	// only marks the id MRA_REQ_SENT), no MRA goes out now: only a retry
	// of this REQ, which finds the id still in req_rcvd above, gets one,
	// so a prompt accept costs three MADs, not four.
	e := id.event(EvConnectRequest, 0)
	e.add(KeyListenID, l.Num)
	id.connKV(&e, m.LocalQPN)
	id.addrKV(&e)
	e.add(KeyPrivateData, hexPrivate(m.PrivateData[CMAHdrLen:]))
	id.emitLocked(e)
}

// admitRequestLocked reports whether listener l may take one more request
// from the port at sgid: its backlog (requests not answered, or answered
// and not yet confirmed by the peer's RTU), its owner's share of ids, the
// sender's share (a remote port may hold UserShare percent of the ids, as
// a user may), the device's room for requests (they never take the last
// eighth of the ids, which stays for ids the users make), and its
// channel's backlog; a refusal is counted.
func (a *Agent) admitRequestLocked(l *ID, sgid [16]byte) bool {
	remote := sgid != a.cfg.GID
	switch {
	case l.pending >= l.backlog:
		a.Counters.RejectedBacklog.Add(1)
	case a.admitLocked("connect_request", l.Owner) != nil:
		a.Counters.RejectedNoResources.Add(1)
	case remote && (a.bySource[sgid] >= a.userShare(a.cfg.MaxIDs) || l.pendingBy[sgid] >= l.backlog-l.backlog/4):
		// One remote port may not fill the device, nor more than
		// three quarters of a listener's backlog, so others still get
		// through while it floods. Requests from this device itself are its users'
		// connects, each bounded by its user's own share.
		a.Counters.RejectedSource.Add(1)
		a.Counters.RejectedNoResources.Add(1)
	case a.requestIDs >= a.cfg.MaxIDs-a.cfg.MaxIDs/8:
		a.Counters.RejectedNoResources.Add(1)
	case !l.ch.room():
		a.Counters.RejectedNoResources.Add(1)
		l.ch.dropped.Add(1)
	default:
		return true
	}
	return false
}

// requestIDLocked makes the id of a request for listener l from the peer
// at sgid, whose comm ID (REQ) or request ID (SIDR) is key.commID.
func (a *Agent) requestIDLocked(l *ID, t qp.Type, ps PortSpace, port uint16, hdr CMAHdr, sid, tid uint64, sgid [16]byte, key remoteKey) *ID {
	id := a.newIDLocked(l.Owner, l.ch, ps, t)
	id.listener, id.ListenID = l, l.Num
	id.src = netip.AddrPortFrom(hdr.Dst.Addr(), port)
	id.dst = hdr.Src
	id.serviceID = sid
	id.tid = tid
	id.peerGID = sgid
	id.remoteComm = key.commID
	id.remoteKey, id.hasRemoteKey = key, true
	a.byRemote[key] = id
	a.requestIDs++
	if sgid != a.cfg.GID {
		id.source, id.remoteSource = sgid, true
		a.bySource[sgid]++
		l.pendingBy[sgid]++
	}
	id.state = StateReqRcvd
	l.pending++
	return id
}

// requestListener finds the listener a REQ or SIDR_REQ is for, from its
// service ID and the destination in its address header; l is nil when
// there is none (or the request is not rdma_cm's).
func (a *Agent) requestListener(sid uint64, private []byte) (ps PortSpace, port uint16, hdr CMAHdr, l *ID) {
	ps, port, ok := SplitServiceID(sid)
	if !ok {
		return
	}
	hdr, err := ParseCMAHdr(private, port)
	if err != nil {
		return
	}
	return ps, port, hdr, a.listenerFor(sid, hdr.Dst.Addr())
}

func (id *ID) connKV(e *Event, qpn uint32) {
	e.add(KeyResponderResources, id.responderResources)
	e.add(KeyInitiatorDepth, id.initiatorDepth)
	e.add(KeyFlowControl, boolNum(id.flowControl))
	e.add(KeyRetryCount, id.retryCount)
	e.add(KeyRNRRetryCount, id.rnrRetryCount)
	e.add(qp.KeySRQ, boolNum(id.srq))
	e.add(qp.KeyQPNum, qpn)
}

func (a *Agent) onMRA(m *MRA) {
	id := a.connID(m.RemoteCommID, m.LocalCommID)
	if id == nil {
		return
	}
	switch {
	case id.state == StateReqSent && m.MessageMRAed == MsgREQ && id.qpType == qp.TypeRC,
		id.state == StateRepSent && m.MessageMRAed == MsgREP:
		if id.remoteComm == 0 {
			id.remoteComm = m.LocalCommID
		}
		// The peer is alive and busy: wait its service time before the
		// next retry (the retries left stay as they were).
		id.retryWait = 2*ibTime(id.lifeTime()) + ibTime(min(m.ServiceTimeout, maxServiceTimeout))
		expire := func() {
			id.closeLocked()
			id.emitLocked(id.event(EvUnreachable, StatusTimedOut))
		}
		id.armRetryLocked(expire)
	default:
		a.Counters.DroppedState.Add(1)
	}
}

func (a *Agent) onREJ(m *REJ) {
	var id *ID
	if m.RemoteCommID != 0 {
		id = a.byComm[m.RemoteCommID]
	} else if m.Reason == RejTimeout && m.ARILength >= 8 {
		// A requester that gave up before it knew our comm ID names
		// itself: its comm ID and, in the ARI, its CA GUID.
		var guid [16]byte
		copy(guid[:8], m.ARI[:8])
		id = a.byRemote[remoteKey{commID: m.LocalCommID, node: guid}]
	}
	if id == nil {
		a.Counters.DroppedUnknown.Add(1)
		return
	}
	switch id.state {
	case StateReqSent, StateRepRcvd, StateReqRcvd, StateRepSent:
	default:
		a.Counters.DroppedState.Add(1)
		return
	}
	if id.remoteComm != 0 && m.LocalCommID != 0 && id.remoteComm != m.LocalCommID {
		a.Counters.DroppedUnknown.Add(1)
		return
	}
	id.closeLocked()
	e := id.event(EvRejected, int(m.Reason))
	e.add(KeyPrivateData, hexPrivate(m.PrivateData[:]))
	id.emitLocked(e)
}

func (a *Agent) onREP(m *REP) {
	id := a.connID(m.RemoteCommID, m.LocalCommID)
	if id == nil {
		return
	}
	switch id.state {
	case StateReqSent:
		if id.qpType != qp.TypeRC {
			a.Counters.DroppedState.Add(1)
			return
		}
	case StateRepRcvd:
		a.Counters.DroppedDuplicate.Add(1)
		return
	case StateEstablished:
		// Our RTU was lost: send it again.
		a.Counters.DroppedDuplicate.Add(1)
		if id.lastRTU != nil {
			a.sendRawLocked(id.peerGID, *id.lastRTU)
		}
		return
	default:
		a.Counters.DroppedState.Add(1)
		return
	}
	id.stopTimerLocked()
	id.remoteComm = m.LocalCommID
	var guid [16]byte
	be.PutUint64(guid[:], m.LocalCAGUID)
	id.remoteKey, id.hasRemoteKey = remoteKey{commID: m.LocalCommID, node: guid}, true
	if a.byRemote[id.remoteKey] == nil {
		a.byRemote[id.remoteKey] = id
	}
	id.remoteQPN, id.remotePSN = m.LocalQPN, m.StartingPSN
	id.responderResources, id.initiatorDepth = m.InitiatorDepth, m.ResponderResources
	id.flowControl, id.srq, id.rnrRetryCount = m.FlowControl, m.SRQ, m.RNRRetryCount
	id.state = StateRepRcvd
	e := id.event(EvConnectResponse, 0)
	id.connKV(&e, m.LocalQPN)
	e.add(KeyPrivateData, hexPrivate(m.PrivateData[:]))
	id.emitLocked(e)
}

func (a *Agent) onRTU(m *RTU) {
	id := a.connID(m.RemoteCommID, m.LocalCommID)
	if id == nil {
		return
	}
	if id.state != StateRepSent {
		if id.state == StateEstablished {
			a.Counters.DroppedDuplicate.Add(1)
		} else {
			a.Counters.DroppedState.Add(1)
		}
		return
	}
	id.stopTimerLocked()
	id.setStateLocked(StateEstablished)
	id.emitLocked(id.event(EvEstablished, 0))
}

func (a *Agent) onDREQ(sgid [16]byte, tid uint64, m *DREQ) {
	id := a.byComm[m.RemoteCommID]
	if id == nil || m.RemoteCommID == 0 || (id.remoteComm != 0 && id.remoteComm != m.LocalCommID) {
		// No such connection (any more): answer so the peer can finish.
		a.Counters.DroppedUnknown.Add(1)
		a.sendLocked(sgid, tid, &DREP{LocalCommID: m.RemoteCommID, RemoteCommID: m.LocalCommID})
		return
	}
	if m.RemoteQPN != id.qpNum && id.qpNum != 0 {
		// Not for the QP of this connection: dropped, as the kernel's CM
		// drops it.
		a.Counters.DroppedUnknown.Add(1)
		return
	}
	switch id.state {
	case StateEstablished, StateRepSent, StateRepRcvd:
		id.stopTimerLocked()
		id.lastDREP = tid
		id.setStateLocked(StateDreqRcvd)
		if id.destroyed {
			a.sendLocked(id.peerGID, tid, &DREP{LocalCommID: id.localComm, RemoteCommID: id.remoteComm})
			id.enterTimewaitLocked()
			return
		}
		id.emitLocked(id.event(EvDisconnected, 0))
	case StateDreqSent:
		// Both ends disconnect at once: each answers the other's DREQ.
		id.lastDREP = tid
		a.sendLocked(id.peerGID, tid, &DREP{LocalCommID: id.localComm, RemoteCommID: id.remoteComm})
		id.emitLocked(id.event(EvDisconnected, 0))
		id.enterTimewaitLocked()
	case StateTimewait:
		// Our DREP was lost.
		a.Counters.DroppedDuplicate.Add(1)
		a.sendLocked(id.peerGID, tid, &DREP{LocalCommID: id.localComm, RemoteCommID: id.remoteComm})
	case StateDreqRcvd:
		a.Counters.DroppedDuplicate.Add(1)
	default:
		a.Counters.DroppedState.Add(1)
	}
}

func (a *Agent) onDREP(m *DREP) {
	id := a.connID(m.RemoteCommID, m.LocalCommID)
	if id == nil {
		return
	}
	if id.state != StateDreqSent {
		a.Counters.DroppedDuplicate.Add(1)
		return
	}
	id.stopTimerLocked()
	id.emitLocked(id.event(EvDisconnected, 0))
	id.enterTimewaitLocked()
}

func (a *Agent) onSIDRReq(sgid [16]byte, tid uint64, m *SIDRReq) {
	key := remoteKey{commID: m.RequestID, node: sgid}
	if a.byRemote[key] != nil {
		a.Counters.DroppedDuplicate.Add(1)
		return
	}
	ps, port, hdr, l := a.requestListener(m.ServiceID, m.PrivateData[:])
	if l == nil || l.qpType != qp.TypeUD {
		a.Counters.RejectedNoListener.Add(1)
		a.sendLocked(sgid, tid, &SIDRRep{RequestID: m.RequestID, Status: SIDRUnsupported, ServiceID: m.ServiceID})
		return
	}
	if !a.admitRequestLocked(l, sgid) {
		a.sendLocked(sgid, tid, &SIDRRep{RequestID: m.RequestID, Status: SIDRReject, ServiceID: m.ServiceID})
		return
	}
	id := a.requestIDLocked(l, qp.TypeUD, ps, port, hdr, m.ServiceID, tid, sgid, key)
	id.route = Route{SGID: a.cfg.GID, DGID: sgid, HopLimit: 1, PathMTU: a.cfg.ActiveMTU,
		PacketLifeTime: roceLifeTime, PKey: m.PKey}
	if sgid != a.cfg.GID {
		id.route.HopLimit = 64
	}
	id.routeOK = true
	if a.cfg.NewID != nil {
		a.cfg.NewID(id)
	}
	e := id.event(EvConnectRequest, 0)
	e.add(KeyListenID, l.Num)
	id.addrKV(&e)
	e.add(KeyPrivateData, hexPrivate(m.PrivateData[CMAHdrLen:]))
	id.emitLocked(e)
}

func (a *Agent) onSIDRRep(m *SIDRRep) {
	id := a.byComm[m.RequestID]
	if id == nil || m.RequestID == 0 {
		a.Counters.DroppedUnknown.Add(1)
		return
	}
	if id.state != StateReqSent || id.qpType != qp.TypeUD {
		a.Counters.DroppedDuplicate.Add(1)
		return
	}
	id.stopTimerLocked()
	if m.Status != SIDRSuccess {
		id.closeLocked()
		// As the kernel: a refused SIDR is "unreachable" with the status.
		e := id.event(EvUnreachable, int(m.Status))
		e.add(KeyPrivateData, hexPrivate(m.PrivateData[:]))
		id.emitLocked(e)
		return
	}
	id.remoteQPN, id.remoteQKey = m.QPN, m.QKey
	id.state = StateEstablished
	a.forgetCommLocked(id) // SIDR is one exchange; later SIDR_REPs are strays
	e := id.event(EvEstablished, 0)
	e.add(qp.KeyQPNum, m.QPN)
	e.add(qp.KeyQKey, m.QKey)
	id.addrKV(&e)
	e.add(KeyPrivateData, hexPrivate(m.PrivateData[:]))
	id.emitLocked(e)
}
