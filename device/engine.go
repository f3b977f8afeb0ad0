package device

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
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
type engine struct {
	d *Device

	mu      sync.Mutex
	running bool  // a batch is being run; guarded by mu
	runq    []*QP // guarded by mu
	// queued is len(runq), written under mu and read without it by the
	// spin loop, which asks on every round and must not take mu from
	// schedule (the wire's receive goroutine, timers, doorbells).
	queued  atomic.Int32
	spare   []*QP // guarded by mu
	retired []*QP // destroyed QPs whose rings the engine unmaps; guarded by mu
	wake    chan struct{}
	stopCh  chan struct{}
	done    chan struct{}

	// watched are the QPs whose SQ producer index the spin loop polls.
	// Only the engine goroutine touches it (and QP.watched).
	watched  []*QP
	spinIdle time.Duration

	// now is the clock read once per batch, for the many timestamps a
	// batch takes (one per ACK); guarded by Device.mu, valid while nowOK.
	now   time.Time
	nowOK bool
}

// maxHold is how long the engine keeps Device.mu across the QPs of a batch
// before it lets go of it once, even if nobody was seen waiting.
const maxHold = time.Millisecond

// devMutex is Device.mu: a sync.Mutex that knows whether anyone waits for
// it, so that the engine, which holds it for a batch of QP turns, can let
// a waiting verb in between two turns instead of after the batch. (A plain
// Mutex hands itself over only after a waiter has starved for a
// millisecond; until then the engine's next Lock wins.)
type devMutex struct {
	m       sync.Mutex
	waiting atomic.Int32
}

func (m *devMutex) Lock() {
	if m.m.TryLock() {
		return
	}
	m.waiting.Add(1)
	m.m.Lock()
	m.waiting.Add(-1)
}

func (m *devMutex) Unlock() { m.m.Unlock() }

// contended reports whether some goroutine waits in Lock.
func (m *devMutex) contended() bool { return m.waiting.Load() > 0 }

// yield lets the goroutines waiting now take the lock before the caller
// takes it again (for a bounded number of scheduling rounds: a waiter that
// is slow to run does not hold up the engine for long).
func (m *devMutex) yield() {
	m.m.Unlock()
	for i := 0; i < 64 && m.waiting.Load() > 0; i++ {
		runtime.Gosched()
	}
	m.m.Lock()
}

// nowLocked is the time, read at most once per engine batch.
func (d *Device) nowLocked() time.Time {
	e := &d.engine
	if !e.nowOK {
		e.now, e.nowOK = d.clock.Now(), true
	}
	return e.now
}

func (e *engine) start(d *Device) {
	e.d = d
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
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

func (e *engine) loop() {
	defer close(e.done)
	d := e.d
	for {
		select {
		case <-e.stopCh:
			e.reapRetired()
			return
		case <-e.wake:
		}
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

// runBatches runs QPs until none is runnable.
func (e *engine) runBatches() {
	d := e.d
	for {
		e.mu.Lock()
		// Double buffering: runq and spare never share an array.
		batch := e.runq
		e.runq, e.spare = e.spare[:0], nil
		e.queued.Store(0)
		for _, q := range batch {
			q.queued.Store(false)
		}
		e.running = len(batch) > 0
		if len(batch) == 0 {
			e.spare = batch
			e.mu.Unlock()
			return
		}
		e.mu.Unlock()
		d.Counters.EngineRuns.Add(1)
		d.mu.Lock()
		e.nowOK = false
		held := time.Now()
		for _, q := range batch {
			if !q.destroyed {
				// The packets of one turn go to the link together
				// (one system call on the wire).
				d.batchTxLocked(true)
				q.runLocked()
				d.batchTxLocked(false)
				e.watch(q)
				d.runSoonLocked()
			}
			if d.mu.contended() || time.Since(held) > maxHold {
				// Someone waits for the device (a verb, a timer, the
				// wire): it goes first. A QP turn is bounded (run.go),
				// so the wait is one turn, not a batch.
				e.nowOK = false
				d.mu.yield()
				held = time.Now()
			}
		}
		e.nowOK = false
		d.mu.Unlock()
		e.mu.Lock()
		clear(batch)
		e.spare = batch[:0]
		e.running = false
		e.mu.Unlock()
	}
}

// watch adds q to the QPs the spin loop polls; its SQ no longer needs a
// doorbell while the engine watches it.
func (e *engine) watch(q *QP) {
	if q.watched {
		return
	}
	q.watched = true
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
	deadline := time.Now().Add(e.spinIdle)
	for i := 0; ; i++ {
		found := false
		for _, q := range e.watched {
			if q.newSendWork() {
				e.schedule(q)
				found = true
			}
		}
		if found || e.pending() {
			return true
		}
		if i&63 == 63 {
			if time.Now().After(deadline) {
				return false
			}
			select {
			case <-e.stopCh:
				return false
			default:
			}
			runtime.Gosched()
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
			e.schedule(q)
			found = true
		}
	}
	if found {
		return true
	}
	for _, q := range e.watched {
		q.watched = false
	}
	clear(e.watched)
	e.watched = e.watched[:0]
	return e.pending()
}

// pending reports whether a QP is runnable. A QP scheduled just after it
// looked is not lost: schedule also signals e.wake, which the loop reads
// before it sleeps.
func (e *engine) pending() bool { return e.queued.Load() > 0 }

// retire hands a destroyed QP's rings to the engine, which unmaps them
// once it no longer polls them.
func (e *engine) retire(q *QP) {
	e.mu.Lock()
	e.retired = append(e.retired, q)
	e.mu.Unlock()
	select {
	case e.wake <- struct{}{}:
	default:
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
	for _, q := range r {
		if q.watched {
			q.watched = false
			for i, w := range e.watched {
				if w == q {
					e.watched = append(e.watched[:i], e.watched[i+1:]...)
					break
				}
			}
		}
		q.sqRegion.Close()
		if q.rqRegion != nil {
			q.rqRegion.Close()
		}
	}
}

// idle reports whether nothing is runnable and nothing runs.
func (e *engine) idle() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return !e.running && len(e.runq) == 0
}

// Quiesce waits until the engine has nothing left to do: every packet
// between the device's own QPs delivered, every completion written.
// Pending timers (RNR, retry) do not count; advance the clock to fire
// them. Datagrams on the wire do not either: only the peer knows when it
// has them. For tests and tools.
func (d *Device) Quiesce() {
	for !d.engine.idle() {
		runtime.Gosched()
	}
}
