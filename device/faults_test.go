package device

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"rdmafs/qp"
)

func TestParseFaults(t *testing.T) {
	for _, c := range []struct{ in, want, err string }{
		{"off", "off", ""},
		{"", "off", ""},
		{"drop=0.1", "drop=0.1 dup=0 delay=0 delay_us=1000 reorder=0 seed=0", ""},
		{"drop=0.01 dup=0.02 delay=0.03 delay_us=250 reorder=0.04 seed=7 qp=17",
			"drop=0.01 dup=0.02 delay=0.03 delay_us=250 reorder=0.04 seed=7 qp=17", ""},
		{"drop=1.5", "", "drop"},
		{"drop=-0.1", "", "drop"},
		{"drop=NaN", "", "drop"},
		{"drop=0.1 drop=0.2", "", "repeated"},
		{"bogus=1", "", "unknown key"},
		{"drop", "", "key=value"},
		{"delay_us=0 delay=0.1", "", "delay_us"},
		{"qp=0x1000000 drop=0.1", "", "qp"},
		{"seed=x drop=0.1", "", "seed"},
	} {
		f, err := ParseFaults(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) || Errno(err) != 22 {
				t.Errorf("%q: err %v, want EINVAL mentioning %q", c.in, err, c.err)
			}
			continue
		}
		if err != nil || f.String() != c.want {
			t.Errorf("%q: %q, %v; want %q", c.in, f.String(), err, c.want)
		}
		if g, err := ParseFaults(f.String()); err != nil || g != f {
			t.Errorf("%q does not round-trip: %+v %v", f.String(), g, err)
		}
	}
}

// Under drops, duplicates, delays and reordering, RC delivers every
// message exactly once, in order, with the right bytes; the fault counters
// and the transport's recovery counters show what happened.
func TestFaultsRCExactlyOnceInOrder(t *testing.T) {
	e := newEnv(t)
	// timeout=10: 4 ms of fake time per retransmit timeout.
	a, b, acq, bcq := e.pairX(qp.TypeRC, "timeout=10", "timeout=10")
	src := e.mr(1<<16, qp.AccessLocalWrite)
	dst := e.mr(1<<16, qp.AccessLocalWrite|qp.AccessRemoteWrite)
	fill(src.Mem(), 9)
	e.setFaults(Faults{Drop: 0.05, Dup: 0.05, Delay: 0.05, DelayFor: 300 * time.Microsecond, Reorder: 0.05, Seed: 1})
	const n = 60
	for i := 0; i < n; i++ {
		e.postRecv(b, fmt.Sprintf("wr_id=%d sge=%d:%d:1024", 1000+i, dst.LKey, i*1024))
	}
	for i := 0; i < n; i++ {
		e.postSend(a, fmt.Sprintf("opcode=send wr_id=%d send_flags=signaled sge=%d:%d:%d", i, src.LKey, i*1024, 100+i*13))
	}
	var got, gotRecv []string
	for round := 0; round < 2000 && (len(got) < n || len(gotRecv) < n); round++ {
		got = append(got, e.poll(acq)...)
		gotRecv = append(gotRecv, e.poll(bcq)...)
		e.clk.Advance(time.Millisecond)
	}
	if len(got) != n || len(gotRecv) != n {
		t.Fatalf("%d send and %d recv completions of %d", len(got), len(gotRecv), n)
	}
	for i := 0; i < n; i++ {
		if want := sendWC(uint64(i), "success", "send", a, 100+i*13); got[i] != want {
			t.Fatalf("send %d: %s, want %s", i, got[i], want)
		}
		if want := recvWC(uint64(1000+i), "success", "recv", b, 100+i*13, a, ""); gotRecv[i] != want {
			t.Fatalf("recv %d: %s, want %s", i, gotRecv[i], want)
		}
		sameBytes(t, dst.Mem()[i*1024:i*1024+100+i*13], src.Mem()[i*1024:i*1024+100+i*13])
	}
	c := &e.d.Counters
	if c.FaultDrops.Load() == 0 || c.FaultDups.Load() == 0 || c.FaultDelays.Load() == 0 || c.FaultReorders.Load() == 0 {
		t.Fatalf("faults not injected: %v", c.List())
	}
	if c.Retransmits.Load() == 0 || c.DuplicateReqs.Load() == 0 {
		t.Fatalf("no recovery seen: retransmits %d duplicates %d", c.Retransmits.Load(), c.DuplicateReqs.Load())
	}
	e.setFaults(Faults{})
	if e.d.Faults().Active() {
		t.Fatal("faults still on")
	}
}

// Scoped to one QP, the injector leaves other QPs alone.
func TestFaultsScopedToQP(t *testing.T) {
	e := newEnv(t)
	a, b, acq, bcq := e.pair(qp.TypeUC)
	c, d, ccq, dcq := e.pair(qp.TypeUC)
	buf := e.mr(4096, qp.AccessLocalWrite)
	e.setFaults(Faults{Drop: 1, QPN: b.QPN})
	e.postRecv(b, fmt.Sprintf("wr_id=1 sge=%d:0:64", buf.LKey))
	e.postRecv(d, fmt.Sprintf("wr_id=2 sge=%d:0:64", buf.LKey))
	e.postSend(a, fmt.Sprintf("opcode=send wr_id=3 send_flags=signaled sge=%d:0:8", buf.LKey))
	e.postSend(c, fmt.Sprintf("opcode=send wr_id=4 send_flags=signaled sge=%d:0:8", buf.LKey))
	e.expect(acq, sendWC(3, "success", "send", a, 8)) // UC: sent is done
	e.expect(bcq)                                     // ...and lost
	e.expect(ccq, sendWC(4, "success", "send", c, 8))
	e.expect(dcq, recvWC(2, "success", "recv", d, 8, c, ""))
}
