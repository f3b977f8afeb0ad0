package qp

import (
	"strconv"
	"strings"
)

// The attr files of the objects other than QPs (pd/N/attr, mr/N/attr,
// ...): one key=value a line, every key always printed, in a fixed order.
// The daemon prints them with these formatters; the verbs library and
// rdmafs show read them with these parsers. Parse(Format(x)) is x.

// PDAttr is pd/N/attr.
type PDAttr struct {
	Handle uint32
}

// MRAttr is mr/N/attr.
type MRAttr struct {
	PD        uint32
	Length    uint64
	IOVA      uint64
	Access    Access
	LKey      uint32
	RKey      uint32
	Valid     bool
	MemOffset uint64
	// Memory is how the device reaches the bytes: device, mapped or
	// address_space (device.MRAttr).
	Memory string
}

// MWAttr is mw/N/attr.
type MWAttr struct {
	PD     uint32
	Type   uint32
	RKey   uint32
	Bound  bool
	MR     uint32
	Addr   uint64
	Length uint64
	Access Access
}

// CQAttr is cq/N/attr.
type CQAttr struct {
	CQE        uint32
	WCFlags    CQWCFlags
	Overflowed bool
	Pending    uint32
	Armed      string // none, next or solicited
	Overflows  uint64
}

// SRQAttr is srq/N/attr.
type SRQAttr struct {
	PD       uint32
	MaxWR    uint32
	MaxSGE   uint32
	SRQLimit uint32
	Pending  uint32
}

// AHAttr is ah/N/attr: the address vector and its PD.
type AHAttr struct {
	PD uint32
	AH AH
}

// textField is one line of an attr file: its key, how the value prints
// and how it parses into the field.
type textField struct {
	key   string
	print func() string
	parse func(v string) error
}

func fieldU[T ~uint8 | ~uint16 | ~uint32 | ~uint64](key string, p *T) textField {
	return textField{key, func() string { return strconv.FormatUint(uint64(*p), 10) },
		textInto(key, p, textFull[T])}
}

func fieldBool(key string, p *bool) textField {
	return textField{key, func() string {
		if *p {
			return "1"
		}
		return "0"
	}, textInto(key, p, textBool)}
}

func fieldAccess(key string, p *Access) textField {
	return textField{key, func() string { return p.String() }, textInto(key, p, textAccess)}
}

// fieldWord is a value of one word (no whitespace); empty for an object
// destroyed while its attr was read (its gauges are then zero).
func fieldWord(key string, p *string) textField {
	return textField{key, func() string { return *p }, textInto(key, p, func(k, v string) (string, error) {
		if strings.ContainsFunc(v, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
			return "", textErr(k, "not a word: "+textQuote(v))
		}
		return v, nil
	})}
}

func fieldGID(key string, p *[16]byte) textField {
	return textField{key, func() string { return FormatGID(*p) }, textInto(key, p, textGID)}
}

// fieldCQWCFlags may be empty: a CQ without optional fields.
func fieldCQWCFlags(key string, p *CQWCFlags) textField {
	return textField{key, func() string { return p.String() }, textInto(key, p, func(k, v string) (CQWCFlags, error) {
		if v == "" {
			return 0, nil
		}
		return parseCQWCFlags(k, v)
	})}
}

func (a *PDAttr) fields() []textField { return []textField{fieldU("handle", &a.Handle)} }

func (a *MRAttr) fields() []textField {
	return []textField{fieldU("pd", &a.PD), fieldU("length", &a.Length), fieldU("iova", &a.IOVA),
		fieldAccess("access", &a.Access), fieldU("lkey", &a.LKey), fieldU("rkey", &a.RKey),
		fieldBool("valid", &a.Valid), fieldU("mem_offset", &a.MemOffset), fieldWord("memory", &a.Memory)}
}

func (a *MWAttr) fields() []textField {
	return []textField{fieldU("pd", &a.PD), fieldU("type", &a.Type), fieldU("rkey", &a.RKey),
		fieldBool("bound", &a.Bound), fieldU("mr", &a.MR), fieldU("addr", &a.Addr), fieldU("length", &a.Length),
		fieldAccess("access", &a.Access)}
}

func (a *CQAttr) fields() []textField {
	return []textField{fieldU("cqe", &a.CQE), fieldCQWCFlags("wc_flags", &a.WCFlags),
		fieldBool("overflowed", &a.Overflowed), fieldU("pending", &a.Pending), fieldWord("armed", &a.Armed),
		fieldU("overflows", &a.Overflows)}
}

func (a *SRQAttr) fields() []textField {
	return []textField{fieldU("pd", &a.PD), fieldU("max_wr", &a.MaxWR), fieldU("max_sge", &a.MaxSGE),
		fieldU("srq_limit", &a.SRQLimit), fieldU("pending", &a.Pending)}
}

func (a *AHAttr) fields() []textField {
	h := &a.AH
	return []textField{fieldU("pd", &a.PD), fieldGID("dgid", &h.DGID), fieldU("sgid_index", &h.SGIDIndex),
		fieldU("hop_limit", &h.HopLimit), fieldU("traffic_class", &h.TrafficClass),
		fieldU("flow_label", &h.FlowLabel), fieldU("sl", &h.SL), fieldU("dlid", &h.DLID),
		fieldU("port_num", &h.PortNum), fieldU("static_rate", &h.StaticRate)}
}

// formatFields prints one key=value line a field.
func formatFields(fs []textField) string {
	var b strings.Builder
	for _, f := range fs {
		b.WriteString(f.key)
		b.WriteByte('=')
		b.WriteString(f.print())
		b.WriteByte('\n')
	}
	return b.String()
}

// parseFields reads the lines formatFields prints, in any order: each
// key once, every one present. A value may be empty (a CQ's wc_flags),
// so the file is read by lines, not by tokens.
func parseFields(s string, fs []textField) error {
	byKey := make(map[string]textField, len(fs))
	for _, f := range fs {
		byKey[f.key] = f
	}
	seen := textSeen{}
	for _, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			return textErr(line, "not a key=value line")
		}
		f, ok := byKey[k]
		if !ok {
			return textErr(k, "unknown key")
		}
		if err := seen.add(k); err != nil {
			return err
		}
		if err := f.parse(v); err != nil {
			return err
		}
	}
	for _, f := range fs {
		if err := seen.require(f.key); err != nil {
			return err
		}
	}
	return nil
}

// objAttr is an attr file's record: a pointer to it lists its fields.
type objAttr[T any] interface {
	*T
	fields() []textField
}

// formatAttr prints a's file.
func formatAttr[T any, P objAttr[T]](a *T) string { return formatFields(P(a).fields()) }

// parseAttr reads a T's file.
func parseAttr[T any, P objAttr[T]](s string) (T, error) {
	var a T
	err := parseFields(s, P(&a).fields())
	return a, err
}

// FormatPDAttr prints pd/N/attr.
func FormatPDAttr(a *PDAttr) string { return formatAttr(a) }

// ParsePDAttr reads what FormatPDAttr prints.
func ParsePDAttr(s string) (PDAttr, error) { return parseAttr[PDAttr](s) }

// FormatMRAttr prints mr/N/attr.
func FormatMRAttr(a *MRAttr) string { return formatAttr(a) }

// ParseMRAttr reads what FormatMRAttr prints.
func ParseMRAttr(s string) (MRAttr, error) { return parseAttr[MRAttr](s) }

// FormatMWAttr prints mw/N/attr.
func FormatMWAttr(a *MWAttr) string { return formatAttr(a) }

// ParseMWAttr reads what FormatMWAttr prints.
func ParseMWAttr(s string) (MWAttr, error) { return parseAttr[MWAttr](s) }

// FormatCQAttr prints cq/N/attr.
func FormatCQAttr(a *CQAttr) string { return formatAttr(a) }

// ParseCQAttr reads what FormatCQAttr prints.
func ParseCQAttr(s string) (CQAttr, error) { return parseAttr[CQAttr](s) }

// FormatSRQAttr prints srq/N/attr.
func FormatSRQAttr(a *SRQAttr) string { return formatAttr(a) }

// ParseSRQAttr reads what FormatSRQAttr prints.
func ParseSRQAttr(s string) (SRQAttr, error) { return parseAttr[SRQAttr](s) }

// FormatAHAttr prints ah/N/attr.
func FormatAHAttr(a *AHAttr) string { return formatAttr(a) }

// ParseAHAttr reads what FormatAHAttr prints.
func ParseAHAttr(s string) (AHAttr, error) { return parseAttr[AHAttr](s) }
