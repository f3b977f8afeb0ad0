package cm

import "net/netip"

// McastGID is the MGID of the IP multicast group x, as the kernel's
// rdma_cm makes it (and rdmafs's librdmacm, which joins): on RoCE
// (wire) an IPv4 group is its IPv4-mapped address ::ffff:a.b.c.d
// (cma_iboe_set_mgid for RoCEv2), which the wire sends to as that IP
// group; on an InfiniBand port the IPoIB mapping with rdma_cm's signature
// ff12:401b:ffff:1::/64 and the group's low 28 bits (cma_set_mgid for the
// UDP port space; the library leaves the signature out for IPoIB's, as the
// kernel); an IPv6 group is its own address on both.
func McastGID(x netip.Addr, wire bool) [16]byte {
	x = x.Unmap()
	if x.Is6() {
		return x.As16()
	}
	v := x.As4()
	if wire {
		return netip.AddrFrom16(netip.AddrFrom4(v).As16()).As16()
	}
	return [16]byte{0xff, 0x12, 0x40, 0x1b, 0xff, 0xff, 0x00, 0x01, 0, 0, 0, 0, v[0] & 0x0f, v[1], v[2], v[3]}
}
