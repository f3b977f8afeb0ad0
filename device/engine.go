package device

import (
	"sync"
)

// engine runs QPs that have work. One goroutine serves the whole device:
// QPs are marked runnable (a post, a doorbell, an arriving packet, a timer)
// and the goroutine runs each under Device.mu, then parks on a channel when
// nothing is runnable, so an idle device costs no CPU whatever its number of
// QPs. A QP marked while it runs is run again (rxe_task's "armed" idea).
type engine struct {
	d *Device

	mu     sync.Mutex
	runq   []*QP // guarded by mu
	spare  []*QP // guarded by mu
	wake   chan struct{}
	stopCh chan struct{}
	done   chan struct{}
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
			batch := e.runq
			e.runq = e.spare[:0]
			for _, q := range batch {
				q.queued = false
			}
			e.mu.Unlock()
			if len(batch) == 0 {
				break
			}
			d.Counters.EngineRuns.Add(1)
			d.mu.Lock()
			for _, q := range batch {
				if !q.destroyed {
					q.runLocked()
				}
			}
			d.mu.Unlock()
			e.mu.Lock()
			clear(batch)
			e.spare = batch[:0]
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
