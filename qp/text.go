package qp

// The text grammar shared by every key=value file of the tree (DESIGN.md §3):
// one line of whitespace-separated key=value tokens; numbers are decimal or
// 0x hex; flag sets are comma lists of names or numbers. Parsers here check
// only the grammar and that each value fits its Go field; semantic limits
// (timeout ≤ 31, caps against the device) are checked by their owners.
//
// Every error is an *Error whose Key names the offending token, so the line a
// user reads in an object's `error` file says exactly what to fix.

import (
	"net/netip"
	"strconv"
	"strings"
	"unicode/utf8"
)

// textToken is one key=value pair of a line.
type textToken struct {
	key, val string
}

// textMaxShown bounds how much of a user's token an error message repeats,
// so that a megabyte of garbage yields a one-line error.
const textMaxShown = 64

// textCut shortens s to at most textMaxShown bytes, on a rune boundary.
func textCut(s string) (string, bool) {
	if len(s) <= textMaxShown {
		return s, false
	}
	i := textMaxShown
	for i > textMaxShown-utf8.UTFMax && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i], true
}

// textShow makes s safe to print inside a one-line message: non-printable
// runes and invalid UTF-8 are escaped, and long input is cut.
func textShow(s string) string {
	s, cut := textCut(s)
	for _, r := range s {
		if r == utf8.RuneError || !strconv.IsPrint(r) {
			q := strconv.QuoteToASCII(s)
			s = q[1 : len(q)-1]
			break
		}
	}
	if cut {
		s += "..."
	}
	return s
}

// textQuote is %q of s, cut like textShow.
func textQuote(s string) string {
	s, cut := textCut(s)
	q := strconv.Quote(s)
	if cut {
		q += "..."
	}
	return q
}

// textErr builds the *Error for key (made printable).
func textErr(key, msg string) *Error { return &Error{Key: textShow(key), Msg: msg} }

// textSplit tokenizes a line. Any Unicode whitespace separates tokens, so a
// multi-line paste of an attr file is one request.
func textSplit(s string) ([]textToken, error) {
	fields := strings.Fields(s)
	toks := make([]textToken, 0, len(fields))
	for _, f := range fields {
		k, v, ok := strings.Cut(f, "=")
		switch {
		case !ok:
			return nil, textErr(f, "not a key=value token")
		case k == "":
			return nil, textErr(f, "empty key")
		case v == "":
			return nil, textErr(k, "empty value")
		}
		toks = append(toks, textToken{k, v})
	}
	return toks, nil
}

// textSeen detects repeated keys; one per request.
type textSeen map[string]bool

// add records key and fails if it was given before.
func (s textSeen) add(key string) error {
	if s[key] {
		return textErr(key, "repeated key")
	}
	s[key] = true
	return nil
}

// require fails for the first of keys not given.
func (s textSeen) require(keys ...string) error {
	for _, k := range keys {
		if !s[k] {
			return textErr(k, "missing required key")
		}
	}
	return nil
}

// textNumber parses a decimal or 0x-hex number no larger than max. The
// grammar is deliberately narrower than strconv's base 0: no octal, binary,
// underscores or signs, so "010" is ten, as a user reading it expects.
func textNumber(key, v string, max uint64) (uint64, error) {
	digits, base := v, 10
	if len(v) >= 2 && v[0] == '0' && (v[1] == 'x' || v[1] == 'X') {
		digits, base = v[2:], 16
	}
	n, err := strconv.ParseUint(digits, base, 64)
	if err != nil {
		if ne, ok := err.(*strconv.NumError); ok && ne.Err == strconv.ErrRange {
			return 0, textErr(key, "out of range: "+textShow(v)+" > "+strconv.FormatUint(max, 10))
		}
		if len(v) > 1 && v[0] == '-' {
			if _, err := textNumber(key, v[1:], ^uint64(0)); err == nil {
				return 0, textErr(key, "out of range: "+textShow(v)+" < 0")
			}
		}
		return 0, textErr(key, "not a number: "+textQuote(v))
	}
	if n > max {
		return 0, textErr(key, "out of range: "+textShow(v)+" > "+strconv.FormatUint(max, 10))
	}
	return n, nil
}

// textUint parses a number that must fit T (and max, if smaller).
func textUint[T ~uint8 | ~uint16 | ~uint32 | ~uint64](key, v string, max uint64) (T, error) {
	if limit := uint64(^T(0)); max > limit {
		max = limit
	}
	n, err := textNumber(key, v, max)
	return T(n), err
}

// textFull parses a number using T's full width.
func textFull[T ~uint8 | ~uint16 | ~uint32 | ~uint64](key, v string) (T, error) {
	return textUint[T](key, v, ^uint64(0))
}

// textHandle parses an object handle: a u32 of at least 1, since handle 0
// names no object.
func textHandle(key, v string) (uint32, error) {
	n, err := textFull[uint32](key, v)
	if err == nil && n == 0 {
		return 0, textErr(key, "out of range: 0 < 1")
	}
	return n, err
}

// textBool parses 0 or 1, the way ibv_qp_attr's int flags are written.
func textBool(key, v string) (bool, error) {
	n, err := textNumber(key, v, 1)
	return n == 1, err
}

// textFlags parses a comma list of names (any case) and numbers into a u32
// flag set. It has parseFlags' meaning but textNumber's number grammar, so
// that one number syntax holds across the whole tree.
func textFlags(key, v string, names []flagName) (uint32, error) {
	var out uint32
next:
	for _, part := range strings.Split(v, ",") {
		if part == "" {
			return 0, textErr(key, "empty flag in "+textQuote(v))
		}
		for _, n := range names {
			if strings.EqualFold(part, n.name) {
				out |= n.bit
				continue next
			}
		}
		if c := part[0]; c < '0' || c > '9' {
			return 0, textErr(key, "unknown flag "+textQuote(part))
		}
		n, err := textNumber(key, part, 1<<32-1)
		if err != nil {
			return 0, err
		}
		out |= uint32(n)
	}
	return out, nil
}

// textAccess parses an access-flag list (qp_access_flags, access, bind_access).
func textAccess(key, v string) (Access, error) {
	n, err := textFlags(key, v, accessNames)
	return Access(n), err
}

// ParseGID parses a GID written as an IPv6 address in any form net/netip
// accepts (including ::ffff:1.2.3.4), or a bare IPv4 address, which RoCEv2
// maps to ::ffff:a.b.c.d. Zones are refused: a GID has none.
func ParseGID(s string) ([16]byte, error) {
	a, err := netip.ParseAddr(s)
	if err != nil {
		return [16]byte{}, textErr(KeyDGID, "not an IPv6 or IPv4 address: "+textQuote(s))
	}
	if a.Zone() != "" {
		return [16]byte{}, textErr(KeyDGID, "a GID has no zone: "+textQuote(s))
	}
	return a.As16(), nil
}

// FormatGID prints g in netip's canonical form; an IPv4-mapped GID prints as
// ::ffff:a.b.c.d, which ParseGID reads back to the same bytes.
func FormatGID(g [16]byte) string { return netip.AddrFrom16(g).String() }

// textGID is ParseGID with the error keyed by the token that held it.
func textGID(key, v string) ([16]byte, error) {
	g, err := ParseGID(v)
	if e, ok := err.(*Error); ok {
		e.Key = textShow(key)
	}
	return g, err
}

// textAVKeys sets the address-vector fields named by AVKeys; shared by
// ParseModify (MaskAV) and ParseCreateAH.
var textAVKeys = map[string]func(ah *AH, k, v string) error{
	KeyDGID: func(ah *AH, k, v string) (err error) { ah.DGID, err = textGID(k, v); return },
	KeySGIDIndex: func(ah *AH, k, v string) (err error) {
		ah.SGIDIndex, err = textFull[uint8](k, v)
		return
	},
	KeyHopLimit: func(ah *AH, k, v string) (err error) {
		ah.HopLimit, err = textFull[uint8](k, v)
		return
	},
	KeyTrafficClass: func(ah *AH, k, v string) (err error) {
		ah.TrafficClass, err = textFull[uint8](k, v)
		return
	},
	// The IPv6 flow label is 20 bits wide.
	KeyFlowLabel: func(ah *AH, k, v string) (err error) {
		ah.FlowLabel, err = textUint[uint32](k, v, 1<<20-1)
		return
	},
	// The service level is 4 bits wide (IBA LRH.SL).
	KeySL:   func(ah *AH, k, v string) (err error) { ah.SL, err = textUint[uint8](k, v, 15); return },
	KeyDLID: func(ah *AH, k, v string) (err error) { ah.DLID, err = textFull[uint16](k, v); return },
	KeyStaticRate: func(ah *AH, k, v string) (err error) {
		ah.StaticRate, err = textFull[uint8](k, v)
		return
	},
}

// textFormatAV writes the address-vector keys textAVKeys reads (not
// port_num, which a modify carries apart); shared by FormatModify and
// FormatCreateAH.
func textFormatAV(l *textLine, ah *AH) {
	l.str(KeyDGID, FormatGID(ah.DGID))
	l.num(KeySGIDIndex, uint64(ah.SGIDIndex))
	l.num(KeyHopLimit, uint64(ah.HopLimit))
	l.num(KeyTrafficClass, uint64(ah.TrafficClass))
	l.num(KeyFlowLabel, uint64(ah.FlowLabel))
	l.num(KeySL, uint64(ah.SL))
	l.num(KeyDLID, uint64(ah.DLID))
	l.num(KeyStaticRate, uint64(ah.StaticRate))
}

// textCapKeys sets the ibv_qp_cap fields named by CapKeys; shared by
// ParseModify (MaskCap) and ParseCreateQP.
var textCapKeys = map[string]func(c *Cap, k, v string) error{
	KeyMaxSendWR:     func(c *Cap, k, v string) (err error) { c.MaxSendWR, err = textFull[uint32](k, v); return },
	KeyMaxRecvWR:     func(c *Cap, k, v string) (err error) { c.MaxRecvWR, err = textFull[uint32](k, v); return },
	KeyMaxSendSGE:    func(c *Cap, k, v string) (err error) { c.MaxSendSGE, err = textFull[uint32](k, v); return },
	KeyMaxRecvSGE:    func(c *Cap, k, v string) (err error) { c.MaxRecvSGE, err = textFull[uint32](k, v); return },
	KeyMaxInlineData: func(c *Cap, k, v string) (err error) { c.MaxInlineData, err = textFull[uint32](k, v); return },
}

// textLine accumulates one output line of key=value tokens.
type textLine struct{ b []byte }

func (l *textLine) str(k, v string) {
	if len(l.b) > 0 {
		l.b = append(l.b, ' ')
	}
	l.b = append(l.b, k...)
	l.b = append(l.b, '=')
	l.b = append(l.b, v...)
}

func (l *textLine) num(k string, v uint64) { l.str(k, strconv.FormatUint(v, 10)) }

func (l *textLine) String() string { return string(l.b) }
