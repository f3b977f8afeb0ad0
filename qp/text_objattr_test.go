package qp

import (
	"reflect"
	"strings"
	"testing"
)

// objAttrCase is one object's attr file: a value with every field set,
// and its formatter and parser.
type objAttrCase struct {
	name   string
	val    any
	format func() string
	parse  func(string) (any, error)
}

func objAttrCases() []objAttrCase {
	pd := PDAttr{Handle: 7}
	mr := MRAttr{PD: 1, Length: 1 << 40, IOVA: 0x1000, Access: AccessLocalWrite | AccessRemoteRead, LKey: 0x1234,
		RKey: 0x5678, Valid: true, MemOffset: 4096, Memory: "address_space"}
	mw := MWAttr{PD: 1, Type: 2, RKey: 9, Bound: true, MR: 3, Addr: 0xffff_ffff_ffff_ffff, Length: 8, Access: AccessRemoteWrite}
	cq := CQAttr{CQE: 16, WCFlags: CQTimestamp | CQTimestampWallclock, Overflowed: true, Pending: 3, Armed: "solicited", Overflows: 2}
	srq := SRQAttr{PD: 1, MaxWR: 64, MaxSGE: 2, SRQLimit: 8, Pending: 5}
	ah := AHAttr{PD: 1, AH: AH{DGID: [16]byte{0xfe, 0x80, 15: 1}, SGIDIndex: 1, HopLimit: 64, TrafficClass: 3,
		FlowLabel: 0xfffff, SL: 15, DLID: 0xffff, PortNum: 1, StaticRate: 2}}
	return []objAttrCase{
		{"pd", pd, func() string { return FormatPDAttr(&pd) }, func(s string) (any, error) { return ParsePDAttr(s) }},
		{"mr", mr, func() string { return FormatMRAttr(&mr) }, func(s string) (any, error) { return ParseMRAttr(s) }},
		{"mw", mw, func() string { return FormatMWAttr(&mw) }, func(s string) (any, error) { return ParseMWAttr(s) }},
		{"cq", cq, func() string { return FormatCQAttr(&cq) }, func(s string) (any, error) { return ParseCQAttr(s) }},
		{"srq", srq, func() string { return FormatSRQAttr(&srq) }, func(s string) (any, error) { return ParseSRQAttr(s) }},
		{"ah", ah, func() string { return FormatAHAttr(&ah) }, func(s string) (any, error) { return ParseAHAttr(s) }},
	}
}

func TestObjAttrRoundTrip(t *testing.T) {
	for _, c := range objAttrCases() {
		text := c.format()
		got, err := c.parse(text)
		if err != nil {
			t.Fatalf("%s: %v\n%s", c.name, err, text)
		}
		if !reflect.DeepEqual(got, c.val) {
			t.Errorf("%s: round trip\n got %+v\nwant %+v\n%s", c.name, got, c.val, text)
		}
		// Any order of the lines reads the same.
		lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
		for i, j := 0, len(lines)-1; i < j; i, j = i+1, j-1 {
			lines[i], lines[j] = lines[j], lines[i]
		}
		if got, err := c.parse(strings.Join(lines, "\n")); err != nil || !reflect.DeepEqual(got, c.val) {
			t.Errorf("%s reversed: %+v %v", c.name, got, err)
		}
		first, _, _ := strings.Cut(lines[len(lines)-1], "=")
		for in, msg := range map[string]string{
			strings.Join(lines[:len(lines)-1], "\n"): "missing required key",
			text + first + "=1\n":                    "repeated key",
			text + "bogus=1\n":                       "unknown key",
			text + "bogus\n":                         "not a key=value line",
		} {
			_, err := c.parse(in)
			wantTextErr(t, in, err, map[string]string{"missing required key": first, "repeated key": first,
				"unknown key": "bogus", "not a key=value line": "bogus"}[msg], msg)
		}
	}
}

// A CQ without optional completion fields prints wc_flags= empty, which
// reads back.
func TestCQAttrEmptyFlags(t *testing.T) {
	a := CQAttr{CQE: 1, Armed: "none"}
	text := FormatCQAttr(&a)
	if !strings.Contains(text, "wc_flags=\n") {
		t.Fatalf("%q", text)
	}
	if got, err := ParseCQAttr(text); err != nil || got != a {
		t.Fatalf("%+v %v", got, err)
	}
	in := strings.Replace(text, "armed=none", "armed=no\x01ne", 1)
	_, err := ParseCQAttr(in)
	wantTextErr(t, in, err, "armed", "not a word")
}

func FuzzParseObjAttr(f *testing.F) {
	for i, c := range objAttrCases() {
		f.Add(i, c.format())
	}
	f.Fuzz(func(t *testing.T, i int, s string) {
		cs := objAttrCases()
		c := cs[uint(i)%uint(len(cs))]
		v, err := c.parse(s)
		if err != nil {
			fuzzCheckErr(t, err)
			return
		}
		text := formatAny(v)
		again, err := c.parse(text)
		if err != nil || !reflect.DeepEqual(again, v) {
			t.Fatalf("%s: %q read %+v, printed %q, read back %+v %v", c.name, s, v, text, again, err)
		}
	})
}

// formatAny is the formatter of an attr value.
func formatAny(v any) string {
	switch a := v.(type) {
	case PDAttr:
		return FormatPDAttr(&a)
	case MRAttr:
		return FormatMRAttr(&a)
	case MWAttr:
		return FormatMWAttr(&a)
	case CQAttr:
		return FormatCQAttr(&a)
	case SRQAttr:
		return FormatSRQAttr(&a)
	case AHAttr:
		return FormatAHAttr(&a)
	}
	panic("formatAny: unknown attr")
}
