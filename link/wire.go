package link

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"rdmafs/roce"
)

// WireConfig configures the wire.
type WireConfig struct {
	// Addr is the IPv4 address the wire speaks RoCEv2 on (UDP port 4791).
	Addr netip.Addr
	// SpinIdle is how long the receive goroutine polls the socket without
	// blocking after a datagram (negative: never).
	SpinIdle time.Duration
}

// WireEndpoint is RoCEv2 over IPv4 through the kernel: the raw socket it
// sends and receives on, its filter, the UDP socket that reserves the
// port, and the receive goroutine.
//
// # Sockets
//
// Receiving needs the whole IPv4 header, because the ICRC covers the IP ID
// that a sender such as rxe sets at random: a UDP socket never shows it.
// So the wire reads through a raw socket (AF_INET, SOCK_RAW, IPPROTO_UDP)
// bound to Addr, with a classic BPF filter that passes only UDP datagrams
// to port 4791 that are not fragments, and verifies every ICRC: a datagram
// whose ICRC does not match is counted (ICRCErrors) and handed to the
// device as BadICRC, as is anything that does not parse (Malformed).
// Nothing received can make the wire panic.
//
// Sending goes through the same raw socket with IP_HDRINCL: the wire writes
// the whole datagram, IPv4 header (DF, IP ID 0, TTL 64) and UDP header
// included, so the UDP source port can be per QP as in rxe (SourcePort) and
// the ICRC is computed over exactly the header that goes out (the kernel
// keeps an ID of 0 on a DF packet and fills in the same length and
// checksum). This is the measured fact of shared/interop/rxe-peer (an
// unconnected DF socket sends IP ID 0) taken one step further: a UDP socket
// would fix the source port.
//
// A UDP socket bound to Addr:4791 is held open as well, with a filter that
// drops everything: it reserves the port (a second wire on the same address
// fails in OpenWire) and keeps the kernel from answering every RoCE packet
// with an ICMP port-unreachable. The kernel counts what that filter drops
// as UDP InErrors.
//
// # The receive goroutine
//
// It reads the raw socket itself, not through Go's netpoller: a process
// whose goroutines spin (the engine, in-process clients) gets netpoller
// wake-ups only every few milliseconds. It blocks in read(2) when the wire
// is quiet and polls without blocking for SpinIdle after each datagram, so
// a burst or a ping-pong does not pay a thread wake-up per packet. It
// checks each batch of datagrams without locks and delivers it under one
// hold of the chain's lock. Close shuts the socket down, which wakes it.
//
// Raw sockets need CAP_NET_RAW; OpenWire fails with a clear error without
// it.
type WireEndpoint struct {
	cfg  WireConfig
	addr [4]byte
	lock sync.Locker
	c    *Counters
	disp Dispatcher // set by Attach before Start

	udp *net.UDPConn // reserves Addr:4791
	fd  int          // the raw socket: a blocking descriptor
	to  unix.SockaddrInet4
	tx  []byte      // datagram being built; under the chain's lock
	rp  roce.Packet // scratch; under the chain's lock

	started bool
	done    chan struct{}
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

// OpenWire opens the wire's sockets on cfg.Addr. lock is the chain's lock
// the receive goroutine delivers under; c receives the counters. Attach a
// dispatcher, then Start.
func OpenWire(cfg WireConfig, lock sync.Locker, c *Counters) (*WireEndpoint, error) {
	a := cfg.Addr.Unmap()
	if !a.Is4() {
		return nil, fmt.Errorf("roce: %v is not an IPv4 address", cfg.Addr)
	}
	w := &WireEndpoint{cfg: cfg, addr: a.As4(), lock: lock, c: c, done: make(chan struct{})}
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
	return w, nil
}

// Addr is the wire's IPv4 address.
func (w *WireEndpoint) Addr() [4]byte { return w.addr }

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

// InterfaceMTU is the MTU of the interface that has address a.
func InterfaceMTU(a netip.Addr) (int, bool) {
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

// Attach implements Endpoint.Attach.
func (w *WireEndpoint) Attach(d Dispatcher) { w.disp = d }

// Start starts the receive goroutine (once a dispatcher is attached).
func (w *WireEndpoint) Start() {
	w.started = true
	go w.recvLoop()
}

// Close implements Endpoint.Close: it stops the receive goroutine and
// closes the sockets. Not under the chain's lock (the goroutine may be
// waiting for it).
func (w *WireEndpoint) Close() {
	w.closing.Store(true)
	// Shutting the socket down wakes the goroutine blocked in read.
	unix.Shutdown(w.fd, unix.SHUT_RDWR)
	if w.started {
		<-w.done
	}
	unix.Close(w.fd)
	w.udp.Close()
}

// WritePackets implements Endpoint.WritePackets: each packet is encoded
// and sent to Meta.Dst.
func (w *WireEndpoint) WritePackets(pkts []Packet) {
	for _, p := range pkts {
		p.Done(w.send(p))
	}
}

func (w *WireEndpoint) send(p Packet) bool {
	b, err := Encode(w.tx, p, &w.rp)
	if cap(b) > cap(w.tx) {
		w.tx = b[:0]
	}
	if err != nil {
		w.c.WireSendErrors.Add(1)
		return false
	}
	w.to.Addr = p.Meta().Dst
	for try := 0; ; try++ {
		err = unix.Sendto(w.fd, b, unix.MSG_DONTWAIT, &w.to)
		if err == unix.EINTR || (err == unix.EAGAIN && try < 1000) {
			runtime.Gosched()
			continue
		}
		break
	}
	if err != nil {
		w.c.WireSendErrors.Add(1)
		return false
	}
	w.c.WirePacketsSent.Add(1)
	return true
}

// recvBatch is how many datagrams the receive goroutine takes from the
// socket before it delivers them under one hold of the chain's lock.
const recvBatch = 32

// recvBufSize holds the largest datagram a 4096-byte MTU produces with
// room to spare; a longer one is truncated and then fails to parse.
const recvBufSize = 8192

// recvLoop reads datagrams until the socket is closed.
func (w *WireEndpoint) recvLoop() {
	defer close(w.done)
	var (
		bufs [recvBatch][]byte
		dgs  [recvBatch]Datagram
		n    int
	)
	for i := range bufs {
		bufs[i] = make([]byte, recvBufSize)
	}
	spin := w.cfg.SpinIdle
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
			w.c.WireRecvErrors.Add(1)
			time.Sleep(time.Millisecond)
			continue
		}
		lastRecv = time.Now()
		dgs[0].Raw = bufs[0][:m]
		n = 1
		for n < recvBatch {
			m, err := recvDontWait(w.fd, bufs[n])
			if err != nil || m == 0 {
				break
			}
			dgs[n].Raw = bufs[n][:m]
			n++
		}
		w.verify(dgs[:n])
		w.lock.Lock()
		busy := w.disp.DeliverDatagrams(dgs[:n])
		w.lock.Unlock()
		for i := range dgs[:n] {
			dgs[i] = Datagram{}
		}
		if busy != nil {
			w.backOff(busy)
		}
		// The delivery woke the engine goroutine onto this P; blocking in
		// read now would keep it there until sysmon takes the P back (up
		// to milliseconds). Let it run first.
		runtime.Gosched()
	}
}

// verify checks each datagram (IPv4, UDP, ICRC, IB headers) without any
// lock, and parses the good ones.
func (w *WireEndpoint) verify(dgs []Datagram) {
	for i := range dgs {
		dg := &dgs[i]
		w.c.WirePacketsRecv.Add(1)
		dg.Status, dg.BadQPN = Malformed, 0
		var d roce.Datagram
		if err := roce.ParseIPv4(dg.Raw, &d); err != nil || [4]byte(d.IP[16:20]) != w.addr {
			w.c.MalformedPackets.Add(1)
			continue
		}
		if roce.ICRC(d.IP, d.UDP, d.IB) != d.ICRC {
			w.c.ICRCErrors.Add(1)
			dg.Status = BadICRC
			dg.BadQPN = uint32(d.IB[5])<<16 | uint32(d.IB[6])<<8 | uint32(d.IB[7])
			continue
		}
		if err := roce.ParseIB(d.IB, &dg.Packet); err != nil || dg.Packet.PKey&0x7FFF != 0x7FFF {
			w.c.MalformedPackets.Add(1)
			dg.Packet = roce.Packet{}
			continue
		}
		dg.Status = OK
		dg.Src, dg.Dst = [4]byte(d.IP[12:16]), [4]byte(d.IP[16:20])
		dg.SrcPort = binary.BigEndian.Uint16(d.UDP[0:2])
	}
}

// backOff waits, at most BackOffMax, until busy says the receiver has
// room again (or the wire closes).
func (w *WireEndpoint) backOff(busy func() bool) {
	deadline := time.Now().Add(BackOffMax)
	for !w.closing.Load() && time.Now().Before(deadline) {
		w.lock.Lock()
		b := busy()
		w.lock.Unlock()
		if !b {
			return
		}
		time.Sleep(20 * time.Microsecond)
	}
}

// BackOffMax bounds one wait for a receiver that is not drained (a QP in
// RESET, say, which takes nothing): the loop goes on reading, and the
// receiver's own cap drops what does not fit.
const BackOffMax = 50 * time.Millisecond
