package ring

import (
	"slices"
	"sync"
	"testing"
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

// A client writes the bitmap as it likes (every bit, then garbage): the
// daemon takes each set bit once and only bits below BellBits.
func TestBellHostileWords(t *testing.T) {
	d, cl := newBell(t)
	for i := range cl.data {
		cl.data[i] = 0xff
	}
	got := takeAll(d)
	if len(got) != BellBits || got[0] != 0 || got[len(got)-1] != BellBits-1 {
		t.Fatalf("took %d bits (%v...): want every bit of %d once", len(got), got[:min(4, len(got))], BellBits)
	}
	cl.data[5] = 0x81 // word 1, bits 8 and 15
	if got := takeAll(d); !slices.Equal(got, []uint32{32 + 8, 32 + 15}) {
		t.Fatalf("took %v", got)
	}
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

// The doorbell without the bitmap (kind 5) is not attached: a client of it
// falls back to write() doorbells instead of ringing one that names no QP.
func TestOldDoorbellKindRefused(t *testing.T) {
	reg := newTestRegion(t, Size(MinSlotSize, 1))
	if _, err := Init(reg.Bytes(), kindOldDoorbell, MinSlotSize, 1); err == nil {
		t.Fatal("Init made a ring of the retired doorbell kind")
	}
	if _, err := Init(reg.Bytes(), KindDoorbell, MinSlotSize, 1); err != nil {
		t.Fatal(err)
	}
	le.PutUint32(reg.Bytes()[OffKind:], uint32(kindOldDoorbell))
	if _, err := Attach(reg.Bytes(), kindOldDoorbell); err == nil {
		t.Fatal("attached a doorbell of kind 5")
	}
}
