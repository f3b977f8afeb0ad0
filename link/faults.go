package link

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

// Faults says what the fault injector does. Probabilities are per packet,
// in [0, 1]. QPN scopes it to packets sent by or to one QP (0: every
// packet).
type Faults struct {
	Drop    float64
	Dup     float64
	Delay   float64
	Reorder float64
	// DelayFor is how long a delayed packet is held.
	DelayFor time.Duration
	Seed     uint64
	QPN      uint32
}

// Active reports whether f does anything.
func (f Faults) Active() bool { return f.Drop > 0 || f.Dup > 0 || f.Delay > 0 || f.Reorder > 0 }

// String is the text form the device's ParseFaults reads ("off" when
// inactive).
func (f Faults) String() string {
	if !f.Active() {
		return "off"
	}
	s := fmt.Sprintf("drop=%g dup=%g delay=%g delay_us=%d reorder=%g seed=%d",
		f.Drop, f.Dup, f.Delay, f.DelayFor.Microseconds(), f.Reorder, f.Seed)
	if f.QPN != 0 {
		s += fmt.Sprintf(" qp=%d", f.QPN)
	}
	return s
}

// FaultInjector is the network between requester and responder losing,
// duplicating, delaying and reordering packets on purpose, so that the
// transport's recovery (retransmission, duplicate detection, sequence
// NAKs) can be watched and tested on one machine. It is the top of the
// chain, in front of the route, so it acts on every packet the device
// sends, loopback or wire. Inactive (the default) it passes every batch on
// untouched.
//
// Its fields are guarded by the chain's lock.
type FaultInjector struct {
	next      Endpoint
	lock      sync.Locker
	afterFunc func(time.Duration, func())
	c         *Counters

	f      Faults
	on     bool // f.Active(), kept: the direct path asks at every WR (Touches)
	rng    *rand.Rand
	held   Packet // a packet waiting to be passed by the next one (reorder)
	gen    uint64 // invalidates the delay timers of earlier settings
	closed bool
	out    []Packet // scratch for the batch passed on
}

// NewFaultInjector returns an inactive injector in front of next. lock is
// the chain's lock, which a delayed packet's timer takes to send it;
// afterFunc is the device's clock.
func NewFaultInjector(next Endpoint, lock sync.Locker, afterFunc func(time.Duration, func()), c *Counters) *FaultInjector {
	return &FaultInjector{next: next, lock: lock, afterFunc: afterFunc, c: c}
}

// Set installs f (an inactive f turns the injector off). A packet held for
// reordering is sent; delayed ones still in flight are lost, as if the
// network had dropped them.
//
// Preconditions: the chain's lock is held.
func (fl *FaultInjector) Set(f Faults) {
	fl.flush()
	fl.f = f
	fl.on = f.Active()
	fl.rng = nil
	if fl.on {
		fl.rng = rand.New(rand.NewPCG(f.Seed, f.Seed^0x9e3779b97f4a7c15))
	}
}

// Get returns the settings.
//
// Preconditions: the chain's lock is held.
func (fl *FaultInjector) Get() Faults {
	if !fl.on {
		return Faults{}
	}
	return fl.f
}

// Touches reports whether the injector is on for packets between QPs a
// and b (a rule for every QP, or for one of them), without copying its
// settings out (Get): the device asks for every packet of the direct
// path.
func (fl *FaultInjector) Touches(a, b uint32) bool {
	f := &fl.f
	return fl.on && (f.QPN == 0 || f.QPN == a || f.QPN == b)
}

func (fl *FaultInjector) applies(m Meta) bool {
	return fl.f.QPN == 0 || m.DestQPN == fl.f.QPN || m.SrcQPN == fl.f.QPN
}

// WritePackets implements Endpoint.WritePackets.
func (fl *FaultInjector) WritePackets(pkts []Packet) {
	if !fl.on {
		fl.next.WritePackets(pkts)
		return
	}
	out := fl.out[:0]
	fl.out = nil // in use; a nested write (loopback) gets its own
	f := &fl.f
	for _, p := range pkts {
		if !fl.applies(p.Meta()) {
			out = append(out, p)
			continue
		}
		switch {
		case f.Drop > 0 && fl.rng.Float64() < f.Drop:
			fl.c.FaultDrops.Add(1)
			p.Done(false)
			continue
		case f.Dup > 0 && fl.rng.Float64() < f.Dup:
			fl.c.FaultDups.Add(1)
			out = append(out, p.Clone())
		case f.Delay > 0 && fl.rng.Float64() < f.Delay:
			fl.c.FaultDelays.Add(1)
			p.Hold()
			fl.delay(p, f.DelayFor)
			continue
		case f.Reorder > 0 && fl.held == nil && fl.rng.Float64() < f.Reorder:
			fl.c.FaultReorders.Add(1)
			p.Hold()
			fl.held = p
			continue
		}
		out = append(out, p)
		if h := fl.held; h != nil {
			fl.held = nil
			out = append(out, h)
		}
	}
	if len(out) > 0 {
		fl.next.WritePackets(out)
	}
	clear(out)
	fl.out = out[:0]
}

// delay sends p after d, unless the settings change or the chain closes
// first (then it is lost).
func (fl *FaultInjector) delay(p Packet, d time.Duration) {
	gen := fl.gen
	fl.afterFunc(d, func() {
		fl.lock.Lock()
		defer fl.lock.Unlock()
		if fl.gen != gen || fl.closed {
			p.Done(false)
			return
		}
		fl.next.WritePackets([]Packet{p})
	})
}

// flush sends a packet held for reordering and disowns pending delayed
// ones (they are dropped when their timers fire).
func (fl *FaultInjector) flush() {
	fl.gen++
	if h := fl.held; h != nil {
		fl.held = nil
		fl.next.WritePackets([]Packet{h})
	}
}

// Attach implements Endpoint.Attach.
func (fl *FaultInjector) Attach(d Dispatcher) { fl.next.Attach(d) }

// Close implements Endpoint.Close: delayed packets are lost, a held one is
// dropped, and the rest of the chain closes.
func (fl *FaultInjector) Close() {
	fl.lock.Lock()
	fl.closed = true
	fl.gen++
	if h := fl.held; h != nil {
		fl.held = nil
		h.Done(false)
	}
	fl.lock.Unlock()
	fl.next.Close()
}
