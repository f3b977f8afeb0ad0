package cm

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"rdmafs/qp"
)

// RecordSize is one event on a channel FIFO: a text line padded with
// spaces to 1023 bytes and a newline. It is below PIPE_BUF, so each record
// is one atomic write and a reader of 1024 bytes gets exactly one event.
const RecordSize = 1024

// MaxBacklog is how many events a channel keeps for a reader that does
// not drain it. Beyond, a connect request is refused at once (REJ no
// resources, counted in the channel's dropped) rather than reported.
const MaxBacklog = 4096

// MaxQueuedBytesPerUser bounds the events all the channels of one owner
// keep for readers that do not drain them (each event counted at its
// size in the daemon, about 200 bytes to 1 KiB): a user's 1,024 channels
// hold no more than one full channel's worth, not 1,024 of them. Beyond,
// events are lost and counted as on a full channel.
const MaxQueuedBytesPerUser = 4 << 20

// size is what an event costs queued: the struct, its slice and strings.
func (e *Event) size() int64 {
	n := 96 + len(e.Name)
	for _, kv := range e.KV {
		n += 16 + len(kv)
	}
	return int64(n)
}

// Event names: rdma_cm's RDMA_CM_EVENT_* lower-cased without the prefix.
const (
	EvAddrResolved    = "addr_resolved"
	EvAddrError       = "addr_error"
	EvRouteResolved   = "route_resolved"
	EvRouteError      = "route_error"
	EvConnectRequest  = "connect_request"
	EvConnectResponse = "connect_response"
	EvConnectError    = "connect_error"
	EvUnreachable     = "unreachable"
	EvRejected        = "rejected"
	EvEstablished     = "established"
	EvDisconnected    = "disconnected"
	EvDeviceRemoval   = "device_removal"
	EvTimewaitExit    = "timewait_exit"
)

// Negative errno statuses, as the kernel's rdma_cm reports them.
const (
	StatusTimedOut    = -110 // ETIMEDOUT
	StatusUnreachable = -113 // EHOSTUNREACH
)

// Event is one event of an id.
type Event struct {
	Name   string
	ID     uint32
	Status int
	// KV are extra key=value pairs, in order.
	KV []string
}

func (e *Event) add(k string, v any) { e.KV = append(e.KV, fmt.Sprintf("%s=%v", k, v)) }

// Line is the event's text without padding.
func (e Event) Line() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s=%s %s=%d %s=%d", qp.KeyEvent, e.Name, KeyID, e.ID, KeyStatus, e.Status)
	for _, kv := range e.KV {
		b.WriteByte(' ')
		b.WriteString(kv)
	}
	return b.String()
}

// Record is the event as written to the FIFO. Every key and value the
// agent emits is bounded (the largest private data is 196 bytes, 392 in
// hex), so the line always fits.
func (e Event) Record() [RecordSize]byte {
	var r [RecordSize]byte
	for i := range r {
		r[i] = ' '
	}
	copy(r[:RecordSize-1], e.Line())
	r[RecordSize-1] = '\n'
	return r
}

// RecordKeys are the keys of an event record: the event's name, id and
// status, then those an event adds (Event.add), as librdmacm reads them.
var RecordKeys = []string{qp.KeyEvent, KeyID, KeyStatus, KeySrcAddr, KeySrcPort, KeyDstAddr, KeyDstPort,
	KeyListenID, KeyPrivateData, KeyResponderResources, KeyInitiatorDepth, KeyFlowControl, KeyRetryCount,
	KeyRNRRetryCount, qp.KeySRQ, qp.KeyQPNum, qp.KeyQKey}

// ParseRecord reads a record back into its name, id, status and keys (for
// tests and tools); a key not of RecordKeys is an error.
func ParseRecord(rec []byte) (map[string]string, error) {
	if len(rec) != RecordSize || rec[RecordSize-1] != '\n' {
		return nil, fmt.Errorf("cm: a record is %d bytes ending in a newline", RecordSize)
	}
	m, err := keyValues(strings.Fields(string(rec)), RecordKeys, "record")
	if err != nil {
		return nil, err
	}
	if m[qp.KeyEvent] == "" {
		return nil, fmt.Errorf("cm: record has no event")
	}
	return m, nil
}

// Channel is an event channel: the queue of events of the ids that report
// to it. The agent appends under its own lock; the reader (fsnode's FIFO
// writer) takes them with Next.
type Channel struct {
	Num   uint32
	Owner uint32

	ids int // ids reporting here; guarded by Agent.mu

	mu     sync.Mutex // after Agent.mu
	q      []Event    // guarded by mu
	closed bool       // guarded by mu
	wake   chan struct{}
	// queued is the owner's bytes of queued events, shared by all its
	// channels (MaxQueuedBytesPerUser).
	queued *atomic.Int64

	dropped atomic.Uint64
}

func newChannel(num, owner uint32, queued *atomic.Int64) *Channel {
	return &Channel{Num: num, Owner: owner, wake: make(chan struct{}, 1), queued: queued}
}

// room reports whether one more event (of the largest size) fits.
func (c *Channel) room() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.q) < MaxBacklog && c.queued.Load()+RecordSize <= MaxQueuedBytesPerUser
}

// push appends e and reports whether it did; a full backlog drops it and
// counts (connect requests are refused before they get here, so what is
// dropped is an event of an id whose reader has not read 4096 events).
func (c *Channel) push(e Event) bool {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return false
	}
	if len(c.q) >= MaxBacklog || c.queued.Load()+e.size() > MaxQueuedBytesPerUser {
		c.mu.Unlock()
		c.dropped.Add(1)
		return false
	}
	c.queued.Add(e.size())
	c.q = append(c.q, e)
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
	return true
}

// Next returns the oldest event, waiting for one until done is closed or
// the channel is; ok is false then.
func (c *Channel) Next(done <-chan struct{}) (Event, bool) {
	for {
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return Event{}, false
		}
		if len(c.q) > 0 {
			e := c.q[0]
			c.queued.Add(-e.size())
			c.q[0] = Event{}
			c.q = c.q[1:]
			if len(c.q) == 0 {
				c.q = nil // let a burst's array go
			}
			c.mu.Unlock()
			return e, true
		}
		c.mu.Unlock()
		select {
		case <-c.wake:
		case <-done:
			return Event{}, false
		}
	}
}

// Pending is the number of events not yet taken.
func (c *Channel) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.q)
}

// Dropped counts the events a full backlog lost and the connect requests
// it refused.
func (c *Channel) Dropped() uint64 { return c.dropped.Load() }

func (c *Channel) close() {
	c.mu.Lock()
	if !c.closed {
		for i := range c.q {
			c.queued.Add(-c.q[i].size())
		}
	}
	c.closed = true
	c.q = nil
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}
