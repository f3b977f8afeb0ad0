package device

import (
	"fmt"
	"testing"

	"rdmafs/qp"
)

func TestUCSendWriteWriteWithImm(t *testing.T) {
	e := newEnv(t)
	a, b, acq, bcq := e.pair(qp.TypeUC)
	src := e.mr(16384, 0)
	dst := e.mr(16384, qp.AccessLocalWrite|qp.AccessRemoteWrite)
	fill(src.Mem(), 31)
	e.postRecv(b, fmt.Sprintf("wr_id=9 sge=%d:0:8192", dst.LKey), fmt.Sprintf("wr_id=10 sge=%d:0:8", dst.LKey), fmt.Sprintf("wr_id=11 sge=%d:0:8", dst.LKey))
	e.postSend(a,
		fmt.Sprintf("opcode=send wr_id=1 send_flags=signaled sge=%d:0:5000", src.LKey),
		fmt.Sprintf("opcode=send_with_imm wr_id=2 send_flags=signaled imm_data=3 sge=%d:0:0", src.LKey))
	e.expect(acq, sendWC(1, "success", "send", a, 5000), sendWC(2, "success", "send", a, 0))
	e.expect(bcq, recvWC(9, "success", "recv", b, 5000, a, ""),
		fmt.Sprintf("wr_id=10 status=success opcode=recv qp_num=%d byte_len=0 imm_data=3 src_qp=%d wc_flags=with_imm", b.QPN, a.QPN))
	sameBytes(t, dst.Mem()[:5000], src.Mem()[:5000])

	fill(src.Mem(), 99)
	e.postSend(a,
		fmt.Sprintf("opcode=rdma_write wr_id=3 send_flags=signaled sge=%d:0:4000 remote_addr=8192 rkey=%d", src.LKey, dst.RKey),
		fmt.Sprintf("opcode=rdma_write_with_imm wr_id=4 send_flags=signaled imm_data=8 sge=%d:4000:2100 remote_addr=12192 rkey=%d", src.LKey, dst.RKey))
	e.expect(acq, sendWC(3, "success", "rdma_write", a, 4000), sendWC(4, "success", "rdma_write", a, 2100))
	e.expect(bcq, fmt.Sprintf("wr_id=11 status=success opcode=recv_rdma_with_imm qp_num=%d byte_len=2100 imm_data=8 src_qp=%d wc_flags=with_imm", b.QPN, a.QPN))
	sameBytes(t, dst.Mem()[8192:8192+6100], src.Mem()[:6100])
	e.healthy(a, b)
}

func TestUCReadAndAtomicRejectedAtPost(t *testing.T) {
	e := newEnv(t)
	a, _, acq, _ := e.pair(qp.TypeUC)
	mr := e.mr(64, rwAccess)
	for _, line := range []string{
		fmt.Sprintf("opcode=rdma_read sge=%d:0:8 remote_addr=0 rkey=%d", mr.LKey, mr.RKey),
		fmt.Sprintf("opcode=atomic_cmp_and_swp sge=%d:0:8 remote_addr=0 rkey=%d", mr.LKey, mr.RKey),
		fmt.Sprintf("opcode=atomic_fetch_and_add sge=%d:0:8 remote_addr=0 rkey=%d", mr.LKey, mr.RKey),
		fmt.Sprintf("opcode=send_with_inv invalidate_rkey=%d", mr.RKey),
	} {
		if err := e.trySend(a, line); Errno(err) != 22 {
			t.Errorf("%s on UC: %v, want EINVAL", line, err)
		}
	}
	e.expect(acq)
	e.healthy(a)
}

func TestUCRemoteAccessErrorDropped(t *testing.T) {
	e := newEnv(t)
	a, b, acq, bcq := e.pair(qp.TypeUC)
	src := e.mr(4096, 0)
	ro := e.mr(4096, qp.AccessLocalWrite|qp.AccessRemoteRead) // no remote write
	fill(src.Mem(), 5)
	e.postRecv(b, fmt.Sprintf("wr_id=9 sge=%d:0:64", ro.LKey))
	e.postSend(a,
		fmt.Sprintf("opcode=rdma_write wr_id=1 send_flags=signaled sge=%d:0:3000 remote_addr=0 rkey=%d", src.LKey, ro.RKey),
		fmt.Sprintf("opcode=rdma_write wr_id=2 send_flags=signaled sge=%d:0:100 remote_addr=4090 rkey=%d", src.LKey, ro.RKey+1),
		fmt.Sprintf("opcode=rdma_write_with_imm wr_id=3 send_flags=signaled sge=%d:0:100 remote_addr=0 rkey=%d", src.LKey, ro.RKey))
	e.expect(acq, sendWC(1, "success", "rdma_write", a, 3000), sendWC(2, "success", "rdma_write", a, 100), sendWC(3, "success", "rdma_write", a, 100))
	e.expect(bcq)
	for _, x := range ro.Mem() {
		if x != 0 {
			t.Fatal("a dropped UC write changed memory")
		}
	}
	e.healthy(a, b)
	// The RWQE was not consumed, and the QP still works.
	e.postSend(a, fmt.Sprintf("opcode=send wr_id=4 send_flags=signaled sge=%d:0:10", src.LKey))
	e.expect(acq, sendWC(4, "success", "send", a, 10))
	e.expect(bcq, recvWC(9, "success", "recv", b, 10, a, ""))
	if c := e.qpCounters(b); c.Dropped == 0 {
		t.Fatal("no drops counted")
	}
}

func TestUCNoRWQEDropped(t *testing.T) {
	e := newEnv(t)
	a, b, acq, bcq := e.pair(qp.TypeUC)
	src, dst := e.mr(8192, 0), e.mr(8192, qp.AccessLocalWrite)
	fill(src.Mem(), 6)
	e.postSend(a,
		fmt.Sprintf("opcode=send wr_id=1 send_flags=signaled sge=%d:0:3000", src.LKey),
		fmt.Sprintf("opcode=send wr_id=2 send_flags=signaled sge=%d:0:10", src.LKey))
	e.expect(acq, sendWC(1, "success", "send", a, 3000), sendWC(2, "success", "send", a, 10))
	e.expect(bcq)
	e.healthy(a, b)
	// A receive posted now gets the next message, not a piece of the lost one.
	e.postRecv(b, fmt.Sprintf("wr_id=9 sge=%d:0:8192", dst.LKey))
	e.postSend(a, fmt.Sprintf("opcode=send wr_id=3 send_flags=signaled sge=%d:100:2500", src.LKey))
	e.expect(acq, sendWC(3, "success", "send", a, 2500))
	e.expect(bcq, recvWC(9, "success", "recv", b, 2500, a, ""))
	sameBytes(t, dst.Mem()[:2500], src.Mem()[100:2600])
}

func TestUCRecvTooSmallDropped(t *testing.T) {
	e := newEnv(t)
	a, b, acq, bcq := e.pair(qp.TypeUC)
	src, dst := e.mr(8192, 0), e.mr(8192, qp.AccessLocalWrite)
	fill(src.Mem(), 7)
	e.postRecv(b, fmt.Sprintf("wr_id=9 sge=%d:0:2000", dst.LKey))
	e.postSend(a, fmt.Sprintf("opcode=send wr_id=1 send_flags=signaled sge=%d:0:3000", src.LKey))
	e.expect(acq, sendWC(1, "success", "send", a, 3000))
	e.expect(bcq)
	e.healthy(a, b)
	e.postSend(a, fmt.Sprintf("opcode=send wr_id=2 send_flags=signaled sge=%d:0:1500", src.LKey))
	e.expect(acq, sendWC(2, "success", "send", a, 1500))
	e.expect(bcq, recvWC(9, "success", "recv", b, 1500, a, ""))
	sameBytes(t, dst.Mem()[:1500], src.Mem()[:1500])
}

// udPair makes two UD QPs in RTS and an AH to b's device.
func (e *env) udPair() (a, b *QP, acq, bcq *CQ, ah *AH) {
	e.t.Helper()
	a, b, acq, bcq = e.pair(qp.TypeUD)
	ah = e.ah(e.gidOf(b.QPN))
	return
}

func TestUDSendWithGRH(t *testing.T) {
	e := newEnv(t)
	a, b, acq, bcq, ah := e.udPair()
	src, dst := e.mr(8192, 0), e.mr(8192, qp.AccessLocalWrite)
	fill(src.Mem(), 8)
	e.postRecv(b, fmt.Sprintf("wr_id=9 sge=%d:0:20 sge=%d:1000:2000", dst.LKey, dst.LKey))
	e.postSend(a, fmt.Sprintf("opcode=send_with_imm wr_id=1 send_flags=signaled imm_data=66 sge=%d:0:1000 ah=%d remote_qpn=%d remote_qkey=0x11111111", src.LKey, ah.Handle, b.QPN))
	e.expect(acq, sendWC(1, "success", "send", a, 1000))
	e.expect(bcq, fmt.Sprintf("wr_id=9 status=success opcode=recv qp_num=%d byte_len=1040 imm_data=66 src_qp=%d wc_flags=grh,with_imm", b.QPN, a.QPN))
	grh := append(append([]byte(nil), dst.Mem()[:20]...), dst.Mem()[1000:1020]...)
	sgid, dgid := e.gidOf(a.QPN), e.gidOf(b.QPN)
	if isV4Mapped(sgid) {
		// Across RoCEv2/IPv4 the 40 bytes end with the IPv4 header the
		// packet came with (ibv_wc's GRH convention for RoCEv2).
		ip := grh[20:]
		if ip[0] != 0x45 || string(ip[12:16]) != string(sgid[12:]) || string(ip[16:20]) != string(dgid[12:]) {
			t.Fatalf("GRH % x", grh)
		}
	} else if grh[0]>>4 != 6 || string(grh[8:24]) != string(sgid[:]) || string(grh[24:40]) != string(dgid[:]) {
		t.Fatalf("GRH % x", grh)
	}
	sameBytes(t, dst.Mem()[1020:2020], src.Mem()[:1000])
	e.healthy(a, b)
}

func TestUDQKey(t *testing.T) {
	e := newEnv(t)
	a, b, acq, bcq, ah := e.udPair()
	src, dst := e.mr(4096, 0), e.mr(4096, qp.AccessLocalWrite)
	e.postRecv(b, fmt.Sprintf("wr_id=9 sge=%d:0:4096", dst.LKey))
	e.postSend(a, fmt.Sprintf("opcode=send wr_id=1 send_flags=signaled sge=%d:0:10 ah=%d remote_qpn=%d remote_qkey=0x11111112", src.LKey, ah.Handle, b.QPN))
	e.expect(acq, sendWC(1, "success", "send", a, 10))
	e.expect(bcq)
	if n := e.d.Counters.QKeyViolations.Load(); n != 1 {
		t.Fatalf("qkey_violations %d", n)
	}
	// A remote_qkey with the high bit set means the sender's own qkey,
	// which here is the receiver's too.
	e.postSend(a, fmt.Sprintf("opcode=send wr_id=2 send_flags=signaled sge=%d:0:10 ah=%d remote_qpn=%d remote_qkey=0x80000000", src.LKey, ah.Handle, b.QPN))
	e.expect(acq, sendWC(2, "success", "send", a, 10))
	e.expect(bcq, recvWC(9, "success", "recv", b, 50, a, "wc_flags=grh"))
	e.healthy(a, b)
}

func TestUDRecvTooSmallKeepsWQE(t *testing.T) {
	e := newEnv(t)
	a, b, acq, bcq, ah := e.udPair()
	src, dst := e.mr(4096, 0), e.mr(4096, qp.AccessLocalWrite)
	fill(src.Mem(), 9)
	e.postRecv(b, fmt.Sprintf("wr_id=9 sge=%d:0:140", dst.LKey))
	e.postSend(a,
		fmt.Sprintf("opcode=send wr_id=1 send_flags=signaled sge=%d:0:101 ah=%d remote_qpn=%d remote_qkey=0x11111111", src.LKey, ah.Handle, b.QPN),
		fmt.Sprintf("opcode=send wr_id=2 send_flags=signaled sge=%d:0:100 ah=%d remote_qpn=%d remote_qkey=0x11111111", src.LKey, ah.Handle, b.QPN))
	e.expect(acq, sendWC(1, "success", "send", a, 101), sendWC(2, "success", "send", a, 100))
	e.expect(bcq, recvWC(9, "success", "recv", b, 140, a, "wc_flags=grh"))
	sameBytes(t, dst.Mem()[40:140], src.Mem()[:100])
	e.healthy(a, b)
}

func TestUDForeignGIDNoRoute(t *testing.T) {
	e := newEnv(t)
	a, b, acq, bcq, _ := e.udPair()
	src, dst := e.mr(4096, 0), e.mr(4096, qp.AccessLocalWrite)
	// 2001:db8::1 (documentation prefix): neither this device nor an
	// IPv4-mapped address the wire could try.
	foreign := [16]byte{0x20, 0x01, 0x0d, 0xb8, 15: 1}
	ah := e.ah(foreign)
	e.postRecv(b, fmt.Sprintf("wr_id=9 sge=%d:0:4096", dst.LKey))
	e.postSend(a, fmt.Sprintf("opcode=send wr_id=1 send_flags=signaled sge=%d:0:10 ah=%d remote_qpn=%d remote_qkey=0x11111111", src.LKey, ah.Handle, b.QPN))
	e.expect(acq, sendWC(1, "success", "send", a, 10))
	e.expect(bcq)
	if n := e.d.Counters.NoRoute.Load(); n != 1 {
		t.Fatalf("no_route %d, want 1", n)
	}
	e.healthy(a, b)
}

func TestUDOversizeCompletesUnsent(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.ActiveMTU = qp.MTU1024 })
	a, b, acq, bcq, ah := e.udPair()
	src, dst := e.mr(4096, 0), e.mr(4096, qp.AccessLocalWrite)
	e.postRecv(b, fmt.Sprintf("wr_id=9 sge=%d:0:4096", dst.LKey))
	e.postSend(a, fmt.Sprintf("opcode=send wr_id=1 send_flags=signaled sge=%d:0:1025 ah=%d remote_qpn=%d remote_qkey=0x11111111", src.LKey, ah.Handle, b.QPN))
	e.expect(acq, sendWC(1, "success", "send", a, 1025))
	e.expect(bcq)
	if n := e.d.Counters.UDOversizeDrops.Load(); n != 1 {
		t.Fatalf("ud_oversize_drops %d, want 1", n)
	}
	if n := e.qpCounters(a).PacketsSent; n != 0 {
		t.Fatalf("%d packets sent for an oversized datagram", n)
	}
	e.healthy(a, b)
}
