package device

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"syscall"
	"time"

	"rdmafs/link"
	"rdmafs/roce"
)

// The device's side of the link (package link): it builds the chain at
// creation (faults → capture → route: loopback | wire), decides each
// packet's route, and is the chain's dispatcher. It talks to the chain
// only through link.Endpoint and link.Dispatcher, and the chain to it only
// through link.Packet; all of it runs under Device.mu, the chain's lock.
//
// With Config.Addr set, the port's GID is ::ffff:Addr and the device talks
// RoCEv2 on UDP port 4791 of that address (VERBS.md §8). A packet for the
// device's own GID is delivered to its own receive path at once (loopback:
// the same transport, the same receiveLocked, no encoding); a packet for
// an IPv4-mapped GID goes on the wire; anything else has no route and is
// lost (RC retries and times out).

// newChain builds d's link.
func (d *Device) newChain() error {
	o := link.Options{
		Lock:     &d.mu,
		Counters: &d.Counters.Counters,
		Owner: func(qpn uint32) uint32 {
			// lockcheck:ok the chain calls Owner under its lock
			if q := d.qps[qpn]; q != nil {
				return uint32(q.Owner)
			}
			return 0
		},
		AfterFunc: func(t time.Duration, f func()) { d.clock.AfterFunc(t, f) },
	}
	if d.cfg.Addr.IsValid() {
		o.Wire = &link.WireConfig{Addr: d.cfg.Addr, NoCoalesce: d.cfg.NoCoalesce}
		d.wireAddr, d.hasWire = d.cfg.Addr.As4(), true
	}
	c, err := link.NewChain(o, (*dispatcher)(d))
	if err != nil {
		return err
	}
	d.chain, d.link = c, c.Head
	return nil
}

// xmitLocked sends p (the transport is done with it) on its way: the
// device picks the route, the chain does the rest. Inside a turn of engine
// e the packets wait in e.txq and go to the chain as one batch when the
// turn ends (flushTxLocked: one sendmmsg for the wire); anywhere else at
// once.
func (e *engine) xmitLocked(p *packet) {
	e.d.routeLocked(p)
	e.txq = append(e.txq, p)
	if !e.txBatching || len(e.txq) >= maxTxBatch {
		e.flushTxLocked()
	}
}

// maxTxBatch bounds the packets one engine turn holds back: a turn's
// budget is larger (run.go), and the first packets need not wait for the
// last.
const maxTxBatch = 64

// flushTxLocked writes the packets held in e.txq to the chain. With
// several engines the chain has a lock of its own (chainMu): an engine
// holds only its stripe of Device.mu, and chainOwner tells the chain's
// synchronous deliveries (loopback) which engine sends.
func (e *engine) flushTxLocked() {
	if len(e.txq) == 0 {
		return
	}
	d := e.d
	q := e.txq
	// Taken from e while the chain has it: a delivery may make the device
	// send again (not today), which must not write into this batch.
	e.txq = nil
	if rest := d.directTxLocked(q, e); len(rest) > 0 {
		if len(d.engines) > 1 {
			d.chainMu.Lock()
			d.chainOwner = e
			d.link.WritePackets(rest)
			d.chainOwner = nil
			d.chainMu.Unlock()
		} else {
			d.link.WritePackets(rest)
		}
	}
	clear(q)
	if e.txq == nil {
		e.txq = q[:0]
	}
}

// batchTxLocked starts (on) or ends holding packets back for one batch;
// ending sends what is held.
func (e *engine) batchTxLocked(on bool) {
	if !on {
		e.flushTxLocked()
		e.flushCountsLocked()
	}
	e.txBatching = on
}

// chainEngine is the engine whose packets the chain is handling now (for a
// synchronous delivery, and the pool of the packets it clones), or nil
// outside engine turns, when all of Device.mu is held.
func (d *Device) chainEngine() *engine {
	if len(d.engines) == 1 {
		return d.engines[0]
	}
	// lockcheck:ok the chain calls back here within flushTxLocked's hold
	// of chainMu, or with all of Device.mu held, when no engine writes it
	return d.chainOwner
}

// poolLocked is the packet pool of engine e, or for a caller holding all
// of Device.mu (e nil) the first engine's.
func (d *Device) poolLocked(e *engine) *packetPool {
	if e == nil {
		e = d.engines[0]
	}
	return &e.pool
}

// routeLocked is the device's routing table: loopback for its own GID, the
// wire for other IPv4-mapped GIDs, no route otherwise.
func (d *Device) routeLocked(p *packet) {
	switch {
	case p.DestQP == MulticastQPN && IsMulticastGID(p.dgid):
		d.routeMcastLocked(p)
	case d.isLocalGID(p.dgid):
		p.route = link.Local
	case d.hasWire && isV4Mapped(p.dgid):
		p.route, p.hop = link.Wire, [4]byte(p.dgid[12:])
	default:
		p.route = link.NoRoute
	}
}

// Meta implements link.Packet.
func (p *packet) Meta() link.Meta {
	return link.Meta{SGID: p.sgid, DGID: p.dgid, SrcQPN: p.srcQPN, DestQPN: p.DestQP,
		Route: p.route, Src: p.dev.wireAddr, Dst: p.hop, PayloadLen: len(p.Payload)}
}

// Header implements link.Packet.
func (p *packet) Header(rp *roce.Packet) { p.toWire(rp) }

// Clone implements link.Packet: a copy with its own payload.
//
// lockcheck:ok a link.Packet method: the chain calls it under its lock
func (p *packet) Clone() link.Packet {
	c := p.dev.poolLocked(p.dev.chainEngine()).get()
	buf := c.buf
	*c = *p
	c.next = nil
	c.buf = append(buf[:0], p.Payload...)
	c.Payload = c.buf
	c.mr = nil
	return c
}

// Hold implements link.Packet.
func (p *packet) Hold() { p.own() }

// Done implements link.Packet.
//
// lockcheck:ok a link.Packet method: the chain calls it under its lock
func (p *packet) Done(sent bool) { p.dev.poolLocked(p.dev.chainEngine()).put(p) }

// dispatcher is the device as the chain's link.Dispatcher.
type dispatcher Device

// DeliverLocal implements link.Dispatcher: loopback, the very packet.
//
// lockcheck:ok a link.Dispatcher method: the chain calls it under its lock
func (x *dispatcher) DeliverLocal(lp link.Packet) {
	p := lp.(*packet)
	p.local = true
	d := (*Device)(x)
	if p.DestQP == MulticastQPN {
		d.Counters.McastLoopback.Add(1)
	}
	d.receiveLocked(p, d.chainEngine())
}

// DeliverDatagrams implements link.Dispatcher: the good datagrams become
// packets on the receive path, ICRC failures are counted against the QP
// they name. It asks the wire to back off while a QP's receive queue is
// over the high-water mark.
//
// lockcheck:ok a link.Dispatcher method: the chain calls it, and the busy
// function it returns, under its lock
func (x *dispatcher) DeliverDatagrams(dgs []link.Datagram) (busy func() bool) {
	d := (*Device)(x)
	if d.closed {
		return nil
	}
	// The receive goroutine, awake for these datagrams and holding
	// Device.mu, runs the turns they make runnable itself (and sends what
	// the turns produce as one batch) instead of waking the engine
	// goroutine for them: one thread of control from recvmmsg to the
	// completion or the answer on the wire (engine.runHeldLocked). With
	// several engines the turns are theirs, run in parallel.
	e := d.engines[0]
	inline := d.inlineTurns()
	if inline {
		e.holdWake()
	}
	var full *QP
	for i := range dgs {
		dg := &dgs[i]
		switch dg.Status {
		case link.BadICRC:
			if q := d.qps[dg.BadQPN]; q != nil {
				q.Counters.ICRCErrors++
			}
			d.cfg.Logf("dropped a packet for qp %d: bad ICRC", dg.BadQPN)
			continue
		case link.OK:
		default:
			d.cfg.Logf("dropped a malformed datagram of %d bytes", len(dg.Raw))
			continue
		}
		p := e.pool.get()
		p.fromWire(&dg.Packet)
		p.srcPort = dg.SrcPort
		p.sgid = roce.GIDFromIPv4(netip.AddrFrom4(dg.Src))
		p.dgid = roce.GIDFromIPv4(netip.AddrFrom4(dg.Dst))
		if p.Opcode&roce.TransportMask == roce.TransportUD {
			p.ipHdr, p.hasIPHdr = [20]byte(dg.IPv4Header()), true
		}
		q := d.receiveLocked(p, nil)
		if q != nil && q.queuedLocked() >= wireHighWater {
			full = q
		}
	}
	if inline {
		e.runHeldLocked()
	}
	if full == nil || full.queuedLocked() < wireHighWater {
		return nil
	}
	return func() bool { return !full.destroyed && full.queuedLocked() >= wireHighWater/2 }
}

// inlineTurns reports whether the goroutines the kernel wakes for a
// device's work (the wire's receive goroutine, the doorbell) run the
// turns it makes runnable themselves: on a device with a wire and one
// engine.
func (d *Device) inlineTurns() bool { return d.hasWire && len(d.engines) == 1 }

// wireHighWater is the queue length (of one of a QP's two receive queues)
// at which the wire stops reading the socket until the engine has taken
// the queue down again (to half of it): a sender that outruns the engine
// then waits in the socket's buffer instead of losing packets at the QP
// queue's cap, which for UC would lose whole messages.
const wireHighWater = maxQueuedPackets / 2

// udpSourcePort is the UDP source port of q's packets (link.SourcePort).
func udpSourcePort(qpn uint32) uint16 { return link.SourcePort(qpn) }

// toWire fills rp with p's wire fields: the engine's headers, with the
// default partition (the engine keeps none) and the 24-bit fields cut to
// their width, as marshalling insists.
func (p *packet) toWire(rp *roce.Packet) {
	*rp = p.Packet
	rp.PKey = 0xFFFF
	rp.DestQP &= roce.QPNMask
	rp.PSN &= roce.PSNMask
	rp.MSN &= roce.MSNMask
	rp.SrcQP &= roce.QPNMask
}

// fromWire fills p (fresh from the pool) from a parsed packet; the payload
// is copied into p's own storage, since rp's aliases the receive buffer.
func (p *packet) fromWire(rp *roce.Packet) {
	p.Packet = *rp
	p.buf = append(p.buf[:0], rp.Payload...)
	p.Payload = p.buf
}

// Faults says what the fault injector does (link.Faults).
type Faults = link.Faults

// SetFaults installs f (an inactive f removes the injector). A packet held
// for reordering is delivered; delayed ones still in flight are lost, as
// if the network had dropped them.
func (d *Device) SetFaults(f Faults) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.checkOpenLocked("faults"); err != nil {
		return err
	}
	d.chain.Faults.Set(f)
	return nil
}

// Faults returns the injector's settings.
func (d *Device) Faults() Faults {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.chain.Faults.Get()
}

// CaptureReader is one open capture (link.CaptureReader): its Next calls
// return the pcap stream in chunks.
type CaptureReader = link.CaptureReader

// OpenCapture starts a capture of every packet (root's view). Close it to
// stop.
func (d *Device) OpenCapture() *CaptureReader { return d.OpenCaptureAs(0) }

// OpenCaptureAs starts a capture of the packets viewer may see: every
// packet for root (0), else those of the QPs viewer owns (link.Capture).
func (d *Device) OpenCaptureAs(viewer Owner) *CaptureReader {
	return d.chain.Capture.Open(uint32(viewer))
}

// MaxCaptureReaders is how many captures one user other than root may
// have open.
const MaxCaptureReaders = link.MaxReadersPerViewer

// OpenCaptureLimited is OpenCaptureAs for a user's open of the capture
// file: a viewer other than root may hold at most
// link.MaxReadersPerViewer captures (EMFILE beyond).
func (d *Device) OpenCaptureLimited(viewer Owner) (*CaptureReader, error) {
	c, err := d.chain.Capture.OpenLimited(uint32(viewer))
	if err != nil {
		return nil, &Error{Op: "open_capture", Errno: syscall.EMFILE, Err: fmt.Errorf("uid %d: %w", viewer, err)}
	}
	return c, nil
}

// Capture writes a pcap stream of the device's packets to w until ctx
// ends (its error), the device closes (nil) or a write fails.
func (d *Device) Capture(ctx context.Context, w io.Writer) error {
	c := d.OpenCapture()
	defer c.Close()
	for {
		b, err := c.Next(ctx)
		if err != nil {
			return err
		}
		if b == nil {
			return nil
		}
		if _, err := w.Write(b); err != nil {
			return err
		}
	}
}
