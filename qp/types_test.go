package qp

import "testing"

func TestTypePairs(t *testing.T) {
	for _, c := range []struct {
		a, b Type
		want bool
	}{
		{TypeRC, TypeRC, true}, {TypeUC, TypeUC, true}, {TypeRC, TypeUC, false},
		{TypeXRCSend, TypeXRCRecv, true}, {TypeXRCRecv, TypeXRCSend, true},
		{TypeXRCSend, TypeXRCSend, false}, {TypeXRCRecv, TypeXRCRecv, false}, {TypeRC, TypeXRCRecv, false},
	} {
		if got := c.a.Pairs(c.b); got != c.want {
			t.Errorf("%v.Pairs(%v) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
}
