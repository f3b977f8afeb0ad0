package ring

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
)

//go:generate go run gen_cheader.go -o ../libibverbs/rdmafs-abi.h

// Header layout. The offsets are the ABI; see the package doc.
const (
	HeaderSize = 256 // bytes before slot 0; also the value of data_offset

	OffMagic      = 0
	OffVersion    = 4
	OffKind       = 8
	OffSlotSize   = 12
	OffSlotCount  = 16
	OffDataOffset = 20
	OffProducer   = 64  // written by the producer only (client: SQ/RQ/SRQ; daemon: CQ); own cache line
	OffConsumer   = 128 // written by the consumer only (daemon: SQ/RQ/SRQ; client: CQ); own cache line
	OffFlags      = 192 // NEED_WAKEUP, written by the consumer
	OffEventSeq   = 196 // futex word, bumped by the daemon
	OffArmed      = 200 // set by the client, swapped to ArmNone by the daemon

	// OffBellSummary is the doorbell's summary (KindDoorbell only):
	// BellSummaryWords u32s, bit j of word k for the bitmap's words
	// 32k+j modulo BellSummaryBits, set by clients, swapped to zero by the
	// daemon.
	OffBellSummary = 208

	// Magic is stored little-endian: the bytes in memory are 44 52 4E 47,
	// which read "DRNG" in a hex dump.
	Magic   = 0x474E5244
	Version = 1

	// MinSlotSize is the smallest slot: one cache line, as rxe rounds its
	// elements, so that two slots never share a line.
	MinSlotSize = 64
)

// Flag bits of the word at OffFlags.
const (
	// FlagNeedWakeup: the consumer of this ring is asleep and wants a
	// doorbell once the producer publishes.
	FlagNeedWakeup = 1 << 0
)

// The doorbell's geometry (KindDoorbell): BellSlots slots of MinSlotSize
// bytes, whose BellBits bits are one per QP number modulo BellBits, and
// the summary in the header at OffBellSummary: BellSummaryBits bits, one
// per word of the bitmap (word i has bit i modulo BellSummaryBits).
const (
	BellSlots        = 8
	BellBits         = BellSlots * MinSlotSize * 8
	BellSummaryWords = 4
	BellSummaryBits  = BellSummaryWords * 32
)

// Values of the word at OffArmed (ibv_req_notify_cq).
const (
	ArmNone      = 0
	ArmNext      = 1 // fire on the next completion
	ArmSolicited = 2 // fire on the next solicited or error completion
)

// armNames are the words of the daemon's text for the arming values (a
// CQ's notify file and status).
var armNames = [...]string{ArmNone: "none", ArmNext: "next", ArmSolicited: "solicited"}

// ArmName is the word for an arming value: none, next or solicited.
func ArmName(v uint32) string {
	if v < uint32(len(armNames)) {
		return armNames[v]
	}
	return fmt.Sprintf("armed(%d)", v)
}

// ParseArm is the inverse of ArmName.
func ParseArm(name string) (uint32, bool) {
	for v, n := range armNames {
		if n == name {
			return uint32(v), true
		}
	}
	return 0, false
}

// ErrCorrupt reports a ring whose shared header or indices are impossible:
// a peer scribbled on them, or the memory is not a ring of this ABI.
var ErrCorrupt = errors.New("ring: corrupt")

// Kind says what a ring carries and so who produces into it.
type Kind uint32

const (
	KindSQ  Kind = 1 // send WQEs, client → daemon
	KindRQ  Kind = 2 // receive WQEs, client → daemon
	KindSRQ Kind = 3 // receive WQEs of a shared receive queue, client → daemon
	KindCQ  Kind = 4 // CQEs, daemon → client
	// KindDoorbell is the device doorbell: a header whose event word
	// clients bump and wake (FUTEX_WAKE) to rouse a parked engine, and
	// whose slots are a bitmap in which each marks the QP it rang for
	// (the package doc, Doorbell), with a summary of the marked words in
	// the header. 5 was the doorbell without the bitmap and 6 the bitmap
	// without the summary, which the daemon no longer serves: a client of
	// either fails to attach and wakes the engine with write() doorbells
	// instead, which every daemon takes, rather than ring a doorbell whose
	// marks the daemon would not look at.
	KindDoorbell Kind = 7
)

func (k Kind) valid() bool {
	switch k {
	case KindSQ, KindRQ, KindSRQ, KindCQ, KindDoorbell:
		return true
	}
	return false
}

// The retired doorbell kinds (see KindDoorbell): without the bitmap, and
// the bitmap without the summary.
const (
	kindOldDoorbell    Kind = 5
	kindBitmapDoorbell Kind = 6
)

func (k Kind) String() string {
	switch k {
	case KindSQ:
		return "sq"
	case KindRQ:
		return "rq"
	case KindSRQ:
		return "srq"
	case KindCQ:
		return "cq"
	case KindDoorbell:
		return "doorbell"
	}
	return fmt.Sprintf("Kind(%d)", uint32(k))
}

var le = binary.LittleEndian

func isPow2(v uint32) bool { return v != 0 && v&(v-1) == 0 }

// checkGeometry validates slot size and count; the same rule for Init and
// Attach so that anything Init writes Attach accepts.
func checkGeometry(slotSize, slotCount uint32) error {
	if !isPow2(slotSize) || slotSize < MinSlotSize {
		return fmt.Errorf("slot_size %d is not a power of two ≥ %d", slotSize, MinSlotSize)
	}
	if !isPow2(slotCount) {
		return fmt.Errorf("slot_count %d is not a power of two", slotCount)
	}
	// Both are ≤ 2^31, so the product is ≤ 2^62: only 32-bit ints overflow.
	if uint64(slotSize)*uint64(slotCount) > math.MaxInt-HeaderSize {
		return fmt.Errorf("%d slots of %d bytes do not fit the address space", slotCount, slotSize)
	}
	return nil
}

// Size is the number of bytes a ring of slotCount slots of slotSize bytes
// needs (header included), or -1 when the geometry is invalid: slotSize
// must be a power of two ≥ MinSlotSize and slotCount a power of two.
func Size(slotSize, slotCount uint32) int {
	if checkGeometry(slotSize, slotCount) != nil {
		return -1
	}
	return HeaderSize + int(slotSize)*int(slotCount)
}

// Ring is a view of one ring in shared memory.
//
// The geometry (kind, slot size and count) is copied at Init or Attach and
// never read again from the header: the peer can rewrite the header at any
// time, and bounds must not depend on what it writes. Only the index,
// flags, event and armed words are shared, and only through atomics.
//
// A Ring's methods are safe for concurrent use. The memory it views must
// stay mapped for as long as the Ring and the slices it returns are used.
type Ring struct {
	kind      Kind
	slotSize  uint32
	slotCount uint32
	mask      uint32
	shift     uint   // log2(slotSize)
	data      []byte // the slots: exactly slotSize*slotCount bytes

	// Pointers into the header, set once by newRing (ring_unsafe.go).
	prod, cons, flags, event, armed *uint32
	summary                         *[BellSummaryWords]uint32 // the doorbell's (OffBellSummary)
}

// Init writes a fresh header (zero indices and words) at the start of mem
// and returns the daemon's view. mem must be 8-byte aligned (any mapping
// is) and at least Size(slotSize, slotCount) bytes; slot contents are left
// as they are. Init must run before any peer attaches.
func Init(mem []byte, kind Kind, slotSize, slotCount uint32) (*Ring, error) {
	if !kind.valid() {
		return nil, fmt.Errorf("ring: init: invalid kind %d", uint32(kind))
	}
	if err := checkGeometry(slotSize, slotCount); err != nil {
		return nil, fmt.Errorf("ring: init: %v", err)
	}
	need := Size(slotSize, slotCount)
	if len(mem) < need {
		return nil, fmt.Errorf("ring: init: %d bytes given, %d needed", len(mem), need)
	}
	if !aligned(mem) {
		return nil, errors.New("ring: init: memory is not 8-byte aligned")
	}
	h := mem[:HeaderSize]
	clear(h)
	le.PutUint32(h[OffMagic:], Magic)
	le.PutUint32(h[OffVersion:], Version)
	le.PutUint32(h[OffKind:], uint32(kind))
	le.PutUint32(h[OffSlotSize:], slotSize)
	le.PutUint32(h[OffSlotCount:], slotCount)
	le.PutUint32(h[OffDataOffset:], HeaderSize)
	return newRing(mem[:need], kind, slotSize, slotCount), nil
}

// Attach validates the header at the start of mem (magic, version, kind,
// geometry, and that the slots fit in mem) and returns a view: the client's
// way in. Failures wrap ErrCorrupt.
func Attach(mem []byte, kind Kind) (*Ring, error) {
	if len(mem) < HeaderSize {
		return nil, fmt.Errorf("%w: %d bytes is shorter than the %d-byte header", ErrCorrupt, len(mem), HeaderSize)
	}
	if !aligned(mem) {
		return nil, errors.New("ring: attach: memory is not 8-byte aligned")
	}
	// Read each field once: the peer may be writing the header right now.
	h := mem[:HeaderSize]
	magic := le.Uint32(h[OffMagic:])
	version := le.Uint32(h[OffVersion:])
	k := Kind(le.Uint32(h[OffKind:]))
	slotSize := le.Uint32(h[OffSlotSize:])
	slotCount := le.Uint32(h[OffSlotCount:])
	dataOff := le.Uint32(h[OffDataOffset:])
	switch {
	case magic != Magic:
		return nil, fmt.Errorf("%w: bad magic %#x", ErrCorrupt, magic)
	case version != Version:
		return nil, fmt.Errorf("%w: version %d, want %d", ErrCorrupt, version, Version)
	case k != kind || !kind.valid():
		return nil, fmt.Errorf("%w: kind %v, want %v", ErrCorrupt, k, kind)
	case dataOff != HeaderSize:
		return nil, fmt.Errorf("%w: data_offset %d, want %d", ErrCorrupt, dataOff, HeaderSize)
	}
	if err := checkGeometry(slotSize, slotCount); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	need := Size(slotSize, slotCount)
	if len(mem) < need {
		return nil, fmt.Errorf("%w: %d slots of %d bytes need %d bytes, have %d", ErrCorrupt, slotCount, slotSize, need, len(mem))
	}
	return newRing(mem[:need], kind, slotSize, slotCount), nil
}

// Kind returns the ring's kind as fixed at Init or Attach.
func (r *Ring) Kind() Kind { return r.kind }

// SlotSize returns the slot size in bytes as fixed at Init or Attach.
func (r *Ring) SlotSize() uint32 { return r.slotSize }

// SlotCount returns the number of slots, which is also the capacity.
func (r *Ring) SlotCount() uint32 { return r.slotCount }

// Slot returns the slot of the free-running index idx (idx mod SlotCount).
// The slice aliases shared memory and has capacity SlotSize, so appending
// to it cannot spill into the next slot. Who may touch it when is the
// index protocol's business (see the package doc).
func (r *Ring) Slot(idx uint32) []byte {
	off := uint(idx&r.mask) << r.shift
	end := off + uint(r.slotSize)
	return r.data[off:end:end]
}

// Producer is one side's private cursor for producing into a ring. It is
// not safe for concurrent use: serialise posters with a lock, as rdma-core's
// rxe provider does per queue.
type Producer struct {
	r    *Ring
	head uint32 // next slot to fill; published by Publish
}

// NewProducer starts at the ring's current producer index.
func NewProducer(r *Ring) *Producer { return &Producer{r: r, head: r.LoadProducer()} }

// Free returns how many slots may be filled now. It loads the peer's
// consumer index once: call it once per batch. A consumer index ahead of
// head or more than SlotCount behind it is ErrCorrupt.
func (p *Producer) Free() (uint32, error) {
	cons := p.r.LoadConsumer()
	used := p.head - cons // wraps correctly on free-running indices
	if used > p.r.slotCount {
		return 0, fmt.Errorf("%w: %v consumer index %d against producer %d (%d slots)",
			ErrCorrupt, p.r.kind, cons, p.head, p.r.slotCount)
	}
	return p.r.slotCount - used, nil
}

// Next returns the slot at head, to be filled before Advance. Call it only
// when Free reported room; the slot belongs to the producer until Publish.
func (p *Producer) Next() []byte { return p.r.Slot(p.head) }

// Advance moves head past the slot just filled, without publishing it.
func (p *Producer) Advance() { p.head++ }

// Publish makes every slot before head visible to the consumer (release).
func (p *Producer) Publish() { p.r.StoreProducer(p.head) }

// Head returns the private producer index.
func (p *Producer) Head() uint32 { return p.head }

// Consumer is one side's private cursor for consuming from a ring. It is not
// safe for concurrent use.
type Consumer struct {
	r    *Ring
	tail uint32 // next slot to read; published by Publish
}

// NewConsumer starts at the ring's current consumer index.
func NewConsumer(r *Ring) *Consumer { return &Consumer{r: r, tail: r.LoadConsumer()} }

// Pending returns how many published slots wait to be consumed. It loads the
// peer's producer index once: call it once per batch and Peek only below
// the count it returned. A count above SlotCount is ErrCorrupt.
func (c *Consumer) Pending() (uint32, error) {
	prod := c.r.LoadProducer()
	n := prod - c.tail
	if n > c.r.slotCount {
		return 0, fmt.Errorf("%w: %v producer index %d against consumer %d (%d slots)",
			ErrCorrupt, c.r.kind, prod, c.tail, c.r.slotCount)
	}
	return n, nil
}

// Peek returns the slot at tail+i. The slice stays the consumer's until a
// Publish moves the consumer index past it; the producer may overwrite it
// from then on. A hostile producer can change it at any time: copy fields
// out once, validate the copies.
func (c *Consumer) Peek(i uint32) []byte { return c.r.Slot(c.tail + i) }

// Advance moves tail past n consumed slots, without publishing.
func (c *Consumer) Advance(n uint32) { c.tail += n }

// Publish hands every slot before tail back to the producer (release).
func (c *Consumer) Publish() { c.r.StoreConsumer(c.tail) }

// Tail returns the private consumer index.
func (c *Consumer) Tail() uint32 { return c.tail }

// Reset moves the private tail to idx without publishing it: the daemon
// discards a queue with c.Reset(r.LoadProducer()); c.Publish() (as RESET
// does, without completions), or resynchronises after recreating a view.
func (c *Consumer) Reset(idx uint32) { c.tail = idx }

// log2 of a power of two.
func log2(v uint32) uint { return uint(bits.TrailingZeros32(v)) }
