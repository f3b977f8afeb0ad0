package cm

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The CM's MADs (IBA vol. 1 ch. 12; shared/reference/libibverbs/CM.md).
// Every MAD is 256 bytes: a 24-byte common header, then the message. The
// offsets below are those of the IBTA tables, counted from the end of the
// header; a field narrower than its bytes sits in their high bits, as IBA
// lays fields out most significant bit first.

// MADSize is the size of every MAD on QP1.
const MADSize = 256

// HeaderSize is the MAD common header.
const HeaderSize = 24

// Header constants of a CM MAD.
const (
	BaseVersion  = 1
	ClassCM      = 0x07
	ClassVersion = 2
	MethodSend   = 0x03
)

// Attribute IDs: the message types.
const (
	AttrREQ     = 0x0010
	AttrMRA     = 0x0011
	AttrREJ     = 0x0012
	AttrREP     = 0x0013
	AttrRTU     = 0x0014
	AttrDREQ    = 0x0015
	AttrDREP    = 0x0016
	AttrSIDRReq = 0x0017
	AttrSIDRRep = 0x0018
	AttrLAP     = 0x0019
	AttrAPR     = 0x001A
)

// Private data sizes of each message (the bytes after its fixed fields).
const (
	REQPrivateLen     = 92
	MRAPrivateLen     = 222
	REJPrivateLen     = 148
	REJARILen         = 72
	REPPrivateLen     = 196
	RTUPrivateLen     = 224
	DREQPrivateLen    = 220
	DREPPrivateLen    = 224
	SIDRReqPrivateLen = 216
	SIDRRepPrivateLen = 136
	SIDRRepInfoLen    = 72
)

// REJ reasons (IBA table 109) the agent sends or reports.
const (
	RejNoQP              = 1
	RejNoResources       = 3
	RejTimeout           = 4
	RejInvalidCommID     = 6
	RejInvalidServiceID  = 8
	RejInvalidTransport  = 9
	RejStaleConn         = 10
	RejConsumerDefined   = 28
	RejInvalidClassVersn = 31
)

// MRA and REJ name the message they answer ("message MRAed/rejected").
const (
	MsgREQ   = 0
	MsgREP   = 1
	MsgOther = 2
)

// SIDR_REP status (IBA table 121), the values the kernel's CM uses.
const (
	SIDRSuccess     = 0
	SIDRUnsupported = 1 // no listener for the service ID
	SIDRReject      = 2 // the consumer refused
	SIDRNoQP        = 3
)

// Header is the MAD common header.
type Header struct {
	BaseVersion   uint8
	Class         uint8
	ClassVersion  uint8
	Method        uint8
	Status        uint16
	ClassSpecific uint16
	TID           uint64
	AttrID        uint16
	AttrMod       uint32
}

// Path is a REQ's primary or alternate path.
type Path struct {
	LocalLID, RemoteLID uint16
	LocalGID, RemoteGID [16]byte
	FlowLabel           uint32 // 20 bits
	PacketRate          uint8  // 6 bits
	TrafficClass        uint8
	HopLimit            uint8
	SL                  uint8 // 4 bits
	SubnetLocal         bool
	LocalACKTimeout     uint8 // 5 bits
}

// REQ is the connection request (IBA table 106).
type REQ struct {
	LocalCommID             uint32
	ServiceID               uint64
	LocalCAGUID             uint64
	LocalQKey               uint32
	LocalQPN                uint32 // 24 bits
	ResponderResources      uint8
	LocalEECN               uint32 // 24 bits
	InitiatorDepth          uint8
	RemoteEECN              uint32 // 24 bits
	RemoteCMResponseTimeout uint8  // 5 bits
	TransportType           uint8  // 2 bits: 0 RC, 1 UC, 3 XRC/extended
	FlowControl             bool
	StartingPSN             uint32 // 24 bits
	LocalCMResponseTimeout  uint8  // 5 bits
	RetryCount              uint8  // 3 bits
	PKey                    uint16
	PathMTU                 uint8 // 4 bits, IB MTU enum
	RDCExists               bool
	RNRRetryCount           uint8 // 3 bits
	MaxCMRetries            uint8 // 4 bits
	SRQ                     bool
	ExtTransport            uint8 // 3 bits
	Primary, Alternate      Path
	PrivateData             [REQPrivateLen]byte
}

// MRA delays the peer's timeout (IBA table 107).
type MRA struct {
	LocalCommID, RemoteCommID uint32
	MessageMRAed              uint8 // 2 bits
	ServiceTimeout            uint8 // 5 bits
	PrivateData               [MRAPrivateLen]byte
}

// REJ refuses a REQ or a REP (IBA table 108).
type REJ struct {
	LocalCommID, RemoteCommID uint32
	MessageRejected           uint8 // 2 bits
	ARILength                 uint8 // 7 bits
	Reason                    uint16
	ARI                       [REJARILen]byte
	PrivateData               [REJPrivateLen]byte
}

// REP accepts a REQ (IBA table 110).
type REP struct {
	LocalCommID, RemoteCommID uint32
	LocalQKey                 uint32
	LocalQPN                  uint32 // 24 bits
	LocalEECN                 uint32 // 24 bits
	StartingPSN               uint32 // 24 bits
	ResponderResources        uint8
	InitiatorDepth            uint8
	TargetACKDelay            uint8 // 5 bits
	FailoverAccepted          uint8 // 2 bits
	FlowControl               bool
	RNRRetryCount             uint8 // 3 bits
	SRQ                       bool
	LocalCAGUID               uint64
	PrivateData               [REPPrivateLen]byte
}

// RTU completes the handshake (IBA table 111).
type RTU struct {
	LocalCommID, RemoteCommID uint32
	PrivateData               [RTUPrivateLen]byte
}

// DREQ asks to disconnect (IBA table 112).
type DREQ struct {
	LocalCommID, RemoteCommID uint32
	RemoteQPN                 uint32 // 24 bits
	PrivateData               [DREQPrivateLen]byte
}

// DREP answers a DREQ (IBA table 113).
type DREP struct {
	LocalCommID, RemoteCommID uint32
	PrivateData               [DREPPrivateLen]byte
}

// SIDRReq resolves a service ID to a UD QP (IBA table 119).
type SIDRReq struct {
	RequestID   uint32
	PKey        uint16
	ServiceID   uint64
	PrivateData [SIDRReqPrivateLen]byte
}

// SIDRRep answers a SIDR_REQ (IBA table 120).
type SIDRRep struct {
	RequestID   uint32
	Status      uint8
	InfoLength  uint8
	QPN         uint32 // 24 bits
	ServiceID   uint64
	QKey        uint32
	Info        [SIDRRepInfoLen]byte
	PrivateData [SIDRRepPrivateLen]byte
}

// Msg is one of the message types above.
type Msg interface {
	attrID() uint16
	put(b []byte) // b is the message area (after the header), zeroed
	get(b []byte)
}

func (*REQ) attrID() uint16     { return AttrREQ }
func (*MRA) attrID() uint16     { return AttrMRA }
func (*REJ) attrID() uint16     { return AttrREJ }
func (*REP) attrID() uint16     { return AttrREP }
func (*RTU) attrID() uint16     { return AttrRTU }
func (*DREQ) attrID() uint16    { return AttrDREQ }
func (*DREP) attrID() uint16    { return AttrDREP }
func (*SIDRReq) attrID() uint16 { return AttrSIDRReq }
func (*SIDRRep) attrID() uint16 { return AttrSIDRRep }

// AttrName names an attribute ID (for counters and errors).
func AttrName(id uint16) string {
	switch id {
	case AttrREQ:
		return "req"
	case AttrMRA:
		return "mra"
	case AttrREJ:
		return "rej"
	case AttrREP:
		return "rep"
	case AttrRTU:
		return "rtu"
	case AttrDREQ:
		return "dreq"
	case AttrDREP:
		return "drep"
	case AttrSIDRReq:
		return "sidr_req"
	case AttrSIDRRep:
		return "sidr_rep"
	case AttrLAP:
		return "lap"
	case AttrAPR:
		return "apr"
	}
	return fmt.Sprintf("attr(0x%04x)", id)
}

// Errors of Decode. Every malformed MAD is one of them, never a panic.
var (
	ErrSize      = errors.New("cm: a MAD is 256 bytes")
	ErrNotCM     = errors.New("cm: not a CM MAD (base version 1, class 0x07)")
	ErrVersion   = errors.New("cm: CM class version is not 2")
	ErrMethod    = errors.New("cm: method is not SEND")
	ErrAttribute = errors.New("cm: unknown or unsupported attribute ID")
)

// Encode builds the 256-byte MAD of m with transaction ID tid.
func Encode(tid uint64, m Msg) [MADSize]byte {
	var b [MADSize]byte
	h := Header{BaseVersion: BaseVersion, Class: ClassCM, ClassVersion: ClassVersion,
		Method: MethodSend, TID: tid, AttrID: m.attrID()}
	h.put(b[:HeaderSize])
	m.put(b[HeaderSize:])
	return b
}

// Decode parses a CM MAD. LAP and APR (path migration) are ErrAttribute:
// the agent has no alternate paths.
func Decode(b []byte) (Header, Msg, error) {
	var h Header
	if len(b) != MADSize {
		return h, nil, ErrSize
	}
	h.get(b[:HeaderSize])
	switch {
	case h.BaseVersion != BaseVersion || h.Class != ClassCM:
		return h, nil, ErrNotCM
	case h.ClassVersion != ClassVersion:
		return h, nil, ErrVersion
	case h.Method != MethodSend:
		return h, nil, ErrMethod
	}
	var m Msg
	switch h.AttrID {
	case AttrREQ:
		m = new(REQ)
	case AttrMRA:
		m = new(MRA)
	case AttrREJ:
		m = new(REJ)
	case AttrREP:
		m = new(REP)
	case AttrRTU:
		m = new(RTU)
	case AttrDREQ:
		m = new(DREQ)
	case AttrDREP:
		m = new(DREP)
	case AttrSIDRReq:
		m = new(SIDRReq)
	case AttrSIDRRep:
		m = new(SIDRRep)
	default:
		return h, nil, ErrAttribute
	}
	m.get(b[HeaderSize:])
	return h, m, nil
}

var be = binary.BigEndian

func (h *Header) put(b []byte) {
	b[0], b[1], b[2], b[3] = h.BaseVersion, h.Class, h.ClassVersion, h.Method
	be.PutUint16(b[4:], h.Status)
	be.PutUint16(b[6:], h.ClassSpecific)
	be.PutUint64(b[8:], h.TID)
	be.PutUint16(b[16:], h.AttrID)
	be.PutUint32(b[20:], h.AttrMod)
}

func (h *Header) get(b []byte) {
	h.BaseVersion, h.Class, h.ClassVersion, h.Method = b[0], b[1], b[2], b[3]
	h.Status = be.Uint16(b[4:])
	h.ClassSpecific = be.Uint16(b[6:])
	h.TID = be.Uint64(b[8:])
	h.AttrID = be.Uint16(b[16:])
	h.AttrMod = be.Uint32(b[20:])
}

// put24 writes the low 24 bits of v into b[0:3] (a 24-bit field in the
// high bits of its word; the byte after it is another field).
func put24(b []byte, v uint32) { b[0], b[1], b[2] = byte(v>>16), byte(v>>8), byte(v) }
func get24(b []byte) uint32    { return uint32(b[0])<<16 | uint32(b[1])<<8 | uint32(b[2]) }

func bit(v bool, shift uint) byte {
	if v {
		return 1 << shift
	}
	return 0
}

func (p *Path) put(b []byte) {
	be.PutUint16(b[0:], p.LocalLID)
	be.PutUint16(b[2:], p.RemoteLID)
	copy(b[4:20], p.LocalGID[:])
	copy(b[20:36], p.RemoteGID[:])
	// flow label: the high 20 bits of the word at 36; rate: the low 6
	// bits of its last byte.
	be.PutUint32(b[36:], (p.FlowLabel&0xFFFFF)<<12)
	b[39] = p.PacketRate & 0x3F
	b[40] = p.TrafficClass
	b[41] = p.HopLimit
	b[42] = p.SL<<4 | bit(p.SubnetLocal, 3)
	b[43] = p.LocalACKTimeout << 3
}

func (p *Path) get(b []byte) {
	p.LocalLID = be.Uint16(b[0:])
	p.RemoteLID = be.Uint16(b[2:])
	copy(p.LocalGID[:], b[4:20])
	copy(p.RemoteGID[:], b[20:36])
	p.FlowLabel = be.Uint32(b[36:]) >> 12
	p.PacketRate = b[39] & 0x3F
	p.TrafficClass = b[40]
	p.HopLimit = b[41]
	p.SL = b[42] >> 4
	p.SubnetLocal = b[42]&0x08 != 0
	p.LocalACKTimeout = b[43] >> 3
}

func (m *REQ) put(b []byte) {
	be.PutUint32(b[0:], m.LocalCommID)
	be.PutUint64(b[8:], m.ServiceID)
	be.PutUint64(b[16:], m.LocalCAGUID)
	be.PutUint32(b[28:], m.LocalQKey)
	put24(b[32:], m.LocalQPN)
	b[35] = m.ResponderResources
	put24(b[36:], m.LocalEECN)
	b[39] = m.InitiatorDepth
	put24(b[40:], m.RemoteEECN)
	b[43] = m.RemoteCMResponseTimeout<<3 | (m.TransportType&3)<<1 | bit(m.FlowControl, 0)
	put24(b[44:], m.StartingPSN)
	b[47] = m.LocalCMResponseTimeout<<3 | m.RetryCount&7
	be.PutUint16(b[48:], m.PKey)
	b[50] = m.PathMTU<<4 | bit(m.RDCExists, 3) | m.RNRRetryCount&7
	b[51] = m.MaxCMRetries<<4 | bit(m.SRQ, 3) | m.ExtTransport&7
	m.Primary.put(b[52:96])
	m.Alternate.put(b[96:140])
	copy(b[140:], m.PrivateData[:])
}

func (m *REQ) get(b []byte) {
	m.LocalCommID = be.Uint32(b[0:])
	m.ServiceID = be.Uint64(b[8:])
	m.LocalCAGUID = be.Uint64(b[16:])
	m.LocalQKey = be.Uint32(b[28:])
	m.LocalQPN = get24(b[32:])
	m.ResponderResources = b[35]
	m.LocalEECN = get24(b[36:])
	m.InitiatorDepth = b[39]
	m.RemoteEECN = get24(b[40:])
	m.RemoteCMResponseTimeout = b[43] >> 3
	m.TransportType = b[43] >> 1 & 3
	m.FlowControl = b[43]&1 != 0
	m.StartingPSN = get24(b[44:])
	m.LocalCMResponseTimeout = b[47] >> 3
	m.RetryCount = b[47] & 7
	m.PKey = be.Uint16(b[48:])
	m.PathMTU = b[50] >> 4
	m.RDCExists = b[50]&0x08 != 0
	m.RNRRetryCount = b[50] & 7
	m.MaxCMRetries = b[51] >> 4
	m.SRQ = b[51]&0x08 != 0
	m.ExtTransport = b[51] & 7
	m.Primary.get(b[52:96])
	m.Alternate.get(b[96:140])
	copy(m.PrivateData[:], b[140:])
}

func (m *MRA) put(b []byte) {
	be.PutUint32(b[0:], m.LocalCommID)
	be.PutUint32(b[4:], m.RemoteCommID)
	b[8] = m.MessageMRAed << 6
	b[9] = m.ServiceTimeout << 3
	copy(b[10:], m.PrivateData[:])
}

func (m *MRA) get(b []byte) {
	m.LocalCommID = be.Uint32(b[0:])
	m.RemoteCommID = be.Uint32(b[4:])
	m.MessageMRAed = b[8] >> 6
	m.ServiceTimeout = b[9] >> 3
	copy(m.PrivateData[:], b[10:])
}

func (m *REJ) put(b []byte) {
	be.PutUint32(b[0:], m.LocalCommID)
	be.PutUint32(b[4:], m.RemoteCommID)
	b[8] = m.MessageRejected << 6
	b[9] = m.ARILength << 1
	be.PutUint16(b[10:], m.Reason)
	copy(b[12:84], m.ARI[:])
	copy(b[84:], m.PrivateData[:])
}

func (m *REJ) get(b []byte) {
	m.LocalCommID = be.Uint32(b[0:])
	m.RemoteCommID = be.Uint32(b[4:])
	m.MessageRejected = b[8] >> 6
	m.ARILength = b[9] >> 1
	m.Reason = be.Uint16(b[10:])
	copy(m.ARI[:], b[12:84])
	copy(m.PrivateData[:], b[84:])
}

func (m *REP) put(b []byte) {
	be.PutUint32(b[0:], m.LocalCommID)
	be.PutUint32(b[4:], m.RemoteCommID)
	be.PutUint32(b[8:], m.LocalQKey)
	put24(b[12:], m.LocalQPN)
	put24(b[16:], m.LocalEECN)
	put24(b[20:], m.StartingPSN)
	b[24] = m.ResponderResources
	b[25] = m.InitiatorDepth
	b[26] = m.TargetACKDelay<<3 | (m.FailoverAccepted&3)<<1 | bit(m.FlowControl, 0)
	b[27] = m.RNRRetryCount<<5 | bit(m.SRQ, 4)
	be.PutUint64(b[28:], m.LocalCAGUID)
	copy(b[36:], m.PrivateData[:])
}

func (m *REP) get(b []byte) {
	m.LocalCommID = be.Uint32(b[0:])
	m.RemoteCommID = be.Uint32(b[4:])
	m.LocalQKey = be.Uint32(b[8:])
	m.LocalQPN = get24(b[12:])
	m.LocalEECN = get24(b[16:])
	m.StartingPSN = get24(b[20:])
	m.ResponderResources = b[24]
	m.InitiatorDepth = b[25]
	m.TargetACKDelay = b[26] >> 3
	m.FailoverAccepted = b[26] >> 1 & 3
	m.FlowControl = b[26]&1 != 0
	m.RNRRetryCount = b[27] >> 5
	m.SRQ = b[27]&0x10 != 0
	m.LocalCAGUID = be.Uint64(b[28:])
	copy(m.PrivateData[:], b[36:])
}

func (m *RTU) put(b []byte) {
	be.PutUint32(b[0:], m.LocalCommID)
	be.PutUint32(b[4:], m.RemoteCommID)
	copy(b[8:], m.PrivateData[:])
}

func (m *RTU) get(b []byte) {
	m.LocalCommID = be.Uint32(b[0:])
	m.RemoteCommID = be.Uint32(b[4:])
	copy(m.PrivateData[:], b[8:])
}

func (m *DREQ) put(b []byte) {
	be.PutUint32(b[0:], m.LocalCommID)
	be.PutUint32(b[4:], m.RemoteCommID)
	put24(b[8:], m.RemoteQPN)
	copy(b[12:], m.PrivateData[:])
}

func (m *DREQ) get(b []byte) {
	m.LocalCommID = be.Uint32(b[0:])
	m.RemoteCommID = be.Uint32(b[4:])
	m.RemoteQPN = get24(b[8:])
	copy(m.PrivateData[:], b[12:])
}

func (m *DREP) put(b []byte) {
	be.PutUint32(b[0:], m.LocalCommID)
	be.PutUint32(b[4:], m.RemoteCommID)
	copy(b[8:], m.PrivateData[:])
}

func (m *DREP) get(b []byte) {
	m.LocalCommID = be.Uint32(b[0:])
	m.RemoteCommID = be.Uint32(b[4:])
	copy(m.PrivateData[:], b[8:])
}

func (m *SIDRReq) put(b []byte) {
	be.PutUint32(b[0:], m.RequestID)
	be.PutUint16(b[4:], m.PKey)
	be.PutUint64(b[8:], m.ServiceID)
	copy(b[16:], m.PrivateData[:])
}

func (m *SIDRReq) get(b []byte) {
	m.RequestID = be.Uint32(b[0:])
	m.PKey = be.Uint16(b[4:])
	m.ServiceID = be.Uint64(b[8:])
	copy(m.PrivateData[:], b[16:])
}

func (m *SIDRRep) put(b []byte) {
	be.PutUint32(b[0:], m.RequestID)
	b[4] = m.Status
	b[5] = m.InfoLength
	put24(b[8:], m.QPN)
	be.PutUint64(b[12:], m.ServiceID)
	be.PutUint32(b[20:], m.QKey)
	copy(b[24:96], m.Info[:])
	copy(b[96:], m.PrivateData[:])
}

func (m *SIDRRep) get(b []byte) {
	m.RequestID = be.Uint32(b[0:])
	m.Status = b[4]
	m.InfoLength = b[5]
	m.QPN = get24(b[8:])
	m.ServiceID = be.Uint64(b[12:])
	m.QKey = be.Uint32(b[20:])
	copy(m.Info[:], b[24:96])
	copy(m.PrivateData[:], b[96:])
}
