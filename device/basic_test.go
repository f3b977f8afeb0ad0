package device

import (
	"fmt"
	"testing"

	"rdmafs/qp"
)

func TestRCSendAndWrite(t *testing.T) {
	e := newEnv(t)
	a, b, acq, bcq := e.pair(qp.TypeRC)
	src := e.mr(8192, qp.AccessLocalWrite)
	dst := e.mr(8192, qp.AccessLocalWrite|qp.AccessRemoteWrite)
	fill(src.Mem(), 3)

	e.postRecv(b, fmt.Sprintf("wr_id=9 sge=%d:0:4096", dst.LKey))
	e.postSend(a, fmt.Sprintf("opcode=send wr_id=1 send_flags=signaled sge=%d:0:3000", src.LKey))
	e.expect(acq, fmt.Sprintf("wr_id=1 status=success opcode=send qp_num=%d byte_len=3000", a.QPN))
	e.expect(bcq, fmt.Sprintf("wr_id=9 status=success opcode=recv qp_num=%d byte_len=3000 src_qp=%d", b.QPN, a.QPN))
	sameBytes(t, dst.Mem()[:3000], src.Mem()[:3000])

	fill(src.Mem(), 77)
	e.postSend(a, fmt.Sprintf("opcode=rdma_write wr_id=2 send_flags=signaled sge=%d:0:8192 remote_addr=0 rkey=%d", src.LKey, dst.RKey))
	e.expect(acq, fmt.Sprintf("wr_id=2 status=success opcode=rdma_write qp_num=%d byte_len=8192", a.QPN))
	e.expect(bcq)
	sameBytes(t, dst.Mem(), src.Mem())
	if got := a.Query().SQPSN; got != 500 {
		t.Fatalf("sq_psn attr changed: %d", got)
	}
	// 3000 B at MTU 1024 is 3 packets; 8192 B is 8: PSNs advance by 11.
	e.d.mu.Lock()
	psn, bpsn := a.req.psn, b.resp.psn
	e.d.mu.Unlock()
	if psn != 511 || bpsn != 511 {
		t.Fatalf("requester psn %d responder epsn %d, want 511", psn, bpsn)
	}
}
