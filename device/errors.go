package device

import (
	"errors"
	"fmt"
	"syscall"

	"rdmafs/qp"
	"rdmafs/ring"
)

// Error is a failed verb: the operation, the errno libibverbs would return
// and the reason. It is the only error type the device returns, so the errno
// is chosen here, once, and fsnode only translates it.
type Error struct {
	Op    string // verb, e.g. "create_qp", "modify_qp"
	Errno syscall.Errno
	Err   error
}

func (e *Error) Error() string { return fmt.Sprintf("%s: %v", e.Op, e.Err) }

func (e *Error) Unwrap() error { return e.Err }

// Errno maps any error of the device or of qp to an errno.
func Errno(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	var de *Error
	if errors.As(err, &de) {
		return de.Errno
	}
	if errors.Is(err, qp.ErrUnsupported) {
		return syscall.EOPNOTSUPP
	}
	var qe *qp.Error
	if errors.As(err, &qe) {
		return syscall.EINVAL
	}
	if errors.Is(err, ring.ErrCorrupt) {
		return syscall.EINVAL
	}
	var en syscall.Errno
	if errors.As(err, &en) {
		return en
	}
	return syscall.EIO
}

// fail wraps err (a qp error, usually) for op, keeping its errno.
func fail(op string, err error) error {
	if err == nil {
		return nil
	}
	var de *Error
	if errors.As(err, &de) {
		return err
	}
	return &Error{Op: op, Errno: Errno(err), Err: err}
}

func errf(op string, errno syscall.Errno, format string, args ...any) error {
	return &Error{Op: op, Errno: errno, Err: fmt.Errorf(format, args...)}
}
