package device

import (
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"rdmafs/link"
)

// engine runs QPs that have work. One goroutine serves the whole device:
// QPs are marked runnable (a post, a doorbell, an arriving packet, a timer)
// and the goroutine runs each under Device.mu. A QP marked while it runs is
// run again (rxe_task's "armed" idea).
//
// Between batches the engine spins for a short while (Config.SpinIdle) on
// the send rings of the QPs it ran recently, so a client that keeps posting
// through its mapped ring is served without a single syscall. When the
// spin finds nothing it parks: it sets each watched SQ's NEED_WAKEUP flag,
// looks at the producer indices once more (the flag and the index are
// sequentially consistent atomics on both sides, so either the client sees
// the flag after publishing or the engine sees the index), and sleeps on a
// channel until a doorbell or another event schedules a QP. An idle device
// therefore uses no CPU whatever its number of QPs.
//
// Waking the parked engine is the expensive part of a round trip over the
// wire: a futex, and another thread to find a CPU for, on top of the
// thread the kernel has just woken for the datagram or the doorbell. So a
// goroutine woken for work (the wire's receive goroutine, the doorbell)
// holds the engine's wake-up back while it schedules (holdWake) and, if
// the engine still sleeps, runs the turns itself (runHeldLocked); only
// what it leaves wakes the engine. The QPs it runs are not watched: the
// spin loop polls only the rings of QPs the engine goroutine ran, and a
// client posting to another asks for a doorbell (except while the
// goroutine still runs it: rearmLocked), which that path serves.
// (Handing them to the spin loop instead was measured: on two cores the
// spinning engine takes the CPU the other end's receive thread needs, and
// the SEND 8 B round trip grew 3x.)
type engine struct {
	d   *Device
	idx int // its stripe of Device.mu, and its place in Device.engines

	mu sync.Mutex
	// running counts the batches being run, by the engine goroutine or by
	// a goroutine that runs them in its place (runHeldLocked); guarded by
	// mu.
	running int   // lockcheck:guarded mu
	runq    []*QP // lockcheck:guarded mu
	// held counts the goroutines that scheduled QPs and promised to run
	// them themselves (holdWake): while it is not zero, schedule does not
	// wake the engine goroutine, whose wake-up (a futex, another thread
	// to put on a CPU) is what a packet's round trip spends most on.
	held atomic.Int32
	// awake is false while the engine goroutine sleeps on wake. Awake, it
	// takes newly runnable QPs itself at no cost (it spins, or runs a
	// batch, and looks at queued), and batches them with the posts it
	// finds; only a sleeping engine is worth running turns in its place.
	awake atomic.Bool
	// queued is len(runq), written under mu and read without it by the
	// spin loop, which asks on every round and must not take mu from
	// schedule (the wire's receive goroutine, timers, doorbells).
	queued  atomic.Int32
	spare   []*QP // lockcheck:guarded mu
	retired []*QP // destroyed QPs whose rings the engine unmaps; lockcheck:guarded mu
	wake    chan struct{}
	stopCh  chan struct{}
	done    chan struct{}

	// watched are the QPs whose SQ producer index the spin loop polls.
	// Only the engine goroutine touches it (and QP.watched).
	watched  []*QP
	spinIdle time.Duration

	// inline says a goroutine other than the engine's runs turns
	// (runHeldLocked); ran are the QPs it ran whose SQs do not ask for
	// doorbells until it rearms them. Both guarded by Device.mu.
	inline bool  // lockcheck:guarded d.mu
	ran    []*QP // lockcheck:guarded d.mu

	// exclusive is true while the engine runs a turn under all of
	// Device.mu (runExclusive); guarded by its stripe.
	exclusive bool // lockcheck:guarded d.mu

	// now is the clock read once per batch, for the many timestamps a
	// batch takes (one per ACK); guarded by the engine's stripe, valid
	// while nowOK.
	now   time.Time // lockcheck:guarded d.mu
	nowOK bool      // lockcheck:guarded d.mu

	// The rest is the state of the engine's turns, guarded by its stripe
	// of Device.mu: the packets a turn holds for the chain (txq, while
	// txBatching; link.go), the QPs its direct deliveries made runnable
	// (soon, loopback.go), and its packet pool.
	txq        []link.Packet // lockcheck:guarded d.mu
	txBatching bool          // lockcheck:guarded d.mu
	counts     directCounts  // loopback.go; lockcheck:guarded d.mu
	soon       []*QP         // lockcheck:guarded d.mu
	soonHead   int           // lockcheck:guarded d.mu
	pool       packetPool    // lockcheck:guarded d.mu
}

// maxHold is how long the engine keeps Device.mu across the QPs of a batch
// before it lets go of it once, even if nobody was seen waiting.
const maxHold = time.Millisecond

// devMutex is Device.mu: one stripe per engine. An engine's batches hold
// its own stripe only, so engines run their QPs in parallel; everyone else
// (verbs, the link's deliveries and timers, the doorbell's inline runs)
// takes every stripe, in engine order, and so excludes every engine at
// once, as the one device lock did. What a turn may touch under its
// stripe alone, and what it must not, is in the package doc (Locking).
//
// It knows whether anyone waits for the whole lock, so that an engine,
// which holds its stripe for a batch of QP turns, can let a waiting verb
// in between two turns instead of after the batch. (A plain Mutex hands
// itself over only after a waiter has starved for a millisecond; until
// then the engine's next Lock wins.)
type devMutex struct {
	stripes []stripe
	waiting atomic.Int32
}

// stripe is one engine's part of Device.mu, on a cache line of its own:
// its engine takes it for every batch.
type stripe struct {
	m sync.Mutex
	_ [56]byte
}

func (m *devMutex) init(engines int) { m.stripes = make([]stripe, engines) }

// Lock takes every stripe. Its holder excludes every turn, and so needs
// none of the locks by which turns of different engines share things.
//
// lockcheck:covers CQ.prodMu SRQ.takeMu QP.inMu
func (m *devMutex) Lock() {
	if m.TryLock() {
		return
	}
	m.waiting.Add(1)
	for i := range m.stripes {
		m.stripes[i].m.Lock()
	}
	m.waiting.Add(-1)
}

// Unlock lets go of every stripe.
//
// lockcheck:covers CQ.prodMu SRQ.takeMu QP.inMu
func (m *devMutex) Unlock() {
	for i := len(m.stripes) - 1; i >= 0; i-- {
		m.stripes[i].m.Unlock()
	}
}

// TryLock takes every stripe if all are free.
//
// lockcheck:covers CQ.prodMu SRQ.takeMu QP.inMu
func (m *devMutex) TryLock() bool {
	for i := range m.stripes {
		if !m.stripes[i].m.TryLock() {
			for j := i - 1; j >= 0; j-- {
				m.stripes[j].m.Unlock()
			}
			return false
		}
	}
	return true
}

// contended reports whether some goroutine waits in Lock.
func (m *devMutex) contended() bool { return m.waiting.Load() > 0 }

// yield lets the goroutines waiting now for the whole lock take it before
// engine e takes its stripe again (for a bounded number of scheduling
// rounds: a waiter that is slow to run does not hold up the engine for
// long). With one engine its stripe is the whole lock.
func (m *devMutex) yield(e *engine) {
	s := &m.stripes[e.idx].m
	s.Unlock()
	for i := 0; i < 64 && m.waiting.Load() > 0; i++ {
		runtime.Gosched()
	}
	s.Lock()
}

// lockStripe and unlockStripe are engine e's hold for its batches. To
// the lock analyzer a stripe is Device.mu (it does not tell a stripe from
// the whole lock).
//
// lockcheck:acquire
func (m *devMutex) lockStripe(e *engine) { m.stripes[e.idx].m.Lock() }

// lockcheck:release
func (m *devMutex) unlockStripe(e *engine) { m.stripes[e.idx].m.Unlock() }

// nowLocked is the time, read at most once per engine batch; e's stripe
// held (or all of Device.mu).
func (e *engine) nowLocked() time.Time {
	if !e.nowOK {
		e.now, e.nowOK = e.d.clock.Now(), true
	}
	return e.now
}

// nowLocked is the time for a verb (outside engine batches, whose time is
// the engine's).
func (d *Device) nowLocked() time.Time { return d.clock.Now() }

func (e *engine) start(d *Device, idx int) {
	e.d, e.idx = d, idx
	e.pool.dev = d // lockcheck:ok New, before the engine's goroutine starts
	e.spinIdle = d.cfg.SpinIdle
	e.wake = make(chan struct{}, 1)
	e.stopCh = make(chan struct{})
	e.done = make(chan struct{})
	go e.loop()
}

func (e *engine) stop() {
	close(e.stopCh)
	<-e.done
}

// schedule marks q runnable. It never blocks and takes no Device lock, so
// timers and doorbells may call it from anywhere.
func (e *engine) schedule(q *QP) {
	// A QP already in the run queue will run after the caller's change:
	// the engine clears the flag (sequentially consistent) before it runs
	// the QP, and the run takes Device.mu. This skips the lock and the
	// wake-up for the second and later packets of a burst.
	if q.queued.Load() {
		return
	}
	e.mu.Lock()
	if q.queued.Load() {
		e.mu.Unlock()
		return
	}
	q.queued.Store(true)
	e.runq = append(e.runq, q)
	e.queued.Store(int32(len(e.runq)))
	e.mu.Unlock()
	// Dekker with releaseHold: queued is stored before held is loaded
	// here, held before queued there, so one of the two wakes the engine.
	if e.held.Load() == 0 {
		e.signal()
	}
}

// signal wakes the engine goroutine if it sleeps (or makes its next
// sleep return at once).
func (e *engine) signal() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// holdWake tells schedule not to wake the engine goroutine: the caller
// (the wire's receive goroutine, the doorbell) is about to make QPs
// runnable and then run them itself, on the thread that is already
// awake, with runHeldLocked or releaseHold. Every holdWake is paired with
// exactly one of them.
func (e *engine) holdWake() { e.held.Add(1) }

// releaseHold ends a holdWake: the engine goroutine gets what is left
// runnable. Only the last hold to go wakes it: while another goroutine
// holds (the receive goroutine, running turns under Device.mu), what the
// doorbell found is that one's to run next, or to leave to the engine
// when it lets go. (Dekker with schedule, as above: held is decremented
// before queued is loaded.)
func (e *engine) releaseHold() {
	if e.held.Add(-1) == 0 && e.pending() {
		e.signal()
	}
}

// inlineRounds bounds the batches a goroutine other than the engine runs
// in one runHeldLocked: a QP that keeps itself runnable (a long READ, a
// deep send queue) is the engine goroutine's, which spins and yields to
// verbs; the caller (the receive goroutine) has a socket to read.
const inlineRounds = 4

// runHeldLocked runs the runnable QPs on the caller's goroutine, which
// holds Device.mu and called holdWake, unless the engine goroutine is
// awake (it will take them next, together with what it finds posted, in
// one batch), and then releases the hold.
// The caller has just been woken by the kernel for the work (a datagram,
// a doorbell): running the turns here, and sending what they produce in
// one batch, saves the hand-over to the engine goroutine and its wake-up,
// twice per round trip. Whatever it leaves (the engine busy, a verb
// waiting for Device.mu, more rounds than inlineRounds) goes to the engine
// goroutine as before. The QPs run here are not added to the engine's
// spin list: their SQs take posts without a doorbell only while this
// runs, and ask for doorbells again before it returns (rearmLocked).
func (e *engine) runHeldLocked() {
	d := e.d
	e.inline = true
	for round := 0; round < inlineRounds && !d.closed; round++ {
		e.mu.Lock()
		if e.running > 0 || len(e.runq) == 0 || e.awake.Load() {
			e.mu.Unlock()
			// Nothing (more) to run here: the client may have posted
			// to a QP run here while its turn sent; then that is next.
			if !e.rearmLocked() {
				break
			}
			continue
		}
		batch := e.takeLocked()
		e.mu.Unlock()
		d.Counters.EngineRuns.Add(e.idx, 1)
		d.Counters.InlineRuns.Add(1)
		e.nowOK = false
		yield := false
		for _, q := range batch {
			if yield {
				// Someone waits for Device.mu: the turns not run go
				// back to the run queue, for the engine.
				e.schedule(q)
				continue
			}
			if !q.destroyed {
				e.turnLocked(q)
			}
			yield = d.mu.contended()
		}
		e.nowOK = false
		e.giveBack(batch)
		if yield {
			break
		}
	}
	e.rearmLocked()
	e.inline = false
	e.releaseHold()
}

// turnLocked runs one turn of q on engine e: the one way a scheduled turn
// is run, whoever took it from the run queue (runBatches under e's stripe
// of Device.mu, runExclusive and runHeldLocked under all of it; the
// package doc, Turns). The caller checked that q lives and is e's. After
// the turn, the turns of the QPs its direct deliveries fed run on the
// same goroutine, under the same lock (runSoonLocked, loopback.go).
func (e *engine) turnLocked(q *QP) {
	e.runTurnLocked(q)
	e.runSoonLocked()
}

// runTurnLocked is the turn itself. Before it q's SQ is watched, or let
// post without a doorbell while this goroutine runs turns (ranLocked), so
// that what the client posts while the turn completes its last WQE rings
// nothing; the turn's packets go to the link together (one system call
// on the wire).
func (e *engine) runTurnLocked(q *QP) {
	e.ranLocked(q)
	e.batchTxLocked(true)
	q.runLocked()
	e.batchTxLocked(false)
}

// ranLocked notes that q is about to run a turn. The engine goroutine
// watches its SQ from then on (the spin loop); a goroutine running turns
// in its place (runHeldLocked) lets the client post to it without a
// doorbell until it rearms the SQ before it returns (rearmLocked), and
// keeps it off the spin list. Device.mu held.
func (e *engine) ranLocked(q *QP) {
	if !e.inline {
		e.watch(q)
		return
	}
	if len(e.ran) < maxRearm && !slices.Contains(e.ran, q) {
		q.sq.SetNeedWakeup(false)
		e.ran = append(e.ran, q)
	}
}

// maxRearm bounds the QPs one runHeldLocked lets post without a doorbell
// (and looks at before it returns): the rest keep asking for doorbells.
const maxRearm = 16

// rearmLocked makes the SQs of the QPs runHeldLocked ran ask for
// doorbells again and then looks at each once more (the flag and the
// producer index are sequentially consistent on both sides, as in
// prepareToPark): a client that published before the flag went up rang
// no doorbell, so its QP is scheduled here. It reports whether it
// scheduled any. A ping-pong's answer is posted while the turn that
// completed the request still sends its acknowledgement, and is found
// here, without the doorbell's wake-up. Device.mu held.
func (e *engine) rearmLocked() bool {
	found := false
	for _, q := range e.ran {
		if q.destroyed {
			continue
		}
		q.sq.SetNeedWakeup(true)
		if q.newSendWork() {
			e.schedule(q)
			found = true
		}
	}
	clear(e.ran)
	e.ran = e.ran[:0]
	return found
}

// unqueueLocked takes q out of the run queue; e.mu held.
func (e *engine) unqueueLocked(q *QP) {
	if i := slices.Index(e.runq, q); i >= 0 {
		e.runq = slices.Delete(e.runq, i, i+1)
		e.queued.Store(int32(len(e.runq)))
	}
	q.queued.Store(false)
}

// takeLocked takes the run queue as a batch; e.mu held.
func (e *engine) takeLocked() []*QP {
	// Double buffering: runq and spare never share an array.
	batch := e.runq
	e.runq, e.spare = e.spare[:0], nil
	e.queued.Store(0)
	for _, q := range batch {
		q.queued.Store(false)
	}
	e.running++
	return batch
}

// giveBack hands a batch's array back once its turns ran.
func (e *engine) giveBack(batch []*QP) {
	e.mu.Lock()
	clear(batch)
	e.spare = batch[:0]
	// Counted before the engine looks idle: a Quiesce that sees it idle
	// then sees the count moved, and looks again (what the batch
	// scheduled elsewhere may be on an engine it has looked at).
	e.d.batchEnds.Add(1)
	e.running--
	e.mu.Unlock()
}

func (e *engine) loop() {
	defer close(e.done)
	d := e.d
	for {
		e.awake.Store(false)
		select {
		case <-e.stopCh:
			e.reapRetired()
			return
		case <-e.wake:
		}
		e.awake.Store(true)
	busy:
		for {
			e.runBatches()
			e.reapRetired()
			select {
			case <-e.stopCh:
				e.reapRetired()
				return
			default:
			}
			if !e.spin() && !e.prepareToPark() {
				break busy
			}
		}
		d.Counters.EngineParks.Add(1)
	}
}

// runBatches runs QPs until none is runnable. A batch holds the engine's
// stripe of Device.mu; a QP whose turn needs all of it (exclusiveLocked)
// runs its next turn after the batch, under the whole lock.
func (e *engine) runBatches() {
	d := e.d
	for {
		e.mu.Lock()
		if len(e.runq) == 0 {
			e.mu.Unlock()
			return
		}
		batch := e.takeLocked()
		e.mu.Unlock()
		d.Counters.EngineRuns.Add(e.idx, 1)
		d.mu.lockStripe(e)
		e.nowOK = false
		held := time.Now()
		var all []*QP
		for i, q := range batch {
			switch {
			case q.destroyed:
			case q.eng() != e:
				// Moved to another engine while it waited here
				// (moveLocked): that one runs it.
				q.eng().schedule(q)
			case q.wantAll:
				all = append(all, q)
			default:
				e.turnLocked(q)
			}
			// After the last turn the batch ends anyway: no clock read.
			if i+1 < len(batch) && (d.mu.contended() || time.Since(held) > maxHold) {
				// Someone waits for the device (a verb, a timer, the
				// wire): it goes first. A QP turn is bounded (run.go),
				// so the wait is one turn, not a batch.
				e.nowOK = false
				d.mu.yield(e)
				held = time.Now()
			}
		}
		e.nowOK = false
		d.mu.unlockStripe(e)
		if len(all) > 0 {
			e.runExclusive(all)
		}
		e.giveBack(batch)
	}
}

// runExclusive runs one turn of each of qs under all of Device.mu: turns
// that touch what other engines' turns may be reading (the key table, the
// packets of other QPs; exclusiveLocked).
func (e *engine) runExclusive(qs []*QP) {
	d := e.d
	d.mu.Lock()
	d.Counters.ExclusiveRuns.Add(uint64(len(qs)))
	for _, q := range qs {
		if q.destroyed || q.eng() != e {
			continue
		}
		q.wantAll = false
		e.exclusive = true
		e.turnLocked(q)
		e.exclusive = false
	}
	e.nowOK = false
	d.mu.Unlock()
}

// exclusiveLocked reports whether q's turn holds all of Device.mu, as a
// turn that changes the key table or reaches into other QPs' queues must
// (a LOCAL_INV, a bind, a SEND_WITH_INV). With one engine every turn
// does. Otherwise the caller stops short of that work, and q's next turn
// runs under the whole lock (runExclusive).
func (q *QP) exclusiveLocked() bool {
	e := q.eng()
	if len(q.dev.engines) == 1 || e.exclusive {
		return true
	}
	q.wantAll = true
	e.schedule(q)
	return false
}

// spinYield is how often the spin loop lets other goroutines have its P.
const spinYield = 10 * time.Microsecond

// watch adds q to the QPs the spin loop polls; its SQ no longer needs a
// doorbell while the engine watches it.
func (e *engine) watch(q *QP) {
	if q.watched.Load() {
		return
	}
	q.watched.Store(true)
	q.sq.SetNeedWakeup(false)
	e.watched = append(e.watched, q)
}

// newSendWork reports whether a client published send WQEs the engine has
// not fetched. It reads only atomics, without Device.mu.
func (q *QP) newSendWork() bool { return q.sq.LoadProducer() != q.sqSeen.Load() }

// spin polls the watched SQs for up to spinIdle. It reports whether it
// found work (and scheduled it).
func (e *engine) spin() bool {
	if e.spinIdle <= 0 || len(e.watched) == 0 {
		return false
	}
	// The spin is a CPU-for-latency trade, not a protocol timer, so it
	// uses the monotonic clock even under a fake Config.Clock.
	start := time.Now()
	deadline, yielded := start.Add(e.spinIdle), start
	for i := 0; ; i++ {
		found := false
		for _, q := range e.watched {
			if q.newSendWork() {
				q.eng().schedule(q)
				found = true
			}
		}
		if found || e.pending() {
			return true
		}
		if i&63 == 63 {
			now := time.Now()
			if now.After(deadline) {
				return false
			}
			select {
			case <-e.stopCh:
				return false
			default:
			}
			// Let the goroutines waiting for this P run, but not every
			// 64 rounds: each Gosched also wakes an idle thread to look
			// for work (the runtime's wakep, a futex), which on a
			// two-core host takes the CPU from the thread the round trip
			// waits for.
			if now.Sub(yielded) >= spinYield {
				runtime.Gosched()
				yielded = now
			}
		}
	}
}

// prepareToPark raises NEED_WAKEUP on every watched SQ and then looks once
// more. It reports whether work turned up (the engine must not park).
func (e *engine) prepareToPark() bool {
	for _, q := range e.watched {
		q.sq.SetNeedWakeup(true)
	}
	found := false
	for _, q := range e.watched {
		if q.newSendWork() {
			q.sq.SetNeedWakeup(false)
			q.eng().schedule(q)
			found = true
		}
	}
	if found {
		return true
	}
	for _, q := range e.watched {
		q.watched.Store(false)
	}
	clear(e.watched)
	e.watched = e.watched[:0]
	return e.pending()
}

// pending reports whether a QP is runnable. A QP scheduled just after it
// looked is not lost: schedule also signals e.wake, which the loop reads
// before it sleeps.
func (e *engine) pending() bool { return e.queued.Load() > 0 }

// retire hands a destroyed QP's rings to the engines, which unmap them
// once none polls them any more: every engine, since one the QP moved
// away from (moveLocked) may poll it until it parks.
func (d *Device) retire(q *QP) {
	q.retireLeft.Store(int32(len(d.engines)))
	for _, e := range d.engines {
		e.mu.Lock()
		e.retired = append(e.retired, q)
		e.mu.Unlock()
		e.signal()
	}
}

// reapRetired unmaps the rings of destroyed QPs. Engine goroutine only.
func (e *engine) reapRetired() {
	e.mu.Lock()
	r := e.retired
	e.retired = nil
	e.mu.Unlock()
	if len(r) == 0 {
		return
	}
	// They left the doorbell's view when destroyed; a wake may still be
	// looking at an older one.
	e.d.waitBellScan()
	for _, q := range r {
		if i := slices.Index(e.watched, q); i >= 0 {
			q.watched.Store(false)
			e.watched = slices.Delete(e.watched, i, i+1)
		}
		if q.retireLeft.Add(-1) > 0 {
			continue // another engine may still poll it
		}
		q.sqRegion.Close()
		if q.rqRegion != nil {
			q.rqRegion.Close()
		}
	}
}

// idle reports whether nothing is runnable and nothing runs, not even a
// goroutine that holds the engine's wake-up back (it may still rearm
// doorbells or run what it scheduled).
func (e *engine) idle() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.running == 0 && len(e.runq) == 0 && e.held.Load() == 0
}

// enginesIdle reports whether every engine is idle.
func (d *Device) enginesIdle() bool {
	for _, e := range d.engines {
		if !e.idle() {
			return false
		}
	}
	return true
}

// Quiesce waits until the engines have nothing left to do: every packet
// between the device's own QPs delivered, every completion written.
// Pending timers (RNR, retry) do not count; advance the clock to fire
// them. Datagrams on the wire do not either: only the peer knows when it
// has them. For tests and tools.
func (d *Device) Quiesce() {
	for {
		// Engines schedule each other's QPs from their turns: all idle,
		// with no batch begun or ended meanwhile, is idle at one instant
		// (a batch that ends while the others are looked at may have
		// scheduled a QP on an engine already looked at).
		gen := func() uint64 { return d.Counters.EngineRuns.Load() + d.batchEnds.Load() }
		before := gen()
		if d.enginesIdle() && gen() == before {
			return
		}
		runtime.Gosched()
	}
}
