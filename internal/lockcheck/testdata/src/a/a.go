// Package a is the analyzer's test: each wrong form carries the
// diagnostic it must give ("want"), each right form must give none.
package a

import "sync"

type Dev struct {
	mu     sync.Mutex
	closed bool        // lockcheck:guarded mu
	qps    map[int]*QP // lockcheck:guarded mu
	rw     sync.RWMutex
	// conf is read under RLock and written under Lock.
	conf   int // lockcheck:guarded rw
	free   int // no annotation: never checked
	pollMu sync.Mutex
	// ring is written with mu and pollMu held, read with either.
	ring []int // lockcheck:guarded mu|pollMu
}

type QP struct {
	dev   *Dev
	inMu  sync.Mutex
	inbox []int // lockcheck:guarded inMu
	// state is the device's: guarded by the lock of another struct.
	state int // lockcheck:guarded dev.mu
	// seq has no way to its device: its lock is named by type.
	seq int // lockcheck:guarded Dev.mu
	// both needs both locks.
	both int // lockcheck:guarded inMu lockcheck:guarded dev.mu
}

// Lock held across the touch, or released too early.
func lockUnlock(d *Dev) {
	d.mu.Lock()
	d.closed = true
	d.mu.Unlock()
	d.closed = false // want `write of closed without Dev.mu held`
	_ = d.free
}

func deferred(d *Dev) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.closed
}

func noLock(d *Dev) int {
	return len(d.qps) // want `read of qps without Dev.mu held`
}

// A lock reached through another struct: any Dev.mu held will do.
func remote(d *Dev, q *QP) {
	d.mu.Lock()
	q.state = 1
	d.mu.Unlock()
	q.state = 2 // want `write of state without Dev.mu held`
	q.dev.mu.Lock()
	q.state = 3
	q.dev.mu.Unlock()
}

func twoLocks(q *QP) {
	q.inMu.Lock()
	q.both = 1 // want `write of both without Dev.mu held`
	q.dev.mu.Lock()
	q.both = 2
	q.dev.mu.Unlock()
	q.inMu.Unlock()
}

func readWrite(d *Dev) int {
	d.rw.RLock()
	n := d.conf
	d.conf = n + 1 // want `write of conf without Dev.rw held exclusively`
	d.rw.RUnlock()
	d.rw.Lock()
	d.conf++
	d.rw.Unlock()
	return n
}

// Branches: a lock let go in one branch that falls through is not held
// after the if; one let go before a return is.
func branches(d *Dev, c bool) {
	d.mu.Lock()
	if c {
		d.mu.Unlock()
		return
	}
	d.closed = true
	if c {
		d.mu.Unlock()
	}
	d.closed = false // want `write of closed without Dev.mu held`
}

func loops(d *Dev, n int) {
	d.mu.Lock()
	for i := 0; i < n; i++ {
		d.qps[i] = nil
		if i > 2 {
			d.mu.Unlock()
		}
	}
	_ = d.qps // want `read of qps without Dev.mu held`
}

func switches(d *Dev, k int) {
	d.mu.Lock()
	switch k {
	case 1:
		d.closed = true
	case 2:
		d.mu.Unlock()
		d.mu.Lock()
	default:
		d.mu.Unlock()
		return
	}
	d.closed = false
	d.mu.Unlock()
}

func tryLock(d *Dev) {
	if d.mu.TryLock() {
		d.closed = true
		d.mu.Unlock()
	}
	if !d.mu.TryLock() {
		d.closed = true // want `write of closed without Dev.mu held`
		return
	}
	d.closed = true
	d.mu.Unlock()
	switch {
	case d.free > 0 && d.mu.TryLock():
		d.closed = false
		d.mu.Unlock()
	default:
		d.closed = false // want `write of closed without Dev.mu held`
	}
}

// …Locked functions touch what their callers hold.
func (q *QP) pushLocked(v int) { q.inbox = append(q.inbox, v) }

// deliverLocked needs inMu for pushLocked and Dev.mu for state.
func (q *QP) deliverLocked(v int) {
	q.pushLocked(v)
	q.state = v
}

// A …Locked function that takes its lock itself needs nothing.
func (q *QP) selfLocked() {
	q.inMu.Lock()
	q.inbox = nil
	q.inMu.Unlock()
}

func callers(q *QP) {
	q.pushLocked(1) // want `call of pushLocked needs QP.inMu held`
	q.inMu.Lock()
	q.pushLocked(2)
	q.deliverLocked(3) // want `call of deliverLocked needs Dev.mu held`
	q.dev.mu.Lock()
	q.deliverLocked(4)
	q.dev.mu.Unlock()
	q.inMu.Unlock()
	q.selfLocked()
}

// Goroutines hold nothing; other function literals hold what is held
// where they are written.
func literals(d *Dev, q *QP) {
	d.mu.Lock()
	defer d.mu.Unlock()
	go func() {
		d.closed = true // want `write of closed without Dev.mu held`
	}()
	go q.deliverLocked(1) // want `call of deliverLocked needs Dev.mu held` `call of deliverLocked needs QP.inMu held`
	each(func() { d.closed = true })
}

func each(f func()) { f() }

// A constructor's object is not shared yet.
func newDev() *Dev {
	d := &Dev{qps: map[int]*QP{}}
	d.closed = false
	var e Dev
	e.conf = 1
	f := new(Dev)
	f.conf = 2
	f = d
	f.conf = 3 // want `write of conf without Dev.rw held`
	g := &Dev{}
	go func() {
		g.closed = true // want `write of closed without Dev.mu held`
	}()
	return d
}

// Exceptions.
func excepted(d *Dev) {
	d.closed = true // lockcheck:ok the test's own reason
	// lockcheck:ok a reason above the line,
	// over two lines
	_ = d.qps
	_ = d.conf // lockcheck:ok // want `lockcheck:ok needs its reason` `read of conf without Dev.rw held`
	// want +1 `lockcheck:ok exempts nothing here`
	// lockcheck:ok nothing to exempt below
	d.free = 1
}

// wholeFunc is exempt as a whole.
//
// lockcheck:ok the test's whole function
func wholeFunc(d *Dev) {
	d.closed = true
	_ = d.qps
}

// A lock taken under another name.
type striped struct {
	stripes []sync.Mutex
}

// take holds the whole lock.
//
// lockcheck:acquire
func (s *striped) take() {
	for i := range s.stripes {
		s.stripes[i].Lock()
	}
}

// drop lets go of it.
//
// lockcheck:release
func (s *striped) drop() {
	for i := range s.stripes {
		s.stripes[i].Unlock()
	}
}

func (s *striped) Lock() {}

type owner struct {
	mu striped
	n  int // lockcheck:guarded mu
}

func custom(o *owner) {
	o.mu.take()
	o.n++
	o.mu.drop()
	o.n++ // want `write of n without owner.mu held`
}

// An embedded lock.
type embedded struct {
	sync.Mutex
	n int // lockcheck:guarded Mutex
}

func embeddedLock(e *embedded) {
	e.Lock()
	e.n = 1
	e.Unlock()
	e.n = 2 // want `write of n without embedded.Mutex held`
}

// Annotations that name no lock are errors.
type bad struct {
	mu sync.Mutex
	n  int // lockcheck:guarded nu // want `no field nu`
	m  int // lockcheck:guarded n // want `not a lock`
}

// An accessor that cannot end in Locked says so.
//
// lockcheck:locked
func (q *QP) inboxLen() int { return len(q.inbox) }

func accessor(q *QP) int {
	n := q.inboxLen() // want `call of inboxLen needs QP.inMu held`
	q.inMu.Lock()
	defer q.inMu.Unlock()
	return n + q.inboxLen()
}

// A field's address is no touch: lockedLen takes the lock.
func address(d *Dev) int { return lockedLen(&d.mu, &d.qps) }

func lockedLen(mu *sync.Mutex, m *map[int]*QP) int {
	mu.Lock()
	defer mu.Unlock()
	return len(*m)
}

// An address that escapes otherwise is a touch.
func addressOut(d *Dev) *map[int]*QP {
	return &d.qps // want `read of qps without Dev.mu held`
}

func byType(d *Dev, q *QP) {
	q.seq++ // want `write of seq without Dev.mu held`
	d.mu.Lock()
	q.seq++
	d.mu.Unlock()
}

func either(d *Dev) int {
	d.pollMu.Lock()
	n := len(d.ring)
	d.ring = nil // want `write of ring without Dev.mu held`
	d.pollMu.Unlock()
	d.mu.Lock()
	n += len(d.ring)
	d.mu.Unlock()
	n += len(d.ring) // want `read of ring without Dev.mu or Dev.pollMu held`
	d.pollMu.Lock()
	d.mu.Lock()
	d.ring = nil
	d.mu.Unlock()
	d.pollMu.Unlock()
	return n
}

// A wrapper names the lock it takes, even one it takes only sometimes.
type srq struct {
	multi  bool
	takeMu sync.Mutex
	cons   int // lockcheck:guarded takeMu
}

// lockTake holds the consumer side.
//
// lockcheck:acquire takeMu
func (s *srq) lockTake() {
	if s.multi {
		s.takeMu.Lock()
	}
}

// unlockTake lets go of it.
//
// lockcheck:release takeMu
func (s *srq) unlockTake() {
	if s.multi {
		s.takeMu.Unlock()
	}
}

func (s *srq) takeLocked() { s.cons++ }

func wrapped(s *srq) {
	s.takeLocked() // want `call of takeLocked needs srq.takeMu held`
	s.lockTake()
	s.takeLocked()
	s.unlockTake()
	s.cons = 0 // want `write of cons without srq.takeMu held`
}

// badWrapper names a lock its receiver does not have.
//
// lockcheck:acquire nothing
func (s *srq) badWrapper() {} // want `lockcheck:acquire nothing: no field nothing`

// A lock taken in a branch with its release deferred is held after it;
// one released in the branch is not.
func pinned(d *Dev, several bool) {
	if several {
		d.mu.Lock()
		defer d.mu.Unlock()
	}
	d.closed = true
}

func notPinned(d *Dev, several bool) {
	if several {
		d.mu.Lock()
	}
	d.closed = true // want `write of closed without Dev.mu held`
	if several {
		d.mu.Unlock()
	}
}

// A lock that covers others: holding all of it excludes whoever takes
// the covered one.
type whole struct{ m sync.Mutex }

// Lock takes the whole lock.
//
// lockcheck:covers part.mu
func (w *whole) Lock() { w.m.Lock() }

// TryLock takes it if it is free.
//
// lockcheck:covers part.mu
func (w *whole) TryLock() bool { return w.m.TryLock() }

// Unlock lets go of it.
//
// lockcheck:covers part.mu
func (w *whole) Unlock() { w.m.Unlock() }

type part struct {
	all *whole
	mu  sync.Mutex
	n   int // lockcheck:guarded mu
}

func covered(p *part) {
	p.all.Lock()
	p.n++
	p.all.Unlock()
	p.n++ // want `write of n without part.mu held`
	if p.all.TryLock() {
		p.n++
		p.all.Unlock()
	}
}

// lockcheck:covers nothing.mu
func (w *whole) badCover() {} // want `lockcheck:covers nothing.mu: no field nothing`

// A lock beside the field must be the same object's, as far as the
// function can tell.
func otherObject(q, peer *QP, qs []*QP) {
	q.inMu.Lock()
	peer.inbox = nil // want `inbox touched with QP.inMu held for another object \(q's\), not peer's`
	q.inbox = nil
	p := q
	p.inbox = nil
	p = peer
	p.inbox = nil // p is no longer known: no instance check
	q.inMu.Unlock()
	for _, x := range qs {
		x.inMu.Lock()
		x.inbox = nil
		x.inMu.Unlock()
	}
	q.dev.mu.Lock()
	peer.state = 1 // a lock through another struct: any instance
	q.dev.mu.Unlock()
}
