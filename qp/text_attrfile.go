package qp

import (
	"strings"
)

// AttrFile is qp/N/attr as a whole: the attributes ibv_query_qp reports
// (FormatAttr's lines) and then the QP's identity, which no modify changes:
// its number and type, the handles it was created with, and the multicast
// groups it joined. The daemon prints it, and the verbs library, rdmafs
// show and rdmafs trace read it, all through this one grammar.
type AttrFile struct {
	Attr     Attr
	QPN      uint32
	Type     Type
	PD       uint32
	SendCQ   uint32
	RecvCQ   uint32
	SRQ      uint32 // 0: the QP has its own receive queue
	SQSigAll bool
	// McastGroups are the groups attach_mcast joined (a UD QP's), as
	// FormatGID prints them; the line is left out when there are none.
	McastGroups []string
}

// AttrFileKeys are the keys of attr's identity lines, after FormatAttr's.
var AttrFileKeys = []string{KeyQPNum, KeyQPType, KeyPD, KeySendCQ, KeyRecvCQ, KeySRQ, KeySQSigAll, KeyMcastGroups}

// FormatAttrFile prints f as qp/N/attr shows it, one key=value a line.
func FormatAttrFile(f *AttrFile) string {
	var b strings.Builder
	b.WriteString(FormatAttr(&f.Attr, f.Type))
	var l textLine
	line := func() {
		b.WriteString(l.String())
		b.WriteByte('\n')
		l = textLine{}
	}
	l.num(KeyQPNum, uint64(f.QPN))
	line()
	l.str(KeyQPType, f.Type.String())
	line()
	for _, h := range []struct {
		k string
		v uint32
	}{{KeyPD, f.PD}, {KeySendCQ, f.SendCQ}, {KeyRecvCQ, f.RecvCQ}, {KeySRQ, f.SRQ}} {
		l.num(h.k, uint64(h.v))
		line()
	}
	if f.SQSigAll {
		l.num(KeySQSigAll, 1)
	} else {
		l.num(KeySQSigAll, 0)
	}
	line()
	if len(f.McastGroups) > 0 {
		l.str(KeyMcastGroups, strings.Join(f.McastGroups, ","))
		line()
	}
	return b.String()
}

// ParseAttrFile reads what FormatAttrFile prints (lines or tokens in any
// order). The mask is that of the attribute keys present, as ParseModify
// gives it; the identity keys other than srq, sq_sig_all and
// mcast_groups are required.
func ParseAttrFile(s string) (AttrFile, AttrMask, error) {
	var f AttrFile
	var mask AttrMask
	// srq=0 is a QP without an SRQ, and an XRC_RECV QP has no pd or CQs
	// (0), so the handle grammar (at least 1) is not the one here; the
	// others' are checked below.
	ident := map[string]func(v string) error{
		KeyQPNum:       textInto(KeyQPNum, &f.QPN, func(k, v string) (uint32, error) { return textUint[uint32](k, v, PSNMask) }),
		KeyQPType:      textInto(KeyQPType, &f.Type, textQPType),
		KeyPD:          textInto(KeyPD, &f.PD, textFull[uint32]),
		KeySendCQ:      textInto(KeySendCQ, &f.SendCQ, textFull[uint32]),
		KeyRecvCQ:      textInto(KeyRecvCQ, &f.RecvCQ, textFull[uint32]),
		KeySRQ:         textInto(KeySRQ, &f.SRQ, textFull[uint32]),
		KeySQSigAll:    textInto(KeySQSigAll, &f.SQSigAll, textBool),
		KeyMcastGroups: textInto(KeyMcastGroups, &f.McastGroups, textGIDList),
	}
	toks, err := textSplit(s)
	if err != nil {
		return AttrFile{}, 0, err
	}
	seen := textSeen{}
	for _, t := range toks {
		if err := seen.add(t.key); err != nil {
			return AttrFile{}, 0, err
		}
		if set, ok := ident[t.key]; ok {
			if err := set(t.val); err != nil {
				return AttrFile{}, 0, err
			}
			continue
		}
		ak, ok := textAttrKeys[t.key]
		if !ok {
			return AttrFile{}, 0, textUnknownAttr(t.key)
		}
		if err := ak.set(&f.Attr, t.key, t.val); err != nil {
			return AttrFile{}, 0, err
		}
		mask |= ak.mask
	}
	if err := seen.require(KeyQPNum, KeyQPType, KeyPD, KeySendCQ, KeyRecvCQ); err != nil {
		return AttrFile{}, 0, err
	}
	if f.Type != TypeXRCRecv {
		for _, h := range []struct {
			k string
			v uint32
		}{{KeyPD, f.PD}, {KeySendCQ, f.SendCQ}, {KeyRecvCQ, f.RecvCQ}} {
			if h.v == 0 {
				return AttrFile{}, 0, textErr(h.k, "out of range: 0 < 1")
			}
		}
	}
	return f, mask, nil
}

// textGIDList parses a comma list of GIDs into their canonical text.
func textGIDList(k, v string) ([]string, error) {
	var out []string
	for _, g := range strings.Split(v, ",") {
		b, err := textGID(k, g)
		if err != nil {
			return nil, err
		}
		out = append(out, FormatGID(b))
	}
	return out, nil
}
