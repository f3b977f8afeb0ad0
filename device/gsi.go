package device

import (
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"

	"rdmafs/qp"
	"rdmafs/roce"
)

// The GSI: QP1, the management QP that the connection manager (package cm)
// speaks through. It is no verbs object: nobody creates, modifies or
// posts to it. A UD SEND addressed to QPN 1 with the GSI's Q_Key, from
// loopback or the wire, is handed to the handler that SetGSI registered;
// SendMAD sends one from QPN 1 through the device's link, so captures show
// it and fault rules apply to it as to any packet.
//
// The receive path runs under Device.mu, and the handler may call back
// into the device (SendMAD), so the two are decoupled by a bounded queue:
// receiveLocked only appends to it (a full queue drops and counts, as a
// NIC's receive ring would), and one goroutine of the device calls the
// handler, never holding Device.mu.

// GSI constants (IBA 13.5; ib_mad.h).
const (
	GSIQPN   = 1
	GSIQKey  = 0x80010000
	GSIPKey  = 0xFFFF
	MADBytes = 256
)

// ControlledQKey is the Q_Key bit that marks a controlled Q_Key (IBA
// 10.2.4): only a privileged consumer may give a QP one (fsnode checks
// CAP_NET_RAW, as ib_uverbs does), and a send WR's remote Q_Key with it
// means "the QP's own" (requester.go), so no unprivileged QP sends one.
const ControlledQKey = 0x80000000

// gsiQueueLen bounds the MADs waiting for the handler.
const gsiQueueLen = 1024

// GSIMessage is one MAD received on QP1.
type GSIMessage struct {
	// SGID is the sender's GID: its port GID on loopback, ::ffff:IPv4
	// from the wire. Answers go there.
	SGID [16]byte
	// SrcAddr is the sender's IPv4 address when the MAD came from the wire.
	SrcAddr netip.Addr
	SrcQPN  uint32
	PKey    uint16
	// Local is set when the MAD came from this device (loopback).
	Local bool
	MAD   [MADBytes]byte
}

// gsi is the device's QP1.
type gsi struct {
	once    sync.Once
	handler atomic.Pointer[func(GSIMessage)]
	queue   chan GSIMessage
	done    chan struct{}
	stopped chan struct{}
	psn     uint32 // lockcheck:guarded Device.mu

	recv, sent, droppedSize, droppedQKey, droppedOpcode, droppedFull, droppedNoHandler, droppedSource atomic.Uint64
}

// SetGSI registers the handler of MADs received on QP1 (replacing the
// one before; nil removes it) and, the first time, starts the goroutine
// that calls it, in arrival order, one at a time. Without a handler MADs
// are dropped and counted.
func (d *Device) SetGSI(handler func(GSIMessage)) {
	g := &d.gsi
	if handler == nil {
		g.handler.Store(nil)
	} else {
		g.handler.Store(&handler)
	}
	g.once.Do(func() {
		d.mu.Lock()
		g.queue = make(chan GSIMessage, gsiQueueLen)
		g.done = make(chan struct{})
		g.stopped = make(chan struct{})
		closed := d.closed
		d.mu.Unlock()
		if closed {
			close(g.stopped)
			return
		}
		go g.run()
	})
}

func (g *gsi) run() {
	defer close(g.stopped)
	for {
		select {
		case <-g.done:
			return
		case m := <-g.queue:
			if h := g.handler.Load(); h != nil {
				(*h)(m)
			} else {
				g.droppedNoHandler.Add(1)
			}
		}
	}
}

// stopGSI ends the handler goroutine (Device.Close; not under Device.mu).
func (d *Device) stopGSI() {
	g := &d.gsi
	d.mu.Lock()
	done := g.done
	d.mu.Unlock()
	if done == nil {
		return
	}
	select {
	case <-done:
	default:
		close(done)
	}
	<-g.stopped
}

// gsiReceiveLocked takes a packet for QPN 1: any source may send to the
// GSI (it is the management QP), but only a UD SEND of exactly one MAD
// with the GSI's Q_Key gets to the handler.
func (d *Device) gsiReceiveLocked(p *packet, cur *engine) {
	g := &d.gsi
	defer d.poolLocked(cur).put(p)
	switch {
	case p.Opcode != roce.TransportUD|roce.OpSendOnly:
		g.droppedOpcode.Add(1)
		d.Counters.DroppedPackets.Add(1)
		return
	case p.QKey != GSIQKey:
		g.droppedQKey.Add(1)
		d.Counters.QKeyViolations.Add(1)
		d.Counters.DroppedPackets.Add(1)
		return
	case p.local && p.srcQPN != GSIQPN:
		// On this device only the CM agent speaks for QP1: a local QP
		// that reached it (a privileged one with the GSI's Q_Key) would
		// be taken for the agent of another port.
		g.droppedSource.Add(1)
		d.Counters.DroppedPackets.Add(1)
		return
	case len(p.Payload) != MADBytes:
		g.droppedSize.Add(1)
		d.Counters.DroppedPackets.Add(1)
		return
	case g.queue == nil || g.handler.Load() == nil:
		g.droppedNoHandler.Add(1)
		d.Counters.DroppedPackets.Add(1)
		return
	}
	m := GSIMessage{SGID: p.sgid, SrcQPN: p.SrcQP, PKey: GSIPKey, Local: p.local}
	if !p.local && isV4Mapped(p.sgid) {
		m.SrcAddr = netip.AddrFrom4([4]byte(p.sgid[12:]))
	}
	copy(m.MAD[:], p.Payload)
	select {
	case g.queue <- m:
		g.recv.Add(1)
	default:
		g.droppedFull.Add(1)
		d.Counters.DroppedPackets.Add(1)
	}
}

// SendMAD sends one MAD from QPN 1 to QPN 1 of the port with GID dgid: the
// device's own GID is loopback, an IPv4-mapped GID the wire (with an
// address). Like any UD send it may be lost; it fails only when the device
// is closed.
func (d *Device) SendMAD(dgid [16]byte, mad [MADBytes]byte) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return errf("send_mad", syscall.ENODEV, "device is closed")
	}
	e := d.engines[0] // all of Device.mu held: no engine's turn runs
	p := e.pool.get()
	p.Opcode = roce.TransportUD | roce.OpSendOnly
	p.sgid, p.dgid = d.cfg.GID, dgid
	p.srcQPN, p.DestQP = GSIQPN, GSIQPN
	p.QKey, p.SrcQP = GSIQKey, GSIQPN
	p.setPSN(d.gsi.nextPSNLocked())
	p.buf = append(p.buf[:0], mad[:]...)
	p.Payload = p.buf
	d.gsi.sent.Add(1)
	e.xmitLocked(p)
	return nil
}

func (g *gsi) nextPSNLocked() (psn qp.PSN) {
	psn = qp.PSN(g.psn)
	g.psn = (g.psn + 1) & 0xFFFFFF
	return psn
}

// GSICounters are QP1's counters: MADs handed to the handler and sent,
// and what was dropped and why.
func (d *Device) GSICounters() []Counter {
	g := &d.gsi
	return []Counter{
		{"gsi_recv", g.recv.Load()},
		{"gsi_sent", g.sent.Load()},
		{"gsi_dropped_size", g.droppedSize.Load()},
		{"gsi_dropped_qkey", g.droppedQKey.Load()},
		{"gsi_dropped_opcode", g.droppedOpcode.Load()},
		{"gsi_dropped_full", g.droppedFull.Load()},
		{"gsi_dropped_no_handler", g.droppedNoHandler.Load()},
		{"gsi_dropped_source", g.droppedSource.Load()},
	}
}
