package bench

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

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
// first post to the last completion. With --threads T > 1 each of T
// threads drives its own len(pairs)/T pairs (see bwThreads).
func (b *bench) bw(iters uint64, dur time.Duration, samples *[]benchSample) (uint64, int64, error) {
	if b.c.Threads > 1 {
		return b.bwThreads(iters, dur, samples)
	}
	w := &bwWorker{pairs: b.pairs, samples: samples}
	if err := b.bwPrepare(w, iters, dur); err != nil {
		return 0, 0, err
	}
	b.bwLoop(w, dur, time.Now(), nil)
	b.threads = []threadStat{{wrs: w.n}}
	if w.err != nil {
		return 0, 0, w.err
	}
	return w.n, max(w.lastDone, 1), nil
}

// bwWorker is one thread's share of a bw phase: its pairs, their limits,
// and what it measured.
type bwWorker struct {
	pairs    []*benchPair
	lims     []bwLim
	startSum uint64
	samples  *[]benchSample // nil: none taken
	n        uint64         // WRs completed in the phase
	lastDone int64          // ns from the common start to the last completion
	err      error
}

type bwLim struct{ start, limit uint64 }

// threadStat is what one thread of the last bw phase did (for the tests).
type threadStat struct {
	tid int // its OS thread (0 for the single-thread path)
	wrs uint64
}

// bwThreads is bw on c.Threads goroutines, each locked to an OS thread and
// posting to and polling only its own pairs (and their own CQs), released
// together from a barrier: the phase starts when the last thread is ready
// to post and ends with the last completion of any thread. The counts are
// the sum over the threads, as perftest's processes would be summed; the
// samples (for the peak) are the sum of the threads' at each instant.
func (b *bench) bwThreads(iters uint64, dur time.Duration, samples *[]benchSample) (uint64, int64, error) {
	t := b.c.Threads
	per := len(b.pairs) / t
	ws := make([]*bwWorker, t)
	tids := make([]int, t)
	var ready, done sync.WaitGroup
	var abort atomic.Bool
	release := make(chan struct{})
	var start time.Time
	ready.Add(t)
	done.Add(t)
	for i := range ws {
		w := &bwWorker{pairs: b.pairs[i*per : (i+1)*per]}
		if samples != nil {
			s := make([]benchSample, 0, cap(*samples)/t+16)
			w.samples = &s
		}
		ws[i] = w
		go func() {
			defer done.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			tids[i] = unix.Gettid()
			w.err = b.bwPrepare(w, iters, dur)
			if w.err != nil {
				abort.Store(true)
			}
			ready.Done()
			<-release
			if w.err == nil && !abort.Load() {
				b.bwLoop(w, dur, start, &abort)
			}
		}()
	}
	ready.Wait()
	start = time.Now()
	close(release)
	done.Wait()
	b.threads = make([]threadStat, t)
	var n uint64
	var last int64
	var errs []error
	for i, w := range ws {
		b.threads[i] = threadStat{tid: tids[i], wrs: w.n}
		n += w.n
		last = max(last, w.lastDone)
		if w.err != nil {
			errs = append(errs, fmt.Errorf("thread %d: %w", i, w.err))
		}
	}
	if len(errs) > 0 {
		return 0, 0, errors.Join(errs...)
	}
	if samples != nil {
		all := make([][]benchSample, t)
		for i, w := range ws {
			all[i] = *w.samples
		}
		*samples = append(*samples, sumSamples(all)...)
	}
	return n, max(last, 1), nil
}

// sumSamples merges per-thread sample series (each from the common start,
// counting that thread's WRs) into one of the total at every instant any
// thread sampled.
func sumSamples(per [][]benchSample) []benchSample {
	idx := make([]int, len(per))
	cur := make([]uint64, len(per))
	var out []benchSample
	for {
		next := int64(math.MaxInt64)
		for i, s := range per {
			if idx[i] < len(s) {
				next = min(next, s[idx[i]].t)
			}
		}
		if next == math.MaxInt64 {
			return out
		}
		var total uint64
		for i, s := range per {
			for idx[i] < len(s) && s[idx[i]].t == next {
				cur[i] = s[idx[i]].n
				idx[i]++
			}
			total += cur[i]
		}
		out = append(out, benchSample{next, total})
	}
}

// bwPrepare sets a worker's limits and, for send, posts its pairs' first
// receives.
func (b *bench) bwPrepare(w *bwWorker, iters uint64, dur time.Duration) error {
	c := b.c
	w.lims = make([]bwLim, len(w.pairs))
	for i, p := range w.pairs {
		w.lims[i] = bwLim{p.posted, p.posted + iters}
		if dur > 0 {
			w.lims[i].limit = math.MaxUint64
		}
		// Signals fall on multiples of cq-mod counted from the start of
		// the phase; the previous phase ended on a signalled WR.
		if c.Op == "send" && p.recvB == 0 {
			if err := b.postRecvs(p.b, p.rwrB, &p.recvB, uint64(len(p.rwrB))); err != nil {
				return err
			}
		}
	}
	for _, l := range w.lims {
		w.startSum += l.start
	}
	return nil
}

// bwLoop is one thread's phase on its pairs, timed from start; its result
// (or error) is left in w. A thread that fails sets abort, when given, so
// that the others stop waiting for completions too.
func (b *bench) bwLoop(w *bwWorker, dur time.Duration, start time.Time, abort *atomic.Bool) {
	fail := func(err error) {
		w.err = err
		if abort != nil {
			abort.Store(true)
		}
	}
	c := b.c
	cqMod, depth := uint64(c.CQMod), uint64(c.TxDepth)
	lims := w.lims
	samples := w.samples
	stopping := dur == 0
	var lastDone, lastSample int64
	sampleEvery := int64(50 * time.Microsecond)
	if samples != nil {
		*samples = append(*samples, benchSample{0, 0})
	}
	idle := 0
	for {
		progress := false
		finished := true
		for i, p := range w.pairs {
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
					wr := &p.wrs[k]
					idx := p.posted + k
					wr.WRID = idx
					wr.SendFlags &^= verbs.SendSignaled
					if (idx-l.start+1)%cqMod == 0 || idx+1 == l.limit {
						wr.SendFlags |= verbs.SendSignaled
					}
					if c.Op == "cmp_swap" {
						wr.CompareAdd, wr.Swap = p.atomicN+k, p.atomicN+k+1
					}
				}
				posted, err := postSends(p.a, p.wrs[:n])
				p.posted += posted
				if c.Op == "fetch_add" || c.Op == "cmp_swap" {
					p.atomicN += posted
				}
				if err != nil {
					fail(err)
					return
				}
				if posted < n {
					break // the ring is full: poll
				}
			}
			// Poll A's send completions.
			k, err := p.aSCQ.PollCQ(p.wc)
			if err != nil {
				fail(err)
				return
			}
			for _, wc := range p.wc[:k] {
				if wc.Status != verbs.WCSuccess {
					p.errWC = &wc
					fail(fmt.Errorf("qp %d: wr %d: %v", p.a.QPN, wc.WRID, wc.Status))
					return
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
					fail(err)
					return
				}
				for _, wc := range p.wc[:k] {
					if wc.Status != verbs.WCSuccess {
						p.errWC = &wc
						fail(fmt.Errorf("qp %d: receive %d: %v", p.b.QPN, wc.WRID, wc.Status))
						return
					}
					p.lastByteLen = wc.ByteLen
				}
				p.recvDoneB += uint64(k)
				if free := p.recvDoneB + uint64(len(p.rwrB)) - p.recvB; free >= uint64(min(len(p.rwrB)/4, 64)) || free > 0 && p.recvB == p.posted {
					if err := b.postRecvs(p.b, p.rwrB, &p.recvB, free); err != nil {
						fail(err)
						return
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
				*samples = append(*samples, benchSample{now, completed(w.pairs) - w.startSum})
				lastSample = now
			}
			if !stopping && now >= int64(dur) {
				stopping = true
				for i, p := range w.pairs {
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
					fail(fmt.Errorf("no completion for %v (posted %d, completed %d)", stallAfter, w.pairs[0].posted, w.pairs[0].done))
					return
				}
				if abort != nil && abort.Load() {
					w.err = errors.New("stopped: another thread failed")
					return
				}
				runtime.Gosched()
			}
		}
		if finished && stopping {
			break
		}
	}
	var n uint64
	for i, p := range w.pairs {
		n += p.done - lims[i].start
	}
	if samples != nil {
		*samples = append(*samples, benchSample{lastDone, n})
	}
	w.n, w.lastDone = n, lastDone
}

// completed counts the WRs completed on pairs since they were made.
func completed(pairs []*benchPair) uint64 {
	var n uint64
	for _, p := range pairs {
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
