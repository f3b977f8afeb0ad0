package device

import (
	"fmt"
	"strings"
	"testing"

	"rdmafs/qp"
)

// The tests of isolation between the users of one device (issue 13,
// RELIABILITY.md "Isolation between users").

// intruder is another user's QP on the env's first device, with its own
// PD, CQ and buffer, connected to victim as an attacker would connect it:
// dest_qp_num the victim's QPN, sq_psn the PSN the victim expects next
// (what its counters and attr let a reader work out).
type intruder struct {
	q   *QP
	cq  *CQ
	buf *MR
}

const intruderUID Owner = 65534

func (e *env) intruder(victim *QP) *intruder {
	e.t.Helper()
	d := e.d
	pd, err := d.AllocPD(intruderUID)
	if err != nil {
		e.t.Fatal(err)
	}
	cq, err := d.CreateCQ(intruderUID, qp.CreateCQ{CQE: 64})
	if err != nil {
		e.t.Fatal(err)
	}
	buf, err := d.RegMR(intruderUID, qp.CreateMR{PD: pd.Handle, Length: 8192, Access: rwAccess})
	if err != nil {
		e.t.Fatal(err)
	}
	q, err := d.CreateQP(intruderUID, qp.CreateQP{PD: pd.Handle, Type: victim.Type, SendCQ: cq.Handle, RecvCQ: cq.Handle,
		Cap: qp.Cap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		e.t.Fatal(err)
	}
	e.d.Quiesce()
	victim.dev.mu.Lock()
	psn := victim.resp.psn
	victim.dev.mu.Unlock()
	over := fmt.Sprintf("sq_psn=%d", psn)
	if victim.Type == qp.TypeRC {
		// Few and quick retries: the intruder is answered by nobody.
		over += " timeout=8 retry_cnt=1"
	}
	e.connectX(q, victim.QPN, over)
	return &intruder{q: q, cq: cq, buf: buf}
}

// A third QP, another user's, that names a connected QP's QPN with the PSN
// it expects and an rkey of its MR gets nowhere: the victim drops its
// packets before its transport sees them (no PSN advance, no NAK, no ERR),
// counts them, and its real peer's next WRITE lands. A READ by the
// intruder returns nothing either.
func TestForeignQPCannotReachConnectedQP(t *testing.T) {
	if *wireFlag || *twinFlag {
		t.Skip("across the wire the sender is known only by its UDP source port")
	}
	for _, typ := range []qp.Type{qp.TypeRC, qp.TypeUC} {
		t.Run(typ.String(), func(t *testing.T) {
			e := newEnv(t)
			a, b, acq, bcq := e.pair(typ)
			src := e.mr(8192, 0)
			dst := e.mr(8192, rwAccess)
			fill(src.Mem(), 3)
			fill(dst.Mem(), 99) // the victim's secret
			secret := append([]byte(nil), dst.Mem()...)
			x := e.intruder(b)
			before := e.qpCounters(b)
			fill(x.buf.Mem()[:4096], 200)

			e.postSend(x.q,
				fmt.Sprintf("opcode=rdma_write wr_id=1 send_flags=signaled sge=%d:0:64 remote_addr=0 rkey=%d", x.buf.LKey, dst.RKey),
				fmt.Sprintf("opcode=rdma_write wr_id=2 send_flags=signaled sge=%d:0:3000 remote_addr=1000 rkey=%d", x.buf.LKey, dst.RKey))
			if typ == qp.TypeRC {
				e.postSend(x.q, fmt.Sprintf("opcode=rdma_read wr_id=3 send_flags=signaled sge=%d:4096:4096 remote_addr=0 rkey=%d", x.buf.LKey, dst.RKey))
			}
			e.d.Quiesce()
			sameBytes(t, dst.Mem(), secret)
			after := e.qpCounters(b)
			if after.ForeignDropped == 0 || after.ForeignDropped-before.ForeignDropped != after.ForeignDropped {
				t.Fatalf("victim counted %d foreign packets (before %d)", after.ForeignDropped, before.ForeignDropped)
			}
			if after.PacketsRecv != before.PacketsRecv || after.PacketsSent != before.PacketsSent ||
				after.SeqErrors != before.SeqErrors || after.DuplicateReqs != before.DuplicateReqs {
				t.Fatalf("the intruder reached the victim's transport:\nbefore %+v\nafter  %+v", before, after)
			}
			if n := e.d.Counters.ForeignPacketsDropped.Load(); n < after.ForeignDropped {
				t.Fatalf("device foreign_packets_dropped %d < the victim's %d", n, after.ForeignDropped)
			}
			e.state(b, qp.StateRTS)
			if typ == qp.TypeRC {
				// Nobody answers the intruder: it retries and gives up, and
				// its READ brought back none of the victim's bytes.
				e.clk.Advance(qp.AckTimeout(8))
				e.d.Quiesce()
				e.clk.Advance(qp.AckTimeout(8))
				got := e.poll(x.cq)
				if len(got) == 0 || !strings.Contains(got[0], "status=retry_exc_err") {
					t.Fatalf("intruder completions %q", got)
				}
				for _, v := range x.buf.Mem()[4096:] {
					if v != 0 {
						t.Fatalf("the intruder's READ returned data")
					}
				}
			}

			// The real peer's next WRITE lands where it should.
			e.postSend(a, fmt.Sprintf("opcode=rdma_write wr_id=7 send_flags=signaled sge=%d:0:2000 remote_addr=500 rkey=%d", src.LKey, dst.RKey))
			e.expect(acq, sendWC(7, "success", "rdma_write", a, 2000))
			e.expect(bcq)
			sameBytes(t, dst.Mem()[500:2500], src.Mem()[:2000])
			sameBytes(t, dst.Mem()[:500], secret[:500])
			sameBytes(t, dst.Mem()[2500:], secret[2500:])
			e.healthy(a, b)
			e.d.Quiesce()
		})
	}
}

// A foreign QP cannot answer for the peer either: an ACK that the
// intruder's QP sends to a requester (here built as its responder would
// build it, with the PSN of the requester's outstanding WRITE) does not
// complete that WRITE; the peer's real ACK does.
func TestForeignQPCannotAnswerForPeer(t *testing.T) {
	if *wireFlag || *twinFlag {
		t.Skip("a loopback test: the packet is handed to loopback as the intruder's")
	}
	e := newEnv(t)
	a, b, acq, bcq := e.pair(qp.TypeRC)
	src, dst := e.mr(8192, 0), e.mr(8192, rwAccess)
	fill(src.Mem(), 5)
	// b's answers are held: a has a WRITE outstanding.
	l := e.link(func(p *packet) linkAction {
		if p.srcQPN == b.QPN {
			return hold
		}
		return deliver
	})
	e.postSend(a, fmt.Sprintf("opcode=rdma_write wr_id=1 send_flags=signaled sge=%d:0:100 remote_addr=0 rkey=%d", src.LKey, dst.RKey))
	x := e.intruder(a)
	e.d.Quiesce()
	d := x.q.dev
	d.mu.Lock()
	ack := d.pool.get()
	ack.opcode = transRC | opAcknowledge
	ack.psn = a.req.psn.Add(^uint32(0))
	ack.syndrome = 0x1F
	ack.sgid, ack.dgid = d.cfg.GID, a.attr.AH.DGID
	ack.srcQPN, ack.destQPN = x.q.QPN, a.QPN
	routeLink{d}.xmitLocked(ack)
	d.mu.Unlock()
	if got := e.poll(acq); len(got) != 0 {
		t.Fatalf("a completed %q on the intruder's word", got)
	}
	e.release(l, -1)
	e.link(nil)
	e.expect(acq, sendWC(1, "success", "rdma_write", a, 100))
	e.expect(bcq)
	sameBytes(t, dst.Mem()[:100], src.Mem()[:100])
	if e.qpCounters(a).ForeignDropped != 1 {
		t.Fatalf("a did not count the intruder's ACK")
	}
	e.healthy(a, b)
}
