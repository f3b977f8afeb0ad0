package device

import (
	"context"
	"encoding/binary"
	"fmt"
	"strings"
	"testing"
	"time"

	"rdmafs/qp"
)

// The direct path (loopback.go) must be indistinguishable from the chain
// but for its speed: each scenario runs on a device of each kind and
// everything a program or a user can see is compared: completions, data,
// async events, the QPs' states and PSNs, and the counters that count
// what a link would have carried.

// transcript records what a scenario shows.
type transcript struct {
	e     *env
	lines []string
}

func (tr *transcript) logf(format string, args ...any) {
	tr.lines = append(tr.lines, fmt.Sprintf(format, args...))
}

// settle records the completions of cqs and the events so far.
func (tr *transcript) settle(cqs ...*CQ) {
	for _, cq := range cqs {
		for _, wc := range tr.e.poll(cq) {
			tr.logf("cq %d: %s", cq.Handle, wc)
		}
	}
	for _, ev := range tr.e.events() {
		tr.logf("event: %s", ev)
	}
}

// qps records the QPs' states and the transport's counters: with traffic,
// every packet and byte a link would have carried too. After an error or
// an RNR NAK a link carries the rest of the message, which the receiver
// drops (and may NAK as out of sequence); the direct path does not send
// it, so only the answers are compared there. ACKs are coalesced as each
// path's timing allows and are not compared.
func (tr *transcript) qps(traffic bool, qps ...*QP) {
	tr.e.quiesce()
	var acks uint64
	for i, q := range qps {
		a := q.Query()
		c := q.CountersSnapshot()
		tr.logf("qp %d: %v sq_psn=%d rq_psn=%d", i, a.QPState, a.SQPSN, a.RQPSN)
		tr.logf("qp %d: rnr naks %d/%d, nak inv %d/%d access %d/%d op %d/%d, retransmits %d, send wqes %d, recv wqes %d",
			i, c.RNRNaksSent, c.RNRNaksRecv, c.InvReqNaksSent, c.InvReqNaksRecv,
			c.RemAccessNaksSent, c.RemAccessNaksRecv, c.RemOpNaksSent, c.RemOpNaksRecv, c.Retransmits, c.SendWQEs, c.RecvWQEs)
		acks += c.AcksSent
		if traffic {
			tr.logf("qp %d: packets but ACKs sent %d recv %d, bytes sent %d recv %d, dropped %d",
				i, c.PacketsSent-c.AcksSent, c.PacketsRecv, c.BytesSent, c.BytesRecv, c.Dropped)
		}
	}
	dc := &tr.e.d.Counters
	tr.logf("device: completions %d, errors %d", dc.Completions.Load(), dc.ErrCompletions.Load())
	if traffic {
		tr.logf("device: packets but ACKs sent %d recv %d, bytes sent %d recv %d",
			dc.SentPackets()-acks, dc.RecvPackets()-acks, dc.SentBytes(), dc.RecvBytes())
	}
}

// sameOnBothPaths runs scenario on the direct path and on the chain and
// compares the transcripts, and checks that only the first took the direct
// path.
func sameOnBothPaths(t *testing.T, scenario func(tr *transcript)) {
	t.Helper()
	if *wireFlag {
		t.Skip("compares the two ways of one device to itself")
	}
	var got [2][]string
	var direct [2]uint64
	for i, packets := range []bool{false, true} {
		e := newEnvOn(t, false, func(c *Config) { c.PacketLoopback = packets })
		tr := &transcript{e: e}
		scenario(tr)
		got[i] = tr.lines
		direct[i] = e.d.Counters.DirectPackets.Load()
	}
	a, b := strings.Join(got[0], "\n"), strings.Join(got[1], "\n")
	if testing.Verbose() {
		t.Logf("transcript:\n%s", a)
	}
	if a != b {
		t.Fatalf("the direct path and the chain differ:\ndirect:\n%s\nchain:\n%s", a, b)
	}
	if direct[0] == 0 || direct[1] != 0 {
		t.Fatalf("direct_packets %d on the direct path, %d on the chain; want some and none", direct[0], direct[1])
	}
}

func TestDirectSameAsChainRC(t *testing.T) {
	sameOnBothPaths(t, func(tr *transcript) {
		e := tr.e
		a, b, acq, bcq := e.pair(qp.TypeRC) // path MTU 1024
		src := e.mr(1<<20, qp.AccessLocalWrite)
		dst := e.mr(1<<20, qp.AccessLocalWrite|qp.AccessRemoteWrite|qp.AccessRemoteRead|qp.AccessRemoteAtomic)
		fill(src.Mem(), 7)
		fill(dst.Mem()[512<<10:], 9)
		e.postRecv(b, fmt.Sprintf("wr_id=10 sge=%d:0:100000", dst.LKey),
			fmt.Sprintf("wr_id=11 sge=%d:100000:50 sge=%d:100100:9000", dst.LKey, dst.LKey),
			fmt.Sprintf("wr_id=12 sge=%d:200000:64", dst.LKey))
		e.postSend(a,
			// Many segments, in one SGE and across three.
			fmt.Sprintf("opcode=send wr_id=1 send_flags=signaled sge=%d:0:70001", src.LKey),
			fmt.Sprintf("opcode=send wr_id=2 send_flags=signaled sge=%d:0:10 sge=%d:5000:4000 sge=%d:20000:5000", src.LKey, src.LKey, src.LKey),
			fmt.Sprintf("opcode=rdma_write wr_id=3 send_flags=signaled sge=%d:0:300000 remote_addr=%d rkey=%d", src.LKey, 300000, dst.RKey),
			fmt.Sprintf("opcode=rdma_write_with_imm wr_id=4 send_flags=signaled imm_data=5 sge=%d:0:3000 remote_addr=%d rkey=%d", src.LKey, 700000, dst.RKey),
			fmt.Sprintf("opcode=rdma_read wr_id=5 send_flags=signaled sge=%d:600000:200000 remote_addr=%d rkey=%d", src.LKey, 512<<10, dst.RKey),
			fmt.Sprintf("opcode=atomic_fetch_and_add wr_id=6 send_flags=signaled sge=%d:900000:8 remote_addr=%d rkey=%d compare_add=3", src.LKey, 800000, dst.RKey),
			fmt.Sprintf("opcode=atomic_cmp_and_swp wr_id=7 send_flags=signaled sge=%d:900008:8 remote_addr=%d rkey=%d compare_add=3 swap=44", src.LKey, 800000, dst.RKey),
			fmt.Sprintf("opcode=rdma_write wr_id=8 sge=%d:0:0 remote_addr=0 rkey=%d", src.LKey, dst.RKey))
		tr.settle(acq, bcq)
		sameBytes(t, dst.Mem()[:70001], src.Mem()[:70001])
		sameBytes(t, dst.Mem()[300000:600000], src.Mem()[:300000])
		sameBytes(t, src.Mem()[600000:800000], dst.Mem()[512<<10:512<<10+200000])
		tr.logf("payload sums %d %d", sum(dst.Mem()), sum(src.Mem()))
		tr.qps(true, a, b)
	})
}

// WRITEs, SENDs, READs and atomics into an idle pair execute against the peer without packets
// (executeWriteLocked): one in RTR (comm_est), then in RTS of 1, 64 KiB
// (one MTU... many) and three SGEs, inline, zero bytes, a stream of them
// signaled every fourth, and the cases that must go as packets instead: a
// bad rkey (NAK, both QPs' errors), a WRITE past 64 KiB, WRITE_WITH_IMM;
// the same completions, data, PSNs, events and counters as on the chain.
func TestDirectSameAsChainWrites(t *testing.T) {
	sameOnBothPaths(t, func(tr *transcript) {
		e := tr.e
		acq, bcq := e.cq(256), e.cq(256)
		a := e.qp(qpOpts{typ: qp.TypeRC, scq: acq, rcq: acq})
		b := e.qp(qpOpts{typ: qp.TypeRC, scq: bcq, rcq: bcq})
		e.connect(a, b.QPN, "")
		e.modify(b, "qp_state=INIT pkey_index=0 port_num=1 qp_access_flags="+allAccess)
		e.modify(b, fmt.Sprintf("qp_state=RTR path_mtu=1024 rq_psn=500 max_dest_rd_atomic=4 min_rnr_timer=12 dest_qp_num=%d dgid=%s", a.QPN, GIDString(e.gidOf(a.QPN))))
		src := e.mr(1<<20, qp.AccessLocalWrite)
		dst := e.mr(1<<20, qp.AccessLocalWrite|qp.AccessRemoteWrite|qp.AccessRemoteRead)
		fill(src.Mem(), 3)
		// b in RTR: the first WRITE raises comm_est there.
		e.postSend(a, fmt.Sprintf("opcode=rdma_write wr_id=1 send_flags=signaled sge=%d:0:100 remote_addr=0 rkey=%d", src.LKey, dst.RKey))
		tr.settle(acq, bcq)
		e.modify(b, "qp_state=RTS sq_psn=500 timeout=14 retry_cnt=7 rnr_retry=7 max_rd_atomic=4")
		for i, sge := range []string{
			fmt.Sprintf("sge=%d:7:1", src.LKey),
			fmt.Sprintf("sge=%d:0:65536", src.LKey),
			fmt.Sprintf("sge=%d:10:3000 sge=%d:5000:1 sge=%d:9000:2048", src.LKey, src.LKey, src.LKey),
			fmt.Sprintf("sge=%d:0:0", src.LKey),
		} {
			e.postSend(a, fmt.Sprintf("opcode=rdma_write wr_id=%d send_flags=signaled %s remote_addr=%d rkey=%d", 10+i, sge, 100000*(i+1), dst.RKey))
			tr.settle(acq, bcq)
		}
		e.postSend(a, fmt.Sprintf("opcode=rdma_write wr_id=20 send_flags=signaled,inline inline_data=68656c6c6f remote_addr=600000 rkey=%d", dst.RKey))
		var stream []string
		for i := 0; i < 16; i++ {
			flags := ""
			if i%4 == 3 {
				flags = " send_flags=signaled"
			}
			stream = append(stream, fmt.Sprintf("opcode=rdma_write wr_id=%d%s sge=%d:%d:512 remote_addr=%d rkey=%d", 30+i, flags, src.LKey, i*512, 700000+i*512, dst.RKey))
		}
		e.postSend(a, stream...)
		tr.settle(acq, bcq)
		e.postRecv(b, fmt.Sprintf("wr_id=90 sge=%d:900000:64", dst.LKey))
		e.postSend(a,
			fmt.Sprintf("opcode=rdma_write wr_id=50 send_flags=signaled sge=%d:0:70000 remote_addr=800000 rkey=%d", src.LKey, dst.RKey),
			fmt.Sprintf("opcode=rdma_write_with_imm wr_id=51 send_flags=signaled imm_data=9 sge=%d:0:10 remote_addr=0 rkey=%d", src.LKey, dst.RKey))
		tr.settle(acq, bcq)
		// SENDs into posted receive WQEs, directly: across two SGEs,
		// with immediate data and no bytes, solicited.
		e.postRecv(b, fmt.Sprintf("wr_id=80 sge=%d:910000:50 sge=%d:911000:60", dst.LKey, dst.LKey),
			fmt.Sprintf("wr_id=81 sge=%d:912000:16", dst.LKey),
			fmt.Sprintf("wr_id=82 sge=%d:913000:8192", dst.LKey))
		e.postSend(a,
			fmt.Sprintf("opcode=send wr_id=83 send_flags=signaled sge=%d:20:100", src.LKey),
			"opcode=send_with_imm wr_id=84 send_flags=signaled imm_data=42",
			fmt.Sprintf("opcode=send wr_id=85 send_flags=signaled,solicited sge=%d:0:5000", src.LKey))
		tr.settle(acq, bcq)
		// WRITE_WITH_IMM into an idle pair takes the next receive WQE.
		e.postRecv(b, fmt.Sprintf("wr_id=79 sge=%d:0:1", dst.LKey))
		e.postSend(a, fmt.Sprintf("opcode=rdma_write_with_imm wr_id=78 send_flags=signaled imm_data=7 sge=%d:0:300 remote_addr=920000 rkey=%d", src.LKey, dst.RKey))
		tr.settle(acq, bcq)
		sameBytes(t, dst.Mem()[920000:920300], src.Mem()[:300])
		sameBytes(t, dst.Mem()[910000:910050], src.Mem()[20:70])
		sameBytes(t, dst.Mem()[911000:911050], src.Mem()[70:120])
		sameBytes(t, dst.Mem()[913000:918000], src.Mem()[:5000])
		// READs from the idle pair: 100 bytes, 64 KiB, into two SGEs,
		// none.
		rd := e.mr(1<<17, qp.AccessLocalWrite)
		e.postSend(a,
			fmt.Sprintf("opcode=rdma_read wr_id=86 send_flags=signaled sge=%d:0:100 remote_addr=200000 rkey=%d", rd.LKey, dst.RKey),
			fmt.Sprintf("opcode=rdma_read wr_id=87 send_flags=signaled sge=%d:1000:65536 remote_addr=200000 rkey=%d", rd.LKey, dst.RKey),
			fmt.Sprintf("opcode=rdma_read wr_id=88 send_flags=signaled sge=%d:70000:30 sge=%d:71000:70 remote_addr=200000 rkey=%d", rd.LKey, rd.LKey, dst.RKey),
			fmt.Sprintf("opcode=rdma_read wr_id=89 send_flags=signaled sge=%d:0:0 remote_addr=0 rkey=%d", rd.LKey, dst.RKey))
		tr.settle(acq, bcq)
		sameBytes(t, rd.Mem()[1000:1000+65536], dst.Mem()[200000:265536])
		sameBytes(t, rd.Mem()[71000:71070], dst.Mem()[200030:200100])
		// Atomics into the idle pair, directly too: a fetch_add, a
		// cmp_swap that swaps and one that does not, back to back.
		at := e.mr(4096, qp.AccessLocalWrite|qp.AccessRemoteAtomic)
		binary.LittleEndian.PutUint64(at.Mem()[0:], 1000)
		e.postSend(a,
			fmt.Sprintf("opcode=atomic_fetch_and_add wr_id=70 send_flags=signaled sge=%d:100:8 remote_addr=0 rkey=%d compare_add=5", at.LKey, at.RKey),
			fmt.Sprintf("opcode=atomic_cmp_and_swp wr_id=71 send_flags=signaled sge=%d:108:8 remote_addr=0 rkey=%d compare_add=1005 swap=77", at.LKey, at.RKey),
			fmt.Sprintf("opcode=atomic_cmp_and_swp wr_id=72 send_flags=signaled sge=%d:116:8 remote_addr=0 rkey=%d compare_add=1 swap=99", at.LKey, at.RKey))
		tr.settle(acq, bcq)
		tr.logf("atomics: word %d, results %d %d %d", binary.LittleEndian.Uint64(at.Mem()[0:]),
			binary.LittleEndian.Uint64(at.Mem()[100:]), binary.LittleEndian.Uint64(at.Mem()[108:]), binary.LittleEndian.Uint64(at.Mem()[116:]))
		sameBytes(t, dst.Mem()[200000:265536], src.Mem()[:65536])
		sameBytes(t, dst.Mem()[300000:303000], src.Mem()[10:3010])
		sameBytes(t, dst.Mem()[303001:305049], src.Mem()[9000:11048])
		sameBytes(t, dst.Mem()[700000:708192], src.Mem()[:8192])
		sameBytes(t, dst.Mem()[800000:870000], src.Mem()[:70000])
		tr.logf("payload sum %d", sum(dst.Mem()))
		tr.qps(true, a, b)
		// A bad rkey: the NAK and both errors, as packets.
		e.postSend(a, fmt.Sprintf("opcode=rdma_write wr_id=60 send_flags=signaled sge=%d:0:8 remote_addr=0 rkey=%d", src.LKey, dst.RKey^0x100))
		tr.settle(acq, bcq)
		tr.qps(true, a, b)
		// (A pair kept on two engines, -device.apart, takes the inboxes.)
		if !e.d.cfg.PacketLoopback && a.eng() == b.eng() && e.d.Counters.DirectOps.Load() < 31 {
			t.Fatalf("direct_ops %d: the WRITEs were not executed directly", e.d.Counters.DirectOps.Load())
		}
	})
}

// SENDs and a WRITE_WITH_IMM into an SRQ, directly between idle QPs: the
// SRQ's WQEs in order, its limit event when the count drops below the
// limit, and a SEND the
// next WQE is too short for, which goes as packets (the receiver's
// LOC_LEN_ERR, the sender's REM_INV_REQ_ERR).
func TestDirectSameAsChainSRQ(t *testing.T) {
	sameOnBothPaths(t, func(tr *transcript) {
		e := tr.e
		srq, err := e.d.CreateSRQ(0, qp.CreateSRQ{PD: e.pd.Handle, MaxWR: 16, MaxSGE: 2})
		if err != nil {
			t.Fatal(err)
		}
		acq, bcq := e.cq(64), e.cq(64)
		a := e.qp(qpOpts{typ: qp.TypeRC, scq: acq, rcq: acq})
		b := e.qp(qpOpts{typ: qp.TypeRC, scq: bcq, rcq: bcq, srq: srq})
		e.connect(a, b.QPN, "")
		e.connect(b, a.QPN, "")
		src, dst := e.mr(1<<16, 0), e.mr(1<<16, qp.AccessLocalWrite)
		fill(src.Mem(), 5)
		var wrs []qp.RecvWR
		for i := range 5 {
			n := uint32(1000)
			if i == 4 {
				n = 10
			}
			wrs = append(wrs, qp.RecvWR{WRID: uint64(100 + i), SGL: []qp.SGE{{Addr: uint64(i) * 2000, Length: n / 2, LKey: dst.LKey},
				{Addr: uint64(i)*2000 + 1000, Length: n - n/2, LKey: dst.LKey}}})
		}
		if _, err := srq.PostRecv(wrs); err != nil {
			t.Fatal(err)
		}
		if err := srq.Modify(3); err != nil {
			t.Fatal(err)
		}
		for i := range 4 {
			e.postSend(a, fmt.Sprintf("opcode=send wr_id=%d send_flags=signaled sge=%d:%d:%d", i, src.LKey, i*10, 100*(i+1)))
			tr.settle(acq, bcq)
		}
		sameBytes(t, dst.Mem()[6000:6400], src.Mem()[30:430]) // the fourth, in one SGE
		sameBytes(t, dst.Mem()[2000:2200], src.Mem()[10:210]) // the second
		// WRITE_WITH_IMM takes the SRQ's next WQE too (its length does
		// not matter: the bytes go to the rkey).
		wmr := e.mr(4096, qp.AccessLocalWrite|qp.AccessRemoteWrite)
		e.modify(b, "qp_access_flags=remote_write")
		e.postSend(a, fmt.Sprintf("opcode=rdma_write_with_imm wr_id=8 send_flags=signaled imm_data=77 sge=%d:0:600 remote_addr=0 rkey=%d", src.LKey, wmr.RKey))
		tr.settle(acq, bcq)
		sameBytes(t, wmr.Mem()[:600], src.Mem()[:600])
		e.postSend(a, fmt.Sprintf("opcode=send wr_id=9 send_flags=signaled sge=%d:0:20", src.LKey))
		tr.settle(acq, bcq)
		tr.qps(true, a, b)
		if !e.d.cfg.PacketLoopback && a.eng() == b.eng() && e.d.Counters.DirectOps.Load() < 5 {
			t.Fatalf("direct_ops %d: the SENDs into the SRQ were not executed directly", e.d.Counters.DirectOps.Load())
		}
	})
}

// SEND_WITH_INV between idle QPs executes directly when its invalidation
// would succeed: an MR of the receiver's PD and a type 2 window bound
// through the receiver, each unusable afterwards (a READ through it is a
// remote access error, as packets); a key the receiver may not invalidate
// goes as packets, which answer with the NAK and both QPs in ERR.
func TestDirectSameAsChainSendWithInv(t *testing.T) {
	sameOnBothPaths(t, func(tr *transcript) {
		e := tr.e
		a, b, acq, bcq := e.pair(qp.TypeRC)
		src, buf := e.mr(4096, 0), e.mr(4096, qp.AccessLocalWrite)
		victim := e.mr(4096, rwAccess)
		bindable := e.mr(4096, qp.AccessLocalWrite|qp.AccessMWBind)
		mw := e.mw(2)
		fill(src.Mem(), 4)
		e.postSend(b, fmt.Sprintf("opcode=bind_mw wr_id=1 send_flags=signaled rkey=5 mw=%d bind_lkey=%d bind_addr=0 bind_length=64 bind_access=remote_read", mw.Handle, bindable.LKey))
		tr.settle(acq, bcq)
		e.postRecv(b, fmt.Sprintf("wr_id=20 sge=%d:0:100", buf.LKey), fmt.Sprintf("wr_id=21 sge=%d:100:100", buf.LKey),
			fmt.Sprintf("wr_id=22 sge=%d:200:100", buf.LKey))
		e.postSend(a, fmt.Sprintf("opcode=send_with_inv wr_id=2 send_flags=signaled invalidate_rkey=%d sge=%d:0:40", victim.RKey, src.LKey))
		tr.settle(acq, bcq)
		e.postSend(a, fmt.Sprintf("opcode=send_with_inv wr_id=3 send_flags=signaled,solicited invalidate_rkey=%d", mw.Attr().RKey))
		tr.settle(acq, bcq)
		tr.logf("victim valid %v, window bound %v", victim.Valid(), mw.Attr().Bound)
		// Keys are random per device: named, so that both paths compare.
		for i, l := range tr.lines {
			l = strings.ReplaceAll(l, fmt.Sprint(victim.RKey), "VICTIM")
			tr.lines[i] = strings.ReplaceAll(l, fmt.Sprint(mw.Attr().RKey), "WINDOW")
		}
		sameBytes(t, buf.Mem()[:40], src.Mem()[:40])
		e.postSend(a, fmt.Sprintf("opcode=rdma_read wr_id=4 send_flags=signaled sge=%d:300:8 remote_addr=0 rkey=%d", buf.LKey, victim.RKey))
		tr.settle(acq, bcq)
		tr.qps(true, a, b)

		// A key of a type 1 window: no direct execution, the NAK.
		c, d, ccq, dcq := e.pair(qp.TypeRC)
		mw1 := e.mw(1)
		e.postRecv(d, fmt.Sprintf("wr_id=30 sge=%d:400:100", buf.LKey))
		e.postSend(c, fmt.Sprintf("opcode=send_with_inv wr_id=5 send_flags=signaled invalidate_rkey=%d sge=%d:0:8", mw1.RKey, src.LKey))
		tr.settle(ccq, dcq)
		tr.qps(true, c, d)
		// With several engines the invalidation needs all of Device.mu,
		// which a direct execution does not take: packets.
		if !e.d.cfg.PacketLoopback && len(e.d.engines) == 1 && e.d.Counters.DirectOps.Load() < 2 {
			t.Fatalf("direct_ops %d: the SEND_WITH_INVs were not executed directly", e.d.Counters.DirectOps.Load())
		}
	})
}

func TestDirectSameAsChainRNR(t *testing.T) {
	sameOnBothPaths(t, func(tr *transcript) {
		e := tr.e
		a, b, acq, bcq := e.pairX(qp.TypeRC, "rnr_retry=3", "min_rnr_timer=1")
		src, dst := e.mr(65536, 0), e.mr(65536, qp.AccessLocalWrite)
		e.postSend(a, fmt.Sprintf("opcode=send wr_id=1 send_flags=signaled sge=%d:0:20000", src.LKey))
		e.quiesce()
		e.clk.Advance(qp.RNRDelay(1))
		tr.settle(acq, bcq)
		e.postRecv(b, fmt.Sprintf("wr_id=9 sge=%d:0:65536", dst.LKey))
		e.quiesce()
		e.clk.Advance(qp.RNRDelay(1))
		tr.settle(acq, bcq)
		// Out of RNR retries: rnr_retry_exc_err, the requester in ERR.
		e.postSend(a, fmt.Sprintf("opcode=send wr_id=2 send_flags=signaled sge=%d:0:3000", src.LKey))
		for range 4 {
			e.quiesce()
			e.clk.Advance(qp.RNRDelay(1))
		}
		tr.settle(acq, bcq)
		tr.qps(false, a, b)
	})
}

func TestDirectSameAsChainErrors(t *testing.T) {
	for _, c := range []struct {
		name string
		post func(e *env, a *QP, src, dst *MR) string
	}{
		{"remote access", func(e *env, a *QP, src, dst *MR) string {
			return fmt.Sprintf("opcode=rdma_write wr_id=1 send_flags=signaled sge=%d:0:9000 remote_addr=0 rkey=%d", src.LKey, dst.RKey^0x100)
		}},
		{"beyond the MR", func(e *env, a *QP, src, dst *MR) string {
			return fmt.Sprintf("opcode=rdma_read wr_id=1 send_flags=signaled sge=%d:0:9000 remote_addr=60000 rkey=%d", src.LKey, dst.RKey)
		}},
		{"receive buffer too small", func(e *env, a *QP, src, dst *MR) string {
			return fmt.Sprintf("opcode=send wr_id=1 send_flags=signaled sge=%d:0:9000", src.LKey)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			sameOnBothPaths(t, func(tr *transcript) {
				e := tr.e
				a, b, acq, bcq := e.pair(qp.TypeRC)
				src := e.mr(65536, qp.AccessLocalWrite)
				dst := e.mr(65536, qp.AccessLocalWrite|qp.AccessRemoteWrite|qp.AccessRemoteRead)
				e.postRecv(b, fmt.Sprintf("wr_id=9 sge=%d:0:5000", dst.LKey))
				e.postSend(a, c.post(e, a, src, dst), fmt.Sprintf("opcode=send wr_id=2 sge=%d:0:10", src.LKey))
				tr.settle(acq, bcq)
				tr.qps(false, a, b)
			})
		})
	}
}

func TestDirectSameAsChainUD(t *testing.T) {
	sameOnBothPaths(t, func(tr *transcript) {
		e := tr.e
		a, b, acq, bcq, ah := e.udPair()
		src, dst := e.mr(8192, 0), e.mr(8192, qp.AccessLocalWrite)
		fill(src.Mem(), 3)
		e.postRecv(b, fmt.Sprintf("wr_id=9 sge=%d:0:2000", dst.LKey), fmt.Sprintf("wr_id=10 sge=%d:2000:2000", dst.LKey))
		e.postSend(a,
			fmt.Sprintf("opcode=send_with_imm wr_id=1 send_flags=signaled imm_data=66 sge=%d:0:1000 ah=%d remote_qpn=%d remote_qkey=0x11111111", src.LKey, ah.Handle, b.QPN),
			fmt.Sprintf("opcode=send wr_id=2 send_flags=signaled sge=%d:0:100 ah=%d remote_qpn=%d remote_qkey=0x22", src.LKey, ah.Handle, b.QPN),
			fmt.Sprintf("opcode=send wr_id=3 send_flags=signaled sge=%d:0:1960 ah=%d remote_qpn=%d remote_qkey=0x11111111", src.LKey, ah.Handle, b.QPN))
		tr.settle(acq, bcq)
		// The GRHs but their GIDs (each device has its own), and the data.
		tr.logf("grh %x %x, data %d %d", dst.Mem()[:8], dst.Mem()[2000:2008], sum(dst.Mem()[40:2000]), sum(dst.Mem()[2040:4000]))
		gid := e.d.Port().GID
		for _, off := range []int{0, 2000} {
			if [16]byte(dst.Mem()[off+8:off+24]) != gid || [16]byte(dst.Mem()[off+24:off+40]) != gid {
				t.Errorf("grh at %d: GIDs %x, want the device's %x twice", off, dst.Mem()[off+8:off+40], gid)
			}
		}
		tr.qps(true, a, b)
	})
}

// UC between idle QPs executes directly too (executeUCLocked): SENDs with
// and without immediate data, across SGEs and inline, WRITEs and
// WRITE_WITH_IMM; what UC drops goes as packets and is dropped the same
// way: a SEND without a receive WQE, one its WQE is too short for (the WQE
// then serves the next message, as packets), a WRITE with a bad rkey, each
// a success for the requester.
func TestDirectSameAsChainUC(t *testing.T) {
	sameOnBothPaths(t, func(tr *transcript) {
		e := tr.e
		a, b, acq, bcq := e.pair(qp.TypeUC)
		src, dst := e.mr(1<<17, 0), e.mr(1<<17, qp.AccessLocalWrite|qp.AccessRemoteWrite)
		fill(src.Mem(), 5)
		e.postRecv(b, fmt.Sprintf("wr_id=9 sge=%d:0:10000", dst.LKey))
		e.postSend(a, fmt.Sprintf("opcode=send wr_id=1 send_flags=signaled sge=%d:0:9000", src.LKey),
			fmt.Sprintf("opcode=rdma_write wr_id=2 send_flags=signaled sge=%d:0:20000 remote_addr=20000 rkey=%d", src.LKey, dst.RKey))
		tr.settle(acq, bcq)
		e.postRecv(b, fmt.Sprintf("wr_id=10 sge=%d:50000:100 sge=%d:51000:3000", dst.LKey, dst.LKey),
			fmt.Sprintf("wr_id=11 sge=%d:60000:16", dst.LKey), fmt.Sprintf("wr_id=12 sge=%d:61000:8", dst.LKey))
		e.postSend(a, fmt.Sprintf("opcode=send_with_imm wr_id=3 send_flags=signaled,solicited imm_data=6 sge=%d:1:50 sge=%d:900:2000", src.LKey, src.LKey),
			"opcode=send wr_id=4 send_flags=signaled,inline inline_data=0102030405",
			fmt.Sprintf("opcode=rdma_write_with_imm wr_id=5 send_flags=signaled imm_data=8 sge=%d:0:65536 remote_addr=65536 rkey=%d", src.LKey, dst.RKey),
			fmt.Sprintf("opcode=rdma_write wr_id=6 send_flags=signaled sge=%d:0:0 remote_addr=0 rkey=%d", src.LKey, dst.RKey))
		tr.settle(acq, bcq)
		sameBytes(t, dst.Mem()[50000:50050], src.Mem()[1:51])
		sameBytes(t, dst.Mem()[50050:50100], src.Mem()[900:950])
		sameBytes(t, dst.Mem()[51000:52950], src.Mem()[950:2900])
		sameBytes(t, dst.Mem()[65536:131072], src.Mem()[:65536])
		// Dropped: no receive WQE; a bad rkey; a WQE too short, which the
		// next SEND then takes.
		e.postSend(a, fmt.Sprintf("opcode=send wr_id=7 send_flags=signaled sge=%d:0:100", src.LKey),
			fmt.Sprintf("opcode=rdma_write wr_id=8 send_flags=signaled sge=%d:0:100 remote_addr=0 rkey=%d", src.LKey, dst.RKey^0x100))
		tr.settle(acq, bcq)
		e.postRecv(b, fmt.Sprintf("wr_id=13 sge=%d:70000:10", dst.LKey))
		e.postSend(a, fmt.Sprintf("opcode=send wr_id=20 send_flags=signaled sge=%d:0:100", src.LKey),
			fmt.Sprintf("opcode=send wr_id=21 send_flags=signaled sge=%d:0:10", src.LKey),
			fmt.Sprintf("opcode=send wr_id=22 send_flags=signaled sge=%d:0:10", src.LKey))
		tr.settle(acq, bcq)
		tr.logf("sum %d", sum(dst.Mem()))
		tr.qps(true, a, b)
		if !e.d.cfg.PacketLoopback && a.eng() == b.eng() && e.d.Counters.DirectOps.Load() < 6 {
			t.Fatalf("direct_ops %d: the UC operations were not executed directly", e.d.Counters.DirectOps.Load())
		}
	})
}

func sum(b []byte) uint64 {
	var s uint64
	for i, c := range b {
		s += uint64(c) * uint64(i%251+1)
	}
	return s
}

// A capture or a fault rule that applies to a QP puts its packets back on
// the chain, at the path MTU; a rule for another QP leaves them direct.
func TestDirectPathGivesWay(t *testing.T) {
	if *wireFlag || *packetsFlag {
		t.Skip("about the direct path of one device")
	}
	e := newEnv(t)
	a, b, acq, bcq := e.pair(qp.TypeRC)
	src, dst := e.mr(65536, 0), e.mr(65536, qp.AccessLocalWrite|qp.AccessRemoteWrite)
	write := func(id int) {
		t.Helper()
		e.postSend(a, fmt.Sprintf("opcode=rdma_write wr_id=%d send_flags=signaled sge=%d:0:10000 remote_addr=0 rkey=%d", id, src.LKey, dst.RKey))
		e.expect(acq, sendWC(uint64(id), "success", "rdma_write", a, 10000))
	}
	direct := func() uint64 { e.quiesce(); return e.d.Counters.DirectPackets.Load() }
	write(1)
	if n := direct(); n != 11 {
		t.Fatalf("direct_packets %d after a 10-segment WRITE, want 11 (and the ACK)", n)
	}
	c := e.d.OpenCapture()
	write(2)
	if n := direct(); n != 11 {
		t.Fatalf("direct_packets %d with a capture open, want still 11", n)
	}
	// The capture saw every packet, none longer than the path MTU and its
	// headers: the records of a pcap stream after its 24-byte header.
	var pcap []byte
	records := func() (n, longest int) {
		for off := 24; off+16 <= len(pcap); {
			l := int(binary.LittleEndian.Uint32(pcap[off+8:]))
			if off+16+l > len(pcap) {
				break
			}
			n, longest = n+1, max(longest, l)
			off += 16 + l
		}
		return
	}
	for n, _ := records(); n < 11; n, _ = records() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		b, err := c.Next(ctx)
		cancel()
		if err != nil {
			t.Fatalf("capture: %v after %d packets", err, n)
		}
		pcap = append(pcap, b...)
	}
	if n, longest := records(); n != 11 || longest > 1024+100 {
		t.Fatalf("capture: %d packets, the longest %d bytes; want 11, at most the MTU and headers", n, longest)
	}
	c.Close()
	e.setFaults(Faults{Drop: 1, QPN: 0xFFFFFF}) // another QP's rule
	write(3)
	if n := direct(); n != 22 {
		t.Fatalf("direct_packets %d with a rule for another QP, want 22", n)
	}
	e.setFaults(Faults{Dup: 1, QPN: b.QPN})
	write(4)
	if n := direct(); n != 22 {
		t.Fatalf("direct_packets %d with a rule for the QP, want still 22", n)
	}
	if n := e.d.Counters.FaultDups.Load(); n < 11 {
		t.Fatalf("fault_dups %d, want at least 11 (10 segments and the ACK)", n)
	}
	e.setFaults(Faults{})
	e.expect(bcq)
	e.healthy(a, b)
}

// Capture and fault rules come and go while large messages are in flight:
// packets switch between the direct path (64 KiB segments) and the chain
// (MTU packets, lost, duplicated, delayed, reordered) in the middle of
// messages and of retries, and RC still delivers every message once, in
// order, with the right bytes.
func TestDirectPathSwitchesMidStream(t *testing.T) {
	if *wireFlag || *packetsFlag {
		t.Skip("about the direct path of one device")
	}
	e := newEnv(t)
	a, b, acq, bcq := e.pairX(qp.TypeRC, "timeout=10", "timeout=10")
	const n, size = 60, 70000 // more than one 64 KiB segment each
	src := e.mr(n*size, qp.AccessLocalWrite)
	dst := e.mr(n*size, qp.AccessLocalWrite|qp.AccessRemoteWrite|qp.AccessRemoteRead)
	fill(src.Mem(), 21)
	fill(dst.Mem(), 33)
	var want, wantRecv, got, gotRecv []string
	// post sends message i: a SEND, a WRITE or a READ of its own bytes.
	post := func(i int) {
		off := i * size
		switch i % 3 {
		case 0:
			e.postRecv(b, fmt.Sprintf("wr_id=%d sge=%d:%d:%d", 1000+i, dst.LKey, off, size))
			wantRecv = append(wantRecv, recvWC(uint64(1000+i), "success", "recv", b, size, a, ""))
			e.postSend(a, fmt.Sprintf("opcode=send wr_id=%d send_flags=signaled sge=%d:%d:%d", i, src.LKey, off, size))
			want = append(want, sendWC(uint64(i), "success", "send", a, size))
		case 1:
			e.postSend(a, fmt.Sprintf("opcode=rdma_write wr_id=%d send_flags=signaled sge=%d:%d:%d remote_addr=%d rkey=%d", i, src.LKey, off, size, off, dst.RKey))
			want = append(want, sendWC(uint64(i), "success", "rdma_write", a, size))
		default:
			e.postSend(a, fmt.Sprintf("opcode=rdma_read wr_id=%d send_flags=signaled sge=%d:%d:%d remote_addr=%d rkey=%d", i, src.LKey, off, size, off, dst.RKey))
			want = append(want, sendWC(uint64(i), "success", "rdma_read", a, size))
		}
	}
	var c *CaptureReader
	next := 0
	for round := 0; round < 4000 && (len(got) < n || len(gotRecv) < n/3); round++ {
		// Two messages a round, each started under the settings of its
		// round and finished under the next ones.
		for k := 0; k < 2 && next < n; k++ {
			post(next)
			next++
		}
		switch round % 6 {
		case 1:
			c = e.d.OpenCapture()
		case 2:
			e.setFaults(Faults{Drop: 0.03, Dup: 0.05, Delay: 0.05, DelayFor: 300 * time.Microsecond, Reorder: 0.05, Seed: uint64(round)})
		case 3:
			c.Close()
		case 5:
			e.setFaults(Faults{})
		}
		got = append(got, e.poll(acq)...)
		gotRecv = append(gotRecv, e.poll(bcq)...)
		e.clk.Advance(time.Millisecond)
	}
	if c != nil {
		c.Close()
	}
	e.setFaults(Faults{})
	if strings.Join(got, "\n") != strings.Join(want, "\n") || strings.Join(gotRecv, "\n") != strings.Join(wantRecv, "\n") {
		t.Fatalf("completions: got %d of %d, recv %d of %d; the last: %v\n%s%s%v",
			len(got), len(want), len(gotRecv), len(wantRecv), got[max(len(got)-1, 0):], a.debugState(), b.debugState(), []any{a.CountersSnapshot(), b.CountersSnapshot(), e.poll(bcq)})
	}
	for i := 0; i < n; i++ {
		off := i * size
		if i%3 == 2 {
			sameBytes(t, src.Mem()[off:off+size], dst.Mem()[off:off+size])
		} else {
			sameBytes(t, dst.Mem()[off:off+size], src.Mem()[off:off+size])
		}
	}
	dc := &e.d.Counters
	if dc.DirectPackets.Load() == 0 || dc.FaultDrops.Load() == 0 || dc.FaultDups.Load() == 0 || dc.Retransmits.Load() == 0 {
		t.Fatalf("not both paths: direct %d, fault drops %d dups %d, retransmits %d",
			dc.DirectPackets.Load(), dc.FaultDrops.Load(), dc.FaultDups.Load(), dc.Retransmits.Load())
	}
	e.healthy(a, b)
}
