package ring

import (
	"math/bits"
	"sync/atomic"
)

// The doorbell's bitmap (KindDoorbell; the package doc, Doorbell): a
// client marks the QP it rings for, and the daemon looks at the QPs of the
// marked bits only, so that a wake costs the same whatever the number of
// QPs. A summary in the header has a bit per word of the bitmap, which the
// client sets after the bitmap's bit, so that the daemon reads only the
// words the summary marks, not all 128. Each word of both is written only
// with atomic OR (clients) and swapped to zero (the daemon), so any number
// of clients mark at once and none waits.

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

// MarkBell sets bit qpn mod the bitmap's size, then the summary's bit of
// the bitmap word that holds it. A bit already set is left alone (one
// load, no write to a line other clients may be marking): the daemon has
// not taken it yet, and when it does it sees what was published before
// this call. Each bit is checked on its own: a bitmap bit set with its
// summary bit clear (a scribbler's, or another client's between its two
// ORs) still gets the summary bit from this call. Sequentially consistent,
// so the publish of the producer index before it is seen by whoever takes
// the bit.
func (r *Ring) MarkBell(qpn uint32) {
	bit := qpn & (r.bellBits() - 1)
	i := bit / 32
	orBit(r.dataWord(i), uint32(1)<<(bit%32))
	s := i % BellSummaryBits
	orBit(&r.summary[s/32], uint32(1)<<(s%32))
}

func orBit(w *uint32, m uint32) {
	if atomic.LoadUint32(w)&m == 0 {
		atomic.OrUint32(w, m)
	}
}

// TakeBells is the daemon's side: it swaps each marked word of the summary
// to zero, then each bitmap word its bits mark, and calls fn with each bit
// that was set in those (lowest first within a word; in order overall for
// the doorbell's geometry, where summary bit i is bitmap word i). A bit
// marked after its summary word was taken is seen by the next call: the
// client sets the summary bit after the bitmap bit and bumps the event word
// after both, so a daemon that read the word before calling TakeBells and
// waits on it (WaitEvent) calls again, and finds the summary bit. The
// bits say only which QP numbers modulo BellBits a client claims: any user
// can set any of them, so the caller checks the QPs themselves; a bitmap
// bit whose summary bit nobody sets is not looked at.
func (r *Ring) TakeBells(fn func(bit uint32)) {
	n := r.bellBits() / 32
	for k := range uint32(BellSummaryWords) {
		sw := &r.summary[k]
		if atomic.LoadUint32(sw) == 0 {
			continue
		}
		s := atomic.SwapUint32(sw, 0)
		for s != 0 {
			// Word i, and (a bitmap bigger than the summary) the words
			// equal to it modulo BellSummaryBits.
			for i := k*32 + uint32(bits.TrailingZeros32(s)); i < n; i += BellSummaryBits {
				r.takeWord(i, fn)
			}
			s &= s - 1
		}
	}
}

// takeWord swaps bitmap word i to zero and calls fn with its set bits.
func (r *Ring) takeWord(i uint32, fn func(bit uint32)) {
	w := r.dataWord(i)
	if atomic.LoadUint32(w) == 0 {
		return
	}
	v := atomic.SwapUint32(w, 0)
	for v != 0 {
		fn(i*32 + uint32(bits.TrailingZeros32(v)))
		v &= v - 1
	}
}
