package roce

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
)

// GIDFromIPv4 returns the RoCEv2 GID of an IPv4 address: the IPv4-mapped
// IPv6 address ::ffff:a.b.c.d (VERBS.md §8.6). Any other address is
// returned as its 16 bytes (an IPv6 GID); the invalid Addr gives zero.
func GIDFromIPv4(a netip.Addr) [16]byte {
	return a.As16() // As16 maps an IPv4 address to ::ffff:a.b.c.d
}

// IPFromGID returns the IP address a RoCEv2 GID stands for: IPv4 when the
// GID is IPv4-mapped, else IPv6.
func IPFromGID(gid [16]byte) netip.Addr {
	return netip.AddrFrom16(gid).Unmap()
}

// Errors of ParseIPv4 and CheckIPv4.
var (
	ErrNotIPv4     = errors.New("roce: not an IPv4 packet")
	ErrIPHeader    = errors.New("roce: bad IPv4 header")
	ErrIPChecksum  = errors.New("roce: bad IPv4 header checksum")
	ErrIPFragment  = errors.New("roce: IPv4 fragment")
	ErrNotUDP      = errors.New("roce: not UDP")
	ErrUDPLength   = errors.New("roce: bad UDP length")
	ErrNotRoCE     = errors.New("roce: UDP destination port is not 4791")
	ErrICRC        = errors.New("roce: ICRC mismatch")
	ErrTooLong     = errors.New("roce: datagram longer than 65535 bytes")
	ErrAddrNotIPv4 = errors.New("roce: address is not IPv4")
)

// Datagram is a RoCEv2 IPv4 datagram split into its parts. The slices alias
// the parsed buffer.
type Datagram struct {
	IP   []byte // IPv4 header, 20 bytes
	UDP  []byte // UDP header, 8 bytes
	IB   []byte // BTH through pad: the input of ParseIB
	ICRC uint32 // the received ICRC trailer, comparable with ICRC's result
}

// Src returns the IPv4 source address.
func (d *Datagram) Src() netip.Addr { return netip.AddrFrom4([4]byte(d.IP[12:16])) }

// Dst returns the IPv4 destination address.
func (d *Datagram) Dst() netip.Addr { return netip.AddrFrom4([4]byte(d.IP[16:20])) }

// SrcPort returns the UDP source port.
func (d *Datagram) SrcPort() uint16 { return binary.BigEndian.Uint16(d.UDP[0:2]) }

// ParseIPv4 splits an IPv4 datagram carrying RoCEv2 into d. It checks the
// IPv4 header (version 4, no options, total length within b, header
// checksum, protocol UDP, not a fragment) and the UDP header (length
// consistent with IP, destination port 4791, room for a BTH and the ICRC),
// but not the ICRC (CheckIPv4 does) and not the UDP checksum: rxe sends 0
// and the ICRC masks it; captures taken on a sending host show unfinished
// offloaded checksums. Bytes after the IP total length (link padding) are
// ignored. It never panics.
func ParseIPv4(b []byte, d *Datagram) error {
	if len(b) < ipv4HdrLen || b[0]>>4 != 4 {
		return ErrNotIPv4
	}
	if b[0]&0x0F != 5 {
		return ErrIPHeader // options: neither rxe nor this package sends them
	}
	total := int(binary.BigEndian.Uint16(b[2:4]))
	if total < ipv4HdrLen || total > len(b) {
		return ErrIPHeader
	}
	if checksum(b[:ipv4HdrLen]) != 0xFFFF {
		return ErrIPChecksum
	}
	if binary.BigEndian.Uint16(b[6:8])&0x3FFF != 0 { // MF or fragment offset
		return ErrIPFragment
	}
	if b[9] != 17 {
		return ErrNotUDP
	}
	b = b[:total]
	u := b[ipv4HdrLen:]
	if len(u) < udpHdrLen || int(binary.BigEndian.Uint16(u[4:6])) != len(u) {
		return ErrUDPLength
	}
	if binary.BigEndian.Uint16(u[2:4]) != UDPPort {
		return ErrNotRoCE
	}
	ib := u[udpHdrLen:]
	if len(ib) < BTHLen+ICRCLen {
		return ErrShort
	}
	n := len(ib) - ICRCLen
	*d = Datagram{
		IP:   b[:ipv4HdrLen:ipv4HdrLen],
		UDP:  u[:udpHdrLen:udpHdrLen],
		IB:   ib[:n:n],
		ICRC: binary.LittleEndian.Uint32(ib[n:]),
	}
	return nil
}

// CheckIPv4 verifies an IPv4 RoCEv2 datagram: ParseIPv4, then the ICRC. It
// does not parse the IB part (ParseIB does).
func CheckIPv4(b []byte) error {
	var d Datagram
	if err := ParseIPv4(b, &d); err != nil {
		return err
	}
	if ICRC(d.IP, d.UDP, d.IB) != d.ICRC {
		return ErrICRC
	}
	return nil
}

// BuildIPv4 returns a complete RoCEv2 datagram as rxe sends it: an IPv4
// header (no options, DF set, the given ID, TOS and TTL, valid checksum), a
// UDP header (source port sport, destination 4791, checksum 0), ib (the IB
// part, e.g. from AppendIB) and its ICRC. src and dst must be IPv4 (or
// IPv4-mapped) addresses.
func BuildIPv4(src, dst netip.Addr, sport uint16, ib []byte, ipID uint16, tos, ttl uint8) ([]byte, error) {
	src, dst = src.Unmap(), dst.Unmap()
	if !src.Is4() || !dst.Is4() {
		return nil, fmt.Errorf("%w: %v -> %v", ErrAddrNotIPv4, src, dst)
	}
	if len(ib) < BTHLen {
		return nil, ErrShort
	}
	total := ipv4HdrLen + udpHdrLen + len(ib) + ICRCLen
	if total > 0xFFFF {
		return nil, ErrTooLong
	}
	b := make([]byte, ipv4HdrLen+udpHdrLen, total)
	ip, u := b[:ipv4HdrLen], b[ipv4HdrLen:]
	PutIPv4Header(ip, src.As4(), dst.As4(), total, ipID, tos, ttl)
	binary.BigEndian.PutUint16(u[0:2], sport)
	binary.BigEndian.PutUint16(u[2:4], UDPPort)
	binary.BigEndian.PutUint16(u[4:6], uint16(total-ipv4HdrLen))
	b = append(b, ib...)
	return AppendICRC(b, ICRC(ip, u, ib)), nil
}

// checksum returns the ones' complement sum of b (even length), folded to
// 16 bits; a header with a valid checksum sums to 0xFFFF.
func checksum(b []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	for s>>16 != 0 {
		s = s&0xFFFF + s>>16
	}
	return uint16(s)
}
