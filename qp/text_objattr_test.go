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
	dev := DeviceFile{Attr: DeviceAttr{FwVer: "rdmafs 0.1", NodeGUID: 0x0200_00ff_fe00_0001, SysImageGUID: 1,
		MaxMRSize: 1 << 40, PageSizeCap: 4096, VendorID: 1, VendorPartID: 2, HwVer: 3, MaxQP: 4, MaxQPWR: 5,
		DeviceCapFlags: 6, DeviceCapFlagsEx: 1 << 40, MaxSGE: 7, MaxSGERd: 8, MaxCQ: 9, MaxCQE: 10, MaxMR: 11,
		MaxPD: 12, MaxQPRdAtom: 13, MaxResRdAtom: 14, MaxQPInitRdAtom: 15, AtomicCap: "hca", MaxMW: 16,
		MaxAH: 17, MaxSRQ: 18, MaxSRQWR: 19, MaxSRQSGE: 20, MaxPKeys: 21, LocalCAAckDelay: 22, PhysPortCnt: 1,
		MaxInlineData: 23, MaxTotalMRBytes: 1 << 33, ReservedOps: 24, HCACoreClock: 1000000,
		CompletionTimestampMask: ^uint64(0), MaxMcastGrp: 25, MaxMcastQPAttach: 26, MaxTotalMcastQPAttach: 27},
		Engines: 2, UserShare: 50, PerUser: UserLimits{QP: 1, CQ: 2, MR: 3, PD: 4, MW: 5, AH: 6, SRQ: 7,
			TotalMRBytes: 8, McastGrp: 9, TotalMcastQPAttach: 10, EventReaders: 11, Captures: 12}}
	port := PortAttr{PortNum: 1, State: "ACTIVE", MaxMTU: MTU4096, ActiveMTU: MTU1024, GID: [16]byte{10: 0xff, 11: 0xff, 12: 127, 15: 1},
		LID: 0, LinkLayer: "Ethernet", GIDTblLen: 1, PKeyTblLen: 1, MaxMsgSz: 1 << 31}
	clk := ClockFile{RawClock: 123456789, WallclockNS: 1 << 62}
	return []objAttrCase{
		{"device", dev, func() string { return FormatDeviceFile(&dev) }, func(s string) (any, error) { return ParseDeviceFile(s) }},
		{"port", port, func() string { return FormatPortAttr(&port) }, func(s string) (any, error) { return ParsePortAttr(s) }},
		{"clock", clk, func() string { return FormatClockFile(&clk) }, func(s string) (any, error) { return ParseClockFile(s) }},
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
	case DeviceFile:
		return FormatDeviceFile(&a)
	case PortAttr:
		return FormatPortAttr(&a)
	case ClockFile:
		return FormatClockFile(&a)
	}
	panic("formatAny: unknown attr")
}

// The device file prints GUIDs and the timestamp mask as 16 hex digits,
// the firmware version with its space, MTUs in bytes.
func TestDeviceFileForms(t *testing.T) {
	f := DeviceFile{Attr: DeviceAttr{FwVer: "rdmafs 0.1", NodeGUID: 0x20000fffe000001, CompletionTimestampMask: 0xff}}
	text := FormatDeviceFile(&f)
	for _, want := range []string{"fw_ver=rdmafs 0.1\n", "node_guid=0x020000fffe000001\n", "completion_timestamp_mask=0x00000000000000ff\n"} {
		if !strings.Contains(text, want) {
			t.Errorf("device file lacks %q:\n%s", want, text)
		}
	}
	p := PortAttr{MaxMTU: MTU4096, ActiveMTU: MTU256}
	if text := FormatPortAttr(&p); !strings.Contains(text, "max_mtu=4096\nactive_mtu=256\n") {
		t.Errorf("port file:\n%s", text)
	}
}
