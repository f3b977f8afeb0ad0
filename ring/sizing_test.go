package ring

import (
	"testing"

	"rdmafs/qp"
)

func TestSendSlotSize(t *testing.T) {
	for _, tc := range []struct {
		maxSGE, maxInline       uint32
		slot, capSGE, capInline uint32
	}{
		{0, 0, 64, 0, 0},
		{1, 0, 128, 4, 64},
		{4, 0, 128, 4, 64},
		{5, 0, 256, 12, 192},
		{0, 1, 128, 4, 64},
		{0, 64, 128, 4, 64},
		{0, 65, 256, 12, 192},
		{2, 100, 256, 12, 192}, // inline dominates
		{12, 100, 256, 12, 192},
		{13, 100, 512, 28, 448}, // SGEs dominate
		{32, 0, 1024, 60, 960},  // rxe's RXE_MAX_SGE
		{255, 0, 8192, 255, 8128},
		{255, 65535, 131072, 255, 65535},
		{0, 4032, 4096, 252, 4032},
		{0, 4033, 8192, 255, 8128},
		// Beyond the header fields: clipped, so the cap shows the shortfall.
		{256, 0, 8192, 255, 8128},
		{0xFFFFFFFF, 0xFFFFFFFF, 131072, 255, 65535},
	} {
		slot, capSGE, capInline := SendSlotSize(tc.maxSGE, tc.maxInline)
		if slot != tc.slot || capSGE != tc.capSGE || capInline != tc.capInline {
			t.Errorf("SendSlotSize(%d, %d) = %d, %d, %d; want %d, %d, %d",
				tc.maxSGE, tc.maxInline, slot, capSGE, capInline, tc.slot, tc.capSGE, tc.capInline)
		}
	}
}

// TestSendSlotSizeHoldsCaps: for every request in range, the caps cover the
// request and a WR using them all encodes into the slot; and the slot is a
// valid ring slot.
func TestSendSlotSizeHoldsCaps(t *testing.T) {
	sgl := make([]qp.SGE, MaxSendSGE)
	inline := make([]byte, MaxInlineLen)
	for _, sge := range []uint32{0, 1, 2, 3, 4, 7, 8, 31, 32, 100, 254, 255} {
		for _, inl := range []uint32{0, 1, 8, 63, 64, 65, 1000, 4032, 65535} {
			slot, capSGE, capInline := SendSlotSize(sge, inl)
			if capSGE < sge || capInline < inl {
				t.Errorf("SendSlotSize(%d, %d): caps %d, %d below the request", sge, inl, capSGE, capInline)
			}
			if Size(slot, 1) < 0 {
				t.Errorf("SendSlotSize(%d, %d): slot %d is not a valid ring slot", sge, inl, slot)
			}
			buf := make([]byte, slot)
			if err := EncodeSendWQE(buf, &qp.SendWR{SGL: sgl[:capSGE]}); err != nil {
				t.Errorf("SendSlotSize(%d, %d): %d SGEs: %v", sge, inl, capSGE, err)
			}
			if err := EncodeSendWQE(buf, &qp.SendWR{SendFlags: qp.SendInline, InlineData: inline[:capInline]}); err != nil {
				t.Errorf("SendSlotSize(%d, %d): %d inline bytes: %v", sge, inl, capInline, err)
			}
		}
	}
}

func TestRecvSlotSize(t *testing.T) {
	for _, tc := range []struct {
		maxSGE, slot, capSGE uint32
	}{
		{0, 64, 3},
		{1, 64, 3},
		{3, 64, 3},
		{4, 128, 7},
		{7, 128, 7},
		{8, 256, 15},
		{32, 1024, 63},
		{255, 4096, 255},
		{256, 4096, 255}, // clipped
		{0xFFFFFFFF, 4096, 255},
	} {
		slot, capSGE := RecvSlotSize(tc.maxSGE)
		if slot != tc.slot || capSGE != tc.capSGE {
			t.Errorf("RecvSlotSize(%d) = %d, %d; want %d, %d", tc.maxSGE, slot, capSGE, tc.slot, tc.capSGE)
		}
		if Size(slot, 1) < 0 {
			t.Errorf("RecvSlotSize(%d): slot %d is not a valid ring slot", tc.maxSGE, slot)
		}
		if err := EncodeRecvWQE(make([]byte, slot), &qp.RecvWR{SGL: make([]qp.SGE, capSGE)}); err != nil {
			t.Errorf("RecvSlotSize(%d): %d SGEs do not encode: %v", tc.maxSGE, capSGE, err)
		}
	}
}

func TestSlotCount(t *testing.T) {
	for _, tc := range []struct{ n, want uint32 }{
		{0, 1}, {1, 1}, {2, 2}, {3, 4}, {4, 4}, {5, 8}, {1000, 1024}, {1024, 1024},
		{16385, 32768}, {1 << 31, 1 << 31}, {1<<31 + 1, 0}, {0xFFFFFFFF, 0},
	} {
		if got := SlotCount(tc.n); got != tc.want {
			t.Errorf("SlotCount(%d) = %d, want %d", tc.n, got, tc.want)
		}
	}
}
