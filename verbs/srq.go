package verbs

import (
	"fmt"
	"syscall"

	"rdmafs/qp"
	"rdmafs/ring"
)

// SRQInitAttr is ibv_srq_init_attr's attr.
type SRQInitAttr struct {
	MaxWR    uint32
	MaxSGE   uint32
	SRQLimit uint32 // srq_limit_reached fires when fewer WRs remain (0: off)
}

// SRQ is a shared receive queue (ibv_srq): its ring is mapped here.
type SRQ struct {
	ctx    *Context
	Handle uint32
	MaxWR  uint32 // as provided (a power of two)
	MaxSGE uint32

	q recvQueue
}

// CreateSRQ is ibv_create_srq.
func (pd *PD) CreateSRQ(a SRQInitAttr) (*SRQ, error) {
	const op = "create_srq"
	c := pd.ctx
	line := qp.FormatCreateSRQ(&qp.CreateSRQ{PD: pd.Handle, MaxWR: a.MaxWR, MaxSGE: a.MaxSGE, SRQLimit: a.SRQLimit})
	name, err := c.transact(op, "srq", line)
	if err != nil {
		return nil, err
	}
	h, err := handleOf(op, name)
	if err != nil {
		return nil, err
	}
	s := &SRQ{ctx: c, Handle: h}
	fail := func(err error) (*SRQ, error) {
		s.release()
		c.destroy(op, "srq", name)
		return nil, err
	}
	attr, err := s.Query()
	if err != nil {
		return fail(err)
	}
	s.MaxWR, s.MaxSGE = attr.MaxWR, attr.MaxSGE
	if s.q.region, s.q.r, err = mapQueue(op, c.path("srq", name, "ring"), ring.KindSRQ); err != nil {
		return fail(err)
	}
	s.q.p = ring.NewProducer(s.q.r)
	c.track(s)
	return s, nil
}

// SRQAttr is ibv_srq_attr plus how many WRs wait in the queue.
type SRQAttr struct {
	MaxWR, MaxSGE, SRQLimit, Pending uint32
}

// Query is ibv_query_srq.
func (s *SRQ) Query() (*SRQAttr, error) {
	const op = "query_srq"
	a, err := readParsed(s.ctx, op, qp.ParseSRQAttr, "srq", hname(s.Handle), "attr")
	if err != nil {
		return nil, err
	}
	return &SRQAttr{MaxWR: a.MaxWR, MaxSGE: a.MaxSGE, SRQLimit: a.SRQLimit, Pending: a.Pending}, nil
}

// ModifyLimit is ibv_modify_srq with IBV_SRQ_LIMIT: arm the limit event.
func (s *SRQ) ModifyLimit(limit uint32) error {
	m := qp.ModifySRQ{Mask: qp.SRQLimit, SRQLimit: limit}
	return s.ctx.command("modify_srq", qp.FormatModifySRQ(&m), "srq", hname(s.Handle), "ctl")
}

// Resize is ibv_modify_srq with IBV_SRQ_MAX_WR: the SRQ gets room for at
// least maxWR WRs and a new ring, which is mapped in place of the old one
// (MaxWR reports the new capacity). The WRs posted and not yet taken move
// along; EINVAL when they would not fit, or the armed limit would not.
func (s *SRQ) Resize(maxWR uint32) error {
	return s.Modify(qp.ModifySRQ{Mask: qp.SRQMaxWR, MaxWR: maxWR})
}

// Modify is ibv_modify_srq: the attributes named in m.Mask (SRQMaxWR
// resizes, as Resize; SRQLimit arms the limit event) in one command.
func (s *SRQ) Modify(m qp.ModifySRQ) error {
	const op = "modify_srq"
	s.q.mu.Lock() // no post while the ring is replaced
	defer s.q.mu.Unlock()
	if s.q.p == nil {
		return errorf(op, syscall.EBADF, "srq %d is destroyed or closed", s.Handle)
	}
	if err := s.ctx.command(op, qp.FormatModifySRQ(&m), "srq", hname(s.Handle), "ctl"); err != nil {
		return err
	}
	if m.Mask&qp.SRQMaxWR == 0 {
		return nil
	}
	old := s.q.region
	reg, r, err := mapQueue(op, s.ctx.path("srq", hname(s.Handle), "ring"), ring.KindSRQ)
	if err != nil {
		// The daemon has moved on to the new ring; we cannot follow.
		old.Close()
		s.q.region, s.q.r, s.q.p = nil, nil, nil
		return err
	}
	s.q.region, s.q.r, s.q.p = reg, r, ring.NewProducer(r)
	s.MaxWR = r.SlotCount()
	return old.Close()
}

// PostSRQRecv is ibv_post_srq_recv, through the mapped ring like PostRecv.
func (s *SRQ) PostSRQRecv(wrs ...RecvWR) error {
	const op = "post_srq_recv"
	s.q.mu.Lock()
	defer s.q.mu.Unlock()
	if s.q.p == nil {
		return &PostError{Op: op, Errno: syscall.EBADF, Err: fmt.Errorf("srq %d is destroyed or closed", s.Handle)}
	}
	return postRecv(op, s.q.region, s.q.r, s.q.p, &s.q.bell, s.MaxSGE, wrs)
}

// Destroy is ibv_destroy_srq: EBUSY while a QP uses it.
func (s *SRQ) Destroy() error {
	if err := s.ctx.destroy("destroy_srq", "srq", hname(s.Handle)); err != nil {
		return err
	}
	s.ctx.untrack(s)
	return s.release()
}

func (s *SRQ) release() error {
	s.q.mu.Lock()
	defer s.q.mu.Unlock()
	if s.q.region == nil {
		return nil
	}
	err := s.q.region.Close()
	s.q.region, s.q.r, s.q.p = nil, nil, nil
	return err
}
