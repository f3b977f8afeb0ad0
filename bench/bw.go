package bench

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"syscall"
	"time"

	"rdmafs/verbs"
)

// ---------------------------------------------------------------- bw

// stallAfter is how long a phase may go without a completion before the
// bench gives up (a lost completion must not hang it).
const stallAfter = 10 * time.Second

type benchSample struct {
	t int64  // ns since the phase started
	n uint64 // WRs completed by then
}

func (b *bench) measureBW(size int, r *Result) error {
	c := b.c
	samples := make([]benchSample, 0, 1<<14)
	n, ns, err := b.bw(uint64(c.Iters), c.Duration, &samples)
	if err != nil {
		return err
	}
	secs := float64(ns) / 1e9
	r.WRs, r.Seconds = n, secs
	r.Iterations = n / uint64(c.QPs)
	r.MsgRate = float64(n) / secs / 1e6
	r.BWAvg = float64(n) * float64(size) / secs / (1 << 20)
	r.BWPeak = peakRate(samples, ns) * float64(size) * 1e9 / (1 << 20)
	r.BWPeak = max(r.BWPeak, r.BWAvg)
	return nil
}

// peakRate is the best rate (WRs per ns) over any stretch of at least a
// tenth of the run (and at least a millisecond) between two samples.
func peakRate(s []benchSample, total int64) float64 {
	window := max(total/10, int64(time.Millisecond))
	best := 0.0
	j := 0
	for i := range s {
		for j < len(s) && s[j].t-s[i].t < window {
			j++
		}
		if j == len(s) {
			break
		}
		best = max(best, float64(s[j].n-s[i].n)/float64(s[j].t-s[i].t))
	}
	return best
}

// bw keeps tx-depth send WRs in flight on every pair, signalling every
// cq-mod-th (and the last), until iters WRs per pair completed or, with a
// duration, until it is over (then the WRs up to the next signalled one are
// finished and counted). It returns the WRs completed and the time from the
// first post to the last completion.
func (b *bench) bw(iters uint64, dur time.Duration, samples *[]benchSample) (uint64, int64, error) {
	c := b.c
	cqMod, depth := uint64(c.CQMod), uint64(c.TxDepth)
	type lim struct{ start, limit uint64 }
	lims := make([]lim, len(b.pairs))
	for i, p := range b.pairs {
		lims[i] = lim{p.posted, p.posted + iters}
		if dur > 0 {
			lims[i].limit = math.MaxUint64
		}
		// Signals fall on multiples of cq-mod counted from the start of
		// the phase; the previous phase ended on a signalled WR.
		if c.Op == "send" && p.recvB == 0 {
			if err := b.postRecvs(p.b, p.rwrB, &p.recvB, uint64(len(p.rwrB))); err != nil {
				return 0, 0, err
			}
		}
	}
	var startSum uint64
	for _, l := range lims {
		startSum += l.start
	}
	stopping := dur == 0
	start := time.Now()
	var lastDone, lastSample int64
	sampleEvery := int64(50 * time.Microsecond)
	if samples != nil {
		*samples = append(*samples, benchSample{0, 0})
	}
	idle := 0
	for {
		progress := false
		finished := true
		for i, p := range b.pairs {
			l := &lims[i]
			// Post.
			for p.posted < l.limit && p.posted-p.done < depth {
				n := min(uint64(len(p.wrs)), l.limit-p.posted, depth-(p.posted-p.done))
				if c.Op == "send" {
					n = min(n, p.recvB-p.posted)
					if n == 0 {
						break
					}
				}
				for k := range n {
					w := &p.wrs[k]
					idx := p.posted + k
					w.WRID = idx
					w.SendFlags &^= verbs.SendSignaled
					if (idx-l.start+1)%cqMod == 0 || idx+1 == l.limit {
						w.SendFlags |= verbs.SendSignaled
					}
					if c.Op == "cmp_swap" {
						w.CompareAdd, w.Swap = p.atomicN+k, p.atomicN+k+1
					}
				}
				posted, err := postSends(p.a, p.wrs[:n])
				p.posted += posted
				if c.Op == "fetch_add" || c.Op == "cmp_swap" {
					p.atomicN += posted
				}
				if err != nil {
					return 0, 0, err
				}
				if posted < n {
					break // the ring is full: poll
				}
			}
			// Poll A's send completions.
			k, err := p.aSCQ.PollCQ(p.wc)
			if err != nil {
				return 0, 0, err
			}
			for _, wc := range p.wc[:k] {
				if wc.Status != verbs.WCSuccess {
					p.errWC = &wc
					return 0, 0, fmt.Errorf("qp %d: wr %d: %v", p.a.QPN, wc.WRID, wc.Status)
				}
				p.done = wc.WRID + 1
			}
			if k > 0 {
				progress = true
			}
			// Receives (send): count them and post as many again.
			if c.Op == "send" {
				k, err := p.bRCQ.PollCQ(p.wc)
				if err != nil {
					return 0, 0, err
				}
				for _, wc := range p.wc[:k] {
					if wc.Status != verbs.WCSuccess {
						p.errWC = &wc
						return 0, 0, fmt.Errorf("qp %d: receive %d: %v", p.b.QPN, wc.WRID, wc.Status)
					}
					p.lastByteLen = wc.ByteLen
				}
				p.recvDoneB += uint64(k)
				if free := p.recvDoneB + uint64(len(p.rwrB)) - p.recvB; free >= uint64(min(len(p.rwrB)/4, 64)) || free > 0 && p.recvB == p.posted {
					if err := b.postRecvs(p.b, p.rwrB, &p.recvB, free); err != nil {
						return 0, 0, err
					}
				}
				if k > 0 {
					progress = true
				}
			}
			if p.done < l.limit {
				finished = false
			}
		}
		if progress {
			idle = 0
			now := int64(time.Since(start))
			lastDone = now
			if samples != nil && now-lastSample >= sampleEvery {
				*samples = append(*samples, benchSample{now, b.completed() - startSum})
				lastSample = now
			}
			if !stopping && now >= int64(dur) {
				stopping = true
				for i, p := range b.pairs {
					// Finish on the next signalled WR.
					n := p.posted - lims[i].start
					lims[i].limit = lims[i].start + (n+cqMod-1)/cqMod*cqMod
					if lims[i].limit == lims[i].start {
						lims[i].limit += cqMod
					}
				}
				continue
			}
		} else {
			idle++
			if idle&1023 == 0 {
				if time.Duration(int64(time.Since(start))-lastDone) > stallAfter {
					return 0, 0, fmt.Errorf("no completion for %v (posted %d, completed %d)", stallAfter, b.pairs[0].posted, b.pairs[0].done)
				}
				runtime.Gosched()
			}
		}
		if finished && stopping {
			break
		}
	}
	var n uint64
	for i, p := range b.pairs {
		n += p.done - lims[i].start
	}
	if samples != nil {
		*samples = append(*samples, benchSample{lastDone, n})
	}
	return n, max(lastDone, 1), nil
}

// completed counts the WRs completed on all pairs since they were made.
func (b *bench) completed() uint64 {
	var n uint64
	for _, p := range b.pairs {
		n += p.done
	}
	return n
}

// postSends posts wrs and returns how many went in; a full ring is not an
// error (the caller polls and tries again).
func postSends(q *verbs.QP, wrs []verbs.SendWR) (uint64, error) {
	err := q.PostSend(wrs...)
	if err == nil {
		return uint64(len(wrs)), nil
	}
	var pe *verbs.PostError
	if errors.As(err, &pe) && pe.Errno == syscall.ENOMEM {
		return uint64(pe.Index), nil
	}
	return 0, err
}

// postRecvs posts n receives (at most the template's length).
func (b *bench) postRecvs(q *verbs.QP, tmpl []verbs.RecvWR, count *uint64, n uint64) error {
	n = min(n, uint64(len(tmpl)))
	for i := range n {
		tmpl[i].WRID = *count + i
	}
	if err := q.PostRecv(tmpl[:n]...); err != nil {
		return err
	}
	*count += n
	return nil
}
