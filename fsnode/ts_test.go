package fsnode_test

import (
	"fmt"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"rdmafs/qp"
	"rdmafs/ring"
)

// TestSRQResizeFile: "modify max_wr=N" on srq/H/ctl resizes the SRQ; the
// waiting WRs move to a new ring file (a new mapping sees them and takes
// posts), a size that cannot hold them is EINVAL with the reason in error,
// and max_wr and srq_limit go together in one modify.
func TestSRQResizeFile(t *testing.T) {
	m := mount(t)
	pd := m.create("pd", "")
	srq := m.create("srq", "pd="+pd+" max_wr=4 max_sge=2")
	mr := m.create("mr", "pd="+pd+" length=4096 access=local_write")
	lkey := m.attrs("mr", mr, "attr")["lkey"]
	m.mustWrite(fmt.Sprintf("wr_id=1 sge=%s:0:64\nwr_id=2 sge=%s:64:64\nwr_id=3 sge=%s:128:64\n", lkey, lkey, lkey), "srq", srq, "post_recv")
	st1, err := os.Stat(m.path("srq", srq, "ring"))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.write("modify max_wr=2", "srq", srq, "ctl"); errnoOf(err) != syscall.EINVAL {
		t.Fatalf("shrinking below the waiting WRs: %v", err)
	}
	if e := m.lastError("srq", srq, "ctl"); e == "" {
		t.Error("no reason in error")
	}
	for _, bad := range []string{"modify", "modify max_wr=0", "modify max_wr=x", "modify size=8", "resize max_wr=8", "modify max_wr=8 max_wr=9"} {
		if err := m.write(bad, "srq", srq, "ctl"); errnoOf(err) != syscall.EINVAL {
			t.Errorf("%q: %v", bad, err)
		}
	}
	if a := m.attrs("srq", srq, "attr"); a["max_wr"] != "4" || a["pending"] != "3" {
		t.Fatalf("a failed modify changed the srq: %v", a)
	}
	m.mustWrite("modify max_wr=100 srq_limit=2", "srq", srq, "ctl")
	if a := m.attrs("srq", srq, "attr"); a["max_wr"] != "128" || a["pending"] != "3" || a["srq_limit"] != "2" {
		t.Fatalf("after the resize: %v", a)
	}
	st2, err := os.Stat(m.path("srq", srq, "ring"))
	if err != nil {
		t.Fatal(err)
	}
	if st2.Size() <= st1.Size() {
		t.Errorf("ring file %d bytes before the resize, %d after", st1.Size(), st2.Size())
	}
	reg := mapFile(t, m.path("srq", srq, "ring"))
	r, err := ring.Attach(reg.Bytes(), ring.KindSRQ)
	if err != nil || r.SlotCount() != 128 {
		t.Fatalf("mapping the resized ring: %v", err)
	}
	if p, c := r.LoadProducer(), r.LoadConsumer(); p-c != 3 {
		t.Fatalf("new ring: producer %d consumer %d, want 3 waiting", p, c)
	}
	var wr qp.RecvWR
	if err := ring.DecodeRecvWQE(r.Slot(r.LoadConsumer()+2), &wr); err != nil || wr.WRID != 3 || len(wr.SGL) != 1 || wr.SGL[0].Addr != 128 {
		t.Fatalf("third WQE on the new ring: %+v %v", wr, err)
	}
	m.mustWrite(fmt.Sprintf("wr_id=4 sge=%s:192:64", lkey), "srq", srq, "post_recv")
	if a := m.attrs("srq", srq, "attr"); a["pending"] != "4" {
		t.Fatalf("posting after the resize: %v", a)
	}
	if r.LoadProducer()-r.LoadConsumer() != 4 {
		t.Fatal("the mapping of the new ring does not see the post")
	}
	if err := m.write("modify srq_limit=200", "srq", srq, "ctl"); errnoOf(err) != syscall.EINVAL {
		t.Fatalf("srq_limit beyond max_wr: %v", err)
	}
}

// TestClockAndTimestampsFile: the device file's hca_core_clock, the clock
// file (a device clock that does not go back, a wall clock that is the
// host's), and a CQ made with wc_flags whose completions carry both.
func TestClockAndTimestampsFile(t *testing.T) {
	m := mount(t)
	if d := m.attrs("device"); d["hca_core_clock"] != "1000000" {
		t.Fatalf("hca_core_clock %q", d["hca_core_clock"])
	}
	num := func(a map[string]string, k string) uint64 {
		t.Helper()
		n, err := strconv.ParseUint(a[k], 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: %v", k, a[k], err)
		}
		return n
	}
	c1 := m.attrs("clock")
	before := time.Now()
	time.Sleep(2 * time.Millisecond)
	c2 := m.attrs("clock")
	after := time.Now()
	if r1, r2 := num(c1, "raw_clock"), num(c2, "raw_clock"); r2 < r1+uint64(time.Millisecond) {
		t.Fatalf("raw_clock %d then %d, 2 ms apart", r1, r2)
	}
	if w := int64(num(c2, "wallclock_ns")); w < before.UnixNano() || w > after.UnixNano() {
		t.Fatalf("wallclock_ns %d not in [%d, %d]", w, before.UnixNano(), after.UnixNano())
	}
	if _, err := m.tryCreate("cq", "cqe=4 wc_flags=completion_timestamp,flow_tag"); errnoOf(err) != syscall.EINVAL {
		t.Fatalf("unknown wc_flags: %v", err)
	}
	s := m.setup()
	cq := m.create("cq", "cqe=8 wc_flags=completion_timestamp,completion_timestamp_wallclock")
	if a := m.attrs("cq", cq, "attr"); a["wc_flags"] != "completion_timestamp,completion_timestamp_wallclock" {
		t.Fatalf("cq attr: %v", a)
	}
	q := m.create("qp", fmt.Sprintf("pd=%s qp_type=rc send_cq=%s recv_cq=%s max_send_wr=4 max_recv_wr=4", s.pd, cq, cq))
	m.mustWrite("modify qp_state=INIT pkey_index=0 port_num=1 qp_access_flags=0", "qp", q, "ctl")
	m.mustWrite("error", "qp", q, "ctl")
	m.mustWrite("wr_id=9", "qp", q, "post_recv") // flushed at once
	lo := num(m.attrs("clock"), "raw_clock")
	t0 := time.Now()
	m.mustWrite("opcode=send wr_id=10 send_flags=signaled", "qp", q, "post_send")
	wcs := m.pollUntil(cq, 2)
	t1 := time.Now()
	hi := num(m.attrs("clock"), "raw_clock")
	wc, err := qp.ParseWC(findWC(t, wcs, "10"))
	if err != nil {
		t.Fatal(err)
	}
	if wc.CompletionTS < lo || wc.CompletionTS > hi {
		t.Fatalf("completion_ts %d not in [%d, %d]", wc.CompletionTS, lo, hi)
	}
	if w := int64(wc.CompletionWallclockNS); w < t0.UnixNano()-int64(time.Millisecond) || w > t1.UnixNano()+int64(time.Millisecond) {
		t.Fatalf("completion_wallclock_ns %d not within [%d, %d]", w, t0.UnixNano(), t1.UnixNano())
	}
	// The setup's CQ has no timestamps.
	m.mustWrite("modify qp_state=INIT pkey_index=0 port_num=1 qp_access_flags=0", "qp", s.qa, "ctl")
	m.mustWrite("error", "qp", s.qa, "ctl")
	m.mustWrite("wr_id=11", "qp", s.qa, "post_recv")
	wc, err = qp.ParseWC(findWC(t, m.pollUntil(s.cq, 1), "11"))
	if err != nil || wc.CompletionTS != 0 || wc.CompletionWallclockNS != 0 {
		t.Fatalf("a CQ without wc_flags: %+v %v", wc, err)
	}
}
