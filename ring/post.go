package ring

import (
	"errors"
	"fmt"

	"rdmafs/qp"
)

// ErrFull is a post that found no free slot for the WR at the index it
// returned: the ibv_post_* ENOMEM.
var ErrFull = errors.New("ring: queue full")

// SendPoster is the client's send post loop, ibv_post_send's body: for
// each WR, gather inline data, validate (qp.ValidateSendWR), vet a UD
// send's address handle, check for a free slot, encode, advance; then
// publish once. The daemon's post_send file and the verbs library both
// post through it, so a WR is refused for the same reason, at the same
// index, whoever posts it. Locking, errnos and doorbells stay with the
// caller, whose differ.
//
// A SendPoster keeps scratch for gathered inline data between posts, so
// that one kept per queue posts without allocating; like a Producer it is
// not safe for concurrent use.
type SendPoster struct {
	Type qp.Type
	Caps qp.SendCaps

	// Gather appends to dst the bytes one SGE names (an MR iova, lkey and
	// length), for a WR with SendInline and an SGL but no InlineData:
	// libibverbs copies inline data out of the SGEs at post time. Its
	// error refuses the WR. Nil posts such a WR as it is, which the
	// encoder refuses.
	Gather func(dst []byte, s qp.SGE) ([]byte, error)
	// CheckAH, if set, vets the address handle of each validated send on
	// a UD QP against the caller's tables; its error refuses the WR.
	//
	// Both hooks take values, never the caller's WR: a pointer passed to
	// a func value escapes, and then the WRs of every verbs post would be
	// moved to the heap.
	CheckAH func(ah uint32) error

	inline []byte    // gathered bytes; capacity reused
	wr     qp.SendWR // the inline WR rewritten to carry them
}

// Post writes wrs into the send queue p produces into and returns how many
// it posted. If that is fewer than len(wrs), err says why wrs[n] was
// refused: ErrFull, an error wrapping ErrCorrupt (the consumer index is
// impossible), or the error of a hook, validation or the encoder. The WRs
// before it are posted and published, as bad_wr promises.
func (s *SendPoster) Post(p *Producer, wrs []qp.SendWR) (int, error) {
	n, err := s.fill(p, wrs)
	if n > 0 {
		p.Publish()
	}
	return n, err
}

func (s *SendPoster) fill(p *Producer, wrs []qp.SendWR) (int, error) {
	var sp space
	for i := range wrs {
		wr := &wrs[i]
		if wr.SendFlags&qp.SendInline != 0 && wr.InlineData == nil && len(wr.SGL) > 0 && s.Gather != nil {
			var err error
			if wr, err = s.gather(wr); err != nil {
				return i, err
			}
		}
		if err := qp.ValidateSendWR(s.Type, wr, s.Caps); err != nil {
			return i, err
		}
		if s.Type == qp.TypeUD && s.CheckAH != nil {
			if err := s.CheckAH(wr.AH); err != nil {
				return i, err
			}
		}
		if err := sp.take(p); err != nil {
			return i, err
		}
		if err := EncodeSendWQE(p.Next(), wr); err != nil {
			return i, err
		}
		p.Advance()
	}
	return len(wrs), nil
}

// gather returns wr rewritten to carry its SGL's bytes as InlineData, in
// the poster's scratch.
func (s *SendPoster) gather(wr *qp.SendWR) (*qp.SendWR, error) {
	var total uint64
	for _, e := range wr.SGL {
		total += uint64(e.Length)
	}
	if total > uint64(s.Caps.MaxInline) {
		return nil, &qp.Error{Key: "inline_data", Msg: fmt.Sprintf("%d bytes exceed max_inline_data %d", total, s.Caps.MaxInline)}
	}
	buf := s.inline[:0]
	for _, e := range wr.SGL {
		var err error
		if buf, err = s.Gather(buf, e); err != nil {
			return nil, err
		}
	}
	if buf == nil {
		buf = []byte{} // SGEs of length 0: no data, but gathered (nil is "not gathered")
	}
	s.inline = buf
	s.wr = *wr
	s.wr.InlineData, s.wr.SGL = buf, nil
	return &s.wr, nil
}

// PostRecv is the client's receive post loop (ibv_post_recv and
// ibv_post_srq_recv) into the RQ or SRQ p produces into, with the rules
// and results of SendPoster.Post: validate (qp.ValidateRecvWR against
// maxSGE), check for a free slot, encode, advance; publish once.
func PostRecv(p *Producer, maxSGE uint32, wrs []qp.RecvWR) (int, error) {
	n, err := fillRecv(p, maxSGE, wrs)
	if n > 0 {
		p.Publish()
	}
	return n, err
}

func fillRecv(p *Producer, maxSGE uint32, wrs []qp.RecvWR) (int, error) {
	var sp space
	for i := range wrs {
		wr := &wrs[i]
		if err := qp.ValidateRecvWR(wr, maxSGE); err != nil {
			return i, err
		}
		if err := sp.take(p); err != nil {
			return i, err
		}
		if err := EncodeRecvWQE(p.Next(), wr); err != nil {
			return i, err
		}
		p.Advance()
	}
	return len(wrs), nil
}

// space counts a post's free slots. The consumer index is loaded once,
// when the first WR that passed its checks needs a slot (the ABI's once
// per batch): a WR that fails validation is reported as such even on a
// full or corrupt ring, as rxe checks a WR before the queue.
type space struct {
	free   uint32
	loaded bool
}

func (sp *space) take(p *Producer) error {
	if !sp.loaded {
		f, err := p.Free()
		if err != nil {
			return err
		}
		sp.free, sp.loaded = f, true
	}
	if sp.free == 0 {
		return ErrFull
	}
	sp.free--
	return nil
}
