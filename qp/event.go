package qp

import "fmt"

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
