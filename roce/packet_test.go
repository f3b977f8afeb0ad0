package roce

import (
	"bytes"
	"encoding/hex"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// The header bytes of fullPacket's fields, written out by hand from the
// layouts of VERBS.md §8.4 (not from the code under test).
const (
	hexRETH      = "0102030405060708" + "11121314" + "21222324"
	hexAtomicETH = "0102030405060708" + "11121314" + "3132333435363738" + "4142434445464748"
	hexAETH      = "61" + "515253"
	hexAtomicAck = "6162636465666768"
	hexImmDt     = "71727374"
	hexIETH      = "81828384"
	hexDETH      = "91929394" + "00" + "a2a3a4"
	hexXRCETH    = "00" + "d1d2d3" // reserved byte, then the XRC SRQ number
	hexFETH      = "00000025"      // selectivity level 2 (bits 5:4), placement type 5
)

// opcodeRows lists every opcode of VERBS.md §8.3 that rxe sends or receives
// on RC, UC and UD, with its extension headers in wire order.
var opcodeRows = []struct {
	op      Opcode
	ext     string
	payload bool
}{
	{RCSendFirst, "", true},
	{RCSendMiddle, "", true},
	{RCSendLast, "", true},
	{RCSendLastImm, hexImmDt, true},
	{RCSendOnly, "", true},
	{RCSendOnlyImm, hexImmDt, true},
	{RCWriteFirst, hexRETH, true},
	{RCWriteMiddle, "", true},
	{RCWriteLast, "", true},
	{RCWriteLastImm, hexImmDt, true},
	{RCWriteOnly, hexRETH, true},
	{RCWriteOnlyImm, hexRETH + hexImmDt, true},
	{RCReadRequest, hexRETH, false},
	{RCReadResponseFirst, hexAETH, true},
	{RCReadResponseMiddle, "", true},
	{RCReadResponseLast, hexAETH, true},
	{RCReadResponseOnly, hexAETH, true},
	{RCAcknowledge, hexAETH, false},
	{RCAtomicAcknowledge, hexAETH + hexAtomicAck, false},
	{RCCompareSwap, hexAtomicETH, false},
	{RCFetchAdd, hexAtomicETH, false},
	{RCSendLastInv, hexIETH, true},
	{RCSendOnlyInv, hexIETH, true},
	{RCFlush, hexFETH + hexRETH, false},
	{RCAtomicWrite, hexRETH, true},
	{UCSendFirst, "", true},
	{UCSendMiddle, "", true},
	{UCSendLast, "", true},
	{UCSendLastImm, hexImmDt, true},
	{UCSendOnly, "", true},
	{UCSendOnlyImm, hexImmDt, true},
	{UCWriteFirst, hexRETH, true},
	{UCWriteMiddle, "", true},
	{UCWriteLast, "", true},
	{UCWriteLastImm, hexImmDt, true},
	{UCWriteOnly, hexRETH, true},
	{UCWriteOnlyImm, hexRETH + hexImmDt, true},
	{UDSendOnly, hexDETH, true},
	{UDSendOnlyImm, hexDETH + hexImmDt, true},
	// XRC (IBA 9.2, 9.3.7): RC's operations, requests with the XRCETH
	// first, responses without it.
	{XRCSendFirst, hexXRCETH, true},
	{XRCSendMiddle, hexXRCETH, true},
	{XRCSendLast, hexXRCETH, true},
	{XRCSendLastImm, hexXRCETH + hexImmDt, true},
	{XRCSendOnly, hexXRCETH, true},
	{XRCSendOnlyImm, hexXRCETH + hexImmDt, true},
	{XRCWriteFirst, hexXRCETH + hexRETH, true},
	{XRCWriteMiddle, hexXRCETH, true},
	{XRCWriteLast, hexXRCETH, true},
	{XRCWriteLastImm, hexXRCETH + hexImmDt, true},
	{XRCWriteOnly, hexXRCETH + hexRETH, true},
	{XRCWriteOnlyImm, hexXRCETH + hexRETH + hexImmDt, true},
	{XRCReadRequest, hexXRCETH + hexRETH, false},
	{XRCReadResponseFirst, hexAETH, true},
	{XRCReadResponseMiddle, "", true},
	{XRCReadResponseLast, hexAETH, true},
	{XRCReadResponseOnly, hexAETH, true},
	{XRCAcknowledge, hexAETH, false},
	{XRCAtomicAcknowledge, hexAETH + hexAtomicAck, false},
	{XRCCompareSwap, hexXRCETH + hexAtomicETH, false},
	{XRCFetchAdd, hexXRCETH + hexAtomicETH, false},
	{XRCSendLastInv, hexXRCETH + hexIETH, true},
	{XRCSendOnlyInv, hexXRCETH + hexIETH, true},
}

// fullPacket returns a packet of opcode op with every field set to a
// distinct value (those of the hex constants above), then the fields op
// does not carry cleared, as ParseIB leaves them.
func fullPacket(op Opcode, payload []byte) Packet {
	p := Packet{
		Opcode: op, SE: true, MigReq: true, PKey: 0xFFFF, FECN: true, DestQP: 0xB1B2B3,
		AckReq: true, PSN: 0xC1C2C3,
		VA: 0x0102030405060708, RKey: 0x11121314, DMALen: 0x21222324,
		SwapAdd: 0x3132333435363738, Compare: 0x4142434445464748,
		Syndrome: 0x61, MSN: 0x515253, OrigData: 0x6162636465666768,
		Imm: 0x71727374, InvRKey: 0x81828384, QKey: 0x91929394, SrcQP: 0xA2A3A4,
		FlushType: 5, FlushLevel: 2, XRCSRQ: 0xD1D2D3,
		Payload: payload,
	}
	p.PadCnt = uint8(padLen(len(payload)))
	h, _ := op.Headers()
	if h&(HdrRETH|HdrAtomicETH) == 0 {
		p.VA, p.RKey = 0, 0
	}
	if h&HdrRETH == 0 {
		p.DMALen = 0
	}
	if h&HdrAtomicETH == 0 {
		p.SwapAdd, p.Compare = 0, 0
	}
	if h&HdrAETH == 0 {
		p.Syndrome, p.MSN = 0, 0
	}
	if h&HdrAtomicAckETH == 0 {
		p.OrigData = 0
	}
	if h&HdrImmDt == 0 {
		p.Imm = 0
	}
	if h&HdrIETH == 0 {
		p.InvRKey = 0
	}
	if h&HdrDETH == 0 {
		p.QKey, p.SrcQP = 0, 0
	}
	if h&HdrFETH == 0 {
		p.FlushType, p.FlushLevel = 0, 0
	}
	if h&HdrXRCETH == 0 {
		p.XRCSRQ = 0
	}
	return p
}

// equalPacket compares packets field by field, payloads by content (an
// empty payload may be nil or not).
func equalPacket(a, b Packet) bool {
	if !bytes.Equal(a.Payload, b.Payload) {
		return false
	}
	a.Payload, b.Payload = nil, nil
	return reflect.DeepEqual(a, b)
}

func TestOpcodeTable(t *testing.T) {
	want := map[Opcode]bool{}
	for _, r := range opcodeRows {
		want[r.op] = true
		hl, ok := HeaderLen(r.op)
		if !ok || hl != BTHLen+len(r.ext)/2 {
			t.Errorf("HeaderLen(%v) = %d, %v; want %d", r.op, hl, ok, BTHLen+len(r.ext)/2)
		}
		if r.op.HasPayload() != r.payload {
			t.Errorf("%v HasPayload = %v", r.op, r.op.HasPayload())
		}
		h, _ := r.op.Headers()
		if h.Len() != len(r.ext)/2 {
			t.Errorf("%v Headers().Len() = %d", r.op, h.Len())
		}
		if hl > MaxHeaderLen {
			t.Errorf("%v: header %d > MaxHeaderLen", r.op, hl)
		}
		prefix := map[Opcode]string{TransportRC: "RC_", TransportUC: "UC_", TransportUD: "UD_", TransportXRC: "XRC_"}[r.op.Transport()]
		if !strings.HasPrefix(r.op.String(), prefix) {
			t.Errorf("%#x is named %q", byte(r.op), r.op)
		}
	}
	for i := range 256 {
		op := Opcode(i)
		if op.Valid() != want[op] {
			t.Errorf("%#x (%v) Valid = %v", i, op, op.Valid())
		}
		if _, ok := HeaderLen(op); ok != want[op] {
			t.Errorf("HeaderLen(%#x) ok = %v", i, ok)
		}
	}
	if RCCompareSwap.String() != "RC_COMPARE_SWAP" || UDSendOnlyImm.String() != "UD_SEND_ONLY_WITH_IMMEDIATE" ||
		Opcode(0x15).String() != "OPCODE_0x15" {
		t.Errorf("names: %v %v %v", RCCompareSwap, UDSendOnlyImm, Opcode(0x15))
	}
	if UCWriteOnly.Transport() != TransportUC || UCWriteOnly.Op() != OpWriteOnly {
		t.Errorf("Transport/Op of %v", UCWriteOnly)
	}
}

// TestRoundTripEveryOpcode encodes a packet of each opcode with all fields
// set, compares the bytes with the hand-written layout and decodes them
// back.
func TestRoundTripEveryOpcode(t *testing.T) {
	for _, r := range opcodeRows {
		t.Run(r.op.String(), func(t *testing.T) {
			var payload []byte
			b1 := "c0" // SE, MigReq, pad 0, TVer 0
			if r.payload {
				payload = []byte("hello")
				b1 = "f0" // pad 3
			}
			p := fullPacket(r.op, payload)
			want := hex.EncodeToString([]byte{byte(r.op)}) + b1 + "ffff" + "80b1b2b3" + "80c1c2c3" + r.ext
			if r.payload {
				want += hex.EncodeToString(payload) + "000000"
			}
			got, err := p.AppendIB([]byte("prefix"))
			if err != nil {
				t.Fatal(err)
			}
			if string(got[:6]) != "prefix" || hex.EncodeToString(got[6:]) != want {
				t.Fatalf("AppendIB\n got %x\nwant %s", got[6:], want)
			}
			if p.IBLen() != len(want)/2 {
				t.Errorf("IBLen %d, want %d", p.IBLen(), len(want)/2)
			}
			var q Packet
			if err := ParseIB(got[6:], &q); err != nil {
				t.Fatal(err)
			}
			if !equalPacket(p, q) {
				t.Fatalf("ParseIB\n got %+v\nwant %+v", q, p)
			}
		})
	}
}

// TestFieldsIndependent changes one field at a time on a packet carrying it
// and checks that exactly that field comes back changed.
func TestFieldsIndependent(t *testing.T) {
	type mut struct {
		name string
		op   Opcode
		set  func(*Packet)
	}
	muts := []mut{
		{"SE", RCSendOnly, func(p *Packet) { p.SE = false }},
		{"MigReq", RCSendOnly, func(p *Packet) { p.MigReq = false }},
		{"PKey", RCSendOnly, func(p *Packet) { p.PKey = 0x8001 }},
		{"FECN", RCSendOnly, func(p *Packet) { p.FECN = false }},
		{"BECN", RCSendOnly, func(p *Packet) { p.BECN = true }},
		{"DestQP", RCSendOnly, func(p *Packet) { p.DestQP = QPNMask }},
		{"AckReq", RCSendOnly, func(p *Packet) { p.AckReq = false }},
		{"PSN", RCSendOnly, func(p *Packet) { p.PSN = 0 }},
		{"VA", RCWriteOnly, func(p *Packet) { p.VA = ^uint64(0) }},
		{"RKey", RCReadRequest, func(p *Packet) { p.RKey = 7 }},
		{"DMALen", RCReadRequest, func(p *Packet) { p.DMALen = 1 << 31 }},
		{"SwapAdd", RCFetchAdd, func(p *Packet) { p.SwapAdd = 1 }},
		{"Compare", RCCompareSwap, func(p *Packet) { p.Compare = 2 }},
		{"CompareVA", RCCompareSwap, func(p *Packet) { p.VA = 8 }},
		{"Syndrome", RCAcknowledge, func(p *Packet) { p.Syndrome = 0x1F }},
		{"MSN", RCAcknowledge, func(p *Packet) { p.MSN = MSNMask }},
		{"OrigData", RCAtomicAcknowledge, func(p *Packet) { p.OrigData = 3 }},
		{"Imm", RCWriteOnlyImm, func(p *Packet) { p.Imm = 0xDEADBEEF }},
		{"InvRKey", RCSendOnlyInv, func(p *Packet) { p.InvRKey = 0 }},
		{"QKey", UDSendOnlyImm, func(p *Packet) { p.QKey = 0x80000000 }},
		{"SrcQP", UDSendOnlyImm, func(p *Packet) { p.SrcQP = 1 }},
		{"FlushType", RCFlush, func(p *Packet) { p.FlushType = 0xF }},
		{"FlushLevel", RCFlush, func(p *Packet) { p.FlushLevel = 3 }},
	}
	for _, m := range muts {
		var payload []byte
		if m.op.HasPayload() {
			payload = []byte{1, 2, 3, 4, 5, 6}
		}
		base := fullPacket(m.op, payload)
		changed := base
		m.set(&changed)
		if reflect.DeepEqual(base, changed) {
			t.Fatalf("%s: mutation changes nothing", m.name)
		}
		b0, err0 := base.AppendIB(nil)
		b1, err1 := changed.AppendIB(nil)
		if err0 != nil || err1 != nil {
			t.Fatalf("%s: %v %v", m.name, err0, err1)
		}
		if bytes.Equal(b0, b1) {
			t.Errorf("%s: not encoded", m.name)
		}
		var q Packet
		if err := ParseIB(b1, &q); err != nil {
			t.Fatalf("%s: %v", m.name, err)
		}
		if !equalPacket(q, changed) {
			t.Errorf("%s:\n got %+v\nwant %+v", m.name, q, changed)
		}
	}
}

func TestPad(t *testing.T) {
	data := []byte("abcdefg")
	for n := 0; n <= 7; n++ {
		p := Packet{Opcode: RCSendOnly, PKey: 0xFFFF, Payload: data[:n]}
		b, err := p.AppendIB(nil)
		if err != nil {
			t.Fatal(err)
		}
		pad := (4 - n%4) % 4
		if len(b) != BTHLen+n+pad || len(b)%4 != 0 || int(b[1]>>4&3) != pad {
			t.Fatalf("n=%d: len %d, BTH byte 1 %#x", n, len(b), b[1])
		}
		if !bytes.Equal(b[BTHLen+n:], make([]byte, pad)) {
			t.Fatalf("n=%d: pad bytes %x", n, b[BTHLen+n:])
		}
		// Pad bytes are not checked by the receiver.
		for i := BTHLen + n; i < len(b); i++ {
			b[i] = 0xEE
		}
		var q Packet
		if err := ParseIB(b, &q); err != nil {
			t.Fatalf("n=%d: %v", n, err)
		}
		if !bytes.Equal(q.Payload, data[:n]) || int(q.PadCnt) != pad {
			t.Fatalf("n=%d: payload %q pad %d", n, q.Payload, q.PadCnt)
		}
		if cap(q.Payload) != n {
			t.Errorf("n=%d: payload capacity %d reaches into the pad", n, cap(q.Payload))
		}
		// A stale PadCnt is ignored: marshalling derives it.
		q.PadCnt = 2
		b2, _ := q.AppendIB(nil)
		if int(b2[1]>>4&3) != pad {
			t.Errorf("n=%d: PadCnt field leaked into the BTH", n)
		}
	}
}

func TestParseIBAliases(t *testing.T) {
	p := Packet{Opcode: RCSendOnly, Payload: []byte("abcd")}
	b, _ := p.AppendIB(nil)
	var q Packet
	if err := ParseIB(b, &q); err != nil {
		t.Fatal(err)
	}
	b[BTHLen] = 'X'
	if q.Payload[0] != 'X' {
		t.Fatal("Payload does not alias the input")
	}
}

func TestParseIBErrors(t *testing.T) {
	bth := func(op, b1 byte, extra int) []byte {
		b := make([]byte, BTHLen+extra)
		b[0], b[1], b[2], b[3] = op, b1, 0xFF, 0xFF
		return b
	}
	cases := []struct {
		name string
		b    []byte
		want error
	}{
		{"nil", nil, ErrShort},
		{"11 bytes", bth(0x04, 0, 0)[:11], ErrShort},
		{"reserved op 0x15", bth(0x15, 0, 0), ErrOpcode},
		{"reserved op 0x18", bth(0x18, 0, 0), ErrOpcode},
		{"RD", bth(0x44, 0, 16), ErrOpcode},
		{"UD write", bth(0x6A, 0, 16), ErrOpcode},
		{"UC read", bth(0x2C, 0, 16), ErrOpcode},
		{"CNP", bth(0x81, 0, 16), ErrOpcode},
		{"vendor", bth(0xE0, 0, 0), ErrOpcode},
		{"TVer 1", bth(0x04, 0x01, 0), ErrTVer},
		{"TVer 15", bth(0x04, 0x0F, 0), ErrTVer},
		{"UD without DETH", bth(0x64, 0, 4), ErrShort},
		{"ACK without AETH", bth(0x11, 0, 0), ErrShort},
		{"CAS short AtomicETH", bth(0x13, 0, 24), ErrShort},
		{"unaligned", bth(0x04, 0, 1), ErrAlign},
		{"unaligned 2", bth(0x04, 0, 6), ErrAlign},
		{"pad without payload", bth(0x04, 0x10, 0), ErrPad},
		{"pad 3 without payload", bth(0x04, 0x30, 0), ErrPad},
		{"ACK with pad", bth(0x11, 0x10, 4), ErrPad},
		{"ACK with payload", bth(0x11, 0, 8), ErrPayload},
		{"READ request with payload", bth(0x0C, 0, 20), ErrPayload},
		{"FLUSH with payload", bth(0x1C, 0, 24), ErrPayload},
		{"ok: empty SEND", bth(0x04, 0, 0), nil},
		{"ok: SEND 1 byte", bth(0x04, 0x30, 4), nil},
		{"ok: ACK", bth(0x11, 0, 4), nil},
		{"ok: reserved bits", append([]byte{0x04, 0x80, 0, 0, 0x3F, 1, 2, 3, 0x7F, 4, 5, 6}, 1, 2, 3, 4), nil},
	}
	for _, c := range cases {
		var p Packet
		err := ParseIB(c.b, &p)
		if err != c.want { // identity: the errors are never wrapped
			t.Errorf("%s: ParseIB = %v, want %v", c.name, err, c.want)
		}
	}
}

// TestParseIBTruncated cuts an encoded packet of every opcode at every
// length: too short for the headers is ErrShort, unaligned is an error,
// and nothing panics.
func TestParseIBTruncated(t *testing.T) {
	for _, r := range opcodeRows {
		var payload []byte
		if r.payload {
			payload = bytes.Repeat([]byte{0xAB}, 9)
		}
		p := fullPacket(r.op, payload)
		b, err := p.AppendIB(nil)
		if err != nil {
			t.Fatal(err)
		}
		hl, _ := HeaderLen(r.op)
		for k := 0; k < len(b); k++ {
			var q Packet
			err := ParseIB(b[:k], &q)
			switch {
			case k < hl:
				if err != ErrShort {
					t.Errorf("%v cut at %d: %v, want ErrShort", r.op, k, err)
				}
			case k%4 != 0:
				if err != ErrAlign {
					t.Errorf("%v cut at %d: %v, want ErrAlign", r.op, k, err)
				}
			case err == nil && len(q.Payload)+int(q.PadCnt) != k-hl:
				t.Errorf("%v cut at %d: payload %d + pad %d", r.op, k, len(q.Payload), q.PadCnt)
			}
		}
	}
}

func TestMarshalErrors(t *testing.T) {
	cases := []struct {
		name string
		p    Packet
		want error
	}{
		{"invalid opcode", Packet{Opcode: 0x15}, ErrOpcode},
		{"RD opcode", Packet{Opcode: 0x40}, ErrOpcode},
		{"DestQP", Packet{Opcode: RCSendOnly, DestQP: 1 << 24}, ErrRange},
		{"PSN", Packet{Opcode: RCSendOnly, PSN: 1 << 24}, ErrRange},
		{"TVer", Packet{Opcode: RCSendOnly, TVer: 16}, ErrRange},
		{"MSN", Packet{Opcode: RCAcknowledge, MSN: 1 << 24}, ErrRange},
		{"SrcQP", Packet{Opcode: UDSendOnly, SrcQP: 1 << 24}, ErrRange},
		{"FlushType", Packet{Opcode: RCFlush, FlushType: 16}, ErrRange},
		{"FlushLevel", Packet{Opcode: RCFlush, FlushLevel: 4}, ErrRange},
		{"ACK payload", Packet{Opcode: RCAcknowledge, Payload: []byte{1}}, ErrPayload},
		{"MSN unused", Packet{Opcode: RCSendOnly, MSN: 1 << 30}, nil},
		{"SrcQP unused", Packet{Opcode: RCSendOnly, SrcQP: 1 << 30}, nil},
	}
	for _, c := range cases {
		prefix := []byte{9, 9}
		b, err := c.p.AppendIB(prefix)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: AppendIB = %v, want %v", c.name, err, c.want)
		}
		if err != nil && !bytes.Equal(b, prefix) {
			t.Errorf("%s: AppendIB changed b on error: %x", c.name, b)
		}
		_, err = c.p.MarshalBTHAndExt(make([]byte, MaxHeaderLen))
		if !errors.Is(err, c.want) {
			t.Errorf("%s: MarshalBTHAndExt = %v, want %v", c.name, err, c.want)
		}
	}
	p := fullPacket(XRCCompareSwap, nil)
	if _, err := p.MarshalBTHAndExt(make([]byte, MaxHeaderLen-1)); err != ErrBuffer {
		t.Errorf("short buffer: %v", err)
	}
	if n, err := p.MarshalBTHAndExt(make([]byte, MaxHeaderLen+10)); n != MaxHeaderLen || err != nil {
		t.Errorf("MarshalBTHAndExt = %d, %v", n, err)
	}
	if (&Packet{Opcode: 0x15}).IBLen() != 0 {
		t.Error("IBLen of an invalid opcode")
	}
}

// TestMarshalBTHAndExtScatter: headers from MarshalBTHAndExt, then the
// payload and zero pad appended by the caller, equal AppendIB.
func TestMarshalBTHAndExtScatter(t *testing.T) {
	p := fullPacket(RCWriteOnlyImm, []byte("0123456789"))
	h := make([]byte, MaxHeaderLen)
	n, err := p.MarshalBTHAndExt(h)
	if err != nil {
		t.Fatal(err)
	}
	b := append(append(h[:n:n], p.Payload...), make([]byte, padLen(len(p.Payload)))...)
	want, _ := p.AppendIB(nil)
	if !bytes.Equal(b, want) {
		t.Fatalf("scatter %x\nAppendIB %x", b, want)
	}
}

// TestHotPathAllocs: encoding, decoding and checking a packet into
// caller-provided buffers allocate nothing.
func TestHotPathAllocs(t *testing.T) {
	p := Packet{Opcode: RCSendOnly, Payload: make([]byte, 4096)}
	buf := make([]byte, 0, 8192)
	hdr := make([]byte, MaxHeaderLen)
	dg := testDatagram(t, p.Payload)
	var q Packet
	var d Datagram
	allocs := testing.AllocsPerRun(100, func() {
		b, _ := p.AppendIB(buf[:0])
		_, _ = p.MarshalBTHAndExt(hdr)
		_ = ParseIB(b, &q)
		_ = ParseIPv4(dg, &d)
		_ = CheckIPv4(dg)
		_ = ICRC(d.IP, d.UDP, d.IB)
	})
	if allocs != 0 {
		t.Errorf("%v allocations", allocs)
	}
}
