package device

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"rdmafs/clock"
	"rdmafs/qp"
)

// Several pairs driven from their own goroutines against the real clock,
// the way separate client threads use one device: every WR completes, in
// order, with the right bytes.
func TestConcurrentPairs(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Clock = clock.Real{} })
	const pairs, rounds = 4, 200
	var wg sync.WaitGroup
	errs := make(chan error, pairs)
	for p := 0; p < pairs; p++ {
		a, b, acq, bcq := e.pair(qp.TypeRC)
		src := e.mr(1<<16, 0)
		dst := e.mr(1<<16, qp.AccessLocalWrite|qp.AccessRemoteWrite)
		fill(src.Mem(), byte(p))
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- drivePair(a, b, acq, bcq, src, dst, rounds)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}

func drivePair(a, b *QP, acq, bcq *CQ, src, dst *MR, rounds int) error {
	poll := func(cq *CQ, n int) ([]qp.WC, error) {
		var out []qp.WC
		deadline := time.Now().Add(10 * time.Second)
		for len(out) < n {
			wcs, err := cq.Poll(n - len(out))
			if err != nil {
				return nil, err
			}
			out = append(out, wcs...)
			if time.Now().After(deadline) {
				return out, fmt.Errorf("qp %d: %d of %d completions", a.QPN, len(out), n)
			}
			if len(wcs) == 0 {
				time.Sleep(10 * time.Microsecond)
			}
		}
		return out, nil
	}
	for r := 0; r < rounds; r++ {
		n := uint32(1 + r*97%8000)
		if _, err := b.PostRecv([]qp.RecvWR{{WRID: uint64(r), SGL: []qp.SGE{{Addr: 0, Length: 8192, LKey: dst.LKey}}}}); err != nil {
			return err
		}
		wrs := []qp.SendWR{
			{WRID: uint64(2 * r), Opcode: qp.WRRDMAWrite, SendFlags: qp.SendSignaled, SGL: []qp.SGE{{Addr: 100, Length: n, LKey: src.LKey}}, RemoteAddr: 10000, RKey: dst.RKey},
			{WRID: uint64(2*r + 1), Opcode: qp.WRSend, SendFlags: qp.SendSignaled, SGL: []qp.SGE{{Addr: 50, Length: n, LKey: src.LKey}}},
		}
		if _, err := a.PostSend(wrs); err != nil {
			return err
		}
		wcs, err := poll(acq, 2)
		if err != nil {
			return err
		}
		for i, wc := range wcs {
			if wc.Status != qp.WCSuccess || wc.WRID != uint64(2*r+i) || wc.ByteLen != n {
				return fmt.Errorf("qp %d round %d: %+v", a.QPN, r, wc)
			}
		}
		rw, err := poll(bcq, 1)
		if err != nil {
			return err
		}
		if rw[0].Status != qp.WCSuccess || rw[0].WRID != uint64(r) || rw[0].ByteLen != n {
			return fmt.Errorf("qp %d round %d recv: %+v", b.QPN, r, rw[0])
		}
		m := dst.Mem()
		for i := uint32(0); i < n; i++ {
			if m[10000+i] != src.Mem()[100+i] || m[i] != src.Mem()[50+i] {
				return fmt.Errorf("qp %d round %d: byte %d differs", a.QPN, r, i)
			}
		}
	}
	return nil
}

// Moving a QP to ERR while it streams: every WR still completes exactly
// once, in order, successes first and then flushes.
func TestErrorWhileStreaming(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Clock = clock.Real{} })
	a, b, acq, _ := e.pair(qp.TypeRC)
	src := e.mr(1<<16, 0)
	dst := e.mr(1<<16, qp.AccessLocalWrite|qp.AccessRemoteWrite)
	const total = 2000
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		time.Sleep(2 * time.Millisecond)
		if err := a.Error(); err != nil {
			t.Error(err)
		}
	}()
	posted := 0
	var got []qp.WC
	for posted < total || len(got) < posted {
		if posted < total && posted-len(got) < 32 {
			wr := qp.SendWR{WRID: uint64(posted), Opcode: qp.WRRDMAWrite, SendFlags: qp.SendSignaled,
				SGL: []qp.SGE{{Addr: 0, Length: 4096, LKey: src.LKey}}, RKey: dst.RKey}
			if _, err := a.PostSend([]qp.SendWR{wr}); err != nil {
				t.Fatal(err)
			}
			posted++
		}
		wcs, err := acq.Poll(64)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, wcs...)
	}
	wg.Wait()
	flushing := false
	for i, wc := range got {
		if wc.WRID != uint64(i) {
			t.Fatalf("completion %d has wr_id %d", i, wc.WRID)
		}
		switch wc.Status {
		case qp.WCSuccess:
			if flushing {
				t.Fatalf("success after a flush at %d", i)
			}
		case qp.WCWRFlushErr:
			flushing = true
		default:
			t.Fatalf("completion %d: %v", i, wc.Status)
		}
	}
	e.state(a, qp.StateErr)
	e.state(b, qp.StateRTS)
}
