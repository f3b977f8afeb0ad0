package qp

import "fmt"

// State is a QP state (enum ibv_qp_state). The numbering is libibverbs'.
//
//	   ┌──────────────── any state ──────────────┐
//	   ▼                                          │ (modify to RESET)
//	RESET ──▶ INIT ──▶ RTR ──▶ RTS ◀──▶ SQD      │
//	           │        │       │ ▲               │
//	           └────────┴───────┼─┼─▶ ERR ◀─ SQE  │
//	                            │ └──────── SQE (device only)
//
// ERR is entered by modify from INIT, RTR, RTS, SQD, SQE and by the device
// on a fatal error; SQE only by the device. The legal moves are the table in
// transition.go.
type State uint8

const (
	StateReset State = iota
	StateInit
	StateRTR
	StateRTS
	StateSQD
	StateSQE
	StateErr
	numStates
)

var stateNames = [numStates]string{"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"}

func (s State) String() string {
	if s < numStates {
		return stateNames[s]
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// Valid reports whether s is one of the seven IB states.
func (s State) Valid() bool { return s < numStates }

// ParseState accepts the IB names in any case ("rts", "RTS").
func ParseState(s string) (State, bool) {
	for i, n := range stateNames {
		if equalFold(s, n) {
			return State(i), true
		}
	}
	return 0, false
}

// Gating predicates, after rdmavt's ib_rvt_state_ops (VERBS.md §1.3).

// CanPostRecv: receive WRs may be posted (INIT and later; in ERR they are
// flushed at once).
func (s State) CanPostRecv() bool { return s >= StateInit && s < numStates }

// CanPostSend: send WRs may be posted (RTS, SQD, SQE, ERR; in SQE/ERR they
// complete with a flush error).
func (s State) CanPostSend() bool { return s >= StateRTS && s < numStates }

// ProcessRecv: incoming requests are executed (RTR, RTS, SQD, SQE).
func (s State) ProcessRecv() bool { return s >= StateRTR && s <= StateSQE }

// ProcessSend: the requester may work on WQEs it already started (RTS, SQD).
func (s State) ProcessSend() bool { return s == StateRTS || s == StateSQD }

// ProcessNextSend: the requester may start a new WQE (RTS only).
func (s State) ProcessNextSend() bool { return s == StateRTS }

// FlushSend: send WQEs complete with WR_FLUSH_ERR (SQE, ERR).
func (s State) FlushSend() bool { return s == StateSQE || s == StateErr }

// FlushRecv: receive WQEs complete with WR_FLUSH_ERR (ERR).
func (s State) FlushRecv() bool { return s == StateErr }

// Type is a QP transport type (enum ibv_qp_type numbering).
type Type uint8

const (
	TypeRC Type = 2
	TypeUC Type = 3
	TypeUD Type = 4
	// TypeXRCSend is IBV_QPT_XRC_SEND (the IBA's XRC initiator): a
	// requester only, whose sends name the SRQ they land in.
	TypeXRCSend Type = 9
	// TypeXRCRecv is IBV_QPT_XRC_RECV (the XRC target): a responder only,
	// owned by an XRC domain, taking its receive WQEs from the XRC SRQ
	// each request names.
	TypeXRCRecv Type = 10
)

func (t Type) String() string {
	switch t {
	case TypeRC:
		return "rc"
	case TypeUC:
		return "uc"
	case TypeUD:
		return "ud"
	case TypeXRCSend:
		return "xrc_send"
	case TypeXRCRecv:
		return "xrc_recv"
	}
	return fmt.Sprintf("Type(%d)", uint8(t))
}

// Valid reports whether rdmafs implements t.
func (t Type) Valid() bool {
	return t == TypeRC || t == TypeUC || t == TypeUD || t == TypeXRCSend || t == TypeXRCRecv
}

// Reliable reports whether t is a reliable connected transport: RC and
// the two halves of XRC, which share RC's PSNs, ACKs, retries and RNR.
func (t Type) Reliable() bool { return t == TypeRC || t == TypeXRCSend || t == TypeXRCRecv }

// XRC reports whether t is one of the two XRC types.
func (t Type) XRC() bool { return t == TypeXRCSend || t == TypeXRCRecv }

// Pairs reports whether a connected QP of type t takes the packets of
// one of type u: the same connected type, or XRC's initiator and target
// (either way: the target takes the requests, the initiator the replies).
func (t Type) Pairs(u Type) bool {
	if t.XRC() && u.XRC() {
		return t != u
	}
	return t == u
}

// Types lists the QP types rdmafs implements, in numeric order: the one
// list ParseType and the C library's tables (qp/internal/ctext) follow.
func Types() []Type { return []Type{TypeRC, TypeUC, TypeUD, TypeXRCSend, TypeXRCRecv} }

// ParseType accepts rc, uc, ud, xrc_send, xrc_recv in any case.
func ParseType(s string) (Type, bool) {
	for _, t := range Types() {
		if equalFold(s, t.String()) {
			return t, true
		}
	}
	return 0, false
}

// MTU is an IB path MTU enum (enum ibv_mtu): 1=256 … 5=4096.
type MTU uint8

const (
	MTU256  MTU = 1
	MTU512  MTU = 2
	MTU1024 MTU = 3
	MTU2048 MTU = 4
	MTU4096 MTU = 5
)

// Valid reports whether m is one of the five IB MTUs.
func (m MTU) Valid() bool { return m >= MTU256 && m <= MTU4096 }

// Bytes is the payload size of the MTU (256 << (m-1)); 0 for an invalid m.
func (m MTU) Bytes() int {
	if !m.Valid() {
		return 0
	}
	return 128 << m
}

// Log2 is log2(Bytes()).
func (m MTU) Log2() uint { return uint(m) + 7 }

// MTUFromBytes maps 256..4096 to the enum.
func MTUFromBytes(n int) (MTU, bool) {
	for m := MTU256; m <= MTU4096; m++ {
		if m.Bytes() == n {
			return m, true
		}
	}
	return 0, false
}

// Access is a set of ibv_access_flags.
type Access uint32

const (
	AccessLocalWrite   Access = 1
	AccessRemoteWrite  Access = 2
	AccessRemoteRead   Access = 4
	AccessRemoteAtomic Access = 8
	AccessMWBind       Access = 16
	AccessZeroBased    Access = 32
	AccessOnDemand     Access = 64 // IBV_ACCESS_ON_DEMAND: reached through the program's address space

	// AccessRemote is every remote right.
	AccessRemote = AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic
	// AccessSupportedMR are the flags an MR may carry here.
	AccessSupportedMR = AccessLocalWrite | AccessRemote | AccessMWBind | AccessOnDemand
	// AccessSupportedQP are the flags qp_access_flags may carry.
	AccessSupportedQP = AccessLocalWrite | AccessRemote | AccessMWBind
	// AccessSupportedMW are the flags a memory window bind may carry.
	AccessSupportedMW = AccessRemote | AccessZeroBased
)

var accessNames = []flagName{
	{uint32(AccessLocalWrite), "local_write"},
	{uint32(AccessRemoteWrite), "remote_write"},
	{uint32(AccessRemoteRead), "remote_read"},
	{uint32(AccessRemoteAtomic), "remote_atomic"},
	{uint32(AccessMWBind), "mw_bind"},
	{uint32(AccessZeroBased), "zero_based"},
	{uint32(AccessOnDemand), "on_demand"},
}

func (a Access) String() string { return formatFlags(uint32(a), accessNames) }

// Writable reports whether an MR with these rights may be written by the
// device (ib_access_writable: the kernel pins such memory for writing).
func (a Access) Writable() bool {
	return a&(AccessLocalWrite|AccessRemoteWrite|AccessRemoteAtomic|AccessMWBind) != 0
}

// ParseAccess parses a comma list of access names, or a number.
func ParseAccess(s string) (Access, error) {
	v, err := parseFlags(s, accessNames)
	return Access(v), err
}

// SendFlags is a set of ibv_send_flags.
type SendFlags uint32

const (
	SendFence     SendFlags = 1
	SendSignaled  SendFlags = 2
	SendSolicited SendFlags = 4
	SendInline    SendFlags = 8

	sendFlagsKnown = SendFence | SendSignaled | SendSolicited | SendInline
)

var sendFlagNames = []flagName{
	{uint32(SendFence), "fence"},
	{uint32(SendSignaled), "signaled"},
	{uint32(SendSolicited), "solicited"},
	{uint32(SendInline), "inline"},
}

func (f SendFlags) String() string { return formatFlags(uint32(f), sendFlagNames) }

// WCFlags is a set of ibv_wc_flags.
type WCFlags uint32

const (
	WCGRH      WCFlags = 1
	WCWithImm  WCFlags = 2
	WCWithInv  WCFlags = 8
	wcFlagsAll         = WCGRH | WCWithImm | WCWithInv
)

var wcFlagNames = []flagName{
	{uint32(WCGRH), "grh"},
	{uint32(WCWithImm), "with_imm"},
	{uint32(WCWithInv), "with_inv"},
}

func (f WCFlags) String() string { return formatFlags(uint32(f), wcFlagNames) }

// WROpcode is a send work request opcode (enum ibv_wr_opcode), numbered as
// libibverbs numbers them: the ring and the C library carry the number
// itself. 10-14 (TSO, DRIVER1, the kernel's masked atomics, FLUSH) are no
// opcode of rdmafs.
type WROpcode uint8

const (
	WRRDMAWrite         WROpcode = 0
	WRRDMAWriteWithImm  WROpcode = 1
	WRSend              WROpcode = 2
	WRSendWithImm       WROpcode = 3
	WRRDMARead          WROpcode = 4
	WRAtomicCmpAndSwp   WROpcode = 5
	WRAtomicFetchAndAdd WROpcode = 6
	WRLocalInv          WROpcode = 7
	WRBindMW            WROpcode = 8
	WRSendWithInv       WROpcode = 9
	// WRAtomicWrite is IBV_WR_ATOMIC_WRITE (IBA 1.5, Memory Placement
	// Extensions): 8 bytes stored at remote_addr as one atomic word.
	WRAtomicWrite WROpcode = 15
	numWROpcodes  WROpcode = 16 // size of the tables indexed by opcode
)

var wrOpcodeNames = [numWROpcodes]string{
	"rdma_write", "rdma_write_with_imm", "send", "send_with_imm", "rdma_read",
	"atomic_cmp_and_swp", "atomic_fetch_and_add", "local_inv", "bind_mw", "send_with_inv",
	WRAtomicWrite: "atomic_write",
}

// WROpcodes lists the opcodes rdmafs knows, in numeric order.
func WROpcodes() []WROpcode {
	var all []WROpcode
	for o, n := range wrOpcodeNames {
		if n != "" {
			all = append(all, WROpcode(o))
		}
	}
	return all
}

func (o WROpcode) String() string {
	if o.Valid() {
		return wrOpcodeNames[o]
	}
	return fmt.Sprintf("WROpcode(%d)", uint8(o))
}

// Valid reports whether o is an opcode rdmafs knows.
func (o WROpcode) Valid() bool { return o < numWROpcodes && wrOpcodeNames[o] != "" }

// ParseWROpcode maps the lower-case name to the opcode.
func ParseWROpcode(s string) (WROpcode, bool) {
	for i, n := range wrOpcodeNames {
		if n != "" && equalFold(s, n) {
			return WROpcode(i), true
		}
	}
	return 0, false
}

// WCOpcode is a completion opcode (enum ibv_wc_opcode).
type WCOpcode uint8

const (
	WCSend            WCOpcode = 0
	WCRDMAWrite       WCOpcode = 1
	WCRDMARead        WCOpcode = 2
	WCCompSwap        WCOpcode = 3
	WCFetchAdd        WCOpcode = 4
	WCBindMW          WCOpcode = 5
	WCLocalInv        WCOpcode = 6
	WCAtomicWrite     WCOpcode = 9 // IBV_WC_ATOMIC_WRITE (7 and 8 are TSO and FLUSH)
	WCRecv            WCOpcode = 128
	WCRecvRDMAWithImm WCOpcode = 129
)

var wcOpcodeNames = map[WCOpcode]string{
	WCSend: "send", WCRDMAWrite: "rdma_write", WCRDMARead: "rdma_read",
	WCCompSwap: "comp_swap", WCFetchAdd: "fetch_add", WCBindMW: "bind_mw",
	WCLocalInv: "local_inv", WCAtomicWrite: "atomic_write", WCRecv: "recv", WCRecvRDMAWithImm: "recv_rdma_with_imm",
}

func (o WCOpcode) String() string {
	if n, ok := wcOpcodeNames[o]; ok {
		return n
	}
	return fmt.Sprintf("WCOpcode(%d)", uint8(o))
}

// ParseWCOpcode maps the lower-case name to the opcode.
func ParseWCOpcode(s string) (WCOpcode, bool) {
	for o, n := range wcOpcodeNames {
		if equalFold(s, n) {
			return o, true
		}
	}
	return 0, false
}

// WCStatus is a completion status (enum ibv_wc_status).
type WCStatus uint8

const (
	WCSuccess WCStatus = iota
	WCLocLenErr
	WCLocQPOpErr
	WCLocEECOpErr
	WCLocProtErr
	WCWRFlushErr
	WCMWBindErr
	WCBadRespErr
	WCLocAccessErr
	WCRemInvReqErr
	WCRemAccessErr
	WCRemOpErr
	WCRetryExcErr
	WCRNRRetryExcErr
	WCLocRDDViolErr
	WCRemInvRDReqErr
	WCRemAbortErr
	WCInvEECNErr
	WCInvEECStateErr
	WCFatalErr
	WCRespTimeoutErr
	WCGeneralErr
	numWCStatus
)

var wcStatusNames = [numWCStatus]string{
	"success", "loc_len_err", "loc_qp_op_err", "loc_eec_op_err", "loc_prot_err",
	"wr_flush_err", "mw_bind_err", "bad_resp_err", "loc_access_err", "rem_inv_req_err",
	"rem_access_err", "rem_op_err", "retry_exc_err", "rnr_retry_exc_err",
	"loc_rdd_viol_err", "rem_inv_rd_req_err", "rem_abort_err", "inv_eecn_err",
	"inv_eec_state_err", "fatal_err", "resp_timeout_err", "general_err",
}

func (s WCStatus) String() string {
	if s < numWCStatus {
		return wcStatusNames[s]
	}
	return fmt.Sprintf("WCStatus(%d)", uint8(s))
}

// ParseWCStatus maps the lower-case name to the status.
func ParseWCStatus(s string) (WCStatus, bool) {
	for i, n := range wcStatusNames {
		if equalFold(s, n) {
			return WCStatus(i), true
		}
	}
	return 0, false
}

// MigState is ibv_mig_state.
type MigState uint8

const (
	MigMigrated MigState = 0
	MigRearm    MigState = 1
	MigArmed    MigState = 2
)

// String is the name attr and modify use: migrated, rearm or armed.
func (m MigState) String() string {
	if int(m) < len(textMigNames) {
		return textMigNames[m]
	}
	return fmt.Sprintf("MigState(%d)", uint8(m))
}

// SGE is one scatter/gather element (ibv_sge); Addr is in the MR's iova space.
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}

// SendWR is one send work request (ibv_send_wr without the list link).
type SendWR struct {
	WRID      uint64
	Opcode    WROpcode
	SendFlags SendFlags
	SGL       []SGE
	// ImmData is imm_data for *_WITH_IMM (host order, as ibv_send_wr carries
	// it in network order; the text and the ring both use the numeric value).
	ImmData uint32
	// InvalidateRKey is the rkey SEND_WITH_INV and LOCAL_INV invalidate.
	InvalidateRKey uint32
	// RDMA and atomic remote side.
	RemoteAddr uint64
	RKey       uint32
	CompareAdd uint64
	Swap       uint64
	// UD addressing. On an XRC_SEND QP RemoteQPN is instead the number of
	// the remote XRC SRQ the message is for (ibv_send_wr's
	// qp_type.xrc.remote_srqn; text remote_srqn=N): the two never meet on
	// one QP, and the ring's WQE keeps one field for both.
	AH         uint32
	RemoteQPN  uint32
	RemoteQKey uint32
	// InlineData is sent instead of the SGL when SendInline is set.
	InlineData []byte
	// BindMW: MW handle, the new rkey, and the window (MR lkey, address,
	// length, access). Tokens mw=, rkey=, bind_lkey=, bind_addr=,
	// bind_length=, bind_access=.
	MW         uint32
	BindLKey   uint32
	BindAddr   uint64
	BindLength uint64
	BindAccess Access
}

// RecvWR is one receive work request (ibv_recv_wr).
type RecvWR struct {
	WRID uint64
	SGL  []SGE
}

// WC is one work completion (ibv_wc).
type WC struct {
	WRID      uint64
	Status    WCStatus
	Opcode    WCOpcode
	VendorErr uint32
	ByteLen   uint32
	// ImmData holds imm_data (WITH_IMM) or the invalidated rkey (WITH_INV).
	ImmData      uint32
	QPNum        uint32
	SrcQP        uint32
	WCFlags      WCFlags
	PKeyIndex    uint16
	SLID         uint16
	SL           uint8
	DLIDPathBits uint8
	// CompletionTS is the device clock (hca_core_clock kHz ticks) when the
	// completion was made, and CompletionWallclockNS the wall-clock time
	// then (ns since the Unix epoch); each is 0 unless the CQ was created
	// with its wc_flags bit (CQTimestamp, CQTimestampWallclock).
	CompletionTS          uint64
	CompletionWallclockNS uint64
}

// AttrMask is a set of ibv_qp_attr_mask bits.
type AttrMask uint32

const (
	MaskState            AttrMask = 1 << 0
	MaskCurState         AttrMask = 1 << 1
	MaskEnSQDAsyncNotify AttrMask = 1 << 2
	MaskAccessFlags      AttrMask = 1 << 3
	MaskPKeyIndex        AttrMask = 1 << 4
	MaskPort             AttrMask = 1 << 5
	MaskQKey             AttrMask = 1 << 6
	MaskAV               AttrMask = 1 << 7
	MaskPathMTU          AttrMask = 1 << 8
	MaskTimeout          AttrMask = 1 << 9
	MaskRetryCnt         AttrMask = 1 << 10
	MaskRNRRetry         AttrMask = 1 << 11
	MaskRQPSN            AttrMask = 1 << 12
	MaskMaxQPRdAtomic    AttrMask = 1 << 13
	MaskAltPath          AttrMask = 1 << 14
	MaskMinRNRTimer      AttrMask = 1 << 15
	MaskSQPSN            AttrMask = 1 << 16
	MaskMaxDestRdAtomic  AttrMask = 1 << 17
	MaskPathMigState     AttrMask = 1 << 18
	MaskCap              AttrMask = 1 << 19
	MaskDestQPN          AttrMask = 1 << 20
	MaskRateLimit        AttrMask = 1 << 25
)

// Cap is the QP capacity (ibv_qp_cap).
type Cap struct {
	MaxSendWR     uint32
	MaxRecvWR     uint32
	MaxSendSGE    uint32
	MaxRecvSGE    uint32
	MaxInlineData uint32
}

// AH is an address vector (the parts of ibv_ah_attr rdmafs uses). DGID is a
// 16-byte GID; on one device any GID equal to the port's reaches the device
// itself.
type AH struct {
	DGID         [16]byte
	SGIDIndex    uint8
	HopLimit     uint8
	TrafficClass uint8
	FlowLabel    uint32
	SL           uint8
	DLID         uint16
	PortNum      uint8
	StaticRate   uint8
}

// Attr is ibv_qp_attr. Only the fields named by an AttrMask are meaningful
// in a modify.
type Attr struct {
	QPState          State
	CurQPState       State
	PathMTU          MTU
	PathMigState     MigState
	QKey             uint32
	RQPSN            PSN
	SQPSN            PSN
	DestQPNum        uint32
	QPAccessFlags    Access
	Cap              Cap
	AH               AH
	AltAH            AH
	PKeyIndex        uint16
	AltPKeyIndex     uint16
	EnSQDAsyncNotify bool
	SQDraining       bool
	MaxRdAtomic      uint8
	MaxDestRdAtomic  uint8
	MinRNRTimer      uint8
	PortNum          uint8
	Timeout          uint8
	RetryCnt         uint8
	RNRRetry         uint8
	AltPortNum       uint8
	AltTimeout       uint8
	RateLimit        uint32
}
