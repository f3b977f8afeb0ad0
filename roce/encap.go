package roce

import (
	"encoding/binary"
	"errors"
)

// ErrNotIPv6 is CheckIPv6's error for a packet that is not IPv6.
var ErrNotIPv6 = errors.New("roce: not an IPv6 packet")

// Headroom an IB part needs in front of it for EncapIPv4 and EncapIPv6:
// the IP and UDP headers.
const (
	HeadroomIPv4 = ipv4HdrLen + udpHdrLen
	HeadroomIPv6 = ipv6HdrLen + udpHdrLen
)

// PutIPv4Header writes the IPv4 header of a RoCEv2 datagram of total bytes
// into h[:20]: no options, DF, the given ID, TOS and TTL, protocol UDP, a
// valid checksum. It is the one IPv4 builder: of the datagrams sent
// (EncapIPv4, BuildIPv4) and of the GRH a UD receive buffer starts with.
func PutIPv4Header(h []byte, src, dst [4]byte, total int, ipID uint16, tos, ttl uint8) {
	h = h[:ipv4HdrLen]
	h[0] = 0x45
	h[1] = tos
	binary.BigEndian.PutUint16(h[2:4], uint16(total))
	binary.BigEndian.PutUint16(h[4:6], ipID)
	binary.BigEndian.PutUint16(h[6:8], 0x4000) // DF
	h[8] = ttl
	h[9] = 17
	copy(h[12:16], src[:])
	copy(h[16:20], dst[:])
	SetIPv4Checksum(h)
}

// SetIPv4Checksum writes the header checksum of the 20-byte IPv4 header h
// (after a field of it changed).
func SetIPv4Checksum(h []byte) {
	h[10], h[11] = 0, 0
	binary.BigEndian.PutUint16(h[10:12], ^checksum(h[:ipv4HdrLen]))
}

// PutIPv6Header writes the fixed IPv6 header of a RoCEv2 datagram into
// h[:40]: next header UDP, payloadLen bytes after the header, the given
// traffic class, flow label and hop limit.
func PutIPv6Header(h []byte, src, dst [16]byte, payloadLen int, tclass uint8, flow uint32, hop uint8) {
	h = h[:ipv6HdrLen]
	binary.BigEndian.PutUint32(h[0:4], 6<<28|uint32(tclass)<<20|flow&0xFFFFF)
	binary.BigEndian.PutUint16(h[4:6], uint16(payloadLen))
	h[6] = 17
	h[7] = hop
	copy(h[8:24], src[:])
	copy(h[24:40], dst[:])
}

// EncapIPv4 turns b into a complete RoCEv2 datagram in place, without
// allocating when b has room for the ICRC: b[:HeadroomIPv4] is room for the
// IPv4 and UDP headers and b[HeadroomIPv4:] is the IB part (as AppendIB
// appends it). It writes the headers as BuildIPv4 does (DF, no options,
// UDP checksum 0, destination port 4791) and appends the ICRC.
func EncapIPv4(b []byte, src, dst [4]byte, sport, ipID uint16, tos, ttl uint8) ([]byte, error) {
	b, err := EncapIPv4Open(b, src, dst, sport, ipID, tos, ttl)
	if err == nil {
		SealIPv4(b)
	}
	return b, err
}

// EncapIPv4Open is EncapIPv4 but for the ICRC: it appends room for it, and
// SealIPv4 computes it, once what the ICRC covers is final (a sender that
// changes the IP ID after encoding computes it once).
func EncapIPv4Open(b []byte, src, dst [4]byte, sport, ipID uint16, tos, ttl uint8) ([]byte, error) {
	if len(b) < HeadroomIPv4+BTHLen {
		return b, ErrShort
	}
	total := len(b) + ICRCLen
	if total > 0xFFFF {
		return b, ErrTooLong
	}
	ip, u := b[:ipv4HdrLen], b[ipv4HdrLen:HeadroomIPv4]
	PutIPv4Header(ip, src, dst, total, ipID, tos, ttl)
	binary.BigEndian.PutUint16(u[0:2], sport)
	binary.BigEndian.PutUint16(u[2:4], UDPPort)
	binary.BigEndian.PutUint16(u[4:6], uint16(total-ipv4HdrLen))
	u[6], u[7] = 0, 0
	return append(b, 0, 0, 0, 0), nil
}

// SealIPv4 writes the ICRC of the datagram b (as EncapIPv4Open built it,
// its headers and IB part as they are now) into its last four bytes.
func SealIPv4(b []byte) {
	n := len(b) - ICRCLen
	binary.LittleEndian.PutUint32(b[n:], ICRC(b[:ipv4HdrLen], b[ipv4HdrLen:HeadroomIPv4], b[HeadroomIPv4:n]))
}

// EncapIPv6 is EncapIPv4 for IPv6: b[:HeadroomIPv6] is room for the fixed
// IPv6 header (next header UDP) and the UDP header. Unlike IPv4, IPv6 has
// no zero UDP checksum, so the checksum is computed (the ICRC masks it).
func EncapIPv6(b []byte, src, dst [16]byte, sport uint16, tclass uint8, flow uint32, hop uint8) ([]byte, error) {
	if len(b) < HeadroomIPv6+BTHLen {
		return b, ErrShort
	}
	ulen := len(b) - ipv6HdrLen + ICRCLen
	if ulen > 0xFFFF {
		return b, ErrTooLong
	}
	ip, u := b[:ipv6HdrLen], b[ipv6HdrLen:HeadroomIPv6]
	PutIPv6Header(ip, src, dst, ulen, tclass, flow, hop)
	binary.BigEndian.PutUint16(u[0:2], sport)
	binary.BigEndian.PutUint16(u[2:4], UDPPort)
	binary.BigEndian.PutUint16(u[4:6], uint16(ulen))
	u[6], u[7] = 0, 0
	b = AppendICRC(b, ICRC6(ip, u, b[HeadroomIPv6:]))
	// UDP checksum over the pseudo header and the whole UDP datagram.
	var s uint32
	add := func(x []byte) {
		for i := 0; i+1 < len(x); i += 2 {
			s += uint32(binary.BigEndian.Uint16(x[i:]))
		}
		if len(x)&1 == 1 {
			s += uint32(x[len(x)-1]) << 8
		}
	}
	add(ip[8:40])
	s += uint32(ulen) + 17
	add(b[ipv6HdrLen:])
	for s>>16 != 0 {
		s = s&0xFFFF + s>>16
	}
	c := ^uint16(s)
	if c == 0 {
		c = 0xFFFF
	}
	binary.BigEndian.PutUint16(u[6:8], c)
	return b, nil
}

// CheckIPv6 verifies a RoCEv2 datagram over IPv6 (fixed header, next
// header UDP, destination port 4791) and its ICRC.
func CheckIPv6(b []byte) error {
	if len(b) < HeadroomIPv6+BTHLen+ICRCLen || b[0]>>4 != 6 {
		return ErrNotIPv6
	}
	if b[6] != 17 {
		return ErrNotUDP
	}
	plen := int(binary.BigEndian.Uint16(b[4:6]))
	if ipv6HdrLen+plen > len(b) || plen < udpHdrLen+BTHLen+ICRCLen {
		return ErrIPHeader
	}
	b = b[:ipv6HdrLen+plen]
	u := b[ipv6HdrLen:HeadroomIPv6]
	if int(binary.BigEndian.Uint16(u[4:6])) != plen {
		return ErrUDPLength
	}
	if binary.BigEndian.Uint16(u[2:4]) != UDPPort {
		return ErrNotRoCE
	}
	n := len(b) - ICRCLen
	if ICRC6(b[:ipv6HdrLen], u, b[HeadroomIPv6:n]) != binary.LittleEndian.Uint32(b[n:]) {
		return ErrICRC
	}
	return nil
}
