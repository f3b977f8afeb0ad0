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
type doorbell struct {
	region *ring.Region
	r      *ring.Ring
	done   chan struct{}
	closed bool // guarded by Device.mu
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
		d.mu.Lock()
		if b.closed {
			d.mu.Unlock()
			return
		}
		for _, q := range d.qps {
			if q.dev == d && !q.destroyed && q.newSendWork() {
				d.engine.schedule(q)
			}
		}
		d.mu.Unlock()
		b.r.WaitEvent(seq, -1)
		d.Counters.Doorbells.Add(1)
	}
}

// stopDoorbell ends the loop (after the engine stopped) and unmaps.
func (d *Device) stopDoorbell() {
	b := d.bell
	d.mu.Lock()
	b.closed = true
	d.mu.Unlock()
	b.r.BumpEvent()
	b.r.WakeEventWaiters()
	<-b.done
	b.region.Close()
}
