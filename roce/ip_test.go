package roce

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"hash/crc32"
	"net/netip"
	"testing"
)

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// refICRC is the ICRC transcribed from icrc-check.py's icrc(): one
// CRC-32 over the concatenated masked copies. ICRC must agree with it.
func refICRC(ip, udp, ib []byte) uint32 {
	m := bytes.Clone(ip[:20])
	m[1], m[8], m[10], m[11] = 0xFF, 0xFF, 0xFF, 0xFF
	u := bytes.Clone(udp[:8])
	u[6], u[7] = 0xFF, 0xFF
	h := bytes.Clone(ib[:12])
	h[4] = 0xFF
	all := append(bytes.Repeat([]byte{0xFF}, 8), m...)
	all = append(append(append(all, u...), h...), ib[12:]...)
	return crc32.ChecksumIEEE(all)
}

// Vectors computed with Python's zlib: the IPv4 one with rc-peer.py's
// icrc() itself, the IPv6 one with the masks of VERBS.md §8.5 (traffic
// class, flow label, hop limit).
const (
	vecIB    = "04c0ffff00000011800000010102030405060708" // RC SEND_ONLY, 8 bytes
	vecIPv4  = "4500003400004000401100000a4d00010a4d0002"
	vecUDP4  = "12b712b700200000"
	vecICRC4 = "1edb2666" // wire bytes
	vecIPv6  = "6ab1234500201140fe80000000000000505400fffe770002fe80000000000000505400fffe770003"
	vecUDP6  = "c12312b70020abcd"
	vecICRC6 = 0x0c9a5db7 // zlib.crc32 value
)

func TestICRCVectors(t *testing.T) {
	ib := unhex(t, vecIB)
	ip4, udp4 := unhex(t, vecIPv4), unhex(t, vecUDP4)
	got := AppendICRC(nil, ICRC(ip4, udp4, ib))
	if hex.EncodeToString(got) != vecICRC4 {
		t.Errorf("ICRC = %x, want %s", got, vecICRC4)
	}
	if ICRC(ip4, udp4, ib) != refICRC(ip4, udp4, ib) {
		t.Error("ICRC disagrees with the reference")
	}
	ip6, udp6 := unhex(t, vecIPv6), unhex(t, vecUDP6)
	if c := ICRC6(ip6, udp6, ib); c != vecICRC6 {
		t.Errorf("ICRC6 = %#08x, want %#08x", c, vecICRC6)
	}
}

// TestICRCMasks: the masked fields do not change the ICRC, every other
// header byte does.
func TestICRCMasks(t *testing.T) {
	ib := unhex(t, vecIB)
	check := func(name string, ip, udp []byte, f func(ip, udp, ib []byte) uint32, ipMasked map[int]byte) {
		base := f(ip, udp, ib)
		for i := range ip {
			c := bytes.Clone(ip)
			c[i] ^= 0xFF
			if mask, ok := ipMasked[i]; ok {
				c[i] = ip[i] ^ mask
			}
			changed := f(c, udp, ib) != base
			if _, masked := ipMasked[i]; masked == changed {
				t.Errorf("%s: IP byte %d flipped: ICRC changed %v", name, i, changed)
			}
		}
		for i := range udp {
			c := bytes.Clone(udp)
			c[i] ^= 0xFF
			if changed := f(ip, c, ib) != base; changed == (i >= 6) {
				t.Errorf("%s: UDP byte %d flipped: ICRC changed %v", name, i, changed)
			}
		}
		for i := range ib {
			c := bytes.Clone(ib)
			c[i] ^= 0xFF
			if changed := f(ip, udp, c) != base; changed == (i == 4) {
				t.Errorf("%s: IB byte %d flipped: ICRC changed %v", name, i, changed)
			}
		}
	}
	check("IPv4", unhex(t, vecIPv4), unhex(t, vecUDP4), ICRC,
		map[int]byte{1: 0xFF, 8: 0xFF, 10: 0xFF, 11: 0xFF})
	// IPv6: byte 0 keeps its version nibble; the traffic class spans the
	// low nibble of byte 0 and the high nibble of byte 1.
	check("IPv6", unhex(t, vecIPv6), unhex(t, vecUDP6), ICRC6,
		map[int]byte{0: 0x0F, 1: 0xFF, 2: 0xFF, 3: 0xFF, 7: 0xFF})
	// Bytes after the fixed 20-byte header are not covered.
	ip := append(unhex(t, vecIPv4), 1, 2, 3, 4)
	if ICRC(ip, unhex(t, vecUDP4), ib) != ICRC(ip[:20], unhex(t, vecUDP4), ib) {
		t.Error("ICRC covers bytes past the IPv4 header")
	}
}

func TestGIDs(t *testing.T) {
	a := netip.MustParseAddr("10.77.0.2")
	g := GIDFromIPv4(a)
	if hex.EncodeToString(g[:]) != "00000000000000000000ffff0a4d0002" {
		t.Fatalf("GIDFromIPv4(%v) = %x", a, g)
	}
	if b := IPFromGID(g); b != a || !b.Is4() {
		t.Fatalf("IPFromGID = %v", b)
	}
	if g2 := GIDFromIPv4(netip.MustParseAddr("::ffff:10.77.0.2")); g2 != g {
		t.Errorf("mapped address: %x", g2)
	}
	v6 := netip.MustParseAddr("fe80::5054:ff:fe77:2")
	if g6 := GIDFromIPv4(v6); IPFromGID(g6) != v6 || !IPFromGID(g6).Is6() {
		t.Errorf("IPv6 GID round trip: %x -> %v", g6, IPFromGID(g6))
	}
	if GIDFromIPv4(netip.Addr{}) != ([16]byte{}) {
		t.Error("invalid address gives a nonzero GID")
	}
}

// testDatagram builds a small valid datagram.
func testDatagram(t testing.TB, payload []byte) []byte {
	t.Helper()
	p := Packet{Opcode: RCSendOnly, PKey: 0xFFFF, DestQP: 0x11, AckReq: true, PSN: 1, Payload: payload}
	ib, err := p.AppendIB(nil)
	if err != nil {
		t.Fatal(err)
	}
	d, err := BuildIPv4(netip.MustParseAddr("10.77.0.1"), netip.MustParseAddr("10.77.0.2"), 0xC011, ib, 0, 0, 64)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestBuildIPv4(t *testing.T) {
	d := testDatagram(t, []byte("abcdefgh"))
	if got := hex.EncodeToString(d[:20]); got[:20] != vecIPv4[:20] || got[24:] != vecIPv4[24:] {
		t.Errorf("IPv4 header %s, want %s (checksum aside)", got, vecIPv4)
	}
	if checksum(d[:20]) != 0xFFFF {
		t.Error("bad IPv4 header checksum")
	}
	if hex.EncodeToString(d[20:28]) != "c01112b700200000" {
		t.Errorf("UDP header %x", d[20:28])
	}
	if err := CheckIPv4(d); err != nil {
		t.Fatal(err)
	}
	var dg Datagram
	if err := ParseIPv4(d, &dg); err != nil {
		t.Fatal(err)
	}
	if dg.Src().String() != "10.77.0.1" || dg.Dst().String() != "10.77.0.2" || dg.SrcPort() != 0xC011 ||
		len(dg.IP) != 20 || len(dg.UDP) != 8 || !bytes.Equal(dg.IB, d[28:len(d)-4]) ||
		dg.ICRC != binary.LittleEndian.Uint32(d[len(d)-4:]) {
		t.Errorf("ParseIPv4: %+v", dg)
	}
	// Ethernet padding after the IP total length is ignored.
	if err := CheckIPv4(append(bytes.Clone(d), 0, 0, 0, 0, 0, 0)); err != nil {
		t.Errorf("with trailing padding: %v", err)
	}

	v4, v6 := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("fe80::1")
	if _, err := BuildIPv4(v4, v6, 1, d[28:44], 0, 0, 64); !errors.Is(err, ErrAddrNotIPv4) {
		t.Errorf("IPv6 destination: %v", err)
	}
	if _, err := BuildIPv4(netip.Addr{}, v4, 1, d[28:44], 0, 0, 64); !errors.Is(err, ErrAddrNotIPv4) {
		t.Errorf("invalid source: %v", err)
	}
	if _, err := BuildIPv4(v4, v4, 1, d[28:36], 0, 0, 64); err != ErrShort {
		t.Errorf("short IB part: %v", err)
	}
	if _, err := BuildIPv4(v4, v4, 1, make([]byte, 65536-32), 0, 0, 64); err != ErrTooLong {
		t.Errorf("65536-byte datagram: %v", err)
	}
	if _, err := BuildIPv4(v4, v4, 1, make([]byte, 65535-32), 0, 0, 64); err != nil {
		t.Errorf("65535-byte datagram: %v", err)
	}
}

func TestParseIPv4Errors(t *testing.T) {
	good := testDatagram(t, []byte("abcd"))
	mod := func(f func(b []byte)) []byte {
		b := bytes.Clone(good)
		f(b)
		return b
	}
	// fix re-computes the IPv4 header checksum after a change.
	fix := func(f func(b []byte)) []byte {
		return mod(func(b []byte) {
			f(b)
			b[10], b[11] = 0, 0
			binary.BigEndian.PutUint16(b[10:12], ^checksum(b[:20]))
		})
	}
	setLen := func(n int) func(b []byte) {
		return func(b []byte) { binary.BigEndian.PutUint16(b[2:4], uint16(n)) }
	}
	cases := []struct {
		name string
		b    []byte
		want error
	}{
		{"empty", nil, ErrNotIPv4},
		{"19 bytes", good[:19], ErrNotIPv4},
		{"IPv6", fix(func(b []byte) { b[0] = 0x65 }), ErrNotIPv4},
		{"options", fix(func(b []byte) { b[0] = 0x46 }), ErrIPHeader},
		{"total length > buffer", good[:len(good)-1], ErrIPHeader},
		{"total length < 20", fix(setLen(19)), ErrIPHeader},
		{"bad checksum", mod(func(b []byte) { b[8]++ }), ErrIPChecksum},
		{"MF", fix(func(b []byte) { b[6] |= 0x20 }), ErrIPFragment},
		{"fragment offset", fix(func(b []byte) { b[7] = 1 }), ErrIPFragment},
		{"TCP", fix(func(b []byte) { b[9] = 6 }), ErrNotUDP},
		{"no UDP header", fix(setLen(27))[:27], ErrUDPLength},
		{"UDP length", mod(func(b []byte) { b[25]-- }), ErrUDPLength},
		{"port", mod(func(b []byte) { b[23]++ }), ErrNotRoCE},
		{"no room for BTH+ICRC", fix(func(b []byte) {
			setLen(28 + 15)(b)
			binary.BigEndian.PutUint16(b[24:26], 8+15)
		})[:43], ErrShort},
		{"ICRC", mod(func(b []byte) { b[len(b)-1]++ }), ErrICRC},
		{"payload", mod(func(b []byte) { b[40]++ }), ErrICRC},
		{"IP ID", fix(func(b []byte) { b[5]++ }), ErrICRC},
		{"TTL is masked", fix(func(b []byte) { b[8] = 1 }), nil},
		{"TOS is masked", fix(func(b []byte) { b[1] = 0xB8 }), nil},
		{"UDP checksum is masked and not checked", mod(func(b []byte) { b[26] = 0x12 }), nil},
		{"DF is covered", fix(func(b []byte) { b[6] = 0 }), ErrICRC},
	}
	for _, c := range cases {
		if err := CheckIPv4(c.b); err != c.want {
			t.Errorf("%s: CheckIPv4 = %v, want %v", c.name, err, c.want)
		}
	}
}
