package ring

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"
)

// newHeapRing makes a ring in ordinary memory; Go allocations of this size
// are 8-byte aligned, as Init requires.
func newHeapRing(t testing.TB, kind Kind, slotSize, slotCount uint32) (*Ring, []byte) {
	t.Helper()
	mem := make([]byte, Size(slotSize, slotCount))
	r, err := Init(mem, kind, slotSize, slotCount)
	if err != nil {
		t.Fatalf("Init: %v", err)
	}
	return r, mem
}

func TestSize(t *testing.T) {
	for _, tc := range []struct {
		slotSize, slotCount uint32
		want                int
	}{
		{64, 1, 256 + 64},
		{64, 8, 256 + 512},
		{128, 1024, 256 + 128*1024},
		{1 << 31, 1 << 31, 256 + 1<<62},
		{32, 8, -1},  // below one cache line
		{96, 8, -1},  // not a power of two
		{0, 8, -1},   // zero
		{64, 0, -1},  // no slots
		{64, 12, -1}, // not a power of two
	} {
		if got := Size(tc.slotSize, tc.slotCount); got != tc.want {
			t.Errorf("Size(%d, %d) = %d, want %d", tc.slotSize, tc.slotCount, got, tc.want)
		}
	}
}

// TestInitHeaderBytes pins the header to the documented layout byte by byte.
func TestInitHeaderBytes(t *testing.T) {
	mem := make([]byte, Size(128, 16))
	for i := range mem {
		mem[i] = 0xAA // Init must clear what was there
	}
	r, err := Init(mem, KindRQ, 128, 16)
	if err != nil {
		t.Fatal(err)
	}
	want := make([]byte, HeaderSize)
	copy(want[0:], []byte{0x44, 0x52, 0x4E, 0x47}) // magic
	copy(want[4:], []byte{1, 0, 0, 0})             // version
	copy(want[8:], []byte{2, 0, 0, 0})             // kind RQ
	copy(want[12:], []byte{128, 0, 0, 0})          // slot_size
	copy(want[16:], []byte{16, 0, 0, 0})           // slot_count
	copy(want[20:], []byte{0, 1, 0, 0})            // data_offset 256
	if !bytes.Equal(mem[:HeaderSize], want) {
		t.Errorf("header:\n got % x\nwant % x", mem[:HeaderSize], want)
	}
	if r.Kind() != KindRQ || r.SlotSize() != 128 || r.SlotCount() != 16 {
		t.Errorf("geometry = %v %d %d", r.Kind(), r.SlotSize(), r.SlotCount())
	}
	if mem[HeaderSize] != 0xAA {
		t.Error("Init touched the slots")
	}

	// Each shared word lands at its offset, little-endian.
	r.StoreProducer(0x01020304)
	r.StoreConsumer(0x05060708)
	r.SetNeedWakeup(true)
	r.BumpEvent()
	r.SetArmed(ArmSolicited)
	for _, w := range []struct {
		off  int
		want uint32
	}{{OffProducer, 0x01020304}, {OffConsumer, 0x05060708}, {OffFlags, FlagNeedWakeup}, {OffEventSeq, 1}, {OffArmed, 2}} {
		if got := binary.LittleEndian.Uint32(mem[w.off:]); got != w.want {
			t.Errorf("word at %d = %#x, want %#x", w.off, got, w.want)
		}
	}
	// Slot i is at 256 + i*slot_size.
	if &r.Slot(3)[0] != &mem[HeaderSize+3*128] {
		t.Error("slot 3 is not at 256 + 3*slot_size")
	}
}

func TestInitRejects(t *testing.T) {
	good := make([]byte, Size(64, 4))
	for _, tc := range []struct {
		name                string
		mem                 []byte
		kind                Kind
		slotSize, slotCount uint32
	}{
		{"kind 0", good, 0, 64, 4},
		{"kind 5 (the retired doorbell)", good, 5, 64, 4},
		{"kind 6 (the retired bitmap doorbell)", good, 6, 64, 4},
		{"kind 8", good, 8, 64, 4},
		{"slot size 32", good, KindSQ, 32, 4},
		{"slot size 100", good, KindSQ, 100, 4},
		{"slot count 0", good, KindSQ, 64, 0},
		{"slot count 3", good, KindSQ, 64, 3},
		{"memory too short", good[:len(good)-1], KindSQ, 64, 4},
		{"memory misaligned", make([]byte, Size(64, 4)+8)[1:], KindSQ, 64, 4},
		{"nil memory", nil, KindSQ, 64, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Init(tc.mem, tc.kind, tc.slotSize, tc.slotCount); err == nil {
				t.Error("Init succeeded")
			}
		})
	}
}

func TestAttach(t *testing.T) {
	_, mem := newHeapRing(t, KindCQ, 64, 8)
	r, err := Attach(mem, KindCQ)
	if err != nil {
		t.Fatal(err)
	}
	if r.Kind() != KindCQ || r.SlotSize() != 64 || r.SlotCount() != 8 {
		t.Errorf("geometry = %v %d %d", r.Kind(), r.SlotSize(), r.SlotCount())
	}
	// Extra memory after the ring is fine (a page-rounded region).
	big := make([]byte, 4096)
	if _, err := Init(big, KindSQ, 64, 8); err != nil {
		t.Fatal(err)
	}
	if _, err := Attach(big, KindSQ); err != nil {
		t.Errorf("Attach of a page-rounded region: %v", err)
	}
}

func TestAttachRejects(t *testing.T) {
	put := func(off int, v uint32) func([]byte) {
		return func(m []byte) { binary.LittleEndian.PutUint32(m[off:], v) }
	}
	for _, tc := range []struct {
		name   string
		kind   Kind
		mangle func([]byte)
		trim   int
	}{
		{"bad magic", KindSQ, put(OffMagic, 0x47524E44), 0},
		{"version 2", KindSQ, put(OffVersion, 2), 0},
		{"version 0", KindSQ, put(OffVersion, 0), 0},
		{"kind mismatch", KindRQ, nil, 0},
		{"kind invalid in header and wanted", 9, put(OffKind, 9), 0},
		{"slot size not pow2", KindSQ, put(OffSlotSize, 96), 0},
		{"slot size 32", KindSQ, put(OffSlotSize, 32), 0},
		{"slot size 0", KindSQ, put(OffSlotSize, 0), 0},
		{"slot count 0", KindSQ, put(OffSlotCount, 0), 0},
		{"slot count not pow2", KindSQ, put(OffSlotCount, 6), 0},
		{"slot count beyond memory", KindSQ, put(OffSlotCount, 16), 0},
		{"slot size beyond memory", KindSQ, put(OffSlotSize, 1<<31), 0},
		{"huge geometry", KindSQ, func(m []byte) { put(OffSlotSize, 1<<31)(m); put(OffSlotCount, 1<<31)(m) }, 0},
		{"data offset", KindSQ, put(OffDataOffset, 512), 0},
		{"memory one byte short", KindSQ, nil, 1},
		{"header only", KindSQ, nil, 8 * 64},
		{"shorter than header", KindSQ, nil, 8*64 + 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, mem := newHeapRing(t, KindSQ, 64, 8)
			if tc.mangle != nil {
				tc.mangle(mem)
			}
			_, err := Attach(mem[:len(mem)-tc.trim], tc.kind)
			if !errors.Is(err, ErrCorrupt) {
				t.Errorf("Attach = %v, want ErrCorrupt", err)
			}
		})
	}
	t.Run("misaligned", func(t *testing.T) {
		_, mem := newHeapRing(t, KindSQ, 64, 8)
		buf := make([]byte, len(mem)+1)
		copy(buf[1:], mem)
		if _, err := Attach(buf[1:], KindSQ); err == nil {
			t.Error("Attach accepted misaligned memory")
		}
	})
}

// TestGeometryIsPrivate: a peer rewriting the header after Attach changes
// nothing about where slots are.
func TestGeometryIsPrivate(t *testing.T) {
	_, mem := newHeapRing(t, KindSQ, 64, 8)
	r, err := Attach(mem, KindSQ)
	if err != nil {
		t.Fatal(err)
	}
	binary.LittleEndian.PutUint32(mem[OffSlotSize:], 1<<20)
	binary.LittleEndian.PutUint32(mem[OffSlotCount:], 1<<20)
	if r.SlotSize() != 64 || r.SlotCount() != 8 {
		t.Fatalf("geometry followed the header: %d %d", r.SlotSize(), r.SlotCount())
	}
	for _, idx := range []uint32{0, 7, 8, 1 << 20, 0xFFFFFFFF} {
		s := r.Slot(idx)
		if len(s) != 64 || cap(s) != 64 {
			t.Errorf("Slot(%#x): len %d cap %d", idx, len(s), cap(s))
		}
		if &s[0] != &mem[HeaderSize+int(idx&7)*64] {
			t.Errorf("Slot(%#x) is not slot %d", idx, idx&7)
		}
	}
}

func TestSlotCapacityIsLimited(t *testing.T) {
	r, mem := newHeapRing(t, KindSQ, 64, 2)
	s := r.Slot(0)
	_ = append(s, 0xFF) // must reallocate, not write into slot 1
	if mem[HeaderSize+64] != 0 {
		t.Error("append to a slot wrote into the next slot")
	}
}

// push writes n entries, each slot tagged with its sequence number, and
// publishes once at the end (a batch).
func push(t *testing.T, p *Producer, seq *uint64, n int) {
	t.Helper()
	for range n {
		free, err := p.Free()
		if err != nil || free == 0 {
			t.Fatalf("push: Free = %d, %v at head %#x", free, err, p.Head())
		}
		binary.LittleEndian.PutUint64(p.Next(), *seq)
		p.Advance()
		*seq++
	}
	p.Publish()
}

// pop consumes n entries checking the sequence, publishing once.
func pop(t *testing.T, c *Consumer, seq *uint64, n int) {
	t.Helper()
	pending, err := c.Pending()
	if err != nil || int(pending) < n {
		t.Fatalf("pop %d: Pending = %d, %v at tail %#x", n, pending, err, c.Tail())
	}
	for i := range n {
		if got := binary.LittleEndian.Uint64(c.Peek(uint32(i))); got != *seq {
			t.Fatalf("entry at tail %#x+%d = %d, want %d", c.Tail(), i, got, *seq)
		}
		*seq++
	}
	c.Advance(uint32(n))
	c.Publish()
}

func TestWrapAround(t *testing.T) {
	for _, tc := range []struct {
		name    string
		start   uint32
		batches []int // alternating push, pop sizes
	}{
		// 0xFFFFFFF0 + 8 slots: the wrap falls inside the third push.
		{"one at a time", 0xFFFFFFF0, []int{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}},
		{"full batches", 0xFFFFFFF0, []int{8, 8, 8, 8, 8, 8, 8, 8}},
		{"wrap mid batch", 0xFFFFFFF0, []int{7, 5, 6, 8, 6, 4, 5, 6, 7, 8}},
		{"wrap mid batch from 0xFFFFFFFD", 0xFFFFFFFD, []int{6, 6}},
		{"start at max", 0xFFFFFFFF, []int{8, 3, 3, 8, 8, 8}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, _ := newHeapRing(t, KindSQ, 64, 8)
			r.StoreProducer(tc.start)
			r.StoreConsumer(tc.start)
			p, c := NewProducer(r), NewConsumer(r)
			var in, out uint64
			for i, n := range tc.batches {
				if i%2 == 0 {
					push(t, p, &in, n)
				} else {
					pop(t, c, &out, n)
				}
			}
			pending, err := c.Pending()
			if err != nil {
				t.Fatal(err)
			}
			pop(t, c, &out, int(pending))
			if in != out {
				t.Fatalf("pushed %d, popped %d", in, out)
			}
			if want := tc.start + uint32(in); p.Head() != want || c.Tail() != want || r.LoadProducer() != want || r.LoadConsumer() != want {
				t.Errorf("head %#x tail %#x prod %#x cons %#x, want all %#x", p.Head(), c.Tail(), r.LoadProducer(), r.LoadConsumer(), want)
			}
			if tc.start+uint32(in) > tc.start {
				t.Errorf("test did not wrap: start %#x, %d entries", tc.start, in)
			}
		})
	}
}

func TestFullAndEmpty(t *testing.T) {
	for _, start := range []uint32{0, 0xFFFFFFFC} {
		for _, slots := range []uint32{1, 2, 8, 64} {
			t.Run(fmt.Sprintf("%d slots from %#x", slots, start), func(t *testing.T) {
				r, _ := newHeapRing(t, KindCQ, 64, slots)
				r.StoreProducer(start)
				r.StoreConsumer(start)
				p, c := NewProducer(r), NewConsumer(r)
				if n, err := c.Pending(); n != 0 || err != nil {
					t.Fatalf("empty: Pending = %d, %v", n, err)
				}
				if n, err := p.Free(); n != slots || err != nil {
					t.Fatalf("empty: Free = %d, %v, want %d", n, err, slots)
				}
				var in, out uint64
				push(t, p, &in, int(slots)) // capacity is the whole ring
				if n, err := p.Free(); n != 0 || err != nil {
					t.Fatalf("full: Free = %d, %v", n, err)
				}
				if n, err := c.Pending(); n != slots || err != nil {
					t.Fatalf("full: Pending = %d, %v", n, err)
				}
				pop(t, c, &out, 1)
				if n, err := p.Free(); n != 1 || err != nil {
					t.Fatalf("after one pop: Free = %d, %v", n, err)
				}
				push(t, p, &in, 1)
				pop(t, c, &out, int(slots))
				if n, err := c.Pending(); n != 0 || err != nil {
					t.Fatalf("drained: Pending = %d, %v", n, err)
				}
				if n, err := p.Free(); n != slots || err != nil {
					t.Fatalf("drained: Free = %d, %v", n, err)
				}
			})
		}
	}
}

// TestUnpublishedIsInvisible: Advance alone publishes nothing.
func TestUnpublishedIsInvisible(t *testing.T) {
	r, _ := newHeapRing(t, KindSQ, 64, 4)
	p, c := NewProducer(r), NewConsumer(r)
	p.Advance()
	p.Advance()
	if n, _ := c.Pending(); n != 0 {
		t.Fatalf("Pending = %d before Publish", n)
	}
	if n, _ := p.Free(); n != 2 {
		t.Fatalf("producer Free = %d, want 2 (its own head counts)", n)
	}
	p.Publish()
	if n, _ := c.Pending(); n != 2 {
		t.Fatalf("Pending = %d after Publish", n)
	}
	c.Advance(2)
	if n, _ := p.Free(); n != 2 {
		t.Fatalf("Free = %d before the consumer publishes", n)
	}
	c.Publish()
	if n, _ := p.Free(); n != 4 {
		t.Fatalf("Free = %d after the consumer publishes", n)
	}
}

func TestCorruptPeerIndex(t *testing.T) {
	const slots = 8
	for _, tc := range []struct {
		name       string
		prod, cons uint32
		corrupt    bool
	}{
		{"empty", 100, 100, false},
		{"full", 108, 100, false},
		{"full across wrap", 4, 0xFFFFFFFC, false},
		{"producer one past full", 109, 100, true},
		{"producer far ahead", 100 + 1<<31, 100, true},
		{"consumer ahead of producer", 100, 101, true},
		{"consumer ahead across wrap", 0xFFFFFFFF, 0, true},
		{"consumer far ahead", 0, 0x80000000, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, _ := newHeapRing(t, KindSQ, 64, slots)
			// The consumer's private tail is tc.cons, the producer's head
			// tc.prod; each then sees the other's shared word.
			r.StoreProducer(tc.prod)
			r.StoreConsumer(tc.cons)
			p, c := NewProducer(r), NewConsumer(r)
			_, perr := p.Free()
			_, cerr := c.Pending()
			for side, err := range map[string]error{"Free": perr, "Pending": cerr} {
				if got := errors.Is(err, ErrCorrupt); got != tc.corrupt {
					t.Errorf("%s error = %v, want corrupt=%v", side, err, tc.corrupt)
				}
			}
			// Whatever the indices, slots stay in bounds.
			if s := c.Peek(tc.prod - tc.cons); len(s) != 64 {
				t.Errorf("Peek len %d", len(s))
			}
			if s := p.Next(); len(s) != 64 {
				t.Errorf("Next len %d", len(s))
			}
		})
	}
}

// TestCorruptAfterStart: the peer moves its index wildly while we run.
func TestCorruptAfterStart(t *testing.T) {
	r, _ := newHeapRing(t, KindCQ, 64, 4)
	p, c := NewProducer(r), NewConsumer(r)
	var in, out uint64
	push(t, p, &in, 3)
	r.StoreProducer(p.Head() + 10) // hostile producer
	if _, err := c.Pending(); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Pending = %v", err)
	}
	r.StoreProducer(p.Head())
	pop(t, c, &out, 3)
	r.StoreConsumer(c.Tail() + 1) // hostile consumer, ahead of the producer
	if _, err := p.Free(); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Free = %v", err)
	}
}

func TestConsumerReset(t *testing.T) {
	r, _ := newHeapRing(t, KindSQ, 64, 4)
	p, c := NewProducer(r), NewConsumer(r)
	var in uint64
	push(t, p, &in, 3)
	c.Reset(r.LoadProducer()) // discard, as RESET does
	if n, _ := c.Pending(); n != 0 {
		t.Fatalf("Pending = %d after Reset", n)
	}
	if r.LoadConsumer() != 0 {
		t.Fatal("Reset published")
	}
	c.Publish()
	if n, _ := p.Free(); n != 4 {
		t.Fatalf("Free = %d after Reset+Publish", n)
	}
}

func TestNewCursorsStartAtSharedIndices(t *testing.T) {
	r, _ := newHeapRing(t, KindSQ, 64, 4)
	r.StoreProducer(42)
	r.StoreConsumer(40)
	if h := NewProducer(r).Head(); h != 42 {
		t.Errorf("Head = %d", h)
	}
	if tl := NewConsumer(r).Tail(); tl != 40 {
		t.Errorf("Tail = %d", tl)
	}
}

func TestNeedWakeupKeepsOtherFlags(t *testing.T) {
	r, mem := newHeapRing(t, KindSQ, 64, 4)
	binary.LittleEndian.PutUint32(mem[OffFlags:], 0xF0)
	if r.NeedWakeup() {
		t.Fatal("NeedWakeup set initially")
	}
	r.SetNeedWakeup(true)
	if !r.NeedWakeup() || binary.LittleEndian.Uint32(mem[OffFlags:]) != 0xF1 {
		t.Fatalf("after set: flags %#x", binary.LittleEndian.Uint32(mem[OffFlags:]))
	}
	r.SetNeedWakeup(true)
	r.SetNeedWakeup(false)
	if r.NeedWakeup() || binary.LittleEndian.Uint32(mem[OffFlags:]) != 0xF0 {
		t.Fatalf("after clear: flags %#x", binary.LittleEndian.Uint32(mem[OffFlags:]))
	}
}

func TestArmed(t *testing.T) {
	r, _ := newHeapRing(t, KindCQ, 64, 4)
	if r.Armed() != ArmNone {
		t.Fatal("armed initially")
	}
	r.SetArmed(ArmSolicited)
	if r.Armed() != ArmSolicited {
		t.Fatal("SetArmed")
	}
	if old := r.SwapArmed(ArmNone); old != ArmSolicited || r.Armed() != ArmNone {
		t.Fatalf("SwapArmed returned %d, left %d", old, r.Armed())
	}
}

// TestReqNotifyTakeArm: the two sides of the CQ event protocol on the
// armed word, as the daemon (TakeArm) and every client (ReqNotify) use
// them.
func TestReqNotifyTakeArm(t *testing.T) {
	for _, tc := range []struct {
		name              string
		requests          []bool // ReqNotify(solicitedOnly) calls, in order
		solicited, failed bool   // the completion TakeArm sees
		fire              bool
		left              uint32 // the armed word afterwards
	}{
		{name: "not armed", fire: false, left: ArmNone},
		{name: "next, any completion", requests: []bool{false}, fire: true, left: ArmNone},
		{name: "solicited, plain completion", requests: []bool{true}, fire: false, left: ArmSolicited},
		{name: "solicited, solicited completion", requests: []bool{true}, solicited: true, fire: true, left: ArmNone},
		{name: "solicited, failed completion", requests: []bool{true}, failed: true, fire: true, left: ArmNone},
		{name: "solicited does not weaken next", requests: []bool{false, true}, fire: true, left: ArmNone},
		{name: "next strengthens solicited", requests: []bool{true, false}, fire: true, left: ArmNone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, _ := newHeapRing(t, KindCQ, 64, 4)
			for _, so := range tc.requests {
				r.ReqNotify(so)
			}
			if got := r.TakeArm(tc.solicited, tc.failed); got != tc.fire {
				t.Errorf("TakeArm = %v, want %v", got, tc.fire)
			}
			if r.Armed() != tc.left {
				t.Errorf("armed %d afterwards, want %d", r.Armed(), tc.left)
			}
			if tc.fire && r.TakeArm(true, true) {
				t.Error("one arming fired twice")
			}
		})
	}
}

func TestArmNames(t *testing.T) {
	for v, name := range map[uint32]string{ArmNone: "none", ArmNext: "next", ArmSolicited: "solicited"} {
		if got := ArmName(v); got != name {
			t.Errorf("ArmName(%d) = %q, want %q", v, got, name)
		}
		if got, ok := ParseArm(name); !ok || got != v {
			t.Errorf("ParseArm(%q) = %d, %v", name, got, ok)
		}
	}
	if got := ArmName(9); got != "armed(9)" {
		t.Errorf("ArmName(9) = %q", got)
	}
	if _, ok := ParseArm("always"); ok {
		t.Error(`ParseArm("always") ok`)
	}
}

func TestKindString(t *testing.T) {
	for k, want := range map[Kind]string{KindSQ: "sq", KindRQ: "rq", KindSRQ: "srq", KindCQ: "cq", KindDoorbell: "doorbell", 6: "Kind(6)", 8: "Kind(8)"} {
		if got := k.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", uint32(k), got, want)
		}
	}
}
