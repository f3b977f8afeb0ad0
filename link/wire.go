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
	// NoCoalesce sends every datagram in a send of its own, without
	// UDP segmentation offload (gso.go), for comparison.
	NoCoalesce bool
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
// Sending goes through a UDP socket per source port in use (gso.go), bound
// to Addr and the port, DF set, so that the UDP source port is per QP as in
// rxe (SourcePort) and the kernel writes the IPv4 header the ICRC was
// computed over: IP ID 0 on an unconnected DF socket, the measured fact of
// shared/interop/rxe-peer, TTL 64, the same lengths. Those sockets take a
// QP's runs of packets as one send (UDP segmentation offload). A port
// that cannot be had goes through the raw socket with IP_HDRINCL: the wire
// writes the whole datagram, the same IPv4 and UDP header included.
//
// A UDP socket bound to Addr:4791 is held open as well, with a filter that
// drops everything: it reserves the port (a second wire on the same address
// fails in OpenWire) and keeps the kernel from answering every RoCE packet
// with an ICMP port-unreachable. The kernel counts what that filter drops
// as UDP InErrors.
//
// # Batches
//
// Both directions move many datagrams per system call. WritePackets
// encodes a batch into the send vector and hands it to the kernel with
// one sendmmsg(2) per sendBatch datagrams and socket (the device writes
// what one QP turn produced as one batch), a run of them as one message. The receive goroutine sleeps in
// recvmmsg(2) while the link is quiet, so an idle link costs no CPU, and
// wakes with every datagram the socket holds (up to recvBatch); it checks
// them without locks (IPv4, UDP, ICRC, IB headers) and delivers them
// under one hold of the chain's lock, in which the device may also run
// the turns they make runnable and send their answers (the package doc,
// Goroutines), so it wakes no other goroutine for them. It reads the raw
// socket itself, not through Go's netpoller, whose wake-ups a process
// with spinning goroutines (the engine, in-process clients) sees only
// every few milliseconds. Close shuts the socket down, which wakes it.
//
// The counters say how well batching works: WireSendCalls and
// WireRecvCalls against WirePacketsSent and WirePacketsRecv are the
// datagrams per system call; WireSendFull counts sends that found the
// socket buffer full (and were retried), WireRecvOverruns the datagrams
// the kernel dropped for want of receive buffer (SO_RXQ_OVFL).
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
	tx  *mmsgs       // the send vector; under the chain's lock
	rp  roce.Packet  // scratch; under the chain's lock
	rx  *mmsgs       // the receive vector; the receive goroutine's
	// The UDP sockets of the source ports (-1: the raw socket) and their
	// send vector (gso.go); under the chain's lock. coalesce is off with
	// NoCoalesce, or after the kernel refused a coalesced send.
	txSocks  map[uint16]*txSock
	txBatch  uint64 // counts send batches, for txSock.used
	utx      *runMmsgs
	coalesce bool
	// The checked datagrams, coalesced ones cut into their packets; the
	// receive goroutine's.
	out []Datagram

	started bool
	done    chan struct{}
	// closing tells the receive goroutine that a wake-up is the end.
	closing atomic.Bool
	// groups are the IPv4 multicast groups joined, each with its own
	// socket and receive goroutine (mcast.go); under the chain's lock.
	groups map[[4]byte]*mcSock
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
	w := &WireEndpoint{cfg: cfg, addr: a.As4(), lock: lock, c: c, done: make(chan struct{}),
		txSocks: make(map[uint16]*txSock), utx: newRunMmsgs(sendBatch), coalesce: !cfg.NoCoalesce}
	ip := net.IP(a.AsSlice())
	var err error
	w.udp, err = net.ListenUDP("udp4", &net.UDPAddr{IP: ip, Port: roce.UDPPort})
	if err != nil {
		return nil, fmt.Errorf("roce: UDP %v:%d: %w", a, roce.UDPPort, err)
	}
	if err := control(w.udp, func(fd int) error {
		if a.IsLoopback() {
			// A coalesced run arrives on lo whole: the socket takes it
			// whole too (UDP_GRO), and its filter drops it once, where
			// the kernel would cut it into datagrams for the filter to
			// drop one by one. Not off lo, where the same option would
			// have the NIC's GRO merge a peer's packets into runs whose
			// segment size a receiver cannot always find (gso.go).
			unix.SetsockoptInt(fd, unix.IPPROTO_UDP, unix.UDP_GRO, 1)
		}
		return attachFilter(fd, dropAllFilter)
	}); err != nil {
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
	w.tx = newSendMmsgs(sendBatch)
	for i := range w.tx.bufs {
		w.tx.bufs[i] = make([]byte, 0, 256) // grown to the MTU as used
	}
	bufs := make([][]byte, recvBatch)
	for i := range bufs {
		bufs[i] = make([]byte, recvBufSize)
	}
	w.rx = newRecvMmsgs(bufs, unix.CmsgSpace(4))
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
	mcastSendOpts(fd, a.As4())
	// Report the socket's drops with the datagrams (the overruns counter).
	unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RXQ_OVFL, 1)
	drain(fd)
	return fd, nil
}

// drain discards what the socket queued before bind and the filter took
// effect: from socket(2) until then a raw UDP socket receives every UDP
// datagram of the host, to any address (measured: another program's
// RoCE traffic between two other loopback addresses, counted as malformed
// by a device that had just started). Nothing queued by then is the
// device's: it has no QP yet.
func drain(fd int) {
	var b [64]byte
	for i := 0; i < 1<<16; i++ {
		if _, _, err := unix.Recvfrom(fd, b[:], unix.MSG_DONTWAIT); err != nil && err != unix.EINTR {
			return
		}
	}
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
	w.closeGroups()
	// Shutting the socket down wakes the goroutine blocked in read.
	unix.Shutdown(w.fd, unix.SHUT_RDWR)
	if w.started {
		<-w.done
	}
	unix.Close(w.fd)
	w.udp.Close()
	w.lock.Lock()
	for _, s := range w.txSocks {
		if s.fd >= 0 {
			unix.Close(s.fd)
		}
	}
	clear(w.txSocks)
	w.lock.Unlock()
}

// WritePackets implements Endpoint.WritePackets: the packets are encoded
// into the send vector and go out with one sendmmsg(2) for up to
// sendBatch of them.
func (w *WireEndpoint) WritePackets(pkts []Packet) {
	for len(pkts) > 0 {
		n := min(len(pkts), sendBatch)
		w.sendBatch(pkts[:n])
		pkts = pkts[n:]
	}
}

// sendBatch is how many datagrams one sendmmsg(2) carries at most.
const sendBatch = 64

func (w *WireEndpoint) sendBatch(pkts []Packet) {
	// k counts the datagrams in the vector; msg maps each back to its
	// packet, ok says which went out.
	k := 0
	var msg [sendBatch]int
	var ok [sendBatch]bool
	for i, p := range pkts {
		b, err := encodeOpen(w.tx.bufs[k], p, &w.rp)
		if err != nil {
			w.c.WireSendErrors.Add(1)
			continue
		}
		w.tx.bufs[k] = b[:0] // keep a grown buffer
		w.tx.set(k, b, p.Meta().Dst)
		w.tx.dgs[k] = b
		msg[k] = i
		k++
	}
	// Consecutive datagrams of one source port go through its UDP
	// socket, the others through the raw socket.
	// A batch is mostly one QP's: its port is looked up once.
	w.txBatch++
	var fds [sendBatch]int
	for i := range k {
		port := binary.BigEndian.Uint16(w.tx.dgs[i][20:22])
		if i > 0 && port == binary.BigEndian.Uint16(w.tx.dgs[i-1][20:22]) {
			fds[i] = fds[i-1]
		} else {
			fds[i] = w.txSocket(port)
		}
	}
	for i := 0; i < k; {
		fd := fds[i]
		j := i + 1
		for j < k && fds[j] == fd {
			j++
		}
		if fd < 0 {
			for x := i; x < j; x++ {
				roce.SealIPv4(w.tx.dgs[x])
			}
			w.sendRaw(i, j, msg[:], ok[:])
		} else {
			w.sendUDP(fd, i, j, msg[:], ok[:])
		}
		i = j
	}
	sent := 0
	for i, p := range pkts {
		if ok[i] {
			sent++
		}
		p.Done(ok[i])
	}
	w.c.WirePacketsSent.Add(uint64(sent))
}

// sendRaw sends datagrams from..to-1 of the vector through the raw
// socket, one a message, and marks in ok the packets (msg) that went out.
func (w *WireEndpoint) sendRaw(from, to int, msg []int, ok []bool) {
	var first [sendBatch + 1]int
	for x := range to - from + 1 {
		first[x] = from + x
	}
	w.sendMsgs(to-from, first[:], msg, ok, func(a, b int) (int, error) {
		return w.tx.send(w.fd, from+a, from+b)
	})
}

// sendMsgs sends messages 0..m-1 with send (a sendmmsg of messages a..b-1;
// message x holds datagrams first[x]..first[x+1]-1), as many a call as
// the kernel takes: a full socket buffer is waited out, a message that
// cannot go (EMSGSIZE, no route) is counted and skipped, and the rest go.
// It marks in ok the packets (msg) that went out.
func (w *WireEndpoint) sendMsgs(m int, first, msg []int, ok []bool, send func(a, b int) (int, error)) {
	for sent, tries := 0, 0; sent < m; {
		n, err := send(sent, m)
		w.c.WireSendCalls.Add(1)
		switch {
		case n > 0:
			for x := sent; x < sent+n; x++ {
				if first[x+1]-first[x] > 1 {
					w.c.WireCoalescedSends.Add(1)
				}
				for j := first[x]; j < first[x+1]; j++ {
					ok[msg[j]] = true
				}
			}
			sent += n
			tries = 0
		case w.sendFull(err, &tries):
		default:
			w.c.WireSendErrors.Add(1)
			if first[sent+1]-first[sent] > 1 && w.coalesce {
				// The kernel takes no segmentation offload here: the
				// run is lost (its QP sends it again) and the wire
				// sends a datagram at a time from now on.
				w.coalesce = false
				w.c.WireCoalesceRefused.Add(1)
			}
			sent++
			tries = 0
		}
	}
}

// sendFull says whether a send that failed with err should be tried
// again: interrupted, or the socket's buffer is full, which the kernel
// frees as lo delivers, within microseconds (tries bounds it).
func (w *WireEndpoint) sendFull(err error, tries *int) bool {
	if err == unix.EINTR {
		return true
	}
	if (err == unix.EAGAIN || err == unix.ENOBUFS) && *tries < 1000 {
		w.c.WireSendFull.Add(1)
		*tries++
		runtime.Gosched()
		return true
	}
	return false
}

// sendUDP sends datagrams from..to-1 of the vector, all of one source
// port, through that port's UDP socket fd: each coalescible run of them
// as one message with UDP_SEGMENT (gso.go), the others one a message.
func (w *WireEndpoint) sendUDP(fd, from, to int, msg []int, ok []bool) {
	dgs := w.tx.dgs
	var first [sendBatch + 1]int // message m is datagrams first[m]..first[m+1]-1
	m := 0
	for a := from; a < to; m++ {
		b := w.runEnd(a, to)
		for x := a; x < b; x++ {
			binary.BigEndian.PutUint16(dgs[x][4:6], uint16(x-a))
			roce.SealIPv4(dgs[x])
		}
		w.utx.set(m, a-from, dgs[a:b], [4]byte(dgs[a][16:20]), len(dgs[a])-udpHead)
		first[m] = a
		a = b
	}
	first[m] = to
	w.sendMsgs(m, first[:], msg, ok, func(a, b int) (int, error) { return w.utx.send(fd, a, b) })
}

// runEnd is the end of the run of datagrams that may go as one send from
// a on (to at most): those of one destination whose lengths are the
// first's but for a shorter last, if the first's headers imply its length
// (coalescible); a+1 when there is no such run.
func (w *WireEndpoint) runEnd(a, to int) int {
	dgs := w.tx.dgs
	s := len(dgs[a]) - udpHead
	if !w.coalesce || a+1 >= to || !coalescible(dgs[a]) {
		return a + 1
	}
	total, b := s, a+1
	for b < to && b-a < maxRunSegs {
		n := len(dgs[b]) - udpHead
		if [4]byte(dgs[b][16:20]) != [4]byte(dgs[a][16:20]) || n > s || total+n > maxRunBytes {
			break
		}
		total += n
		b++
		if n < s {
			break // only the last may be shorter
		}
	}
	return b
}

// recvBatch is how many datagrams one recvmmsg(2) takes at most, and so
// how many the receive goroutine delivers under one hold of the chain's
// lock.
const recvBatch = 64

// deliverChunk is the most packets one delivery hands the device: the
// device's back-off (device/link.go's wireHighWater, half of a QP's queue)
// leaves room for far more.
const deliverChunk = 256

// recvBufSize holds the longest IPv4 datagram: a coalesced run (gso.go)
// arrives whole on lo.
const recvBufSize = 1 << 16

// recvLoop reads datagrams until the socket is shut down. It sleeps in
// recvmmsg(2) while the link is quiet (MSG_WAITFORONE: block for the
// first datagram, then take what else is queued without waiting).
func (w *WireEndpoint) recvLoop() {
	defer close(w.done)
	rx := w.rx
	dgs := make([]Datagram, recvBatch)
	for {
		n, err := rx.recv(w.fd, unix.MSG_WAITFORONE)
		switch {
		case w.closing.Load():
			return
		case err == unix.EINTR:
			continue
		case err != nil || n == 0:
			// Not expected on a bound raw socket; counted, and not
			// allowed to spin.
			w.c.WireRecvErrors.Add(1)
			time.Sleep(time.Millisecond)
			continue
		}
		w.c.WireRecvCalls.Add(1)
		for i := 0; i < n; i++ {
			h := &rx.hdrs[i]
			dgs[i].Raw = rx.bufs[i][:h.Len]
			if h.Hdr.Controllen > 0 {
				w.overruns(rx.ctl[i][:h.Hdr.Controllen])
			}
		}
		// Delivered deliverChunk packets at a time, with the receiver's
		// back-off between chunks: the datagrams of one call may be
		// coalesced runs of up to 64 packets each, more than a QP's
		// queue has room for above the point where the device says it
		// is busy.
		out := w.verify(dgs[:n])
		for len(out) > 0 {
			k := min(len(out), deliverChunk)
			w.lock.Lock()
			busy := w.disp.DeliverDatagrams(out[:k])
			w.lock.Unlock()
			clear(out[:k])
			out = out[k:]
			if busy != nil {
				w.backOff(busy)
			}
		}
		clear(dgs[:n])
	}
}

// overruns reads SO_RXQ_OVFL from a datagram's control messages: the
// number of datagrams the socket has dropped so far for want of receive
// buffer, which the kernel attaches once there are any.
func (w *WireEndpoint) overruns(ctl []byte) {
	v, ok := rxqOverflow(ctl)
	for ok {
		old := w.c.WireRecvOverruns.Load()
		if uint64(v) <= old || w.c.WireRecvOverruns.CompareAndSwap(old, uint64(v)) {
			break
		}
	}
}

// verify checks each datagram (IPv4, UDP, ICRC, IB headers) without any
// lock, and parses the good ones; a coalesced datagram becomes its
// packets (gso.go). It returns the checked datagrams, in w.out (dgs only
// lends their bytes).
func (w *WireEndpoint) verify(dgs []Datagram) []Datagram {
	w.out = w.verifyTo(dgs, w.out[:0], false)
	return w.out
}

// verifyTo is verify into out; group says the datagrams came from a
// multicast group's socket (mcast.go), whose destination is the group.
func (w *WireEndpoint) verifyTo(dgs []Datagram, out []Datagram, group bool) []Datagram {
	for i := range dgs {
		raw := dgs[i].Raw
		out = append(out, Datagram{Raw: raw, Status: Malformed})
		dg := &out[len(out)-1]
		var d roce.Datagram
		if err := roce.ParseIPv4(raw, &d); err != nil || !group && [4]byte(d.IP[16:20]) != w.addr ||
			group && d.IP[16]&0xF0 != 0xE0 {
			w.c.MalformedPackets.Add(1)
			continue
		}
		pl := raw[udpHead : udpHead+len(d.IB)+roce.ICRCLen]
		s, icrcOK := splitRun(d.IP, d.UDP, pl, d.ICRC)
		if s == 0 {
			w.check(dg, d.IP, d.UDP, d.IB, d.ICRC, icrcOK)
			continue
		}
		w.c.WireCoalescedRecv.Add(1)
		out = out[:len(out)-1] // the datagram gives way to its packets
		for k := 0; len(pl) > 0; k++ {
			n := min(s, len(pl))
			out = append(out, Datagram{Raw: pl[:n:n], Seg: true, Status: Malformed})
			seg := &out[len(out)-1]
			segHead(&seg.Head, d.IP, d.UDP, k, n)
			if n < roce.BTHLen+roce.ICRCLen {
				w.c.MalformedPackets.Add(1)
			} else {
				// splitRun checked the first packet's ICRC.
				w.check(seg, seg.Head[:20], seg.Head[20:], pl[:n-roce.ICRCLen], binary.LittleEndian.Uint32(pl[n-roce.ICRCLen:]), k == 0)
			}
			pl = pl[n:]
		}
	}
	w.c.WirePacketsRecv.Add(uint64(len(out)))
	return out
}

// check checks the ICRC and the IB headers of one datagram whose IPv4 and
// UDP headers are ip and udp, and parses a good one into dg (which comes
// Malformed); icrcOK says the ICRC was checked already.
func (w *WireEndpoint) check(dg *Datagram, ip, udp, ib []byte, icrc uint32, icrcOK bool) {
	if !icrcOK && roce.ICRC(ip, udp, ib) != icrc {
		w.c.ICRCErrors.Add(1)
		dg.Status = BadICRC
		dg.BadQPN = uint32(ib[5])<<16 | uint32(ib[6])<<8 | uint32(ib[7])
		return
	}
	if err := roce.ParseIB(ib, &dg.Packet); err != nil || dg.Packet.PKey&0x7FFF != 0x7FFF {
		w.c.MalformedPackets.Add(1)
		dg.Packet = roce.Packet{}
		return
	}
	dg.Status = OK
	dg.Src, dg.Dst = [4]byte(ip[12:16]), [4]byte(ip[16:20])
	dg.SrcPort = binary.BigEndian.Uint16(udp[0:2])
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
