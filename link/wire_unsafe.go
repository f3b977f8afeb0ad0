package link

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
