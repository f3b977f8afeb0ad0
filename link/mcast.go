package link

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Multicast on the wire, as rxe does it: a multicast group whose MGID is
// an IPv4-mapped multicast address (::ffff:224.x.y.z) is that IP group.
// Datagrams to the group go to its address on UDP 4791 through the same
// sockets as unicast ones (their multicast interface is the wire's
// address, so they leave by its interface, and the host's multicast loop
// brings them back to every member on this host, the sender's device
// included). To receive, the wire joins the group on its interface
// (IP_ADD_MEMBERSHIP) with a raw socket bound to the group's address: a
// raw socket takes only datagrams to the address it is bound to, so
// unicast traffic never passes through it, and IP_MULTICAST_ALL off
// keeps other programs' memberships out. Each group's socket has its own
// receive goroutine, which reads one datagram at a time (multicast is
// unreliable and rare next to the connected traffic), checks it as the
// main one does and delivers it; it never backs off, so a flood to a
// group costs the socket buffer (mcastBufBytes, the kernel drops beyond,
// counted in WireMcastOverruns) and a bounded delivery each, never the
// unicast path; a datagram that fails the checks is counted there and
// never takes the chain's lock (which the engines need) unless a capture
// is open.

// mcastQPN is the destination QPN of a multicast datagram.
const mcastQPN = 0xFFFFFF

// capturing reports whether the wire's dispatcher is a capture that
// someone reads (it then records every datagram, bad ones too).
func (w *WireEndpoint) capturing() bool {
	c, ok := w.disp.(interface{ On() bool })
	return !ok || c.On()
}

// mcastBufBytes is a group socket's receive buffer: what a flood can
// queue before the kernel drops.
const mcastBufBytes = 1 << 20

// mcSock is the socket of one joined group.
type mcSock struct {
	fd   int
	done chan struct{}
	stop bool // set before the socket is shut down; lockcheck:guarded mu
	mu   sync.Mutex
}

// mcastIf is the interface multicast of a wire on address a uses: the
// one that has a, named by a (ifindex 0), except for a loopback address
// (127/8), whose multicast must go by the loopback interface whatever
// device holds the address: the kernel refuses (EINVAL) a loopback source
// on any other, and rdma-core's suite puts its address on a tap.
func mcastIf(a [4]byte) unix.IPMreqn {
	m := unix.IPMreqn{Address: a}
	if a[0] == 127 {
		if ifs, err := net.Interfaces(); err == nil {
			for _, i := range ifs {
				if i.Flags&net.FlagLoopback != 0 {
					m.Ifindex = int32(i.Index)
					break
				}
			}
		}
	}
	return m
}

// mcastSendOpts points a sending socket's multicast at the wire's
// interface (mcastIf). Best effort: a socket without it sends multicast
// by the routing table's choice.
func mcastSendOpts(fd int, a [4]byte) {
	m := mcastIf(a)
	unix.SetsockoptIPMreqn(fd, unix.IPPROTO_IP, unix.IP_MULTICAST_IF, &m)
	unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MULTICAST_LOOP, 1)
	unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MULTICAST_TTL, ttl)
}

// groupAddr is the IPv4 group of an MGID, if it is an IPv4-mapped
// multicast address.
func groupAddr(mgid [16]byte) ([4]byte, bool) {
	a := netip.AddrFrom16(mgid)
	if !a.Is4In6() || !a.Unmap().IsMulticast() {
		return [4]byte{}, false
	}
	return a.Unmap().As4(), true
}

// JoinGroup makes the chain receive the multicast group mgid from the
// wire: nothing to do without a wire or for a group that is not an IPv4
// one. Called with the chain's lock held.
func (c *Chain) JoinGroup(mgid [16]byte) error {
	g, ok := groupAddr(mgid)
	if c.Wire == nil || !ok {
		return nil
	}
	return c.Wire.join(g)
}

// LeaveGroup undoes JoinGroup. Called with the chain's lock held.
func (c *Chain) LeaveGroup(mgid [16]byte) {
	g, ok := groupAddr(mgid)
	if c.Wire == nil || !ok {
		return
	}
	c.Wire.leave(g)
}

func (w *WireEndpoint) join(g [4]byte) error {
	if w.closing.Load() {
		return fmt.Errorf("the wire is closing")
	}
	if _, ok := w.groups[g]; ok {
		return nil
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		return fmt.Errorf("raw socket for group %v: %w", netip.AddrFrom4(g), err)
	}
	err = unix.Bind(fd, &unix.SockaddrInet4{Addr: g})
	if err == nil {
		err = attachFilter(fd, roceFilter)
	}
	if err == nil {
		err = unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MULTICAST_ALL, 0)
	}
	if err == nil {
		m := mcastIf(w.addr)
		m.Multiaddr = g
		err = unix.SetsockoptIPMreqn(fd, unix.IPPROTO_IP, unix.IP_ADD_MEMBERSHIP, &m)
	}
	if err != nil {
		unix.Close(fd)
		return fmt.Errorf("group %v on %v: %w", netip.AddrFrom4(g), netip.AddrFrom4(w.addr), err)
	}
	unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, mcastBufBytes)
	// What a flood makes the kernel drop comes with the next datagram.
	unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RXQ_OVFL, 1)
	drain(fd)
	s := &mcSock{fd: fd, done: make(chan struct{})}
	if w.groups == nil {
		w.groups = map[[4]byte]*mcSock{}
	}
	w.groups[g] = s
	go w.groupLoop(s)
	return nil
}

// leave closes the group's socket (which drops the membership). The
// goroutine is not waited for: it may be waiting for the chain's lock,
// which the caller holds; it finds stop set and ends.
func (w *WireEndpoint) leave(g [4]byte) {
	s := w.groups[g]
	if s == nil {
		return
	}
	delete(w.groups, g)
	s.mu.Lock()
	s.stop = true
	unix.Shutdown(s.fd, unix.SHUT_RDWR)
	s.mu.Unlock()
}

// closeGroups ends every group's socket, at Close (without the chain's
// lock), and waits for their goroutines.
func (w *WireEndpoint) closeGroups() {
	w.lock.Lock()
	gs := w.groups
	w.groups = nil
	w.lock.Unlock()
	for _, s := range gs {
		s.mu.Lock()
		s.stop = true
		unix.Shutdown(s.fd, unix.SHUT_RDWR)
		s.mu.Unlock()
		<-s.done
	}
}

// groupLoop receives a group's datagrams until its socket is shut down,
// then closes it.
func (w *WireEndpoint) groupLoop(s *mcSock) {
	defer close(s.done)
	defer unix.Close(s.fd)
	buf := make([]byte, recvBufSize)
	oob := make([]byte, unix.CmsgSpace(4))
	var out []Datagram
	var dropped uint32 // the socket's own count of overruns so far
	for {
		n, oobn, _, _, err := unix.Recvmsg(s.fd, buf, oob, 0)
		s.mu.Lock()
		stop := s.stop
		s.mu.Unlock()
		if stop || w.closing.Load() {
			return
		}
		if err == unix.EINTR {
			continue
		}
		if err != nil || n <= 0 {
			w.c.WireRecvErrors.Add(1)
			time.Sleep(time.Millisecond)
			continue
		}
		w.c.WireRecvCalls.Add(1)
		if v, ok := rxqOverflow(oob[:oobn]); ok && v != dropped {
			w.c.WireMcastOverruns.Add(uint64(v - dropped))
			dropped = v
		}
		dgs := [1]Datagram{{Raw: buf[:n]}}
		out = w.verifyTo(dgs[:], out[:0], true)
		good := false
		for i := range out {
			// Its QPN is the group's: a bad one names no QP to count
			// it against.
			out[i].BadQPN = mcastQPN
			good = good || out[i].Status == OK
		}
		if len(out) == 0 || !good && !w.capturing() {
			// Counted (verifyTo) and of no use to the device: junk
			// to a group never takes the chain's lock, unless a
			// capture is there to show it.
			continue
		}
		w.lock.Lock()
		s.mu.Lock()
		stop = s.stop
		s.mu.Unlock()
		if !stop && !w.closing.Load() {
			// Unreliable: no back-off; what the QPs cannot take they drop.
			w.disp.DeliverDatagrams(out)
		}
		w.lock.Unlock()
		clear(out)
	}
}

// rxqOverflow reads SO_RXQ_OVFL, the socket's count of the datagrams it
// dropped for want of receive buffer, from a datagram's control messages.
func rxqOverflow(ctl []byte) (uint32, bool) {
	msgs, err := unix.ParseSocketControlMessage(ctl)
	if err != nil {
		return 0, false
	}
	for _, m := range msgs {
		if m.Header.Level == unix.SOL_SOCKET && m.Header.Type == unix.SO_RXQ_OVFL && len(m.Data) >= 4 {
			return binary.NativeEndian.Uint32(m.Data), true
		}
	}
	return 0, false
}
