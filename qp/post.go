package qp

// MaxMsgSize is the largest message a WR may describe (2^31, the IBA limit
// on RETH DMA length and rxe's port max_msg_sz).
const MaxMsgSize = 1 << 31

// SendCaps are the per-QP limits a send WR is checked against.
type SendCaps struct {
	MaxSGE, MaxInline uint32
	MaxRdAtomic       uint8 // the QP's max_rd_atomic: 0 forbids READ and atomics
}

// ValidateSendWR does the post-time checks of libibverbs providers and
// rdmavt (VERBS.md §3.3, §3.4) on one send WR, touching no memory keys: those
// are checked when data moves. A failure is EINVAL for the caller, with Key
// naming the token to fix.
func ValidateSendWR(t Type, wr *SendWR, c SendCaps) error {
	info, ok := wr.Opcode.Info()
	if !ok {
		return errorf("opcode", "unknown opcode %d", uint8(wr.Opcode))
	}
	return ValidateSendWRInfo(t, wr, c, &info)
}

// ValidateSendWRInfo is ValidateSendWR for a caller that has looked the
// opcode up already: info is wr.Opcode's row (Info), which the engine keeps
// in its copy of the WQE.
func ValidateSendWRInfo(t Type, wr *SendWR, c SendCaps, info *OpInfo) error {
	if !wr.Opcode.AllowedOn(t) {
		return errorf("opcode", "%v is not allowed on a %v qp", wr.Opcode, t)
	}
	if bad := wr.SendFlags &^ sendFlagsKnown; bad != 0 {
		return errorf("send_flags", "unknown flags %#x", uint32(bad))
	}
	if t == TypeUD && wr.AH == 0 {
		return errorf("ah", "required for %v on a ud qp", wr.Opcode)
	}
	if uint64(len(wr.SGL)) > uint64(c.MaxSGE) {
		return errorf("sge", "%d sges exceed max_send_sge %d", len(wr.SGL), c.MaxSGE)
	}
	total := sgeTotal(wr.SGL)
	inline := wr.SendFlags&SendInline != 0
	if wr.InlineData != nil && (inline || len(wr.InlineData) != 0) {
		// inline_data replaces the SGL as the source of the bytes; with
		// both, or without the flag, what to send would be ambiguous.
		// Without the flag an empty one is no data: the engine decodes
		// every WQE into the WR its slot last held, so a send with SGEs
		// keeps the (emptied) buffer of an inline one before it.
		if !inline {
			return errorf("inline_data", "given without send_flags=inline")
		}
		if len(wr.SGL) != 0 {
			return errorf("inline_data", "given together with %d sges; use one or the other", len(wr.SGL))
		}
	}
	if inline {
		if !info.DataOut() {
			return errorf("send_flags", "inline is only for send and rdma_write opcodes, not %v", wr.Opcode)
		}
		n := total
		if wr.InlineData != nil {
			n = uint64(len(wr.InlineData))
		}
		if n > uint64(c.MaxInline) {
			return errorf("inline_data", "%d bytes exceed max_inline_data %d", n, c.MaxInline)
		}
	}
	if total > MaxMsgSize {
		return errorf("sge", "total length %d exceeds %d", total, uint64(MaxMsgSize))
	}
	if wr.Opcode == WRBindMW {
		if len(wr.SGL) != 0 {
			return errorf("sge", "bind_mw takes no sges, got %d", len(wr.SGL))
		}
		if wr.ImmData != 0 {
			return errorf("imm_data", "bind_mw takes no immediate data")
		}
	}
	if info.RdAtomic() && c.MaxRdAtomic == 0 {
		return errorf("opcode", "%v needs max_rd_atomic > 0 on the qp", wr.Opcode)
	}
	if info.Atomic {
		// The original value lands in the one SGE; both ends are 8-byte words.
		if len(wr.SGL) != 1 || wr.SGL[0].Length != 8 {
			return errorf("sge", "%v needs exactly one sge of length 8", wr.Opcode)
		}
		if wr.RemoteAddr&7 != 0 {
			return errorf("remote_addr", "%#x is not 8-byte aligned", wr.RemoteAddr)
		}
	}
	if info.AtomicWrite {
		// The 8 bytes travel in the WR itself (compare_add), as
		// ibv_wr_atomic_write passes them; there is no local buffer.
		if len(wr.SGL) != 0 {
			return errorf("sge", "%v takes its 8 bytes in compare_add, not in %d sges", wr.Opcode, len(wr.SGL))
		}
		if wr.RemoteAddr&7 != 0 {
			return errorf("remote_addr", "%#x is not 8-byte aligned", wr.RemoteAddr)
		}
	}
	return nil
}

// ValidateRecvWR checks one receive WR against the queue's max_sge.
func ValidateRecvWR(wr *RecvWR, maxSGE uint32) error {
	if uint64(len(wr.SGL)) > uint64(maxSGE) {
		return errorf("sge", "%d sges exceed max_recv_sge %d", len(wr.SGL), maxSGE)
	}
	if total := sgeTotal(wr.SGL); total > MaxMsgSize {
		return errorf("sge", "total length %d exceeds %d", total, uint64(MaxMsgSize))
	}
	return nil
}

// sgeTotal sums in 64 bits: 32-bit lengths of many SGEs overflow uint32.
func sgeTotal(sgl []SGE) uint64 {
	var n uint64
	for _, s := range sgl {
		n += uint64(s.Length)
	}
	return n
}
