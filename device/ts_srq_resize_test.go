package device

import (
	"fmt"
	"testing"
	"time"

	"rdmafs/qp"
)

// TestSRQResize: ibv_modify_srq with IBV_SRQ_MAX_WR under the rules of a
// CQ resize. The WRs waiting move to the new ring in order and are taken
// from it; a size that cannot hold them, or below the armed limit, is
// EINVAL and changes nothing; the limit event still fires after.
func TestSRQResize(t *testing.T) {
	e := newEnv(t)
	srq := e.srq(8, 0)
	acq, bcq := e.cq(64), e.cq(64)
	a := e.qp(qpOpts{typ: qp.TypeRC, scq: acq, rcq: acq})
	b := e.qp(qpOpts{typ: qp.TypeRC, scq: bcq, rcq: bcq, srq: srq})
	e.connect(a, b.QPN, "")
	e.connect(b, a.QPN, "")
	buf := e.mr(1<<12, qp.AccessLocalWrite)
	for i := range 6 {
		e.postSRQ(srq, fmt.Sprintf("wr_id=%d sge=%d:%d:64", 100+i, buf.LKey, 64*i))
	}
	e.postSend(a, "opcode=send wr_id=1 send_flags=signaled", "opcode=send wr_id=2 send_flags=signaled")
	e.quiesce()
	e.expect(acq, sendWC(1, "success", "send", a, 0), sendWC(2, "success", "send", a, 0))
	e.expect(bcq, recvWC(100, "success", "recv", b, 0, a, ""), recvWC(101, "success", "recv", b, 0, a, ""))
	if got := srq.Attr(); got.Pending != 4 || got.MaxWR != 8 {
		t.Fatalf("before the resize: %+v", got)
	}
	oldReg := srq.Region()
	for _, bad := range []qp.ModifySRQ{
		{Mask: qp.SRQMaxWR, MaxWR: 2},                    // 4 WRs wait
		{Mask: qp.SRQMaxWR, MaxWR: 0},                    // out of range
		{Mask: qp.SRQMaxWR, MaxWR: e.d.cfg.MaxSRQWR + 1}, // out of range
		{Mask: qp.SRQMaxWR | qp.SRQLimit, MaxWR: 16, SRQLimit: 17},
	} {
		if err := srq.ModifyAttr(bad); Errno(err) != 22 {
			t.Fatalf("%+v: %v, want EINVAL", bad, err)
		}
	}
	if err := srq.Modify(3); err != nil {
		t.Fatal(err)
	}
	// max_wr below the armed limit.
	if err := srq.ModifyAttr(qp.ModifySRQ{Mask: qp.SRQMaxWR, MaxWR: 2}); Errno(err) != 22 {
		t.Fatalf("resize below the limit: %v, want EINVAL", err)
	}
	if got := srq.Attr(); got.Pending != 4 || got.MaxWR != 8 || got.SRQLimit != 3 || srq.Region() != oldReg {
		t.Fatalf("a failed modify changed the SRQ: %+v", got)
	}
	if err := srq.ModifyAttr(qp.ModifySRQ{Mask: qp.SRQMaxWR, MaxWR: 20}); err != nil {
		t.Fatal(err)
	}
	if got := srq.Attr(); got.Pending != 4 || got.MaxWR != 32 || got.SRQLimit != 3 {
		t.Fatalf("after the resize: %+v", got)
	}
	if srq.Region() == oldReg {
		t.Fatal("the resize kept the old ring")
	}
	// The ring now holds 32: post 24 more (28 waiting), take them all.
	for i := 6; i < 30; i++ {
		e.postSRQ(srq, fmt.Sprintf("wr_id=%d sge=%d:%d:64", 100+i, buf.LKey, 64*(i%64)))
	}
	var sends, wantA, wantB []string
	for i := 3; i <= 28; i++ {
		sends = append(sends, fmt.Sprintf("opcode=send wr_id=%d send_flags=signaled", i))
		wantA = append(wantA, sendWC(uint64(i), "success", "send", a, 0))
		wantB = append(wantB, recvWC(uint64(99+i), "success", "recv", b, 0, a, ""))
	}
	for i := 0; i < len(sends); i += 8 {
		e.postSend(a, sends[i:min(i+8, len(sends))]...)
		e.quiesce()
	}
	e.expect(acq, wantA...)
	e.expect(bcq, wantB...)
	// 2 left: below the limit of 3, once.
	e.expectEvents(fmt.Sprintf("event=srq_limit_reached srq=%d", srq.Handle))
	// Shrink to what waits, with a new limit in the same modify.
	if err := srq.ModifyAttr(qp.ModifySRQ{Mask: qp.SRQMaxWR | qp.SRQLimit, MaxWR: 2, SRQLimit: 1}); err != nil {
		t.Fatal(err)
	}
	if got := srq.Attr(); got.Pending != 2 || got.MaxWR != 2 || got.SRQLimit != 1 {
		t.Fatalf("after the shrink: %+v", got)
	}
	e.postSend(a, "opcode=send wr_id=29 send_flags=signaled", "opcode=send wr_id=30 send_flags=signaled")
	e.quiesce()
	e.expect(bcq, recvWC(128, "success", "recv", b, 0, a, ""), recvWC(129, "success", "recv", b, 0, a, ""))
	e.expectEvents(fmt.Sprintf("event=srq_limit_reached srq=%d", srq.Handle))
	e.healthy(a, b)
}

// TestCompletionTimestamps: a CQ made with the timestamp flags gets, in
// each CQE, the device clock (at its stated rate, on the injectable
// clock) and the wall clock of the completion; other CQs get zeros. The
// device clock never goes back and counts hca_core_clock kHz.
func TestCompletionTimestamps(t *testing.T) {
	const khz = 250_000 // 4 ns a tick
	e := newEnv(t, func(c *Config) { c.CoreClockKHz = khz })
	if got := e.d.Attr().HCACoreClock; got != khz {
		t.Fatalf("hca_core_clock %d, want %d", got, khz)
	}
	ts, err := e.d.CreateCQ(0, qp.CreateCQ{CQE: 16, WCFlags: qp.CQTimestamp | qp.CQTimestampWallclock})
	if err != nil {
		t.Fatal(err)
	}
	plain := e.cq(16)
	a := e.qp(qpOpts{typ: qp.TypeRC, scq: ts, rcq: ts})
	b := e.qp(qpOpts{typ: qp.TypeRC, scq: plain, rcq: plain})
	e.connect(a, b.QPN, "")
	e.connect(b, a.QPN, "")

	t0, w0 := e.d.RawClock()
	e.clk.Advance(time.Millisecond)
	t1, w1 := e.d.RawClock()
	if t1-t0 != khz || w1-w0 != uint64(time.Millisecond) {
		t.Fatalf("1 ms of the clock: %d ticks, %d ns of wall clock; want %d, %d", t1-t0, w1-w0, khz, time.Millisecond)
	}
	if w1 != uint64(e.clk.Now().UnixNano()) {
		t.Fatalf("wall clock %d, the clock says %d", w1, e.clk.Now().UnixNano())
	}
	var last uint64
	for i := range 3 {
		e.postRecv(b, fmt.Sprintf("wr_id=%d", 100+i))
		e.postSend(a, fmt.Sprintf("opcode=send wr_id=%d send_flags=signaled", i))
		e.quiesce()
		now, wall := e.d.RawClock()
		wcs, err := ts.Poll(8)
		if err != nil || len(wcs) != 1 {
			t.Fatalf("poll: %v %v", wcs, err)
		}
		wc := wcs[0]
		if wc.CompletionTS != now || wc.CompletionWallclockNS != wall {
			t.Fatalf("completion %d: ts=%d wallclock=%d, the clocks say %d %d", i, wc.CompletionTS, wc.CompletionWallclockNS, now, wall)
		}
		if wc.CompletionTS <= last {
			t.Fatalf("completion %d at %d, after one at %d", i, wc.CompletionTS, last)
		}
		last = wc.CompletionTS
		line := qp.FormatWC(&wc)
		if back, err := qp.ParseWC(line); err != nil || back != wc {
			t.Fatalf("%q does not parse back: %+v %v", line, back, err)
		}
		for _, w := range e.poll(plain) {
			if back, _ := qp.ParseWC(w); back.CompletionTS != 0 || back.CompletionWallclockNS != 0 {
				t.Fatalf("a CQ without timestamps has one: %s", w)
			}
		}
		e.clk.Advance(3 * time.Microsecond) // 750 ticks
	}
	// Only the raw clock: the wall clock stays zero.
	raw, err := e.d.CreateCQ(0, qp.CreateCQ{CQE: 4, WCFlags: qp.CQTimestamp})
	if err != nil {
		t.Fatal(err)
	}
	c := e.qp(qpOpts{typ: qp.TypeRC, scq: raw, rcq: raw})
	e.modify(c, "qp_state=init pkey_index=0 port_num=1 qp_access_flags=0")
	e.modify(c, "qp_state=err")
	e.quiesce()
	e.postSend(c, "opcode=send wr_id=5 send_flags=signaled")
	e.quiesce()
	wcs, err := raw.Poll(4)
	if err != nil || len(wcs) != 1 || wcs[0].CompletionTS == 0 || wcs[0].CompletionWallclockNS != 0 {
		t.Fatalf("raw-only CQ: %+v %v", wcs, err)
	}
}
