package bench

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"time"

	"rdmafs/verbs"
)

// ---------------------------------------------------------------- lat

func (b *bench) measureLat(size int, r *Result) error {
	c := b.c
	lat := make([]int64, 0, c.Iters)
	if c.Duration > 0 {
		lat = make([]int64, 0, 1<<16)
	}
	ns, err := b.lat(size, c.Iters, c.Duration, &lat)
	if err != nil {
		return err
	}
	r.WRs = uint64(len(lat))
	r.Iterations = uint64(len(lat))
	if c.Op == "write" || c.Op == "send" {
		r.WRs *= 2 // a ping and a pong
	}
	r.Seconds = float64(ns) / 1e9
	fillLatency(r, lat, c.Op == "write" || c.Op == "send")
	return nil
}

// fillLatency computes perftest's statistics; ping-pong round trips count
// half (one way).
func fillLatency(r *Result, lat []int64, half bool) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	div := 1000.0
	if half {
		div = 2000.0
	}
	us := func(v int64) float64 { return float64(v) / div }
	var sum, sq float64
	for _, v := range lat {
		sum += us(v)
	}
	avg := sum / float64(len(lat))
	for _, v := range lat {
		d := us(v) - avg
		sq += d * d
	}
	pct := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(lat)))) - 1
		return us(lat[max(0, min(i, len(lat)-1))])
	}
	r.TMin, r.TMax = us(lat[0]), us(lat[len(lat)-1])
	r.TTypical = us(lat[len(lat)/2])
	r.TAvg, r.TStdev = avg, math.Sqrt(sq/float64(len(lat)))
	r.T99, r.T999 = pct(0.99), pct(0.999)
}

// lat runs iters round trips (or until dur is over), recording each one's
// time in ns into out when it is not nil. It returns the phase's length.
func (b *bench) lat(size, iters int, dur time.Duration, out *[]int64) (int64, error) {
	p := b.pairs[0]
	start := time.Now()
	var err error
	for i := 0; ; i++ {
		if dur > 0 && time.Since(start) >= dur || dur == 0 && i >= iters {
			break
		}
		t0 := time.Since(start)
		switch b.c.Op {
		case "write":
			err = b.pingPongWrite(p, size)
		case "send":
			err = b.pingPongSend(p)
		default:
			err = b.postPollOne(p)
		}
		if err != nil {
			return 0, err
		}
		if out != nil {
			*out = append(*out, int64(time.Since(start)-t0))
		}
	}
	return int64(time.Since(start)), nil
}

// seqByte is the ping-pong's marker for round i: never 0, never repeated
// between consecutive rounds.
func seqByte(n uint64) byte { return byte(n%255) + 1 }

// signal marks the WR of index idx signalled when cq-mod says so.
func (b *bench) signal(w *verbs.SendWR, idx uint64) {
	w.SendFlags &^= verbs.SendSignaled
	if (idx+1)%uint64(b.c.CQMod) == 0 {
		w.SendFlags |= verbs.SendSignaled
	}
}

// pingPongWrite is ib_write_lat's round: A WRITEs size bytes whose last
// byte is the round's marker into B's receive half; B polls that byte,
// then WRITEs back from its send half (with the marker) into A's receive
// half, which A polls.
func (b *bench) pingPongWrite(p *benchPair, size int) error {
	s := seqByte(p.posted)
	p.ma.Buf[size-1] = s
	w := &p.wrs[0]
	w.WRID = p.posted
	b.signal(w, p.posted)
	if err := postRetry(p.a, p.wrs[:1]); err != nil {
		return err
	}
	p.posted++
	if err := b.waitByte(p, p.mb.Buf, b.buf+size-1, s); err != nil {
		return err
	}
	p.mb.Buf[size-1] = s
	w = &p.bwr[0]
	w.WRID = p.bPosted
	b.signal(w, p.bPosted)
	if err := postRetry(p.b, p.bwr); err != nil {
		return err
	}
	p.bPosted++
	if err := b.waitByte(p, p.ma.Buf, b.buf+size-1, s); err != nil {
		return err
	}
	return b.drainSends(p)
}

// waitByte spins until mem[off] == want, draining send completions
// meanwhile (a failed WRITE would otherwise leave it spinning).
func (b *bench) waitByte(p *benchPair, mem []byte, off int, want byte) error {
	var t0 time.Time
	for i := 0; loadByte(mem, off) != want; i++ {
		if i&1023 == 1023 {
			if err := b.drainSends(p); err != nil {
				return err
			}
			if t0.IsZero() {
				t0 = time.Now()
			} else if time.Since(t0) > stallAfter {
				return fmt.Errorf("ping-pong: byte %d never became %d", off, want)
			}
			runtime.Gosched()
		}
	}
	return nil
}

// drainSends consumes the signalled send completions of both sides.
func (b *bench) drainSends(p *benchPair) error {
	for _, cq := range []*verbs.CQ{p.aSCQ, p.bSCQ} {
		k, err := cq.PollCQ(p.wc)
		if err != nil {
			return err
		}
		for _, wc := range p.wc[:k] {
			if wc.Status != verbs.WCSuccess {
				p.errWC = &wc
				return fmt.Errorf("send completion: wr %d: %v", wc.WRID, wc.Status)
			}
		}
	}
	return nil
}

// pingPongSend is ib_send_lat's round: A SENDs, B polls its receive CQ and
// SENDs back, A polls its receive CQ; each reposts the receive it used.
func (b *bench) pingPongSend(p *benchPair) error {
	if p.recvA == 0 {
		if err := b.postRecvs(p.a, p.rwrA, &p.recvA, uint64(len(p.rwrA))); err != nil {
			return err
		}
		if err := b.postRecvs(p.b, p.rwrB, &p.recvB, uint64(len(p.rwrB))); err != nil {
			return err
		}
	}
	w := &p.wrs[0]
	w.WRID = p.posted
	b.signal(w, p.posted)
	if err := postRetry(p.a, p.wrs[:1]); err != nil {
		return err
	}
	p.posted++
	if err := b.waitRecv(p, p.bRCQ, p.b, p.rwrB, &p.recvB); err != nil {
		return err
	}
	w = &p.bwr[0]
	w.WRID = p.bPosted
	b.signal(w, p.bPosted)
	if err := postRetry(p.b, p.bwr); err != nil {
		return err
	}
	p.bPosted++
	if err := b.waitRecv(p, p.aRCQ, p.a, p.rwrA, &p.recvA); err != nil {
		return err
	}
	return b.drainSends(p)
}

// waitRecv polls a receive CQ for one completion and posts a receive in
// its place.
func (b *bench) waitRecv(p *benchPair, cq *verbs.CQ, q *verbs.QP, tmpl []verbs.RecvWR, count *uint64) error {
	var t0 time.Time
	for i := 0; ; i++ {
		k, err := cq.PollCQ(p.wc[:1])
		if err != nil {
			return err
		}
		if k == 1 {
			wc := p.wc[0]
			if wc.Status != verbs.WCSuccess {
				p.errWC = &wc
				return fmt.Errorf("receive: %v", wc.Status)
			}
			p.lastByteLen = wc.ByteLen
			tmpl[0].WRID = *count
			if err := q.PostRecv(tmpl[0]); err != nil {
				return err
			}
			*count++
			return nil
		}
		if i&1023 == 1023 {
			if err := b.drainSends(p); err != nil {
				return err
			}
			if t0.IsZero() {
				t0 = time.Now()
			} else if time.Since(t0) > stallAfter {
				return errors.New("ping-pong: no receive completion")
			}
			runtime.Gosched()
		}
	}
}

// postPollOne is ib_read_lat's and ib_atomic_lat's round: post one
// signalled WR and poll until it completes.
func (b *bench) postPollOne(p *benchPair) error {
	w := &p.wrs[0]
	w.WRID = p.posted
	w.SendFlags |= verbs.SendSignaled
	if b.c.Op == "cmp_swap" {
		w.CompareAdd, w.Swap = p.atomicN, p.atomicN+1
	}
	if err := postRetry(p.a, p.wrs[:1]); err != nil {
		return err
	}
	p.posted++
	if b.c.Op == "fetch_add" || b.c.Op == "cmp_swap" {
		p.atomicN++
	}
	var t0 time.Time
	for i := 0; ; i++ {
		k, err := p.aSCQ.PollCQ(p.wc[:1])
		if err != nil {
			return err
		}
		if k == 1 {
			if wc := p.wc[0]; wc.Status != verbs.WCSuccess {
				p.errWC = &wc
				return fmt.Errorf("wr %d: %v", wc.WRID, wc.Status)
			}
			return nil
		}
		if i&1023 == 1023 {
			if t0.IsZero() {
				t0 = time.Now()
			} else if time.Since(t0) > stallAfter {
				return errors.New("no completion")
			}
			runtime.Gosched()
		}
	}
}

// postRetry posts, waiting while the ring is full.
func postRetry(q *verbs.QP, wrs []verbs.SendWR) error {
	var t0 time.Time
	for {
		n, err := postSends(q, wrs)
		if err != nil || n == uint64(len(wrs)) {
			return err
		}
		wrs = wrs[n:]
		if t0.IsZero() {
			t0 = time.Now()
		} else if time.Since(t0) > stallAfter {
			return errors.New("the send queue stayed full")
		}
		runtime.Gosched()
	}
}
