package device

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Fault injection: the network between requester and responder loses,
// duplicates, delays and reorders packets on purpose, so that the
// transport's recovery (retransmission, duplicate detection, sequence NAKs)
// can be watched and tested on one machine. It sits in front of the route
// (loopback or wire), so it acts on every packet the device sends.

// Faults says what the injector does. Probabilities are per packet, in
// [0, 1]. QPN scopes it to packets sent by or to one QP (0: every packet).
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

// String is the text form ParseFaults reads ("off" when inactive).
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

// ParseFaults reads "drop=P dup=P delay=P delay_us=N reorder=P seed=N
// qp=N" (any subset; the rest zero) or "off".
func ParseFaults(s string) (Faults, error) {
	const op = "faults"
	var f Faults
	f.DelayFor = time.Millisecond
	s = strings.TrimSpace(s)
	if s == "off" || s == "" {
		return Faults{}, nil
	}
	seen := map[string]bool{}
	for _, tok := range strings.Fields(s) {
		k, v, ok := strings.Cut(tok, "=")
		if !ok || v == "" {
			return Faults{}, errf(op, syscall.EINVAL, "%q: want key=value", tok)
		}
		if seen[k] {
			return Faults{}, errf(op, syscall.EINVAL, "%s: repeated key", k)
		}
		seen[k] = true
		prob := func(dst *float64) error {
			p, err := strconv.ParseFloat(v, 64)
			if err != nil || p < 0 || p > 1 || p != p {
				return errf(op, syscall.EINVAL, "%s: %q is not a probability in [0, 1]", k, v)
			}
			*dst = p
			return nil
		}
		var err error
		switch k {
		case "drop":
			err = prob(&f.Drop)
		case "dup":
			err = prob(&f.Dup)
		case "delay":
			err = prob(&f.Delay)
		case "reorder":
			err = prob(&f.Reorder)
		case "delay_us":
			n, perr := strconv.ParseUint(v, 0, 32)
			if perr != nil || n == 0 || n > 10_000_000 {
				err = errf(op, syscall.EINVAL, "delay_us: %q not in 1..10000000", v)
			}
			f.DelayFor = time.Duration(n) * time.Microsecond
		case "seed":
			n, perr := strconv.ParseUint(v, 0, 64)
			if perr != nil {
				err = errf(op, syscall.EINVAL, "seed: %q is not a number", v)
			}
			f.Seed = n
		case "qp":
			n, perr := strconv.ParseUint(v, 0, 32)
			if perr != nil || n > 0xFFFFFF {
				err = errf(op, syscall.EINVAL, "qp: %q is not a QPN", v)
			}
			f.QPN = uint32(n)
		default:
			err = errf(op, syscall.EINVAL, "%s: unknown key (drop dup delay delay_us reorder seed qp)", k)
		}
		if err != nil {
			return Faults{}, err
		}
	}
	return f, nil
}

// SetFaults installs f (an inactive f removes the injector). A packet held
// for reordering is delivered; delayed ones still in flight are lost, as
// if the network had dropped them.
func (d *Device) SetFaults(f Faults) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.checkOpenLocked("faults"); err != nil {
		return err
	}
	if old, ok := d.link.(*faultInjector); ok {
		old.flushLocked()
		d.link = old.next
	}
	if f.Active() {
		d.link = &faultInjector{d: d, next: d.link, f: f, rng: rand.New(rand.NewPCG(f.Seed, f.Seed^0x9e3779b97f4a7c15))}
	}
	return nil
}

// Faults returns the injector's settings.
func (d *Device) Faults() Faults {
	d.mu.Lock()
	defer d.mu.Unlock()
	if fl, ok := d.link.(*faultInjector); ok {
		return fl.f
	}
	return Faults{}
}

// faultInjector is the injector. Guarded by Device.mu like every link.
type faultInjector struct {
	d    *Device
	next link
	f    Faults
	rng  *rand.Rand
	held *packet // a packet waiting to be passed by the next one (reorder)
	gen  uint64  // invalidates delay timers of a removed injector
}

func (fl *faultInjector) applies(p *packet) bool {
	return fl.f.QPN == 0 || p.destQPN == fl.f.QPN || p.srcQPN == fl.f.QPN
}

func (fl *faultInjector) xmitLocked(p *packet) {
	d := fl.d
	if !fl.applies(p) {
		fl.next.xmitLocked(p)
		return
	}
	f := &fl.f
	switch {
	case f.Drop > 0 && fl.rng.Float64() < f.Drop:
		d.Counters.FaultDrops.Add(1)
		d.pool.put(p)
		return
	case f.Dup > 0 && fl.rng.Float64() < f.Dup:
		d.Counters.FaultDups.Add(1)
		fl.next.xmitLocked(fl.clone(p))
	case f.Delay > 0 && fl.rng.Float64() < f.Delay:
		d.Counters.FaultDelays.Add(1)
		p.own()
		gen := fl.gen
		d.clock.AfterFunc(f.DelayFor, func() {
			d.mu.Lock()
			defer d.mu.Unlock()
			if d.link == fl && fl.gen == gen && !d.closed {
				fl.next.xmitLocked(p)
			} else {
				d.pool.put(p)
			}
		})
		return
	case f.Reorder > 0 && fl.held == nil && fl.rng.Float64() < f.Reorder:
		d.Counters.FaultReorders.Add(1)
		p.own()
		fl.held = p
		return
	}
	fl.next.xmitLocked(p)
	if h := fl.held; h != nil {
		fl.held = nil
		fl.next.xmitLocked(h)
	}
}

// clone copies a packet with its own payload.
func (fl *faultInjector) clone(p *packet) *packet {
	c := fl.d.pool.get()
	buf := c.buf
	*c = *p
	c.next = nil
	c.buf = append(buf[:0], p.payload...)
	c.payload = c.buf
	c.mr = nil
	return c
}

// flushLocked delivers a packet held for reordering and disowns pending
// delayed ones (they are dropped when their timers fire).
func (fl *faultInjector) flushLocked() {
	fl.gen++
	if h := fl.held; h != nil {
		fl.held = nil
		fl.next.xmitLocked(h)
	}
}
