package cm

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// rdma_cm's address header: the first 36 bytes of a REQ's or SIDR_REQ's
// private data carry the IP addresses the connection is between, so the
// passive side can match a listener bound to an address and report the
// peer's address and port (the service ID only names the destination
// port).
//
//	0      version (0)
//	1      IP version in the high nibble (4 or 6)
//	2-3    source port
//	4-19   source address
//	20-35  destination address
//
// An IPv4 address is the last 4 bytes of its 16, the rest zero (not the
// ::ffff: form).

// CMAHdrLen is the size of the address header.
const CMAHdrLen = 36

// CMAHdr is the decoded address header.
type CMAHdr struct {
	Src, Dst netip.AddrPort // Dst's port is the service ID's
}

// ErrCMAHdr is a private data that does not start with a valid header.
var ErrCMAHdr = errors.New("cm: private data has no valid rdma_cm address header")

// PutCMAHdr writes h into the first 36 bytes of b.
func PutCMAHdr(b []byte, h CMAHdr) {
	_ = b[CMAHdrLen-1]
	clear(b[:CMAHdrLen])
	b[0] = 0
	if h.Src.Addr().Unmap().Is4() {
		b[1] = 4 << 4
	} else {
		b[1] = 6 << 4
	}
	be.PutUint16(b[2:], h.Src.Port())
	putCMAAddr(b[4:20], h.Src.Addr())
	putCMAAddr(b[20:36], h.Dst.Addr())
}

func putCMAAddr(b []byte, a netip.Addr) {
	if a = a.Unmap(); a.Is4() {
		v := a.As4()
		copy(b[12:], v[:])
		return
	}
	v := a.As16()
	copy(b, v[:])
}

// ParseCMAHdr reads the header at the start of b; dstPort comes from the
// service ID.
func ParseCMAHdr(b []byte, dstPort uint16) (CMAHdr, error) {
	if len(b) < CMAHdrLen || b[0] != 0 {
		return CMAHdr{}, ErrCMAHdr
	}
	var src, dst netip.Addr
	switch b[1] >> 4 {
	case 4:
		src = netip.AddrFrom4([4]byte(b[16:20]))
		dst = netip.AddrFrom4([4]byte(b[32:36]))
	case 6:
		src = netip.AddrFrom16([16]byte(b[4:20])).Unmap()
		dst = netip.AddrFrom16([16]byte(b[20:36])).Unmap()
	default:
		return CMAHdr{}, ErrCMAHdr
	}
	return CMAHdr{Src: netip.AddrPortFrom(src, be.Uint16(b[2:])), Dst: netip.AddrPortFrom(dst, dstPort)}, nil
}

// PortSpace is an rdma_cm port space (RDMA_PS_*).
type PortSpace uint16

const (
	PSIPoIB PortSpace = 0x0002
	PSTCP   PortSpace = 0x0106
	PSUDP   PortSpace = 0x0111
	PSIB    PortSpace = 0x013F
)

func (p PortSpace) String() string {
	switch p {
	case PSIPoIB:
		return "ipoib"
	case PSTCP:
		return "tcp"
	case PSUDP:
		return "udp"
	case PSIB:
		return "ib"
	}
	return fmt.Sprintf("ps(0x%04x)", uint16(p))
}

// ParsePortSpace reads tcp, udp, ib or ipoib.
func ParsePortSpace(s string) (PortSpace, bool) {
	switch strings.ToLower(s) {
	case "tcp":
		return PSTCP, true
	case "udp":
		return PSUDP, true
	case "ib":
		return PSIB, true
	case "ipoib":
		return PSIPoIB, true
	}
	return 0, false
}

// ServiceID is the IB service ID rdma_cm uses for a port of a port space.
func ServiceID(ps PortSpace, port uint16) uint64 { return uint64(ps)<<16 | uint64(port) }

// SplitServiceID is ServiceID's inverse; ok is false for a service ID
// outside rdma_cm's IP range (0x0000_0000_01PP_PPPP and IPoIB's).
func SplitServiceID(sid uint64) (PortSpace, uint16, bool) {
	if sid>>32 != 0 {
		return 0, 0, false
	}
	ps := PortSpace(sid >> 16)
	switch ps {
	case PSIPoIB, PSTCP, PSUDP, PSIB:
		return ps, uint16(sid), true
	}
	return 0, 0, false
}
