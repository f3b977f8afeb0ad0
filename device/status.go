package device

import (
	"rdmafs/qp"
	"rdmafs/ring"
)

// Gauges of a QP's and a CQ's queues at one moment, for the files that
// show them (qp/N/counters, cq/H/attr) and so for `rdmafs show`. They are
// read under Device.mu, so the numbers of one call agree with each other.

// QueueStatus is how full a QP's work queues are.
type QueueStatus struct {
	// SQPosted is how many send WRs are posted and not completed: the SQ
	// ring's producer index minus its consumer index (slots in use).
	SQPosted uint32
	// SQInFlight is how many of those the requester has started (sent a
	// packet of) and not yet completed: on the wire, or waiting for their
	// ACK or response, or done and waiting to complete in order.
	SQInFlight uint32
	// RQPosted is how many receive WRs are posted and not consumed; 0
	// with an SRQ (srq/H/attr shows its pending WRs).
	RQPosted uint32
	// RNRWait: the requester waits out an RNR NAK's timer.
	RNRWait bool
	// SendPSN is the PSN the requester sends next (it goes back on a
	// retry) and ExpectedPSN the one the responder expects next: the live
	// values, which ibv_query_qp reports in rxe; attr's sq_psn and rq_psn
	// are those the last modify set.
	SendPSN, ExpectedPSN qp.PSN
}

// Queues reports the QP's queue gauges; zero once it is destroyed.
func (q *QP) Queues() QueueStatus {
	d := q.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	var s QueueStatus
	if q.destroyed || d.closed {
		return s // the rings may be unmapped
	}
	// The producer is the client's word: whatever it holds, report no
	// more than the ring has slots.
	s.SQPosted = min(q.sq.LoadProducer()-q.req.sqCons.Tail(), q.sq.SlotCount())
	for i := q.req.sqHead; i != q.req.sqFetched; i++ {
		w := &q.req.swq[i&q.req.sqMask()]
		if w.state != wqePosted && !w.rejected && !w.reserved {
			s.SQInFlight++
		}
	}
	if q.rq != nil {
		s.RQPosted = min(q.rq.LoadProducer()-q.resp.rqCons.Tail(), q.rq.SlotCount())
	}
	s.RNRWait = q.req.waitRNR
	s.SendPSN, s.ExpectedPSN = q.req.psn, q.resp.psn
	return s
}

// CQStatus is a CQ's capacity, fill and notification state.
type CQStatus struct {
	CQE uint32 // capacity (ibv_cq.cqe)
	// Pending is how many completions wait to be polled: the ring's
	// producer index minus the client's consumer index.
	Pending uint32
	// Armed is the notification request in force: "none", "next" or
	// "solicited" (ibv_req_notify_cq, until the event it asked for).
	Armed string
	// Overflowed: the CQ overflowed and takes no completions until it is
	// resized; Overflows counts the times it overflowed.
	Overflowed bool
	Overflows  uint64
}

// Status reports the CQ's gauges; zero once it is destroyed.
func (cq *CQ) Status() CQStatus {
	d := cq.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	s := CQStatus{CQE: cq.CQE, Armed: ring.ArmName(ring.ArmNone), Overflowed: cq.overflowed, Overflows: cq.overflows}
	if d.closed || d.cqs.get(cq.Handle) != cq {
		return s // the ring is unmapped
	}
	s.Pending = min(cq.prod.Head()-cq.ring.LoadConsumer(), cq.ring.SlotCount())
	s.Armed = ring.ArmName(cq.ring.Armed())
	return s
}
