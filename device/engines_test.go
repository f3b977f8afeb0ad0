package device

import (
	"fmt"
	"sync"
	"testing"
	"time"
	"unsafe"

	"rdmafs/clock"
	"rdmafs/qp"
)

// Several engines under churn: pairs stream WRITE+SEND on QPs that stay on
// different engines (their packets go through the inboxes), while another
// goroutine keeps making pairs that share one CQ and one SRQ across
// engines, runs LOCAL_INV (a turn under all of Device.mu) and a WRITE on
// them, and destroys them and their MR with the work in flight. Every
// streamed WR completes exactly once with its bytes; the churn's objects
// go away without a lost lock or a use after destroy (under -race, CI).
func TestEnginesLifecycle(t *testing.T) {
	// With -device.wire the pairs' packets go through the wire, whose
	// receive goroutine hands them to the engines.
	e := newEnvOn(t, *wireFlag, func(c *Config) { c.Clock = clock.Real{}; c.Engines = 4 })
	e.apart = true
	const pairs, rounds, churn = 3, 150, 60
	type job struct {
		a, b     *QP
		acq, bcq *CQ
		src, dst *MR
	}
	var jobs []job
	for p := 0; p < pairs; p++ {
		a, b, acq, bcq := e.pair(qp.TypeRC)
		if a.eng() == b.eng() {
			t.Fatalf("pair %d on one engine in apart mode", p)
		}
		src := e.mr(1<<16, 0)
		dst := e.mr(1<<16, qp.AccessLocalWrite|qp.AccessRemoteWrite)
		fill(src.Mem(), byte(p))
		jobs = append(jobs, job{a, b, acq, bcq, src, dst})
	}
	shared := e.cq(4096)
	srq, err := e.d.CreateSRQ(0, qp.CreateSRQ{PD: e.pd.Handle, MaxWR: 256, MaxSGE: 1})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, pairs+1)
	for _, j := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- drivePair(j.a, j.b, j.acq, j.bcq, j.src, j.dst, rounds)
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		errs <- churnEngines(e, shared, srq, churn)
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	e.quiesce()
	c := &e.d.Counters
	// On the wire a pair's packets come back through the receive
	// goroutine, which holds all of Device.mu: no inbox.
	handed := c.CrossEnginePackets.Load()
	if e.wire {
		handed = c.WirePacketsRecv.Load()
	}
	if handed == 0 || c.ExclusiveRuns.Load() == 0 {
		t.Fatalf("cross_engine_packets=%d wire_packets_recv=%d engine_exclusive_runs=%d: the inboxes (the wire) or the exclusive turns were not used",
			c.CrossEnginePackets.Load(), c.WirePacketsRecv.Load(), c.ExclusiveRuns.Load())
	}
	// The streams were pairs apart: each still is. A pair made after
	// apart mode ends is moved to one engine at RTR.
	for p, j := range jobs {
		if j.a.eng() == j.b.eng() {
			t.Fatalf("pair %d ended on one engine in apart mode", p)
		}
	}
	e.apart = false
	moves := c.EngineMoves.Load()
	a, b, _, _ := e.pair(qp.TypeRC)
	if a.eng() != b.eng() || c.EngineMoves.Load() == moves {
		t.Fatalf("a pair made with colocation is on engines %d and %d (moves %d, %d before)", a.eng().idx, b.eng().idx, c.EngineMoves.Load(), moves)
	}
}

// churnEngines makes n RC pairs on the shared CQ (both sides) and SRQ (the
// receiving side), each in turn: a LOCAL_INV of a fresh MR, a WRITE and a
// SEND in flight, then the QPs, the MR and the memory destroyed at once.
func churnEngines(e *env, shared *CQ, srq *SRQ, n int) error {
	d := e.d
	mk := func(withSRQ bool) (*QP, error) {
		req := qp.CreateQP{PD: e.pd.Handle, Type: qp.TypeRC, SendCQ: shared.Handle, RecvCQ: shared.Handle,
			Cap: qp.Cap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}}
		if withSRQ {
			req.SRQ = srq.Handle
		}
		return d.CreateQP(0, req)
	}
	connect := func(q *QP, dest uint32) error {
		gid := GIDString(e.gidOf(dest))
		for _, line := range []string{
			"qp_state=INIT pkey_index=0 port_num=1 qp_access_flags=" + allAccess,
			fmt.Sprintf("qp_state=RTR path_mtu=1024 rq_psn=500 max_dest_rd_atomic=4 min_rnr_timer=12 dest_qp_num=%d dgid=%s", dest, gid),
			"qp_state=RTS sq_psn=500 timeout=14 retry_cnt=7 rnr_retry=7 max_rd_atomic=4",
		} {
			a, m, err := qp.ParseModify(line)
			if err != nil {
				return err
			}
			if err := e.modifyQP(q, &a, m); err != nil {
				return fmt.Errorf("qp %d %q: %v", q.QPN, line, err)
			}
		}
		return nil
	}
	for i := 0; i < n; i++ {
		a, err := mk(false)
		if err != nil {
			return err
		}
		b, err := mk(true)
		if err != nil {
			return err
		}
		if err := connect(a, b.QPN); err != nil {
			return err
		}
		if err := connect(b, a.QPN); err != nil {
			return err
		}
		mr, err := d.RegMR(0, qp.CreateMR{PD: e.pd.Handle, Length: 1 << 16,
			Access: qp.AccessLocalWrite | qp.AccessRemoteWrite})
		if err != nil {
			return err
		}
		inv, err := d.RegMR(0, qp.CreateMR{PD: e.pd.Handle, Length: 4096, Access: qp.AccessLocalWrite})
		if err != nil {
			return err
		}
		if _, err := srq.PostRecv([]qp.RecvWR{{WRID: uint64(i), SGL: []qp.SGE{{Length: 4096, LKey: mr.LKey}}}}); err != nil {
			return err
		}
		if _, err := a.PostSend([]qp.SendWR{
			{WRID: 1, Opcode: qp.WRLocalInv, SendFlags: qp.SendSignaled, InvalidateRKey: inv.LKey},
			{WRID: 2, Opcode: qp.WRRDMAWrite, SGL: []qp.SGE{{Length: 30000, LKey: mr.LKey}}, RemoteAddr: 8192, RKey: mr.RKey},
			{WRID: 3, Opcode: qp.WRSend, SendFlags: qp.SendSignaled, SGL: []qp.SGE{{Length: 3000, LKey: mr.LKey}}},
		}); err != nil {
			return err
		}
		if i%2 == 0 {
			time.Sleep(50 * time.Microsecond) // sometimes some of it done
		}
		for _, q := range []*QP{a, b} {
			if err := q.Destroy(); err != nil {
				return fmt.Errorf("destroy qp %d: %v", q.QPN, err)
			}
		}
		for _, m := range []*MR{mr, inv} {
			if err := m.Dereg(); err != nil {
				return fmt.Errorf("dereg: %v", err)
			}
		}
		if _, err := shared.Poll(64); err != nil {
			return err
		}
	}
	return nil
}

// A sharded counter is the sum of its engines' shares and of what came
// without a share; each share has a cache line of its own.
func TestShardedCounter(t *testing.T) {
	var c Counters
	c.Completions.Add(0, 5) // before the shards: the common word
	c.shard(3)
	c.Completions.Add(0, 1)
	c.Completions.Add(2, 10)
	c.Completions.Add(7, 100) // no such engine: the common word
	if got := c.Completions.Load(); got != 116 {
		t.Fatalf("Load %d, want 116", got)
	}
	if sz := unsafe.Sizeof(paddedCounter{}); sz != 64 {
		t.Fatalf("a share takes %d bytes, not one cache line", sz)
	}
	for _, x := range c.List() {
		if x.Name == "completions" && x.Value != 116 {
			t.Fatalf("counters list: completions=%d", x.Value)
		}
	}
}
