package verbs

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"rdmafs/qp"
	"rdmafs/ring"
)

// eventSlice is how long GetCQEvent sleeps on the futex before it looks
// at its context again.
const eventSlice = 50 * time.Millisecond

// CQ is a completion queue (ibv_cq): the mapped cq/H/ring, consumed here.
type CQ struct {
	ctx    *Context
	Handle uint32

	mu     sync.Mutex // one poller at a time; also orders Resize and Destroy
	mapMu  sync.RWMutex
	region *ring.Region   // guarded by mu and mapMu (written with both held)
	r      *ring.Ring     // guarded by mu and mapMu
	cons   *ring.Consumer // guarded by mu
	cqe    atomic.Uint32

	evMu  sync.Mutex
	taken uint32 // event_seq value up to which events were taken; guarded by evMu
}

// CreateCQ is ibv_create_cq: a CQ of at least cqe entries (CQE reports
// how many it has: a power of two).
func (c *Context) CreateCQ(cqe int) (*CQ, error) { return c.CreateCQEx(cqe, 0) }

// CQWCFlags are the optional completion fields of CreateCQEx:
// CQTimestamp and CQTimestampWallclock.
type CQWCFlags = qp.CQWCFlags

const (
	// CQTimestamp is IBV_WC_EX_WITH_COMPLETION_TIMESTAMP: WC.CompletionTS
	// is the device clock of the completion.
	CQTimestamp = qp.CQTimestamp
	// CQTimestampWallclock is IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK:
	// WC.CompletionWallclockNS is its wall-clock time.
	CQTimestampWallclock = qp.CQTimestampWallclock
)

// CreateCQEx is ibv_create_cq_ex with the wc_flags beyond ibv_wc's fields
// (which every CQ reports): the completion timestamps.
func (c *Context) CreateCQEx(cqe int, wcFlags CQWCFlags) (*CQ, error) {
	const op = "create_cq"
	if cqe < 0 || uint64(cqe) > math.MaxUint32 {
		return nil, errorf(op, syscall.EINVAL, "cqe: %d out of range", cqe)
	}
	name, err := c.transact(op, "cq", qp.FormatCreateCQ(&qp.CreateCQ{CQE: uint32(cqe), WCFlags: wcFlags}))
	if err != nil {
		return nil, err
	}
	h, err := handleOf(op, name)
	if err != nil {
		return nil, err
	}
	cq := &CQ{ctx: c, Handle: h}
	if err := cq.mapRing(op); err != nil {
		c.destroy(op, "cq", name)
		return nil, err
	}
	cq.taken = cq.r.EventSeq()
	c.track(cq)
	return cq, nil
}

// mapRing maps the current cq/H/ring. Called with mu and mapMu held (or
// before the CQ is shared).
func (cq *CQ) mapRing(op string) error {
	reg, err := ring.MapFile(cq.ctx.path("cq", hname(cq.Handle), "ring"))
	if err != nil {
		return opError(op, err, "")
	}
	r, err := ring.Attach(reg.Bytes(), ring.KindCQ)
	if err != nil {
		reg.Close()
		return &Error{Op: op, Errno: syscall.EIO, Err: err}
	}
	cq.region, cq.r, cq.cons = reg, r, ring.NewConsumer(r)
	cq.cqe.Store(r.SlotCount())
	return nil
}

// CQE is the number of completions the CQ holds (ibv_cq.cqe).
func (cq *CQ) CQE() int { return int(cq.cqe.Load()) }

// PollCQ is ibv_poll_cq: it fills wc with up to len(wc) completions and
// returns how many. It makes no system call and does not allocate.
func (cq *CQ) PollCQ(wc []WC) (int, error) {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cq.cons == nil {
		return 0, errorf("poll_cq", syscall.EBADF, "cq %d is destroyed or closed", cq.Handle)
	}
	n, err := cq.cons.Pending()
	if err != nil {
		return 0, &Error{Op: "poll_cq", Errno: syscall.EIO, Err: err}
	}
	if n == 0 {
		return 0, nil
	}
	if int(n) > len(wc) {
		n = uint32(len(wc))
	}
	for i := range n {
		ring.DecodeCQE(cq.cons.Peek(i), &wc[i])
	}
	cq.cons.Advance(n)
	cq.cons.Publish()
	return int(n), nil
}

// ReqNotifyCQ is ibv_req_notify_cq: the next completion (or, with
// solicitedOnly, the next solicited or error completion) fires a CQ event.
// It writes the ring header's armed word: no system call. A pending
// request for any completion is never weakened to solicited-only.
func (cq *CQ) ReqNotifyCQ(solicitedOnly bool) error {
	cq.mapMu.RLock()
	defer cq.mapMu.RUnlock()
	if cq.r == nil {
		return errorf("req_notify_cq", syscall.EBADF, "cq %d is destroyed or closed", cq.Handle)
	}
	cq.r.ReqNotify(solicitedOnly)
	return nil
}

// GetCQEvent is ibv_get_cq_event: it takes one CQ event, blocking until
// one fires or ctx ends (then it returns ctx.Err()). It sleeps on the futex
// word of the ring header, looking at ctx every 50ms: no FUSE request.
// Arm with ReqNotifyCQ first, then poll the CQ once more before waiting,
// as with libibverbs. Events fired and not yet taken are taken one per
// call; a Resize carries them over.
func (cq *CQ) GetCQEvent(ctx context.Context) error {
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		cq.mapMu.RLock()
		r := cq.r
		if r == nil {
			cq.mapMu.RUnlock()
			return errorf("get_cq_event", syscall.EBADF, "cq %d is destroyed or closed", cq.Handle)
		}
		cq.evMu.Lock()
		seq := cq.taken
		if r.EventSeq() != seq {
			cq.taken++
			cq.evMu.Unlock()
			cq.mapMu.RUnlock()
			return nil
		}
		cq.evMu.Unlock()
		slice := eventSlice
		if dl, ok := ctx.Deadline(); ok {
			slice = min(slice, max(time.Until(dl), time.Millisecond))
		}
		err := r.WaitEvent(seq, slice)
		cq.mapMu.RUnlock()
		if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			return &Error{Op: "get_cq_event", Errno: syscall.EIO, Err: err}
		}
	}
}

// ChannelPath is cq/H/channel, a symlink to the CQ's completion channel
// FIFO (see Channel).
func (cq *CQ) ChannelPath() string { return cq.ctx.path("cq", hname(cq.Handle), "channel") }

// Channel opens the CQ's completion channel, cq/H/channel: a FIFO the
// daemon writes one line to per CQ event ("event cq=H"), for event loops
// that need a pollable file descriptor. The file is opened non-blocking.
func (cq *CQ) Channel() (*os.File, error) {
	f, err := os.OpenFile(cq.ChannelPath(), os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, opError("get_cq_channel", err, "")
	}
	return f, nil
}

// Resize is ibv_resize_cq: the CQ gets at least cqe entries and a new
// ring, which is mapped in place of the old one. Completions not yet
// polled move along; EINVAL when they would not fit.
func (cq *CQ) Resize(cqe int) error {
	const op = "resize_cq"
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cq.cons == nil {
		return errorf(op, syscall.EBADF, "cq %d is destroyed or closed", cq.Handle)
	}
	if err := cq.ctx.command(op, fmt.Sprintf("resize cqe=%d", cqe), "cq", hname(cq.Handle), "ctl"); err != nil {
		return err
	}
	cq.mapMu.Lock()
	defer cq.mapMu.Unlock()
	oldReg, oldRing := cq.region, cq.r
	if err := cq.mapRing(op); err != nil {
		// The daemon has moved on to the new ring; we cannot follow.
		oldReg.Close()
		cq.region, cq.r, cq.cons = nil, nil, nil
		return err
	}
	cq.evMu.Lock()
	// Events fired on the old ring and not taken stay pending.
	cq.taken = cq.r.EventSeq() - (oldRing.EventSeq() - cq.taken)
	cq.evMu.Unlock()
	return oldReg.Close()
}

// Destroy is ibv_destroy_cq: EBUSY while a QP uses the CQ.
func (cq *CQ) Destroy() error {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if err := cq.ctx.destroy("destroy_cq", "cq", hname(cq.Handle)); err != nil {
		return err
	}
	cq.ctx.untrack(cq)
	return cq.releaseLocked()
}

func (cq *CQ) release() error {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	return cq.releaseLocked()
}

func (cq *CQ) releaseLocked() error {
	cq.mapMu.Lock()
	defer cq.mapMu.Unlock()
	if cq.region == nil {
		return nil
	}
	err := cq.region.Close()
	cq.region, cq.r, cq.cons = nil, nil, nil
	return err
}
