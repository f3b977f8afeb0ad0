package device

import (
	"runtime"
	"slices"
	"sync/atomic"

	"rdmafs/ring"
)

// The device doorbell. A client whose post finds NEED_WAKEUP on its send
// ring must wake the parked engine. It can write() to the ring file (a FUSE
// request, about 16 µs) or ring this doorbell: a shared page
// (MOUNT/doorbell) in which it marks the QP it rang for, bumps a futex
// word and wakes it with FUTEX_WAKE, a plain system call of about a
// microsecond that never enters FUSE (ring's package doc, Doorbell). A
// goroutine sleeps on the word in FUTEX_WAIT and, woken, takes the marks
// and schedules the marked QPs that have unfetched send work; with nobody
// ringing it sleeps and costs nothing.
//
// The page is shared by every user of the device (0666), so a wake must
// be cheap for everyone else and must not depend on the number of QPs: it
// reads the summary's 4 words and the bitmap words they mark, and looks
// only at the QPs of the marked bits that can send (bellQPs: per bit, the device's QPs in RTS, SQD, SQE
// or ERR whose QPN falls on it, the states in which the engine does
// anything with a posted send WQE; a QP reaching one of them is run by the
// modify anyway). Of those it reads only their rings' atomics, and it
// takes no lock: each bit's set of QPs is an immutable slice that a state
// change replaces, and a destroyed QP's rings are unmapped only once no
// wake still looks at a slice that held it (waitBellScan). A bogus mark
// (no QP there, another user's QP, nothing posted) costs two atomic loads
// per QP of its bit; a client marking every bit makes a wake look at every
// QP that can send (and every word: marking every summary bit too), which
// is what every wake cost before the bitmap. On a
// device with a wire, a wake that found posted work runs the turns on this
// goroutine, already awake, when the engine sleeps and Device.mu is free
// (TryLock, never a wait), instead of waking the engine goroutine for them
// (engine.runHeldLocked).
type doorbell struct {
	region *ring.Region
	r      *ring.Ring
	done   chan struct{}
	closed atomic.Bool
}

func (d *Device) startDoorbell() error {
	region, err := ring.NewRegion("rdmafs-doorbell", ring.Size(ring.MinSlotSize, ring.BellSlots))
	if err != nil {
		return err
	}
	r, err := ring.Init(region.Bytes(), ring.KindDoorbell, ring.MinSlotSize, ring.BellSlots)
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
		if b.closed.Load() {
			return
		}
		// Only a device with a wire and one engine runs the turns here;
		// elsewhere schedule wakes the QPs' engines at once.
		e := d.engines[0]
		inline := d.inlineTurns()
		if inline {
			e.holdWake()
		}
		found := d.bellWake()
		// Woken for posted work, this goroutine runs the turns itself
		// when Device.mu is free at once (engine.runHeldLocked), rather
		// than waking the engine goroutine: one hand-over less between
		// the client's post and the packet on the wire. It never waits
		// for Device.mu, so a busy device (a verb, the engine's batch)
		// costs the doorbell nothing: the engine gets the QPs then. A
		// device without a wire leaves its QPs to the engine goroutine,
		// whose spin on their rings serves a client that keeps posting
		// without a single doorbell (QPs run here are not watched).
		switch {
		case !inline:
		case found && !e.awake.Load() && d.mu.TryLock():
			e.runHeldLocked()
			d.mu.Unlock()
		default:
			e.releaseHold()
		}
		b.r.WaitEvent(seq, -1)
		d.Counters.Doorbells.Add(1)
	}
}

// bellWake is what one wake looks at: it takes the doorbell's marks and
// schedules, on their engines, the QPs of the marked bits that can send
// and have send WQEs the engine has not seen, and reports whether it
// found any. It takes no lock but the scheduler's.
func (d *Device) bellWake() bool {
	found := false
	n := 0
	d.bellScan.Add(1)
	d.bell.r.TakeBells(func(bit uint32) {
		v := d.bellQPs[bit].Load()
		if v == nil {
			return
		}
		n += len(*v)
		for _, q := range *v {
			if q.newSendWork() {
				q.eng().schedule(q)
				found = true
			}
		}
	})
	d.bellScan.Add(1)
	d.bellScans.Add(uint64(n))
	return found
}

// bellBit is the doorbell bit of a QP number (ring.MarkBell's).
func bellBit(qpn uint32) uint32 { return qpn % ring.BellBits }

// syncBellLocked puts q in its doorbell bit's set while its state can
// send and it lives, and takes it out otherwise. Called wherever the state
// changes and at destroy. A set is replaced, never changed in place (a
// wake reads the one it loaded to the end); a destroyed QP is out of it
// before its rings are unmapped, and the reaper waits for the wakes that
// may hold an older set (waitBellScan), so the doorbell never reads them
// afterwards.
func (q *QP) syncBellLocked() {
	d := q.dev
	want := !q.destroyed && q.attr.QPState.CanPostSend()
	if want == q.inBell {
		return
	}
	d.bellMu.Lock()
	defer d.bellMu.Unlock()
	slot := &d.bellQPs[bellBit(q.QPN)]
	var old []*QP
	if v := slot.Load(); v != nil {
		old = *v
	}
	var v []*QP
	if want {
		v = append(slices.Clip(old), q)
	} else {
		v = slices.DeleteFunc(slices.Clone(old), func(x *QP) bool { return x == q })
	}
	q.inBell = want
	slot.Store(&v)
}

// waitBellScan waits until no doorbell wake looks at a set that may be
// older than the caller's last change of bellQPs: one that is scanning now
// started, for all the caller knows, before the change. A scan is a few
// atomic loads per QP, so the wait is short; the reaper calls it before it
// unmaps the rings of QPs it took out of the sets.
func (d *Device) waitBellScan() {
	if s := d.bellScan.Load(); s&1 == 1 {
		for d.bellScan.Load() == s {
			runtime.Gosched()
		}
	}
}

// stopDoorbell ends the loop (after the engine stopped) and unmaps.
func (d *Device) stopDoorbell() {
	b := d.bell
	b.closed.Store(true)
	b.r.BumpEvent()
	b.r.WakeEventWaiters()
	<-b.done
	b.region.Close()
}
