package device

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// recvDontWait is recv(fd, b, MSG_DONTWAIT) without the source address
// that unix.Recvfrom decodes (and allocates) for every datagram.
func recvDontWait(fd int, b []byte) (int, error) {
	n, _, e := unix.Syscall6(unix.SYS_RECVFROM, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)),
		unix.MSG_DONTWAIT, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// socketDrops is the number of datagrams the kernel dropped on fd for want
// of receive buffer room (SO_MEMINFO's SK_MEMINFO_DROPS), or 0.
func socketDrops(fd int) uint64 {
	var info [9]uint32 // SK_MEMINFO_VARS as of Linux 4.x; DROPS is the last
	l := uint32(unsafe.Sizeof(info))
	_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_MEMINFO,
		uintptr(unsafe.Pointer(&info[0])), uintptr(unsafe.Pointer(&l)), 0)
	if e != 0 || l < uint32(unsafe.Sizeof(info)) {
		return 0
	}
	return uint64(info[8])
}
