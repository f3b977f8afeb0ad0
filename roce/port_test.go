package roce

import "testing"

// QPSourcePort is rxe's hash_32(qpn, 14) above 0xC000 (rxe_qp.c).
func TestQPSourcePort(t *testing.T) {
	for qpn, want := range map[uint32]uint16{1: 0xd872, 17: 0xdf94, 0xABCDE: 0xd351} {
		if got := QPSourcePort(qpn); got != want {
			t.Errorf("QPSourcePort(%#x) = %#x, want %#x", qpn, got, want)
		}
	}
}
