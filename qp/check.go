package qp

import "fmt"

// Limits are the device and port properties a modify is checked against
// (ibv_query_device / ibv_query_port). A zero field allows nothing.
type Limits struct {
	PhysPortCnt     uint8
	MaxMTU          MTU
	MaxQPRdAtom     uint8 // max_qp_rd_atom: limit for max_dest_rd_atomic
	MaxQPInitRdAtom uint8 // max_qp_init_rd_atom: limit for max_rd_atomic
	NumPKeys        uint16
}

// maskKnown is every bit ibv_qp_attr_mask defines; anything else is refused
// as unsupported, as rdmavt and rxe do (IB_QP_ATTR_STANDARD_BITS).
var maskKnown = func() AttrMask {
	var m AttrMask
	for _, n := range maskNames {
		m |= n.bit
	}
	return m
}()

// CheckAttr validates the value of every attribute named by mask
// (VERBS.md §1.7). It does not look at the transition; see ModifyOK. The
// first bad attribute in mask bit order is reported; unsupported features
// carry ErrUnsupported. Nothing is modified.
func CheckAttr(t Type, attr *Attr, mask AttrMask, lim Limits) error {
	if !t.Valid() {
		return &Error{Key: "qp_type", Msg: fmt.Sprintf("%v is not implemented", t), Err: ErrUnsupported}
	}
	if u := mask &^ maskKnown; u != 0 {
		return unsupported("attr_mask", fmt.Sprintf("unknown bits %#x", uint32(u)))
	}
	if mask&MaskState != 0 && !attr.QPState.Valid() {
		return errorf("qp_state", "invalid state %d", uint8(attr.QPState))
	}
	if mask&MaskCurState != 0 && !attr.CurQPState.Valid() {
		return errorf("cur_qp_state", "invalid state %d", uint8(attr.CurQPState))
	}
	if mask&MaskAccessFlags != 0 {
		// UD has no RDMA, so remote rights mean nothing there; rxe refuses them.
		if t == TypeUD {
			return errorf("qp_access_flags", "only for rc, uc and xrc qps, not %v", t)
		}
		if bad := attr.QPAccessFlags &^ AccessSupportedQP; bad != 0 {
			return errorf("qp_access_flags", "unsupported flags %v in %v (allowed %v)",
				bad, attr.QPAccessFlags, AccessSupportedQP)
		}
	}
	if mask&MaskPKeyIndex != 0 && attr.PKeyIndex >= lim.NumPKeys {
		return errorf("pkey_index", "%d out of range (table has %d entries)", attr.PKeyIndex, lim.NumPKeys)
	}
	if mask&MaskPort != 0 && (attr.PortNum < 1 || attr.PortNum > lim.PhysPortCnt) {
		return errorf("port_num", "%d out of range 1..%d", attr.PortNum, lim.PhysPortCnt)
	}
	if mask&MaskAV != 0 {
		if err := checkAH(&attr.AH); err != nil {
			return err
		}
	}
	if mask&MaskPathMTU != 0 {
		if !attr.PathMTU.Valid() {
			return errorf("path_mtu", "invalid mtu enum %d (1..5 for 256..4096)", uint8(attr.PathMTU))
		}
		if attr.PathMTU > lim.MaxMTU {
			return errorf("path_mtu", "%d bytes exceeds port max_mtu %d", attr.PathMTU.Bytes(), lim.MaxMTU.Bytes())
		}
	}
	if mask&MaskTimeout != 0 && attr.Timeout > 31 {
		return errorf("timeout", "%d exceeds 31", attr.Timeout)
	}
	if mask&MaskRetryCnt != 0 && attr.RetryCnt > 7 {
		return errorf("retry_cnt", "%d exceeds 7", attr.RetryCnt)
	}
	if mask&MaskRNRRetry != 0 && attr.RNRRetry > 7 {
		return errorf("rnr_retry", "%d exceeds 7", attr.RNRRetry)
	}
	if mask&MaskRQPSN != 0 && !attr.RQPSN.Valid() {
		return errorf("rq_psn", "%#x exceeds 24 bits (max 0xffffff)", uint32(attr.RQPSN))
	}
	if mask&MaskMaxQPRdAtomic != 0 && attr.MaxRdAtomic > lim.MaxQPInitRdAtom {
		return errorf("max_rd_atomic", "%d exceeds max_qp_init_rd_atom %d", attr.MaxRdAtomic, lim.MaxQPInitRdAtom)
	}
	if mask&MaskAltPath != 0 {
		return unsupported("alt_path", "alternate paths (APM) are not implemented")
	}
	if mask&MaskMinRNRTimer != 0 && attr.MinRNRTimer > 31 {
		return errorf("min_rnr_timer", "%d exceeds 31", attr.MinRNRTimer)
	}
	if mask&MaskSQPSN != 0 && !attr.SQPSN.Valid() {
		return errorf("sq_psn", "%#x exceeds 24 bits (max 0xffffff)", uint32(attr.SQPSN))
	}
	if mask&MaskMaxDestRdAtomic != 0 && attr.MaxDestRdAtomic > lim.MaxQPRdAtom {
		return errorf("max_dest_rd_atomic", "%d exceeds max_qp_rd_atom %d", attr.MaxDestRdAtomic, lim.MaxQPRdAtom)
	}
	if mask&MaskPathMigState != 0 && attr.PathMigState > MigArmed {
		return errorf("path_mig_state", "%d out of range 0..2 (migrated, rearm, armed)", attr.PathMigState)
	}
	if mask&MaskCap != 0 {
		// Like rxe: the rings are sized at create time and mapped by the
		// client, so they cannot change under it.
		return unsupported("cap", "resizing a qp is not supported")
	}
	if mask&MaskDestQPN != 0 && attr.DestQPNum > PSNMask {
		return errorf("dest_qp_num", "%#x exceeds 24 bits (max 0xffffff)", attr.DestQPNum)
	}
	if mask&MaskRateLimit != 0 {
		return unsupported("rate_limit", "rate limiting is not implemented")
	}
	return nil
}

// checkAH validates the parts of an address vector rdmafs acts on. The
// device has one port and one GID, so the GID index must be 0 and the port 1
// (0 meaning "the QP's port").
func checkAH(ah *AH) error {
	if ah.SGIDIndex != 0 {
		return errorf("sgid_index", "%d out of range (the port has one gid, index 0)", ah.SGIDIndex)
	}
	if ah.PortNum > 1 {
		return errorf("dgid", "address vector port %d does not exist (only port 1)", ah.PortNum)
	}
	return nil
}

func unsupported(key, msg string) *Error {
	return &Error{Key: key, Msg: msg, Err: ErrUnsupported}
}

// ApplyAttr copies into dst exactly the attributes named by mask, masking
// PSNs to 24 bits. MaskCurState copies nothing: cur_qp_state is an assertion
// about the present state, not something to store. It never fails; call
// CheckAttr and ModifyOK first.
func ApplyAttr(dst *Attr, src *Attr, mask AttrMask) {
	if mask&MaskState != 0 {
		dst.QPState = src.QPState
	}
	if mask&MaskEnSQDAsyncNotify != 0 {
		dst.EnSQDAsyncNotify = src.EnSQDAsyncNotify
	}
	if mask&MaskAccessFlags != 0 {
		dst.QPAccessFlags = src.QPAccessFlags
	}
	if mask&MaskPKeyIndex != 0 {
		dst.PKeyIndex = src.PKeyIndex
	}
	if mask&MaskPort != 0 {
		dst.PortNum = src.PortNum
	}
	if mask&MaskQKey != 0 {
		dst.QKey = src.QKey
	}
	if mask&MaskAV != 0 {
		dst.AH = src.AH
	}
	if mask&MaskPathMTU != 0 {
		dst.PathMTU = src.PathMTU
	}
	if mask&MaskTimeout != 0 {
		dst.Timeout = src.Timeout
	}
	if mask&MaskRetryCnt != 0 {
		dst.RetryCnt = src.RetryCnt
	}
	if mask&MaskRNRRetry != 0 {
		dst.RNRRetry = src.RNRRetry
	}
	if mask&MaskRQPSN != 0 {
		dst.RQPSN = src.RQPSN & PSNMask
	}
	if mask&MaskMaxQPRdAtomic != 0 {
		dst.MaxRdAtomic = src.MaxRdAtomic
	}
	if mask&MaskAltPath != 0 {
		dst.AltAH = src.AltAH
		dst.AltPKeyIndex = src.AltPKeyIndex
		dst.AltPortNum = src.AltPortNum
		dst.AltTimeout = src.AltTimeout
	}
	if mask&MaskMinRNRTimer != 0 {
		dst.MinRNRTimer = src.MinRNRTimer
	}
	if mask&MaskSQPSN != 0 {
		dst.SQPSN = src.SQPSN & PSNMask
	}
	if mask&MaskMaxDestRdAtomic != 0 {
		dst.MaxDestRdAtomic = src.MaxDestRdAtomic
	}
	if mask&MaskPathMigState != 0 {
		dst.PathMigState = src.PathMigState
	}
	if mask&MaskCap != 0 {
		dst.Cap = src.Cap
	}
	if mask&MaskDestQPN != 0 {
		dst.DestQPNum = src.DestQPNum
	}
	if mask&MaskRateLimit != 0 {
		dst.RateLimit = src.RateLimit
	}
}
