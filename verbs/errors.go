package verbs

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
)

// Error is a failed verb: the operation (the libibverbs verb's name without
// ibv_), the errno the daemon answered and the reason it gave (from the
// transaction's "error: ..." line or the object's error file). errors.Is(err,
// syscall.EBUSY) and the like work on it.
type Error struct {
	Op     string
	Errno  syscall.Errno
	Reason string // the daemon's text, or ours; may be empty
	Err    error  // an underlying error that is not an errno (optional)
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("verbs: ")
	b.WriteString(e.Op)
	if e.Errno != 0 {
		b.WriteString(": ")
		b.WriteString(e.Errno.Error())
	}
	if e.Reason != "" {
		b.WriteString(": ")
		b.WriteString(e.Reason)
	} else if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap gives the errno and the underlying error.
func (e *Error) Unwrap() []error {
	var out []error
	if e.Errno != 0 {
		out = append(out, e.Errno)
	}
	if e.Err != nil {
		out = append(out, e.Err)
	}
	return out
}

// PostError is a work request refused at post time, as libibverbs' bad_wr:
// Index is the first WR that was not posted; every WR before it was posted.
type PostError struct {
	Op    string // post_send, post_recv, post_srq_recv
	Index int
	Errno syscall.Errno // EINVAL for a malformed WR, ENOMEM for a full queue
	Err   error         // the reason (a *qp.Error names the field)
}

func (e *PostError) Error() string {
	return fmt.Sprintf("verbs: %s: wr %d: %v: %v", e.Op, e.Index, e.Errno, e.Err)
}

// Unwrap gives the errno and the reason.
func (e *PostError) Unwrap() []error { return []error{e.Errno, e.Err} }

// errnoOf digs the errno out of a file operation's error.
func errnoOf(err error) syscall.Errno {
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	return 0
}

// opError wraps err of a file operation for op, with reason if known.
func opError(op string, err error, reason string) error {
	if err == nil {
		return nil
	}
	e := &Error{Op: op, Errno: errnoOf(err), Reason: reason}
	if e.Errno == 0 || reason == "" {
		e.Err = err // keeps the path of a *os.PathError
	}
	return e
}

func errorf(op string, errno syscall.Errno, format string, args ...any) error {
	return &Error{Op: op, Errno: errno, Reason: fmt.Sprintf(format, args...)}
}
