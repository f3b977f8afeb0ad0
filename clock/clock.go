// Package clock is the time source of the device's timers (RNR, retransmit,
// engine idle). Production code uses Real; tests use Fake and move time with
// Advance, so behaviour that waits milliseconds runs in microseconds and
// deterministically.
package clock

import (
	"sort"
	"sync"
	"time"
)

// Clock gives the current time and one-shot timers.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f in its own goroutine (Real) or in the goroutine that
	// advances time (Fake) once d has passed.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a pending AfterFunc.
type Timer interface {
	// Stop prevents the call if it has not happened; it reports whether it
	// did prevent it.
	Stop() bool
}

// Real is the wall clock.
type Real struct{}

func (Real) Now() time.Time { return time.Now() }

func (Real) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// Fake is a manual clock. Timers fire only inside Advance, in deadline order,
// outside Fake's lock, so a callback may start new timers.
type Fake struct {
	mu     sync.Mutex
	now    time.Time
	seq    uint64
	timers []*fakeTimer
}

// NewFake returns a Fake clock set to an arbitrary fixed instant.
func NewFake() *Fake { return &Fake{now: time.Unix(1_700_000_000, 0)} }

type fakeTimer struct {
	c    *Fake
	when time.Time
	seq  uint64
	f    func()
	done bool
}

func (c *Fake) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *Fake) AfterFunc(d time.Duration, f func()) Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	t := &fakeTimer{c: c, when: c.now.Add(d), seq: c.seq, f: f}
	c.timers = append(c.timers, t)
	return t
}

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	if t.done {
		return false
	}
	t.done = true
	for i, x := range t.c.timers {
		if x == t {
			t.c.timers = append(t.c.timers[:i], t.c.timers[i+1:]...)
			break
		}
	}
	return true
}

// Pending is the number of timers not yet fired or stopped.
func (c *Fake) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// Advance moves time forward by d, firing every timer that falls due, each
// at its own deadline.
func (c *Fake) Advance(d time.Duration) {
	c.mu.Lock()
	end := c.now.Add(d)
	c.mu.Unlock()
	for {
		c.mu.Lock()
		sort.Slice(c.timers, func(i, j int) bool {
			if c.timers[i].when.Equal(c.timers[j].when) {
				return c.timers[i].seq < c.timers[j].seq
			}
			return c.timers[i].when.Before(c.timers[j].when)
		})
		if len(c.timers) == 0 || c.timers[0].when.After(end) {
			c.now = end
			c.mu.Unlock()
			return
		}
		t := c.timers[0]
		c.timers = c.timers[1:]
		t.done = true
		if t.when.After(c.now) {
			c.now = t.when
		}
		c.mu.Unlock()
		t.f()
	}
}
