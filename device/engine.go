package device

import (
	"runtime"
	"sync"
	"time"
)

// engine runs QPs that have work. One goroutine serves the whole device:
// QPs are marked runnable (a post, a doorbell, an arriving packet, a timer)
// and the goroutine runs each under Device.mu, then parks on a channel when
// nothing is runnable, so an idle device costs no CPU whatever its number of
// QPs. A QP marked while it runs is run again (rxe_task's "armed" idea).
type engine struct {
	d *Device

	mu      sync.Mutex
	running bool  // a batch is being run; guarded by mu
	runq    []*QP // guarded by mu
	spare   []*QP // guarded by mu
	wake    chan struct{}
	stopCh  chan struct{}
	done    chan struct{}

	// now is the clock read once per batch, for the many timestamps a
	// batch takes (one per ACK); guarded by Device.mu, valid while nowOK.
	now   time.Time
	nowOK bool
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
	e.mu.Lock()
	if !q.queued {
		q.queued = true
		e.runq = append(e.runq, q)
	}
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
			return
		case <-e.wake:
		}
		for {
			e.mu.Lock()
			// Double buffering: runq and spare never share an array.
			batch := e.runq
			e.runq, e.spare = e.spare[:0], nil
			for _, q := range batch {
				q.queued = false
			}
			e.running = len(batch) > 0
			if len(batch) == 0 {
				e.spare = batch
				e.mu.Unlock()
				break
			}
			e.mu.Unlock()
			d.Counters.EngineRuns.Add(1)
			d.mu.Lock()
			e.nowOK = false
			for _, q := range batch {
				if !q.destroyed {
					q.runLocked()
				}
			}
			e.nowOK = false
			d.mu.Unlock()
			e.mu.Lock()
			clear(batch)
			e.spare = batch[:0]
			e.running = false
			e.mu.Unlock()
			select {
			case <-e.stopCh:
				return
			default:
			}
		}
		d.Counters.EngineParks.Add(1)
	}
}

// idle reports whether nothing is runnable and nothing runs.
func (e *engine) idle() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return !e.running && len(e.runq) == 0
}

// Quiesce waits until the engine has nothing left to do: every packet in
// flight delivered, every completion written. Pending timers (RNR, retry)
// do not count; advance the clock to fire them. For tests and tools.
func (d *Device) Quiesce() {
	for !d.engine.idle() {
		runtime.Gosched()
	}
}
