package device

import (
	"fmt"
	"sync"
	"syscall"

	"rdmafs/qp"
	"rdmafs/ring"
)

// SRQ is a shared receive queue: a ring of receive WQEs that the responders
// of every QP attached to it consume.
type SRQ struct {
	dev    *Device
	Handle uint32
	Owner  Owner
	PD     *PD
	MaxWR  uint32 // capacity (slots)
	MaxSGE uint32 // SGEs a slot holds
	// Limit is srq_limit: when the number of WQEs drops below it, the
	// srq_limit_reached event fires once and the limit disarms (0).
	Limit uint32 // lockcheck:guarded dev.mu
	// region and ring change on a resize (Modify), which holds postMu and
	// Device.mu.
	region *ring.Region   // lockcheck:guarded dev.mu|postMu
	ring   *ring.Ring     // lockcheck:guarded dev.mu|postMu
	cons   *ring.Consumer // engine side; lockcheck:guarded dev.mu lockcheck:guarded takeMu
	users  int            // QPs attached; lockcheck:guarded dev.mu
	// takeMu serializes the engines' turns that take from the SRQ (a
	// verb holds all of Device.mu and needs it not).
	takeMu sync.Mutex

	postMu sync.Mutex // serializes in-daemon posters
	gone   bool       // lockcheck:guarded postMu
}

// CreateSRQ is ibv_create_srq.
func (d *Device) CreateSRQ(owner Owner, req qp.CreateSRQ) (*SRQ, error) {
	const op = "create_srq"
	if req.MaxWR < 1 || req.MaxWR > d.cfg.MaxSRQWR {
		return nil, errf(op, syscall.EINVAL, "max_wr: %d not in 1..%d", req.MaxWR, d.cfg.MaxSRQWR)
	}
	if req.MaxSGE < 1 || req.MaxSGE > d.cfg.MaxSRQSGE {
		return nil, errf(op, syscall.EINVAL, "max_sge: %d not in 1..%d", req.MaxSGE, d.cfg.MaxSRQSGE)
	}
	slots := ring.SlotCount(req.MaxWR)
	if req.SRQLimit > slots {
		return nil, errf(op, syscall.EINVAL, "srq_limit: %d exceeds max_wr %d", req.SRQLimit, slots)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	pd, err := d.openPDLocked(op, req.PD, owner)
	if err != nil {
		return nil, err
	}
	if err := admitLocked(d, op, "srq", d.srqs.m, d.cfg.MaxSRQ, owner); err != nil {
		return nil, err
	}
	slotSize, capSGE := ring.RecvSlotSize(req.MaxSGE)
	region, err := ring.NewRegion(fmt.Sprintf("rdmafs-srq-pd%d", pd.Handle), ring.Size(slotSize, slots))
	if err != nil {
		return nil, errf(op, syscall.ENOMEM, "%v", err)
	}
	r, err := ring.Init(region.Bytes(), ring.KindSRQ, slotSize, slots)
	if err != nil {
		region.Close()
		return nil, errf(op, syscall.ENOMEM, "%v", err)
	}
	srq := &SRQ{dev: d, Owner: owner, PD: pd, MaxWR: slots, MaxSGE: capSGE, Limit: req.SRQLimit,
		region: region, ring: r, cons: ring.NewConsumer(r)}
	srq.Handle = d.srqs.add(srq)
	pd.users++
	return srq, nil
}

// SRQ looks an SRQ up by handle.
func (d *Device) SRQ(h uint32) *SRQ { return lookup(d, &d.srqs, h) }

// Region is the SRQ ring's shared memory. It changes on a resize
// (ModifyAttr with max_wr).
func (s *SRQ) Region() *ring.Region {
	s.dev.mu.Lock()
	defer s.dev.mu.Unlock()
	return s.region
}

// SRQAttr is ibv_query_srq.
type SRQAttr struct {
	PD       uint32
	MaxWR    uint32
	MaxSGE   uint32
	SRQLimit uint32
	Pending  uint32 // WQEs posted and not yet consumed
}

// Attr is ibv_query_srq.
func (s *SRQ) Attr() SRQAttr {
	s.dev.mu.Lock()
	defer s.dev.mu.Unlock()
	var n uint32
	if !s.dev.closed && s.dev.srqs.get(s.Handle) == s {
		n, _ = s.cons.Pending() // only while the ring is mapped
	}
	return SRQAttr{PD: s.PD.Handle, MaxWR: s.MaxWR, MaxSGE: s.MaxSGE, SRQLimit: s.Limit, Pending: n}
}

// Modify is ibv_modify_srq with IBV_SRQ_LIMIT: arm the limit event.
func (s *SRQ) Modify(limit uint32) error {
	return s.ModifyAttr(qp.ModifySRQ{Mask: qp.SRQLimit, SRQLimit: limit})
}

// ModifyAttr is ibv_modify_srq. With IBV_SRQ_MAX_WR it resizes the queue
// under the rules of a CQ resize: the WQEs posted and not yet taken move
// to a new ring, which clients must map again (srq/H/ring), and the new
// size must hold them (EINVAL otherwise). The limit, the new one or the
// armed one, must fit the size (as rxe: max_wr not below the limit).
// Nothing changes when it fails.
func (s *SRQ) ModifyAttr(m qp.ModifySRQ) error {
	const op = "modify_srq"
	d := s.dev
	resize := m.Mask&qp.SRQMaxWR != 0
	if m.Mask&^(qp.SRQMaxWR|qp.SRQLimit) != 0 {
		return errf(op, syscall.EINVAL, "attr_mask: unknown bits 0x%x", uint8(m.Mask&^(qp.SRQMaxWR|qp.SRQLimit)))
	}
	if resize && (m.MaxWR < 1 || m.MaxWR > d.cfg.MaxSRQWR) {
		return errf(op, syscall.EINVAL, "max_wr: %d not in 1..%d", m.MaxWR, d.cfg.MaxSRQWR)
	}
	s.postMu.Lock() // a PostRecv in progress writes the ring we replace
	defer s.postMu.Unlock()
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.srqs.live(op, "srq", s.Handle, s); err != nil {
		return err
	}
	if err := d.checkOpenLocked(op); err != nil {
		return err
	}
	slots, limit := s.MaxWR, s.Limit
	if resize {
		slots = ring.SlotCount(m.MaxWR)
	}
	if m.Mask&qp.SRQLimit != 0 {
		limit = m.SRQLimit
	}
	if limit > slots {
		if m.Mask&qp.SRQLimit != 0 {
			return errf(op, syscall.EINVAL, "srq_limit: %d exceeds max_wr %d", limit, slots)
		}
		return errf(op, syscall.EINVAL, "max_wr: %d is below the armed srq_limit %d", slots, limit)
	}
	if resize {
		if err := s.resizeLocked(op, slots); err != nil {
			return err
		}
	}
	s.Limit = limit
	return nil
}

// resizeLocked moves the SRQ to a ring of slots slots, carrying the WQEs
// that wait. Device.mu (all of it) and postMu held: no engine takes from
// the ring and no daemon poster writes it meanwhile.
func (s *SRQ) resizeLocked(op string, slots uint32) error {
	n, err := s.cons.Pending()
	if err != nil {
		n = 0 // a corrupt producer index: the waiting WQEs are unknowable
	}
	if slots < n {
		return errf(op, syscall.EINVAL, "max_wr: %d cannot hold the %d WRs in the queue", slots, n)
	}
	slotSize := s.ring.SlotSize()
	region, err := ring.NewRegion(fmt.Sprintf("rdmafs-srq%d", s.Handle), ring.Size(slotSize, slots))
	if err != nil {
		return errf(op, syscall.ENOMEM, "%v", err)
	}
	r, err := ring.Init(region.Bytes(), ring.KindSRQ, slotSize, slots)
	if err != nil {
		region.Close()
		return errf(op, syscall.ENOMEM, "%v", err)
	}
	p := ring.NewProducer(r)
	for i := uint32(0); i < n; i++ {
		copy(p.Next(), s.cons.Peek(i))
		p.Advance()
	}
	p.Publish()
	old := s.region
	s.region, s.ring, s.cons, s.MaxWR = region, r, ring.NewConsumer(r), slots
	old.Close()
	return nil
}

// PostRecv is ibv_post_srq_recv from inside the daemon; it returns how many
// WRs were posted (the rest, from the failing one on, were not: bad_wr).
func (s *SRQ) PostRecv(wrs []qp.RecvWR) (int, error) {
	const op = "post_srq_recv"
	s.postMu.Lock()
	defer s.postMu.Unlock()
	if s.gone {
		return 0, errf(op, syscall.ENOENT, "srq %d was destroyed", s.Handle)
	}
	return postRecvRing(op, s.ring, s.MaxSGE, wrs)
}

// postRecvRing writes receive WQEs into a ring as a client would: from the
// shared producer index, checking space against the shared consumer index.
func postRecvRing(op string, r *ring.Ring, maxSGE uint32, wrs []qp.RecvWR) (int, error) {
	n, err := ring.PostRecv(ring.NewProducer(r), maxSGE, wrs)
	if err != nil {
		err = postFailure(op, err, "queue", "ring", r.SlotCount())
	}
	return n, err
}

// Destroy is ibv_destroy_srq: EBUSY while QPs are attached.
func (s *SRQ) Destroy() error {
	s.postMu.Lock() // a PostRecv in progress writes the ring we unmap
	defer s.postMu.Unlock()
	return destroy(s.dev, &s.dev.srqs, "destroy_srq", "srq", s.Handle, s)
}

func (s *SRQ) owner() Owner { return s.Owner }

func (s *SRQ) usersLocked() (int, string) { return s.users, "srq %d has %d QPs attached" }

// releaseLocked runs under postMu too (Destroy), which guards gone.
func (s *SRQ) releaseLocked() {
	s.PD.users--
	s.gone = true
	s.region.Close()
}

// lockTake and unlockTake hold the SRQ's consumer side across a peek and
// the take that may follow it (QP.peekRecvLocked, QP.takeRecvLocked):
// QPs of several engines take from one SRQ. With one engine the stripe
// already does.
//
// lockcheck:acquire takeMu
func (s *SRQ) lockTake() {
	if len(s.dev.engines) > 1 {
		s.takeMu.Lock()
	}
}

// lockcheck:release takeMu
func (s *SRQ) unlockTake() {
	if len(s.dev.engines) > 1 {
		s.takeMu.Unlock()
	}
}

// peekLocked decodes the next receive WQE into wr without taking it:
// present says there is one, malformed that it does not decode or has
// more SGEs than the SRQ allows. lockTake held.
func (s *SRQ) peekLocked(wr *qp.RecvWR) (present, malformed bool) {
	n, err := s.cons.Pending()
	if err != nil {
		return false, true
	}
	if n == 0 {
		return false, false
	}
	derr := ring.DecodeRecvWQE(s.cons.Peek(0), wr)
	return true, derr != nil || uint32(len(wr.SGL)) > s.MaxSGE
}

// commitLocked takes the WQE peekLocked found for the responder; when the
// number left drops below the limit, srq_limit_reached fires once and the
// limit disarms. lockTake held.
func (s *SRQ) commitLocked() {
	n, _ := s.cons.Pending()
	s.cons.Advance(1)
	s.cons.Publish()
	if s.Limit != 0 && n-1 < s.Limit {
		s.Limit = 0
		s.dev.raise(qp.EventSRQLimitReached, "srq", s.Handle)
	}
}
