package device

import (
	"rdmafs/link"
	"rdmafs/qp"
)

// The direct path between two QPs of one device, rdmavt's rvt_ruc_loopback
// in the shape of this engine. A packet for a QP of the same device does
// not go through the link chain: at the end of the sending QP's turn it is
// put on the receiving QP's queue, and that QP's turn runs next, in the
// same engine batch under the same hold of Device.mu, instead of waiting in
// the scheduler's run queue for a later batch; its ACKs come back the same
// way. Between two RC QPs a SEND, WRITE or READ response carries up to
// superSeg bytes per packet (whole path-MTU segments, each still a PSN):
// one copy per message instead of one per MTU.
//
// The transport does not know which path a packet took. The requester,
// responder and completer run exactly as for the packet path, so every
// rule holds on both: PSNs advance (a packet of n segments takes n PSNs),
// the receiver's RNR NAK carries min_rnr_timer and the sender's RNR timer
// and retry count work as on a link, NAKs and remote access errors move
// the QPs to ERR as VERBS.md §4.4 says, UD receives get their GRH, and the
// counters count the segments a link would have carried.
//
// A packet takes the chain instead whenever something must see it: a
// capture is open (so that what capture shows is every packet, at the path
// MTU), a fault rule applies to its QPs (so that drops, duplicates and
// delays hit it), something stands in front of the chain (a test's lossy
// link or its wire to the device's own address), or Config.PacketLoopback
// asks for the chain always.
// The choice is made per packet when its turn's batch is flushed; the
// segment size when the packet is built, by the same rule, so a capture
// opened between the two sees one oversized packet at most.

// superSeg is the most payload a packet on the direct path carries.
const superSeg = 64 << 10

// directLocked reports whether packets between QPs src and dst of this
// device take the direct path.
func (d *Device) directLocked(src, dst uint32) bool {
	if !d.chainDirectLocked() {
		return false
	}
	f := d.chain.Faults.Get()
	return !f.Active() || f.QPN != 0 && f.QPN != src && f.QPN != dst
}

// chainDirectLocked reports whether the chain lets local packets take the
// direct path: no capture is open, and nothing stands in front of the
// chain (the endpoint the device writes to is the chain's own head; a
// test's lossy link is not).
func (d *Device) chainDirectLocked() bool {
	return !d.cfg.PacketLoopback && d.link == d.chain.Head && !d.chain.Capture.On()
}

// segmentLocked is how many payload bytes q's next packet of w carries,
// at offset w.sent: one path MTU, or on the direct path between RC QPs as
// many whole MTUs as fit in superSeg and in the SGE the bytes come from
// (so that the payload aliases the MR instead of being gathered into a
// buffer of its own), within the PSN window.
func (q *QP) segmentLocked(w *sendWQE, mtu int, window int32) int {
	rest := w.length - w.sent
	if rest <= uint64(mtu) || window == maxUnackedPSNs {
		return int(min(rest, uint64(mtu)))
	}
	n := min(rest, superSeg)
	if w.wr.SendFlags&qp.SendInline == 0 {
		n = min(n, sgeRun(w.wr.SGL, w.sent))
	}
	room := int(window - q.req.psn.Sub(q.comp.psn))
	n = min(n, uint64(max(room, 1))*uint64(mtu))
	if n < rest {
		n -= n % uint64(mtu)
	}
	if n == 0 {
		return mtu
	}
	return int(n)
}

// windowLocked is how many PSNs q's requester may have unacknowledged: rxe's
// 128, or on the direct path between RC QPs (where segments go 64 KiB at a
// time and nothing is lost on the way) directWindow, so that a turn of the
// requester moves many large messages, not eight.
func (q *QP) windowLocked() int32 {
	if q.Type == qp.TypeRC && q.dev.isLocalGID(q.attr.AH.DGID) && q.dev.directLocked(q.QPN, q.attr.DestQPNum) {
		return directWindow
	}
	return maxUnackedPSNs
}

// directWindow is the PSN window of the direct path: 128 packets of 64
// KiB at a 1024-byte MTU, 512 at 4096.
const directWindow = 8192

// sgeRun is how many bytes of sgl follow offset off within one SGE.
func sgeRun(sgl []qp.SGE, off uint64) uint64 {
	for _, s := range sgl {
		if l := uint64(s.Length); off < l {
			return l - off
		} else {
			off -= l
		}
	}
	return 0
}

// directTxLocked delivers the packets of pkts that engine e's turn (or a
// verb, with e not batching) sent and that take the direct path, and
// returns the others, in their order, for the chain. Inside an engine turn
// the receiving QPs of the same engine run soon (runSoonLocked); others
// are scheduled.
func (d *Device) directTxLocked(pkts []link.Packet, e *engine) []link.Packet {
	if !d.chainDirectLocked() {
		return pkts
	}
	f := d.chain.Faults.Get()
	rest := pkts[:0]
	var n, bytes uint64
	for _, lp := range pkts {
		p := lp.(*packet)
		if p.route != link.Local || f.Active() && (f.QPN == 0 || f.QPN == p.srcQPN || f.QPN == p.DestQP) {
			rest = append(rest, lp)
			continue
		}
		n += uint64(p.npsn())
		bytes += uint64(len(p.Payload))
		p.local = true
		d.acceptLocked(p, e)
	}
	// Sent and received at once: both sides' counters, once per batch.
	if n > 0 {
		d.Counters.PacketsSent.Add(n)
		d.Counters.BytesSent.Add(bytes)
		d.Counters.PacketsRecv.Add(n)
		d.Counters.BytesRecv.Add(bytes)
		d.Counters.DirectPackets.Add(n)
	}
	return rest
}

// wakeLocked makes q run for a packet it was given by engine cur (nil:
// outside an engine's turns): soon if a direct delivery of cur's turn
// gave it and q is cur's, else through q's engine's scheduler.
func (d *Device) wakeLocked(q *QP, p *packet, cur *engine) {
	if cur != nil && p.local && cur.txBatching && !d.cfg.PacketLoopback && q.eng() == cur {
		if !q.soon {
			q.soon = true
			cur.soon = append(cur.soon, q)
		}
		return
	}
	q.eng().schedule(q)
}

// soonBudget bounds the turns runSoonLocked runs for one turn of the
// batch: a ping-pong of two QPs (a WRITE stream and its ACKs) goes on in
// the scheduler's next batch after that, so that the QPs of the batch and
// the verbs waiting for Device.mu get their turn.
const soonBudget = 64

// runSoonLocked runs the turns of the QPs that direct deliveries made
// runnable, in the order they were given packets, until none is left;
// past the budget, or when someone waits for Device.mu, the rest go to the
// scheduler. Called by the engine after each turn of its batch.
func (e *engine) runSoonLocked() {
	d := e.d
	for n := 0; e.soonHead < len(e.soon); n++ {
		q := e.soon[e.soonHead]
		e.soon[e.soonHead] = nil
		e.soonHead++
		q.soon = false
		if q.destroyed {
			continue
		}
		if n >= soonBudget || d.mu.contended() || q.wantAll && !e.exclusive {
			e.schedule(q)
			continue
		}
		e.batchTxLocked(true)
		q.runLocked()
		e.batchTxLocked(false)
		e.ranLocked(q)
	}
	e.soon, e.soonHead = e.soon[:0], 0
}

// npsn is how many PSNs p takes: 1, but on the direct path, where it
// carries span path-MTU segments (loopback.go).
func (p *packet) npsn() uint32 {
	if p.span == 0 {
		return 1
	}
	return uint32(p.span)
}

// lastPSN is the PSN of p's last segment.
func (p *packet) lastPSN() qp.PSN { return p.psn().Add(p.npsn() - 1) }
