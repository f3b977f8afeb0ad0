package qp

//go:generate go run gen_ctext.go -o ../libibverbs/rdmafs-text.h

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// EventType is ibv_event_type, with libibverbs' numbering: the async
// events the device raises and the events file names, once for the
// daemon and the client library.
type EventType uint8

// Asynchronous event types (IBV_EVENT_*).
const (
	EventCQErr EventType = iota
	EventQPFatal
	EventQPReqErr
	EventQPAccessErr
	EventCommEst
	EventSQDrained
	EventPathMig
	EventPathMigErr
	EventDeviceFatal
	EventPortActive
	EventPortErr
	EventLIDChange
	EventPKeyChange
	EventSMChange
	EventSRQErr
	EventSRQLimitReached
	EventQPLastWQEReached
	EventClientReregister
	EventGIDChange
	numEvents
)

// The names of the events file: ibv_event_type lower-cased without the
// prefix.
var eventNames = [numEvents]string{
	"cq_err", "qp_fatal", "qp_req_err", "qp_access_err", "comm_est", "sq_drained",
	"path_mig", "path_mig_err", "device_fatal", "port_active", "port_err", "lid_change",
	"pkey_change", "sm_change", "srq_err", "srq_limit_reached", "qp_last_wqe_reached",
	"client_reregister", "gid_change",
}

func (t EventType) String() string {
	if t < numEvents {
		return eventNames[t]
	}
	return fmt.Sprintf("event(%d)", uint8(t))
}

// ParseEventType is the inverse of String for the known events.
func ParseEventType(name string) (EventType, bool) {
	for i, n := range eventNames {
		if n == name {
			return EventType(i), true
		}
	}
	return 0, false
}

// EventKinds are the keys of the objects an event line names (its second
// token): a QP by number, a CQ or SRQ by handle, the port by number.
var EventKinds = []string{KeyQP, KeyCQ, KeySRQ, KeyPort}

// FormatEvent is the events file's line for an event of type t about the
// object kind names (one of EventKinds) with handle or QPN h:
// "event=comm_est qp=17", without the newline.
func FormatEvent(t EventType, kind string, h uint32) string {
	return KeyEvent + "=" + t.String() + " " + kind + "=" + strconv.FormatUint(uint64(h), 10)
}

// ParseEvent is the inverse of FormatEvent, for the known events.
func ParseEvent(line string) (t EventType, kind string, h uint32, err error) {
	f := strings.Fields(line)
	if len(f) != 2 || !strings.HasPrefix(f[0], KeyEvent+"=") {
		return 0, "", 0, fmt.Errorf("malformed event line %q", line)
	}
	name := strings.TrimPrefix(f[0], KeyEvent+"=")
	t, ok := ParseEventType(name)
	if !ok {
		return 0, "", 0, fmt.Errorf("unknown event %q", name)
	}
	kind, v, ok := strings.Cut(f[1], "=")
	n, perr := strconv.ParseUint(v, 10, 32)
	if !ok || perr != nil {
		return 0, "", 0, fmt.Errorf("malformed object %q in event line %q", f[1], line)
	}
	if !slices.Contains(EventKinds, kind) {
		return 0, "", 0, fmt.Errorf("unknown key %q in event line %q (want qp, cq, srq or port)", kind, line)
	}
	return t, kind, uint32(n), nil
}
