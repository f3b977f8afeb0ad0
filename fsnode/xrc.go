package fsnode

import (
	"context"
	"fmt"
	"io"
	"os"
	"syscall"

	"golang.org/x/sys/unix"

	"rdmafs/device"
	"rdmafs/qp"
)

// createXRCD is xrcd/new, ibv_open_xrcd. A domain of a file is named by a
// descriptor of the caller's (fd=N): the daemon looks at what that
// descriptor of the requesting thread refers to (/proc/PID/fd/N, the PID
// the kernel put in the FUSE request), never at an inode number a program
// claims, so a program reaches the domains of files it could open and no
// others, whatever its uid.
func (t *tree) createXRCD(ctx context.Context, text string) (string, error) {
	const op = "open_xrcd"
	req, err := qp.ParseOpenXRCD(text)
	if err != nil {
		return "", err
	}
	var file *device.FileKey
	var pin *os.File
	if req.HasFD {
		k, f, err := callerFile(ctx, int(req.FD))
		if err != nil {
			return "", &device.Error{Op: op, Errno: syscall.EBADF, Err: err}
		}
		file, pin = &k, f
	}
	uid, _ := caller(ctx)
	x, err := t.dev.OpenXRCD(device.Owner(uid), file, closerOf(pin), req.Create, req.Excl)
	if err != nil {
		return "", err
	}
	o := t.newObject(ctx, "xrcd", x.Handle)
	o.destroy = x.Close
	t.publish(ctx, o, func() string {
		_, shared := x.Shared()
		return qp.FormatXRCDAttr(&qp.XRCDAttr{Shared: shared})
	})
	return o.name, nil
}

// callerFile identifies the file the caller's descriptor fd refers to,
// and opens it (O_PATH: no access to its bytes) for the domain to keep.
func callerFile(ctx context.Context, fd int) (device.FileKey, *os.File, error) {
	pid := callerPID(ctx)
	if pid <= 0 {
		return device.FileKey{}, nil, fmt.Errorf("fd: the calling process is not visible to the daemon")
	}
	p := fmt.Sprintf("/proc/%d/fd/%d", pid, fd)
	n, err := unix.Open(p, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return device.FileKey{}, nil, fmt.Errorf("fd: %d is not an open descriptor of the caller (%v)", fd, err)
	}
	f := os.NewFile(uintptr(n), p)
	var st unix.Stat_t
	if err := unix.Fstat(n, &st); err != nil {
		f.Close()
		return device.FileKey{}, nil, fmt.Errorf("fd: %v", err)
	}
	return device.FileKey{Dev: st.Dev, Ino: st.Ino}, f, nil
}

// closerOf is f as an io.Closer, nil for none (not a typed nil).
func closerOf(f *os.File) io.Closer {
	if f == nil {
		return nil
	}
	return f
}

// openQP is qp/new with open=QPN (ibv_open_qp): no new object, another
// holder of an XRC_RECV QP, through the lease the caller then names it in.
func (t *tree) openQP(ctx context.Context, req qp.CreateQP) (string, error) {
	uid, _ := caller(ctx)
	q, err := t.dev.OpenQP(device.Owner(uid), req.XRCD, req.Open)
	if err != nil {
		return "", err
	}
	return fmt.Sprint(q.QPN), nil
}

// xrcRecvHooks makes an XRC_RECV QP's object live by its holders: its
// maker (whose first lease of it carries that hold) and each other lease
// that names it; a lease's "close qp N" or its end lets go, and the last
// to let go destroys it. A user who holds its domain may lease it too.
func xrcRecvHooks(o *object, q *device.QP) {
	o.hold = q.Hold
	o.unhold = q.Unhold
	o.makerHold.Store(true)
	o.mayHold = func(uid uint32) bool { return q.MayHold(device.Owner(uid)) }
}
