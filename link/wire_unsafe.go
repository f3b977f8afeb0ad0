package link

import (
	"unsafe"

	"golang.org/x/sys/unix"

	"rdmafs/roce"
)

// mmsgs is a vector of messages for recvmmsg(2) or sendmmsg(2): the
// headers, their iovecs (one buffer each), the IPv4 addresses of a send
// and the control buffers of a receive, set up once and reused for every
// call, so that a batch costs one system call and no allocation. The
// buffers the headers point at are Go memory that the vector keeps alive
// (the collector does not move it).
type mmsgs struct {
	hdrs  []unix.Mmsghdr
	iovs  []unix.Iovec
	names []unix.RawSockaddrInet4
	bufs  [][]byte
	ctl   [][]byte
	dgs   [][]byte // a send's datagrams, as set
}

// newRecvMmsgs is a receive vector over bufs, each with a control buffer
// of ctlLen bytes.
func newRecvMmsgs(bufs [][]byte, ctlLen int) *mmsgs {
	n := len(bufs)
	m := &mmsgs{hdrs: make([]unix.Mmsghdr, n), iovs: make([]unix.Iovec, n), bufs: bufs, ctl: make([][]byte, n)}
	for i := range m.hdrs {
		m.iovs[i].Base = &bufs[i][0]
		m.iovs[i].SetLen(len(bufs[i]))
		m.ctl[i] = make([]byte, ctlLen)
		h := &m.hdrs[i].Hdr
		h.Iov = &m.iovs[i]
		h.SetIovlen(1)
	}
	return m
}

// recv is recvmmsg(fd, the vector, flags): the number of datagrams, each
// m.hdrs[i].Len bytes long in m.bufs[i], its control messages in
// m.ctl[i][:m.hdrs[i].Hdr.Controllen].
func (m *mmsgs) recv(fd, flags int) (int, error) {
	for i := range m.hdrs {
		h := &m.hdrs[i]
		h.Len = 0
		h.Hdr.Flags = 0
		h.Hdr.Control = &m.ctl[i][0]
		h.Hdr.SetControllen(len(m.ctl[i]))
	}
	n, _, e := unix.Syscall6(unix.SYS_RECVMMSG, uintptr(fd), uintptr(unsafe.Pointer(&m.hdrs[0])), uintptr(len(m.hdrs)),
		uintptr(flags), 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// newSendMmsgs is a send vector of n messages.
func newSendMmsgs(n int) *mmsgs {
	m := &mmsgs{hdrs: make([]unix.Mmsghdr, n), iovs: make([]unix.Iovec, n),
		names: make([]unix.RawSockaddrInet4, n), bufs: make([][]byte, n), dgs: make([][]byte, n)}
	for i := range m.hdrs {
		m.names[i].Family = unix.AF_INET
		h := &m.hdrs[i].Hdr
		h.Name = (*byte)(unsafe.Pointer(&m.names[i]))
		h.Namelen = unix.SizeofSockaddrInet4
		h.Iov = &m.iovs[i]
		h.SetIovlen(1)
	}
	return m
}

// set makes message i the datagram b (which must stay untouched until the
// send) to dst.
func (m *mmsgs) set(i int, b []byte, dst [4]byte) {
	m.names[i].Addr = dst
	m.iovs[i].Base = &b[0]
	m.iovs[i].SetLen(len(b))
}

// send is sendmmsg(fd, messages from..to-1, MSG_DONTWAIT): how many of them
// went out.
func (m *mmsgs) send(fd, from, to int) (int, error) {
	n, _, e := unix.Syscall6(unix.SYS_SENDMMSG, uintptr(fd), uintptr(unsafe.Pointer(&m.hdrs[from])), uintptr(to-from),
		unix.MSG_DONTWAIT, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// runMmsgs is the send vector of the UDP sockets: message m is a run of
// one or more datagrams' UDP payloads, one iovec each, with a UDP_SEGMENT
// control message when there is more than one.
type runMmsgs struct {
	hdrs  []unix.Mmsghdr
	iovs  []unix.Iovec
	names []unix.RawSockaddrInet4
	ctl   [][]byte
}

func newRunMmsgs(n int) *runMmsgs {
	m := &runMmsgs{hdrs: make([]unix.Mmsghdr, n), iovs: make([]unix.Iovec, n),
		names: make([]unix.RawSockaddrInet4, n), ctl: make([][]byte, n)}
	for i := range m.hdrs {
		m.names[i].Family = unix.AF_INET
		port := (*[2]byte)(unsafe.Pointer(&m.names[i].Port)) // network order
		port[0], port[1] = roce.UDPPort>>8, roce.UDPPort&0xFF
		m.ctl[i] = make([]byte, unix.CmsgSpace(2))
		c := (*unix.Cmsghdr)(unsafe.Pointer(&m.ctl[i][0]))
		c.Level = unix.SOL_UDP
		c.Type = unix.UDP_SEGMENT
		c.SetLen(unix.CmsgLen(2))
		h := &m.hdrs[i].Hdr
		h.Name = (*byte)(unsafe.Pointer(&m.names[i]))
		h.Namelen = unix.SizeofSockaddrInet4
	}
	return m
}

// set makes message i the datagrams dgs (IPv4 header on; they must stay
// untouched until the send) to dst, starting at iovec iov; seg is the
// segment size of a run of more than one.
func (m *runMmsgs) set(i, iov int, dgs [][]byte, dst [4]byte, seg int) {
	m.names[i].Addr = dst
	for k, b := range dgs {
		m.iovs[iov+k].Base = &b[udpHead]
		m.iovs[iov+k].SetLen(len(b) - udpHead)
	}
	h := &m.hdrs[i].Hdr
	h.Iov = &m.iovs[iov]
	h.SetIovlen(len(dgs))
	if len(dgs) > 1 {
		*(*uint16)(unsafe.Pointer(&m.ctl[i][unix.CmsgLen(0)])) = uint16(seg)
		h.Control = &m.ctl[i][0]
		h.SetControllen(len(m.ctl[i]))
	} else {
		h.Control = nil
		h.SetControllen(0)
	}
}

// send is sendmmsg(fd, messages from..to-1, MSG_DONTWAIT).
func (m *runMmsgs) send(fd, from, to int) (int, error) {
	n, _, e := unix.Syscall6(unix.SYS_SENDMMSG, uintptr(fd), uintptr(unsafe.Pointer(&m.hdrs[from])), uintptr(to-from),
		unix.MSG_DONTWAIT, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}
