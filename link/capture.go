package link

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"rdmafs/roce"
)

// Capture records every packet the device sends (loopback, wire, or lost
// for want of a route) and every datagram it receives from the wire, as
// RoCEv2 datagrams in a classic pcap stream (LINKTYPE_RAW: bare IPv4 or
// IPv6 packets, which tshark decodes as RRoCE by the UDP port). It sits
// below the fault injector and above the route, so it sees what the
// network is given (a dropped packet is not there, a duplicate twice); and
// it is the dispatcher of the route, so it sees what the wire brings in,
// even datagrams that do not parse. A loopback packet appears once, when
// sent, like a packet on lo. Packets between IPv4-mapped GIDs, and every
// wire packet, are IPv4 datagrams (IP ID 0, DF, TTL 64, UDP checksum 0,
// ICRC) as the wire carries them (Encode: the same bytes); other GIDs (the
// default fe80:: GID) give IPv6 datagrams. Received datagrams are recorded
// as the very bytes received.
//
// A capture is opened for a viewer (Open): root (0) sees every packet; any
// other uid sees only the packets of QPs it owns, a packet belonging to the
// local QP that sent it and to the local QP it is delivered to. A packet
// whose QPs are unknown (malformed or failing the ICRC on the wire, sent to
// a QPN nobody has, or from a QP destroyed meanwhile) is root's alone. Only
// local QPNs are looked up: the destination QPN of a packet sent on the
// wire names a QP of another device, the source of a packet received from
// it likewise.
//
// When nobody captures, the cost is one atomic load per batch. Each capture
// queues what its reader has not read yet, allocated as packets come (an
// open costs a few hundred bytes, not a queue): at most CaptureQueue
// packets and CaptureBytes bytes for one reader, and at most
// CaptureBytesPerViewer for all the open captures of one viewer together,
// so a user who opens the file many times and never reads holds a few
// MiB of the daemon, not a queue per open. Beyond, packets are dropped for
// that capture and counted (the reader's Dropped, and CaptureDrops),
// never stalling the engine. OpenLimited bounds the captures a viewer
// other than root may hold open (MaxReadersPerViewer).
type Capture struct {
	next  Endpoint
	disp  Dispatcher
	owner func(qpn uint32) uint32
	c     *Counters
	rp    roce.Packet // scratch; under the chain's lock

	on     atomic.Bool                 // some capture is open
	mu     sync.Mutex                  // guards the readers and their queues
	subs   map[*CaptureReader]struct{} // lockcheck:guarded mu
	open   map[uint32]int              // open captures per viewer; lockcheck:guarded mu
	queued map[uint32]int              // bytes queued per viewer, all its captures; lockcheck:guarded mu
	closed chan struct{}               // closed with the chain
	once   sync.Once
}

// Bounds of what captures hold for readers that do not read.
const (
	// CaptureQueue is how many packets one capture holds for its reader.
	CaptureQueue = 4096
	// CaptureBytes is how many bytes of packets one capture holds.
	CaptureBytes = 8 << 20
	// CaptureBytesPerViewer is how many bytes all the captures of one
	// viewer hold together.
	CaptureBytesPerViewer = 16 << 20
	// MaxReadersPerViewer is how many captures a viewer other than root
	// may have open at once (OpenLimited).
	MaxReadersPerViewer = 256
)

// recOverhead is what a queued packet costs beyond its bytes (the record
// and its slot), counted against the byte bounds.
const recOverhead = 64

type captureRec struct {
	ts   time.Time
	data []byte
	// The owners of the local QPs the packet belongs to; 0 (root) where
	// there is none.
	a, b uint32
}

// NewCapture returns a capture decorator in front of next; owner names
// the owner of a local QP (0: none).
func NewCapture(next Endpoint, owner func(qpn uint32) uint32, c *Counters) *Capture {
	return &Capture{next: next, owner: owner, c: c, subs: map[*CaptureReader]struct{}{},
		open: map[uint32]int{}, queued: map[uint32]int{}, closed: make(chan struct{})}
}

// On reports whether some capture is open.
func (h *Capture) On() bool { return h.on.Load() }

// WritePackets implements Endpoint.WritePackets.
func (h *Capture) WritePackets(pkts []Packet) {
	if h.on.Load() {
		for _, p := range pkts {
			h.record(p)
		}
	}
	h.next.WritePackets(pkts)
}

func (h *Capture) record(p Packet) {
	b, err := Encode(nil, p, &h.rp)
	if err != nil {
		return
	}
	m := p.Meta()
	src := h.owner(m.SrcQPN)
	dst := src
	if m.Route == Local {
		dst = h.owner(m.DestQPN)
	}
	h.publish(b, src, dst)
}

// Attach implements Endpoint.Attach: the capture stands between the route
// and d.
func (h *Capture) Attach(d Dispatcher) {
	h.disp = d
	h.next.Attach(h)
}

// Close implements Endpoint.Close: readers see the end of the stream.
func (h *Capture) Close() {
	h.next.Close()
	h.once.Do(func() { close(h.closed) })
}

// DeliverLocal implements Dispatcher.DeliverLocal; the packet was recorded
// when it was written.
func (h *Capture) DeliverLocal(p Packet) { h.disp.DeliverLocal(p) }

// DeliverDatagrams implements Dispatcher.DeliverDatagrams.
func (h *Capture) DeliverDatagrams(dgs []Datagram) func() bool {
	if h.on.Load() {
		for i := range dgs {
			dg := &dgs[i]
			// Only a datagram that parsed names a QP of this device.
			o := uint32(0)
			if dg.Status == OK {
				o = h.owner(dg.Packet.DestQP)
			}
			h.publish(dg.Bytes(), o, o)
		}
	}
	return h.disp.DeliverDatagrams(dgs)
}

// publish hands one datagram (not kept by the caller) to every open
// capture whose viewer may see it: root, and the owners a and b of the
// local QPs it belongs to. Each capture gets its own copy, within its
// bounds and its viewer's.
func (h *Capture) publish(data []byte, a, b uint32) {
	ts := time.Now()
	cost := len(data) + recOverhead
	h.mu.Lock()
	for c := range h.subs {
		if c.viewer != 0 && c.viewer != a && c.viewer != b {
			continue
		}
		if len(c.q) >= CaptureQueue || c.bytes+cost > CaptureBytes || h.queued[c.viewer]+cost > CaptureBytesPerViewer {
			c.dropped++
			h.c.CaptureDrops.Add(1)
			continue
		}
		c.q = append(c.q, captureRec{ts: ts, data: data, a: a, b: b}) // shared by the captures, never written
		c.bytes += cost
		h.queued[c.viewer] += cost
		select {
		case c.wake <- struct{}{}:
		default:
		}
	}
	h.mu.Unlock()
}

// CaptureReader is one open capture: its Next calls return the pcap
// stream (the file header first, then records) in chunks.
type CaptureReader struct {
	h       *Capture
	viewer  uint32        // 0: every packet
	q       []captureRec  // lockcheck:guarded h.mu
	bytes   int           // what q costs; lockcheck:guarded h.mu
	dropped uint64        // lockcheck:guarded h.mu
	wake    chan struct{} // a packet was queued
	started bool
	buf     bytes.Buffer
	pw      *roce.PcapWriter
	once    sync.Once
}

// ErrTooManyReaders is OpenLimited's refusal.
var ErrTooManyReaders = fmt.Errorf("uid has %d captures open (the most one user may hold; close some)", MaxReadersPerViewer)

// Open starts a capture of the packets viewer may see: every packet for
// root (0), else those of the QPs viewer owns. Close it to stop. It takes
// no lock but the capture's own.
func (h *Capture) Open(viewer uint32) *CaptureReader {
	c, _ := h.open1(viewer, false)
	return c
}

// OpenLimited is Open for a user's open of the capture file: a viewer
// other than root may hold at most MaxReadersPerViewer captures
// (ErrTooManyReaders beyond).
func (h *Capture) OpenLimited(viewer uint32) (*CaptureReader, error) {
	return h.open1(viewer, viewer != 0)
}

func (h *Capture) open1(viewer uint32, limit bool) (*CaptureReader, error) {
	c := &CaptureReader{h: h, viewer: viewer, wake: make(chan struct{}, 1)}
	h.mu.Lock()
	defer h.mu.Unlock()
	if limit && h.open[viewer] >= MaxReadersPerViewer {
		return nil, ErrTooManyReaders
	}
	h.open[viewer]++
	h.subs[c] = struct{}{}
	h.on.Store(true)
	return c, nil
}

// Close stops the capture; packets queued for it are discarded.
func (c *CaptureReader) Close() error {
	c.once.Do(func() {
		h := c.h
		h.mu.Lock()
		delete(h.subs, c)
		if h.open[c.viewer]--; h.open[c.viewer] <= 0 {
			delete(h.open, c.viewer)
		}
		h.unqueueLocked(c, len(c.q))
		h.on.Store(len(h.subs) > 0)
		h.mu.Unlock()
	})
	return nil
}

// unqueueLocked drops the first n records of c's queue from the
// accounting and the queue.
func (h *Capture) unqueueLocked(c *CaptureReader, n int) []captureRec {
	out := c.q[:n:n]
	for _, r := range out {
		cost := len(r.data) + recOverhead
		c.bytes -= cost
		if h.queued[c.viewer] -= cost; h.queued[c.viewer] <= 0 {
			delete(h.queued, c.viewer)
		}
	}
	c.q = c.q[n:]
	if len(c.q) == 0 {
		c.q = nil // let a burst's array go
	}
	return out
}

// Dropped is how many packets this capture lost to its bounds.
func (c *CaptureReader) Dropped() uint64 {
	c.h.mu.Lock()
	defer c.h.mu.Unlock()
	return c.dropped
}

// take removes what is queued, up to about max bytes (at least one
// record).
func (c *CaptureReader) take(max int) []captureRec {
	h := c.h
	h.mu.Lock()
	defer h.mu.Unlock()
	n, size := 0, 0
	for n < len(c.q) && (n == 0 || size+len(c.q[n].data) <= max) {
		size += len(c.q[n].data)
		n++
	}
	return h.unqueueLocked(c, n)
}

// Next returns the next chunk of the pcap stream: the file header on the
// first call, then every record queued (up to about 1 MiB), blocking until
// there is one. It returns nothing (and no error) once the chain is
// closed, and ctx's error when ctx ends first. One goroutine at a time.
func (c *CaptureReader) Next(ctx context.Context) ([]byte, error) {
	c.buf.Reset()
	if !c.started {
		c.started = true
		c.pw, _ = roce.NewPcapWriter(&c.buf, roce.LinkTypeRaw)
		return bytes.Clone(c.buf.Bytes()), nil
	}
	for {
		if recs := c.take(1 << 20); len(recs) > 0 {
			for _, r := range recs {
				c.pw.WritePacket(r.ts, r.data)
			}
			return bytes.Clone(c.buf.Bytes()), nil
		}
		select {
		case <-c.wake:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-c.h.closed:
			return nil, nil
		}
	}
}
