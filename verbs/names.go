package verbs

import "rdmafs/qp"

// The verbs vocabulary is qp's: these aliases and constants are the very
// types the daemon uses, under names an RDMA programmer knows from
// libibverbs (ibv_wc → WC, IBV_WC_SUCCESS → WCSuccess, IBV_QPS_RTS →
// StateRTS, IBV_QPT_RC → QPTypeRC, ...).

type (
	// SGE is ibv_sge; Addr is in the MR's iova space (see MR.SGE).
	SGE = qp.SGE
	// SendWR is ibv_send_wr without the list link: PostSend takes a slice.
	SendWR = qp.SendWR
	// RecvWR is ibv_recv_wr.
	RecvWR = qp.RecvWR
	// WC is ibv_wc.
	WC = qp.WC
	// QPAttr is ibv_qp_attr.
	QPAttr = qp.Attr
	// AttrMask is ibv_qp_attr_mask.
	AttrMask = qp.AttrMask
	// QPCap is ibv_qp_cap.
	QPCap = qp.Cap
	// AHAttr is the address vector of ibv_ah_attr (with its GRH fields).
	AHAttr = qp.AH
	// QPState is ibv_qp_state.
	QPState = qp.State
	// QPType is ibv_qp_type.
	QPType = qp.Type
	// MTU is ibv_mtu.
	MTU = qp.MTU
	// Access is ibv_access_flags.
	Access = qp.Access
	// SendFlags is ibv_send_flags.
	SendFlags = qp.SendFlags
	// WCFlags is ibv_wc_flags.
	WCFlags = qp.WCFlags
	// WROpcode is ibv_wr_opcode.
	WROpcode = qp.WROpcode
	// WCOpcode is ibv_wc_opcode.
	WCOpcode = qp.WCOpcode
	// WCStatus is ibv_wc_status.
	WCStatus = qp.WCStatus
	// MigState is ibv_mig_state.
	MigState = qp.MigState
	// PSN is a 24-bit packet sequence number.
	PSN = qp.PSN
)

// QP states (IBV_QPS_*).
const (
	StateReset = qp.StateReset
	StateInit  = qp.StateInit
	StateRTR   = qp.StateRTR
	StateRTS   = qp.StateRTS
	StateSQD   = qp.StateSQD
	StateSQE   = qp.StateSQE
	StateErr   = qp.StateErr
)

// QP types (IBV_QPT_*).
const (
	QPTypeRC      = qp.TypeRC
	QPTypeUC      = qp.TypeUC
	QPTypeUD      = qp.TypeUD
	QPTypeXRCSend = qp.TypeXRCSend // a requester whose sends name a remote XRC SRQ (xrc.go)
	QPTypeXRCRecv = qp.TypeXRCRecv // a responder of an XRC domain (XRCD.CreateQP, XRCD.OpenQP)
)

// Path MTUs (IBV_MTU_*).
const (
	MTU256  = qp.MTU256
	MTU512  = qp.MTU512
	MTU1024 = qp.MTU1024
	MTU2048 = qp.MTU2048
	MTU4096 = qp.MTU4096
)

// Access flags (IBV_ACCESS_*).
const (
	AccessLocalWrite   = qp.AccessLocalWrite
	AccessRemoteWrite  = qp.AccessRemoteWrite
	AccessRemoteRead   = qp.AccessRemoteRead
	AccessRemoteAtomic = qp.AccessRemoteAtomic
	AccessMWBind       = qp.AccessMWBind
	AccessZeroBased    = qp.AccessZeroBased
	AccessOnDemand     = qp.AccessOnDemand
)

// Send flags (IBV_SEND_*).
const (
	SendFence     = qp.SendFence
	SendSignaled  = qp.SendSignaled
	SendSolicited = qp.SendSolicited
	SendInline    = qp.SendInline
)

// Completion flags (IBV_WC_GRH, IBV_WC_WITH_IMM, IBV_WC_WITH_INV).
const (
	WCGRH     = qp.WCGRH
	WCWithImm = qp.WCWithImm
	WCWithInv = qp.WCWithInv
)

// Work request opcodes (IBV_WR_*).
const (
	WRRDMAWrite         = qp.WRRDMAWrite
	WRRDMAWriteWithImm  = qp.WRRDMAWriteWithImm
	WRSend              = qp.WRSend
	WRSendWithImm       = qp.WRSendWithImm
	WRRDMARead          = qp.WRRDMARead
	WRAtomicCmpAndSwp   = qp.WRAtomicCmpAndSwp
	WRAtomicFetchAndAdd = qp.WRAtomicFetchAndAdd
	WRLocalInv          = qp.WRLocalInv
	WRBindMW            = qp.WRBindMW
	WRSendWithInv       = qp.WRSendWithInv
	WRAtomicWrite       = qp.WRAtomicWrite // 8 bytes in CompareAdd, no SGL
)

// Completion opcodes (IBV_WC_SEND, IBV_WC_RECV, ...).
const (
	WCSend            = qp.WCSend
	WCRDMAWrite       = qp.WCRDMAWrite
	WCRDMARead        = qp.WCRDMARead
	WCCompSwap        = qp.WCCompSwap
	WCFetchAdd        = qp.WCFetchAdd
	WCBindMW          = qp.WCBindMW
	WCLocalInv        = qp.WCLocalInv
	WCAtomicWrite     = qp.WCAtomicWrite
	WCRecv            = qp.WCRecv
	WCRecvRDMAWithImm = qp.WCRecvRDMAWithImm
)

// Completion statuses (IBV_WC_*).
const (
	WCSuccess        = qp.WCSuccess
	WCLocLenErr      = qp.WCLocLenErr
	WCLocQPOpErr     = qp.WCLocQPOpErr
	WCLocEECOpErr    = qp.WCLocEECOpErr
	WCLocProtErr     = qp.WCLocProtErr
	WCWRFlushErr     = qp.WCWRFlushErr
	WCMWBindErr      = qp.WCMWBindErr
	WCBadRespErr     = qp.WCBadRespErr
	WCLocAccessErr   = qp.WCLocAccessErr
	WCRemInvReqErr   = qp.WCRemInvReqErr
	WCRemAccessErr   = qp.WCRemAccessErr
	WCRemOpErr       = qp.WCRemOpErr
	WCRetryExcErr    = qp.WCRetryExcErr
	WCRNRRetryExcErr = qp.WCRNRRetryExcErr
	WCLocRDDViolErr  = qp.WCLocRDDViolErr
	WCRemInvRDReqErr = qp.WCRemInvRDReqErr
	WCRemAbortErr    = qp.WCRemAbortErr
	WCInvEECNErr     = qp.WCInvEECNErr
	WCInvEECStateErr = qp.WCInvEECStateErr
	WCFatalErr       = qp.WCFatalErr
	WCRespTimeoutErr = qp.WCRespTimeoutErr
	WCGeneralErr     = qp.WCGeneralErr
)

// Attribute mask bits (IBV_QP_*).
const (
	QPAttrState            = qp.MaskState
	QPAttrCurState         = qp.MaskCurState
	QPAttrEnSQDAsyncNotify = qp.MaskEnSQDAsyncNotify
	QPAttrAccessFlags      = qp.MaskAccessFlags
	QPAttrPKeyIndex        = qp.MaskPKeyIndex
	QPAttrPort             = qp.MaskPort
	QPAttrQKey             = qp.MaskQKey
	QPAttrAV               = qp.MaskAV
	QPAttrPathMTU          = qp.MaskPathMTU
	QPAttrTimeout          = qp.MaskTimeout
	QPAttrRetryCnt         = qp.MaskRetryCnt
	QPAttrRNRRetry         = qp.MaskRNRRetry
	QPAttrRQPSN            = qp.MaskRQPSN
	QPAttrMaxQPRdAtomic    = qp.MaskMaxQPRdAtomic
	QPAttrAltPath          = qp.MaskAltPath
	QPAttrMinRNRTimer      = qp.MaskMinRNRTimer
	QPAttrSQPSN            = qp.MaskSQPSN
	QPAttrMaxDestRdAtomic  = qp.MaskMaxDestRdAtomic
	QPAttrPathMigState     = qp.MaskPathMigState
	QPAttrCap              = qp.MaskCap
	QPAttrDestQPN          = qp.MaskDestQPN
	QPAttrRateLimit        = qp.MaskRateLimit
)

// ParseGID parses a GID written as an IPv6 (or IPv4) address.
func ParseGID(s string) ([16]byte, error) { return qp.ParseGID(s) }

// FormatGID prints a GID as an IPv6 address.
func FormatGID(g [16]byte) string { return qp.FormatGID(g) }
