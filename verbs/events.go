package verbs

import (
	"context"
	"runtime"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"rdmafs/qp"
)

// AsyncEventType is ibv_event_type (same numbering); the constants are
// qp's (qp.EventQPFatal, ...).
type AsyncEventType = qp.EventType

// AsyncEvent is ibv_async_event: what happened and to which object. Kind is
// "qp" (Handle is the QPN), "cq", "srq" or "port".
type AsyncEvent struct {
	Type   AsyncEventType
	Kind   string
	Handle uint32
	Line   string // the daemon's line, as read
}

func (e AsyncEvent) String() string { return e.Line }

// parseAsyncEvent reads "event=comm_est qp=17" (qp.ParseEvent).
func parseAsyncEvent(line string) (AsyncEvent, error) {
	t, kind, h, err := qp.ParseEvent(line)
	return AsyncEvent{Type: t, Kind: kind, Handle: h, Line: line}, err
}

// ReadAsyncEvents is ibv_get_async_event for every event queued: it blocks
// until there is at least one (reading the events file, one batch per
// open) and returns them in order. The daemon shows each user the events
// of its own objects (root: all) and keeps those raised between two calls
// for the next one. When ctx ends first it interrupts the
// read (as Ctrl-C does a cat: a signal to the reading thread, which FUSE
// turns into an interrupt) and returns ctx.Err(); no event is lost.
func (c *Context) ReadAsyncEvents(ctx context.Context) ([]AsyncEvent, error) {
	const op = "get_async_event"
	fd, err := unix.Open(c.path("events"), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	// A mounted rdmafs always has its events file: without it the mount
	// is gone.
	if deviceGone(err) || err == unix.ENOENT {
		return []AsyncEvent{fatalEvent(err)}, nil
	}
	if err != nil {
		return nil, opError(op, err, "")
	}
	defer unix.Close(fd)

	type result struct {
		data []byte
		err  error
	}
	done := make(chan result, 1)
	tid := make(chan int, 1)
	go func() {
		// The read runs on a thread of its own, so that a signal can reach
		// exactly it; the thread goes back to the pool afterwards.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		tid <- unix.Gettid()
		var out []byte
		buf := make([]byte, 16<<10)
		for {
			n, err := unix.Read(fd, buf)
			switch {
			case err == unix.EINTR:
				if ctx.Err() != nil && len(out) == 0 {
					done <- result{err: ctx.Err()}
					return
				}
				continue
			case err != nil:
				done <- result{data: out, err: err}
				return
			case n == 0:
				done <- result{data: out}
				return
			}
			out = append(out, buf[:n]...)
		}
	}()
	t := <-tid
	var res result
	select {
	case res = <-done:
	case <-ctx.Done():
		pid := unix.Getpid()
		tick := time.NewTicker(5 * time.Millisecond)
	interrupt:
		for {
			// SIGURG: the Go runtime handles it (preemption) and ignores
			// it otherwise; any pending signal interrupts the FUSE read.
			unix.Tgkill(pid, t, syscall.SIGURG)
			select {
			case res = <-done:
				break interrupt
			case <-tick.C:
			}
		}
		tick.Stop()
	}
	if res.err != nil && len(res.data) == 0 {
		if res.err == ctx.Err() {
			return nil, res.err
		}
		if deviceGone(res.err) {
			return []AsyncEvent{fatalEvent(res.err)}, nil
		}
		return nil, opError(op, res.err, "")
	}
	var evs []AsyncEvent
	for _, l := range strings.Split(string(res.data), "\n") {
		if l = strings.TrimSpace(l); l == "" {
			continue
		}
		ev, err := parseAsyncEvent(l)
		if err != nil {
			return evs, &Error{Op: op, Errno: syscall.EIO, Err: err}
		}
		evs = append(evs, ev)
	}
	return evs, nil
}

// deviceGone reports an error that means the daemon is gone: its FUSE
// connection was aborted or the mount went away.
func deviceGone(err error) bool {
	return err == unix.ENOTCONN || err == unix.ECONNABORTED || err == unix.ENODEV
}

// fatalEvent is the IBV_EVENT_DEVICE_FATAL a client gets when the daemon
// dies or the device is unmounted under it. Mapped memory stays readable.
func fatalEvent(err error) AsyncEvent {
	return AsyncEvent{Type: qp.EventDeviceFatal, Kind: "port", Handle: 1,
		Line: "event=device_fatal port=1 (" + err.Error() + ")"}
}
