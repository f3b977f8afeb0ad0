package device

import (
	"rdmafs/link"
	"rdmafs/qp"
	"rdmafs/roce"
)

// transportOf maps a QP type to its BTH transport bits.
func transportOf(t qp.Type) roce.Opcode {
	switch t {
	case qp.TypeUC:
		return roce.TransportUC
	case qp.TypeUD:
		return roce.TransportUD
	case qp.TypeXRCSend, qp.TypeXRCRecv:
		return roce.TransportXRC
	}
	return roce.TransportRC
}

// engineOpcode reports whether the engine executes or answers packets of
// opcode o: every valid RC, UC and UD opcode but FLUSH, which it does not
// implement (a FLUSH is dropped, as an unknown opcode is).
func engineOpcode(o roce.Opcode) bool {
	c := o.Class()
	return c != 0 && c&roce.ClassFlush == 0
}

// AETH syndromes (IBA 9.3.5; VERBS.md §5.2).
const (
	aethACK          = 0x00
	aethRNR          = 0x20
	aethNAK          = 0x60
	aethNAKSeq       = 0x60
	aethNAKInvReq    = 0x61
	aethNAKRemAccess = 0x62
	aethNAKRemOp     = 0x63
	aethTypeMask     = 0xE0
)

// packet is one IB transport packet: the BTH fields and the extension
// headers its opcode carries, plus the addressing that the network layer
// (loopback here, UDP/IP for RoCEv2) provides. Payload may alias the memory
// of the MR named by mr; see Device.detachPacketsLocked.
type packet struct {
	// The BTH and extension headers, in the wire's own vocabulary; toWire
	// and fromWire add only what the engine leaves to the wire.
	roce.Packet
	// span is how many path-MTU segments (and PSNs) the payload holds on
	// the direct path (loopback.go); 0 is one, as on a link.
	span uint16

	sgid, dgid [16]byte
	srcQPN     uint32 // the sending QP (its UDP source port on the wire)
	// local is set for a packet that loopback delivers: srcQPN is then
	// the QP that sent it, as the device itself vouches. From the wire
	// only the UDP source port (srcPort) says anything about the sender.
	local bool
	// handed is set for a packet directTxLocked gave its QP without the
	// chain (loopback.go).
	handed  bool
	srcPort uint16
	// The IPv4 header a UD packet arrived with from the wire, for the
	// receive buffer's GRH.
	ipHdr    [20]byte
	hasIPHdr bool

	mr   *MR    // MR payload aliases, nil if payload is owned
	buf  []byte // owned storage for payload
	next *packet
	dev  *Device // whose pool the packet is from

	// The route the device chose (routeLocked) and, on the wire, the
	// IPv4 address it goes to.
	route link.Route
	hop   [4]byte
}

// psn and setPSN give the BTH's PSN the transport's 24-bit arithmetic
// (qp.PSN); roce keeps it a plain uint32.
func (p *packet) psn() qp.PSN { return qp.PSN(p.PSN) }

func (p *packet) setPSN(n qp.PSN) { p.PSN = uint32(n) }

// packetPool is a free list of packets, one per engine (engine.pool): an
// engine's turns use its own under its stripe of Device.mu, a holder of
// all of Device.mu the first engine's (poolLocked), so it needs no lock
// of its own. It keeps at most maxPooledPackets (the rest go to the
// garbage collector), so a burst leaves no lasting trace in the heap:
// what a large message had in flight is not kept for ever.
type packetPool struct {
	dev  *Device
	free *packet
	n    int
}

// maxPooledPackets bounds the pool: enough for every packet the engine has
// in flight in a busy turn (the READ window, the unacknowledged PSNs of a
// few QPs), a few MiB of buffers at most.
const maxPooledPackets = 512

// maxPooledBuf is the largest buffer a pooled packet keeps (a 4096-byte
// MTU's payload and some).
const maxPooledBuf = 8192

func (pp *packetPool) get() *packet {
	p := pp.free
	if p == nil {
		return &packet{dev: pp.dev}
	}
	pp.free = p.next
	pp.n--
	buf := p.buf
	*p = packet{buf: buf[:0], dev: pp.dev}
	return p
}

func (pp *packetPool) put(p *packet) {
	if pp.n >= maxPooledPackets || cap(p.buf) > maxPooledBuf {
		return
	}
	p.Payload, p.mr = nil, nil
	p.next = pp.free
	pp.free = p
	pp.n++
}

// own copies an aliased payload into the packet's own storage.
func (p *packet) own() {
	if p.mr == nil {
		return
	}
	p.buf = append(p.buf[:0], p.Payload...)
	p.Payload = p.buf
	p.mr = nil
}

// inboxLen is how many packets wait in q's inbox (any engine may ask).
func (q *QP) inboxLen() int {
	q.inMu.Lock()
	defer q.inMu.Unlock()
	return len(q.inbox)
}

// takeInboxLocked accepts the packets other engines delivered to q, at
// the start of its turn, as if its own engine had received them, while
// its receive queues are short: the rest wait in the inbox, whose length
// holds the senders back (requesterLocked), so a fast sender on another
// engine never overflows q's queues. It reports whether some are left.
func (q *QP) takeInboxLocked() bool {
	if !q.inboxed.Load() {
		return false
	}
	q.inMu.Lock()
	in := q.inbox
	n := 0
	for n < len(in) && len(q.resp.reqIn) < inboxTake && len(q.comp.respIn) < readWindow {
		// Accepted under inMu: the order of the inbox is kept, and
		// acceptLocked takes no lock of its own for q's engine.
		q.dev.acceptLocked(in[n], q.eng())
		in[n] = nil
		n++
	}
	if n == len(in) {
		q.inbox = q.spareIn[:0]
		q.spareIn = in[:0]
		q.inboxed.Store(false)
	} else {
		q.inbox = in[:copy(in, in[n:])]
		clear(in[len(q.inbox):])
	}
	left := len(q.inbox) > 0
	q.inMu.Unlock()
	return left
}

// inboxTake is how long q's queue of requests may grow from the inbox in
// one turn: twice a turn's budget. Responses stop at readWindow, so that
// READ responses from a peer on another engine wait in the inbox, where
// its READ window sees them (readStepLocked), not in q's queue.
const inboxTake = 2 * respondBudget

// detachPacketsLocked gives every queued packet that aliases mr its own
// copy, before mr's memory goes away.
func (d *Device) detachPacketsLocked(mr *MR) {
	for _, q := range d.qps {
		for _, in := range [][]*packet{q.resp.reqIn, q.comp.respIn, q.inbox} {
			for _, p := range in {
				// runLocked clears the slots of packets it has taken.
				if p != nil && p.mr == mr {
					p.own()
				}
			}
		}
	}
}

// receiveLocked is the receive entry point every packet takes, whatever
// link brought it. It returns the QP whose receive queue the packet was
// for (nil: no QP took it), so that the wire can back off from a full one.
//
// cur is the engine whose turn delivers the packet, holding its stripe of
// Device.mu, or nil for a caller holding all of it (the wire's receive
// goroutine, the fault injector's timers, a verb).
func (d *Device) receiveLocked(p *packet, cur *engine) *QP {
	shard := -1 // the common word
	if cur != nil {
		shard = cur.idx
	}
	d.Counters.PacketsRecv.Add(shard, uint64(p.npsn()))
	d.Counters.BytesRecv.Add(shard, uint64(len(p.Payload)))
	return d.acceptLocked(p, cur)
}

// acceptLocked is receiveLocked past the device's packet counters, which
// the direct path adds once for a whole batch. A packet that engine cur
// delivers to a QP of another engine goes to that QP's inbox, and its
// engine accepts it in the QP's next turn (takeInboxLocked): cur may read
// only what verbs change (under all of Device.mu), not what turns do.
func (d *Device) acceptLocked(p *packet, cur *engine) *QP {
	if p.DestQP == MulticastQPN {
		d.multicastLocked(p, cur)
		return nil
	}
	if p.DestQP == GSIQPN {
		d.gsiReceiveLocked(p, cur)
		return nil
	}
	q := d.qps[p.DestQP]
	if q != nil && cur != nil && len(d.engines) > 1 && q.eng() != cur && !q.destroyed {
		q.inMu.Lock()
		q.inbox = append(q.inbox, p)
		q.inboxed.Store(true)
		q.inMu.Unlock()
		d.Counters.CrossEnginePackets.Add(cur.idx, 1)
		q.eng().schedule(q)
		return q
	}
	// A connected QP takes packets only from the GID it is connected to
	// (rxe's check_addr).
	if q == nil || q.destroyed || !engineOpcode(p.Opcode) || p.Opcode&roce.TransportMask != transportOf(q.Type) ||
		q.Type != qp.TypeUD && p.sgid != q.attr.AH.DGID {
		d.Counters.DroppedPackets.Add(1)
		d.poolLocked(cur).put(p)
		return nil
	}
	if q.Type.XRC() && (p.Opcode.Class()&roce.ClassRequest != 0) != (q.Type == qp.TypeXRCRecv) {
		// Each half of XRC has one direction: requests go to an
		// XRC_RECV QP, responses to an XRC_SEND QP.
		q.Counters.Dropped++
		d.Counters.DroppedPackets.Add(1)
		d.poolLocked(cur).put(p)
		return nil
	}
	if q.Type != qp.TypeUD && !q.fromPeerLocked(p) {
		// Another QP aims at this one: dropped before the transport sees
		// it, so the victim's PSNs, state and answers stay as they were.
		q.Counters.ForeignDropped++
		d.Counters.ForeignPacketsDropped.Add(1)
		d.Counters.DroppedPackets.Add(1)
		d.poolLocked(cur).put(p)
		return nil
	}
	in := &q.comp.respIn
	if p.Opcode.Class()&roce.ClassRequest != 0 {
		in = &q.resp.reqIn
	}
	if len(*in) >= maxQueuedPackets {
		// The QP's receive queue is full (a NIC's receive ring
		// overflowing): dropped, and RC recovers it by retransmission.
		q.Counters.Dropped++
		q.Counters.QueueOverflows++
		d.Counters.DroppedPackets.Add(1)
		d.poolLocked(cur).put(p)
		q.eng().schedule(q)
		return q
	}
	*in = append(*in, p)
	q.Counters.BytesRecv += uint64(len(p.Payload))
	q.inPeak = max(q.inPeak, len(*in))
	d.wakeLocked(q, p, cur)
	return q
}

// peerPortLocked reports whether port is a UDP source port q's peer
// sends from: rdmafs or an older rxe (a hash of its QPN), or a Linux 5.17+
// rxe (from the flow label, which both ends of a connection set alike, or
// from the two QPNs).
func (q *QP) peerPortLocked(port uint16) bool {
	peer := q.attr.DestQPNum
	return port == udpSourcePort(peer) || port == link.FlowSourcePort(q.attr.AH.FlowLabel, peer, q.QPN) ||
		port == link.FlowSourcePort(0, peer, q.QPN)
}

// queuedLocked is the longer of q's two receive queues.
func (q *QP) queuedLocked() int { return max(len(q.resp.reqIn), len(q.comp.respIn)) }

// maxQueuedPackets bounds each of a QP's two receive queues (requests for
// its responder, responses for its requester). The engine takes at most a
// turn's budget from each per run; a sender that outruns it (many UD
// senders to one QP, a peer device faster than this one) loses packets
// here instead of growing the daemon.
const maxQueuedPackets = 4096

// fromPeerLocked reports whether p, addressed to the connected (RC or UC)
// QP q from q's peer GID, comes from the QP q is connected to.
//
// On loopback the device knows the sender: it must be q's dest_qp_num, a
// live QP of this device connected back to q. Anything else is another
// local QP (another user's, say) that named q's QPN; IBA leaves such a
// packet to the address check, which on one device every QP passes, so
// the device checks the QPs themselves.
//
// From the wire the source address has been checked already (the caller,
// against the peer's GID); what is left is the UDP source port, which rxe
// and rdmafs derive from the sending QPN (udpSourcePort). A packet from
// another port of the peer's address is another QP or another program on
// that host. RoCEv2 authenticates nothing, so this is all the packet
// allows: whoever can send UDP from the peer's address and port and knows
// the PSN and an rkey still gets in (RELIABILITY.md).
func (q *QP) fromPeerLocked(p *packet) bool {
	if !p.local {
		// The peer is rdmafs or an older rxe (a hash of its QPN), or a
		// Linux 5.17+ rxe (from the flow label, which both ends of a
		// connection set alike, or from the two QPNs).
		return q.dev.cfg.AnySourcePort || q.peerPortLocked(p.srcPort)
	}
	s := q.dev.qps[p.srcQPN]
	return s != nil && !s.destroyed && q.takesFromLocked(s)
}

// takesFromLocked reports whether connected QP q takes the packets of src,
// a QP of this device: of a type q pairs with (qp.Type.Pairs), q
// connected to src at this device's GID and src to q. Packets (acceptLocked, fromPeerLocked) and the direct
// path (directPeerLocked) ask it.
func (q *QP) takesFromLocked(src *QP) bool {
	return q.Type.Pairs(src.Type) && q.attr.DestQPNum == src.QPN && src.attr.DestQPNum == q.QPN &&
		q.attr.AH.DGID == q.dev.cfg.GID
}
