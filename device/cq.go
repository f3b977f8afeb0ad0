package device

import (
	"context"
	"fmt"
	"sync"
	"syscall"

	"rdmafs/qp"
	"rdmafs/ring"
)

// CQ is a completion queue: a ring in shared memory that the engine
// produces CQEs into and a client (or Poll) consumes.
type CQ struct {
	dev    *Device
	Handle uint32
	Owner  Owner
	// CQE is the capacity reported to the user (ibv_cq.cqe).
	CQE uint32
	// WCFlags are the optional fields its CQEs carry: the completion
	// timestamps, for which postLocked reads the clock.
	WCFlags qp.CQWCFlags
	// region and ring change on Resize, which holds pollMu and Device.mu.
	region *ring.Region   // lockcheck:guarded dev.mu|pollMu
	ring   *ring.Ring     // lockcheck:guarded dev.mu|pollMu
	prod   *ring.Producer // engine side; lockcheck:guarded dev.mu lockcheck:guarded prodMu
	// prodMu serializes the engines' turns that complete into the CQ (a
	// verb holds all of Device.mu and needs it not).
	prodMu sync.Mutex
	users  int // QPs completing into this CQ; lockcheck:guarded dev.mu
	// overflowed is sticky: an overflowed CQ is in error (IBA 11.4.2.1) and
	// accepts no more entries until resized; overflows counts the times.
	overflowed bool   // lockcheck:guarded dev.mu
	overflows  uint64 // lockcheck:guarded dev.mu

	pollMu sync.Mutex // serializes in-daemon pollers (Poll)
	gone   bool       // destroyed or device closed: the ring is unmapped; lockcheck:guarded pollMu

	evMu      sync.Mutex
	fired     uint64        // events fired; lockcheck:guarded evMu
	taken     uint64        // events taken by WaitEvent; lockcheck:guarded evMu
	evWake    chan struct{} // closed and replaced when an event fires; lockcheck:guarded evMu
	destroyed bool          // lockcheck:guarded evMu
	hook      func()        // called (without blocking) on every event; see SetEventHook; lockcheck:guarded evMu
}

// CreateCQ is ibv_create_cq.
func (d *Device) CreateCQ(owner Owner, req qp.CreateCQ) (*CQ, error) {
	const op = "create_cq"
	if req.CQE < 1 || req.CQE > d.cfg.MaxCQE {
		return nil, errf(op, syscall.EINVAL, "cqe: %d not in 1..%d", req.CQE, d.cfg.MaxCQE)
	}
	if req.CompVector != 0 {
		return nil, errf(op, syscall.EINVAL, "comp_vector: %d (the device has one completion vector, 0)", req.CompVector)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.checkOpenLocked(op); err != nil {
		return nil, err
	}
	if err := admitLocked(d, op, "cq", d.cqs.m, d.cfg.MaxCQ, owner); err != nil {
		return nil, err
	}
	cq := &CQ{dev: d, Owner: owner, WCFlags: req.WCFlags, evWake: make(chan struct{})}
	// lockcheck:ok cq is not shared yet: nobody polls it, pollMu is not needed
	if err := cq.allocRingLocked(req.CQE); err != nil {
		return nil, errf(op, syscall.ENOMEM, "%v", err)
	}
	cq.Handle = d.cqs.add(cq)
	return cq, nil
}

// allocRingLocked gives cq a new ring for cqe entries (creation, Resize).
func (cq *CQ) allocRingLocked(cqe uint32) error {
	slots := ring.SlotCount(cqe)
	region, err := ring.NewRegion(fmt.Sprintf("rdmafs-cq%d", cq.Handle), ring.Size(ring.CQESize, slots))
	if err != nil {
		return err
	}
	r, err := ring.Init(region.Bytes(), ring.KindCQ, ring.CQESize, slots)
	if err != nil {
		region.Close()
		return err
	}
	cq.region, cq.ring, cq.prod, cq.CQE = region, r, ring.NewProducer(r), slots
	return nil
}

// CQ looks a CQ up by handle.
func (d *Device) CQ(h uint32) *CQ { return lookup(d, &d.cqs, h) }

// Region is the CQ ring's shared memory. It changes on Resize.
func (cq *CQ) Region() *ring.Region {
	cq.dev.mu.Lock()
	defer cq.dev.mu.Unlock()
	return cq.region
}

// Overflowed reports whether the CQ has overflowed.
func (cq *CQ) Overflowed() bool {
	cq.dev.mu.Lock()
	defer cq.dev.mu.Unlock()
	return cq.overflowed
}

// Destroy is ibv_destroy_cq: EBUSY while a QP completes into it.
func (cq *CQ) Destroy() error {
	cq.pollMu.Lock() // a Poll in progress reads the ring we unmap
	defer cq.pollMu.Unlock()
	return destroy(cq.dev, &cq.dev.cqs, "destroy_cq", "cq", cq.Handle, cq)
}

func (cq *CQ) owner() Owner { return cq.Owner }

func (cq *CQ) usersLocked() (int, string) { return cq.users, "cq %d is used by %d QPs" }

// releaseLocked runs under pollMu too (Destroy), which guards gone, and
// wakes the WaitEvent callers with ENOENT.
func (cq *CQ) releaseLocked() {
	cq.gone = true
	cq.region.Close()
	cq.evMu.Lock()
	cq.destroyed = true
	close(cq.evWake)
	cq.evWake = make(chan struct{})
	cq.evMu.Unlock()
}

// Resize is ibv_resize_cq: the live entries move to a new ring, which
// clients must map again. The new size must hold them (EINVAL otherwise).
func (cq *CQ) Resize(cqe uint32) error {
	const op = "resize_cq"
	d := cq.dev
	if cqe < 1 || cqe > d.cfg.MaxCQE {
		return errf(op, syscall.EINVAL, "cqe: %d not in 1..%d", cqe, d.cfg.MaxCQE)
	}
	cq.pollMu.Lock()
	defer cq.pollMu.Unlock()
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.cqs.live(op, "cq", cq.Handle, cq); err != nil {
		return err
	}
	if err := d.checkOpenLocked(op); err != nil {
		return err
	}
	cons := ring.NewConsumer(cq.ring)
	n, err := cons.Pending()
	if err != nil {
		n = 0 // a corrupt consumer index: the live entries are unknowable
	}
	if ring.SlotCount(cqe) < n {
		return errf(op, syscall.EINVAL, "cqe: %d cannot hold the %d completions in the queue", cqe, n)
	}
	old, oldRing := cq.region, cq.ring
	armed := oldRing.Armed()
	if err := cq.allocRingLocked(cqe); err != nil {
		cq.region, cq.ring = old, oldRing
		return errf(op, syscall.ENOMEM, "%v", err)
	}
	for i := uint32(0); i < n; i++ {
		copy(cq.prod.Next(), cons.Peek(i))
		cq.prod.Advance()
	}
	cq.prod.Publish()
	cq.ring.SetArmed(armed)
	cq.overflowed = false
	old.Close()
	return nil
}

// postLocked writes one CQE; false when the CQ is full (overflow: cq_err is
// raised once and the caller moves its QP to ERR, as rdmavt does). e is
// the engine of the QP that completes, whose share of the counters it
// adds to.
func (cq *CQ) postLocked(wc *qp.WC, solicited bool, e *engine) bool {
	d := cq.dev
	if len(d.engines) > 1 {
		// QPs of several engines may complete into this CQ.
		cq.prodMu.Lock()
		defer cq.prodMu.Unlock()
	}
	free, err := cq.prod.Free()
	if err != nil || free == 0 || cq.overflowed {
		if !cq.overflowed {
			cq.overflowed = true
			cq.overflows++
			d.Counters.CQOverflows.Add(1)
			d.raise(qp.EventCQErr, "cq", cq.Handle)
		}
		return false
	}
	if cq.WCFlags != 0 {
		// Read under the CQ's producer lock, so the timestamps of one
		// CQ's entries never go back in ring order.
		ts := *wc
		now := d.clock.Now()
		if cq.WCFlags&qp.CQTimestamp != 0 {
			ts.CompletionTS = d.ticksAt(now)
		}
		if cq.WCFlags&qp.CQTimestampWallclock != 0 {
			ts.CompletionWallclockNS = uint64(now.UnixNano())
		}
		wc = &ts
	}
	ring.EncodeCQE(cq.prod.Next(), wc)
	cq.prod.Advance()
	cq.prod.Publish()
	d.Counters.Completions.Add(e.idx, 1)
	if wc.Status != qp.WCSuccess {
		d.Counters.ErrCompletions.Add(e.idx, 1)
	}
	if cq.ring.TakeArm(solicited, wc.Status != qp.WCSuccess) {
		cq.fire()
	}
	return true
}

// fire delivers one completion event: the futex word for mapped clients,
// WaitEvent for the notify file, and the hook for the channel FIFO.
//
// lockcheck:locked
func (cq *CQ) fire() {
	cq.ring.BumpEvent()
	cq.ring.WakeEventWaiters()
	cq.evMu.Lock()
	cq.fired++
	close(cq.evWake)
	cq.evWake = make(chan struct{})
	hook := cq.hook
	cq.evMu.Unlock()
	if hook != nil {
		hook()
	}
}

// SetEventHook installs f, called on every completion event. f must not
// block and must not call into the device.
func (cq *CQ) SetEventHook(f func()) {
	cq.evMu.Lock()
	cq.hook = f
	cq.evMu.Unlock()
}

// ReqNotify is ibv_req_notify_cq. A pending request for the next completion
// is never weakened to solicited-only (C11-31/32).
func (cq *CQ) ReqNotify(solicitedOnly bool) {
	// The ring's header is written directly; pollMu keeps it mapped
	// (Destroy, Resize and Close unmap under it).
	cq.pollMu.Lock()
	defer cq.pollMu.Unlock()
	if cq.gone {
		return
	}
	cq.ring.ReqNotify(solicitedOnly)
}

// WaitEvent is ibv_get_cq_event: it takes one fired event, blocking until
// one fires, ctx ends or the CQ is destroyed.
func (cq *CQ) WaitEvent(ctx context.Context) error {
	for {
		cq.evMu.Lock()
		if cq.taken < cq.fired {
			cq.taken++
			cq.evMu.Unlock()
			return nil
		}
		if cq.destroyed {
			cq.evMu.Unlock()
			return errf("get_cq_event", syscall.ENOENT, "cq %d was destroyed", cq.Handle)
		}
		w := cq.evWake
		cq.evMu.Unlock()
		select {
		case <-w:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Poll is ibv_poll_cq from inside the daemon: it consumes up to max CQEs
// from the shared ring, exactly as a mapped client would.
func (cq *CQ) Poll(max int) ([]qp.WC, error) {
	cq.pollMu.Lock()
	defer cq.pollMu.Unlock()
	if cq.gone {
		return nil, errf("poll_cq", syscall.ENOENT, "cq %d was destroyed", cq.Handle)
	}
	cq.dev.mu.Lock()
	r := cq.ring
	cq.dev.mu.Unlock()
	cons := ring.NewConsumer(r)
	n, err := cons.Pending()
	if err != nil {
		return nil, errf("poll_cq", syscall.EINVAL, "cq %d ring indices are corrupt: %v", cq.Handle, err)
	}
	if int(n) > max {
		n = uint32(max)
	}
	out := make([]qp.WC, n)
	for i := range out {
		ring.DecodeCQE(cons.Peek(uint32(i)), &out[i])
	}
	cons.Advance(n)
	cons.Publish()
	return out, nil
}
