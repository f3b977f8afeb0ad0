package roce

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
)

// Errors of ParseIB. They are returned as they are (never wrapped), so a
// receive path can count them by identity without allocating.
var (
	ErrShort   = errors.New("roce: packet shorter than its headers")
	ErrOpcode  = errors.New("roce: unknown or unsupported opcode")
	ErrTVer    = errors.New("roce: BTH transport header version is not 0")
	ErrAlign   = errors.New("roce: packet length is not a multiple of 4")
	ErrPad     = errors.New("roce: pad count exceeds the payload")
	ErrPayload = errors.New("roce: opcode carries no payload")
)

// Errors of marshalling: ErrRange (wrapped with the field's name) for a
// field too wide for its wire width, ErrBuffer for a too short buffer.
// Marshalling also returns ErrOpcode and ErrPayload.
var (
	ErrRange  = errors.New("roce: field out of range")
	ErrBuffer = errors.New("roce: buffer too short")
)

// Masks of the 24-bit fields.
const (
	QPNMask = 0xFFFFFF
	PSNMask = 0xFFFFFF
	MSNMask = 0xFFFFFF
)

// Packet is one IB transport packet: the BTH, the extension headers of its
// opcode, and the payload. Fields of headers the opcode does not carry are
// zero after ParseIB and ignored by marshalling. VA and RKey are shared by
// RETH and AtomicETH.
//
// It holds the wire fields of the engine's internal packet (device/packet.go)
// under exported names, minus the addressing (GIDs, which come from the IP
// header) and the engine's bookkeeping, so that the engine can embed it.
type Packet struct {
	// BTH
	Opcode Opcode
	SE     bool  // solicited event
	MigReq bool  // migration state
	PadCnt uint8 // set by ParseIB; marshalling derives it from len(Payload)
	TVer   uint8 // transport header version; 0 (ParseIB rejects others)
	PKey   uint16
	FECN   bool
	BECN   bool
	DestQP uint32 // 24 bits
	AckReq bool
	PSN    uint32 // 24 bits

	// RETH: VA, RKey, DMALen. AtomicETH: VA, RKey, SwapAdd, Compare.
	VA      uint64
	RKey    uint32
	DMALen  uint32
	SwapAdd uint64
	Compare uint64

	// AETH
	Syndrome uint8
	MSN      uint32 // 24 bits

	// AtomicAckETH
	OrigData uint64

	// ImmDt: the four immediate bytes read big-endian, so Imm equals the
	// host-order value of the verbs API's network-order imm_data.
	Imm uint32

	// IETH
	InvRKey uint32

	// DETH
	QKey  uint32
	SrcQP uint32 // 24 bits

	// FETH
	FlushType  uint8 // placement type, bits 3:0
	FlushLevel uint8 // selectivity level, bits 5:4

	// XRCETH: the XRC SRQ number (24 bits) an XRC request is for.
	XRCSRQ uint32

	// Payload is the data after the extension headers, without the pad.
	// After ParseIB it aliases the parsed buffer.
	Payload []byte
}

// padLen is the number of pad bytes after n bytes of payload.
func padLen(n int) int { return -n & 3 }

// IBLen returns the length of the IB part AppendIB produces (BTH through
// pad, without the ICRC), or 0 if the opcode is not valid.
func (p *Packet) IBLen() int {
	h := int(opTable[p.Opcode].hlen)
	if h == 0 {
		return 0
	}
	return h + len(p.Payload) + padLen(len(p.Payload))
}

// ParseIB decodes the IB part of a RoCEv2 packet: b starts at the BTH and
// ends after the pad, before the ICRC. It fills all of *p; p.Payload aliases
// b, so b must not be reused while p is in use.
//
// It checks what a receiver can check without a QP: the BTH and the
// opcode's headers fit, TVer is 0, the opcode is one of §8.3, the length is
// a multiple of 4, the pad count fits in the payload and opcodes without
// payload have none. Reserved bits and pad contents are ignored. It never
// panics; errors are the Err* values of this package.
func ParseIB(b []byte, p *Packet) error {
	if len(b) < BTHLen {
		return ErrShort
	}
	op := Opcode(b[0])
	info := &opTable[op]
	hlen := int(info.hlen)
	if hlen == 0 {
		return ErrOpcode
	}
	if b[1]&0x0F != 0 {
		return ErrTVer
	}
	if len(b) < hlen {
		return ErrShort
	}
	if len(b)&3 != 0 {
		return ErrAlign
	}
	pad := int(b[1]>>4) & 3
	rest := len(b) - hlen
	if pad > rest {
		return ErrPad
	}
	if rest != 0 && !info.payload {
		return ErrPayload
	}
	*p = Packet{
		Opcode:  op,
		SE:      b[1]&0x80 != 0,
		MigReq:  b[1]&0x40 != 0,
		PadCnt:  uint8(pad),
		PKey:    binary.BigEndian.Uint16(b[2:4]),
		FECN:    b[4]&0x80 != 0,
		BECN:    b[4]&0x40 != 0,
		DestQP:  binary.BigEndian.Uint32(b[4:8]) & QPNMask,
		AckReq:  b[8]&0x80 != 0,
		PSN:     binary.BigEndian.Uint32(b[8:12]) & PSNMask,
		Payload: b[hlen : len(b)-pad : len(b)-pad],
	}
	h := info.hdrs
	x := b[BTHLen:hlen]
	if h&HdrXRCETH != 0 {
		p.XRCSRQ = binary.BigEndian.Uint32(x[0:4]) & QPNMask
		x = x[XRCETHLen:]
	}
	if h&HdrDETH != 0 {
		p.QKey = binary.BigEndian.Uint32(x[0:4])
		p.SrcQP = binary.BigEndian.Uint32(x[4:8]) & QPNMask
		x = x[DETHLen:]
	}
	if h&HdrFETH != 0 {
		p.FlushType = x[3] & 0x0F
		p.FlushLevel = x[3] >> 4 & 3
		x = x[FETHLen:]
	}
	if h&HdrRETH != 0 {
		p.VA = binary.BigEndian.Uint64(x[0:8])
		p.RKey = binary.BigEndian.Uint32(x[8:12])
		p.DMALen = binary.BigEndian.Uint32(x[12:16])
		x = x[RETHLen:]
	}
	if h&HdrAtomicETH != 0 {
		p.VA = binary.BigEndian.Uint64(x[0:8])
		p.RKey = binary.BigEndian.Uint32(x[8:12])
		p.SwapAdd = binary.BigEndian.Uint64(x[12:20])
		p.Compare = binary.BigEndian.Uint64(x[20:28])
		x = x[AtomicETHLen:]
	}
	if h&HdrAETH != 0 {
		p.Syndrome = x[0]
		p.MSN = binary.BigEndian.Uint32(x[0:4]) & MSNMask
		x = x[AETHLen:]
	}
	if h&HdrAtomicAckETH != 0 {
		p.OrigData = binary.BigEndian.Uint64(x[0:8])
		x = x[AtomicAckETHLen:]
	}
	if h&HdrImmDt != 0 {
		p.Imm = binary.BigEndian.Uint32(x[0:4])
		x = x[ImmDtLen:]
	}
	if h&HdrIETH != 0 {
		p.InvRKey = binary.BigEndian.Uint32(x[0:4])
	}
	return nil
}

// check validates the fields marshalling writes.
func (p *Packet) check() (*opInfo, error) {
	info := &opTable[p.Opcode]
	if info.hlen == 0 {
		return nil, ErrOpcode
	}
	if len(p.Payload) != 0 && !info.payload {
		return nil, ErrPayload
	}
	h := info.hdrs
	switch {
	case p.TVer > 0x0F:
		return nil, fmt.Errorf("%w: TVer %#x", ErrRange, p.TVer)
	case p.DestQP > QPNMask:
		return nil, fmt.Errorf("%w: DestQP %#x", ErrRange, p.DestQP)
	case p.PSN > PSNMask:
		return nil, fmt.Errorf("%w: PSN %#x", ErrRange, p.PSN)
	case h&HdrAETH != 0 && p.MSN > MSNMask:
		return nil, fmt.Errorf("%w: MSN %#x", ErrRange, p.MSN)
	case h&HdrXRCETH != 0 && p.XRCSRQ > QPNMask:
		return nil, fmt.Errorf("%w: XRCSRQ %#x", ErrRange, p.XRCSRQ)
	case h&HdrDETH != 0 && p.SrcQP > QPNMask:
		return nil, fmt.Errorf("%w: SrcQP %#x", ErrRange, p.SrcQP)
	case h&HdrFETH != 0 && (p.FlushType > 0x0F || p.FlushLevel > 3):
		return nil, fmt.Errorf("%w: FlushType %#x FlushLevel %#x", ErrRange, p.FlushType, p.FlushLevel)
	}
	return info, nil
}

// MarshalBTHAndExt writes the BTH and the extension headers of p into b and
// returns their length (HeaderLen(p.Opcode)). The BTH pad count is derived
// from len(p.Payload); the payload and pad themselves are not written, so a
// sender can put them next to the headers from wherever they live (then
// zero pad bytes, then the ICRC).
func (p *Packet) MarshalBTHAndExt(b []byte) (int, error) {
	info, err := p.check()
	if err != nil {
		return 0, err
	}
	hlen := int(info.hlen)
	if len(b) < hlen {
		return 0, ErrBuffer
	}
	p.put(b[:hlen], info.hdrs)
	return hlen, nil
}

// put writes the headers into b, which has exactly their length.
func (p *Packet) put(b []byte, h Headers) {
	b[0] = byte(p.Opcode)
	b[1] = bit(p.SE, 0x80) | bit(p.MigReq, 0x40) | byte(padLen(len(p.Payload)))<<4 | p.TVer
	binary.BigEndian.PutUint16(b[2:4], p.PKey)
	binary.BigEndian.PutUint32(b[4:8], p.DestQP)
	b[4] = bit(p.FECN, 0x80) | bit(p.BECN, 0x40)
	binary.BigEndian.PutUint32(b[8:12], p.PSN)
	b[8] = bit(p.AckReq, 0x80)
	x := b[BTHLen:]
	if h&HdrXRCETH != 0 {
		binary.BigEndian.PutUint32(x[0:4], p.XRCSRQ) // the reserved byte stays 0
		x = x[XRCETHLen:]
	}
	if h&HdrDETH != 0 {
		binary.BigEndian.PutUint32(x[0:4], p.QKey)
		binary.BigEndian.PutUint32(x[4:8], p.SrcQP)
		x = x[DETHLen:]
	}
	if h&HdrFETH != 0 {
		binary.BigEndian.PutUint32(x[0:4], uint32(p.FlushLevel)<<4|uint32(p.FlushType))
		x = x[FETHLen:]
	}
	if h&HdrRETH != 0 {
		binary.BigEndian.PutUint64(x[0:8], p.VA)
		binary.BigEndian.PutUint32(x[8:12], p.RKey)
		binary.BigEndian.PutUint32(x[12:16], p.DMALen)
		x = x[RETHLen:]
	}
	if h&HdrAtomicETH != 0 {
		binary.BigEndian.PutUint64(x[0:8], p.VA)
		binary.BigEndian.PutUint32(x[8:12], p.RKey)
		binary.BigEndian.PutUint64(x[12:20], p.SwapAdd)
		binary.BigEndian.PutUint64(x[20:28], p.Compare)
		x = x[AtomicETHLen:]
	}
	if h&HdrAETH != 0 {
		binary.BigEndian.PutUint32(x[0:4], p.MSN)
		x[0] = p.Syndrome
		x = x[AETHLen:]
	}
	if h&HdrAtomicAckETH != 0 {
		binary.BigEndian.PutUint64(x[0:8], p.OrigData)
		x = x[AtomicAckETHLen:]
	}
	if h&HdrImmDt != 0 {
		binary.BigEndian.PutUint32(x[0:4], p.Imm)
		x = x[ImmDtLen:]
	}
	if h&HdrIETH != 0 {
		binary.BigEndian.PutUint32(x[0:4], p.InvRKey)
	}
}

// AppendIB appends the IB part of p (BTH, extension headers, payload, zero
// pad; no ICRC) to b. On error b is returned unchanged.
func (p *Packet) AppendIB(b []byte) ([]byte, error) {
	info, err := p.check()
	if err != nil {
		return b, err
	}
	n, h := len(b), int(info.hlen)
	total := h + len(p.Payload) + padLen(len(p.Payload))
	b = slices.Grow(b, total)[:n+total]
	p.put(b[n:n+h], info.hdrs)
	m := copy(b[n+h:], p.Payload)
	clear(b[n+h+m:])
	return b, nil
}

func bit(v bool, m byte) byte {
	if v {
		return m
	}
	return 0
}
