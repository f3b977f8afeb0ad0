package device

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"rdmafs/qp"
	"rdmafs/roce"
)

// RoCEv2 over IPv4 (VERBS.md §8).
//
// With Config.Addr set, the port's GID is ::ffff:Addr and the device talks
// RoCEv2 on UDP port 4791 of that address. The link every packet takes is
// routeLink: a packet for the device's own GID is delivered to its own
// receive path at once (loopback: the same transport, the same
// receiveLocked, no encoding); a packet for an IPv4-mapped GID goes on the
// wire; anything else has no route and is lost (RC retries and times out).
//
// # Sockets
//
// Receiving needs the whole IPv4 header, because the ICRC covers the IP ID
// that a sender such as rxe sets at random: a UDP socket never shows it.
// So the device reads through a raw socket (AF_INET, SOCK_RAW, IPPROTO_UDP)
// bound to Addr, with a classic BPF filter that passes only UDP datagrams
// to port 4791 that are not fragments, and verifies every ICRC: a packet
// whose ICRC does not match is dropped and counted (icrc_errors), as is
// anything that does not parse (malformed_packets). Nothing received can
// make the device panic.
//
// Sending goes through the same raw socket with IP_HDRINCL: the device
// writes the whole datagram, IPv4 header (DF, IP ID 0, TTL 64) and UDP
// header included, so the UDP source port can be per QP as in rxe (0xC000
// + a 14-bit hash of the sending QPN) and the ICRC is computed over exactly
// the header that goes out (the kernel keeps an ID of 0 on a DF packet and
// fills in the same length and checksum). This is the measured fact of
// shared/interop/rxe-peer (an unconnected DF socket sends IP ID 0) taken
// one step further: a UDP socket would fix the source port.
//
// A UDP socket bound to Addr:4791 is held open as well, with a filter
// that drops everything: it reserves the port (a second device on the same
// address fails in New) and keeps the kernel from answering every RoCE
// packet with an ICMP port-unreachable. The kernel counts what that filter
// drops as UDP InErrors.
//
// The receive goroutine reads the raw socket itself, not through Go's
// netpoller: a process whose goroutines spin (the engine, in-process
// clients) gets netpoller wake-ups only every few milliseconds. It blocks in
// read(2) when the wire is quiet and, like the engine, polls without
// blocking for Config.SpinIdle after each datagram, so a burst or a
// ping-pong does not pay a thread wake-up per packet. It checks each batch
// of datagrams without locks and delivers the good ones under one hold of
// Device.mu. Close shuts the socket down, which wakes it.
//
// Raw sockets need CAP_NET_RAW; New fails with a clear error without it.

// wire is the RoCEv2 link of a device with an address.
type wire struct {
	d    *Device
	addr [4]byte
	udp  *net.UDPConn // reserves Addr:4791
	fd   int          // the raw socket: a blocking descriptor
	to   unix.SockaddrInet4
	tx   []byte      // datagram being built; under Device.mu
	rp   roce.Packet // scratch; under Device.mu
	done chan struct{}
	// closing tells the receive goroutine that a wake-up is the end.
	closing atomic.Bool
}

// roceFilter passes non-fragment UDP datagrams to port 4791 (the packet
// starts at the IPv4 header on a raw socket).
var roceFilter = []unix.SockFilter{
	{Code: unix.BPF_LD | unix.BPF_H | unix.BPF_ABS, K: 6},                    // flags + fragment offset
	{Code: unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K, K: 0x1FFF, Jt: 4},      // a later fragment: drop
	{Code: unix.BPF_LDX | unix.BPF_B | unix.BPF_MSH, K: 0},                   // x = IP header length
	{Code: unix.BPF_LD | unix.BPF_H | unix.BPF_IND, K: 2},                    // UDP destination port
	{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, K: roce.UDPPort, Jf: 1}, // 4791?
	{Code: unix.BPF_RET | unix.BPF_K, K: 0x40000},                            // accept
	{Code: unix.BPF_RET | unix.BPF_K, K: 0},                                  // drop
}

var dropAllFilter = []unix.SockFilter{{Code: unix.BPF_RET | unix.BPF_K, K: 0}}

func attachFilter(fd int, prog []unix.SockFilter) error {
	return unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER,
		&unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]})
}

// sockBuf sets a socket buffer size, beyond rmem_max/wmem_max when allowed.
func sockBuf(fd, force, plain, n int) {
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, force, n) != nil {
		unix.SetsockoptInt(fd, unix.SOL_SOCKET, plain, n)
	}
}

// wireBufBytes is the raw socket's receive and send buffer.
const wireBufBytes = 32 << 20

func openWire(d *Device, a netip.Addr) (*wire, error) {
	w := &wire{d: d, addr: a.As4(), done: make(chan struct{})}
	ip := net.IP(a.AsSlice())
	var err error
	w.udp, err = net.ListenUDP("udp4", &net.UDPAddr{IP: ip, Port: roce.UDPPort})
	if err != nil {
		return nil, fmt.Errorf("roce: UDP %v:%d: %w", a, roce.UDPPort, err)
	}
	if err := control(w.udp, func(fd int) error { return attachFilter(fd, dropAllFilter) }); err != nil {
		w.udp.Close()
		return nil, fmt.Errorf("roce: UDP socket filter: %w", err)
	}
	w.fd, err = openRaw(a)
	if err != nil {
		w.udp.Close()
		if errors.Is(err, syscall.EPERM) {
			return nil, fmt.Errorf("roce: a raw socket (needed to verify the ICRC of received packets and to send per-QP UDP source ports) needs CAP_NET_RAW: %w", err)
		}
		return nil, fmt.Errorf("roce: raw socket on %v: %w", a, err)
	}
	w.tx = make([]byte, 0, 8192)
	go w.recvLoop()
	return w, nil
}

// openRaw opens the raw socket, bound to a, filtered to RoCEv2, with
// IP_HDRINCL for sending. The descriptor stays blocking: the receive
// goroutine sleeps in the kernel, not in the Go netpoller, which a busy
// process (engines and clients that spin) checks only every few
// milliseconds.
func openRaw(a netip.Addr) (int, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		return -1, err
	}
	err = unix.Bind(fd, &unix.SockaddrInet4{Addr: a.As4()})
	if err == nil {
		err = attachFilter(fd, roceFilter)
	}
	if err == nil {
		err = unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_HDRINCL, 1)
	}
	if err != nil {
		unix.Close(fd)
		return -1, err
	}
	sockBuf(fd, unix.SO_RCVBUFFORCE, unix.SO_RCVBUF, wireBufBytes)
	sockBuf(fd, unix.SO_SNDBUFFORCE, unix.SO_SNDBUF, wireBufBytes)
	return fd, nil
}

// interfaceMTU is the MTU of the interface that has address a.
func interfaceMTU(a netip.Addr) (int, bool) {
	ifs, err := net.Interfaces()
	if err != nil {
		return 0, false
	}
	for _, ifc := range ifs {
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, x := range addrs {
			if n, ok := x.(*net.IPNet); ok {
				if ip, ok := netip.AddrFromSlice(n.IP); ok && ip.Unmap() == a {
					return ifc.MTU, true
				}
				if ifc.Flags&net.FlagLoopback != 0 && a.IsLoopback() {
					return ifc.MTU, true // all of 127/8 is on lo
				}
			}
		}
	}
	return 0, false
}

func control(c syscall.Conn, f func(fd int) error) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = f(int(fd)) }); err != nil {
		return err
	}
	return ferr
}

// close stops the receive goroutine and closes the sockets. Not under
// Device.mu (the goroutine may be waiting for it).
func (w *wire) close() {
	w.closing.Store(true)
	// Shutting the socket down wakes the goroutine blocked in read.
	unix.Shutdown(w.fd, unix.SHUT_RDWR)
	<-w.done
	unix.Close(w.fd)
	w.udp.Close()
}

// udpSourcePort is rxe's per-QP source port (roce.QPSourcePort): every
// packet of a QP goes from it, requests and responses alike. So a
// connected QP knows the port its peer sends from, and the receive path
// holds the peer to it (QP.fromPeerLocked) unless Config.AnySourcePort.
func udpSourcePort(qpn uint32) uint16 { return roce.QPSourcePort(qpn) }

// flowSourcePort is the port Linux's RoCE drivers derive from a connection
// since 5.17 (rdma_get_udp_sport): rxe sends every packet of a QP whose
// address has a GRH (every RoCE QP) from it, computed from the flow label
// of that QP's address, or when that is 0 from a flow label made of the two
// QPNs (their product, folded twice), whose low 14 bits, folded with the
// high 6, go above 0xC000. The product makes it the same from either end.
func flowSourcePort(flowLabel, qpnA, qpnB uint32) uint16 {
	fl := flowLabel & 0xFFFFF
	if fl == 0 {
		v := uint64(qpnA) * uint64(qpnB)
		v ^= v >> 20
		v ^= v >> 40
		fl = uint32(v) & 0xFFFFF
	}
	low := fl&0x3FFF ^ fl&0xFC000>>14
	return 0xC000 | uint16(low)
}

// peerAddrLocked reports whether a is the address of a device sharing d's
// objects (d itself included): a datagram between them is counted in flight
// until it arrives (Quiesce).
func (d *Device) peerAddrLocked(a [4]byte) bool {
	for _, t := range d.devs {
		if t.wire != nil && t.wire.addr == a {
			return true
		}
	}
	return false
}

// routeLink is the device's link: loopback for its own GID, the wire for
// other IPv4-mapped GIDs, no route otherwise.
type routeLink struct{ d *Device }

func (l routeLink) xmitLocked(p *packet) {
	d := l.d
	d.Counters.PacketsSent.Add(1)
	d.Counters.BytesSent.Add(uint64(len(p.payload)))
	if d.isLocalGID(p.dgid) {
		if d.wireSelf && d.wire != nil {
			d.wire.sendLocked(p, d.wire.addr)
			d.pool.put(p)
			return
		}
		if d.capture.on.Load() {
			d.captureLocked(p, true)
		}
		p.local = true
		d.receiveLocked(p)
		return
	}
	if w := d.wire; w != nil && isV4Mapped(p.dgid) {
		w.sendLocked(p, [4]byte(p.dgid[12:]))
		d.pool.put(p)
		return
	}
	if d.capture.on.Load() {
		d.captureLocked(p, false)
	}
	d.Counters.NoRoute.Add(1)
	d.pool.put(p)
}

// toWire fills rp with p's wire fields.
func (p *packet) toWire(rp *roce.Packet) {
	*rp = roce.Packet{
		Opcode: roce.Opcode(p.opcode), SE: p.se, PKey: 0xFFFF, DestQP: p.destQPN & roce.QPNMask,
		AckReq: p.ackReq, PSN: uint32(p.psn) & roce.PSNMask,
		VA: p.va, RKey: p.rkey, DMALen: p.dlen, SwapAdd: p.swapAdd, Compare: p.compare,
		Syndrome: p.syndrome, MSN: p.msn & roce.MSNMask, OrigData: p.orig,
		Imm: p.imm, InvRKey: p.imm, QKey: p.qkey, SrcQP: p.srcQP & roce.QPNMask,
		Payload: p.payload,
	}
}

// fromWire fills p (fresh from the pool) from a parsed packet; the payload
// is copied into p's own storage.
func (p *packet) fromWire(rp *roce.Packet) {
	p.opcode = uint8(rp.Opcode)
	p.se, p.ackReq = rp.SE, rp.AckReq
	p.destQPN, p.psn = rp.DestQP, qp.PSN(rp.PSN)
	p.va, p.rkey, p.dlen = rp.VA, rp.RKey, rp.DMALen
	p.swapAdd, p.compare = rp.SwapAdd, rp.Compare
	p.syndrome, p.msn, p.orig = rp.Syndrome, rp.MSN, rp.OrigData
	p.imm = rp.Imm | rp.InvRKey // at most one of them is carried
	p.qkey, p.srcQP = rp.QKey, rp.SrcQP
	p.buf = append(p.buf[:0], rp.Payload...)
	p.payload = p.buf
}

// sendLocked encodes p as a RoCEv2 datagram and sends it to dst. p stays
// the caller's.
func (w *wire) sendLocked(p *packet, dst [4]byte) {
	d := w.d
	p.toWire(&w.rp)
	b, err := w.rp.AppendIB(w.tx[:roce.HeadroomIPv4])
	if err == nil {
		b, err = roce.EncapIPv4(b, w.addr, dst, udpSourcePort(p.srcQPN), 0, 0, 64)
	}
	w.rp.Payload = nil
	if cap(b) > cap(w.tx) {
		w.tx = b[:0]
	}
	if err != nil {
		d.Counters.WireSendErrors.Add(1)
		return
	}
	if d.capture.on.Load() {
		o := d.captureOwnerLocked(p.srcQPN)
		d.capturePublish(append([]byte(nil), b...), o, o)
	}
	w.to.Addr = dst
	for try := 0; ; try++ {
		err = unix.Sendto(w.fd, b, unix.MSG_DONTWAIT, &w.to)
		if err == unix.EINTR || (err == unix.EAGAIN && try < 1000) {
			runtime.Gosched()
			continue
		}
		break
	}
	if err != nil {
		d.Counters.WireSendErrors.Add(1)
		return
	}
	d.Counters.WirePacketsSent.Add(1)
	if d.peerAddrLocked(dst) {
		d.peerSent.Add(1)
	}
}

// recvBatch is how many datagrams the receive goroutine takes from the
// socket before it delivers them under one hold of Device.mu.
const recvBatch = 32

// recvBufSize holds the largest datagram a 4096-byte MTU produces with
// room to spare; a longer one is truncated and then fails to parse.
const recvBufSize = 8192

// recvLoop reads datagrams until the socket is closed.
func (w *wire) recvLoop() {
	defer close(w.done)
	var (
		bufs [recvBatch][]byte
		lens [recvBatch]int
		pkts [recvBatch]roce.Packet
		ok   [recvBatch]bool
		bad  [recvBatch]uint32 // QPN an ICRC-failed packet names, or ^0
		n    int
	)
	for i := range bufs {
		bufs[i] = make([]byte, recvBufSize)
	}
	spin := w.d.cfg.SpinIdle
	var lastRecv time.Time
	for !w.closing.Load() {
		// While traffic flows, poll without blocking (like the engine's
		// spin); then block for one datagram. Then take what else is
		// queued.
		m, err := 0, error(unix.EAGAIN)
		if spin > 0 && time.Since(lastRecv) < spin {
			m, err = recvDontWait(w.fd, bufs[0])
			if err == unix.EAGAIN {
				runtime.Gosched()
				continue
			}
		}
		if err == unix.EAGAIN {
			m, err = unix.Read(w.fd, bufs[0])
		}
		switch {
		case w.closing.Load():
			return
		case err == unix.EINTR:
			continue
		case err != nil || m == 0:
			// Not expected on a bound raw socket; counted, and not
			// allowed to spin.
			w.d.Counters.WireRecvErrors.Add(1)
			time.Sleep(time.Millisecond)
			continue
		}
		lastRecv = time.Now()
		lens[0] = m
		n = 1
		for n < recvBatch {
			m, err := recvDontWait(w.fd, bufs[n])
			if err != nil || m == 0 {
				break
			}
			lens[n] = m
			n++
		}
		w.verify(bufs[:n], lens[:n], pkts[:n], ok[:n], bad[:n])
		if full := w.deliver(bufs[:n], lens[:n], pkts[:n], ok[:n], bad[:n]); full != nil {
			w.backOff(full)
		}
		// deliver woke the engine goroutine onto this P; blocking in
		// read now would keep it there until sysmon takes the P back
		// (up to milliseconds). Let it run first.
		runtime.Gosched()
	}
}

// verify checks each datagram (IPv4, UDP, ICRC, IB headers) without any
// lock, and parses the good ones into pkts.
func (w *wire) verify(bufs [][]byte, lens []int, pkts []roce.Packet, ok []bool, bad []uint32) {
	d := w.d
	for i := range bufs {
		ok[i], bad[i] = false, ^uint32(0)
		d.Counters.WirePacketsRecv.Add(1)
		var dg roce.Datagram
		if err := roce.ParseIPv4(bufs[i][:lens[i]], &dg); err != nil || [4]byte(dg.IP[16:20]) != w.addr {
			d.Counters.MalformedPackets.Add(1)
			continue
		}
		if roce.ICRC(dg.IP, dg.UDP, dg.IB) != dg.ICRC {
			d.Counters.ICRCErrors.Add(1)
			bad[i] = uint32(dg.IB[5])<<16 | uint32(dg.IB[6])<<8 | uint32(dg.IB[7])
			continue
		}
		if err := roce.ParseIB(dg.IB, &pkts[i]); err != nil || pkts[i].PKey&0x7FFF != 0x7FFF {
			d.Counters.MalformedPackets.Add(1)
			pkts[i] = roce.Packet{}
			continue
		}
		ok[i] = true
	}
}

// deliver hands the good datagrams to the receive path under one hold of
// Device.mu, and counts ICRC errors against the QP they name, if any.
func (w *wire) deliver(bufs [][]byte, lens []int, pkts []roce.Packet, ok []bool, bad []uint32) (full *QP) {
	d := w.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil
	}
	capture := d.capture.on.Load()
	for i := range bufs {
		b := bufs[i][:lens[i]]
		if capture {
			// Only a packet that parsed names a QP of this device.
			o := Owner(0)
			if ok[i] {
				o = d.captureOwnerLocked(pkts[i].DestQP)
			}
			d.capturePublish(append([]byte(nil), b...), o, o)
		}
		if !ok[i] {
			if q := d.qps[bad[i]]; q != nil && bad[i] != ^uint32(0) {
				q.Counters.ICRCErrors++
			}
			continue
		}
		p := d.pool.get()
		p.fromWire(&pkts[i])
		pkts[i].Payload = nil
		p.srcPort = binary.BigEndian.Uint16(b[int(b[0]&0xF)*4:]) // verify parsed the headers
		p.sgid = roce.GIDFromIPv4(netip.AddrFrom4([4]byte(b[12:16])))
		p.dgid = roce.GIDFromIPv4(netip.AddrFrom4([4]byte(b[16:20])))
		self := [4]byte(b[12:16]) == w.addr
		if self && d.wireSelf {
			p.sgid, p.dgid = d.cfg.GID, d.cfg.GID
		} else if p.opcode&transMask == transUD {
			p.ipHdr, p.hasIPHdr = [20]byte(b[:20]), true
		}
		q := d.receiveLocked(p)
		if self || d.peerAddrLocked([4]byte(b[12:16])) {
			d.peerRecv.Add(1)
		}
		if q != nil && q.queuedLocked() >= wireHighWater {
			full = q
		}
	}
	return full
}

// wireHighWater is the queue length (of one of a QP's two receive queues)
// at which the receive loop stops reading the socket until the engine has
// taken the queue down again: a sender that outruns the engine then waits
// in the socket's buffer (32 MiB) instead of losing packets at the QP
// queue's cap, which for UC would lose whole messages.
const wireHighWater = maxQueuedPackets / 2

// backOff waits, at most wireBackOffMax, until q's receive queues are below
// the high-water mark again (or q is gone, or the wire closes).
func (w *wire) backOff(q *QP) {
	d := w.d
	deadline := time.Now().Add(wireBackOffMax)
	for !w.closing.Load() && time.Now().Before(deadline) {
		d.mu.Lock()
		busy := !q.destroyed && q.queuedLocked() >= wireHighWater/2
		d.mu.Unlock()
		if !busy {
			return
		}
		time.Sleep(20 * time.Microsecond)
	}
}

// wireBackOffMax bounds one wait for a QP that is not drained (a QP in
// RESET, say, which takes nothing): the loop goes on reading, and the
// queue's cap drops what does not fit, as before.
const wireBackOffMax = 50 * time.Millisecond
