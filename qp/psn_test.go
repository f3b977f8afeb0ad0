package qp

import "testing"

func TestPSNAdd(t *testing.T) {
	cases := []struct {
		p    PSN
		n    uint32
		want PSN
	}{
		{0, 1, 1},
		{0xFFFFFF, 1, 0},
		{0xFFFFFF, 2, 1},
		{0xFFFFFE, 0x1000003, 1}, // n itself wraps
		{5, 0, 5},
		{0x800000, 0x800000, 0},
	}
	for _, c := range cases {
		if got := c.p.Add(c.n); got != c.want {
			t.Errorf("%#x.Add(%#x) = %#x, want %#x", c.p, c.n, got, c.want)
		}
	}
}

func TestPSNSubCompare(t *testing.T) {
	cases := []struct {
		p, q PSN
		sub  int32
		cmp  int
	}{
		{5, 3, 2, 1},
		{3, 5, -2, -1},
		{7, 7, 0, 0},
		{0, 0xFFFFFF, 1, 1},   // 0 follows 0xFFFFFF across the wrap
		{0xFFFFFF, 0, -1, -1}, // and 0xFFFFFF precedes 0
		{2, 0xFFFFFE, 4, 1},
		{0x7FFFFF, 0, 0x7FFFFF, 1},   // largest "after"
		{0x800001, 0, -0x7FFFFF, -1}, // past half the space: "before"
		{0, 0x7FFFFF, -0x7FFFFF, -1}, // mirror
		{0x800000, 0, -0x800000, -1}, // exactly half: rxe's psn_compare calls it before
		{0, 0x800000, -0x800000, -1}, // and so in both directions
	}
	for _, c := range cases {
		if got := c.p.Sub(c.q); got != c.sub {
			t.Errorf("%#x.Sub(%#x) = %d, want %d", c.p, c.q, got, c.sub)
		}
		if got := c.p.Compare(c.q); got != c.cmp {
			t.Errorf("%#x.Compare(%#x) = %d, want %d", c.p, c.q, got, c.cmp)
		}
		if got := c.p.Before(c.q); got != (c.cmp < 0) {
			t.Errorf("%#x.Before(%#x) = %v", c.p, c.q, got)
		}
	}
	// Sub inverts Add within the half window, across the wrap.
	for _, base := range []PSN{0, 1, 0xFFFFF0, 0xFFFFFF, 0x800000} {
		for _, d := range []uint32{0, 1, 16, 0x7FFFFF} {
			if got := base.Add(d).Sub(base); got != int32(d) {
				t.Errorf("(%#x+%#x).Sub(%#x) = %d", base, d, base, got)
			}
		}
	}
}

func TestPSNInWindow(t *testing.T) {
	cases := []struct {
		p, start PSN
		n        uint32
		want     bool
	}{
		{0xFFFFFE, 0xFFFFFE, 4, true},
		{0xFFFFFF, 0xFFFFFE, 4, true},
		{0, 0xFFFFFE, 4, true},
		{1, 0xFFFFFE, 4, true},
		{2, 0xFFFFFE, 4, false}, // one past the end
		{0xFFFFFD, 0xFFFFFE, 4, false},
		{10, 10, 0, false}, // empty window
		{10, 10, 1, true},
		{9, 10, 1, false},
		{0x123456, 0, 1 << 24, true}, // whole space
	}
	for _, c := range cases {
		if got := c.p.InWindow(c.start, c.n); got != c.want {
			t.Errorf("%#x.InWindow(%#x, %d) = %v, want %v", c.p, c.start, c.n, got, c.want)
		}
	}
}

func TestPSNValid(t *testing.T) {
	if !PSN(0).Valid() || !PSN(0xFFFFFF).Valid() || PSN(0x1000000).Valid() || PSN(0xFFFFFFFF).Valid() {
		t.Fatal("Valid")
	}
}
