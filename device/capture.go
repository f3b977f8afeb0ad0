package device

import (
	"bytes"
	"context"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"rdmafs/roce"
)

// Packet capture: every packet the device sends (loopback, wire, or lost
// for want of a route) and every packet it receives from the wire, as
// RoCEv2 datagrams in a classic pcap stream (LINKTYPE_RAW: bare IPv4 or
// IPv6 packets, which tshark decodes as RRoCE by the UDP port). A loopback
// packet appears once, like a packet on lo. Packets between IPv4-mapped
// GIDs are IPv4 datagrams (IP ID 0, DF, TTL 64, UDP checksum 0, ICRC) as
// the wire carries them; other GIDs (the default fe80:: GID) give IPv6
// datagrams. Wire packets are captured as the very bytes sent or received.
//
// A capture is opened for a viewer (OpenCaptureAs): root sees every
// packet; any other uid sees only the packets of QPs it owns, a packet
// belonging to the local QP that sent it and to the local QP it is
// delivered to. A packet whose QPs are unknown (malformed or failing the
// ICRC on the wire, sent to a QPN nobody has, or from a QP destroyed
// meanwhile) is root's alone. Only local QPNs are looked up: the
// destination QPN of a packet sent on the wire names a QP of another
// device, the source of a packet received from it likewise.
//
// When nobody captures, the cost is one atomic load per packet. Each
// capture has a bounded queue; when its reader falls behind, packets are
// dropped for that capture and counted (capture_drops), never stalling the
// engine.

// captureQueue is how many packets one capture holds for its reader.
const captureQueue = 4096

type captureRec struct {
	ts   time.Time
	data []byte
	// The owners of the local QPs the packet belongs to; 0 (root) where
	// there is none.
	a, b Owner
}

type captureHub struct {
	on     atomic.Bool // some capture is open
	mu     sync.Mutex  // guards subs; taken under Device.mu, never the other way
	subs   map[*CaptureReader]struct{}
	closed chan struct{} // closed with the device
	once   sync.Once
}

func (h *captureHub) init() {
	h.subs = map[*CaptureReader]struct{}{}
	h.closed = make(chan struct{})
}

func (h *captureHub) close() { h.once.Do(func() { close(h.closed) }) }

// captureOwnerLocked is the owner of local QP qpn, or 0 (root's view
// only) when there is none.
func (d *Device) captureOwnerLocked(qpn uint32) Owner {
	if q := d.qps[qpn]; q != nil {
		return q.Owner
	}
	return 0
}

// capturePublish hands one datagram (not kept by the caller) to every open
// capture whose viewer may see it: root, and the owners a and b of the
// local QPs it belongs to.
func (d *Device) capturePublish(data []byte, a, b Owner) {
	h := &d.capture
	rec := captureRec{ts: time.Now(), data: data, a: a, b: b}
	h.mu.Lock()
	for c := range h.subs {
		if c.viewer != 0 && c.viewer != a && c.viewer != b {
			continue
		}
		select {
		case c.ch <- rec:
		default:
			d.Counters.CaptureDrops.Add(1)
		}
	}
	h.mu.Unlock()
}

// captureLocked records p as a datagram built from its fields (loopback
// and unrouted packets; the wire captures its own bytes). local says
// whether p's destination QP is on this device (loopback).
func (d *Device) captureLocked(p *packet, local bool) {
	var rp roce.Packet
	p.toWire(&rp)
	v4 := isV4Mapped(p.sgid) && isV4Mapped(p.dgid)
	head := roce.HeadroomIPv6
	if v4 {
		head = roce.HeadroomIPv4
	}
	b := make([]byte, head, head+rp.IBLen()+roce.ICRCLen)
	b, err := rp.AppendIB(b)
	if err != nil {
		return
	}
	if v4 {
		b, err = roce.EncapIPv4(b, [4]byte(p.sgid[12:]), [4]byte(p.dgid[12:]), udpSourcePort(p.srcQPN), 0, 0, 64)
	} else {
		b, err = roce.EncapIPv6(b, p.sgid, p.dgid, udpSourcePort(p.srcQPN), 0, 0, 64)
	}
	if err != nil {
		return
	}
	src := d.captureOwnerLocked(p.srcQPN)
	dst := src
	if local {
		dst = d.captureOwnerLocked(p.destQPN)
	}
	d.capturePublish(b, src, dst)
}

// CaptureReader is one open capture: its Next calls return the pcap
// stream (the file header first, then records) in chunks.
type CaptureReader struct {
	d       *Device
	viewer  Owner // 0: every packet
	ch      chan captureRec
	started bool
	buf     bytes.Buffer
	pw      *roce.PcapWriter
	once    sync.Once
}

// OpenCapture starts a capture of every packet (root's view). Close it to
// stop.
func (d *Device) OpenCapture() *CaptureReader { return d.OpenCaptureAs(0) }

// OpenCaptureAs starts a capture of the packets viewer may see: every
// packet for root (0), else those of the QPs viewer owns.
func (d *Device) OpenCaptureAs(viewer Owner) *CaptureReader {
	c := &CaptureReader{d: d, viewer: viewer, ch: make(chan captureRec, captureQueue)}
	h := &d.capture
	h.mu.Lock()
	h.subs[c] = struct{}{}
	h.on.Store(true)
	h.mu.Unlock()
	return c
}

// Close stops the capture; packets queued for it are discarded.
func (c *CaptureReader) Close() error {
	c.once.Do(func() {
		h := &c.d.capture
		h.mu.Lock()
		delete(h.subs, c)
		h.on.Store(len(h.subs) > 0)
		h.mu.Unlock()
	})
	return nil
}

// Next returns the next chunk of the pcap stream: the file header on the
// first call, then every record queued, blocking until there is one. It
// returns nothing (and no error) once the device is closed, and ctx's
// error when ctx ends first. One goroutine at a time.
func (c *CaptureReader) Next(ctx context.Context) ([]byte, error) {
	c.buf.Reset()
	if !c.started {
		c.started = true
		c.pw, _ = roce.NewPcapWriter(&c.buf, roce.LinkTypeRaw)
		return bytes.Clone(c.buf.Bytes()), nil
	}
	select {
	case r := <-c.ch:
		c.pw.WritePacket(r.ts, r.data)
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-c.d.capture.closed:
		return nil, nil
	}
	for c.buf.Len() < 1<<20 {
		select {
		case r := <-c.ch:
			c.pw.WritePacket(r.ts, r.data)
			continue
		default:
		}
		break
	}
	return bytes.Clone(c.buf.Bytes()), nil
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
