package link

import (
	"encoding/binary"

	"golang.org/x/sys/unix"

	"rdmafs/roce"
)

// Coalesced runs (UDP segmentation offload).
//
// The kernel's cost of a datagram is mostly per datagram, not per byte
// (BENCHMARKS.md: 17 datagrams per 64 KiB WRITE, each through the raw
// socket, ip_rcv and the peer's socket). So the wire hands the kernel a run
// of a QP's packets as one UDP send with UDP_SEGMENT: every packet of the
// run but the last has one length (the segment size), the last is not
// longer, and the kernel, or the NIC, cuts the run into those datagrams,
// each with its own IPv4 and UDP header. It numbers their IP IDs up from
// the first one's, 0 for an unconnected socket that sets DF (measured
// through a veth that segments in software: 0, 1, 2, ...); so the wire
// computes the ICRC of the run's k-th packet over an IP ID of k. What
// leaves the host is what a packet at a time would send, apart from those
// IDs, and kernel rxe (scripts/interop-rxe.sh) checks their ICRCs.
//
// On lo the kernel does not cut the run at all: the receiving raw socket
// gets it whole, one IPv4 header over the concatenated packets, and no
// word of the segment size. The receiver finds it from the first packet's
// headers (runSizes): a packet without payload has the length of its
// headers, an ONLY packet with a RETH the length its RETH names, a MIDDLE
// packet its headers and one of the five path MTUs, the one whose ICRC
// matches. So the sender coalesces only runs whose first packet is one of
// those (every 8 B WRITE of a stream, the MIDDLE and LAST packets of a
// long WRITE, SEND or READ response, READ requests, ACKs); a run of SEND
// ONLY packets, whose length nothing names, goes a datagram at a time.
// The receiver rebuilds each packet's headers as the kernel would have
// written them and checks each ICRC as usual.
//
// A UDP socket sends from one port, and a connected QP's peer takes its
// packets only from the QP's port (SourcePort), so each source port in
// use gets a UDP socket bound to Addr and that port, with a filter that
// drops whatever arrives on it. Every datagram of such a port goes through
// its socket, so that one flow leaves through one socket and a NIC's
// queues cannot reorder it. At most maxTxSockets stay open; the port
// unused the longest gives its socket up for a new one. Where the port
// cannot be had (another program holds it) the port's datagrams go
// through the raw socket, one at a time.

const (
	// maxRunSegs is the most packets one send carries (the kernel's
	// UDP_MAX_SEGMENTS is 64 before 6.3).
	maxRunSegs = 64
	// maxRunBytes is the longest UDP payload of one send.
	maxRunBytes = 0xFFFF - 20 - 8

	// udpHead is the IPv4 and UDP header in front of every packet.
	udpHead = 20 + 8
	// maxPacketLen is the longest one packet can be (IB headers to ICRC).
	maxPacketLen = roce.MaxHeaderLen + 4096 + roce.ICRCLen
)

// maxTxSockets bounds the UDP sockets the wire keeps open for source
// ports (a variable for tests).
var maxTxSockets = 1024

// pathMTUs are the IB path MTUs a MIDDLE packet's payload may have.
var pathMTUs = [...]int{256, 512, 1024, 2048, 4096}

// runSizes appends to out the lengths (IB headers, payload, pad, ICRC)
// that the packets of a coalesced run starting with ib (IB headers on,
// ICRC not included) may have, as ib's headers alone imply them: one
// length, five for a MIDDLE packet, none when the headers do not fix it.
func runSizes(ib []byte, out []int) []int {
	if len(ib) < roce.BTHLen {
		return out
	}
	op := roce.Opcode(ib[0])
	h, ok := roce.HeaderLen(op)
	if !ok || len(ib) < h {
		return out
	}
	c := op.Class()
	hdrs, _ := op.Headers()
	switch {
	case !op.HasPayload():
		return append(out, h+roce.ICRCLen)
	case c&roce.ClassMiddle != 0:
		for _, m := range pathMTUs {
			out = append(out, h+m+roce.ICRCLen)
		}
	case c&roce.ClassOnly == roce.ClassOnly && hdrs&roce.HdrRETH != 0:
		// The RETH follows the BTH in every opcode that has one and no
		// DETH or FETH (WRITE_ONLY, WRITE_ONLY_WITH_IMMEDIATE, ATOMIC_WRITE).
		if hdrs&(roce.HdrDETH|roce.HdrFETH) != 0 {
			return out
		}
		n := int(binary.BigEndian.Uint32(ib[roce.BTHLen+12:]))
		if n <= pathMTUs[len(pathMTUs)-1] {
			out = append(out, h+n+(-n&3)+roce.ICRCLen)
		}
	}
	return out
}

// coalescible reports whether a run may start with the datagram b (IPv4
// header on, ICRC included): its length is one runSizes names.
func coalescible(b []byte) bool {
	var buf [len(pathMTUs)]int
	s := len(b) - udpHead
	for _, x := range runSizes(b[udpHead:len(b)-roce.ICRCLen], buf[:0]) {
		if x == s {
			return true
		}
	}
	return false
}

// segHead writes into h the IPv4 and UDP header that the k-th segment, of
// n bytes from its IB headers to its ICRC, of the coalesced datagram whose
// headers are ip and udp would have had had the kernel cut it.
func segHead(h *[udpHead]byte, ip, udp []byte, k, n int) {
	copy(h[:20], ip[:20])
	copy(h[20:], udp[:8])
	binary.BigEndian.PutUint16(h[2:4], uint16(udpHead+n))
	binary.BigEndian.PutUint16(h[4:6], binary.BigEndian.Uint16(ip[4:6])+uint16(k))
	roce.SetIPv4Checksum(h[:20])
	binary.BigEndian.PutUint16(h[24:26], uint16(8+n))
}

// splitRun finds the segment size of the coalesced datagram whose headers
// are ip and udp and whose packets are pl (IB headers to the last ICRC,
// icrc): a size runSizes names for the first packet, shorter than pl,
// that the first packet's ICRC confirms. It returns 0 when pl is one
// packet, and then whether its ICRC is known to hold (checked here
// because a MIDDLE packet's length is also a run of shorter ones).
func splitRun(ip, udp, pl []byte, icrc uint32) (seg int, icrcOK bool) {
	if len(pl) < roce.BTHLen+roce.ICRCLen {
		return 0, false
	}
	var buf [len(pathMTUs)]int
	sizes := runSizes(pl[:len(pl)-roce.ICRCLen], buf[:0])
	shorter := false
	for _, s := range sizes {
		shorter = shorter || s < len(pl)
	}
	if !shorter {
		return 0, false
	}
	if len(pl) <= maxPacketLen && roce.ICRC(ip, udp, pl[:len(pl)-roce.ICRCLen]) == icrc {
		return 0, true
	}
	for _, s := range sizes {
		if s >= len(pl) || s < roce.BTHLen+roce.ICRCLen || (len(pl)+s-1)/s > maxRunSegs*2 {
			continue
		}
		var h [udpHead]byte
		segHead(&h, ip, udp, 0, s)
		if roce.ICRC(h[:20], h[20:], pl[:s-roce.ICRCLen]) == binary.LittleEndian.Uint32(pl[s-roce.ICRCLen:]) {
			return s, false
		}
	}
	return 0, false
}

// txSock is a source port's UDP socket; used is the send batch that last
// used it.
type txSock struct {
	fd   int // -1: the port goes through the raw socket
	used uint64
}

// txSocket is the UDP socket the datagrams from source port port go
// through, -1 for the raw socket. Under the chain's lock.
func (w *WireEndpoint) txSocket(port uint16) int {
	if s, ok := w.txSocks[port]; ok {
		s.used = w.txBatch
		return s.fd
	}
	if len(w.txSocks) >= maxTxSockets {
		w.evictTxSocket()
	}
	fd := openTxSocket(w.addr, port)
	if fd < 0 {
		w.c.WireTxSocketFallbacks.Add(1)
	}
	w.txSocks[port] = &txSock{fd: fd, used: w.txBatch}
	return fd
}

// evictTxSocket closes the socket of the port unused the longest, so that
// a daemon whose QPs come and go keeps its sockets to maxTxSockets (its
// ports are 0xC000 + 14 bits of a QPN: 16 384 of them). Never one the
// current batch uses, whose descriptor sendBatch holds; a port evicted
// gets a socket again at its next datagram.
func (w *WireEndpoint) evictTxSocket() {
	var port uint16
	var old *txSock
	for p, s := range w.txSocks {
		if s.used < w.txBatch && (old == nil || s.used < old.used) {
			port, old = p, s
		}
	}
	if old == nil {
		return // every socket serves this batch: one more for now
	}
	if old.fd >= 0 {
		unix.Close(old.fd)
	}
	delete(w.txSocks, port)
	w.c.WireTxSocketEvictions.Add(1)
}

// openTxSocket opens the UDP socket of source port port on a: bound, DF
// set (so that the kernel's IP ID is 0, as the ICRC was computed), TTL
// 64, and a filter that drops what arrives. -1 when any of it fails.
func openTxSocket(a [4]byte, port uint16) int {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		return -1
	}
	err = attachFilter(fd, dropAllFilter)
	if err == nil {
		err = unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO)
	}
	if err == nil {
		err = unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_TTL, ttl)
	}
	if err == nil {
		err = unix.Bind(fd, &unix.SockaddrInet4{Addr: a, Port: int(port)})
	}
	if err != nil {
		unix.Close(fd)
		return -1
	}
	sockBuf(fd, unix.SO_SNDBUFFORCE, unix.SO_SNDBUF, wireBufBytes)
	mcastSendOpts(fd, a)
	return fd
}
