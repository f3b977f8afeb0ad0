package roce

import (
	"net/netip"
	"testing"
)

// A 4096-byte RC SEND_ONLY, the largest message of the golden captures in
// one packet (4096-byte path MTU).
func benchPacket() Packet {
	return Packet{Opcode: RCSendOnly, PKey: 0xFFFF, DestQP: 0x11, AckReq: true, PSN: 0x123456,
		Payload: make([]byte, 4096)}
}

func BenchmarkParseIB(b *testing.B) {
	p := benchPacket()
	ib, _ := p.AppendIB(nil)
	b.SetBytes(int64(len(ib)))
	b.ReportAllocs()
	var q Packet
	for b.Loop() {
		if err := ParseIB(ib, &q); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAppendIB(b *testing.B) {
	p := benchPacket()
	buf := make([]byte, 0, 8192)
	b.SetBytes(int64(p.IBLen()))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.AppendIB(buf[:0]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMarshalBTHAndExt: headers only, for a sender that writes the
// payload separately (scatter/gather).
func BenchmarkMarshalBTHAndExt(b *testing.B) {
	p := benchPacket()
	h := make([]byte, MaxHeaderLen)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.MarshalBTHAndExt(h); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkICRC(b *testing.B) {
	p := benchPacket()
	ib, _ := p.AppendIB(nil)
	d, err := BuildIPv4(netip.MustParseAddr("10.77.0.1"), netip.MustParseAddr("10.77.0.2"), 0xC000, ib, 0, 0, 64)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(ib)))
	b.ReportAllocs()
	for b.Loop() {
		ICRC(d[:20], d[20:28], ib)
	}
}

func BenchmarkCheckIPv4(b *testing.B) {
	p := benchPacket()
	ib, _ := p.AppendIB(nil)
	d, err := BuildIPv4(netip.MustParseAddr("10.77.0.1"), netip.MustParseAddr("10.77.0.2"), 0xC000, ib, 0, 0, 64)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(d)))
	b.ReportAllocs()
	for b.Loop() {
		if err := CheckIPv4(d); err != nil {
			b.Fatal(err)
		}
	}
}

// The ICRC of a packet without payload: the masked headers are all of it.
func BenchmarkICRCHeaders(b *testing.B) {
	p := Packet{Opcode: OpAcknowledge, PKey: 0xFFFF, DestQP: 0x12, PSN: 7}
	ib, _ := p.AppendIB(nil)
	d, err := BuildIPv4(netip.MustParseAddr("10.77.0.1"), netip.MustParseAddr("10.77.0.2"), 0xC000, ib, 0, 0, 64)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		ICRC(d[:20], d[20:28], ib)
	}
}
