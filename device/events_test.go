package device

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"rdmafs/qp"
)

// take reads what r has now, without blocking.
func take(r *EventReader) string {
	var s []string
	for _, ev := range r.TryRead(0) {
		s = append(s, ev.String())
	}
	return strings.Join(s, ",")
}

// raiseFor raises comm_est on q as the engine would.
func raiseFor(d *Device, q *QP) {
	d.mu.Lock()
	d.raise(qp.EventCommEst, "qp", q.QPN)
	d.mu.Unlock()
}

// Every reader gets its own copy of the events it may see: its owner's,
// or all of them for root; nobody's read takes another's.
func TestEventsPerReader(t *testing.T) {
	e := newEnv(t)
	d := e.d
	cq := e.cq(4)
	mine := e.qp(qpOpts{scq: cq, rcq: cq})
	theirs := e.qp(qpOpts{scq: cq, rcq: cq})
	setOwner(d, 7, theirs)
	r0, r0b, r7 := d.OpenEvents(0), d.OpenEvents(0), d.OpenEvents(7)
	raiseFor(d, mine)
	raiseFor(d, theirs)
	rootEv, theirEv := fmt.Sprintf("event=comm_est qp=%d", mine.QPN), fmt.Sprintf("event=comm_est qp=%d", theirs.QPN)
	evs, err := r0.Read(context.Background(), 1)
	if err != nil || len(evs) != 1 || evs[0].String() != rootEv || evs[0].Owner != 0 {
		t.Fatalf("root's first read (max 1): %v %v", evs, err)
	}
	if got := take(r0); got != theirEv {
		t.Errorf("root's second read: %q, want uid 7's event", got)
	}
	if got, want := take(r0b), rootEv+","+theirEv; got != want {
		t.Errorf("root's other reader: %q, want %q", got, want)
	}
	if got := take(r7); got != theirEv {
		t.Errorf("uid 7's reader: %q, want only its own %q", got, theirEv)
	}
	r0.Close()
	r0b.Close()

	// Raised while no reader of uid 7 is open (r7 still is; close it):
	// pending for uid 7's next reader, once.
	r7.Close()
	raiseFor(d, theirs)
	if n := pendingEvents(d); n != 0 {
		t.Errorf("root has %d pending events of another uid", n)
	}
	r7 = d.OpenEvents(7)
	if got := take(r7); got != theirEv {
		t.Errorf("uid 7's next reader starts with %q, want %q", got, theirEv)
	}
	again := d.OpenEvents(7)
	if got := take(again); got != "" {
		t.Errorf("a second reader of uid 7 gets %q again", got)
	}
	again.Close()
	// Unread events go back to the owner when its last reader closes, not
	// while another is open (that one has its copy).
	r7b := d.OpenEvents(7)
	raiseFor(d, theirs)
	r7.Close()
	if got := take(r7b); got != theirEv {
		t.Errorf("the open reader: %q", got)
	}
	raiseFor(d, theirs)
	r7b.Close()
	r7 = d.OpenEvents(7)
	if got := take(r7); got != theirEv {
		t.Errorf("after the last reader closed unread: %q, want %q", got, theirEv)
	}
	r7.Close()
	// A blocked Read ends with the device.
	r := d.OpenEvents(9)
	done := make(chan error, 1)
	go func() { _, err := r.Read(context.Background(), 0); done <- err }()
	time.Sleep(10 * time.Millisecond)
	d.Close()
	select {
	case err := <-done:
		if err != ErrClosed {
			t.Errorf("read at close: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a blocked Read did not end with the device")
	}
}

// A reader that does not read keeps the newest maxQueuedEvents; the rest
// are dropped and counted, and so is an owner's pending queue.
func TestEventsBounded(t *testing.T) {
	e := newEnv(t)
	d := e.d
	r := d.OpenEvents(0)
	defer r.Close()
	const n = maxQueuedEvents + 904
	for i := range n {
		d.events.push(Event{Type: qp.EventSRQLimitReached, Kind: "srq", Handle: uint32(i), Owner: 5})
	}
	evs := r.TryRead(0)
	if len(evs) != maxQueuedEvents || evs[0].Handle != 904 || evs[len(evs)-1].Handle != n-1 {
		t.Fatalf("reader holds %d events, first %v", len(evs), evs[0])
	}
	// uid 5 had no reader: its pending queue is bounded the same way.
	if got := d.EventDrops(); got != 2*904 {
		t.Errorf("drops %d, want %d", got, 2*904)
	}
	if p := d.OpenEvents(5).TryRead(0); len(p) != maxQueuedEvents || p[0].Handle != 904 {
		t.Errorf("uid 5's pending: %d events", len(p))
	}
}

// TestEventReadersBoundedPerUser: uid 65534 may hold 256 readers (EMFILE
// past them, root not held), and its readers together keep at most
// maxQueuedEvents of its events whatever it raises, each reader counting
// what it lost; its reads give the share back.
func TestEventReadersBoundedPerUser(t *testing.T) {
	e := newEnv(t)
	d := e.d
	cq := e.cq(4)
	q := e.qp(qpOpts{scq: cq, rcq: cq})
	setOwner(d, 65534, q)
	var rs []*EventReader
	for range 2000 {
		r, err := d.OpenEventsLimited(65534)
		if err != nil {
			if Errno(err) != 24 { // EMFILE
				t.Fatal(err)
			}
			continue
		}
		rs = append(rs, r)
	}
	if len(rs) != MaxEventReaders {
		t.Fatalf("%d readers open", len(rs))
	}
	if _, err := d.OpenEventsLimited(0); err != nil {
		t.Fatalf("root: %v", err)
	}
	for range 2000 {
		raiseFor(d, q)
	}
	d.events.mu.Lock()
	held, total := d.events.queued[65534], 0
	for _, r := range rs {
		total += len(r.q)
	}
	d.events.mu.Unlock()
	if held != total || held > maxQueuedEvents || rs[0].Dropped() == 0 {
		t.Fatalf("uid 65534 holds %d events (%d counted), reader 0 dropped %d", total, held, rs[0].Dropped())
	}
	t.Logf("256 readers, 2,000 events: %d held (at most %d), %d dropped", total, maxQueuedEvents, d.EventDrops())
	rs[0].TryRead(0)
	for _, r := range rs {
		r.Close()
	}
	if _, err := d.OpenEventsLimited(65534); err != nil {
		t.Fatalf("after closing: %v", err)
	}
}

// A reader that never reads fills its viewer's share; a reader of the same
// viewer opened after that (another program of the same user) still gets
// every new event, and the idle one pays with its oldest.
func TestEventsIdleReaderDoesNotStarve(t *testing.T) {
	e := newEnv(t)
	d := e.d
	cq := e.cq(4)
	q := e.qp(qpOpts{scq: cq, rcq: cq})
	setOwner(d, 65534, q)
	idle, err := d.OpenEventsLimited(65534)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	for range maxQueuedEvents + 10 {
		raiseFor(d, q)
	}
	busy, err := d.OpenEventsLimited(65534)
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	for i := range 100 {
		raiseFor(d, q)
		if evs := busy.TryRead(0); len(evs) != 1 {
			t.Fatalf("event %d after the share filled: the second reader got %d", i, len(evs))
		}
	}
	d.events.mu.Lock()
	held, idleLen := d.events.queued[65534], len(idle.q)
	d.events.mu.Unlock()
	if held > maxQueuedEvents || held != idleLen || idle.Dropped() < 100 {
		t.Fatalf("uid 65534 holds %d (idle reader %d, dropped %d)", held, idleLen, idle.Dropped())
	}
}

// BenchmarkEventFullShare: one event raised for a user holding its 256
// readers, none reading, so that every event sheds one event of each
// reader. (A scan of every reader for each reader made this 256 times
// dearer, with Device.mu held.)
func BenchmarkEventFullShare(b *testing.B) {
	e := newEnv(b)
	d := e.d
	cq := e.cq(4)
	q := e.qp(qpOpts{scq: cq, rcq: cq})
	setOwner(d, 65534, q)
	for range MaxEventReaders {
		r, err := d.OpenEventsLimited(65534)
		if err != nil {
			b.Fatal(err)
		}
		defer r.Close()
	}
	for range maxQueuedEvents {
		raiseFor(d, q)
	}
	b.ResetTimer()
	for range b.N {
		raiseFor(d, q)
	}
}

// shedLocked takes what is asked, from the longest queues first, and
// keeps the viewer's count and the readers' drop counts true.
func TestEventShedLongestFirst(t *testing.T) {
	for _, c := range []struct {
		lens    []int
		n       int
		longest int // the longest queue after
	}{
		{[]int{10, 10}, 17, 2},
		{[]int{10, 2}, 9, 2},
		{[]int{10, 5}, 5, 5},
		{[]int{10, 10}, 1, 10},
		{[]int{3}, 5, 0},
		{[]int{7, 1, 1, 1}, 6, 1},
		{[]int{4096, 0, 16}, 4000, 96},
		{[]int{4096, 0, 16}, 4090, 11},
	} {
		var e eventQueue
		e.init()
		total := 0
		for _, l := range c.lens {
			r := &EventReader{e: &e, viewer: 7, q: make([]Event, l)}
			e.subs[r] = struct{}{}
			total += l
		}
		e.queued[7] = total
		e.mu.Lock()
		e.shedLocked(7, c.n)
		left, longest, dropped := 0, 0, uint64(0)
		for r := range e.subs {
			left += len(r.q)
			longest = max(longest, len(r.q))
			dropped += r.dropped
		}
		e.mu.Unlock()
		want := max(0, total-c.n)
		if left != want || e.queued[7] != want || dropped != uint64(total-want) || e.dropped != dropped || longest != c.longest {
			t.Errorf("%v shed %d: %d left (want %d), counted %d, dropped %d/%d, longest %d (want %d)",
				c.lens, c.n, left, want, e.queued[7], dropped, e.dropped, longest, c.longest)
		}
	}
}

// A destroyed object's unread events go with it, from the readers' queues
// and from the pending one (as uverbs does): its handle may come back as
// another object's, which must never see them. Other objects' stay.
func TestEventsOfDestroyedObjectWithdrawn(t *testing.T) {
	e := newEnv(t)
	d := e.d
	cq := e.cq(4)
	keep := e.qp(qpOpts{scq: cq, rcq: cq})
	gone := e.qp(qpOpts{scq: cq, rcq: cq})
	cq2 := e.cq(4)
	setOwner(d, 65534, keep, gone)
	r, err := d.OpenEventsLimited(65534)
	if err != nil {
		t.Fatal(err)
	}
	raiseFor(d, gone)
	raiseFor(d, keep)
	r.Close() // the user's last reader: both go back to pending
	raiseFor(d, gone)
	d.mu.Lock()
	d.raise(qp.EventCQErr, "cq", cq2.Handle)
	d.mu.Unlock()
	root := d.OpenEvents(0)
	defer root.Close()
	d.mu.Lock()
	d.raise(qp.EventCQErr, "cq", cq2.Handle)
	d.mu.Unlock()
	if err := gone.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := cq2.Destroy(); err != nil {
		t.Fatal(err)
	}
	r, err = d.OpenEventsLimited(65534)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got := r.TryRead(0)
	if len(got) != 1 || got[0].Handle != keep.QPN || got[0].Kind != "qp" {
		t.Fatalf("after destroying qp %d: %v, want keep's one event (qp %d)", gone.QPN, got, keep.QPN)
	}
	if evs := root.TryRead(0); len(evs) != 0 {
		t.Fatalf("root still holds %v", evs)
	}
	d.events.mu.Lock()
	held := d.events.queued[65534] + d.events.queued[0]
	d.events.mu.Unlock()
	if held != 0 {
		t.Fatalf("%d events still counted", held)
	}
}

// pendingEvents is the number of events waiting for root's next reader.
func pendingEvents(d *Device) int {
	d.events.mu.Lock()
	defer d.events.mu.Unlock()
	return len(d.events.pending[0])
}
