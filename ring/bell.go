package ring

import (
	"math/bits"
	"sync/atomic"
)

// The doorbell's bitmap (KindDoorbell; the package doc, Doorbell): a
// client marks the QP it rings for, and the daemon looks at the QPs of the
// marked bits only, so that a wake costs the same whatever the number of
// QPs. Each word is written only with atomic OR (clients) and swapped to
// zero (the daemon), so any number of clients mark at once and none waits.

// bellBits is the bitmap's size in bits: the slots' bytes times 8, a power
// of two (slot size and count are), from the geometry fixed at Init or
// Attach.
func (r *Ring) bellBits() uint32 { return uint32(len(r.data)) * 8 }

// RingBell is a client's doorbell for the QP qpn, after it published send WQEs
// that NEED_WAKEUP asks a doorbell for: it marks qpn's bit (MarkBell),
// bumps the event word and wakes the daemon's goroutine sleeping on it.
func (r *Ring) RingBell(qpn uint32) {
	r.MarkBell(qpn)
	r.BumpEvent()
	r.WakeEventWaiters()
}

// MarkBell sets bit qpn mod the bitmap's size. A bit already set is left
// alone (one load, no write to a line other clients may be marking): the
// daemon has not taken it yet, and when it does it sees what was
// published before this call. Sequentially consistent, so the publish of
// the producer index before it is seen by whoever takes the bit.
func (r *Ring) MarkBell(qpn uint32) {
	bit := qpn & (r.bellBits() - 1)
	w := r.dataWord(bit / 32)
	m := uint32(1) << (bit % 32)
	if atomic.LoadUint32(w)&m == 0 {
		atomic.OrUint32(w, m)
	}
}

// TakeBells is the daemon's side: it swaps every marked word of the bitmap
// to zero and calls fn with each bit that was set, lowest first. A bit
// marked after its word was taken is seen by the next call; the client
// bumps the event word after marking, so a daemon that read the word
// before calling TakeBells and waits on it (WaitEvent) calls again. The
// bits say only which QP numbers modulo BellBits a client claims: any user
// can set any of them, so the caller checks the QPs themselves.
func (r *Ring) TakeBells(fn func(bit uint32)) {
	n := r.bellBits() / 32
	for i := uint32(0); i < n; i++ {
		w := r.dataWord(i)
		if atomic.LoadUint32(w) == 0 {
			continue
		}
		v := atomic.SwapUint32(w, 0)
		for v != 0 {
			b := uint32(bits.TrailingZeros32(v))
			v &= v - 1
			fn(i*32 + b)
		}
	}
}
