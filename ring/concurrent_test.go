package ring

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// payload derives entry contents from a seeded generator. Producer and
// consumer each own one with the same seed, so the consumer can predict
// every byte without the two sharing anything but the ring (gVisor
// pipe_test.go TestConcurrentReaderWriter).
type payload struct {
	src *rand.ChaCha8
	rng *rand.Rand
}

func newPayload(seed byte) *payload {
	src := rand.NewChaCha8([32]byte{seed})
	return &payload{src: src, rng: rand.New(src)}
}

// next fills buf (one slot's worth) for entry seq: 8 bytes seq, 2 bytes
// length, then that many random bytes.
func (p *payload) next(buf []byte, seq uint64) {
	n := p.rng.IntN(len(buf) - 10 + 1)
	binary.LittleEndian.PutUint64(buf, seq)
	binary.LittleEndian.PutUint16(buf[8:], uint16(n))
	p.src.Read(buf[10 : 10+n])
}

// TestConcurrentProducerConsumer pushes a million entries from one
// goroutine to another through a memfd ring, each side on its own mapping,
// with random batch sizes on both sides, and checks order and content.
func TestConcurrentProducerConsumer(t *testing.T) {
	n := 1_000_000
	if testing.Short() {
		n = 100_000
	}
	const slotSize, slots = 64, 64
	const start = 0xFFFFFFF0 // wrap early, and again 2^32 entries later never
	reg := newTestRegion(t, Size(slotSize, slots))
	daemon, err := Init(reg.Bytes(), KindSQ, slotSize, slots)
	if err != nil {
		t.Fatal(err)
	}
	daemon.StoreProducer(start)
	daemon.StoreConsumer(start)
	pm := mapTestRegion(t, reg.Fd(), reg.Size())
	cm := mapTestRegion(t, reg.Fd(), reg.Size())
	pr, err := Attach(pm.Bytes(), KindSQ)
	if err != nil {
		t.Fatal(err)
	}
	cr, err := Attach(cm.Bytes(), KindSQ)
	if err != nil {
		t.Fatal(err)
	}

	var stop atomic.Bool // set on the first failure so the peer stops spinning
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	fail := func(err error) {
		stop.Store(true)
		errs <- err
	}

	wg.Add(2)
	go func() { // producer
		defer wg.Done()
		want := newPayload(1)
		batch := rand.New(rand.NewPCG(2, 0))
		p := NewProducer(pr)
		for seq := uint64(0); seq < uint64(n); {
			if stop.Load() {
				return
			}
			free, err := p.Free()
			if err != nil {
				fail(fmt.Errorf("producer: %w", err))
				return
			}
			if free == 0 {
				runtime.Gosched()
				continue
			}
			k := min(uint64(free), uint64(1+batch.IntN(slots)), uint64(n)-seq)
			for range k {
				want.next(p.Next(), seq)
				p.Advance()
				seq++
			}
			p.Publish()
		}
	}()
	go func() { // consumer
		defer wg.Done()
		want := newPayload(1)
		batch := rand.New(rand.NewPCG(3, 0))
		c := NewConsumer(cr)
		buf := make([]byte, slotSize)
		for seq := uint64(0); seq < uint64(n); {
			if stop.Load() {
				return
			}
			pending, err := c.Pending()
			if err != nil {
				fail(fmt.Errorf("consumer: %w", err))
				return
			}
			if pending == 0 {
				runtime.Gosched()
				continue
			}
			k := min(pending, uint32(1+batch.IntN(slots)))
			for i := range k {
				want.next(buf, seq)
				got := c.Peek(i)
				wantLen := 10 + int(binary.LittleEndian.Uint16(buf[8:]))
				if !bytes.Equal(got[:wantLen], buf[:wantLen]) {
					fail(fmt.Errorf("entry %d (index %#x):\n got % x\nwant % x", seq, c.Tail()+i, got[:wantLen], buf[:wantLen]))
					return
				}
				seq++
			}
			c.Advance(k)
			c.Publish()
		}
	}()

	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		stop.Store(true)
		<-done
		t.Fatal("timed out")
	}
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		return
	}
	if got, want := daemon.LoadConsumer(), uint32(start+uint64(n)); got != want || daemon.LoadProducer() != want {
		t.Errorf("final indices prod %#x cons %#x, want %#x", daemon.LoadProducer(), got, want)
	}
}

func TestWaitEventTimeout(t *testing.T) {
	r, _ := newHeapRing(t, KindCQ, 64, 4)
	seq := r.EventSeq()
	for _, d := range []time.Duration{0, time.Millisecond, 20 * time.Millisecond} {
		t0 := time.Now()
		if err := r.WaitEvent(seq, d); !errors.Is(err, errDeadline) {
			t.Errorf("WaitEvent(%v) = %v, want deadline exceeded", d, err)
		}
		if el := time.Since(t0); el < d {
			t.Errorf("WaitEvent(%v) returned after %v", d, el)
		}
	}
	// A sequence that already moved returns at once, whatever the timeout.
	r.BumpEvent()
	if err := r.WaitEvent(seq, -1); err != nil {
		t.Errorf("WaitEvent on a stale seq = %v", err)
	}
	r.WakeEventWaiters() // no waiters: harmless
}

func TestBumpEvent(t *testing.T) {
	r, mem := newHeapRing(t, KindCQ, 64, 4)
	binary.LittleEndian.PutUint32(mem[OffEventSeq:], 0xFFFFFFFF)
	if got := r.BumpEvent(); got != 0 {
		t.Errorf("BumpEvent from 0xFFFFFFFF = %#x, want 0 (wraps)", got)
	}
	if got := r.BumpEvent(); got != 1 || r.EventSeq() != 1 {
		t.Errorf("BumpEvent = %d, EventSeq = %d", got, r.EventSeq())
	}
}
