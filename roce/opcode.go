package roce

import "fmt"

// Opcode is the BTH OpCode byte: the transport in bits 7:5 and the
// operation in bits 4:0 (VERBS.md §8.3).
type Opcode uint8

// Transports (bits 7:5 of the opcode).
const (
	TransportRC   Opcode = 0x00
	TransportUC   Opcode = 0x20
	TransportRD   Opcode = 0x40 // not supported: ParseIB rejects it
	TransportUD   Opcode = 0x60
	TransportXRC  Opcode = 0xA0 // IBA 9.2: requests carry an XRCETH after the BTH
	TransportMask Opcode = 0xE0
	OpMask        Opcode = 0x1F
)

// Operations (bits 4:0 of the opcode). OR one with a transport to get an
// opcode; the full opcodes that exist are listed below.
const (
	OpSendFirst          Opcode = 0x00
	OpSendMiddle         Opcode = 0x01
	OpSendLast           Opcode = 0x02
	OpSendLastImm        Opcode = 0x03
	OpSendOnly           Opcode = 0x04
	OpSendOnlyImm        Opcode = 0x05
	OpWriteFirst         Opcode = 0x06
	OpWriteMiddle        Opcode = 0x07
	OpWriteLast          Opcode = 0x08
	OpWriteLastImm       Opcode = 0x09
	OpWriteOnly          Opcode = 0x0A
	OpWriteOnlyImm       Opcode = 0x0B
	OpReadRequest        Opcode = 0x0C
	OpReadResponseFirst  Opcode = 0x0D
	OpReadResponseMiddle Opcode = 0x0E
	OpReadResponseLast   Opcode = 0x0F
	OpReadResponseOnly   Opcode = 0x10
	OpAcknowledge        Opcode = 0x11
	OpAtomicAcknowledge  Opcode = 0x12
	OpCompareSwap        Opcode = 0x13
	OpFetchAdd           Opcode = 0x14
	OpSendLastInv        Opcode = 0x16
	OpSendOnlyInv        Opcode = 0x17
	OpFlush              Opcode = 0x1C
	OpAtomicWrite        Opcode = 0x1D
)

// Full opcodes.
const (
	RCSendFirst          = TransportRC | OpSendFirst
	RCSendMiddle         = TransportRC | OpSendMiddle
	RCSendLast           = TransportRC | OpSendLast
	RCSendLastImm        = TransportRC | OpSendLastImm
	RCSendOnly           = TransportRC | OpSendOnly
	RCSendOnlyImm        = TransportRC | OpSendOnlyImm
	RCWriteFirst         = TransportRC | OpWriteFirst
	RCWriteMiddle        = TransportRC | OpWriteMiddle
	RCWriteLast          = TransportRC | OpWriteLast
	RCWriteLastImm       = TransportRC | OpWriteLastImm
	RCWriteOnly          = TransportRC | OpWriteOnly
	RCWriteOnlyImm       = TransportRC | OpWriteOnlyImm
	RCReadRequest        = TransportRC | OpReadRequest
	RCReadResponseFirst  = TransportRC | OpReadResponseFirst
	RCReadResponseMiddle = TransportRC | OpReadResponseMiddle
	RCReadResponseLast   = TransportRC | OpReadResponseLast
	RCReadResponseOnly   = TransportRC | OpReadResponseOnly
	RCAcknowledge        = TransportRC | OpAcknowledge
	RCAtomicAcknowledge  = TransportRC | OpAtomicAcknowledge
	RCCompareSwap        = TransportRC | OpCompareSwap
	RCFetchAdd           = TransportRC | OpFetchAdd
	RCSendLastInv        = TransportRC | OpSendLastInv
	RCSendOnlyInv        = TransportRC | OpSendOnlyInv
	RCFlush              = TransportRC | OpFlush
	RCAtomicWrite        = TransportRC | OpAtomicWrite

	UCSendFirst    = TransportUC | OpSendFirst
	UCSendMiddle   = TransportUC | OpSendMiddle
	UCSendLast     = TransportUC | OpSendLast
	UCSendLastImm  = TransportUC | OpSendLastImm
	UCSendOnly     = TransportUC | OpSendOnly
	UCSendOnlyImm  = TransportUC | OpSendOnlyImm
	UCWriteFirst   = TransportUC | OpWriteFirst
	UCWriteMiddle  = TransportUC | OpWriteMiddle
	UCWriteLast    = TransportUC | OpWriteLast
	UCWriteLastImm = TransportUC | OpWriteLastImm
	UCWriteOnly    = TransportUC | OpWriteOnly
	UCWriteOnlyImm = TransportUC | OpWriteOnlyImm
	UDSendOnly     = TransportUD | OpSendOnly
	UDSendOnlyImm  = TransportUD | OpSendOnlyImm

	XRCSendFirst          = TransportXRC | OpSendFirst
	XRCSendMiddle         = TransportXRC | OpSendMiddle
	XRCSendLast           = TransportXRC | OpSendLast
	XRCSendLastImm        = TransportXRC | OpSendLastImm
	XRCSendOnly           = TransportXRC | OpSendOnly
	XRCSendOnlyImm        = TransportXRC | OpSendOnlyImm
	XRCWriteFirst         = TransportXRC | OpWriteFirst
	XRCWriteMiddle        = TransportXRC | OpWriteMiddle
	XRCWriteLast          = TransportXRC | OpWriteLast
	XRCWriteLastImm       = TransportXRC | OpWriteLastImm
	XRCWriteOnly          = TransportXRC | OpWriteOnly
	XRCWriteOnlyImm       = TransportXRC | OpWriteOnlyImm
	XRCReadRequest        = TransportXRC | OpReadRequest
	XRCReadResponseFirst  = TransportXRC | OpReadResponseFirst
	XRCReadResponseMiddle = TransportXRC | OpReadResponseMiddle
	XRCReadResponseLast   = TransportXRC | OpReadResponseLast
	XRCReadResponseOnly   = TransportXRC | OpReadResponseOnly
	XRCAcknowledge        = TransportXRC | OpAcknowledge
	XRCAtomicAcknowledge  = TransportXRC | OpAtomicAcknowledge
	XRCCompareSwap        = TransportXRC | OpCompareSwap
	XRCFetchAdd           = TransportXRC | OpFetchAdd
	XRCSendLastInv        = TransportXRC | OpSendLastInv
	XRCSendOnlyInv        = TransportXRC | OpSendOnlyInv
)

const opcodeCount = 256

// Header sizes in bytes (VERBS.md §8.2, §8.4).
const (
	BTHLen          = 12
	RETHLen         = 16
	AETHLen         = 4
	AtomicETHLen    = 28
	AtomicAckETHLen = 8
	ImmDtLen        = 4
	IETHLen         = 4
	DETHLen         = 8
	FETHLen         = 4
	XRCETHLen       = 4
	ICRCLen         = 4

	// MaxHeaderLen is the longest BTH plus extension headers of any
	// opcode (XRC's COMPARE_SWAP and FETCH_ADD: BTH + XRCETH + AtomicETH).
	MaxHeaderLen = BTHLen + XRCETHLen + AtomicETHLen

	// UDPPort is the RoCEv2 UDP destination port.
	UDPPort = 4791
)

// Headers is a set of extension headers.
type Headers uint16

// The extension headers. An opcode's headers follow the BTH in the order
// XRCETH, DETH, FETH, RETH, AtomicETH, AETH, AtomicAckETH, ImmDt, IETH
// (each opcode has at most four of them).
const (
	HdrDETH Headers = 1 << iota
	HdrFETH
	HdrRETH
	HdrAtomicETH
	HdrAETH
	HdrAtomicAckETH
	HdrImmDt
	HdrIETH
	// HdrXRCETH is the XRC extended transport header (IBA 9.3.7): 8
	// reserved bits and the 24-bit number of the XRC SRQ the request is
	// for, right after the BTH of every XRC request.
	HdrXRCETH
)

// Class says what an opcode means to a transport engine, as rxe's opcode
// masks do: whether it is a request or a response, where in a message it
// stands, what it does, and what it carries (the headers and the payload
// of the same table, as flags).
type Class uint32

const (
	ClassRequest Class = 1 << iota
	ClassResponse
	ClassFirst
	ClassMiddle
	ClassLast
	ClassSend
	ClassWrite
	ClassRead
	ClassAtomic      // COMPARE_SWAP, FETCH_ADD and their acknowledgement
	ClassAtomicWrite // ATOMIC WRITE: 8 bytes stored as one word
	ClassFlush
	ClassRecvWQE // takes a receive WQE at the responder
	ClassImm     // ImmDt
	ClassInv     // IETH
	ClassRETH
	ClassAETH
	ClassPayload

	// ClassOnly is a message of one packet.
	ClassOnly = ClassFirst | ClassLast
)

// opInfo is one row of the opcode table.
type opInfo struct {
	name    string
	hdrs    Headers
	hlen    uint8 // BTH + extension headers
	payload bool  // may carry a payload
	class   Class
}

var opTable [opcodeCount]opInfo

func init() {
	type row struct {
		op      Opcode
		name    string
		hdrs    Headers
		payload bool
		class   Class
	}
	const (
		req, resp         = ClassRequest, ClassResponse
		first, mid, last  = ClassFirst, ClassMiddle, ClassLast
		only              = ClassOnly
		send, write, read = ClassSend, ClassWrite, ClassRead
		rwqe              = ClassRecvWQE
	)
	rows := []row{
		{OpSendFirst, "SEND_FIRST", 0, true, req | send | first | rwqe},
		{OpSendMiddle, "SEND_MIDDLE", 0, true, req | send | mid},
		{OpSendLast, "SEND_LAST", 0, true, req | send | last},
		{OpSendLastImm, "SEND_LAST_WITH_IMMEDIATE", HdrImmDt, true, req | send | last},
		{OpSendOnly, "SEND_ONLY", 0, true, req | send | only | rwqe},
		{OpSendOnlyImm, "SEND_ONLY_WITH_IMMEDIATE", HdrImmDt, true, req | send | only | rwqe},
		{OpWriteFirst, "RDMA_WRITE_FIRST", HdrRETH, true, req | write | first},
		{OpWriteMiddle, "RDMA_WRITE_MIDDLE", 0, true, req | write | mid},
		{OpWriteLast, "RDMA_WRITE_LAST", 0, true, req | write | last},
		{OpWriteLastImm, "RDMA_WRITE_LAST_WITH_IMMEDIATE", HdrImmDt, true, req | write | last | rwqe},
		{OpWriteOnly, "RDMA_WRITE_ONLY", HdrRETH, true, req | write | only},
		{OpWriteOnlyImm, "RDMA_WRITE_ONLY_WITH_IMMEDIATE", HdrRETH | HdrImmDt, true, req | write | only | rwqe},
		{OpReadRequest, "RDMA_READ_REQUEST", HdrRETH, false, req | read | only},
		{OpReadResponseFirst, "RDMA_READ_RESPONSE_FIRST", HdrAETH, true, resp | read | first},
		{OpReadResponseMiddle, "RDMA_READ_RESPONSE_MIDDLE", 0, true, resp | read | mid},
		{OpReadResponseLast, "RDMA_READ_RESPONSE_LAST", HdrAETH, true, resp | read | last},
		{OpReadResponseOnly, "RDMA_READ_RESPONSE_ONLY", HdrAETH, true, resp | read | only},
		{OpAcknowledge, "ACKNOWLEDGE", HdrAETH, false, resp | only},
		{OpAtomicAcknowledge, "ATOMIC_ACKNOWLEDGE", HdrAETH | HdrAtomicAckETH, false, resp | ClassAtomic | only},
		{OpCompareSwap, "COMPARE_SWAP", HdrAtomicETH, false, req | ClassAtomic | only},
		{OpFetchAdd, "FETCH_ADD", HdrAtomicETH, false, req | ClassAtomic | only},
		{OpSendLastInv, "SEND_LAST_WITH_INVALIDATE", HdrIETH, true, req | send | last},
		{OpSendOnlyInv, "SEND_ONLY_WITH_INVALIDATE", HdrIETH, true, req | send | only | rwqe},
		{OpFlush, "FLUSH", HdrFETH | HdrRETH, false, req | ClassFlush | only},
		{OpAtomicWrite, "ATOMIC_WRITE", HdrRETH, true, req | ClassAtomicWrite | only},
	}
	ucOps := map[Opcode]bool{
		OpSendFirst: true, OpSendMiddle: true, OpSendLast: true, OpSendLastImm: true,
		OpSendOnly: true, OpSendOnlyImm: true, OpWriteFirst: true, OpWriteMiddle: true,
		OpWriteLast: true, OpWriteLastImm: true, OpWriteOnly: true, OpWriteOnlyImm: true,
	}
	add := func(op Opcode, name string, hdrs Headers, payload bool, class Class) {
		for _, x := range [...]struct {
			h Headers
			c Class
		}{{HdrImmDt, ClassImm}, {HdrIETH, ClassInv}, {HdrRETH, ClassRETH}, {HdrAETH, ClassAETH}} {
			if hdrs&x.h != 0 {
				class |= x.c
			}
		}
		if payload {
			class |= ClassPayload
		}
		opTable[op] = opInfo{name: name, hdrs: hdrs, hlen: uint8(BTHLen + hdrs.Len()), payload: payload, class: class}
	}
	for _, r := range rows {
		add(TransportRC|r.op, "RC_"+r.name, r.hdrs, r.payload, r.class)
		if ucOps[r.op] {
			add(TransportUC|r.op, "UC_"+r.name, r.hdrs, r.payload, r.class)
		}
		if r.op == OpSendOnly || r.op == OpSendOnlyImm {
			add(TransportUD|r.op, "UD_"+r.name, HdrDETH|r.hdrs, r.payload, r.class)
		}
		// XRC has RC's operations but FLUSH and ATOMIC WRITE (IBA
		// 1.5's, which rdmafs offers on RC only); its requests carry
		// the XRCETH, its responses do not.
		if r.op != OpFlush && r.op != OpAtomicWrite {
			h := r.hdrs
			if r.class&req != 0 {
				h |= HdrXRCETH
			}
			add(TransportXRC|r.op, "XRC_"+r.name, h, r.payload, r.class)
		}
	}
}

// Len is the total size in bytes of the headers in h.
func (h Headers) Len() int {
	n := 0
	for _, x := range [...]struct {
		h Headers
		n int
	}{
		{HdrXRCETH, XRCETHLen}, {HdrDETH, DETHLen}, {HdrFETH, FETHLen}, {HdrRETH, RETHLen}, {HdrAtomicETH, AtomicETHLen},
		{HdrAETH, AETHLen}, {HdrAtomicAckETH, AtomicAckETHLen}, {HdrImmDt, ImmDtLen}, {HdrIETH, IETHLen},
	} {
		if h&x.h != 0 {
			n += x.n
		}
	}
	return n
}

// Valid reports whether o is an opcode this package encodes and decodes:
// the RC, UC, UD and XRC opcodes of VERBS.md §8.3. RD and CNP are not.
func (o Opcode) Valid() bool { return opTable[o].hlen != 0 }

// Transport returns the transport bits of o (TransportRC, TransportUC, ...).
func (o Opcode) Transport() Opcode { return o & TransportMask }

// Op returns the operation bits of o.
func (o Opcode) Op() Opcode { return o & OpMask }

// Headers returns the extension headers o carries after the BTH; false if o
// is not valid.
func (o Opcode) Headers() (Headers, bool) {
	r := &opTable[o]
	return r.hdrs, r.hlen != 0
}

// Class returns what o is to a transport engine (0 if o is not valid).
func (o Opcode) Class() Class { return opTable[o].class }

// HasPayload reports whether packets with opcode o may carry a payload.
func (o Opcode) HasPayload() bool { return opTable[o].payload }

// String returns the IBA name, e.g. "RC_SEND_ONLY", or "OPCODE_0x42".
func (o Opcode) String() string {
	if n := opTable[o].name; n != "" {
		return n
	}
	return fmt.Sprintf("OPCODE_0x%02x", uint8(o))
}

// HeaderLen returns the length of the BTH plus the extension headers of
// opcode; false if the opcode is not valid.
func HeaderLen(opcode Opcode) (int, bool) {
	n := int(opTable[opcode].hlen)
	return n, n != 0
}
