package device

import (
	"fmt"
	"testing"

	"rdmafs/qp"
	"rdmafs/roce"
)

// setOwner gives QPs to uid, as if uid had created them (the harness makes
// every object as root).
func setOwner(d *Device, uid Owner, qps ...*QP) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, q := range qps {
		q.Owner = uid
	}
}

// A capture opened as a uid holds only the packets of that uid's QPs,
// sent or received; root's holds every packet.
func TestCaptureAsOwnerLoopback(t *testing.T) {
	if *wireFlag {
		t.Skip("the packets of a split pair cross two devices' captures")
	}
	e := newEnv(t)
	a, b, acq, bcq := e.pair(qp.TypeRC)
	c, d, ccq, dcq := e.pair(qp.TypeRC)
	setOwner(e.d, 7, c, d)
	all, mine, none := e.d.OpenCapture(), e.d.OpenCaptureAs(7), e.d.OpenCaptureAs(9)
	defer all.Close()
	defer mine.Close()
	defer none.Close()
	for _, x := range [][4]any{{a, b, acq, bcq}, {c, d, ccq, dcq}} {
		s, r := x[0].(*QP), x[1].(*QP)
		e.postRecv(r, "wr_id=5")
		e.postSend(s, "opcode=send wr_id=6 send_flags=signaled")
		e.expect(x[2].(*CQ), sendWC(6, "success", "send", s, 0))
		e.expect(x[3].(*CQ), recvWC(5, "success", "recv", r, 0, s, ""))
	}
	if ops := captureOpcodes(t, readCapture(t, all), roce.CheckIPv6); ops[roce.OpSendOnly] != 2 || ops[roce.OpAcknowledge] != 2 || len(ops) != 2 {
		t.Errorf("root's capture: %v, want 2 sends and 2 ACKs", ops)
	}
	if ops := captureOpcodes(t, readCapture(t, mine), roce.CheckIPv6); ops[roce.OpSendOnly] != 1 || ops[roce.OpAcknowledge] != 1 || len(ops) != 2 {
		t.Errorf("uid 7's capture: %v, want its send and its ACK", ops)
	}
	if b := readCapture(t, none); len(b) != 24 {
		t.Errorf("uid 9 owns nothing but captured %d bytes", len(b))
	}
}

// On the wire a packet's remote QPN names a QP of the other device: a
// local QP with the same number does not make its owner see the packet.
func TestCaptureAsOwnerWire(t *testing.T) {
	ea, eb := newWirePair(t)
	envs := []*env{ea, eb}
	eb.qp(qpOpts{scq: eb.cq(4), rcq: eb.cq(4)}) // shifts eb's QPNs by one
	ra, rb, racq, rbcq := wireQPs(ea, eb, qp.TypeRC, "path_mtu=1024", "path_mtu=1024")
	ua, ub, uacq, _ := wireQPs(ea, eb, qp.TypeRC, "path_mtu=1024", "path_mtu=1024")
	if ua.QPN != rb.QPN {
		t.Fatalf("want uid 7's QP on a to share the number of root's peer on b: %d, %d", ua.QPN, rb.QPN)
	}
	setOwner(ea.d, 7, ua)
	setOwner(eb.d, 7, ub)
	all, mine := ea.d.OpenCapture(), ea.d.OpenCaptureAs(7)
	defer all.Close()
	defer mine.Close()
	src, dst := ea.mr(4096, qp.AccessLocalWrite), eb.mr(4096, rwAccess)
	eb.postRecv(rb, fmt.Sprintf("wr_id=9 sge=%d:0:4096", dst.LKey))
	ea.postSend(ra, fmt.Sprintf("opcode=send wr_id=1 send_flags=signaled sge=%d:0:100", src.LKey))
	wexpect(t, racq, envs, sendWC(1, "success", "send", ra, 100))
	wexpect(t, rbcq, envs, recvWC(9, "success", "recv", rb, 100, ra, ""))
	ea.postSend(ua, fmt.Sprintf("opcode=rdma_write wr_id=2 send_flags=signaled sge=%d:0:100 remote_addr=0 rkey=%d", src.LKey, dst.RKey))
	wexpect(t, uacq, envs, sendWC(2, "success", "rdma_write", ua, 100))
	if ops := captureOpcodes(t, readCapture(t, all), roce.CheckIPv4); ops[roce.OpSendOnly] != 1 || ops[roce.OpWriteOnly] != 1 || ops[roce.OpAcknowledge] != 2 || len(ops) != 3 {
		t.Errorf("root's capture: %v, want a send, a write and two ACKs", ops)
	}
	if ops := captureOpcodes(t, readCapture(t, mine), roce.CheckIPv4); ops[roce.OpWriteOnly] != 1 || ops[roce.OpAcknowledge] != 1 || len(ops) != 2 {
		t.Errorf("uid 7's capture: %v, want its write and its ACK", ops)
	}
}
