// Package logger is the daemon's log: one line an event (start, stop,
// errors, inputs refused and packets dropped), with a limit per kind of
// line, so that a flood (a program writing bad commands in a loop, a peer
// sending garbage) cannot fill a disk or slow the daemon down.
//
// The kind of a line is its format string: each call site of Logf is one
// kind, whatever its arguments. A kind may log Burst lines at once and one
// more every Every after that; the lines over the limit are counted, and
// the next line of that kind that is logged says how many were left out.
// Time comes from a clock.Clock, so tests move it by hand.
package logger

import (
	"fmt"
	"io"
	"sync"
	"time"

	"rdmafs/clock"
)

const (
	// Burst is how many lines of one kind may come at once.
	Burst = 20
	// Every is how often a kind earns one more line after its burst.
	Every = time.Second
	// maxKinds bounds the table of kinds; a format beyond it (only a
	// caller building formats at run time could get there) shares one
	// limit with the others of its kind.
	maxKinds = 1024
	// overflowKind is the key of that shared limit.
	overflowKind = "\x00overflow"
)

// Logger writes rate-limited lines to w. It is safe for concurrent use.
type Logger struct {
	clk clock.Clock

	mu    sync.Mutex
	w     io.Writer          // guarded by mu
	kinds map[string]*bucket // guarded by mu
}

// bucket is the limit of one kind: tokens lines may be logged now; one
// more is earned every Every after last.
type bucket struct {
	tokens     int
	last       time.Time
	suppressed uint64 // lines left out since the last one logged
}

// New returns a Logger writing to w, timed by clk (clock.Real{} outside
// tests).
func New(w io.Writer, clk clock.Clock) *Logger {
	return &Logger{clk: clk, w: w, kinds: map[string]*bucket{}}
}

// Logf logs one line of the kind format, unless that kind is over its
// limit. The line is as the standard log package prints it with the
// prefix "rdmafs: " and its date and time.
func (l *Logger) Logf(format string, args ...any) {
	now := l.clk.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.kinds[format]
	if b == nil {
		key := format
		if len(l.kinds) >= maxKinds {
			key = overflowKind
		}
		if b = l.kinds[key]; b == nil {
			b = &bucket{tokens: Burst, last: now}
			l.kinds[key] = b
		}
	}
	if earned := int(now.Sub(b.last) / Every); earned > 0 {
		b.tokens = min(Burst, b.tokens+earned)
		b.last = b.last.Add(time.Duration(earned) * Every)
	}
	if b.tokens == 0 {
		b.suppressed++
		return
	}
	if b.tokens == Burst {
		// A full bucket earns nothing: its clock starts with this line.
		b.last = now
	}
	b.tokens--
	line := fmt.Appendf(nil, "rdmafs: %s %s", now.Format("2006/01/02 15:04:05"), fmt.Sprintf(format, args...))
	if b.suppressed > 0 {
		line = fmt.Appendf(line, " (%d more like this not logged)", b.suppressed)
		b.suppressed = 0
	}
	if len(line) == 0 || line[len(line)-1] != '\n' {
		line = append(line, '\n')
	}
	// A write error has nowhere to go: the log is where it would be told.
	l.w.Write(line)
}

// Write writes p to the log as it is, unlimited: for what must be seen
// whole (the goroutine dump of a stuck shutdown).
func (l *Logger) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
