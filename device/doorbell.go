package device

import (
	"runtime"
	"slices"
	"sync/atomic"

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
// send (bellView: the device's QPs in RTS, SQD, SQE or ERR, the states in
// which the engine does anything with a posted send WQE; a QP reaching one
// of them is run by the modify anyway), reads only their rings' atomics,
// and takes no lock: it reads an immutable view of those QPs (bellView)
// that a state change replaces, and a destroyed QP's rings are unmapped
// only once no wake still looks at a view that held it (waitBellScan). A
// wake with nothing posted costs two atomic loads per such QP and delays
// nobody's verbs. On a device with a
// wire, a wake that found posted work runs the turns on this goroutine,
// already awake, when the engine sleeps and Device.mu is free (TryLock,
// never a wait), instead of waking the engine goroutine for them
// (engine.runHeldLocked).
type doorbell struct {
	region *ring.Region
	r      *ring.Ring
	done   chan struct{}
	closed atomic.Bool
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

// bellWake is what one wake looks at: it schedules, on their engines,
// the QPs that can send and have send WQEs the engine has not seen, and
// reports whether it found any. It takes no lock but the scheduler's.
func (d *Device) bellWake() bool {
	found := false
	d.bellScan.Add(1)
	var n int
	if v := d.bellView.Load(); v != nil {
		n = len(*v)
		for _, q := range *v {
			if q.newSendWork() {
				q.eng().schedule(q)
				found = true
			}
		}
	}
	d.bellScan.Add(1)
	d.bellScans.Add(uint64(n))
	return found
}

// syncBellLocked puts q in its device's doorbell view while its state can
// send and it lives, and takes it out otherwise. Called wherever the state
// changes and at destroy. The view is replaced, never changed in place (a
// wake reads the one it loaded to the end); a destroyed QP is out of it
// before its rings are unmapped, and the reaper waits for the wakes that
// may hold an older view (waitBellScan), so the doorbell never reads them
// afterwards.
func (q *QP) syncBellLocked() {
	d := q.dev
	want := !q.destroyed && q.attr.QPState.CanPostSend()
	if want == q.inBell {
		return
	}
	d.bellMu.Lock()
	defer d.bellMu.Unlock()
	var old []*QP
	if v := d.bellView.Load(); v != nil {
		old = *v
	}
	var v []*QP
	if want {
		v = append(slices.Clip(old), q)
	} else {
		v = slices.DeleteFunc(slices.Clone(old), func(x *QP) bool { return x == q })
	}
	q.inBell = want
	d.bellView.Store(&v)
}

// waitBellScan waits until no doorbell wake looks at a view that may be
// older than the caller's last change of bellView: one that is scanning now
// started, for all the caller knows, before the change. A scan is a few
// atomic loads per QP, so the wait is short; the reaper calls it before it
// unmaps the rings of QPs it took out of the view.
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
