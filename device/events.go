package device

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"syscall"
)

// Async events, per reader.
//
// Every event belongs to the owner of its object (a QP, CQ or SRQ; port
// events are root's and everyone's). A reader (OpenEvents, one per open of
// MOUNT/events, as the kernel gives every ibv_context its own async event
// file) gets its own copy of each event it may see: the events of its
// owner's objects, every event for root. Nobody's read takes an event from
// another reader.
//
// An event that no reader of its owner was open to receive waits in the
// owner's pending queue, and the owner's next reader starts with it: so a
// shell's "cat events" after the fact shows what happened, and a program
// that opens the file for each ibv_get_async_event (the Go library) loses
// nothing between two opens. A reader closed with unread events of its
// owner gives them back to the pending queue when it was its owner's last
// open reader. Root's readers see every owner's events as they happen but
// start with root's own pending ones only.
//
// Destroying a QP, CQ or SRQ takes its unread events out of every queue
// (withdraw), as uverbs does: handles come back, and an event of the old
// object must never reach a reader as the new one's.
//
// Every queue (each reader's, each owner's pending one) holds at most
// maxQueuedEvents, and all the queues of one viewer together (its
// readers' and its pending one) as many: one user's unread events cost
// at most maxQueuedEvents * about 64 bytes, however often it opens the
// file. A full queue drops its oldest event for the newest. When the
// viewer's share is full, its longest queue (a reader that does not read,
// or the pending one) gives up its oldest event instead, so that one idle
// reader cannot starve the viewer's others. Each drop is counted for the
// reader (Dropped) and the device (EventDrops). A viewer other than
// root may hold at most MaxEventReaders readers (OpenEventsLimited).

const maxQueuedEvents = 4096

// MaxEventReaders is how many event readers one user other than root may
// have open.
const MaxEventReaders = 256

// eventQueue is the device's event hub.
type eventQueue struct {
	mu      sync.Mutex
	seq     uint64                    // lockcheck:guarded mu
	subs    map[*EventReader]struct{} // lockcheck:guarded mu
	pending map[Owner][]Event         // per owner: raised while none of its readers was open; lockcheck:guarded mu
	queued  map[Owner]int             // events held per viewer: its readers' and its pending ones; lockcheck:guarded mu
	open    map[Owner]int             // readers open per viewer; lockcheck:guarded mu
	dropped uint64                    // lockcheck:guarded mu
	closed  bool                      // lockcheck:guarded mu
	done    chan struct{}             // closed with the device
	// Scratch of push, kept to spare an allocation per event.
	got    []*EventReader // lockcheck:guarded mu
	trades []bool         // lockcheck:guarded mu
	shed   []shedQueue    // lockcheck:guarded mu
}

// init makes the queue's maps.
//
// lockcheck:ok New calls it before the device is shared
func (e *eventQueue) init() {
	e.subs = map[*EventReader]struct{}{}
	e.pending = map[Owner][]Event{}
	e.queued = map[Owner]int{}
	e.open = map[Owner]int{}
	e.done = make(chan struct{})
}

// pushPendingLocked appends ev to owner v's pending queue (no reader of v
// is open, so the queue is all of v's share); a full one trades its
// oldest event for ev.
func (e *eventQueue) pushPendingLocked(v Owner, ev Event) {
	q := e.pending[v]
	if len(q) >= maxQueuedEvents || e.queued[v] >= maxQueuedEvents {
		e.dropped++
		if len(q) > 0 {
			e.pending[v] = append(q[1:], ev)
		}
		return
	}
	e.queued[v]++
	e.pending[v] = append(q, ev)
}

// deliverLocked gives ev to rs, readers of one viewer v. A reader whose
// own queue is full trades its oldest event for ev; each of the others
// takes a slot of v's share, and when the share has too few, v's longest
// queues give up their oldest events first (shedLocked): the reader that
// does not read pays for its backlog, and one that does still gets new
// events. The cost is O(n log n) in v's readers per event, so a user
// holding its 256 readers full cannot make each event cost the device
// a scan of every reader for every reader (Device.mu is held).
func (e *eventQueue) deliverLocked(v Owner, rs []*EventReader, ev Event) {
	trades := e.trades[:0]
	need := 0
	for _, r := range rs {
		full := len(r.q) >= maxQueuedEvents
		trades = append(trades, full)
		if !full {
			need++
		}
	}
	e.trades = trades
	if short := e.queued[v] + need - maxQueuedEvents; short > 0 {
		e.shedLocked(v, short)
	}
	for i, r := range rs {
		switch {
		case trades[i]:
			r.q = append(r.q[1:], ev)
			r.dropped++
			e.dropped++
		case e.queued[v] < maxQueuedEvents:
			e.queued[v]++
			r.q = append(r.q, ev)
		default: // nothing was left to shed: ev is lost to r
			r.dropped++
			e.dropped++
		}
		select {
		case r.wake <- struct{}{}:
		default:
		}
	}
}

// shedLocked takes n events out of viewer v's queues (its readers' and
// its pending one), the oldest of the longest queues first: it finds the
// lowest length L at which cutting every longer queue down to L frees at
// most n events, cuts them to L, and takes one more from as many queues
// at L as are still wanted. O(queues * log maxQueuedEvents), no sort.
func (e *eventQueue) shedLocked(v Owner, n int) {
	qs := e.shed[:0]
	for r := range e.subs {
		if r.viewer == v && len(r.q) > 0 {
			qs = append(qs, shedQueue{r: r, q: &r.q})
		}
	}
	p := e.pending[v]
	if len(p) > 0 {
		qs = append(qs, shedQueue{q: &p})
	}
	cut := func(level int) (sum int) {
		for _, s := range qs {
			sum += max(0, len(*s.q)-level)
		}
		return sum
	}
	// The lowest level at which cutting frees at most n events: cut is
	// non-increasing in the level, and cut(maxQueuedEvents) is 0.
	lo, hi := 0, maxQueuedEvents
	for lo < hi {
		if mid := (lo + hi) / 2; cut(mid) <= n {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	left := n - cut(lo) // taken from queues at lo, one each (lo > 0 then)
	for _, s := range qs {
		k := max(0, len(*s.q)-lo)
		if left > 0 && lo > 0 && len(*s.q) >= lo {
			k, left = k+1, left-1
		}
		if k == 0 {
			continue
		}
		*s.q = (*s.q)[k:]
		if s.r != nil {
			s.r.dropped += uint64(k)
		}
		e.dropped += uint64(k)
		e.queued[v] -= k
	}
	if len(p) == 0 {
		delete(e.pending, v)
	} else {
		e.pending[v] = p
	}
	clear(qs)
	e.shed = qs[:0]
}

// shedQueue is one queue shedLocked may take from: a reader's (r) or the
// viewer's pending one (r nil).
type shedQueue struct {
	r *EventReader
	q *[]Event
}

// forgetLocked takes n events of viewer v out of its count.
func (e *eventQueue) forgetLocked(v Owner, n int) {
	if e.queued[v] -= n; e.queued[v] <= 0 {
		delete(e.queued, v)
	}
}

func (e *eventQueue) push(ev Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return
	}
	e.seq++
	ev.Seq = e.seq
	// The readers that see ev, grouped by viewer: each viewer's share is
	// made room in once for all its readers.
	got := e.got[:0]
	for r := range e.subs {
		if r.sees(ev) {
			got = append(got, r)
		}
	}
	slices.SortFunc(got, func(a, b *EventReader) int { return cmp.Compare(a.viewer, b.viewer) })
	received := false
	for i := 0; i < len(got); {
		v, j := got[i].viewer, i+1
		for j < len(got) && got[j].viewer == v {
			j++
		}
		e.deliverLocked(v, got[i:j], ev)
		received = received || v == ev.Owner
		i = j
	}
	clear(got)
	e.got = got[:0]
	if !received {
		e.pushPendingLocked(ev.Owner, ev)
	}
}

// withdraw takes the queued events of an object that is being destroyed
// (kind and handle as in its event lines) out of every queue, as the
// kernel's uverbs does with a destroyed object's unread events: a handle
// may name another object later, and no reader may ever see an event of
// the old one as the new one's. Not counted as drops.
func (e *eventQueue) withdraw(kind string, h uint32) {
	e.mu.Lock()
	defer e.mu.Unlock()
	of := func(ev Event) bool { return ev.Kind == kind && ev.Handle == h }
	for r := range e.subs {
		if n := len(r.q); n > 0 {
			r.q = slices.DeleteFunc(r.q, of)
			e.forgetLocked(r.viewer, n-len(r.q))
		}
	}
	for v, q := range e.pending {
		n := len(q)
		if q = slices.DeleteFunc(q, of); len(q) == 0 {
			delete(e.pending, v)
		} else {
			e.pending[v] = q
		}
		e.forgetLocked(v, n-len(q))
	}
}

func (e *eventQueue) close() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.closed {
		e.closed = true
		close(e.done)
	}
}

// eventOwnerLocked is the owner of the object an event names (0 when it
// is gone or is the port).
func (d *Device) eventOwnerLocked(kind string, h uint32) Owner {
	switch kind {
	case "qp":
		if q := d.qps[h]; q != nil {
			return q.Owner
		}
	case "cq":
		if c := d.cqs.get(h); c != nil {
			return c.Owner
		}
	case "srq":
		if s := d.srqs.get(h); s != nil {
			return s.Owner
		}
	}
	return 0
}

// raise queues an async event; Device.mu is held (every caller is in the
// engine or a verb).
//
// lockcheck:locked
func (d *Device) raise(t EventType, kind string, h uint32) {
	d.Counters.AsyncEvents.Add(1)
	d.events.push(Event{Type: t, Kind: kind, Handle: h, Owner: d.eventOwnerLocked(kind, h)})
}

// ErrClosed is returned by blocking reads once the device is gone.
var ErrClosed = &Error{Op: "device", Errno: 19, Err: fmt.Errorf("device is closed")}

// EventReader is one reader of async events (see above).
type EventReader struct {
	e       *eventQueue
	viewer  Owner
	q       []Event       // lockcheck:guarded e.mu
	wake    chan struct{} // a push for this reader happened
	closed  bool          // lockcheck:guarded e.mu
	dropped uint64        // events this reader lost to the bounds; lockcheck:guarded e.mu
}

// Dropped is how many events this reader lost to its bounds.
func (r *EventReader) Dropped() uint64 {
	r.e.mu.Lock()
	defer r.e.mu.Unlock()
	return r.dropped
}

func (r *EventReader) sees(ev Event) bool {
	return r.viewer == 0 || r.viewer == ev.Owner || ev.Kind == "port"
}

// OpenEvents starts a reader of the events viewer may see (0: root, all);
// it starts with the events pending for viewer. Close it.
func (d *Device) OpenEvents(viewer Owner) *EventReader {
	r, _ := d.openEvents(viewer, false)
	return r
}

// OpenEventsLimited is OpenEvents for a user's open of the events file: a
// viewer other than root may hold at most MaxEventReaders (EMFILE).
func (d *Device) OpenEventsLimited(viewer Owner) (*EventReader, error) {
	return d.openEvents(viewer, viewer != 0)
}

func (d *Device) openEvents(viewer Owner, limit bool) (*EventReader, error) {
	e := &d.events
	e.mu.Lock()
	defer e.mu.Unlock()
	if limit && e.open[viewer] >= MaxEventReaders {
		return nil, errf("open_events", syscall.EMFILE, "uid %d has %d event readers open, the most one user may hold", viewer, MaxEventReaders)
	}
	r := &EventReader{e: e, viewer: viewer, wake: make(chan struct{}, 1)}
	r.q = e.pending[viewer]
	delete(e.pending, viewer)
	if !e.closed {
		e.subs[r] = struct{}{}
		e.open[viewer]++
	}
	return r, nil
}

// takeLocked removes up to max (0: all) events from r's queue.
func (r *EventReader) takeLocked(max int) []Event {
	n := len(r.q)
	if max > 0 && n > max {
		n = max
	}
	out := slices.Clone(r.q[:n])
	r.e.forgetLocked(r.viewer, n)
	r.q = r.q[n:]
	if len(r.q) == 0 {
		r.q = nil
	}
	return out
}

// Read takes up to max (0: all) queued events, blocking until there is
// one, ctx ends (its error) or the device closes (ErrClosed).
func (r *EventReader) Read(ctx context.Context, max int) ([]Event, error) {
	e := r.e
	for {
		e.mu.Lock()
		if len(r.q) > 0 {
			out := r.takeLocked(max)
			e.mu.Unlock()
			return out, nil
		}
		if e.closed || r.closed {
			e.mu.Unlock()
			return nil, ErrClosed
		}
		e.mu.Unlock()
		select {
		case <-r.wake:
		case <-e.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// TryRead takes up to max (0: all) queued events without blocking.
func (r *EventReader) TryRead(max int) []Event {
	r.e.mu.Lock()
	defer r.e.mu.Unlock()
	if len(r.q) == 0 {
		return nil
	}
	return r.takeLocked(max)
}

// Close ends the reader. Its unread events of its own owner go back to the
// owner's pending queue if no other reader of that owner is open (the
// others got their own copies).
func (r *EventReader) Close() {
	e := r.e
	e.mu.Lock()
	defer e.mu.Unlock()
	if r.closed {
		return
	}
	r.closed = true
	if _, ok := e.subs[r]; ok {
		if e.open[r.viewer]--; e.open[r.viewer] <= 0 {
			delete(e.open, r.viewer)
		}
	}
	delete(e.subs, r)
	select {
	case r.wake <- struct{}{}: // a Read in progress ends
	default:
	}
	var back []Event
	for _, ev := range r.q {
		if ev.Owner == r.viewer {
			back = append(back, ev)
		}
	}
	e.forgetLocked(r.viewer, len(r.q))
	r.q = nil
	if len(back) == 0 {
		return
	}
	for o := range e.subs {
		if o.viewer == r.viewer {
			return
		}
	}
	// Back to the pending queue, within the viewer's share.
	q := append(back, e.pending[r.viewer]...)
	e.forgetLocked(r.viewer, len(e.pending[r.viewer]))
	if n := min(len(q), len(q)-(maxQueuedEvents-e.queued[r.viewer])); n > 0 {
		q = q[n:]
		e.dropped += uint64(n)
	}
	e.queued[r.viewer] += len(q)
	if len(q) == 0 {
		delete(e.pending, r.viewer)
		return
	}
	e.pending[r.viewer] = q
}

// EventDrops is how many events were dropped from a full queue (a reader's
// or an owner's pending one).
func (d *Device) EventDrops() uint64 {
	d.events.mu.Lock()
	defer d.events.mu.Unlock()
	return d.events.dropped
}

// ReadEvents takes every event pending for root, blocking until there is
// one, ctx ends (its error) or the device closes (ErrClosed).
func (d *Device) ReadEvents(ctx context.Context) ([]Event, error) {
	r := d.OpenEvents(0)
	defer r.Close()
	return r.Read(ctx, 0)
}
