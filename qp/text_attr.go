package qp

import (
	"strconv"
	"strings"
)

// QP attributes as text: the lines of qp/N/attr and the tokens of a
// `modify` command on qp/N/ctl.

// textAttrKey is one modify key: the mask bit it sets and how it parses.
type textAttrKey struct {
	mask AttrMask
	set  func(a *Attr, k, v string) error
}

var textAttrKeys = map[string]textAttrKey{
	KeyQPState:    {MaskState, func(a *Attr, k, v string) (err error) { a.QPState, err = textState(k, v); return }},
	KeyCurQPState: {MaskCurState, func(a *Attr, k, v string) (err error) { a.CurQPState, err = textState(k, v); return }},
	KeyEnSQDAsyncNotify: {MaskEnSQDAsyncNotify, func(a *Attr, k, v string) (err error) {
		a.EnSQDAsyncNotify, err = textBool(k, v)
		return
	}},
	KeyQPAccessFlags: {MaskAccessFlags, func(a *Attr, k, v string) (err error) {
		a.QPAccessFlags, err = textAccess(k, v)
		return
	}},
	KeyPKeyIndex: {MaskPKeyIndex, func(a *Attr, k, v string) (err error) { a.PKeyIndex, err = textFull[uint16](k, v); return }},
	KeyPortNum:   {MaskPort, func(a *Attr, k, v string) (err error) { a.PortNum, err = textFull[uint8](k, v); return }},
	KeyQKey:      {MaskQKey, func(a *Attr, k, v string) (err error) { a.QKey, err = textFull[uint32](k, v); return }},
	KeyPathMTU:   {MaskPathMTU, func(a *Attr, k, v string) (err error) { a.PathMTU, err = textMTU(k, v); return }},
	KeyTimeout:   {MaskTimeout, func(a *Attr, k, v string) (err error) { a.Timeout, err = textFull[uint8](k, v); return }},
	KeyRetryCnt:  {MaskRetryCnt, func(a *Attr, k, v string) (err error) { a.RetryCnt, err = textFull[uint8](k, v); return }},
	KeyRNRRetry:  {MaskRNRRetry, func(a *Attr, k, v string) (err error) { a.RNRRetry, err = textFull[uint8](k, v); return }},
	KeyRQPSN:     {MaskRQPSN, func(a *Attr, k, v string) (err error) { a.RQPSN, err = textUint[PSN](k, v, PSNMask); return }},
	KeySQPSN:     {MaskSQPSN, func(a *Attr, k, v string) (err error) { a.SQPSN, err = textUint[PSN](k, v, PSNMask); return }},
	KeyMaxRdAtomic: {MaskMaxQPRdAtomic, func(a *Attr, k, v string) (err error) {
		a.MaxRdAtomic, err = textFull[uint8](k, v)
		return
	}},
	KeyMaxDestRdAtomic: {MaskMaxDestRdAtomic, func(a *Attr, k, v string) (err error) {
		a.MaxDestRdAtomic, err = textFull[uint8](k, v)
		return
	}},
	KeyMinRNRTimer: {MaskMinRNRTimer, func(a *Attr, k, v string) (err error) {
		a.MinRNRTimer, err = textFull[uint8](k, v)
		return
	}},
	KeyPathMigState: {MaskPathMigState, func(a *Attr, k, v string) (err error) {
		a.PathMigState, err = textMigState(k, v)
		return
	}},
	// A QPN is 24 bits wide (BTH.DestQP).
	KeyDestQPNum: {MaskDestQPN, func(a *Attr, k, v string) (err error) {
		a.DestQPNum, err = textUint[uint32](k, v, PSNMask)
		return
	}},
}

func init() {
	for k, set := range textAVKeys {
		textAttrKeys[k] = textAttrKey{MaskAV, func(a *Attr, k, v string) error { return set(&a.AH, k, v) }}
	}
	for k, set := range textCapKeys {
		textAttrKeys[k] = textAttrKey{MaskCap, func(a *Attr, k, v string) error { return set(&a.Cap, k, v) }}
	}
}

// ParseModify parses the tokens of a modify command. The returned mask is
// the set of keys given; any AV key sets MaskAV and any cap key MaskCap.
// Values are checked against their field's width only; whether they are
// legal for the transition is CheckAttr's business.
func ParseModify(s string) (Attr, AttrMask, error) {
	var a Attr
	var mask AttrMask
	toks, err := textSplit(s)
	if err != nil {
		return Attr{}, 0, err
	}
	seen := textSeen{}
	for _, t := range toks {
		ak, ok := textAttrKeys[t.key]
		if !ok {
			return Attr{}, 0, textUnknownAttr(t.key)
		}
		if err := seen.add(t.key); err != nil {
			return Attr{}, 0, err
		}
		if err := ak.set(&a, t.key, t.val); err != nil {
			return Attr{}, 0, err
		}
		mask |= ak.mask
	}
	return a, mask, nil
}

// textUnknownAttr tells a feature rdmafs leaves out (EOPNOTSUPP) from a typo
// (EINVAL).
func textUnknownAttr(k string) error {
	switch {
	case strings.HasPrefix(k, "alt_"):
		return &Error{Key: textShow(k), Msg: "alternate paths are not supported", Err: ErrUnsupported}
	case k == "rate_limit":
		return &Error{Key: k, Msg: "rate limits are not supported", Err: ErrUnsupported}
	}
	return textErr(k, "unknown key")
}

// textState accepts an IB state name in any case or its number.
func textState(k, v string) (State, error) {
	if st, ok := ParseState(v); ok {
		return st, nil
	}
	if !textIsNumber(v) {
		return 0, textErr(k, "not a QP state: "+textQuote(v)+" (want RESET, INIT, RTR, RTS, SQD, SQE or ERR)")
	}
	return textUint[State](k, v, uint64(numStates-1))
}

var textMigNames = [...]string{MigMigrated: "migrated", MigRearm: "rearm", MigArmed: "armed"}

// textMigState accepts migrated|rearm|armed in any case or 0-2.
func textMigState(k, v string) (MigState, error) {
	for i, n := range textMigNames {
		if strings.EqualFold(v, n) {
			return MigState(i), nil
		}
	}
	if !textIsNumber(v) {
		return 0, textErr(k, "not a migration state: "+textQuote(v)+" (want migrated, rearm or armed)")
	}
	return textUint[MigState](k, v, uint64(MigArmed))
}

// textMTU accepts the MTU in bytes (what a user thinks in) or the ibv_mtu
// enum 1-5 (what libibverbs code prints).
func textMTU(k, v string) (MTU, error) {
	n, err := textFull[uint64](k, v)
	if err != nil {
		return 0, err
	}
	if n >= uint64(MTU256) && n <= uint64(MTU4096) {
		return MTU(n), nil
	}
	if n <= 4096 {
		if m, ok := MTUFromBytes(int(n)); ok {
			return m, nil
		}
	}
	return 0, textErr(k, "not an MTU: "+textShow(v)+" (want 256, 512, 1024, 2048, 4096 or 1-5)")
}

// textIsNumber reports whether v starts like a number, so that an enum
// parser can tell a bad name from a bad number in its message.
func textIsNumber(v string) bool { return v != "" && (v[0] >= '0' && v[0] <= '9' || v[0] == '-') }

// FormatAttr prints the attributes that matter for a QP of type t, one
// key=value a line, in a fixed order. Each line, alone or joined with the
// others, is accepted by ParseModify and gives back the same value. An
// unset (invalid) path MTU is left out, since no modify could set it.
func FormatAttr(a *Attr, t Type) string {
	var b strings.Builder
	line := func(k, v string) {
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(v)
		b.WriteByte('\n')
	}
	num := func(k string, v uint64) { line(k, strconv.FormatUint(v, 10)) }

	line(KeyQPState, a.QPState.String())
	if a.PathMTU.Valid() {
		num(KeyPathMTU, uint64(a.PathMTU.Bytes()))
	}
	line(KeyQPAccessFlags, a.QPAccessFlags.String())
	num(KeyPKeyIndex, uint64(a.PKeyIndex))
	num(KeyPortNum, uint64(a.PortNum))
	switch t {
	case TypeUD:
		num(KeyQKey, uint64(a.QKey))
		num(KeySQPSN, uint64(a.SQPSN))
	case TypeRC, TypeUC, TypeXRCSend, TypeXRCRecv:
		num(KeyDestQPNum, uint64(a.DestQPNum))
		num(KeyRQPSN, uint64(a.RQPSN))
		num(KeySQPSN, uint64(a.SQPSN))
		line(KeyDGID, FormatGID(a.AH.DGID))
		num(KeySL, uint64(a.AH.SL))
		num(KeyHopLimit, uint64(a.AH.HopLimit))
		num(KeyTrafficClass, uint64(a.AH.TrafficClass))
		num(KeyFlowLabel, uint64(a.AH.FlowLabel))
		num(KeySGIDIndex, uint64(a.AH.SGIDIndex))
		if t.Reliable() {
			num(KeyTimeout, uint64(a.Timeout))
			num(KeyRetryCnt, uint64(a.RetryCnt))
			num(KeyRNRRetry, uint64(a.RNRRetry))
			num(KeyMinRNRTimer, uint64(a.MinRNRTimer))
			num(KeyMaxRdAtomic, uint64(a.MaxRdAtomic))
			num(KeyMaxDestRdAtomic, uint64(a.MaxDestRdAtomic))
		}
	}
	if int(a.PathMigState) < len(textMigNames) {
		line(KeyPathMigState, textMigNames[a.PathMigState])
	} else {
		num(KeyPathMigState, uint64(a.PathMigState))
	}
	if a.EnSQDAsyncNotify {
		num(KeyEnSQDAsyncNotify, 1)
	} else {
		num(KeyEnSQDAsyncNotify, 0)
	}
	num(KeyMaxSendWR, uint64(a.Cap.MaxSendWR))
	num(KeyMaxRecvWR, uint64(a.Cap.MaxRecvWR))
	num(KeyMaxSendSGE, uint64(a.Cap.MaxSendSGE))
	num(KeyMaxRecvSGE, uint64(a.Cap.MaxRecvSGE))
	num(KeyMaxInlineData, uint64(a.Cap.MaxInlineData))
	return b.String()
}
