package device

import (
	"rdmafs/ring"
)

// The device doorbell. A client whose post finds NEED_WAKEUP on its send
// ring must wake the parked engine. It can write() to the ring file (a FUSE
// request, about 16 µs) or ring this doorbell: one futex word in a shared
// page (MOUNT/doorbell) that it bumps and wakes with FUTEX_WAKE, a plain
// system call of about a microsecond that never enters FUSE. A goroutine
// sleeps on the word in FUTEX_WAIT and, woken, schedules every QP with
// unfetched send work; with nobody ringing it sleeps and costs nothing.
//
// The word is shared by every user of the device (the page is 0666), so a
// wake must be cheap for everyone else: it looks only at the QPs that can
// send (bellQPs: the device's QPs in RTS, SQD, SQE or ERR, the states in
// which the engine does anything with a posted send WQE; a QP reaching one
// of them is run by the modify anyway), reads only their rings' atomics,
// and takes the doorbell's own lock. A wake with nothing posted costs two
// atomic loads per such QP and delays nobody's verbs. On a device with a
// wire, a wake that found posted work runs the turns on this goroutine,
// already awake, when the engine sleeps and Device.mu is free (TryLock,
// never a wait), instead of waking the engine goroutine for them
// (engine.runHeldLocked).
type doorbell struct {
	region *ring.Region
	r      *ring.Ring
	done   chan struct{}
	closed bool // guarded by Device.bellMu
}

func (d *Device) startDoorbell() error {
	region, err := ring.NewRegion("rdmafs-doorbell", ring.Size(ring.MinSlotSize, 1))
	if err != nil {
		return err
	}
	r, err := ring.Init(region.Bytes(), ring.KindDoorbell, ring.MinSlotSize, 1)
	if err != nil {
		region.Close()
		return err
	}
	d.bell = &doorbell{region: region, r: r, done: make(chan struct{})}
	go d.doorbellLoop(d.bell)
	return nil
}

// Doorbell is the device doorbell's shared memory (for mapping by clients).
func (d *Device) Doorbell() *ring.Region { return d.bell.region }

func (d *Device) doorbellLoop(b *doorbell) {
	defer close(b.done)
	for {
		// Read the word first, then look: a ring that comes after the read
		// makes the wait below return at once, so no ring is lost between
		// a scan and the sleep. stopDoorbell sets closed before it rings.
		seq := b.r.EventSeq()
		d.engine.holdWake()
		d.bellMu.Lock()
		if b.closed {
			d.bellMu.Unlock()
			d.engine.releaseHold()
			return
		}
		found := false
		for _, q := range d.bellQPs {
			if q.newSendWork() {
				d.engine.schedule(q)
				found = true
			}
		}
		d.bellScans.Add(uint64(len(d.bellQPs)))
		d.bellMu.Unlock()
		// Woken for posted work, this goroutine runs the turns itself
		// when Device.mu is free at once (engine.runHeldLocked), rather
		// than waking the engine goroutine: one hand-over less between
		// the client's post and the packet on the wire. It never waits
		// for Device.mu, so a busy device (a verb, the engine's batch)
		// costs the doorbell nothing: the engine gets the QPs then. A
		// device without a wire leaves its QPs to the engine goroutine,
		// whose spin on their rings serves a client that keeps posting
		// without a single doorbell (QPs run here are not watched).
		if found && d.hasWire && !d.engine.awake.Load() && d.mu.TryLock() {
			d.engine.runHeldLocked()
			d.mu.Unlock()
		} else {
			d.engine.releaseHold()
		}
		b.r.WaitEvent(seq, -1)
		d.Counters.Doorbells.Add(1)
	}
}

// syncBellLocked puts q in its device's bellQPs while its state can send
// and it lives, and takes it out otherwise. Called wherever the state
// changes and at destroy; a destroyed QP is out before its rings are
// unmapped, so the doorbell never reads them afterwards.
func (q *QP) syncBellLocked() {
	d := q.dev
	want := !q.destroyed && q.attr.QPState.CanPostSend()
	if want == (q.bellIdx >= 0) {
		return
	}
	d.bellMu.Lock()
	defer d.bellMu.Unlock()
	if want {
		q.bellIdx = len(d.bellQPs)
		d.bellQPs = append(d.bellQPs, q)
		return
	}
	last := len(d.bellQPs) - 1
	moved := d.bellQPs[last]
	d.bellQPs[q.bellIdx] = moved
	moved.bellIdx = q.bellIdx
	d.bellQPs[last] = nil
	d.bellQPs = d.bellQPs[:last]
	q.bellIdx = -1
}

// stopDoorbell ends the loop (after the engine stopped) and unmaps.
func (d *Device) stopDoorbell() {
	b := d.bell
	d.bellMu.Lock()
	b.closed = true
	d.bellMu.Unlock()
	b.r.BumpEvent()
	b.r.WakeEventWaiters()
	<-b.done
	b.region.Close()
}
