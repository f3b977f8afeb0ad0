package qp

// PSN is a 24-bit packet sequence number. Arithmetic wraps at 2^24 and
// comparisons are valid within half the space (2^23), as in IBA 9.7.1 and
// rxe's psn_compare.
type PSN uint32

// PSNMask keeps the low 24 bits.
const PSNMask = 0xFFFFFF

// Add returns p+n modulo 2^24.
func (p PSN) Add(n uint32) PSN { return PSN((uint32(p) + n) & PSNMask) }

// Sub returns the signed distance p-q in [-2^23, 2^23), as rxe's psn_compare.
func (p PSN) Sub(q PSN) int32 { return int32((uint32(p)-uint32(q))<<8) >> 8 }

// Compare returns -1, 0, 1 as p is before, equal to, after q.
func (p PSN) Compare(q PSN) int {
	switch d := p.Sub(q); {
	case d < 0:
		return -1
	case d > 0:
		return 1
	}
	return 0
}

// Before reports p < q in sequence space.
func (p PSN) Before(q PSN) bool { return p.Sub(q) < 0 }

// InWindow reports whether p lies in [start, start+n).
func (p PSN) InWindow(start PSN, n uint32) bool {
	d := (uint32(p) - uint32(start)) & PSNMask
	return d < n
}

// Valid reports whether p fits in 24 bits.
func (p PSN) Valid() bool { return uint32(p) <= PSNMask }
