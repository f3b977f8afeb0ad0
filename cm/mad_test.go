package cm

import (
	"bytes"
	"encoding/hex"
	"net/netip"
	"reflect"
	"strings"
	"testing"
)

// at is a byte of the MAD at an IBTA message offset (after the header).
func at(b [MADSize]byte, off int) byte { return b[HeaderSize+off] }

func TestHeaderGolden(t *testing.T) {
	b := Encode(0x0102030405060708, &RTU{LocalCommID: 0x11223344, RemoteCommID: 0x55667788})
	want, _ := hex.DecodeString("01070203" + "0000" + "0000" + "0102030405060708" + "0014" + "0000" + "00000000" + "11223344" + "55667788")
	if !bytes.Equal(b[:len(want)], want) {
		t.Fatalf("RTU head\n got %x\nwant %x", b[:len(want)], want)
	}
	for _, c := range b[len(want):] {
		if c != 0 {
			t.Fatal("RTU private data not zero")
		}
	}
}

// TestREQGolden checks every REQ field at its IBTA table 106 offset.
func TestREQGolden(t *testing.T) {
	var lg, rg [16]byte
	for i := range lg {
		lg[i], rg[i] = byte(0xA0+i), byte(0xB0+i)
	}
	m := &REQ{
		LocalCommID: 0xC0FFEE01, ServiceID: ServiceID(PSTCP, 7471), LocalCAGUID: 0x0011223344556677,
		LocalQKey: 0x01234567, LocalQPN: 0xABCDEF, ResponderResources: 4, InitiatorDepth: 3,
		RemoteCMResponseTimeout: 20, TransportType: 0, FlowControl: true,
		StartingPSN: 0x123456, LocalCMResponseTimeout: 20, RetryCount: 7,
		PKey: 0xFFFF, PathMTU: 5, RNRRetryCount: 6, MaxCMRetries: 15, SRQ: true,
		Primary: Path{LocalLID: 0xFFFF, RemoteLID: 0xFFFF, LocalGID: lg, RemoteGID: rg,
			FlowLabel: 0xABCDE, PacketRate: 2, TrafficClass: 0x20, HopLimit: 64, SL: 3,
			SubnetLocal: true, LocalACKTimeout: 19},
	}
	m.PrivateData[0] = 0x00
	m.PrivateData[1] = 0x40
	m.PrivateData[91] = 0x5A
	b := Encode(9, m)
	checks := []struct {
		off  int
		want []byte
		what string
	}{
		{0, []byte{0xC0, 0xFF, 0xEE, 0x01}, "local comm ID"},
		{4, []byte{0, 0, 0, 0}, "reserved"},
		{8, []byte{0, 0, 0, 0, 0x01, 0x06, 0x1D, 0x2F}, "service ID (tcp, 7471)"},
		{16, []byte{0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77}, "local CA GUID"},
		{28, []byte{0x01, 0x23, 0x45, 0x67}, "local Q_Key"},
		{32, []byte{0xAB, 0xCD, 0xEF, 4}, "local QPN, responder resources"},
		{36, []byte{0, 0, 0, 3}, "EECN, initiator depth"},
		{40, []byte{0, 0, 0, 20<<3 | 1}, "remote CM response timeout, RC, flow control"},
		{44, []byte{0x12, 0x34, 0x56, 20<<3 | 7}, "starting PSN, local CM timeout, retry count"},
		{48, []byte{0xFF, 0xFF, 5<<4 | 6, 15<<4 | 1<<3}, "P_Key, MTU, RNR retry, max CM retries, SRQ"},
		{52, []byte{0xFF, 0xFF, 0xFF, 0xFF}, "LIDs"},
		{56, lg[:], "primary local GID"},
		{72, rg[:], "primary remote GID"},
		{88, []byte{0xAB, 0xCD, 0xE0, 2, 0x20, 64, 3<<4 | 1<<3, 19 << 3}, "flow label, rate, TC, hop limit, SL, subnet local, ACK timeout"},
		{140, []byte{0x00, 0x40}, "private data"},
		{231, []byte{0x5A}, "private data end"},
	}
	for _, c := range checks {
		got := b[HeaderSize+c.off : HeaderSize+c.off+len(c.want)]
		if !bytes.Equal(got, c.want) {
			t.Errorf("%s @%d: got %x want %x", c.what, c.off, got, c.want)
		}
	}
	_, back, err := Decode(b[:])
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, Msg(m)) {
		t.Errorf("round trip:\n got %+v\nwant %+v", back, m)
	}
}

func TestMessagesGolden(t *testing.T) {
	cases := []struct {
		name string
		m    Msg
		off  map[int]byte // message offset → byte
	}{
		{"mra", &MRA{LocalCommID: 1, RemoteCommID: 2, MessageMRAed: MsgREQ, ServiceTimeout: 24},
			map[int]byte{3: 1, 7: 2, 8: 0, 9: 24 << 3}},
		{"rej", &REJ{LocalCommID: 3, RemoteCommID: 4, MessageRejected: MsgREP, ARILength: 8, Reason: RejConsumerDefined,
			PrivateData: [REJPrivateLen]byte{0: 0xEE, 147: 0xEF}},
			map[int]byte{3: 3, 7: 4, 8: 1 << 6, 9: 8 << 1, 10: 0, 11: 28, 84: 0xEE, 231: 0xEF}},
		{"rep", &REP{LocalCommID: 5, RemoteCommID: 6, LocalQKey: 0x01020304, LocalQPN: 0x112233, StartingPSN: 0x445566,
			ResponderResources: 7, InitiatorDepth: 8, TargetACKDelay: 15, FlowControl: true, RNRRetryCount: 7, SRQ: true,
			LocalCAGUID: 0x99, PrivateData: [REPPrivateLen]byte{0: 0xAA, 195: 0xAB}},
			map[int]byte{3: 5, 7: 6, 8: 1, 11: 4, 12: 0x11, 14: 0x33, 20: 0x44, 22: 0x66, 24: 7, 25: 8,
				26: 15<<3 | 1, 27: 7<<5 | 1<<4, 35: 0x99, 36: 0xAA, 231: 0xAB}},
		{"dreq", &DREQ{LocalCommID: 9, RemoteCommID: 10, RemoteQPN: 0xABCDEF},
			map[int]byte{3: 9, 7: 10, 8: 0xAB, 9: 0xCD, 10: 0xEF, 11: 0}},
		{"drep", &DREP{LocalCommID: 11, RemoteCommID: 12}, map[int]byte{3: 11, 7: 12}},
		{"sidr_req", &SIDRReq{RequestID: 13, PKey: 0xFFFF, ServiceID: ServiceID(PSUDP, 7174),
			PrivateData: [SIDRReqPrivateLen]byte{0: 0, 1: 0x40}},
			map[int]byte{3: 13, 4: 0xFF, 5: 0xFF, 12: 0x01, 13: 0x11, 14: 0x1C, 15: 0x06, 17: 0x40}},
		{"sidr_rep", &SIDRRep{RequestID: 14, Status: SIDRReject, QPN: 0x010203, ServiceID: ServiceID(PSUDP, 1),
			QKey: 0x01234567, PrivateData: [SIDRRepPrivateLen]byte{0: 0xCC}},
			map[int]byte{3: 14, 4: 2, 8: 1, 9: 2, 10: 3, 17: 0x11, 19: 1, 20: 0x01, 23: 0x67, 96: 0xCC}},
	}
	for _, c := range cases {
		b := Encode(1, c.m)
		for off, want := range c.off {
			if got := at(b, off); got != want {
				t.Errorf("%s @%d: got %#x want %#x", c.name, off, got, want)
			}
		}
		_, back, err := Decode(b[:])
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if !reflect.DeepEqual(back, c.m) {
			t.Errorf("%s round trip:\n got %+v\nwant %+v", c.name, back, c.m)
		}
		if AttrName(c.m.attrID()) != c.name {
			t.Errorf("AttrName %s", AttrName(c.m.attrID()))
		}
	}
}

func TestDecodeRefuses(t *testing.T) {
	good := Encode(1, &RTU{})
	mod := func(f func(b []byte)) []byte { b := good; f(b[:]); return b[:] }
	cases := []struct {
		name string
		b    []byte
		want error
	}{
		{"short", good[:255], ErrSize},
		{"long", append(good[:], 0), ErrSize},
		{"base version", mod(func(b []byte) { b[0] = 2 }), ErrNotCM},
		{"class", mod(func(b []byte) { b[1] = 0x81 }), ErrNotCM},
		{"class version", mod(func(b []byte) { b[2] = 1 }), ErrVersion},
		{"response method", mod(func(b []byte) { b[3] = 0x83 }), ErrMethod},
		{"LAP", mod(func(b []byte) { b[17] = 0x19 }), ErrAttribute},
		{"unknown attr", mod(func(b []byte) { b[16] = 0xFF }), ErrAttribute},
	}
	for _, c := range cases {
		if _, _, err := Decode(c.b); err != c.want {
			t.Errorf("%s: got %v want %v", c.name, err, c.want)
		}
	}
}

func TestCMAHdr(t *testing.T) {
	for _, c := range []struct {
		src, dst string
		hex      string
	}{
		{"192.168.1.2:40000", "10.0.0.1:7471",
			"00409c40" + strings.Repeat("00", 12) + "c0a80102" + strings.Repeat("00", 12) + "0a000001"},
		{"[fe80::1]:1", "[2001:db8::2]:2",
			"00600001" + "fe800000000000000000000000000001" + "20010db8000000000000000000000002"},
	} {
		h := CMAHdr{Src: netip.MustParseAddrPort(c.src), Dst: netip.MustParseAddrPort(c.dst)}
		var b [CMAHdrLen]byte
		PutCMAHdr(b[:], h)
		if got := hex.EncodeToString(b[:]); got != c.hex {
			t.Errorf("%s→%s:\n got %s\nwant %s", c.src, c.dst, got, c.hex)
		}
		back, err := ParseCMAHdr(b[:], h.Dst.Port())
		if err != nil || back != h {
			t.Errorf("parse: %v %v", back, err)
		}
	}
	if _, err := ParseCMAHdr(make([]byte, 36), 1); err != ErrCMAHdr {
		t.Errorf("ip version 0: %v", err)
	}
	if _, err := ParseCMAHdr([]byte{0, 0x40}, 1); err != ErrCMAHdr {
		t.Errorf("short: %v", err)
	}
}

func TestServiceID(t *testing.T) {
	if ServiceID(PSTCP, 7471) != 0x0000000001061D2F {
		t.Fatalf("%#x", ServiceID(PSTCP, 7471))
	}
	ps, port, ok := SplitServiceID(0x0000000001110005)
	if !ok || ps != PSUDP || port != 5 {
		t.Fatal(ps, port, ok)
	}
	if _, _, ok := SplitServiceID(0x1000000001060001); ok {
		t.Fatal("non-IP service ID accepted")
	}
	if _, _, ok := SplitServiceID(0x0000000001230001); ok {
		t.Fatal("unknown port space accepted")
	}
}

func FuzzDecodeMAD(f *testing.F) {
	for _, m := range []Msg{&REQ{}, &MRA{}, &REJ{}, &REP{}, &RTU{}, &DREQ{}, &DREP{}, &SIDRReq{}, &SIDRRep{}} {
		b := Encode(1, m)
		f.Add(b[:])
	}
	f.Add([]byte{1, 7, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, m, err := Decode(b)
		if err != nil {
			return
		}
		// What decodes re-encodes to a MAD that decodes the same.
		out := Encode(h.TID, m)
		_, m2, err := Decode(out[:])
		if err != nil || !reflect.DeepEqual(m, m2) {
			t.Fatalf("re-decode: %v", err)
		}
		_, _ = ParseCMAHdr(b[HeaderSize:], 0)
	})
}
