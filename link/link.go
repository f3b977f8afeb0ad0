package link

import (
	"bytes"
	"sync"
	"sync/atomic"
	"time"

	"rdmafs/roce"
)

// Route says where the device sends a packet (Meta.Route): it is the
// device's routing decision, made before the chain sees the packet, so that
// every decorator knows what the packet will look like on the way out.
type Route uint8

const (
	// NoRoute: the destination is neither this device nor reachable over
	// the wire. The route counts and drops it (RC retries and times out).
	NoRoute Route = iota
	// Local: the destination QP is on this device; loopback hands the
	// packet itself back to the device's dispatcher.
	Local
	// Wire: the packet goes out as a RoCEv2 datagram from Meta.Src to
	// Meta.Dst.
	Wire
)

// Meta is what the link knows of a packet besides its IB headers: the
// addressing the network layer provides and the device's route.
type Meta struct {
	SGID, DGID [16]byte
	// SrcQPN is the sending QP: its UDP source port on the wire
	// (SourcePort) and whose owner may see the packet in a capture.
	SrcQPN  uint32
	DestQPN uint32
	Route   Route
	// Src and Dst are the IPv4 addresses of a Wire packet.
	Src, Dst [4]byte
	// PayloadLen is the length of the packet's payload, for the counters.
	PayloadLen int
}

// Packet is the device's packet as the link sees it. The link never looks
// inside; it asks.
//
// A packet written to an endpoint belongs to the chain from then on: it is
// either handed back to the device (loopback's Dispatcher.DeliverLocal) or
// finished with exactly one call of Done. Every method is called with the
// chain's lock held (the doc of this package, Locking).
type Packet interface {
	// Meta returns the packet's addressing and route.
	Meta() Meta
	// Header fills rp with the packet's IB headers; rp.Payload aliases the
	// packet's payload until the packet is done with.
	Header(rp *roce.Packet)
	// Clone returns a copy with a payload of its own (a duplicate).
	Clone() Packet
	// Hold gives the packet a payload of its own, because the link keeps
	// it beyond the write that brought it (a delayed or reordered
	// packet): the memory its payload aliases may go away meanwhile.
	Hold()
	// Done says the link is finished with the packet: sent is true when it
	// left as a datagram, false when it was dropped.
	Done(sent bool)
}

// Endpoint is one element of the chain: the bottom ones carry packets
// (loopback, the wire), the others decorate the one below them (faults,
// capture) or choose among several (the route).
type Endpoint interface {
	// WritePackets sends pkts in order and takes them over (Packet says
	// what becomes of each). The slice itself stays the caller's.
	//
	// Preconditions: the chain's lock is held.
	WritePackets(pkts []Packet)
	// Attach sets the dispatcher that receives what arrives through this
	// endpoint. A decorator attaches itself below and passes on.
	Attach(d Dispatcher)
	// Close releases what the endpoint holds (sockets, goroutines, held
	// packets). It is called once, without the chain's lock: the wire's
	// receive goroutine may be waiting for it.
	Close()
}

// Dispatcher is the device's receive side, which it gives the chain.
type Dispatcher interface {
	// DeliverLocal takes back a packet that loopback carries: the very
	// packet the device wrote.
	//
	// Preconditions: the chain's lock is held.
	DeliverLocal(p Packet)
	// DeliverDatagrams takes a batch of datagrams from the wire, good and
	// bad (Datagram.Status). It returns nil, or a function that reports
	// whether the receiver is still too busy to take more (the wire then
	// stops reading the socket until it is not, or for at most
	// BackOffMax), which the wire calls with the chain's lock held. It
	// may write packets to the chain before it returns (the device runs
	// the turns the datagrams made runnable there).
	//
	// Preconditions: the chain's lock is held.
	DeliverDatagrams(dgs []Datagram) (busy func() bool)
}

// Status is what the wire found of one datagram.
type Status uint8

const (
	// OK: IPv4, UDP, ICRC and IB headers all good; Packet holds them.
	OK Status = iota
	// Malformed: it does not parse, or is not addressed to this wire.
	Malformed
	// BadICRC: it parses but its ICRC does not match; BadQPN is the
	// destination QPN its BTH names.
	BadICRC
)

// Datagram is one datagram received from the wire, valid for the length
// of the DeliverDatagrams call that carries it.
type Datagram struct {
	// Raw is the datagram as it arrived, from its IPv4 header on; for a
	// packet of a coalesced datagram (Seg), from its IB headers to its
	// ICRC, and Head is the IPv4 and UDP header the kernel would have
	// given it had it cut the datagram (gso.go).
	Raw    []byte
	Seg    bool
	Head   [udpHead]byte
	Status Status
	// Packet holds the parsed IB headers of an OK datagram; its Payload
	// aliases Raw.
	Packet roce.Packet
	BadQPN uint32
	// Src and Dst are the IPv4 addresses, SrcPort the UDP source port of
	// an OK datagram.
	Src, Dst [4]byte
	SrcPort  uint16
}

// IPv4Header is the datagram's IPv4 header (at least 20 bytes).
func (dg *Datagram) IPv4Header() []byte {
	if dg.Seg {
		return dg.Head[:20]
	}
	return dg.Raw
}

// Bytes is a copy of the datagram from its IPv4 header on.
func (dg *Datagram) Bytes() []byte {
	if dg.Seg {
		return append(dg.Head[:udpHead:udpHead], dg.Raw...)
	}
	return bytes.Clone(dg.Raw)
}

// Counters are the link's statistics, readable at any time without locks.
// The device embeds them in its own counters, under the same names as
// before the link had a package of its own.
type Counters struct {
	// The route: every packet the device sends (after faults), and those
	// it could not route.
	PacketsSent atomic.Uint64
	BytesSent   atomic.Uint64
	NoRoute     atomic.Uint64
	// The fault injector.
	FaultDrops    atomic.Uint64
	FaultDups     atomic.Uint64
	FaultDelays   atomic.Uint64
	FaultReorders atomic.Uint64
	// The wire.
	ICRCErrors       atomic.Uint64
	MalformedPackets atomic.Uint64
	WirePacketsSent  atomic.Uint64
	WirePacketsRecv  atomic.Uint64
	WireSendErrors   atomic.Uint64
	WireRecvErrors   atomic.Uint64
	// System calls of the wire (datagrams per call: WirePacketsSent /
	// WireSendCalls, WirePacketsRecv / WireRecvCalls), sends that found
	// the socket buffer full, datagrams the socket dropped (SO_RXQ_OVFL).
	WireSendCalls    atomic.Uint64
	WireRecvCalls    atomic.Uint64
	WireSendFull     atomic.Uint64
	WireRecvOverruns atomic.Uint64
	// The datagrams multicast groups' sockets dropped (mcast.go).
	WireMcastOverruns atomic.Uint64
	// Coalesced runs (gso.go): sends that carried more than one datagram,
	// received datagrams that held more than one packet, the refusal that
	// turned coalescing off, source ports sent through the raw socket,
	// source ports' sockets closed to make room (gso.go).
	WireCoalescedSends    atomic.Uint64
	WireCoalescedRecv     atomic.Uint64
	WireCoalesceRefused   atomic.Uint64
	WireTxSocketFallbacks atomic.Uint64
	WireTxSocketEvictions atomic.Uint64
	// Capture.
	CaptureDrops atomic.Uint64
}

// SourcePort is rxe's per-QP UDP source port (roce.QPSourcePort): every
// packet of a QP goes from it, requests and responses alike. So a
// connected QP knows the port its peer sends from, and the device holds
// the peer to it.
func SourcePort(qpn uint32) uint16 { return roce.QPSourcePort(qpn) }

// FlowSourcePort is the port Linux's RoCE drivers derive from a connection
// since 5.17 (rdma_get_udp_sport): rxe sends every packet of a QP whose
// address has a GRH (every RoCE QP) from it, computed from the flow label
// of that QP's address, or when that is 0 from a flow label made of the two
// QPNs (their product, folded twice), whose low 14 bits, folded with the
// high 6, go above 0xC000. The product makes it the same from either end.
func FlowSourcePort(flowLabel, qpnA, qpnB uint32) uint16 {
	fl := flowLabel & 0xFFFFF
	if fl == 0 {
		v := uint64(qpnA) * uint64(qpnB)
		v ^= v >> 20
		v ^= v >> 40
		fl = uint32(v) & 0xFFFFF
	}
	low := fl&0x3FFF ^ fl&0xFC000>>14
	return 0xC000 | uint16(low)
}

// V4Mapped reports whether g is an IPv4-mapped GID (RoCEv2 over IPv4).
func V4Mapped(g [16]byte) bool {
	for _, x := range g[:10] {
		if x != 0 {
			return false
		}
	}
	return g[10] == 0xff && g[11] == 0xff
}

// ttl is the IPv4 TTL (and IPv6 hop limit) of every datagram the device
// builds, as rxe's default.
const ttl = 64

// Encode appends p as a RoCEv2 datagram to b[:0] and returns it: IPv4 for
// a Wire packet (from Meta.Src to Meta.Dst, IP ID 0, DF, TTL 64, UDP
// checksum 0, ICRC) or a packet between two IPv4-mapped GIDs, IPv6
// otherwise (the default fe80:: GIDs of a device without an address). The
// wire sends, and capture records, exactly these bytes, but for the IP ID
// and so the ICRC of the later packets of a coalesced run, which the wire
// numbers 1, 2, ... (gso.go). rp is scratch.
func Encode(b []byte, p Packet, rp *roce.Packet) ([]byte, error) {
	b, err := encodeOpen(b, p, rp)
	if err == nil && len(b) > roce.HeadroomIPv4 && b[0]>>4 == 4 {
		roce.SealIPv4(b)
	}
	return b, err
}

// encodeOpen is Encode without an IPv4 datagram's ICRC (roce.SealIPv4
// computes it): the wire numbers a run's IP IDs first (gso.go).
func encodeOpen(b []byte, p Packet, rp *roce.Packet) ([]byte, error) {
	m := p.Meta()
	p.Header(rp)
	defer func() { rp.Payload = nil }()
	src, dst := m.Src, m.Dst
	v4 := m.Route == Wire
	if !v4 && V4Mapped(m.SGID) && V4Mapped(m.DGID) {
		v4, src, dst = true, [4]byte(m.SGID[12:]), [4]byte(m.DGID[12:])
	}
	head := roce.HeadroomIPv6
	if v4 {
		head = roce.HeadroomIPv4
	}
	if need := head + rp.IBLen() + roce.ICRCLen; cap(b) < need {
		b = make([]byte, 0, need)
	}
	b, err := rp.AppendIB(b[:head])
	if err != nil {
		return b, err
	}
	if v4 {
		return roce.EncapIPv4Open(b, src, dst, SourcePort(m.SrcQPN), 0, 0, ttl)
	}
	return roce.EncapIPv6(b, m.SGID, m.DGID, SourcePort(m.SrcQPN), 0, 0, ttl)
}

// Chain is the device's link: the endpoints it built at creation, top
// first. The device writes to Head and closes the chain with Close.
type Chain struct {
	// Head is what the transport writes to: the fault injector.
	Head Endpoint
	// Faults, Capture, Route are the decorators of the chain; Wire is nil
	// for a device without an address.
	Faults  *FaultInjector
	Capture *Capture
	Route   Endpoint
	Wire    *WireEndpoint
}

// Options are what NewChain needs from the device.
type Options struct {
	// Lock is the chain's lock (the device's mutex), which the chain's own
	// goroutines take to deliver; the device's writes exclude them
	// (Locking in the package doc).
	Lock sync.Locker
	// Counters receive the link's statistics.
	Counters *Counters
	// Owner returns the owner (uid) of the device's QP qpn, 0 when there is
	// no such QP, for capture; called with Lock held.
	Owner func(qpn uint32) uint32
	// AfterFunc runs f after d (the device's clock), for delayed packets.
	AfterFunc func(d time.Duration, f func())
	// Wire, when not nil, is the wire's configuration.
	Wire *WireConfig
}

// NewChain builds faults → capture → route(loopback | wire) and attaches
// disp as the dispatcher of everything that arrives.
func NewChain(o Options, disp Dispatcher) (*Chain, error) {
	c := &Chain{}
	if o.Wire != nil {
		w, err := OpenWire(*o.Wire, o.Lock, o.Counters)
		if err != nil {
			return nil, err
		}
		c.Wire = w
	}
	var wire Endpoint
	if c.Wire != nil {
		wire = c.Wire
	}
	c.Route = NewRoute(NewLoopback(), wire, o.Counters)
	c.Capture = NewCapture(c.Route, o.Owner, o.Counters)
	c.Faults = NewFaultInjector(c.Capture, o.Lock, o.AfterFunc, o.Counters)
	c.Head = c.Faults
	c.Head.Attach(disp)
	if c.Wire != nil {
		c.Wire.Start()
	}
	return c, nil
}

// Close closes every endpoint of the chain, top first.
func (c *Chain) Close() { c.Head.Close() }
