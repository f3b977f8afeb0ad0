package ring

import (
	"bytes"
	"encoding/binary"
	"errors"
	"slices"
	"testing"

	"rdmafs/qp"
)

// FuzzAttach: whatever the header bytes, Attach returns an error or a ring
// whose slots all lie inside the memory given.
func FuzzAttach(f *testing.F) {
	for _, g := range []struct {
		kind                Kind
		slotSize, slotCount uint32
		extra               int
	}{
		{KindSQ, 64, 1, 0}, {KindRQ, 64, 4, 0}, {KindSRQ, 128, 2, 7}, {KindCQ, 64, 8, 64},
	} {
		mem := make([]byte, Size(g.slotSize, g.slotCount)+g.extra)
		if _, err := Init(mem, g.kind, g.slotSize, g.slotCount); err != nil {
			f.Fatal(err)
		}
		f.Add(uint8(g.kind), mem)
		f.Add(uint8(g.kind), mem[:len(mem)-1])
	}
	f.Add(uint8(KindSQ), []byte{})
	f.Add(uint8(KindCQ), make([]byte, HeaderSize))

	f.Fuzz(func(t *testing.T, kind uint8, data []byte) {
		mem := make([]byte, len(data)) // aligned, unlike a sub-slice of data
		copy(mem, data)
		r, err := Attach(mem, Kind(kind))
		if err != nil {
			if len(mem) >= HeaderSize && !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Attach error does not wrap ErrCorrupt: %v", err)
			}
			return
		}
		if r.Kind() != Kind(kind) {
			t.Fatalf("attached kind %v, asked %d", r.Kind(), kind)
		}
		if need := Size(r.SlotSize(), r.SlotCount()); need < 0 || need > len(mem) {
			t.Fatalf("attached %d×%d slots needing %d bytes in %d", r.SlotCount(), r.SlotSize(), need, len(mem))
		}
		for _, idx := range []uint32{0, 1, r.SlotCount() - 1, r.SlotCount(), 0x7FFFFFFF, 0xFFFFFFFF} {
			if s := r.Slot(idx); uint32(len(s)) != r.SlotSize() || uint32(cap(s)) != r.SlotSize() {
				t.Fatalf("Slot(%#x): len %d cap %d", idx, len(s), cap(s))
			}
		}
		c, p := NewConsumer(r), NewProducer(r)
		if n, err := c.Pending(); err == nil {
			for i := range min(n, 64) {
				_ = c.Peek(i)[0]
			}
		}
		if n, err := p.Free(); err == nil && n > 0 {
			clear(p.Next())
		}
	})
}

// checkDecodedSend verifies what DecodeSendWQE accepted: it fits the slot,
// it encodes again into a slot of the same size to the same bytes, and it
// decodes from there to the same WR.
func checkDecodedSend(t *testing.T, slot []byte, wr *qp.SendWR) {
	t.Helper()
	room := len(slot) - SendHeaderSize
	if len(wr.SGL)*SGESize > room || len(wr.InlineData) > room {
		t.Fatalf("decoded %d SGEs, %d inline bytes from a %d-byte slot", len(wr.SGL), len(wr.InlineData), len(slot))
	}
	again := make([]byte, len(slot))
	if err := EncodeSendWQE(again, wr); err != nil {
		t.Fatalf("accepted WQE does not encode again: %v (%+v)", err, wr)
	}
	used := SendHeaderSize + len(wr.SGL)*SGESize + len(wr.InlineData)
	if !bytes.Equal(again[:SendOffReserved], slot[:SendOffReserved]) ||
		!bytes.Equal(again[SendHeaderSize:used], slot[SendHeaderSize:used]) {
		t.Fatalf("re-encoding differs:\n got % x\nwant % x", again[:used], slot[:used])
	}
	var back qp.SendWR
	if err := DecodeSendWQE(again, &back); err != nil {
		t.Fatalf("re-encoded WQE does not decode: %v", err)
	}
	if !sameSendWR(back, *wr) {
		t.Fatalf("second decode differs:\n got %+v\nwant %+v", back, *wr)
	}
}

func flip(b []byte) {
	for i := range b {
		b[i] ^= 0xFF
	}
}

func FuzzDecodeSendWQE(f *testing.F) {
	for _, wr := range []qp.SendWR{
		{WRID: 1, Opcode: qp.WRSend, SendFlags: qp.SendSignaled, SGL: sampleSGL(2)},
		{WRID: 2, Opcode: qp.WRRDMAWrite, SendFlags: qp.SendInline, RemoteAddr: 9, RKey: 3, InlineData: []byte("inline")},
		{WRID: 3, Opcode: qp.WRBindMW, MW: 1, RKey: 2, BindLKey: 3, BindAddr: 4, BindLength: 5, BindAccess: qp.AccessRemoteWrite},
		{WRID: 4, Opcode: qp.WRSendWithInv, InvalidateRKey: 7, SGL: sampleSGL(1)},
		{WRID: 5, Opcode: qp.WRAtomicCmpAndSwp, RemoteAddr: 8, CompareAdd: 1, Swap: 2, SGL: sampleSGL(1)},
	} {
		slot := make([]byte, 128)
		if err := EncodeSendWQE(slot, &wr); err != nil {
			f.Fatal(err)
		}
		f.Add(uint16(128), slot)
		f.Add(uint16(64), slot)
	}
	f.Add(uint16(0), []byte{})
	f.Add(uint16(63), make([]byte, 63))

	f.Fuzz(func(t *testing.T, size uint16, data []byte) {
		slot := make([]byte, size)
		copy(slot, data)
		// Start from a WR with stale contents and spare capacity, as the
		// engine's reused one would be.
		wr := qp.SendWR{WRID: 0xBAD, ImmData: 0xBAD, SGL: make([]qp.SGE, 1, 4), InlineData: make([]byte, 3, 8)}
		prev := wr
		if err := DecodeSendWQE(slot, &wr); err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("Decode error does not wrap ErrMalformed: %v", err)
			}
			if !sameSendWR(wr, prev) {
				t.Fatalf("failed Decode changed the WR")
			}
			return
		}
		// Nothing may alias the slot.
		keep := wr
		keep.SGL, keep.InlineData = slices.Clone(wr.SGL), slices.Clone(wr.InlineData)
		used := slot[:SendHeaderSize+len(wr.SGL)*SGESize+len(wr.InlineData)]
		flip(used)
		if !sameSendWR(wr, keep) {
			t.Fatalf("decoded WR changed with the slot")
		}
		flip(used)
		checkDecodedSend(t, slot, &wr)
	})
}

func FuzzDecodeRecvWQE(f *testing.F) {
	for _, n := range []int{0, 1, 3} {
		slot := make([]byte, 64)
		if err := EncodeRecvWQE(slot, &qp.RecvWR{WRID: uint64(n), SGL: sampleSGL(n)}); err != nil {
			f.Fatal(err)
		}
		f.Add(uint16(64), slot)
		f.Add(uint16(32), slot)
	}
	huge := make([]byte, 16)
	binary.LittleEndian.PutUint32(huge[RecvOffNumSGE:], 0x10000001)
	f.Add(uint16(64), huge)

	f.Fuzz(func(t *testing.T, size uint16, data []byte) {
		slot := make([]byte, size)
		copy(slot, data)
		wr := qp.RecvWR{WRID: 0xBAD, SGL: make([]qp.SGE, 2, 4)}
		if err := DecodeRecvWQE(slot, &wr); err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("Decode error does not wrap ErrMalformed: %v", err)
			}
			if wr.WRID != 0xBAD || len(wr.SGL) != 2 {
				t.Fatalf("failed Decode changed the WR")
			}
			return
		}
		if RecvHeaderSize+len(wr.SGL)*SGESize > len(slot) {
			t.Fatalf("decoded %d SGEs from a %d-byte slot", len(wr.SGL), len(slot))
		}
		again := make([]byte, len(slot))
		if err := EncodeRecvWQE(again, &wr); err != nil {
			t.Fatalf("accepted WQE does not encode again: %v", err)
		}
		used := RecvHeaderSize + len(wr.SGL)*SGESize
		if !bytes.Equal(again[:RecvOffReserved], slot[:RecvOffReserved]) ||
			!bytes.Equal(again[RecvHeaderSize:used], slot[RecvHeaderSize:used]) {
			t.Fatalf("re-encoding differs:\n got % x\nwant % x", again[:used], slot[:used])
		}
	})
}

// FuzzConsumer drives a producer and a consumer over one ring while the
// fuzzer plays a hostile peer: it writes arbitrary indices and header
// words between operations. Nothing may panic, counts stay within the
// ring, and every slice handed out is exactly one slot.
func FuzzConsumer(f *testing.F) {
	f.Add(uint8(0), uint8(3), uint32(0), uint32(0), []byte{1, 1, 2, 0, 2})
	f.Add(uint8(1), uint8(0), uint32(0xFFFFFFF0), uint32(0xFFFFFFF0), []byte{1, 1, 1, 2, 0, 0, 2, 1})
	f.Add(uint8(0), uint8(2), uint32(10), uint32(2), []byte{0, 1, 2})
	f.Add(uint8(2), uint8(6), uint32(5), uint32(9), []byte{0, 1, 3, 0xFF, 0xFF, 0xFF, 0xFF, 0})
	f.Add(uint8(0), uint8(1), uint32(0), uint32(0), []byte{5, 0x10, 0, 0, 0, 0x10, 0, 0, 0, 0, 1})

	f.Fuzz(func(t *testing.T, slotLog, countLog uint8, prod, cons uint32, ops []byte) {
		slotSize := uint32(MinSlotSize) << (slotLog % 3)
		slotCount := uint32(1) << (countLog % 7)
		mem := make([]byte, Size(slotSize, slotCount))
		r, err := Init(mem, KindSQ, slotSize, slotCount)
		if err != nil {
			t.Fatal(err)
		}
		r.StoreProducer(prod)
		r.StoreConsumer(cons)
		p, c := NewProducer(r), NewConsumer(r)
		checkSlot := func(what string, s []byte) {
			if uint32(len(s)) != slotSize || uint32(cap(s)) != slotSize {
				t.Fatalf("%s: len %d cap %d, slot size %d", what, len(s), cap(s), slotSize)
			}
		}
		next32 := func() uint32 { // the next 4 op bytes as a value
			var b [4]byte
			n := copy(b[:], ops)
			ops = ops[n:]
			return binary.LittleEndian.Uint32(b[:])
		}
		for len(ops) > 0 {
			op := ops[0]
			ops = ops[1:]
			switch op % 8 {
			case 0: // consume everything pending
				n, err := c.Pending()
				if err != nil {
					if !errors.Is(err, ErrCorrupt) {
						t.Fatalf("Pending: %v", err)
					}
					continue
				}
				if n > slotCount {
					t.Fatalf("Pending = %d > %d slots", n, slotCount)
				}
				for i := range n {
					checkSlot("Peek", c.Peek(i))
				}
				c.Advance(n)
			case 1: // produce one if there is room
				n, err := p.Free()
				if err != nil {
					if !errors.Is(err, ErrCorrupt) {
						t.Fatalf("Free: %v", err)
					}
					continue
				}
				if n > slotCount {
					t.Fatalf("Free = %d > %d slots", n, slotCount)
				}
				if n > 0 {
					s := p.Next()
					checkSlot("Next", s)
					clear(s)
					p.Advance()
				}
			case 2:
				p.Publish()
				c.Publish()
			case 3: // hostile producer index
				r.StoreProducer(next32())
			case 4: // hostile consumer index
				r.StoreConsumer(next32())
			case 5: // hostile geometry: must change nothing
				binary.LittleEndian.PutUint32(mem[OffSlotSize:], next32())
				binary.LittleEndian.PutUint32(mem[OffSlotCount:], next32())
				if r.SlotSize() != slotSize || r.SlotCount() != slotCount {
					t.Fatalf("geometry followed the header")
				}
			case 6: // arbitrary peek and slot
				i := next32()
				checkSlot("Peek", c.Peek(i))
				checkSlot("Slot", r.Slot(i))
			case 7:
				c.Reset(next32())
			}
		}
	})
}
