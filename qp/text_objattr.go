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

// SRQAttr is srq/N/attr. SRQType is basic or xrc; an XRC SRQ has its
// number (ibv_get_srq_num, what XRC senders name) and its CQ, 0 otherwise.
type SRQAttr struct {
	PD       uint32
	MaxWR    uint32
	MaxSGE   uint32
	SRQLimit uint32
	Pending  uint32
	SRQType  string
	SRQNum   uint32
	CQ       uint32
}

// XRCDAttr is xrcd/N/attr: whether the domain is a file's.
type XRCDAttr struct {
	Shared bool
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

func (a *PDAttr) fields() []textField { return []textField{fieldU(KeyHandle, &a.Handle)} }

func (a *MRAttr) fields() []textField {
	return []textField{fieldU(KeyPD, &a.PD), fieldU(KeyLength, &a.Length), fieldU(KeyIOVA, &a.IOVA),
		fieldAccess(KeyAccess, &a.Access), fieldU(KeyLKey, &a.LKey), fieldU(KeyRKey, &a.RKey),
		fieldBool(KeyValid, &a.Valid), fieldU(KeyMemOffset, &a.MemOffset), fieldWord(KeyMemory, &a.Memory)}
}

func (a *MWAttr) fields() []textField {
	return []textField{fieldU(KeyPD, &a.PD), fieldU(KeyType, &a.Type), fieldU(KeyRKey, &a.RKey),
		fieldBool(KeyBound, &a.Bound), fieldU(KeyMR, &a.MR), fieldU(KeyAddr, &a.Addr), fieldU(KeyLength, &a.Length),
		fieldAccess(KeyAccess, &a.Access)}
}

func (a *CQAttr) fields() []textField {
	return []textField{fieldU(KeyCQE, &a.CQE), fieldCQWCFlags(KeyWcFlags, &a.WCFlags),
		fieldBool(KeyOverflowed, &a.Overflowed), fieldU(KeyPending, &a.Pending), fieldWord(KeyArmed, &a.Armed),
		fieldU(KeyOverflows, &a.Overflows)}
}

func (a *SRQAttr) fields() []textField {
	return []textField{fieldU(KeyPD, &a.PD), fieldU(KeyMaxWR, &a.MaxWR), fieldU(KeyMaxSGE, &a.MaxSGE),
		fieldU(KeySRQLimit, &a.SRQLimit), fieldU(KeyPending, &a.Pending), fieldWord(KeySRQType, &a.SRQType),
		fieldU(KeySRQNum, &a.SRQNum), fieldU(KeyCQ, &a.CQ)}
}

func (a *XRCDAttr) fields() []textField { return []textField{fieldBool(KeyShared, &a.Shared)} }

func (a *AHAttr) fields() []textField {
	h := &a.AH
	return []textField{fieldU(KeyPD, &a.PD), fieldGID(KeyDGID, &h.DGID), fieldU(KeySGIDIndex, &h.SGIDIndex),
		fieldU(KeyHopLimit, &h.HopLimit), fieldU(KeyTrafficClass, &h.TrafficClass),
		fieldU(KeyFlowLabel, &h.FlowLabel), fieldU(KeySL, &h.SL), fieldU(KeyDLID, &h.DLID),
		fieldU(KeyPortNum, &h.PortNum), fieldU(KeyStaticRate, &h.StaticRate)}
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

// FormatXRCDAttr prints xrcd/N/attr.
func FormatXRCDAttr(a *XRCDAttr) string { return formatAttr(a) }

// ParseXRCDAttr reads what FormatXRCDAttr prints.
func ParseXRCDAttr(s string) (XRCDAttr, error) { return parseAttr[XRCDAttr](s) }

// FormatAHAttr prints ah/N/attr.
func FormatAHAttr(a *AHAttr) string { return formatAttr(a) }

// ParseAHAttr reads what FormatAHAttr prints.
func ParseAHAttr(s string) (AHAttr, error) { return parseAttr[AHAttr](s) }
