package device

import (
	"sync/atomic"
	"unsafe"
)

// The responder's atomics act on MR memory that a client may be touching
// through its own mapping at the same time, so they use real atomic
// instructions, not a read-modify-write under the device lock. Operands are
// in host byte order, as verbs atomics are.

func aligned8(b []byte) bool { return uintptr(unsafe.Pointer(&b[0]))&7 == 0 }

func word(b []byte) *uint64 { return (*uint64)(unsafe.Pointer(&b[0])) }

func atomicCompareSwap(b []byte, compare, swap uint64) uint64 {
	w := word(b)
	for {
		old := atomic.LoadUint64(w)
		if old != compare {
			return old
		}
		if atomic.CompareAndSwapUint64(w, old, swap) {
			return old
		}
	}
}

func atomicFetchAdd(b []byte, add uint64) uint64 {
	return atomic.AddUint64(word(b), add) - add
}

// atomicStore is ATOMIC WRITE's store: one aligned 8-byte store, so that a
// concurrent reader sees the whole old or the whole new word.
func atomicStore(b []byte, v uint64) { atomic.StoreUint64(word(b), v) }
