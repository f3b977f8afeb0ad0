package device

import (
	"bytes"
	"testing"

	"rdmafs/qp"
)

// A QP whose sends alternate between inline data and SGEs, past the wrap
// of its SQ ring: the engine decodes each WQE into the WR its slot held
// before, so a send with SGEs finds the emptied buffer of an inline one
// there, which is no inline data (UCX's rc_verbs posts exactly this mix:
// inline short messages between bcopy sends; each SGE send in a slot
// that had held an inline one failed with LOC_QP_OP_ERR).
func TestInlineThenSGEInOneSlot(t *testing.T) {
	e := newEnv(t)
	cq := e.cq(64)
	a := e.qp(qpOpts{scq: cq, rcq: cq, cap: qp.Cap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 64}})
	b := e.qp(qpOpts{scq: cq, rcq: cq})
	e.connect(a, b.QPN, "")
	e.connect(b, a.QPN, "")
	src := e.mr(64, qp.AccessLocalWrite)
	dst := e.mr(64, qp.AccessLocalWrite|qp.AccessRemoteWrite)
	copy(src.Mem(), "sge-bytes")

	for i := uint64(1); i <= 16; i++ {
		wr := qp.SendWR{WRID: i, Opcode: qp.WRRDMAWrite, SendFlags: qp.SendSignaled, RKey: dst.RKey}
		want := []byte("inline!!!")
		if i%3 == 0 { // period 3 on a ring of 4: every slot holds both kinds
			wr.SendFlags |= qp.SendInline
			wr.InlineData = want
		} else {
			wr.SGL = []qp.SGE{{Addr: 0, Length: 9, LKey: src.LKey}}
			want = []byte("sge-bytes")
		}
		if _, err := a.PostSend([]qp.SendWR{wr}); err != nil {
			t.Fatalf("post %d: %v", i, err)
		}
		e.expect(cq, sendWC(i, "success", "rdma_write", a, 9))
		if got := dst.Mem()[:9]; !bytes.Equal(got, want) {
			t.Fatalf("write %d left %q, want %q", i, got, want)
		}
	}
}
