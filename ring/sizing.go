package ring

import "math/bits"

// pow2ceil is the smallest power of two ≥ v, for 1 ≤ v ≤ 2^31.
func pow2ceil(v uint32) uint32 {
	if v <= 1 {
		return 1
	}
	return 1 << bits.Len32(v-1)
}

// SendSlotSize sizes send queue slots the way rxe sizes its send WQEs
// (rxe_qp.c: rxe_init_sq): the variable part must hold maxSGE SGEs or
// maxInline bytes, whichever is larger, and the slot is the next power of
// two ≥ SendHeaderSize plus that (so at least 64 bytes). The slack of the
// round-up is usable, and is reported as rxe reports it: capSGE =
// (slotSize-64)/16 and capInline = slotSize-64, clipped to what the u8
// num_sge and u16 inline_len fields can say. These are the caps to return
// from create_qp (ibv_qp_cap.max_send_sge, max_inline_data).
//
// The inputs are clipped to MaxSendSGE and MaxInlineLen first, so larger
// requests come back with a cap below the request, which the caller turns
// into EINVAL. Device limits are the caller's to check.
func SendSlotSize(maxSGE, maxInline uint32) (slotSize, capSGE, capInline uint32) {
	maxSGE = min(maxSGE, MaxSendSGE)
	maxInline = min(maxInline, MaxInlineLen)
	body := max(maxSGE*SGESize, maxInline)
	slotSize = pow2ceil(max(SendHeaderSize+body, MinSlotSize))
	room := slotSize - SendHeaderSize
	return slotSize, min(room/SGESize, MaxSendSGE), min(room, MaxInlineLen)
}

// RecvSlotSize sizes receive queue (and SRQ) slots like rxe_init_rq: the
// 16-byte header plus maxSGE SGEs, rounded up to a power of two of at
// least MinSlotSize (one cache line, the ring's minimum), reporting capSGE
// = (slotSize-16)/16 as ibv_qp_cap.max_recv_sge (or max_sge of an SRQ).
// maxSGE is clipped to MaxSendSGE, as for sends.
func RecvSlotSize(maxSGE uint32) (slotSize, capSGE uint32) {
	maxSGE = min(maxSGE, MaxSendSGE)
	slotSize = pow2ceil(max(RecvHeaderSize+maxSGE*SGESize, MinSlotSize))
	return slotSize, min((slotSize-RecvHeaderSize)/SGESize, MaxSendSGE)
}

// SlotCount is the number of slots for n work requests or CQEs: the next
// power of two ≥ max(n, 1). The ring wastes no slot, so the whole count is
// usable and is the max_send_wr / max_recv_wr / cqe to report (rxe reports
// one less, because its rings keep one slot empty). It returns 0 when n
// exceeds 2^31, the largest power of two a u32 holds.
func SlotCount(n uint32) uint32 {
	if n > 1<<31 {
		return 0
	}
	return pow2ceil(n)
}
