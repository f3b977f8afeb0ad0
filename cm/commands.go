package cm

import (
	"encoding/hex"
	"net/netip"
	"strconv"
	"strings"
	"syscall"

	"rdmafs/qp"
)

// The commands of cm/I/ctl, one a write: a word and key=value tokens. A
// command that fails changes nothing and says why.

// args are a command's key=value tokens.
type args struct {
	op string
	m  map[string]string
}

func parseArgs(op, rest string, allowed ...string) (args, error) {
	a := args{op: op, m: map[string]string{}}
	for _, tok := range strings.Fields(rest) {
		k, v, ok := strings.Cut(tok, "=")
		if !ok {
			return a, opError(op, syscall.EINVAL, "%q is not a key=value token", clip(tok))
		}
		known := false
		for _, x := range allowed {
			known = known || x == k
		}
		if !known {
			return a, opError(op, syscall.EINVAL, "unknown key %q (want %s)", clip(k), strings.Join(allowed, ", "))
		}
		if _, dup := a.m[k]; dup {
			return a, opError(op, syscall.EINVAL, "%s given twice", k)
		}
		a.m[k] = v
	}
	return a, nil
}

func (a args) has(k string) bool { _, ok := a.m[k]; return ok }

// num reads key k as an unsigned number of at most max (decimal or 0x
// hex), def when absent.
func (a args) num(k string, max uint64, def uint64) (uint64, error) {
	v, ok := a.m[k]
	if !ok {
		return def, nil
	}
	digits, base := v, 10
	if len(v) > 2 && (v[:2] == "0x" || v[:2] == "0X") {
		digits, base = v[2:], 16
	}
	n, err := strconv.ParseUint(digits, base, 64)
	if err != nil || n > max {
		return 0, opError(a.op, syscall.EINVAL, "%s=%q: want a number 0..%d", k, clip(v), max)
	}
	return n, nil
}

func (a args) flag(k string, def bool) (bool, error) {
	n, err := a.num(k, 1, uint64(boolNum(def)))
	return n == 1, err
}

func (a args) addr(k string) (netip.Addr, bool, error) {
	v, ok := a.m[k]
	if !ok {
		return netip.Addr{}, false, nil
	}
	x, err := netip.ParseAddr(strings.Trim(v, "[]"))
	if err != nil || x.Zone() != "" {
		return netip.Addr{}, true, opError(a.op, syscall.EINVAL, "%s=%q is not an IPv4 or IPv6 address", k, clip(v))
	}
	return x.Unmap(), true, nil
}

// private reads private_data=HEX of at most max bytes.
func (a args) private(max int) ([]byte, error) {
	v, ok := a.m[KeyPrivateData]
	if !ok {
		return nil, nil
	}
	b, err := hex.DecodeString(v)
	if err != nil {
		return nil, opError(a.op, syscall.EINVAL, "private_data is not hex: %v", err)
	}
	if len(b) > max {
		return nil, opError(a.op, syscall.EINVAL, "private_data of %d bytes exceeds the %d this message carries", len(b), max)
	}
	return b, nil
}

func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// Caps are the capabilities of the process behind a command that the
// kernel's rdma_cm checks: CAP_NET_BIND_SERVICE for a port below 1024.
type Caps struct {
	NetBindService bool
}

// Do runs one ctl command with every capability (the daemon's own
// callers and tests; fsnode passes the writer's with DoAs).
func (id *ID) Do(text string) error { return id.DoAs(text, Caps{NetBindService: true}) }

// DoAs runs one ctl command for a process with capabilities caps.
func (id *ID) DoAs(text string, caps Caps) error {
	cmd, rest, _ := strings.Cut(strings.TrimSpace(text), " ")
	rest = strings.TrimSpace(rest)
	a := id.a
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.ids[id.Num] != id {
		return opError(cmd, syscall.ENOENT, "id %d is destroyed", id.Num)
	}
	switch cmd {
	case "bind":
		return id.bindCmd(rest, caps)
	case "resolve_addr":
		return id.resolveAddrCmd(rest)
	case "resolve_route":
		return id.resolveRouteCmd(rest)
	case "listen":
		return id.listenCmd(rest)
	case "connect":
		return id.connectCmd(rest)
	case "establish":
		return id.establishCmd(rest)
	case "accept":
		return id.acceptCmd(rest)
	case "reject":
		return id.rejectCmd(rest)
	case "disconnect":
		return id.disconnectCmd(rest)
	case "notify":
		return id.notifyCmd(rest)
	case "set_option":
		return id.setOptionCmd(rest)
	case "migrate":
		return id.migrateCmd(rest)
	case "":
		return opError("cm", syscall.EINVAL, "empty command")
	}
	return opError("cm", syscall.EINVAL, "unknown command %q (want bind, resolve_addr, resolve_route, listen, connect, establish, accept, reject, disconnect, notify, set_option or migrate)", clip(cmd))
}

func (id *ID) wrongState(op string, errno syscall.Errno, want string) error {
	return opError(op, errno, "id %d is %s (want %s)", id.Num, id.state, want)
}

// privilegedPorts are the ports below 1024 (the kernel's PROT_SOCK):
// binding one needs CAP_NET_BIND_SERVICE, in rdma_cm as for sockets.
const privilegedPorts = 1024

func (id *ID) bindCmd(rest string, caps Caps) error {
	const op = "bind_addr"
	ar, err := parseArgs(op, rest, qp.KeyAddr, qp.KeyPort)
	if err != nil {
		return err
	}
	if id.state != StateIdle {
		return id.wrongState(op, syscall.EINVAL, "idle")
	}
	x, ok, err := ar.addr(qp.KeyAddr)
	if err != nil {
		return err
	}
	if !ok {
		return opError(op, syscall.EINVAL, "addr=A is required")
	}
	port, err := ar.num(qp.KeyPort, 65535, 0)
	if err != nil {
		return err
	}
	if port != 0 && port < privilegedPorts && !caps.NetBindService {
		return opError(op, syscall.EACCES, "port %d is below %d: binding it needs CAP_NET_BIND_SERVICE", port, privilegedPorts)
	}
	if err := id.a.bindLocked(id, x, uint16(port)); err != nil {
		return err
	}
	id.state = StateAddrBound
	return nil
}

func (id *ID) resolveAddrCmd(rest string) error {
	const op = "resolve_addr"
	ar, err := parseArgs(op, rest, KeyDst, qp.KeyPort, KeySrc, KeyTimeoutMS)
	if err != nil {
		return err
	}
	if id.state != StateIdle && id.state != StateAddrBound && id.state != StateAddrResolved {
		return id.wrongState(op, syscall.EINVAL, "idle, addr_bound or addr_resolved")
	}
	dst, ok, err := ar.addr(KeyDst)
	if err != nil {
		return err
	}
	if !ok || dst.IsUnspecified() {
		return opError(op, syscall.EINVAL, "dst=A (an address) is required")
	}
	port, err := ar.num(qp.KeyPort, 65535, 0)
	if err != nil {
		return err
	}
	if _, err := ar.num(KeyTimeoutMS, 1<<31-1, 0); err != nil {
		return err
	}
	src, hasSrc, err := ar.addr(KeySrc)
	if err != nil {
		return err
	}
	a := id.a
	if hasSrc && id.bound && !id.src.Addr().IsUnspecified() && id.src.Addr() != src {
		return opError(op, syscall.EINVAL, "id %d is bound to %s, not %s", id.Num, id.src.Addr(), src)
	}
	if !id.bound {
		if !hasSrc {
			src, ok = a.srcFor(dst)
			if !ok {
				src = netip.IPv4Unspecified()
				if !dst.Is4() {
					src = netip.IPv6Unspecified()
				}
			}
		}
		if err := a.bindLocked(id, src, 0); err != nil {
			return err
		}
	}
	// A wildcard-bound id takes the address the destination is reached
	// from; the port stays.
	if id.src.Addr().IsUnspecified() {
		if s, ok := a.srcFor(dst); ok {
			id.src = netip.AddrPortFrom(s, id.src.Port())
		}
	}
	id.dst = netip.AddrPortFrom(dst, uint16(port))
	id.routeOK = false
	gid, reach := a.gidFor(dst)
	if !reach || id.src.Addr().IsUnspecified() {
		// The event fails, not the command (as the kernel's resolution).
		id.state = StateAddrBound
		id.emitLocked(id.event(EvAddrError, StatusUnreachable))
		return nil
	}
	id.route = Route{SGID: a.cfg.GID, DGID: gid, PKey: 0xFFFF}
	id.state = StateAddrResolved
	e := id.event(EvAddrResolved, 0)
	id.addrKV(&e)
	id.emitLocked(e)
	return nil
}

func (id *ID) addrKV(e *Event) {
	e.add(KeySrcAddr, id.src.Addr())
	e.add(KeySrcPort, id.src.Port())
	if id.dst.Addr().IsValid() {
		e.add(KeyDstAddr, id.dst.Addr())
		e.add(KeyDstPort, id.dst.Port())
	}
}

func (id *ID) resolveRouteCmd(rest string) error {
	const op = "resolve_route"
	ar, err := parseArgs(op, rest, KeyTimeoutMS)
	if err != nil {
		return err
	}
	if _, err := ar.num(KeyTimeoutMS, 1<<31-1, 0); err != nil {
		return err
	}
	if id.state != StateAddrResolved && id.state != StateRouteResolved {
		return id.wrongState(op, syscall.EINVAL, "addr_resolved")
	}
	a := id.a
	r := &id.route
	r.SGID = a.cfg.GID
	r.HopLimit = 1
	if r.DGID != a.cfg.GID {
		r.HopLimit = 64 // routed RoCEv2
	}
	r.TrafficClass = id.tos
	r.PathMTU = a.cfg.ActiveMTU
	r.PacketLifeTime = roceLifeTime
	if id.ackTimeoutOK && id.ackTimeout > 0 {
		r.PacketLifeTime = id.ackTimeout - 1
	}
	r.PKey = 0xFFFF
	r.SL = id.tos >> 5 // the kernel maps the TOS's precedence to the SL
	r.FlowLabel = 0
	if r.HopLimit > 1 {
		r.SLID, r.DLID = 0xFFFF, 0xFFFF // permissive: RoCE has no LIDs
		r.FlowLabel = RoCEFlowLabel(id.src.Port(), id.dst.Port())
	}
	id.routeOK = true
	id.state = StateRouteResolved
	id.emitLocked(id.event(EvRouteResolved, 0))
	return nil
}

// RoCEFlowLabel is the flow label the kernel's rdma_cm gives the path of
// a RoCEv2 connection (cma.c, cma_get_roce_udp_flow_label, for an IPv4
// address or an IPv6 one without a flow label of its own): the 20 low
// bits of sport*31 + dport. It goes into the REQ's primary path, the
// passive side takes it from there, and a Linux rxe derives both ends' UDP
// source port from it (rdma_get_udp_sport).
func RoCEFlowLabel(sport, dport uint16) uint32 {
	return (uint32(sport)*31 + uint32(dport)) & 0xFFFFF
}

func (id *ID) listenCmd(rest string) error {
	const op = "listen"
	ar, err := parseArgs(op, rest, KeyBacklog)
	if err != nil {
		return err
	}
	n, err := ar.num(KeyBacklog, 1<<31-1, defaultBacklog)
	if err != nil {
		return err
	}
	if n == 0 || n > defaultBacklog {
		n = defaultBacklog // like SOMAXCONN: larger asks get the cap
	}
	a := id.a
	switch id.state {
	case StateListen:
		id.backlog = int(n) // rdma_listen again changes the backlog
		return nil
	case StateIdle:
		// As the kernel: an unbound id listens on every address, on an
		// ephemeral port.
		if err := a.bindLocked(id, netip.IPv4Unspecified(), 0); err != nil {
			return err
		}
	case StateAddrBound:
		if err := a.listenCheckLocked(id); err != nil {
			return err
		}
	default:
		return id.wrongState(op, syscall.EINVAL, "idle or addr_bound")
	}
	// As the kernel's rdma_listen: a listening id is no longer shared
	// (a later bind with reuseaddr does not join it).
	id.reuseaddr = false
	id.serviceID = ServiceID(id.ps, id.src.Port())
	id.backlog = int(n)
	id.pendingBy = map[[16]byte]int{}
	a.listeners[id.serviceID] = append(a.listeners[id.serviceID], id)
	id.state = StateListen
	return nil
}

// connParams are the connection parameters of connect and accept.
type connParams struct {
	qpNum, psn, qkey      uint32
	rr, depth, retry, rnr uint8
	flow, srq             bool
	private               []byte
	hasQPNum              bool
}

func (id *ID) parseConn(op, rest string, maxPrivate int, keys ...string) (connParams, error) {
	var p connParams
	ar, err := parseArgs(op, rest, keys...)
	if err != nil {
		return p, err
	}
	get := func(k string, max, def uint64) uint64 {
		if err != nil {
			return 0
		}
		var n uint64
		n, err = ar.num(k, max, def)
		return n
	}
	p.hasQPNum = ar.has(qp.KeyQPNum)
	p.qpNum = uint32(get(qp.KeyQPNum, 1<<24-1, 0))
	p.psn = uint32(get(KeyPSN, 1<<24-1, 0))
	p.rr = uint8(get(KeyResponderResources, 255, 0))
	p.depth = uint8(get(KeyInitiatorDepth, 255, 0))
	p.retry = uint8(get(KeyRetryCount, 7, 7))
	p.rnr = uint8(get(KeyRNRRetryCount, 7, 7))
	p.qkey = uint32(get(qp.KeyQKey, 1<<32-1, udpQKey))
	if err != nil {
		return p, err
	}
	if p.flow, err = ar.flag(KeyFlowControl, true); err != nil {
		return p, err
	}
	if p.srq, err = ar.flag(qp.KeySRQ, false); err != nil {
		return p, err
	}
	p.private, err = ar.private(maxPrivate)
	return p, err
}

func (id *ID) connectCmd(rest string) error {
	const op = "connect"
	a := id.a
	maxPriv := REQPrivateLen - CMAHdrLen
	if id.qpType == qp.TypeUD {
		maxPriv = SIDRReqPrivateLen - CMAHdrLen
	}
	p, err := id.parseConn(op, rest, maxPriv, qp.KeyQPNum, KeyPSN, KeyPrivateData, KeyResponderResources,
		KeyInitiatorDepth, KeyFlowControl, KeyRetryCount, KeyRNRRetryCount, qp.KeySRQ)
	if err != nil {
		return err
	}
	if id.state != StateRouteResolved {
		if id.state.connected() || id.state == StateReqSent || id.state == StateRepRcvd {
			return id.wrongState(op, syscall.EISCONN, "route_resolved")
		}
		return id.wrongState(op, syscall.EINVAL, "route_resolved")
	}
	if id.qpType == qp.TypeRC && (!p.hasQPNum || p.qpNum == 0) {
		return opError(op, syscall.EINVAL, "an RC connect needs qp_num=N (the QP the library made)")
	}
	id.localComm = a.newCommIDLocked()
	a.byComm[id.localComm] = id
	id.serviceID = ServiceID(id.ps, id.dst.Port())
	id.peerGID = id.route.DGID
	id.tid = a.nextTIDLocked()
	id.qpNum, id.psn = p.qpNum, p.psn
	id.responderResources, id.initiatorDepth = p.rr, p.depth
	id.flowControl, id.srq = p.flow, p.srq
	id.retryCount, id.rnrRetryCount = p.retry, p.rnr
	id.peerCMTimeout = cmResponseTimeout
	var hdr [CMAHdrLen]byte
	PutCMAHdr(hdr[:], CMAHdr{Src: id.src, Dst: id.dst})
	if id.qpType == qp.TypeUD {
		m := &SIDRReq{RequestID: id.localComm, PKey: id.route.PKey, ServiceID: id.serviceID}
		copy(m.PrivateData[:], hdr[:])
		copy(m.PrivateData[CMAHdrLen:], p.private)
		id.state = StateReqSent
		id.sendRequestLocked(m, id.tid, ibTime(cmResponseTimeout), func() {
			id.closeLocked()
			id.emitLocked(id.event(EvUnreachable, StatusTimedOut))
		})
		return nil
	}
	r := &id.route
	id.localAckTimeout = r.PacketLifeTime + 1
	if id.ackTimeoutOK {
		id.localAckTimeout = id.ackTimeout
	}
	m := &REQ{
		LocalCommID: id.localComm, ServiceID: id.serviceID, LocalCAGUID: a.cfg.NodeGUID,
		LocalQPN: id.qpNum, ResponderResources: id.responderResources, InitiatorDepth: id.initiatorDepth,
		RemoteCMResponseTimeout: cmResponseTimeout, FlowControl: id.flowControl, StartingPSN: id.psn,
		LocalCMResponseTimeout: cmResponseTimeout, RetryCount: id.retryCount, PKey: r.PKey,
		PathMTU: uint8(r.PathMTU), RNRRetryCount: id.rnrRetryCount, MaxCMRetries: maxCMRetries, SRQ: id.srq,
		Primary: Path{LocalLID: r.SLID, RemoteLID: r.DLID, LocalGID: r.SGID, RemoteGID: r.DGID,
			FlowLabel: r.FlowLabel, TrafficClass: r.TrafficClass, HopLimit: r.HopLimit, SL: r.SL,
			SubnetLocal: r.HopLimit <= 1, LocalACKTimeout: id.localAckTimeout},
	}
	copy(m.PrivateData[:], hdr[:])
	copy(m.PrivateData[CMAHdrLen:], p.private)
	id.state = StateReqSent
	id.sendRequestLocked(m, id.tid, id.requestTimeout(), func() {
		id.closeLocked()
		id.emitLocked(id.event(EvUnreachable, StatusTimedOut))
	})
	return nil
}

func noArgs(op, rest string) error {
	if rest != "" {
		return opError(op, syscall.EINVAL, "%s takes no arguments", op)
	}
	return nil
}

func (id *ID) establishCmd(rest string) error {
	const op = "establish"
	if err := noArgs(op, rest); err != nil {
		return err
	}
	if id.state != StateRepRcvd {
		return id.wrongState(op, syscall.EINVAL, "rep_rcvd (after connect_response)")
	}
	rtu := Encode(id.tid, &RTU{LocalCommID: id.localComm, RemoteCommID: id.remoteComm})
	id.lastRTU = &rtu
	id.a.sendRawLocked(id.peerGID, rtu)
	id.state = StateEstablished
	return nil
}

func (id *ID) acceptCmd(rest string) error {
	const op = "accept"
	a := id.a
	maxPriv := REPPrivateLen
	if id.qpType == qp.TypeUD {
		maxPriv = SIDRRepPrivateLen
	}
	p, err := id.parseConn(op, rest, maxPriv, qp.KeyQPNum, KeyPSN, KeyPrivateData, KeyResponderResources,
		KeyInitiatorDepth, KeyFlowControl, KeyRNRRetryCount, qp.KeySRQ, qp.KeyQKey)
	if err != nil {
		return err
	}
	if id.state != StateReqRcvd {
		if id.state == StateListen {
			return opError(op, syscall.EINVAL, "id %d is a listener; accept the id of the connect_request", id.Num)
		}
		return id.wrongState(op, syscall.EINVAL, "req_rcvd")
	}
	if !p.hasQPNum || p.qpNum == 0 {
		return opError(op, syscall.EINVAL, "accept needs qp_num=N")
	}
	id.qpNum, id.psn = p.qpNum, p.psn
	if id.qpType == qp.TypeUD {
		id.qkey = p.qkey
		m := &SIDRRep{RequestID: id.remoteComm, Status: SIDRSuccess, QPN: p.qpNum, ServiceID: id.serviceID, QKey: p.qkey}
		copy(m.PrivateData[:], p.private)
		a.sendLocked(id.peerGID, id.tid, m)
		id.setStateLocked(StateEstablished)
		return nil
	}
	id.responderResources, id.initiatorDepth = p.rr, p.depth
	id.flowControl, id.srq, id.rnrRetryCount = p.flow, p.srq, p.rnr
	m := &REP{LocalCommID: id.localComm, RemoteCommID: id.remoteComm, LocalQPN: id.qpNum,
		StartingPSN: id.psn, ResponderResources: p.rr, InitiatorDepth: p.depth,
		TargetACKDelay: caAckDelay, FlowControl: p.flow, RNRRetryCount: p.rnr, SRQ: p.srq,
		LocalCAGUID: a.cfg.NodeGUID}
	copy(m.PrivateData[:], p.private)
	id.setStateLocked(StateRepSent)
	id.sendRequestLocked(m, id.tid, id.requestTimeout(), func() {
		id.closeLocked()
		id.emitLocked(id.event(EvUnreachable, StatusTimedOut))
	})
	return nil
}

func (id *ID) rejectCmd(rest string) error {
	const op = "reject"
	ar, err := parseArgs(op, rest, KeyPrivateData)
	if err != nil {
		return err
	}
	a := id.a
	if id.qpType == qp.TypeUD {
		priv, err := ar.private(SIDRRepPrivateLen)
		if err != nil {
			return err
		}
		if id.state != StateReqRcvd {
			return id.wrongState(op, syscall.EINVAL, "req_rcvd")
		}
		m := &SIDRRep{RequestID: id.remoteComm, Status: SIDRReject, ServiceID: id.serviceID}
		copy(m.PrivateData[:], priv)
		a.sendLocked(id.peerGID, id.tid, m)
		id.closeLocked()
		return nil
	}
	priv, err := ar.private(REJPrivateLen)
	if err != nil {
		return err
	}
	msg := uint8(MsgREQ)
	switch id.state {
	case StateReqRcvd:
	case StateRepRcvd:
		msg = MsgREP
	default:
		return id.wrongState(op, syscall.EINVAL, "req_rcvd or rep_rcvd")
	}
	m := &REJ{LocalCommID: id.localComm, RemoteCommID: id.remoteComm, MessageRejected: msg, Reason: RejConsumerDefined}
	copy(m.PrivateData[:], priv)
	a.sendLocked(id.peerGID, id.tid, m)
	id.closeLocked()
	return nil
}

func (id *ID) disconnectCmd(rest string) error {
	const op = "disconnect"
	if err := noArgs(op, rest); err != nil {
		return err
	}
	a := id.a
	if id.qpType == qp.TypeUD {
		return opError(op, syscall.EINVAL, "a UD id has no connection")
	}
	switch id.state {
	case StateEstablished:
		id.tid = a.nextTIDLocked()
		id.state = StateDreqSent
		id.sendRequestLocked(&DREQ{LocalCommID: id.localComm, RemoteCommID: id.remoteComm, RemoteQPN: id.remoteQPN},
			id.tid, id.requestTimeout(), func() {
				// The peer never answered: disconnected all the same.
				id.emitLocked(id.event(EvDisconnected, StatusTimedOut))
				id.enterTimewaitLocked()
			})
		return nil
	case StateDreqRcvd:
		a.sendLocked(id.peerGID, id.lastDREP, &DREP{LocalCommID: id.localComm, RemoteCommID: id.remoteComm})
		id.enterTimewaitLocked()
		return nil
	case StateDreqSent, StateTimewait, StateClosed:
		// As the kernel: disconnecting a connection that is already
		// going (both ends call rdma_disconnect) succeeds and does nothing.
		return nil
	}
	return id.wrongState(op, syscall.ENOTCONN, "established")
}

func (id *ID) notifyCmd(rest string) error {
	const op = "notify"
	if err := noArgs(op, rest); err != nil {
		return err
	}
	if id.state != StateRepSent {
		if id.state == StateEstablished {
			return nil
		}
		return id.wrongState(op, syscall.EINVAL, "rep_sent")
	}
	id.stopTimerLocked()
	id.setStateLocked(StateEstablished)
	id.emitLocked(id.event(EvEstablished, 0))
	return nil
}

func (id *ID) setOptionCmd(rest string) error {
	const op = "set_option"
	ar, err := parseArgs(op, rest, KeyTOS, KeyAckTimeout, KeyReuseaddr, KeyAfonly)
	if err != nil {
		return err
	}
	if len(ar.m) == 0 {
		return opError(op, syscall.EINVAL, "want tos=N, ack_timeout=N, reuseaddr=0|1 or afonly=0|1")
	}
	tos, err := ar.num(KeyTOS, 255, uint64(id.tos))
	if err != nil {
		return err
	}
	ack, err := ar.num(KeyAckTimeout, 31, uint64(id.ackTimeout))
	if err != nil {
		return err
	}
	reuse, err := ar.flag(KeyReuseaddr, id.reuseaddr)
	if err != nil {
		return err
	}
	afonly, err := ar.flag(KeyAfonly, id.afonly)
	if err != nil {
		return err
	}
	if ar.has(KeyReuseaddr) && id.bound {
		return opError(op, syscall.EINVAL, "reuseaddr must be set before bind")
	}
	id.tos, id.tosSet = uint8(tos), id.tosSet || ar.has(KeyTOS)
	if ar.has(KeyAckTimeout) {
		id.ackTimeout, id.ackTimeoutOK = uint8(ack), true
	}
	id.reuseaddr, id.afonly = reuse, afonly
	return nil
}

func (id *ID) migrateCmd(rest string) error {
	const op = "migrate_id"
	ar, err := parseArgs(op, rest, KeyChannel)
	if err != nil {
		return err
	}
	n, err := ar.num(KeyChannel, 1<<32-1, 0)
	if err != nil {
		return err
	}
	c := id.a.channels[uint32(n)]
	if !ar.has(KeyChannel) || c == nil {
		return opError(op, syscall.ENOENT, "no channel %d", n)
	}
	if c.Owner != id.Owner && id.Owner != 0 {
		return opError(op, syscall.EACCES, "channel %d belongs to another user", n)
	}
	id.ch.ids--
	c.ids++
	id.ch = c
	id.migratedAt = id.queued
	return nil
}

// ParseNew reads a cm/new request: ps=... [qp_type=rc|ud] channel=C.
func ParseNew(text string) (ps PortSpace, t qp.Type, channel uint32, err error) {
	const op = "create_id"
	ar, err := parseArgs(op, text, KeyPs, qp.KeyQPType, KeyChannel)
	if err != nil {
		return 0, 0, 0, err
	}
	v, ok := ar.m[KeyPs]
	if !ok {
		return 0, 0, 0, opError(op, syscall.EINVAL, "ps=tcp|udp|ib|ipoib is required")
	}
	if ps, ok = ParsePortSpace(v); !ok {
		return 0, 0, 0, opError(op, syscall.EINVAL, "ps=%q: want tcp, udp, ib or ipoib", clip(v))
	}
	t = qp.TypeRC
	if ps == PSUDP || ps == PSIPoIB {
		t = qp.TypeUD
	}
	// The CM connects RC and sets up UD; the other types' names are
	// qp's, so one spelling holds across the tree.
	if v, ok := ar.m[qp.KeyQPType]; ok && v != "" {
		if t, ok = qp.ParseType(v); !ok || (t != qp.TypeRC && t != qp.TypeUD) {
			return 0, 0, 0, opError(op, syscall.EINVAL, "qp_type=%q: want rc or ud", clip(v))
		}
	}
	if !ar.has(KeyChannel) {
		return 0, 0, 0, opError(op, syscall.EINVAL, "channel=C is required (make one with cm/channel/new)")
	}
	n, err := ar.num(KeyChannel, 1<<32-1, 0)
	return ps, t, uint32(n), err
}
