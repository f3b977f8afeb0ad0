package verbs

import (
	"fmt"
	"syscall"
	"testing"
	"time"
)

// TestSRQResize: Resize (ibv_modify_srq IBV_SRQ_MAX_WR) maps the new ring
// in place of the old; WRs posted before it are taken after it, in
// order, and the new room is usable; a size too small for what waits is
// EINVAL and keeps the ring.
func TestSRQResize(t *testing.T) {
	e := mount(t, testOpts)
	pd, err := e.ctx.AllocPD()
	e.must(err)
	cq, err := e.ctx.CreateCQ(64)
	e.must(err)
	mr, err := pd.RegMR(1<<14, allAccess)
	e.must(err)
	srq, err := pd.CreateSRQ(SRQInitAttr{MaxWR: 4, MaxSGE: 1})
	e.must(err)
	a, err := pd.CreateQP(QPInitAttr{Type: QPTypeRC, SendCQ: cq, RecvCQ: cq, Cap: QPCap{MaxSendWR: 32, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	e.must(err)
	b, err := pd.CreateQP(QPInitAttr{Type: QPTypeRC, SendCQ: cq, RecvCQ: cq, SRQ: srq, Cap: QPCap{MaxSendWR: 4, MaxSendSGE: 1}})
	e.must(err)
	e.connect(a, b)
	e.connect(b, a)
	recv := func(i int) RecvWR { return RecvWR{WRID: uint64(100 + i), SGL: []SGE{mr.SGE(64*i, 64)}} }
	e.must(srq.PostSRQRecv(recv(0), recv(1), recv(2), recv(3)))
	if err := srq.PostSRQRecv(recv(4)); !isErrno(err, syscall.ENOMEM) {
		t.Fatalf("fifth post into 4: %v", err)
	}
	if err := srq.Resize(2); !isErrno(err, syscall.EINVAL) {
		t.Fatalf("resize below the waiting WRs: %v", err)
	}
	oldRing := srq.q.r
	e.must(srq.Resize(30))
	if srq.MaxWR != 32 || srq.q.r == oldRing {
		t.Fatalf("after resize: max_wr %d, ring remapped %v", srq.MaxWR, srq.q.r != oldRing)
	}
	for i := 4; i < 32; i++ {
		e.must(srq.PostSRQRecv(recv(i)))
	}
	if at, err := srq.Query(); err != nil || at.Pending != 32 || at.MaxWR != 32 {
		t.Fatalf("srq attr: %+v %v", at, err)
	}
	for i := range 32 {
		copy(mr.Buf[8192+i*8:], fmt.Sprintf("msg%05d", i))
		e.must(postRetry(a, SendWR{WRID: uint64(i), Opcode: WRSend, SendFlags: SendSignaled, SGL: []SGE{mr.SGE(8192+i*8, 8)}}))
		if i%8 == 7 {
			pollN(t, cq, 16)
		}
	}
	for i := range 32 {
		if got, want := string(mr.Buf[64*i:64*i+8]), fmt.Sprintf("msg%05d", i); got != want {
			t.Fatalf("recv %d holds %q, want %q", i, got, want)
		}
	}
	e.must(srq.ModifyLimit(0))
}

// TestCompletionTimestamps: a CQ made with both timestamp flags reports
// the device clock and the wall clock of each completion: the device
// clock between QueryRTValues readings around it and never going back,
// the wall clock within the reading's window.
func TestCompletionTimestamps(t *testing.T) {
	e := mount(t, testOpts)
	attr, err := e.ctx.QueryDevice()
	e.must(err)
	if attr.HCACoreClock == 0 || attr.CompletionTimestampMask == 0 {
		t.Fatalf("hca_core_clock %d, completion_timestamp_mask %#x", attr.HCACoreClock, attr.CompletionTimestampMask)
	}
	p := e.rcPair(QPTypeRC, 16, QPCap{MaxSendWR: 4, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}, 4096)
	cq, err := e.ctx.CreateCQEx(16, CQTimestamp|CQTimestampWallclock)
	e.must(err)
	q, err := p.pd.CreateQP(QPInitAttr{Type: QPTypeRC, SendCQ: cq, RecvCQ: cq, Cap: QPCap{MaxSendWR: 4, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	e.must(err)
	r, err := p.pd.CreateQP(QPInitAttr{Type: QPTypeRC, SendCQ: p.cq, RecvCQ: p.cq, Cap: QPCap{MaxSendWR: 4, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	e.must(err)
	e.connect(q, r)
	e.connect(r, q)
	var last uint64
	for i := range 3 {
		raw0, _, err := e.ctx.QueryRTValues()
		e.must(err)
		t0 := time.Now()
		e.must(q.PostSend(SendWR{WRID: uint64(i), Opcode: WRRDMAWrite, SendFlags: SendSignaled, SGL: []SGE{p.ma.SGE(0, 8)},
			RemoteAddr: p.mb.Addr(0), RKey: p.mb.RKey}))
		wc := pollN(t, cq, 1)[0]
		t1 := time.Now()
		raw1, _, err := e.ctx.QueryRTValues()
		e.must(err)
		if wc.Status != WCSuccess || wc.CompletionTS < raw0 || wc.CompletionTS > raw1 || wc.CompletionTS <= last {
			t.Fatalf("completion %d: %+v; raw clock %d..%d, last %d", i, wc, raw0, raw1, last)
		}
		last = wc.CompletionTS
		if w := int64(wc.CompletionWallclockNS); w < t0.UnixNano()-int64(time.Millisecond) || w > t1.UnixNano()+int64(time.Millisecond) {
			t.Fatalf("completion_wallclock_ns %d not in [%d, %d]", w, t0.UnixNano(), t1.UnixNano())
		}
	}
	// The plain CQ's completions have none.
	e.must(p.a.PostSend(SendWR{WRID: 9, Opcode: WRRDMAWrite, SendFlags: SendSignaled, SGL: []SGE{p.ma.SGE(0, 8)},
		RemoteAddr: p.mb.Addr(0), RKey: p.mb.RKey}))
	if wc := pollN(t, p.cq, 1)[0]; wc.CompletionTS != 0 || wc.CompletionWallclockNS != 0 {
		t.Fatalf("a CQ without timestamps: %+v", wc)
	}
}

// TestSRQResizeUnderTraffic: SENDs keep arriving at an SRQ (RNR retried
// for ever when it is empty) while another goroutine keeps it posted and
// resizes it back and forth: every SEND lands in exactly one WR, none is
// lost or taken twice, and the QPs stay healthy.
func TestSRQResizeUnderTraffic(t *testing.T) {
	e := mount(t, testOpts)
	pd, err := e.ctx.AllocPD()
	e.must(err)
	scq, err := e.ctx.CreateCQ(256)
	e.must(err)
	rcq, err := e.ctx.CreateCQ(512)
	e.must(err)
	mr, err := pd.RegMR(1<<16, allAccess)
	e.must(err)
	srq, err := pd.CreateSRQ(SRQInitAttr{MaxWR: 8, MaxSGE: 1})
	e.must(err)
	a, err := pd.CreateQP(QPInitAttr{Type: QPTypeRC, SendCQ: scq, RecvCQ: scq, Cap: QPCap{MaxSendWR: 16, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	e.must(err)
	b, err := pd.CreateQP(QPInitAttr{Type: QPTypeRC, SendCQ: rcq, RecvCQ: rcq, SRQ: srq, Cap: QPCap{MaxSendWR: 4, MaxSendSGE: 1}})
	e.must(err)
	e.connect(a, b)
	e.connect(b, a)
	const n = 400
	stop := make(chan struct{})
	resizes := make(chan int, 1)
	done := -1
	defer func() { // the goroutine ends before the test does, even on Fatal
		if done < 0 {
			close(stop)
			<-resizes
		}
	}()
	go func() {
		next, sizes, done := uint64(0), []uint32{8, 64, 16, 128}, 0
		for i := 0; ; i++ {
			select {
			case <-stop:
				resizes <- done
				return
			default:
			}
			for next < n {
				if err := srq.PostSRQRecv(RecvWR{WRID: next, SGL: []SGE{mr.SGE(int(next%256)*64, 64)}}); err != nil {
					if !isErrno(err, syscall.ENOMEM) {
						t.Error(err)
					}
					break
				}
				next++
			}
			if err := srq.Resize(sizes[i%len(sizes)]); err == nil {
				done++
			} else if !isErrno(err, syscall.EINVAL) {
				t.Error(err)
			}
			time.Sleep(50 * time.Microsecond)
		}
	}()
	for i := range n {
		e.must(postRetry(a, SendWR{WRID: uint64(i), Opcode: WRSend, SendFlags: SendSignaled, SGL: []SGE{mr.SGE(1<<15, 8)}}))
		if i%16 == 15 {
			pollN(t, scq, 16)
		}
	}
	recvs := pollN(t, rcq, n)
	close(stop)
	done = <-resizes
	seen := make(map[uint64]bool)
	for _, wc := range recvs {
		if wc.Status != WCSuccess || seen[wc.WRID] {
			t.Fatalf("receive %+v (seen before: %v)", wc, seen[wc.WRID])
		}
		seen[wc.WRID] = true
	}
	if done == 0 {
		t.Error("no resize succeeded")
	}
	if st, _ := a.State(); st != StateRTS {
		t.Errorf("sender in %v", st)
	}
	t.Logf("%d resizes under %d SENDs", done, n)
}
