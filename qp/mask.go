package qp

import (
	"slices"
	"strings"
)

// maskNames names each attribute-mask bit by the text key that sets it. AV
// and CAP are groups of keys (dgid, sl, … and max_send_wr, …); they are
// named "av" and "cap" in messages.
var maskNames = []struct {
	bit  AttrMask
	name string
}{
	{MaskState, KeyQPState},
	{MaskCurState, KeyCurQPState},
	{MaskEnSQDAsyncNotify, KeyEnSQDAsyncNotify},
	{MaskAccessFlags, KeyQPAccessFlags},
	{MaskPKeyIndex, KeyPKeyIndex},
	{MaskPort, KeyPortNum},
	{MaskQKey, KeyQKey},
	{MaskAV, "av"},
	{MaskPathMTU, KeyPathMTU},
	{MaskTimeout, KeyTimeout},
	{MaskRetryCnt, KeyRetryCnt},
	{MaskRNRRetry, KeyRNRRetry},
	{MaskRQPSN, KeyRQPSN},
	{MaskMaxQPRdAtomic, KeyMaxRdAtomic},
	{MaskAltPath, "alt_path"},
	{MaskMinRNRTimer, KeyMinRNRTimer},
	{MaskSQPSN, KeySQPSN},
	{MaskMaxDestRdAtomic, KeyMaxDestRdAtomic},
	{MaskPathMigState, KeyPathMigState},
	{MaskCap, "cap"},
	{MaskDestQPN, KeyDestQPNum},
	{MaskRateLimit, "rate_limit"},
}

// Names lists the key of every bit in m, in bit order.
func (m AttrMask) Names() []string {
	var out []string
	for _, n := range maskNames {
		if m&n.bit != 0 {
			out = append(out, n.name)
		}
	}
	return out
}

func (m AttrMask) String() string {
	if m == 0 {
		return "none"
	}
	return strings.Join(m.Names(), ",")
}

// AVKeys are the text keys that together make the address vector (MaskAV).
var AVKeys = []string{KeyDGID, KeySGIDIndex, KeyHopLimit, KeyTrafficClass, KeyFlowLabel, KeySL, KeyDLID, KeyStaticRate}

// CapKeys are the text keys of ibv_qp_cap (MaskCap).
var CapKeys = []string{KeyMaxSendWR, KeyMaxRecvWR, KeyMaxSendSGE, KeyMaxRecvSGE, KeyMaxInlineData}

// MaskUnsupported are the named bits rdmafs leaves out (alternate paths,
// rate limits): a modify naming them is refused with ErrUnsupported.
const MaskUnsupported = MaskAltPath | MaskRateLimit

// ModifyKey is one attribute-mask bit a modify may set and the keys that
// set it: one, or the group of MaskAV (AVKeys) or MaskCap (CapKeys).
type ModifyKey struct {
	Bit  AttrMask
	Keys []string
}

// ModifyKeys lists the bits ParseModify sets, in bit order, each with its
// keys, read from the parser's own table.
func ModifyKeys() []ModifyKey {
	var out []ModifyKey
	for _, n := range maskNames {
		var keys []string
		switch n.bit {
		case MaskAV:
			keys = AVKeys
		case MaskCap:
			keys = CapKeys
		default:
			for k, ak := range textAttrKeys {
				if ak.mask == n.bit {
					keys = append(keys, k)
				}
			}
		}
		if len(keys) > 0 {
			out = append(out, ModifyKey{n.bit, slices.Clone(keys)})
		}
	}
	return out
}

// AttrKeys lists, sorted, every key of qp/N/attr: the modify keys and
// the identity keys (AttrFileKeys).
func AttrKeys() []string {
	keys := slices.Clone(AttrFileKeys)
	for k := range textAttrKeys {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
