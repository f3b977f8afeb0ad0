package qp

// The keys of the text protocol's lines: the create requests of */new,
// the commands of */ctl, the attr files, MOUNT/device, MOUNT/port,
// MOUNT/clock and the events file. Each is spelled here once; the parsers
// and formatters of this package use these constants, and go generate
// writes each as an RDMAFS_KEY_ macro of libibverbs/rdmafs-text.h for the
// C libraries (qp/internal/ctext), so a key is spelled once in the tree.
const (
	KeyAccess                       = "access"
	KeyActiveMTU                    = "active_mtu"
	KeyAddr                         = "addr"
	KeyArmed                        = "armed"
	KeyAtomicCap                    = "atomic_cap"
	KeyBound                        = "bound"
	KeyCompVector                   = "comp_vector"
	KeyCompletionTimestampMask      = "completion_timestamp_mask"
	KeyCQ                           = "cq"
	KeyCQE                          = "cqe"
	KeyCreate                       = "create"
	KeyCurQPState                   = "cur_qp_state"
	KeyDestQPNum                    = "dest_qp_num"
	KeyDeviceCapFlags               = "device_cap_flags"
	KeyDeviceCapFlagsEx             = "device_cap_flags_ex"
	KeyDGID                         = "dgid"
	KeyDLID                         = "dlid"
	KeyEnSQDAsyncNotify             = "en_sqd_async_notify"
	KeyEngines                      = "engines"
	KeyEvent                        = "event"
	KeyExcl                         = "excl"
	KeyFD                           = "fd"
	KeyFlowLabel                    = "flow_label"
	KeyFwVer                        = "fw_ver"
	KeyGID                          = "gid"
	KeyGIDTblLen                    = "gid_tbl_len"
	KeyHandle                       = "handle"
	KeyHCACoreClock                 = "hca_core_clock"
	KeyHopLimit                     = "hop_limit"
	KeyHwVer                        = "hw_ver"
	KeyImplicit                     = "implicit"
	KeyIOVA                         = "iova"
	KeyLength                       = "length"
	KeyLID                          = "lid"
	KeyLinkLayer                    = "link_layer"
	KeyLKey                         = "lkey"
	KeyLocalCAAckDelay              = "local_ca_ack_delay"
	KeyMaxAH                        = "max_ah"
	KeyMaxAHPerUser                 = "max_ah_per_user"
	KeyMaxCapturesPerUser           = "max_captures_per_user"
	KeyMaxCQ                        = "max_cq"
	KeyMaxCQPerUser                 = "max_cq_per_user"
	KeyMaxCQE                       = "max_cqe"
	KeyMaxDestRdAtomic              = "max_dest_rd_atomic"
	KeyMaxEventReadersPerUser       = "max_event_readers_per_user"
	KeyMaxInlineData                = "max_inline_data"
	KeyMaxMcastGrp                  = "max_mcast_grp"
	KeyMaxMcastGrpPerUser           = "max_mcast_grp_per_user"
	KeyMaxMcastQPAttach             = "max_mcast_qp_attach"
	KeyMaxMR                        = "max_mr"
	KeyMaxMRPerUser                 = "max_mr_per_user"
	KeyMaxMRSize                    = "max_mr_size"
	KeyMaxMsgSz                     = "max_msg_sz"
	KeyMaxMTU                       = "max_mtu"
	KeyMaxMW                        = "max_mw"
	KeyMaxMWPerUser                 = "max_mw_per_user"
	KeyMaxPD                        = "max_pd"
	KeyMaxPDPerUser                 = "max_pd_per_user"
	KeyMaxPkeys                     = "max_pkeys"
	KeyMaxQP                        = "max_qp"
	KeyMaxQPInitRdAtom              = "max_qp_init_rd_atom"
	KeyMaxQPPerUser                 = "max_qp_per_user"
	KeyMaxQPRdAtom                  = "max_qp_rd_atom"
	KeyMaxQPWR                      = "max_qp_wr"
	KeyMaxRdAtomic                  = "max_rd_atomic"
	KeyMaxRecvSGE                   = "max_recv_sge"
	KeyMaxRecvWR                    = "max_recv_wr"
	KeyMaxResRdAtom                 = "max_res_rd_atom"
	KeyMaxSendSGE                   = "max_send_sge"
	KeyMaxSendWR                    = "max_send_wr"
	KeyMaxSGE                       = "max_sge"
	KeyMaxSGERd                     = "max_sge_rd"
	KeyMaxSRQ                       = "max_srq"
	KeyMaxSRQPerUser                = "max_srq_per_user"
	KeyMaxSRQSGE                    = "max_srq_sge"
	KeyMaxSRQWR                     = "max_srq_wr"
	KeyMaxTotalMcastQPAttach        = "max_total_mcast_qp_attach"
	KeyMaxTotalMcastQPAttachPerUser = "max_total_mcast_qp_attach_per_user"
	KeyMaxTotalMRBytes              = "max_total_mr_bytes"
	KeyMaxTotalMRBytesPerUser       = "max_total_mr_bytes_per_user"
	KeyMaxWR                        = "max_wr"
	KeyMcastGroups                  = "mcast_groups"
	KeyMemOffset                    = "mem_offset"
	KeyMemory                       = "memory"
	KeyMinRNRTimer                  = "min_rnr_timer"
	KeyMR                           = "mr"
	KeyNodeGUID                     = "node_guid"
	KeyOffset                       = "offset"
	KeyOpen                         = "open"
	KeyOverflowed                   = "overflowed"
	KeyOverflows                    = "overflows"
	KeyPageSizeCap                  = "page_size_cap"
	KeyPathMigState                 = "path_mig_state"
	KeyPathMTU                      = "path_mtu"
	KeyPD                           = "pd"
	KeyPending                      = "pending"
	KeyPhysPortCnt                  = "phys_port_cnt"
	KeyPKeyIndex                    = "pkey_index"
	KeyPKeyTblLen                   = "pkey_tbl_len"
	KeyPort                         = "port"
	KeyPortNum                      = "port_num"
	KeyQKey                         = "qkey"
	KeyQP                           = "qp"
	KeyQPAccessFlags                = "qp_access_flags"
	KeyQPNum                        = "qp_num"
	KeyQPState                      = "qp_state"
	KeyQPType                       = "qp_type"
	KeyRawClock                     = "raw_clock"
	KeyRecvCQ                       = "recv_cq"
	KeyReservedOperations           = "reserved_operations"
	KeyRetryCnt                     = "retry_cnt"
	KeyRKey                         = "rkey"
	KeyRNRRetry                     = "rnr_retry"
	KeyRQPSN                        = "rq_psn"
	KeySendCQ                       = "send_cq"
	KeySGIDIndex                    = "sgid_index"
	KeyShare                        = "share"
	KeyShared                       = "shared"
	KeySL                           = "sl"
	KeySQPSN                        = "sq_psn"
	KeySQSigAll                     = "sq_sig_all"
	KeySRQ                          = "srq"
	KeySRQLimit                     = "srq_limit"
	KeySRQNum                       = "srq_num"
	KeySRQType                      = "srq_type"
	KeyState                        = "state"
	KeyStaticRate                   = "static_rate"
	KeySysImageGUID                 = "sys_image_guid"
	KeyTimeout                      = "timeout"
	KeyTrafficClass                 = "traffic_class"
	KeyType                         = "type"
	KeyUserShare                    = "user_share"
	KeyValid                        = "valid"
	KeyVendorID                     = "vendor_id"
	KeyVendorPartID                 = "vendor_part_id"
	KeyWallclockNS                  = "wallclock_ns"
	KeyWcFlags                      = "wc_flags"
	KeyXRCD                         = "xrcd"
)

// textKeyList is every constant above: what TextKeys returns and ctext
// generates. TestTextKeysListed checks none is left out.
var textKeyList = []string{
	KeyAccess,
	KeyActiveMTU,
	KeyAddr,
	KeyArmed,
	KeyAtomicCap,
	KeyBound,
	KeyCompVector,
	KeyCompletionTimestampMask,
	KeyCQ,
	KeyCQE,
	KeyCreate,
	KeyCurQPState,
	KeyDestQPNum,
	KeyDeviceCapFlags,
	KeyDeviceCapFlagsEx,
	KeyDGID,
	KeyDLID,
	KeyEnSQDAsyncNotify,
	KeyEngines,
	KeyEvent,
	KeyExcl,
	KeyFD,
	KeyFlowLabel,
	KeyFwVer,
	KeyGID,
	KeyGIDTblLen,
	KeyHandle,
	KeyHCACoreClock,
	KeyHopLimit,
	KeyHwVer,
	KeyImplicit,
	KeyIOVA,
	KeyLength,
	KeyLID,
	KeyLinkLayer,
	KeyLKey,
	KeyLocalCAAckDelay,
	KeyMaxAH,
	KeyMaxAHPerUser,
	KeyMaxCapturesPerUser,
	KeyMaxCQ,
	KeyMaxCQPerUser,
	KeyMaxCQE,
	KeyMaxDestRdAtomic,
	KeyMaxEventReadersPerUser,
	KeyMaxInlineData,
	KeyMaxMcastGrp,
	KeyMaxMcastGrpPerUser,
	KeyMaxMcastQPAttach,
	KeyMaxMR,
	KeyMaxMRPerUser,
	KeyMaxMRSize,
	KeyMaxMsgSz,
	KeyMaxMTU,
	KeyMaxMW,
	KeyMaxMWPerUser,
	KeyMaxPD,
	KeyMaxPDPerUser,
	KeyMaxPkeys,
	KeyMaxQP,
	KeyMaxQPInitRdAtom,
	KeyMaxQPPerUser,
	KeyMaxQPRdAtom,
	KeyMaxQPWR,
	KeyMaxRdAtomic,
	KeyMaxRecvSGE,
	KeyMaxRecvWR,
	KeyMaxResRdAtom,
	KeyMaxSendSGE,
	KeyMaxSendWR,
	KeyMaxSGE,
	KeyMaxSGERd,
	KeyMaxSRQ,
	KeyMaxSRQPerUser,
	KeyMaxSRQSGE,
	KeyMaxSRQWR,
	KeyMaxTotalMcastQPAttach,
	KeyMaxTotalMcastQPAttachPerUser,
	KeyMaxTotalMRBytes,
	KeyMaxTotalMRBytesPerUser,
	KeyMaxWR,
	KeyMcastGroups,
	KeyMemOffset,
	KeyMemory,
	KeyMinRNRTimer,
	KeyMR,
	KeyNodeGUID,
	KeyOffset,
	KeyOpen,
	KeyOverflowed,
	KeyOverflows,
	KeyPageSizeCap,
	KeyPathMigState,
	KeyPathMTU,
	KeyPD,
	KeyPending,
	KeyPhysPortCnt,
	KeyPKeyIndex,
	KeyPKeyTblLen,
	KeyPort,
	KeyPortNum,
	KeyQKey,
	KeyQP,
	KeyQPAccessFlags,
	KeyQPNum,
	KeyQPState,
	KeyQPType,
	KeyRawClock,
	KeyRecvCQ,
	KeyReservedOperations,
	KeyRetryCnt,
	KeyRKey,
	KeyRNRRetry,
	KeyRQPSN,
	KeySendCQ,
	KeySGIDIndex,
	KeyShare,
	KeyShared,
	KeySL,
	KeySQPSN,
	KeySQSigAll,
	KeySRQ,
	KeySRQLimit,
	KeySRQNum,
	KeySRQType,
	KeyState,
	KeyStaticRate,
	KeySysImageGUID,
	KeyTimeout,
	KeyTrafficClass,
	KeyType,
	KeyUserShare,
	KeyValid,
	KeyVendorID,
	KeyVendorPartID,
	KeyWallclockNS,
	KeyWcFlags,
	KeyXRCD,
}

// TextKeys lists every key of this package's text lines (a copy).
func TextKeys() []string { return append([]string(nil), textKeyList...) }
