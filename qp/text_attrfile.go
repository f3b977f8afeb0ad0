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
var AttrFileKeys = []string{"qp_num", "qp_type", "pd", "send_cq", "recv_cq", "srq", "sq_sig_all", "mcast_groups"}

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
	l.num("qp_num", uint64(f.QPN))
	line()
	l.str("qp_type", f.Type.String())
	line()
	for _, h := range []struct {
		k string
		v uint32
	}{{"pd", f.PD}, {"send_cq", f.SendCQ}, {"recv_cq", f.RecvCQ}, {"srq", f.SRQ}} {
		l.num(h.k, uint64(h.v))
		line()
	}
	if f.SQSigAll {
		l.num("sq_sig_all", 1)
	} else {
		l.num("sq_sig_all", 0)
	}
	line()
	if len(f.McastGroups) > 0 {
		l.str("mcast_groups", strings.Join(f.McastGroups, ","))
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
	// srq=0 is a QP without an SRQ, so the handle grammar (at least 1) is
	// not the one here.
	ident := map[string]func(v string) error{
		"qp_num":       textInto("qp_num", &f.QPN, func(k, v string) (uint32, error) { return textUint[uint32](k, v, PSNMask) }),
		"qp_type":      textInto("qp_type", &f.Type, textQPType),
		"pd":           textInto("pd", &f.PD, textHandle),
		"send_cq":      textInto("send_cq", &f.SendCQ, textHandle),
		"recv_cq":      textInto("recv_cq", &f.RecvCQ, textHandle),
		"srq":          textInto("srq", &f.SRQ, textFull[uint32]),
		"sq_sig_all":   textInto("sq_sig_all", &f.SQSigAll, textBool),
		"mcast_groups": textInto("mcast_groups", &f.McastGroups, textGIDList),
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
	if err := seen.require("qp_num", "qp_type", "pd", "send_cq", "recv_cq"); err != nil {
		return AttrFile{}, 0, err
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
