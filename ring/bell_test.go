package ring

import (
	"bytes"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// newBell makes a doorbell as the daemon does, and a client's view of it
// through a second mapping of the same memfd.
func newBell(t *testing.T) (daemon, client *Ring) {
	t.Helper()
	reg := newTestRegion(t, Size(MinSlotSize, BellSlots))
	daemon, err := Init(reg.Bytes(), KindDoorbell, MinSlotSize, BellSlots)
	if err != nil {
		t.Fatal(err)
	}
	client, err = Attach(mapTestRegion(t, reg.Fd(), reg.Size()).Bytes(), KindDoorbell)
	if err != nil {
		t.Fatal(err)
	}
	return daemon, client
}

func takeAll(r *Ring) []uint32 {
	var got []uint32
	r.TakeBells(func(bit uint32) { got = append(got, bit) })
	return got
}

// The bitmap's table: what clients mark and what the daemon takes. QP
// numbers are 24 bits, but any u32 a hostile client passes lands on a bit;
// numbers equal modulo BellBits share one; nothing marked is lost, so the
// area cannot overflow however many QPs ring.
func TestBellTable(t *testing.T) {
	all := make([]uint32, BellBits)
	for i := range all {
		all[i] = uint32(i)
	}
	cases := []struct {
		name string
		qpns []uint32
		want []uint32
	}{
		{"none", nil, nil},
		{"one", []uint32{17}, []uint32{17}},
		{"twice", []uint32{17, 17}, []uint32{17}},
		{"word edges", []uint32{0, 31, 32, 63, BellBits - 1}, []uint32{0, 31, 32, 63, BellBits - 1}},
		{"modulo", []uint32{5 + BellBits, 5 + 7*BellBits}, []uint32{5}},
		{"bogus numbers", []uint32{1<<24 - 1, 1 << 24, ^uint32(0)}, []uint32{BellBits - 1, 0}},
		{"more QPs than bits", func() []uint32 {
			var q []uint32
			for i := uint32(0); i < 3*BellBits; i++ {
				q = append(q, 0x100+i)
			}
			return q
		}(), all},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d, cl := newBell(t)
			for _, q := range c.qpns {
				cl.MarkBell(q)
			}
			want := slices.Clone(c.want)
			slices.Sort(want)
			want = slices.Compact(want)
			if got := takeAll(d); !slices.Equal(got, want) {
				t.Fatalf("took %v, want %v", got, want)
			}
			if got := takeAll(d); got != nil {
				t.Fatalf("taken twice: %v", got)
			}
		})
	}
}

// summaryOf is the summary a client's MarkBell sets for bitmap bit b.
func summaryOf(b uint32) (word, mask uint32) {
	s := (b / 32) % BellSummaryBits
	return s / 32, 1 << (s % 32)
}

// setSummary writes b (up to the summary's bytes) over the summary, as a
// client may.
func setSummary(r *Ring, b []byte) {
	var w [4 * BellSummaryWords]byte
	copy(w[:], b)
	for k := range r.summary {
		atomic.StoreUint32(&r.summary[k], le.Uint32(w[4*k:]))
	}
}

// A client writes the summary and the bitmap as it likes (every bit, then
// garbage): the daemon takes each set bit of the words the summary marks
// once, only bits below BellBits, and leaves a bitmap word the summary
// does not mark, whose bits a later MarkBell still gets taken.
func TestBellHostileWords(t *testing.T) {
	d, cl := newBell(t)
	for i := range cl.data {
		cl.data[i] = 0xff
	}
	if got := takeAll(d); got != nil {
		t.Fatalf("took %d bits that no summary bit marks", len(got))
	}
	setSummary(cl, bytes.Repeat([]byte{0xff}, 4*BellSummaryWords))
	got := takeAll(d)
	if len(got) != BellBits || got[0] != 0 || got[len(got)-1] != BellBits-1 {
		t.Fatalf("took %d bits (%v...): want every bit of %d once", len(got), got[:min(4, len(got))], BellBits)
	}
	cases := []struct {
		name            string
		summary, bitmap map[int]byte // byte offsets, in the summary and the bitmap
		mark, want      []uint32
	}{
		{"summary, empty words", map[int]byte{0: 0xff, 15: 0x80}, nil, nil, nil},
		{"word 1, bits 8 and 15", map[int]byte{0: 0x02}, map[int]byte{5: 0x81}, nil, []uint32{32 + 8, 32 + 15}},
		{"bitmap without summary, then a mark on it", nil, map[int]byte{5: 0x81},
			[]uint32{32 + 8}, []uint32{32 + 8, 32 + 15}},
		{"bitmap without summary, a mark elsewhere", nil, map[int]byte{5: 0x81},
			[]uint32{BellBits - 1}, []uint32{BellBits - 1}},
		{"summary of the last word", map[int]byte{15: 0x80}, map[int]byte{BellBits/8 - 1: 0x80, 0: 1},
			nil, []uint32{BellBits - 1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d, cl := newBell(t)
			sum := make([]byte, 4*BellSummaryWords)
			for off, v := range c.summary {
				sum[off] = v
			}
			setSummary(cl, sum)
			for off, v := range c.bitmap {
				cl.data[off] = v
			}
			for _, q := range c.mark {
				cl.MarkBell(q)
			}
			if got := takeAll(d); !slices.Equal(got, c.want) {
				t.Fatalf("took %v, want %v", got, c.want)
			}
			for k := range cl.summary {
				if v := atomic.LoadUint32(&cl.summary[k]); v != 0 {
					t.Fatalf("summary word %d is %#x after the take", k, v)
				}
			}
		})
	}
}

// FuzzBellGarbage: whatever a client wrote in the summary and the bitmap,
// a take after MarkBell calls returns each marked bit, every bit at most
// once and below BellBits, and only bits that were marked or written; a
// second take returns nothing (bits the garbage left without a summary
// bit stay where they are, unlooked at).
func FuzzBellGarbage(f *testing.F) {
	f.Add(make([]byte, 4*BellSummaryWords), make([]byte, BellBits/8), []byte{1, 0, 0, 0})
	all := bytes.Repeat([]byte{0xff}, BellBits/8)
	f.Add(all[:4*BellSummaryWords], all, []byte{0xff, 0xff, 0xff, 0xff, 7, 0, 0, 0})
	f.Add([]byte{2}, []byte{0, 0, 0, 0, 0x81}, []byte{40, 0, 0, 0})
	f.Fuzz(func(t *testing.T, summary, bitmap, marks []byte) {
		d, cl := newBell(t)
		setSummary(cl, summary)
		copy(cl.data, bitmap)
		written := make(map[uint32]bool)
		for b := uint32(0); b < BellBits; b++ {
			if cl.data[b/8]&(1<<(b%8)) != 0 {
				written[b] = true
			}
		}
		marked := make(map[uint32]bool)
		for len(marks) >= 4 {
			q := le.Uint32(marks)
			marks = marks[4:]
			cl.MarkBell(q)
			marked[q%BellBits] = true
		}
		got := takeAll(d)
		seen := make(map[uint32]bool)
		for _, b := range got {
			switch {
			case b >= BellBits:
				t.Fatalf("took bit %d of %d", b, BellBits)
			case seen[b]:
				t.Fatalf("took bit %d twice", b)
			case !marked[b] && !written[b]:
				t.Fatalf("took bit %d, neither marked nor written", b)
			}
			seen[b] = true
		}
		for b := range marked {
			if !seen[b] {
				t.Fatalf("marked bit %d not taken", b)
			}
		}
		if got := takeAll(d); got != nil {
			t.Fatalf("second take: %v", got)
		}
	})
}

// RingBell marks before it bumps the event word: a daemon that read the
// word, took the bitmap and would sleep while the word is unchanged finds
// every mark either in what it took or, the word moved, in the next take.
func TestBellRingAgainstTake(t *testing.T) {
	d, cl := newBell(t)
	const clients, rings = 4, 2000
	var wg sync.WaitGroup
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < rings; i++ {
				cl.RingBell(uint32(c*rings + i))
			}
		}()
	}
	seen := make([]bool, BellBits)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for finished := false; !finished; {
		select {
		case <-done:
			finished = true
		default:
		}
		seq := d.EventSeq()
		d.TakeBells(func(bit uint32) { seen[bit] = true })
		if !finished {
			d.WaitEvent(seq, 0)
		}
	}
	d.TakeBells(func(bit uint32) { seen[bit] = true })
	for b := uint32(0); b < clients*rings && b < BellBits; b++ {
		if !seen[b] {
			t.Fatalf("bit %d rung and never taken", b)
		}
	}
	if got := d.EventSeq(); got != clients*rings {
		t.Fatalf("event word %d after %d rings", got, clients*rings)
	}
}

// No mark is lost with markers racing the daemon's takes (run with -race).
// Each marker owns bits spread over every word of the bitmap and the
// summary; per round it writes the round into want[bit], marks the bit
// (sometimes twice, taking the "already set" path), bumps the event word
// and waits until the daemon's take of the bit has seen that round. The
// daemon loops as the device's does: read the event word, take, sleep
// while the word is unchanged. A scribbler meanwhile sets summary bits of
// every kind and bitmap bits nobody owns. A lost mark leaves its marker
// waiting: the test fails with the bit.
func TestBellNoMarkLost(t *testing.T) {
	d, cl := newBell(t)
	const markers, rounds = 6, 300
	const perMarker = 96                                                         // bits 0..markers*perMarker-1 are owned, scattered
	owned := func(c, j int) uint32 { return uint32((j*markers+c)*7) % BellBits } // 7 is odd: a bijection
	isOwned := make([]bool, BellBits)
	for c := range markers {
		for j := range perMarker {
			isOwned[owned(c, j)] = true
		}
	}
	var want, got [BellBits]atomic.Uint32
	var stop atomic.Bool
	var wg sync.WaitGroup
	daemonDone := make(chan struct{})
	go func() { // the daemon
		defer close(daemonDone)
		for !stop.Load() {
			seq := d.EventSeq()
			d.TakeBells(func(b uint32) {
				if isOwned[b] {
					got[b].Store(want[b].Load())
				}
			})
			d.WaitEvent(seq, 10*time.Millisecond)
		}
	}()
	go func() { // the scribbler
		for i := uint32(0); !stop.Load(); i++ {
			orBit(&cl.summary[i%BellSummaryWords], 1<<(i*13%32))
			if b := i * 31 % BellBits; !isOwned[b] {
				orBit(cl.dataWord(b/32), 1<<(b%32))
			}
			if i%64 == 0 {
				time.Sleep(time.Microsecond)
			}
		}
	}()
	errs := make(chan string, markers)
	for c := range markers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := uint32(1); r <= rounds; r++ {
				for j := range perMarker {
					b := owned(c, j)
					want[b].Store(r)
					cl.MarkBell(b + uint32(j%3)*BellBits) // any QPN of the bit
					if j%5 == 0 {
						cl.MarkBell(b)
					}
				}
				cl.BumpEvent()
				cl.WakeEventWaiters()
				deadline := time.Now().Add(20 * time.Second)
				for j := range perMarker {
					b := owned(c, j)
					for got[b].Load() < r {
						if time.Now().After(deadline) {
							errs <- fmt.Sprintf("marker %d round %d: bit %d marked and never taken", c, r, b)
							return
						}
						runtime.Gosched()
					}
				}
			}
		}()
	}
	wg.Wait()
	stop.Store(true)
	cl.BumpEvent()
	cl.WakeEventWaiters()
	<-daemonDone
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

// The retired doorbells, without the bitmap (kind 5) and without the
// summary (kind 6), are not attached: a client of either falls back to
// write() doorbells instead of ringing one whose marks the daemon would not
// look at.
func TestOldDoorbellKindRefused(t *testing.T) {
	for _, old := range []Kind{kindOldDoorbell, kindBitmapDoorbell} {
		reg := newTestRegion(t, Size(MinSlotSize, 1))
		if _, err := Init(reg.Bytes(), old, MinSlotSize, 1); err == nil {
			t.Fatalf("Init made a ring of the retired doorbell kind %d", old)
		}
		if _, err := Init(reg.Bytes(), KindDoorbell, MinSlotSize, 1); err != nil {
			t.Fatal(err)
		}
		le.PutUint32(reg.Bytes()[OffKind:], uint32(old))
		if _, err := Attach(reg.Bytes(), old); err == nil {
			t.Fatalf("attached a doorbell of kind %d", old)
		}
	}
}
