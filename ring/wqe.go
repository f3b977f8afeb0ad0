package ring

import (
	"errors"
	"fmt"

	"rdmafs/qp"
)

// Scatter/gather element, as it follows a send or receive WQE header.
const (
	SGESize      = 16
	SGEOffAddr   = 0 // u64
	SGEOffLength = 8 // u32
	SGEOffLKey   = 12
)

// Send WQE header (64 bytes), then num_sge SGEs or inline_len data bytes.
const (
	SendHeaderSize    = 64
	SendOffWRID       = 0  // u64
	SendOffFlags      = 8  // u32 ibv_send_flags
	SendOffOpcode     = 12 // u8 ibv_wr_opcode
	SendOffNumSGE     = 13 // u8
	SendOffInlineLen  = 14 // u16
	SendOffImm        = 16 // u32 imm_data | invalidate_rkey | BIND_MW mw
	SendOffRKey       = 20 // u32 rkey | BIND_MW new rkey
	SendOffRemoteAddr = 24 // u64 remote_addr | BIND_MW bind_addr
	SendOffCompareAdd = 32 // u64 compare_add | BIND_MW bind_length | ATOMIC_WRITE data (memory order)
	SendOffSwap       = 40 // u64 swap | BIND_MW bind_lkey (low 32), bind_access (high 32)
	SendOffAH         = 48 // u32
	SendOffRemoteQPN  = 52 // u32
	SendOffRemoteQKey = 56 // u32
	SendOffReserved   = 60 // u32, zero
)

// Receive WQE header (16 bytes), then num_sge SGEs.
const (
	RecvHeaderSize  = 16
	RecvOffWRID     = 0 // u64
	RecvOffNumSGE   = 8 // u32
	RecvOffReserved = 12
)

// Completion queue entry (64 bytes).
const (
	CQESize            = 64
	CQEOffWRID         = 0  // u64
	CQEOffStatus       = 8  // u8 ibv_wc_status
	CQEOffOpcode       = 9  // u8 ibv_wc_opcode
	CQEOffWCFlags      = 10 // u16 ibv_wc_flags
	CQEOffVendorErr    = 12 // u32
	CQEOffByteLen      = 16 // u32
	CQEOffImm          = 20 // u32 imm_data | invalidated rkey
	CQEOffQPNum        = 24 // u32
	CQEOffSrcQP        = 28 // u32
	CQEOffPKeyIndex    = 32 // u16
	CQEOffSLID         = 34 // u16
	CQEOffSL           = 36 // u8
	CQEOffDLIDPathBits = 37 // u8
	CQEOffReserved     = 38 // 2 bytes, zero
	// The completion timestamps, zero unless the CQ was created with their
	// wc_flags (qp.CQTimestamp, qp.CQTimestampWallclock).
	CQEOffCompletionTS        = 40 // u64 device clock, hca_core_clock kHz ticks
	CQEOffCompletionWallclock = 48 // u64 wall-clock ns since the Unix epoch
	CQEOffReserved2           = 56 // 8 bytes, zero
)

// Field limits of the send WQE header.
const (
	MaxSendSGE   = 0xFF   // num_sge is a u8
	MaxInlineLen = 0xFFFF // inline_len is a u16
)

// ErrMalformed reports a WQE that cannot be decoded (its SGEs or inline data
// overrun the slot) or a WR that cannot be encoded into the slot given.
// Posting code maps it to EINVAL; the engine completes a malformed WQE with
// an error.
var ErrMalformed = errors.New("ring: malformed work request")

func putSGE(b []byte, s qp.SGE) {
	b = b[:SGESize]
	le.PutUint64(b[SGEOffAddr:], s.Addr)
	le.PutUint32(b[SGEOffLength:], s.Length)
	le.PutUint32(b[SGEOffLKey:], s.LKey)
}

func getSGE(b []byte) qp.SGE {
	b = b[:SGESize]
	return qp.SGE{
		Addr:   le.Uint64(b[SGEOffAddr:]),
		Length: le.Uint32(b[SGEOffLength:]),
		LKey:   le.Uint32(b[SGEOffLKey:]),
	}
}

// EncodeSendWQE writes wr into slot: the client's post path. With
// qp.SendInline the data written is wr.InlineData, which the caller must
// have gathered from the SGL (nil is an error; the SGL is not written);
// otherwise the SGL. Fields the opcode does not use are written as they
// are, except where the opcode reuses their offset (see the package doc).
func EncodeSendWQE(slot []byte, wr *qp.SendWR) error {
	if len(slot) < SendHeaderSize {
		return fmt.Errorf("%w: %d-byte slot is shorter than the send header", ErrMalformed, len(slot))
	}
	room := len(slot) - SendHeaderSize
	nsge, ilen := 0, 0
	if wr.SendFlags&qp.SendInline != 0 {
		if wr.InlineData == nil {
			return fmt.Errorf("%w: inline send without gathered inline data", ErrMalformed)
		}
		ilen = len(wr.InlineData)
		if ilen > MaxInlineLen || ilen > room {
			return fmt.Errorf("%w: %d inline bytes do not fit a %d-byte slot", ErrMalformed, ilen, len(slot))
		}
	} else {
		nsge = len(wr.SGL)
		if nsge > MaxSendSGE || nsge*SGESize > room {
			return fmt.Errorf("%w: %d SGEs do not fit a %d-byte slot", ErrMalformed, nsge, len(slot))
		}
	}

	imm, raddr, cadd, swap := wr.ImmData, wr.RemoteAddr, wr.CompareAdd, wr.Swap
	switch wr.Opcode {
	case qp.WRSendWithInv, qp.WRLocalInv:
		imm = wr.InvalidateRKey
	case qp.WRBindMW:
		imm, raddr, cadd = wr.MW, wr.BindAddr, wr.BindLength
		swap = uint64(wr.BindLKey) | uint64(wr.BindAccess)<<32
	}

	h := slot[:SendHeaderSize]
	le.PutUint64(h[SendOffWRID:], wr.WRID)
	le.PutUint32(h[SendOffFlags:], uint32(wr.SendFlags))
	h[SendOffOpcode] = byte(wr.Opcode)
	h[SendOffNumSGE] = byte(nsge)
	le.PutUint16(h[SendOffInlineLen:], uint16(ilen))
	le.PutUint32(h[SendOffImm:], imm)
	le.PutUint32(h[SendOffRKey:], wr.RKey)
	le.PutUint64(h[SendOffRemoteAddr:], raddr)
	le.PutUint64(h[SendOffCompareAdd:], cadd)
	le.PutUint64(h[SendOffSwap:], swap)
	le.PutUint32(h[SendOffAH:], wr.AH)
	le.PutUint32(h[SendOffRemoteQPN:], wr.RemoteQPN)
	le.PutUint32(h[SendOffRemoteQKey:], wr.RemoteQKey)
	le.PutUint32(h[SendOffReserved:], 0)

	body := slot[SendHeaderSize:]
	if ilen > 0 {
		copy(body, wr.InlineData)
	}
	for i := range nsge {
		putSGE(body[i*SGESize:], wr.SGL[i])
	}
	return nil
}

// DecodeSendWQE reads the send WQE in slot into *wr: the daemon's side,
// where slot is written by an untrusted client, possibly while we read.
// Every field is read once; the SGEs or inline bytes must lie inside the
// slot, num_sge must be 0 for an inline WQE and inline_len 0 for any
// other, else ErrMalformed and *wr is untouched. The opcode is not
// checked here: the engine does, to complete the WQE with the right error.
//
// wr.SGL and wr.InlineData are reused (truncated, then appended to), so a
// caller that keeps one SendWR decodes without allocating. Nothing of the
// result aliases slot. An inline WQE always decodes to a non-nil
// InlineData, so that the result encodes again.
func DecodeSendWQE(slot []byte, wr *qp.SendWR) error {
	if len(slot) < SendHeaderSize {
		return fmt.Errorf("%w: %d-byte slot is shorter than the send header", ErrMalformed, len(slot))
	}
	h := slot[:SendHeaderSize]
	flags := qp.SendFlags(le.Uint32(h[SendOffFlags:]))
	nsge := int(h[SendOffNumSGE])
	ilen := int(le.Uint16(h[SendOffInlineLen:]))
	body := slot[SendHeaderSize:]

	sgl, inline := wr.SGL[:0], wr.InlineData[:0]
	if flags&qp.SendInline != 0 {
		if nsge != 0 {
			return fmt.Errorf("%w: inline send with num_sge %d", ErrMalformed, nsge)
		}
		if ilen > len(body) {
			return fmt.Errorf("%w: %d inline bytes overrun a %d-byte slot", ErrMalformed, ilen, len(slot))
		}
		if inline == nil {
			inline = []byte{} // non-nil, and no allocation
		}
		inline = append(inline, body[:ilen]...)
	} else {
		if ilen != 0 {
			return fmt.Errorf("%w: inline_len %d without the inline flag", ErrMalformed, ilen)
		}
		if nsge*SGESize > len(body) {
			return fmt.Errorf("%w: %d SGEs overrun a %d-byte slot", ErrMalformed, nsge, len(slot))
		}
		for i := range nsge {
			sgl = append(sgl, getSGE(body[i*SGESize:]))
		}
	}

	op := qp.WROpcode(h[SendOffOpcode])
	imm := le.Uint32(h[SendOffImm:])
	raddr := le.Uint64(h[SendOffRemoteAddr:])
	cadd := le.Uint64(h[SendOffCompareAdd:])
	swap := le.Uint64(h[SendOffSwap:])
	// Cleared, then filled field by field in place: a composite literal
	// is built on the stack with narrow stores and copied in with wide
	// loads, which stall store forwarding (8 % of the engine at 8 B).
	*wr = qp.SendWR{}
	wr.WRID = le.Uint64(h[SendOffWRID:])
	wr.Opcode = op
	wr.SendFlags = flags
	wr.SGL = sgl
	wr.RKey = le.Uint32(h[SendOffRKey:])
	wr.AH = le.Uint32(h[SendOffAH:])
	wr.RemoteQPN = le.Uint32(h[SendOffRemoteQPN:])
	wr.RemoteQKey = le.Uint32(h[SendOffRemoteQKey:])
	wr.InlineData = inline
	switch op {
	case qp.WRSendWithInv, qp.WRLocalInv:
		wr.InvalidateRKey = imm
		wr.RemoteAddr, wr.CompareAdd, wr.Swap = raddr, cadd, swap
	case qp.WRBindMW:
		wr.MW, wr.BindAddr, wr.BindLength = imm, raddr, cadd
		wr.BindLKey, wr.BindAccess = uint32(swap), qp.Access(swap>>32)
	default:
		wr.ImmData = imm
		wr.RemoteAddr, wr.CompareAdd, wr.Swap = raddr, cadd, swap
	}
	return nil
}

// EncodeRecvWQE writes wr into slot: the client's post_recv path.
func EncodeRecvWQE(slot []byte, wr *qp.RecvWR) error {
	if len(slot) < RecvHeaderSize {
		return fmt.Errorf("%w: %d-byte slot is shorter than the receive header", ErrMalformed, len(slot))
	}
	nsge := len(wr.SGL)
	if nsge > (len(slot)-RecvHeaderSize)/SGESize {
		return fmt.Errorf("%w: %d SGEs do not fit a %d-byte slot", ErrMalformed, nsge, len(slot))
	}
	h := slot[:RecvHeaderSize]
	le.PutUint64(h[RecvOffWRID:], wr.WRID)
	le.PutUint32(h[RecvOffNumSGE:], uint32(nsge))
	le.PutUint32(h[RecvOffReserved:], 0)
	body := slot[RecvHeaderSize:]
	for i, s := range wr.SGL {
		putSGE(body[i*SGESize:], s)
	}
	return nil
}

// DecodeRecvWQE reads the receive WQE in slot into *wr, with the rules of
// DecodeSendWQE: hostile input, num_sge read once and checked against the
// slot, wr.SGL reused, nothing aliased, *wr untouched on error.
func DecodeRecvWQE(slot []byte, wr *qp.RecvWR) error {
	if len(slot) < RecvHeaderSize {
		return fmt.Errorf("%w: %d-byte slot is shorter than the receive header", ErrMalformed, len(slot))
	}
	h := slot[:RecvHeaderSize]
	nsge := le.Uint32(h[RecvOffNumSGE:])
	body := slot[RecvHeaderSize:]
	if uint64(nsge)*SGESize > uint64(len(body)) {
		return fmt.Errorf("%w: %d SGEs overrun a %d-byte slot", ErrMalformed, nsge, len(slot))
	}
	sgl := wr.SGL[:0]
	for i := range int(nsge) {
		sgl = append(sgl, getSGE(body[i*SGESize:]))
	}
	wr.WRID = le.Uint64(h[RecvOffWRID:])
	wr.SGL = sgl
	return nil
}

// EncodeCQE writes wc into slot, which must be at least CQESize bytes (every
// CQ slot is): the daemon's completion path. wc_flags is 16 bits wide.
func EncodeCQE(slot []byte, wc *qp.WC) {
	c := slot[:CQESize]
	le.PutUint64(c[CQEOffWRID:], wc.WRID)
	c[CQEOffStatus] = byte(wc.Status)
	c[CQEOffOpcode] = byte(wc.Opcode)
	le.PutUint16(c[CQEOffWCFlags:], uint16(wc.WCFlags))
	le.PutUint32(c[CQEOffVendorErr:], wc.VendorErr)
	le.PutUint32(c[CQEOffByteLen:], wc.ByteLen)
	le.PutUint32(c[CQEOffImm:], wc.ImmData)
	le.PutUint32(c[CQEOffQPNum:], wc.QPNum)
	le.PutUint32(c[CQEOffSrcQP:], wc.SrcQP)
	le.PutUint16(c[CQEOffPKeyIndex:], wc.PKeyIndex)
	le.PutUint16(c[CQEOffSLID:], wc.SLID)
	c[CQEOffSL] = wc.SL
	c[CQEOffDLIDPathBits] = wc.DLIDPathBits
	clear(c[CQEOffReserved:CQEOffCompletionTS])
	le.PutUint64(c[CQEOffCompletionTS:], wc.CompletionTS)
	le.PutUint64(c[CQEOffCompletionWallclock:], wc.CompletionWallclockNS)
	clear(c[CQEOffReserved2:])
}

// DecodeCQE reads the CQE in slot (at least CQESize bytes) into *wc: the
// client's poll path. Every field is taken as the daemon wrote it.
func DecodeCQE(slot []byte, wc *qp.WC) {
	c := slot[:CQESize]
	*wc = qp.WC{
		WRID:         le.Uint64(c[CQEOffWRID:]),
		Status:       qp.WCStatus(c[CQEOffStatus]),
		Opcode:       qp.WCOpcode(c[CQEOffOpcode]),
		WCFlags:      qp.WCFlags(le.Uint16(c[CQEOffWCFlags:])),
		VendorErr:    le.Uint32(c[CQEOffVendorErr:]),
		ByteLen:      le.Uint32(c[CQEOffByteLen:]),
		ImmData:      le.Uint32(c[CQEOffImm:]),
		QPNum:        le.Uint32(c[CQEOffQPNum:]),
		SrcQP:        le.Uint32(c[CQEOffSrcQP:]),
		PKeyIndex:    le.Uint16(c[CQEOffPKeyIndex:]),
		SLID:         le.Uint16(c[CQEOffSLID:]),
		SL:           c[CQEOffSL],
		DLIDPathBits: c[CQEOffDLIDPathBits],

		CompletionTS:          le.Uint64(c[CQEOffCompletionTS:]),
		CompletionWallclockNS: le.Uint64(c[CQEOffCompletionWallclock:]),
	}
}
