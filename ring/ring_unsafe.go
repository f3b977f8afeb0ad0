package ring

import (
	"fmt"
	"math"
	"os"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// futex(2) operations. Not FUTEX_PRIVATE_FLAG: the word lives in a
// MAP_SHARED mapping that other processes (and other mappings of the same
// memfd in this process) wait on, so the kernel must key it by page, not
// by address.
const (
	futexWait = 0
	futexWake = 1
)

// aligned reports whether mem starts on an 8-byte boundary, which makes
// every 4-byte header word naturally aligned for atomics and futex(2).
func aligned(mem []byte) bool {
	return uintptr(unsafe.Pointer(unsafe.SliceData(mem)))%8 == 0
}

// word returns the shared header word at off as a *uint32. mem is at least
// HeaderSize bytes and aligned, checked by the callers.
func word(mem []byte, off int) *uint32 {
	return (*uint32)(unsafe.Pointer(&mem[off]))
}

// newRing builds the view. mem is exactly Size(slotSize, slotCount) bytes,
// validated by Init or Attach.
func newRing(mem []byte, kind Kind, slotSize, slotCount uint32) *Ring {
	return &Ring{
		kind:      kind,
		slotSize:  slotSize,
		slotCount: slotCount,
		mask:      slotCount - 1,
		shift:     log2(slotSize),
		data:      mem[HeaderSize:len(mem):len(mem)],
		prod:      word(mem, OffProducer),
		cons:      word(mem, OffConsumer),
		flags:     word(mem, OffFlags),
		event:     word(mem, OffEventSeq),
		armed:     word(mem, OffArmed),
		summary:   (*[BellSummaryWords]uint32)(unsafe.Pointer(&mem[OffBellSummary])),
	}
}

// Go's sync/atomic operations are sequentially consistent, which is at
// least the acquire (loads) and release (stores) the index protocol needs,
// and also the full fence the NEED_WAKEUP handshake needs between a store
// and the following load of the other word.

// LoadProducer loads the producer index (acquire).
func (r *Ring) LoadProducer() uint32 { return atomic.LoadUint32(r.prod) }

// StoreProducer publishes the producer index (release): every slot write
// before it is visible to a consumer that loads the new value.
func (r *Ring) StoreProducer(v uint32) { atomic.StoreUint32(r.prod, v) }

// LoadConsumer loads the consumer index (acquire).
func (r *Ring) LoadConsumer() uint32 { return atomic.LoadUint32(r.cons) }

// StoreConsumer publishes the consumer index (release): every slot read
// before it is finished before the producer may reuse the slots.
func (r *Ring) StoreConsumer(v uint32) { atomic.StoreUint32(r.cons, v) }

// NeedWakeup reports the NEED_WAKEUP flag.
func (r *Ring) NeedWakeup() bool { return atomic.LoadUint32(r.flags)&FlagNeedWakeup != 0 }

// SetNeedWakeup sets or clears NEED_WAKEUP, leaving the other flag bits.
func (r *Ring) SetNeedWakeup(on bool) {
	if on {
		atomic.OrUint32(r.flags, FlagNeedWakeup)
	} else {
		atomic.AndUint32(r.flags, ^uint32(FlagNeedWakeup))
	}
}

// EventSeq loads the event sequence word.
func (r *Ring) EventSeq() uint32 { return atomic.LoadUint32(r.event) }

// BumpEvent adds one to the event sequence and returns the new value. Call
// WakeEventWaiters after it to wake sleepers.
func (r *Ring) BumpEvent() uint32 { return atomic.AddUint32(r.event, 1) }

// WakeEventWaiters wakes every thread, in any process, blocked in
// WaitEvent (or futex(FUTEX_WAIT)) on this ring's event word.
func (r *Ring) WakeEventWaiters() {
	// Nothing useful can be done with an error: the word is mapped and
	// aligned, so EFAULT/EINVAL would be a bug caught by the tests.
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(r.event)), futexWake,
		math.MaxInt32, 0, 0, 0)
}

// WaitEvent blocks while the event word equals seq. It returns nil once the
// word differs (seq is usually a value read before checking the CQ, so an
// event between that read and the wait is never lost), and
// os.ErrDeadlineExceeded when timeout passes first. A negative timeout
// waits without limit; zero only checks. Spurious wake-ups and signals
// (EINTR) go back to waiting for the time left.
func (r *Ring) WaitEvent(seq uint32, timeout time.Duration) error {
	var deadline time.Time
	if timeout >= 0 {
		deadline = time.Now().Add(timeout)
	}
	for {
		if r.EventSeq() != seq {
			return nil
		}
		var ts *unix.Timespec
		if timeout >= 0 {
			left := time.Until(deadline)
			if left <= 0 {
				return os.ErrDeadlineExceeded
			}
			t := unix.NsecToTimespec(int64(left))
			ts = &t
		}
		_, _, e := unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(r.event)), futexWait,
			uintptr(seq), uintptr(unsafe.Pointer(ts)), 0, 0)
		switch e {
		case 0, unix.EAGAIN, unix.EINTR, unix.ETIMEDOUT:
			// Woken, word already changed, interrupted, or timed out: the
			// top of the loop decides which by looking at the word and clock.
		default:
			return fmt.Errorf("ring: futex wait: %w", e)
		}
	}
}

// Armed loads the CQ notification arming word (ArmNone, ArmNext,
// ArmSolicited).
func (r *Ring) Armed() uint32 { return atomic.LoadUint32(r.armed) }

// SetArmed stores the arming word.
func (r *Ring) SetArmed(v uint32) { atomic.StoreUint32(r.armed, v) }

// SwapArmed stores v and returns the previous value, so that exactly one
// completion consumes an arming.
func (r *Ring) SwapArmed(v uint32) uint32 { return atomic.SwapUint32(r.armed, v) }

// CompareAndSwapArmed sets the armed word to new if it holds old, so a
// request for solicited-only events never weakens a pending "next" one.
func (r *Ring) CompareAndSwapArmed(old, new uint32) bool {
	return atomic.CompareAndSwapUint32(r.armed, old, new)
}

// ReqNotify is ibv_req_notify_cq, the waiter's side of the CQ event
// protocol (package doc, memory ordering 5): arm for the next completion,
// or with solicitedOnly for the next solicited or error one. A pending
// request for any completion is never weakened to solicited-only
// (C11-31/32), hence the compare-and-swap.
func (r *Ring) ReqNotify(solicitedOnly bool) {
	if solicitedOnly {
		r.CompareAndSwapArmed(ArmNone, ArmSolicited)
	} else {
		r.SetArmed(ArmNext)
	}
}

// TakeArm is the producer's side of the CQ event protocol, after it
// published a CQE: if the arming asks for this completion (any for
// ArmNext; for ArmSolicited one that is solicited or failed), it swaps it
// to ArmNone and reports whether the event is due. The swap makes exactly
// one completion consume an arming.
func (r *Ring) TakeArm(solicited, failed bool) bool {
	switch r.Armed() {
	case ArmNext:
	case ArmSolicited:
		if !solicited && !failed {
			return false
		}
	default:
		return false
	}
	return r.SwapArmed(ArmNone) != ArmNone
}

// dataWord returns the i-th 32-bit word of the slots as a *uint32 (the
// doorbell's bitmap). The slots start 256 bytes into an aligned mapping,
// so every word is aligned; i < len(r.data)/4, checked by the callers.
func (r *Ring) dataWord(i uint32) *uint32 {
	return (*uint32)(unsafe.Pointer(&r.data[i*4]))
}
