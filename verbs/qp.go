package verbs

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"

	"rdmafs/qp"
	"rdmafs/ring"
)

// QPInitAttr is ibv_qp_init_attr.
type QPInitAttr struct {
	Type     QPType
	SendCQ   *CQ
	RecvCQ   *CQ
	SRQ      *SRQ // receives come from the SRQ; the QP has no receive queue
	Cap      QPCap
	SQSigAll bool // every send WR completes, signalled or not
}

// QP is a queue pair (ibv_qp): its send and receive rings are mapped here
// and posted to directly.
type QP struct {
	ctx    *Context
	pd     *PD
	QPN    uint32
	Type   QPType
	SendCQ *CQ
	RecvCQ *CQ
	SRQ    *SRQ
	// Cap is what the daemon provided: at least what was asked for (the
	// rings are powers of two; the slack is the program's).
	Cap      QPCap
	SQSigAll bool

	// state and maxRdAtomic as set by this library's modifies (the device
	// itself only ever moves a QP to ERR or SQE, where posting is allowed).
	state       atomic.Uint32
	maxRdAtomic atomic.Uint32

	send sendQueue
	recv recvQueue

	doorbells atomic.Uint64
}

type sendQueue struct {
	mu     sync.Mutex
	region *ring.Region // the sq file; its fd is the doorbell; nil once released
	r      *ring.Ring
	p      *ring.Producer
	post   ring.SendPoster // its scratch makes inline posts allocation-free
	bell   [1]byte
}

type recvQueue struct {
	mu     sync.Mutex
	region *ring.Region // nil with an SRQ or once released
	r      *ring.Ring
	p      *ring.Producer
	bell   [1]byte
}

// CreateQP is ibv_create_qp.
func (pd *PD) CreateQP(init QPInitAttr) (*QP, error) {
	const op = "create_qp"
	c := pd.ctx
	xrc := init.Type == QPTypeXRCSend
	if init.SendCQ == nil || init.RecvCQ == nil && !xrc {
		return nil, errorf(op, syscall.EINVAL, "send_cq and recv_cq are required")
	}
	if init.Type == QPTypeXRCRecv {
		return nil, errorf(op, syscall.EINVAL, "an xrc_recv qp is made in its XRC domain (XRCD.CreateQP)")
	}
	req := qp.CreateQP{PD: pd.Handle, Type: init.Type, SendCQ: init.SendCQ.Handle, Cap: init.Cap, SQSigAll: init.SQSigAll}
	if init.RecvCQ != nil {
		req.RecvCQ = init.RecvCQ.Handle
	}
	if init.SRQ != nil {
		req.SRQ = init.SRQ.Handle
	}
	name, err := c.transact(op, "qp", qp.FormatCreateQP(&req))
	if err != nil {
		return nil, err
	}
	qpn, err := handleOf(op, name)
	if err != nil {
		return nil, err
	}
	q := &QP{ctx: c, pd: pd, QPN: qpn, Type: init.Type, SendCQ: init.SendCQ, RecvCQ: init.RecvCQ,
		SRQ: init.SRQ, SQSigAll: init.SQSigAll}
	fail := func(err error) (*QP, error) {
		q.release()
		c.destroy(op, "qp", name)
		return nil, err
	}
	a, err := q.query(op)
	if err != nil {
		return fail(err)
	}
	q.Cap = a.Cap
	q.state.Store(uint32(a.QPState))
	q.maxRdAtomic.Store(uint32(a.MaxRdAtomic))
	if q.send.region, q.send.r, err = mapQueue(op, c.path("qp", name, "sq"), ring.KindSQ); err != nil {
		return fail(err)
	}
	q.send.p = ring.NewProducer(q.send.r)
	q.send.post = ring.SendPoster{Type: q.Type, Gather: q.gatherSGE}
	if init.SRQ == nil && !xrc {
		if q.recv.region, q.recv.r, err = mapQueue(op, c.path("qp", name, "rq"), ring.KindRQ); err != nil {
			return fail(err)
		}
		q.recv.p = ring.NewProducer(q.recv.r)
	}
	c.track(q)
	return q, nil
}

// mapQueue maps a work-queue ring file; the Region keeps the file open.
func mapQueue(op, path string, kind ring.Kind) (*ring.Region, *ring.Ring, error) {
	reg, err := ring.MapFile(path)
	if err != nil {
		return nil, nil, opError(op, err, "")
	}
	r, err := ring.Attach(reg.Bytes(), kind)
	if err != nil {
		reg.Close()
		return nil, nil, &Error{Op: op, Errno: syscall.EIO, Err: err}
	}
	return reg, r, nil
}

// PD is the protection domain of the QP.
func (q *QP) PD() *PD { return q.pd }

// Modify is ibv_modify_qp: the attributes mask names are written as one
// `modify` command to qp/N/ctl. The daemon checks them against the IB
// transition table; on refusal nothing changed and the error carries the
// daemon's reason (EINVAL naming the attribute, EOPNOTSUPP for alternate
// paths and rate limits).
func (q *QP) Modify(attr *QPAttr, mask AttrMask) error {
	const op = "modify_qp"
	if mask == 0 {
		return errorf(op, syscall.EINVAL, "empty attribute mask")
	}
	err := q.ctx.command(op, "modify "+qp.FormatModify(attr, mask), "qp", hname(q.QPN), "ctl")
	if err != nil {
		return err
	}
	if mask&qp.MaskState != 0 {
		q.state.Store(uint32(attr.QPState))
	}
	if mask&qp.MaskMaxQPRdAtomic != 0 {
		q.maxRdAtomic.Store(uint32(attr.MaxRdAtomic))
	}
	return nil
}

// Query is ibv_query_qp: every attribute of the QP (including Cap and the
// current state) as qp/N/attr reports it.
func (q *QP) Query() (*QPAttr, error) {
	a, err := q.query("query_qp")
	if err != nil {
		return nil, err
	}
	q.state.Store(uint32(a.QPState))
	q.maxRdAtomic.Store(uint32(a.MaxRdAtomic))
	return a, nil
}

func (q *QP) query(op string) (*QPAttr, error) {
	f, err := readParsed(q.ctx, op, func(s string) (qp.AttrFile, error) {
		f, _, err := qp.ParseAttrFile(s)
		return f, err
	}, "qp", hname(q.QPN), "attr")
	if err != nil {
		return nil, err
	}
	a := f.Attr
	a.CurQPState = a.QPState
	return &a, nil
}

// State reads the QP's current state from qp/N/state.
func (q *QP) State() (QPState, error) {
	b, err := os.ReadFile(q.ctx.path("qp", hname(q.QPN), "state"))
	if err != nil {
		return 0, opError("query_qp", err, "")
	}
	st, ok := qp.ParseState(strings.TrimSpace(string(b)))
	if !ok {
		return 0, errorf("query_qp", syscall.EIO, "state %q", b)
	}
	q.state.Store(uint32(st))
	return st, nil
}

// Doorbells counts the doorbells this QP rang (writes to qp/N/sq, each one
// a FUSE request): zero while the engine keeps NEED_WAKEUP clear.
func (q *QP) Doorbells() uint64 { return q.doorbells.Load() }

// PostSend is ibv_post_send: each WR is checked as libibverbs providers
// check it (qp.ValidateSendWR), encoded straight into the mapped send
// ring, and the batch published with one store. A doorbell (one write to
// qp/N/sq) follows only when the engine asked for one with NEED_WAKEUP
// (or Options.AlwaysDoorbell is set). On a bad WR the error is a
// *PostError whose Index is that WR's; the WRs before it are posted.
//
// An inline send (SendInline) with an SGL has its bytes copied out of the
// MRs of this Context at post time, as libibverbs does; the SGE addresses
// are iovas. In steady state PostSend makes no system call and does not
// allocate.
func (q *QP) PostSend(wrs ...SendWR) error {
	const op = "post_send"
	if q.Type == QPTypeXRCRecv {
		return &PostError{Op: op, Errno: syscall.EINVAL, Err: fmt.Errorf("qp %d is xrc_recv: it sends nothing", q.QPN)}
	}
	s := &q.send
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.p == nil {
		return &PostError{Op: op, Errno: syscall.EBADF, Err: fmt.Errorf("qp %d is destroyed or closed", q.QPN)}
	}
	if st := QPState(q.state.Load()); !st.CanPostSend() {
		return &PostError{Op: op, Errno: syscall.EINVAL, Err: fmt.Errorf("qp %d is in %v; sends need RTS", q.QPN, st)}
	}
	s.post.Caps = qp.SendCaps{MaxSGE: q.Cap.MaxSendSGE, MaxInline: q.Cap.MaxInlineData, MaxRdAtomic: uint8(q.maxRdAtomic.Load())}
	posted, err := s.post.Post(s.p, wrs)
	var perr error
	if err != nil {
		perr = postFailure(op, posted, err, "send queue", q.Cap.MaxSendWR)
	}
	if posted > 0 && (q.ctx.alwaysDoorbell || s.r.NeedWakeup()) {
		q.doorbells.Add(1)
		if bell := q.ctx.bell; bell != nil {
			// The device doorbell, for this QP: a futex wake, no
			// FUSE request.
			bell.RingBell(q.QPN)
		} else if _, err := unix.Write(s.region.Fd(), s.bell[:]); err != nil && perr == nil {
			perr = &Error{Op: op, Errno: errnoOf(err), Reason: "doorbell: " + err.Error()}
		}
	}
	return perr
}

// gatherSGE appends the bytes of one SGE of an inline send, from the MRs
// of this Context, to dst. The send lock is held.
func (q *QP) gatherSGE(dst []byte, e SGE) ([]byte, error) {
	q.ctx.mu.RLock()
	defer q.ctx.mu.RUnlock()
	return q.ctx.gatherLocked(q.pd, e, dst)
}

// postFailure is a post loop's refusal of wrs[index] as a *PostError:
// ENOMEM for a full queue (queue names it), EIO for corrupt indices,
// EINVAL for the WR's own error.
func postFailure(op string, index int, err error, queue string, slots uint32) error {
	switch {
	case errors.Is(err, ring.ErrFull):
		return &PostError{Op: op, Index: index, Errno: syscall.ENOMEM, Err: fmt.Errorf("%s full (%d WRs)", queue, slots)}
	case errors.Is(err, ring.ErrCorrupt):
		return &PostError{Op: op, Index: index, Errno: syscall.EIO, Err: err}
	}
	return &PostError{Op: op, Index: index, Errno: syscall.EINVAL, Err: err}
}

// PostRecv is ibv_post_recv: the WRs go straight into the mapped receive
// ring, published with one store. No doorbell: the engine takes receive
// WQEs when a message arrives (it is rung only if the engine set
// NEED_WAKEUP on the receive queue, or when this library moved the QP to
// ERR, where the WRs are flushed at once). Errors are *PostError as for
// PostSend.
func (q *QP) PostRecv(wrs ...RecvWR) error {
	const op = "post_recv"
	if q.Type.XRC() {
		return &PostError{Op: op, Errno: syscall.EINVAL, Err: fmt.Errorf("qp %d is %v: it has no receive queue", q.QPN, q.Type)}
	}
	if q.SRQ != nil {
		return &PostError{Op: op, Errno: syscall.EINVAL, Err: fmt.Errorf("qp %d receives from srq %d; post to the srq", q.QPN, q.SRQ.Handle)}
	}
	if st := QPState(q.state.Load()); !st.CanPostRecv() {
		return &PostError{Op: op, Errno: syscall.EINVAL, Err: fmt.Errorf("qp %d is in %v; receives need INIT or later", q.QPN, st)}
	}
	rq := &q.recv
	rq.mu.Lock()
	defer rq.mu.Unlock()
	if rq.p == nil {
		return &PostError{Op: op, Errno: syscall.EBADF, Err: fmt.Errorf("qp %d is destroyed or closed", q.QPN)}
	}
	err := postRecv(op, rq.region, rq.r, rq.p, &rq.bell, q.Cap.MaxRecvSGE, wrs)
	if QPState(q.state.Load()) == StateErr {
		// In ERR the WRs are flushed at once, by the engine: kick it.
		q.doorbells.Add(1)
		unix.Write(rq.region.Fd(), rq.bell[:])
	}
	return err
}

// postRecv is the receive post of a QP or an SRQ; the queue's lock is held.
func postRecv(op string, reg *ring.Region, r *ring.Ring, p *ring.Producer, bell *[1]byte, maxSGE uint32, wrs []RecvWR) error {
	posted, err := ring.PostRecv(p, maxSGE, wrs)
	var perr error
	if err != nil {
		perr = postFailure(op, posted, err, "receive queue", r.SlotCount())
	}
	if posted > 0 && r.NeedWakeup() {
		if _, err := unix.Write(reg.Fd(), bell[:]); err != nil && perr == nil {
			perr = &Error{Op: op, Errno: errnoOf(err), Reason: "doorbell: " + err.Error()}
		}
	}
	return perr
}

// Destroy is ibv_destroy_qp: outstanding work is discarded and the rings
// unmapped.
func (q *QP) Destroy() error {
	if q.Type == QPTypeXRCRecv {
		return q.closeXRCRecv()
	}
	if err := q.ctx.destroy("destroy_qp", "qp", hname(q.QPN)); err != nil {
		return err
	}
	q.ctx.untrack(q)
	return q.release()
}

func (q *QP) release() error {
	var err error
	q.send.mu.Lock()
	if q.send.region != nil {
		err = q.send.region.Close()
		q.send.region, q.send.r, q.send.p = nil, nil, nil
	}
	q.send.mu.Unlock()
	q.recv.mu.Lock()
	if q.recv.region != nil {
		if e := q.recv.region.Close(); err == nil {
			err = e
		}
		q.recv.region, q.recv.r, q.recv.p = nil, nil, nil
	}
	q.recv.mu.Unlock()
	return err
}

// AttachMcast is ibv_attach_mcast: the UD QP receives the datagrams sent
// to the multicast group gid (QPN 0xFFFFFF). lid is the group's
// multicast LID (0xC000-0xFFFE) on an InfiniBand-style (local) mount; a
// mount on the wire ignores it. EINVAL for a QP that is not UD, a GID that
// is not multicast or a bad LID; ENOMEM beyond the device's multicast
// limits or the user's share of them.
func (q *QP) AttachMcast(gid [16]byte, lid uint16) error {
	return q.ctx.command("attach_mcast", fmt.Sprintf("attach_mcast gid=%s lid=%d", qp.FormatGID(gid), lid), "qp", hname(q.QPN), "ctl")
}

// DetachMcast is ibv_detach_mcast: EINVAL if the QP is not attached.
func (q *QP) DetachMcast(gid [16]byte, lid uint16) error {
	return q.ctx.command("detach_mcast", fmt.Sprintf("detach_mcast gid=%s lid=%d", qp.FormatGID(gid), lid), "qp", hname(q.QPN), "ctl")
}
