package qp

import "strconv"

// FormatModify prints the tokens of a modify command (without the word
// "modify") for exactly the attributes mask names, in mask bit order, so
// that ParseModify reads them back to the same attributes and the same
// mask. MaskAV prints every address-vector key and MaskCap every cap key,
// since ParseModify sets those bits for any one of their keys.
//
// MaskAltPath and MaskRateLimit have no text form that ParseModify
// accepts: they print alt_port_num= and rate_limit= tokens, which the
// parser (and so the daemon) refuses as unsupported (EOPNOTSUPP), exactly
// as rdmafs refuses those features. Unknown mask bits print nothing.
func FormatModify(a *Attr, mask AttrMask) string {
	var l textLine
	num := func(k string, v uint64) { l.num(k, v) }
	for _, n := range maskNames {
		if mask&n.bit == 0 {
			continue
		}
		switch n.bit {
		case MaskState:
			l.str(KeyQPState, textFormatState(a.QPState))
		case MaskCurState:
			l.str(KeyCurQPState, textFormatState(a.CurQPState))
		case MaskEnSQDAsyncNotify:
			if a.EnSQDAsyncNotify {
				num(KeyEnSQDAsyncNotify, 1)
			} else {
				num(KeyEnSQDAsyncNotify, 0)
			}
		case MaskAccessFlags:
			l.str(KeyQPAccessFlags, a.QPAccessFlags.String())
		case MaskPKeyIndex:
			num(KeyPKeyIndex, uint64(a.PKeyIndex))
		case MaskPort:
			num(KeyPortNum, uint64(a.PortNum))
		case MaskQKey:
			num(KeyQKey, uint64(a.QKey))
		case MaskAV:
			textFormatAV(&l, &a.AH)
		case MaskPathMTU:
			// Bytes, as attr prints it; an invalid MTU prints its enum
			// number, which ParseModify refuses.
			if a.PathMTU.Valid() {
				num(KeyPathMTU, uint64(a.PathMTU.Bytes()))
			} else {
				num(KeyPathMTU, uint64(a.PathMTU))
			}
		case MaskTimeout:
			num(KeyTimeout, uint64(a.Timeout))
		case MaskRetryCnt:
			num(KeyRetryCnt, uint64(a.RetryCnt))
		case MaskRNRRetry:
			num(KeyRNRRetry, uint64(a.RNRRetry))
		case MaskRQPSN:
			num(KeyRQPSN, uint64(a.RQPSN))
		case MaskMaxQPRdAtomic:
			num(KeyMaxRdAtomic, uint64(a.MaxRdAtomic))
		case MaskAltPath:
			num("alt_port_num", uint64(a.AltPortNum))
		case MaskMinRNRTimer:
			num(KeyMinRNRTimer, uint64(a.MinRNRTimer))
		case MaskSQPSN:
			num(KeySQPSN, uint64(a.SQPSN))
		case MaskMaxDestRdAtomic:
			num(KeyMaxDestRdAtomic, uint64(a.MaxDestRdAtomic))
		case MaskPathMigState:
			if int(a.PathMigState) < len(textMigNames) {
				l.str(KeyPathMigState, textMigNames[a.PathMigState])
			} else {
				num(KeyPathMigState, uint64(a.PathMigState))
			}
		case MaskCap:
			num(KeyMaxSendWR, uint64(a.Cap.MaxSendWR))
			num(KeyMaxRecvWR, uint64(a.Cap.MaxRecvWR))
			num(KeyMaxSendSGE, uint64(a.Cap.MaxSendSGE))
			num(KeyMaxRecvSGE, uint64(a.Cap.MaxRecvSGE))
			num(KeyMaxInlineData, uint64(a.Cap.MaxInlineData))
		case MaskDestQPN:
			num(KeyDestQPNum, uint64(a.DestQPNum))
		case MaskRateLimit:
			num("rate_limit", uint64(a.RateLimit))
		}
	}
	return l.String()
}

// textFormatState prints a valid state by name and anything else as a
// number, which ParseModify refuses as out of range.
func textFormatState(s State) string {
	if s.Valid() {
		return s.String()
	}
	return strconv.FormatUint(uint64(s), 10)
}
