package cm

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"rdmafs/clock"
	"rdmafs/device"
	"rdmafs/qp"
	"rdmafs/roce"
)

// Transport carries MADs to a port's QP1: the device's GSI, or an
// in-memory network in tests. SendMAD is called with Agent.mu held, so it
// must not call back into the agent (the device queues what it receives).
type Transport interface {
	SendMAD(dgid [16]byte, mad [MADSize]byte) error
}

// Config describes the device the agent speaks for.
type Config struct {
	Clock    clock.Clock
	GID      [16]byte // the port GID (what local addresses resolve to)
	NodeGUID uint64   // the CA GUID in REQ and REP
	// Addrs are the IP addresses the device answers for. A --addr mount:
	// its address; a local mount: 127.0.0.1, ::1 and the --cm-addr ones.
	Addrs []netip.Addr
	// Wire says other IPv4 addresses are reached over RoCEv2 at
	// ::ffff:a.b.c.d (a device with an address); without it only Addrs
	// are reachable.
	Wire bool
	// ActiveMTU is the port's active MTU, the path MTU routes get.
	ActiveMTU qp.MTU
	// MaxIDs bounds the ids of the device (default 4096); one uid other
	// than root gets UserShare percent of it (default
	// device.DefaultUserShare).
	MaxIDs    int
	UserShare int
	// MaxChannels bounds the event channels (default MaxIDs).
	MaxChannels int
	// NewID is called, with Agent.mu held, when a connect request makes a
	// new id, before its connect_request event is queued: fsnode makes
	// its directory there, so a reader of the event finds it. It must not
	// call into the agent.
	NewID func(*ID)
	Logf  func(format string, args ...any)
}

// The CM's timing, as the kernel's rdma_cm sets it: the CM response
// timeout it advertises (2^20 * 4.096 us, about 4 s), how often a request
// is sent before the peer counts as unreachable, the service timeout of
// the MRA it sends for a request the application has not answered yet
// (about 67 s), and RoCE's packet life time: 16 since Linux 6.2
// (CMA_IBOE_PACKET_LIFETIME, 18 before), so a QP's local ACK timeout is
// 17 (537 ms), as on rxe, not 19 (2.1 s per retransmission).
const (
	cmResponseTimeout = 20
	maxCMRetries      = 15
	mraServiceTimeout = 24
	roceLifeTime      = 16
	udpQKey           = 0x01234567 // RDMA_UDP_QKEY
	defaultBacklog    = 1024
	ephemeralLow      = 32768
	ephemeralHigh     = 60999
	caAckDelay        = 15 // the device's local_ca_ack_delay
)

// ibTime is an IBA time value (4.096 us * 2^t) as a duration, rounded the
// way the kernel's CM rounds it: 2^(t-8) ms.
func ibTime(t uint8) time.Duration {
	if t < 8 {
		return time.Millisecond
	}
	if t > 31 {
		t = 31
	}
	return time.Duration(1<<(t-8)) * time.Millisecond
}

// Counters of the agent, readable without locks.
type Counters struct {
	sent, recv                          [AttrAPR + 1]atomic.Uint64
	Retries, Timeouts                   atomic.Uint64
	DroppedMalformed, DroppedUnknown    atomic.Uint64
	DroppedDuplicate, DroppedState      atomic.Uint64
	RejectedNoListener, RejectedBacklog atomic.Uint64
	RejectedStale, RejectedNoResources  atomic.Uint64
	RejectedSource                      atomic.Uint64
}

var counterAttrs = []uint16{AttrREQ, AttrREP, AttrRTU, AttrREJ, AttrMRA, AttrDREQ, AttrDREP, AttrSIDRReq, AttrSIDRRep}

// Agent is one device's connection manager: its ids, listeners, ports and
// event channels, and the protocol on QP1.
//
// All of its state is guarded by mu, which every entry point takes: the
// commands (fsnode's writes), received MADs (the device's GSI goroutine)
// and timers (the clock's goroutine). Lock order: Agent.mu, then
// Channel.mu, then whatever Transport.SendMAD takes (Device.mu). Nothing
// under Device.mu calls the agent.
type Agent struct {
	cfg    Config
	tr     Transport
	clock  clock.Clock
	detach func() // stops the device's MADs coming (Attach)

	Counters Counters

	mu      sync.Mutex
	closed  bool
	ids     map[uint32]*ID
	nextID  uint32
	perUser map[uint32]int
	// requestIDs are the live ids connect requests made; bySource counts
	// them by the remote port that sent the request.
	requestIDs int
	bySource   map[[16]byte]int
	byComm     map[uint32]*ID    // local comm ID → id (zombies included)
	byRemote   map[remoteKey]*ID // the peer's comm ID and CA GUID (or GID) → id
	listeners  map[uint64][]*ID  // service ID → listening ids
	ports      map[portKey][]*ID // bound ids by port space and port
	zombies    []*ID             // destroyed ids still answering for their comm ID
	channels   map[uint32]*Channel
	nextCh     uint32
	// queuedBytes is each owner's bytes of unread events, across its
	// channels (shared with them; entries stay, an int64 per user).
	queuedBytes map[uint32]*atomic.Int64
	tid         uint64
}

type remoteKey struct {
	commID uint32
	node   [16]byte // CA GUID (REQ) or sender GID (SIDR)
}

type portKey struct {
	ps   PortSpace
	port uint16
}

// New makes an agent that sends through tr.
func New(cfg Config, tr Transport) *Agent {
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.MaxIDs <= 0 {
		cfg.MaxIDs = 4096
	}
	if cfg.UserShare <= 0 || cfg.UserShare > 100 {
		cfg.UserShare = device.DefaultUserShare
	}
	if cfg.MaxChannels <= 0 {
		cfg.MaxChannels = cfg.MaxIDs
	}
	if !cfg.ActiveMTU.Valid() {
		cfg.ActiveMTU = qp.MTU1024
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	var b [8]byte
	rand.Read(b[:])
	return &Agent{cfg: cfg, tr: tr, clock: cfg.Clock,
		ids: map[uint32]*ID{}, nextID: 1, perUser: map[uint32]int{}, bySource: map[[16]byte]int{},
		byComm: map[uint32]*ID{}, byRemote: map[remoteKey]*ID{},
		listeners: map[uint64][]*ID{}, ports: map[portKey][]*ID{},
		channels: map[uint32]*Channel{}, nextCh: 1, queuedBytes: map[uint32]*atomic.Int64{},
		tid: binary.BigEndian.Uint64(b[:]) &^ (1 << 63)}
}

// Attach makes an agent for dev: it receives dev's QP1 MADs and sends
// through dev. Local addresses resolve to dev's port GID.
func Attach(dev *device.Device, cfg Config) *Agent {
	c := dev.Config()
	cfg.GID = dev.Port().GID
	cfg.NodeGUID = c.NodeGUID
	cfg.ActiveMTU = c.ActiveMTU
	if cfg.UserShare == 0 {
		// --user-share bounds the CM's ids and channels as it bounds
		// every verbs object.
		cfg.UserShare = int(c.UserShare)
	}
	if cfg.Clock == nil {
		cfg.Clock = c.Clock
	}
	// The device's own addresses first, then the extra ones given.
	own := []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.IPv6Loopback()}
	if c.Addr.IsValid() {
		cfg.Wire = true
		own = []netip.Addr{c.Addr}
	}
	for _, x := range cfg.Addrs {
		if x = x.Unmap(); !slices.Contains(own, x) {
			own = append(own, x)
		}
	}
	cfg.Addrs = own
	a := New(cfg, dev)
	a.detach = func() { dev.SetGSI(nil) }
	dev.SetGSI(func(m device.GSIMessage) { a.HandleMAD(m.SGID, m.MAD[:]) })
	return a
}

// SetNewIDHook sets Config.NewID (fsnode's, when the agent was made
// before the tree).
func (a *Agent) SetNewIDHook(f func(*ID)) {
	a.mu.Lock()
	a.cfg.NewID = f
	a.mu.Unlock()
}

// Close destroys every id (peers get their REJ or DREQ) and channel; the
// agent refuses everything afterwards.
func (a *Agent) Close() {
	if a.detach != nil {
		a.detach()
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return
	}
	for _, id := range a.sortedIDsLocked() {
		a.destroyLocked(id)
	}
	for _, z := range a.zombies {
		z.stopTimerLocked()
	}
	a.zombies = nil
	for _, c := range a.channels {
		c.close()
	}
	a.closed = true
}

// Addrs are the addresses the agent answers for.
func (a *Agent) Addrs() []netip.Addr { return append([]netip.Addr(nil), a.cfg.Addrs...) }

func (a *Agent) sortedIDsLocked() []*ID {
	ids := make([]*ID, 0, len(a.ids))
	for _, id := range a.ids {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i].Num < ids[j].Num })
	return ids
}

func (a *Agent) nextTIDLocked() uint64 { a.tid++; return a.tid }

// newCommIDLocked draws an unused, non-zero local comm ID at random, so a
// stale MAD of an earlier connection rarely names a new one.
func (a *Agent) newCommIDLocked() uint32 {
	for {
		var b [4]byte
		rand.Read(b[:])
		c := binary.BigEndian.Uint32(b[:])
		if _, used := a.byComm[c]; c != 0 && !used {
			return c
		}
	}
}

func cmErr(op string, errno syscall.Errno, format string, args ...any) error {
	return &device.Error{Op: op, Errno: errno, Err: fmt.Errorf(format, args...)}
}

// --- channels -----------------------------------------------------------

// NewChannel makes an event channel for owner.
func (a *Agent) NewChannel(owner uint32) (*Channel, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil, cmErr("create_event_channel", syscall.ENODEV, "the CM is closed")
	}
	if len(a.channels) >= a.cfg.MaxChannels {
		return nil, cmErr("create_event_channel", syscall.ENOMEM, "the device has its %d channels", a.cfg.MaxChannels)
	}
	if owner != 0 {
		share, n := a.userShare(a.cfg.MaxChannels), 0
		for _, c := range a.channels {
			if c.Owner == owner {
				n++
			}
		}
		if n >= share {
			return nil, cmErr("create_event_channel", syscall.ENOMEM, "uid %d has its share of %d channels", owner, share)
		}
	}
	qb := a.queuedBytes[owner]
	if qb == nil {
		qb = new(atomic.Int64)
		a.queuedBytes[owner] = qb
	}
	c := newChannel(a.nextCh, owner, qb)
	a.nextCh++
	a.channels[c.Num] = c
	return c, nil
}

// Channel finds a live channel.
func (a *Agent) Channel(num uint32) *Channel {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.channels[num]
}

// DestroyChannel removes an unused channel (EBUSY while ids report to it).
func (a *Agent) DestroyChannel(c *Channel) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.channels[c.Num] != c {
		return nil
	}
	if c.ids > 0 {
		return cmErr("destroy_event_channel", syscall.EBUSY, "channel %d has %d ids", c.Num, c.ids)
	}
	delete(a.channels, c.Num)
	c.close()
	return nil
}

// DestroyChannelIDs destroys every id that reports to c, as Destroy
// would each, and returns their numbers: what closing a program's event
// channel does when the program is gone (the kernel's rdma_cm destroys a
// closed file's ids, those its connect requests made included).
func (a *Agent) DestroyChannelIDs(c *Channel) []uint32 {
	a.mu.Lock()
	defer a.mu.Unlock()
	var nums []uint32
	for _, id := range a.sortedIDsLocked() {
		if id.ch == c {
			a.destroyLocked(id)
			nums = append(nums, id.Num)
		}
	}
	return nums
}

// ChannelIDs is the number of ids reporting to c.
func (a *Agent) ChannelIDs(c *Channel) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return c.ids
}

// --- ids ---------------------------------------------------------------

// Create makes an id (rdma_create_id) for owner, reporting to ch.
func (a *Agent) Create(owner uint32, ch *Channel, ps PortSpace, t qp.Type) (*ID, error) {
	const op = "create_id"
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil, cmErr(op, syscall.ENODEV, "the CM is closed")
	}
	if a.channels[ch.Num] != ch {
		return nil, cmErr(op, syscall.ENOENT, "channel %d is gone", ch.Num)
	}
	if err := a.admitLocked(op, owner); err != nil {
		return nil, err
	}
	id := a.newIDLocked(owner, ch, ps, t)
	return id, nil
}

// userShare is what one user other than root (or one remote port) may
// take of limit: UserShare percent, at least one.
func (a *Agent) userShare(limit int) int { return max(1, limit*a.cfg.UserShare/100) }

// admitLocked checks the device's and the user's share of ids.
func (a *Agent) admitLocked(op string, owner uint32) error {
	if len(a.ids) >= a.cfg.MaxIDs {
		return cmErr(op, syscall.ENOMEM, "the device has its %d CM ids", a.cfg.MaxIDs)
	}
	if owner != 0 {
		share := a.userShare(a.cfg.MaxIDs)
		if a.perUser[owner] >= share {
			return cmErr(op, syscall.ENOMEM, "uid %d has its share of %d CM ids", owner, share)
		}
	}
	return nil
}

func (a *Agent) newIDLocked(owner uint32, ch *Channel, ps PortSpace, t qp.Type) *ID {
	id := &ID{a: a, Num: a.nextID, Owner: owner, ps: ps, qpType: t, ch: ch,
		retryCount: 7, rnrRetryCount: 7, afonly: false}
	a.nextID++
	a.ids[id.Num] = id
	a.perUser[owner]++
	ch.ids++
	return id
}

// Lookup finds a live id.
func (a *Agent) Lookup(num uint32) *ID {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.ids[num]
}

// --- text views ----------------------------------------------------------

// CountersText is cm/counters.
func (a *Agent) CountersText() string {
	var b strings.Builder
	c := &a.Counters
	for _, at := range counterAttrs {
		n := AttrName(at)
		fmt.Fprintf(&b, "%s_sent=%d\n%s_recv=%d\n", n, c.sent[at].Load(), n, c.recv[at].Load())
	}
	a.mu.Lock()
	ids, listeners, zombies, channels := len(a.ids), 0, len(a.zombies), len(a.channels)
	for _, l := range a.listeners {
		listeners += len(l)
	}
	a.mu.Unlock()
	for _, kv := range []struct {
		k string
		v uint64
	}{
		{"retries", c.Retries.Load()}, {"timeouts", c.Timeouts.Load()},
		{"dropped_malformed", c.DroppedMalformed.Load()}, {"dropped_unknown", c.DroppedUnknown.Load()},
		{"dropped_duplicate", c.DroppedDuplicate.Load()}, {"dropped_state", c.DroppedState.Load()},
		{"rejected_no_listener", c.RejectedNoListener.Load()}, {"rejected_backlog", c.RejectedBacklog.Load()},
		{"rejected_stale", c.RejectedStale.Load()}, {"rejected_no_resources", c.RejectedNoResources.Load()},
		{"rejected_source", c.RejectedSource.Load()},
		{"ids", uint64(ids)}, {"listeners", uint64(listeners)}, {"timewait_ids", uint64(zombies)},
		{"channels", uint64(channels)},
	} {
		fmt.Fprintf(&b, "%s=%d\n", kv.k, kv.v)
	}
	return b.String()
}

// ListenersText is cm/listeners: one line per listening id.
func (a *Agent) ListenersText(viewer uint32) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var ls []*ID
	for _, l := range a.listeners {
		ls = append(ls, l...)
	}
	sort.Slice(ls, func(i, j int) bool { return ls[i].Num < ls[j].Num })
	var b strings.Builder
	for _, l := range ls {
		fmt.Fprintf(&b, "id=%d uid=%d ps=%s addr=%s port=%d service_id=0x%016x backlog=%d pending=%d\n",
			l.Num, l.Owner, l.ps, l.src.Addr(), l.src.Port(), ServiceID(l.ps, l.src.Port()), l.backlog, l.pending)
	}
	return b.String()
}

// AddrsText is cm/addrs.
func (a *Agent) AddrsText() string {
	var b strings.Builder
	for _, x := range a.cfg.Addrs {
		b.WriteString(x.String())
		b.WriteByte('\n')
	}
	return b.String()
}

// --- addressing ----------------------------------------------------------

// isLocalAddr reports whether the device answers for x.
func (a *Agent) isLocalAddr(x netip.Addr) bool {
	x = x.Unmap()
	for _, l := range a.cfg.Addrs {
		if l.Unmap() == x {
			return true
		}
	}
	return false
}

// gidFor is the GID that reaches x, if any.
func (a *Agent) gidFor(x netip.Addr) ([16]byte, bool) {
	x = x.Unmap()
	if a.isLocalAddr(x) {
		return a.cfg.GID, true
	}
	if x.IsMulticast() {
		// A multicast group is reached through its MGID (the device
		// delivers to the group's members, and on the wire sends to the
		// IP group): rdma_resolve_addr to a group succeeds, as the
		// kernel's does, before rdma_join_multicast.
		return McastGID(x, a.cfg.Wire), true
	}
	if a.cfg.Wire && x.Is4() && !x.IsUnspecified() && !x.IsMulticast() {
		return roce.GIDFromIPv4(x), true
	}
	return [16]byte{}, false
}

// srcFor picks the local address a connection to dst goes from: dst
// itself when the device answers for it, else the first address of the
// same family.
func (a *Agent) srcFor(dst netip.Addr) (netip.Addr, bool) {
	dst = dst.Unmap()
	if a.isLocalAddr(dst) {
		return dst, true
	}
	for _, l := range a.cfg.Addrs {
		if l.Unmap().Is4() == dst.Is4() {
			return l.Unmap(), true
		}
	}
	return netip.Addr{}, false
}

// --- ports ---------------------------------------------------------------

// bindLocked gives id the address addr and port (0: an ephemeral one).
func (a *Agent) bindLocked(id *ID, addr netip.Addr, port uint16) error {
	const op = "bind_addr"
	addr = addr.Unmap()
	if !addr.IsUnspecified() && !a.isLocalAddr(addr) {
		return cmErr(op, syscall.EADDRNOTAVAIL, "%s is not an address of this device (cm/addrs)", addr)
	}
	if port == 0 {
		// The kernel starts at a random point of the range and walks it.
		var b [4]byte
		rand.Read(b[:])
		n := uint32(ephemeralHigh - ephemeralLow + 1)
		start := binary.BigEndian.Uint32(b[:]) % n
		for i := uint32(0); i < n; i++ {
			p := uint16(ephemeralLow + (start+i)%n)
			if len(a.ports[portKey{id.ps, p}]) == 0 {
				port = p
				break
			}
		}
		if port == 0 {
			return cmErr(op, syscall.EADDRNOTAVAIL, "no free ephemeral port in %s", id.ps)
		}
	} else {
		for _, o := range a.ports[portKey{id.ps, port}] {
			oa := o.src.Addr()
			overlap := addr.IsUnspecified() || oa.IsUnspecified() || oa == addr
			shareable := id.reuseaddr && o.reuseaddr && o.state != StateListen
			if overlap && !shareable {
				return cmErr(op, syscall.EADDRINUSE, "%s port %d is bound by id %d", id.ps, port, o.Num)
			}
		}
	}
	k := portKey{id.ps, port}
	a.ports[k] = append(a.ports[k], id)
	id.src = netip.AddrPortFrom(addr, port)
	id.bound = true
	return nil
}

// listenCheckLocked refuses a listen on a port and address another id
// already listens on, whatever reuseaddr said at bind: a listening id is
// unique in its port's bind list, as the kernel's rdma_listen has it, so
// an id bound beside a server's (both with reuseaddr) cannot listen too
// and take the server's connect requests. (The kernel answers a wildcard
// overlap EADDRNOTAVAIL; here every overlap is EADDRINUSE.)
func (a *Agent) listenCheckLocked(id *ID) error {
	for _, o := range a.ports[portKey{id.ps, id.src.Port()}] {
		if o != id && o.state == StateListen && addrsOverlap(id.src.Addr(), id.afonly, o.src.Addr(), o.afonly) {
			return cmErr("listen", syscall.EADDRINUSE, "id %d already listens on %s port %d", o.Num, id.ps, id.src.Port())
		}
	}
	return nil
}

// addrsOverlap reports whether two bound addresses share requests: the
// same address, or a wildcard that takes the other's (an IPv6 wildcard
// takes IPv4 unless afonly).
func addrsOverlap(x netip.Addr, xAFOnly bool, y netip.Addr, yAFOnly bool) bool {
	switch {
	case x == y:
		return true
	case x.IsUnspecified() && y.IsUnspecified():
		return (x.Is4() && !yAFOnly) || (y.Is4() && !xAFOnly)
	case x.IsUnspecified():
		return wildcardTakes(x, xAFOnly, y)
	case y.IsUnspecified():
		return wildcardTakes(y, yAFOnly, x)
	}
	return false
}

func (a *Agent) unbindLocked(id *ID) {
	if !id.bound {
		return
	}
	k := portKey{id.ps, id.src.Port()}
	l := a.ports[k]
	for i, o := range l {
		if o == id {
			l = append(l[:i], l[i+1:]...)
			break
		}
	}
	if len(l) == 0 {
		delete(a.ports, k)
	} else {
		a.ports[k] = l
	}
	id.bound = false
}

// listenerFor finds the listener of service sid for destination dst:
// one bound to dst itself first, else a wildcard one of dst's family.
func (a *Agent) listenerFor(sid uint64, dst netip.Addr) *ID {
	var wild *ID
	for _, l := range a.listeners[sid] {
		la := l.src.Addr()
		switch {
		case la == dst.Unmap():
			return l
		case la.IsUnspecified() && wild == nil && wildcardTakes(la, l.afonly, dst.Unmap()):
			wild = l
		}
	}
	return wild
}

// wildcardTakes reports whether a listener on the wildcard any takes a
// request for dst: 0.0.0.0 takes IPv4, :: takes IPv6 and, unless afonly,
// IPv4 too (as sockets and rdma_cm do).
func wildcardTakes(any netip.Addr, afonly bool, dst netip.Addr) bool {
	if any.Is4() {
		return dst.Is4()
	}
	return !dst.Is4() || !afonly
}

// --- sending -------------------------------------------------------------

func (a *Agent) sendLocked(dgid [16]byte, tid uint64, m Msg) {
	mad := Encode(tid, m)
	a.Counters.sent[m.attrID()].Add(1)
	if err := a.tr.SendMAD(dgid, mad); err != nil {
		a.cfg.Logf("cm: send %s: %v", AttrName(m.attrID()), err)
	}
}

// sendRawLocked resends a MAD kept for retries.
func (a *Agent) sendRawLocked(dgid [16]byte, mad [MADSize]byte) {
	a.Counters.sent[be.Uint16(mad[16:])].Add(1)
	a.tr.SendMAD(dgid, mad)
}

// rejectLocked answers a MAD that makes no id with a REJ (cm's stateless
// rejection: the sender's comm ID goes back as the remote one).
func (a *Agent) rejectLocked(dgid [16]byte, tid uint64, remoteComm uint32, msg uint8, reason uint16) {
	a.sendLocked(dgid, tid, &REJ{RemoteCommID: remoteComm, MessageRejected: msg, Reason: reason})
}
