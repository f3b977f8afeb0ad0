package roce

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math/rand/v2"
	"net/netip"
	"testing"
)

func encapSample() Packet {
	return Packet{Opcode: 0x0A, PKey: 0xFFFF, DestQP: 0x123456, AckReq: true, PSN: 77,
		VA: 0x1000, RKey: 0xabcd, DMALen: 5, Payload: []byte("hello")}
}

// EncapIPv4 in place gives the same bytes as BuildIPv4, without allocating.
func TestEncapIPv4MatchesBuild(t *testing.T) {
	p := encapSample()
	src, dst := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	ib, err := p.AppendIB(nil)
	if err != nil {
		t.Fatal(err)
	}
	want, err := BuildIPv4(src, dst, 0xC123, ib, 0, 0, 64)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 0, 256)
	var got []byte
	allocs := testing.AllocsPerRun(100, func() {
		b, _ := p.AppendIB(buf[:HeadroomIPv4])
		got, err = EncapIPv4(b, src.As4(), dst.As4(), 0xC123, 0, 0, 64)
	})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("EncapIPv4\n got % x\nwant % x", got, want)
	}
	if allocs != 0 {
		t.Fatalf("%v allocations", allocs)
	}
	if err := CheckIPv4(got); err != nil {
		t.Fatal(err)
	}
	if _, err := EncapIPv4(make([]byte, HeadroomIPv4), src.As4(), dst.As4(), 1, 0, 0, 64); !errors.Is(err, ErrShort) {
		t.Fatalf("no IB part: %v", err)
	}
}

func TestEncapIPv6(t *testing.T) {
	p := encapSample()
	src, dst := netip.MustParseAddr("fe80::1"), netip.MustParseAddr("fe80::2")
	b, err := p.AppendIB(make([]byte, HeadroomIPv6))
	if err != nil {
		t.Fatal(err)
	}
	b, err = EncapIPv6(b, src.As16(), dst.As16(), 0xC001, 3, 0x12345, 64)
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckIPv6(b); err != nil {
		t.Fatal(err)
	}
	// The UDP checksum is valid: the sum over pseudo header and datagram.
	var s uint32
	add := func(x []byte) {
		for i := 0; i+1 < len(x); i += 2 {
			s += uint32(binary.BigEndian.Uint16(x[i:]))
		}
		if len(x)%2 == 1 {
			s += uint32(x[len(x)-1]) << 8
		}
	}
	add(b[8:40])
	s += uint32(len(b)-40) + 17
	add(b[40:])
	for s>>16 != 0 {
		s = s&0xFFFF + s>>16
	}
	if s != 0xFFFF {
		t.Fatalf("UDP checksum sums to %#x", s)
	}
	// Masked fields do not matter to the ICRC; a payload bit does.
	c := bytes.Clone(b)
	c[7] = 1 // hop limit
	if err := CheckIPv6(c); err != nil {
		t.Fatalf("hop limit changed: %v", err)
	}
	c[len(c)-6] ^= 0x40
	if err := CheckIPv6(c); !errors.Is(err, ErrICRC) {
		t.Fatalf("payload changed: %v", err)
	}
	// Never a panic on truncations or an IPv4 packet.
	for i := range b {
		CheckIPv6(b[:i])
	}
	if err := CheckIPv6([]byte{0x45, 0, 0, 0}); !errors.Is(err, ErrNotIPv6) {
		t.Fatalf("IPv4: %v", err)
	}
}

// updateSmall is crc32.Update, for every length a header can have and
// more, from any starting CRC.
func TestUpdateSmallIsCRC32(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for n := range 130 {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		seed := r.Uint32()
		if got, want := updateSmall(seed, b), crc32.Update(seed, crc32.IEEETable, b); got != want {
			t.Fatalf("%d bytes: %#x, want %#x", n, got, want)
		}
	}
}
