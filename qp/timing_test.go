package qp

import (
	"testing"
	"time"
)

func TestRNRDelay(t *testing.T) {
	us := time.Microsecond
	cases := []struct {
		code uint8
		want time.Duration
	}{
		{0x00, 655360 * us},
		{0x01, 10 * us},
		{0x05, 60 * us},
		{0x0E, 1280 * us},
		{0x12, 5120 * us},
		{0x19, 61440 * us},
		{0x1F, 491520 * us},
		{0x21, 10 * us}, // high bits ignored
		{0xFF, 491520 * us},
	}
	for _, c := range cases {
		if got := RNRDelay(c.code); got != c.want {
			t.Errorf("RNRDelay(%#x) = %v, want %v", c.code, got, c.want)
		}
	}
	if RNRDelay(0) != 655360*time.Microsecond || RNRDelay(0x19) != 61440*time.Microsecond {
		t.Fatal("spot values")
	}
	// 1..31 strictly increase; code 0 is the longest of all.
	for c := uint8(2); c < 32; c++ {
		if RNRDelay(c) <= RNRDelay(c-1) {
			t.Errorf("RNRDelay(%#x) not increasing", c)
		}
		if RNRDelay(c) >= RNRDelay(0) {
			t.Errorf("RNRDelay(%#x) >= RNRDelay(0)", c)
		}
	}
}

func TestAckTimeout(t *testing.T) {
	if got, want := AckTimeout(14), 4096*time.Nanosecond<<14; got != want {
		t.Errorf("AckTimeout(14) = %v, want %v", got, want)
	}
	if got := AckTimeout(14); got != 67108864*time.Nanosecond {
		t.Errorf("AckTimeout(14) = %v", got)
	}
	if AckTimeout(0) != 0 {
		t.Errorf("AckTimeout(0) = %v, want 0 (disabled)", AckTimeout(0))
	}
	if AckTimeout(1) != 8192*time.Nanosecond {
		t.Errorf("AckTimeout(1) = %v", AckTimeout(1))
	}
	if got := AckTimeout(31); got != time.Duration(4096)<<31 || got <= 0 {
		t.Errorf("AckTimeout(31) = %v", got)
	}
	if AckTimeout(32) != 0 || AckTimeout(33) != AckTimeout(1) {
		t.Errorf("timeout not masked to 5 bits")
	}
}

func TestAETHConstants(t *testing.T) {
	if AETHAck != 0 || AETHRNRNak != 0x20 || AETHNakPSNSeq != 0x60 || AETHNakInvReq != 0x61 ||
		AETHNakRemAccess != 0x62 || AETHNakRemOp != 0x63 || AETHCreditInvalid != 0x1F {
		t.Fatal("syndrome values")
	}
	if AETHRNRNak&AETHTypeMask != 0x20 || AETHNakRemOp&AETHTypeMask != 0x60 || AETHCreditInvalid&AETHTypeMask != AETHAck {
		t.Fatal("type bits")
	}
}

func TestCredit(t *testing.T) {
	// Spot values from VERBS.md §5.2.
	spots := map[uint8]uint32{0: 0, 1: 1, 4: 4, 5: 6, 7: 12, 0xA: 32, 0xF: 192, 0x10: 256, 0x15: 1536, 0x1A: 8192, 0x1E: 32768}
	for code, n := range spots {
		if got := CreditCount(code); got != n {
			t.Errorf("CreditCount(%#x) = %d, want %d", code, got, n)
		}
	}
	if CreditCount(0x1F) != CreditUnlimited || CreditCount(0xFF) != CreditUnlimited {
		t.Errorf("invalid code not unlimited")
	}
	if CreditCount(0x25) != CreditCount(5) {
		t.Errorf("high bits not ignored")
	}
	// Round trip every code.
	for c := uint8(0); c < 0x1F; c++ {
		if got := CreditCode(CreditCount(c)); got != c {
			t.Errorf("CreditCode(CreditCount(%#x)) = %#x", c, got)
		}
	}
	// Largest code not exceeding n, for every n up to past the top.
	for n := uint32(0); n <= 40000; n++ {
		c := CreditCode(n)
		if c >= 0x1F {
			t.Fatalf("CreditCode(%d) = %#x", n, c)
		}
		if CreditCount(c) > n {
			t.Fatalf("CreditCode(%d) = %#x promises %d", n, c, CreditCount(c))
		}
		if c < 0x1E && CreditCount(c+1) <= n {
			t.Fatalf("CreditCode(%d) = %#x not the largest", n, c)
		}
	}
	for n, want := range map[uint32]uint8{5: 4, 7: 5, 100: 0xD, 32767: 0x1D, 1 << 31: 0x1E, ^uint32(0): 0x1E} {
		if got := CreditCode(n); got != want {
			t.Errorf("CreditCode(%d) = %#x, want %#x", n, got, want)
		}
	}
}
