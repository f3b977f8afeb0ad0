package qp

import (
	"errors"
	"fmt"
)

// ErrUnsupported marks a request that is well formed but names a feature
// rdmafs does not implement (alternate paths, a QP type). Callers map it to
// EOPNOTSUPP; every other error of this package is EINVAL.
var ErrUnsupported = errors.New("not supported")

// Error is a rejected token, attribute or request. Key names the offending
// token or attribute (empty for whole-request errors) so that the reason a
// user reads says exactly what to fix.
type Error struct {
	Key string
	Msg string
	Err error // optional cause; errors.Is(e, ErrUnsupported) works through it
}

func (e *Error) Error() string {
	if e.Key == "" {
		return e.Msg
	}
	return fmt.Sprintf("%s: %s", e.Key, e.Msg)
}

func (e *Error) Unwrap() error { return e.Err }

// errorf builds an *Error for key.
func errorf(key, format string, args ...any) *Error {
	return &Error{Key: key, Msg: fmt.Sprintf(format, args...)}
}
