package device

import (
	"encoding/binary"
	"fmt"
	"testing"

	"rdmafs/qp"
)

// Every RC opcode, both sides' completions, both QPs' states, events and
// the bytes moved.

const rwAccess = qp.AccessLocalWrite | qp.AccessRemoteWrite | qp.AccessRemoteRead | qp.AccessRemoteAtomic

func TestRCSend(t *testing.T) {
	e := newEnv(t)
	a, b, acq, bcq := e.pair(qp.TypeRC)
	src, dst := e.mr(4096, 0), e.mr(4096, qp.AccessLocalWrite)
	fill(src.Mem(), 1)
	e.postRecv(b, fmt.Sprintf("wr_id=9 sge=%d:0:4096", dst.LKey))
	e.postSend(a, fmt.Sprintf("opcode=send wr_id=1 send_flags=signaled sge=%d:10:100", src.LKey))
	e.expect(acq, sendWC(1, "success", "send", a, 100))
	e.expect(bcq, recvWC(9, "success", "recv", b, 100, a, ""))
	sameBytes(t, dst.Mem()[:100], src.Mem()[10:110])
	e.healthy(a, b)
}

func TestRCSendWithImm(t *testing.T) {
	e := newEnv(t)
	a, b, acq, bcq := e.pair(qp.TypeRC)
	src, dst := e.mr(4096, 0), e.mr(4096, qp.AccessLocalWrite)
	fill(src.Mem(), 2)
	e.postRecv(b, fmt.Sprintf("wr_id=9 sge=%d:0:4096", dst.LKey))
	e.postSend(a, fmt.Sprintf("opcode=send_with_imm wr_id=1 send_flags=signaled imm_data=0xdeadbeef sge=%d:0:2000", src.LKey))
	e.expect(acq, sendWC(1, "success", "send", a, 2000))
	e.expect(bcq, fmt.Sprintf("wr_id=9 status=success opcode=recv qp_num=%d byte_len=2000 imm_data=%d src_qp=%d wc_flags=with_imm", b.QPN, 0xdeadbeef, a.QPN))
	sameBytes(t, dst.Mem()[:2000], src.Mem()[:2000])
	e.healthy(a, b)
}

func TestRCSendWithInv(t *testing.T) {
	e := newEnv(t)
	a, b, acq, bcq := e.pair(qp.TypeRC)
	src, dst := e.mr(4096, 0), e.mr(4096, qp.AccessLocalWrite)
	victim := e.mr(4096, rwAccess)
	fill(src.Mem(), 3)
	e.postRecv(b, fmt.Sprintf("wr_id=9 sge=%d:0:4096", dst.LKey))
	e.postSend(a, fmt.Sprintf("opcode=send_with_inv wr_id=1 send_flags=signaled invalidate_rkey=%d sge=%d:0:1500", victim.RKey, src.LKey))
	e.expect(acq, sendWC(1, "success", "send", a, 1500))
	e.expect(bcq, fmt.Sprintf("wr_id=9 status=success opcode=recv qp_num=%d byte_len=1500 invalidate_rkey=%d src_qp=%d wc_flags=with_inv", b.QPN, victim.RKey, a.QPN))
	sameBytes(t, dst.Mem()[:1500], src.Mem()[:1500])
	if victim.Valid() {
		t.Fatal("the MR named by invalidate_rkey is still valid")
	}
	e.healthy(a, b)
	// The invalidated rkey no longer works: a WRITE through it is a remote
	// access error.
	e.postSend(a, fmt.Sprintf("opcode=rdma_write wr_id=2 sge=%d:0:8 remote_addr=0 rkey=%d", src.LKey, victim.RKey))
	e.expect(acq, sendWC(2, "rem_access_err", "rdma_write", a, 0))
	e.state(a, qp.StateErr)
	e.state(b, qp.StateErr)
}

func TestRCRDMAWrite(t *testing.T) {
	e := newEnv(t)
	a, b, acq, bcq := e.pair(qp.TypeRC)
	src, dst := e.mr(16384, 0), e.mr(16384, qp.AccessLocalWrite|qp.AccessRemoteWrite)
	fill(src.Mem(), 4)
	e.postSend(a, fmt.Sprintf("opcode=rdma_write wr_id=1 send_flags=signaled sge=%d:100:5000 remote_addr=3000 rkey=%d", src.LKey, dst.RKey))
	e.expect(acq, sendWC(1, "success", "rdma_write", a, 5000))
	e.expect(bcq)
	sameBytes(t, dst.Mem()[3000:8000], src.Mem()[100:5100])
	for _, x := range dst.Mem()[:3000] {
		if x != 0 {
			t.Fatal("write touched bytes before remote_addr")
		}
	}
	for _, x := range dst.Mem()[8000:] {
		if x != 0 {
			t.Fatal("write touched bytes after the end")
		}
	}
	e.healthy(a, b)
}

func TestRCRDMAWriteWithImm(t *testing.T) {
	e := newEnv(t)
	a, b, acq, bcq := e.pair(qp.TypeRC)
	src, dst := e.mr(16384, 0), e.mr(16384, qp.AccessLocalWrite|qp.AccessRemoteWrite)
	rbuf := e.mr(64, qp.AccessLocalWrite)
	fill(src.Mem(), 5)
	e.postRecv(b, fmt.Sprintf("wr_id=9 sge=%d:0:64", rbuf.LKey), fmt.Sprintf("wr_id=10 sge=%d:0:64", rbuf.LKey))
	e.postSend(a, fmt.Sprintf("opcode=rdma_write_with_imm wr_id=1 send_flags=signaled imm_data=77 sge=%d:0:3500 remote_addr=1 rkey=%d", src.LKey, dst.RKey))
	e.expect(acq, sendWC(1, "success", "rdma_write", a, 3500))
	// byte_len is the write's length; the receive buffer is untouched.
	e.expect(bcq, fmt.Sprintf("wr_id=9 status=success opcode=recv_rdma_with_imm qp_num=%d byte_len=3500 imm_data=77 src_qp=%d wc_flags=with_imm", b.QPN, a.QPN))
	sameBytes(t, dst.Mem()[1:3501], src.Mem()[:3500])
	for _, x := range rbuf.Mem() {
		if x != 0 {
			t.Fatal("write_with_imm wrote into the receive buffer")
		}
	}
	// Exactly one RWQE was consumed: wr_id 10 is still there for a SEND.
	e.postSend(a, fmt.Sprintf("opcode=send wr_id=2 send_flags=signaled sge=%d:0:8", src.LKey))
	e.expect(acq, sendWC(2, "success", "send", a, 8))
	e.expect(bcq, recvWC(10, "success", "recv", b, 8, a, ""))
	e.healthy(a, b)
}

func TestRCRDMARead(t *testing.T) {
	e := newEnv(t)
	a, b, acq, bcq := e.pair(qp.TypeRC)
	local := e.mr(65536, qp.AccessLocalWrite)
	remote := e.mr(65536, qp.AccessLocalWrite|qp.AccessRemoteRead)
	fill(remote.Mem(), 6)
	// 10000 bytes at MTU 1024: 10 response packets, into three SGEs.
	e.postSend(a, fmt.Sprintf("opcode=rdma_read wr_id=1 send_flags=signaled sge=%d:0:3000 sge=%d:10000:1 sge=%d:20000:6999 remote_addr=777 rkey=%d",
		local.LKey, local.LKey, local.LKey, remote.RKey))
	e.expect(acq, sendWC(1, "success", "rdma_read", a, 10000))
	e.expect(bcq)
	want := remote.Mem()[777 : 777+10000]
	sameBytes(t, local.Mem()[:3000], want[:3000])
	sameBytes(t, local.Mem()[10000:10001], want[3000:3001])
	sameBytes(t, local.Mem()[20000:26999], want[3001:])
	e.healthy(a, b)
	if c := e.qpCounters(b); c.PacketsSent != 10 {
		t.Fatalf("responder sent %d packets, want 10 read responses", c.PacketsSent)
	}
}

func TestRCAtomicCmpAndSwp(t *testing.T) {
	e := newEnv(t)
	a, b, acq, bcq := e.pair(qp.TypeRC)
	local := e.mr(64, qp.AccessLocalWrite)
	remote := e.mr(64, qp.AccessLocalWrite|qp.AccessRemoteAtomic)
	binary.LittleEndian.PutUint64(remote.Mem()[16:], 1000)
	// Match: swapped.
	e.postSend(a, fmt.Sprintf("opcode=atomic_cmp_and_swp wr_id=1 send_flags=signaled sge=%d:0:8 remote_addr=16 rkey=%d compare_add=1000 swap=2000", local.LKey, remote.RKey))
	e.expect(acq, sendWC(1, "success", "comp_swap", a, 8))
	if got := binary.LittleEndian.Uint64(local.Mem()); got != 1000 {
		t.Fatalf("original value %d, want 1000", got)
	}
	if got := binary.LittleEndian.Uint64(remote.Mem()[16:]); got != 2000 {
		t.Fatalf("memory %d after a matching cmp_swap, want 2000", got)
	}
	// Mismatch: unchanged, the original comes back.
	e.postSend(a, fmt.Sprintf("opcode=atomic_cmp_and_swp wr_id=2 send_flags=signaled sge=%d:8:8 remote_addr=16 rkey=%d compare_add=1000 swap=3000", local.LKey, remote.RKey))
	e.expect(acq, sendWC(2, "success", "comp_swap", a, 8))
	if got := binary.LittleEndian.Uint64(local.Mem()[8:]); got != 2000 {
		t.Fatalf("original value %d, want 2000", got)
	}
	if got := binary.LittleEndian.Uint64(remote.Mem()[16:]); got != 2000 {
		t.Fatalf("memory %d after a mismatching cmp_swap, want 2000", got)
	}
	e.expect(bcq)
	e.healthy(a, b)
}

func TestRCAtomicFetchAndAdd(t *testing.T) {
	e := newEnv(t)
	a, b, acq, bcq := e.pair(qp.TypeRC)
	local := e.mr(64, qp.AccessLocalWrite)
	remote := e.mr(64, qp.AccessLocalWrite|qp.AccessRemoteAtomic)
	binary.LittleEndian.PutUint64(remote.Mem()[8:], 40)
	e.postSend(a,
		fmt.Sprintf("opcode=atomic_fetch_and_add wr_id=1 send_flags=signaled sge=%d:0:8 remote_addr=8 rkey=%d compare_add=2", local.LKey, remote.RKey),
		fmt.Sprintf("opcode=atomic_fetch_and_add wr_id=2 send_flags=signaled sge=%d:8:8 remote_addr=8 rkey=%d compare_add=0xffffffffffffffff", local.LKey, remote.RKey))
	e.expect(acq, sendWC(1, "success", "fetch_add", a, 8), sendWC(2, "success", "fetch_add", a, 8))
	if got := binary.LittleEndian.Uint64(local.Mem()); got != 40 {
		t.Fatalf("first original %d, want 40", got)
	}
	if got := binary.LittleEndian.Uint64(local.Mem()[8:]); got != 42 {
		t.Fatalf("second original %d, want 42", got)
	}
	if got := binary.LittleEndian.Uint64(remote.Mem()[8:]); got != 41 {
		t.Fatalf("memory %d, want 41", got)
	}
	e.expect(bcq)
	e.healthy(a, b)
}

func TestRCLocalInv(t *testing.T) {
	e := newEnv(t)
	a, b, acq, bcq := e.pair(qp.TypeRC)
	mr := e.mr(4096, rwAccess)
	e.postSend(a, fmt.Sprintf("opcode=local_inv wr_id=1 send_flags=signaled invalidate_rkey=%d", mr.LKey))
	e.expect(acq, sendWC(1, "success", "local_inv", a, 0))
	if mr.Valid() {
		t.Fatal("MR valid after local_inv")
	}
	e.expect(bcq)
	e.healthy(a, b)
	// Its lkey is now a local protection error.
	e.postSend(a, fmt.Sprintf("opcode=send wr_id=2 sge=%d:0:8", mr.LKey))
	e.expect(acq, sendWC(2, "loc_prot_err", "send", a, 0))
	e.state(a, qp.StateErr)
	e.state(b, qp.StateRTS)
}

func testBindMW(t *testing.T, typ uint8) {
	e := newEnv(t)
	a, b, acq, bcq := e.pair(qp.TypeRC)
	local := e.mr(8192, qp.AccessLocalWrite)
	target := e.mr(8192, qp.AccessLocalWrite|qp.AccessMWBind)
	fill(local.Mem(), 9)
	fill(target.Mem(), 50)
	mw := e.mw(typ)
	// The responder binds the window through its own QP (type 2 windows
	// are then usable only by requests arriving on that QP).
	e.postSend(b, fmt.Sprintf("opcode=bind_mw wr_id=5 send_flags=signaled mw=%d rkey=0x42 bind_lkey=%d bind_addr=1024 bind_length=2048 bind_access=remote_write,remote_read",
		mw.Handle, target.LKey))
	e.expect(bcq, sendWC(5, "success", "bind_mw", b, 0))
	at := mw.Attr()
	if !at.Bound || at.RKey&0xFF != 0x42 || at.RKey>>8 != mw.RKey>>8 || at.Addr != 1024 || at.Length != 2048 {
		t.Fatalf("mw after bind: %+v", at)
	}
	if err := target.Dereg(); Errno(err) != 16 {
		t.Fatalf("dereg of an MR with a bound MW: %v, want EBUSY", err)
	}
	e.postSend(a,
		fmt.Sprintf("opcode=rdma_write wr_id=1 send_flags=signaled sge=%d:0:100 remote_addr=1500 rkey=%d", local.LKey, at.RKey),
		fmt.Sprintf("opcode=rdma_read wr_id=2 send_flags=signaled sge=%d:4096:2048 remote_addr=1024 rkey=%d", local.LKey, at.RKey))
	e.expect(acq, sendWC(1, "success", "rdma_write", a, 100), sendWC(2, "success", "rdma_read", a, 2048))
	sameBytes(t, target.Mem()[1500:1600], local.Mem()[:100])
	sameBytes(t, local.Mem()[4096:4096+2048], target.Mem()[1024:3072])
	e.healthy(a, b)
	// One byte past the window: remote access error.
	e.postSend(a, fmt.Sprintf("opcode=rdma_write wr_id=3 sge=%d:0:8 remote_addr=%d rkey=%d", local.LKey, 1024+2048-7, at.RKey))
	e.expect(acq, sendWC(3, "rem_access_err", "rdma_write", a, 0))
	e.expect(bcq)
	e.state(a, qp.StateErr)
	e.state(b, qp.StateErr)
	e.expectEvents(fmt.Sprintf("event=qp_access_err qp=%d", b.QPN))
}

func TestRCBindMWType1(t *testing.T) { testBindMW(t, 1) }
func TestRCBindMWType2(t *testing.T) { testBindMW(t, 2) }

func TestRCInlineSend(t *testing.T) {
	e := newEnv(t)
	a, b, acq, bcq := e.pair(qp.TypeRC)
	src, dst := e.mr(4096, 0), e.mr(4096, qp.AccessLocalWrite|qp.AccessRemoteWrite)
	fill(src.Mem(), 11)
	e.postRecv(b, fmt.Sprintf("wr_id=9 sge=%d:0:64", dst.LKey), fmt.Sprintf("wr_id=10 sge=%d:64:64", dst.LKey))
	e.postSend(a, fmt.Sprintf("opcode=send wr_id=1 send_flags=signaled,inline sge=%d:0:20 sge=%d:100:20", src.LKey, src.LKey))
	// The SGEs were read at post time: changing the buffer now changes nothing.
	orig := append([]byte(nil), src.Mem()[:200]...)
	clear(src.Mem()[:200])
	e.postSend(a, "opcode=send wr_id=2 send_flags=signaled inline_data=0102030405")
	e.postSend(a, fmt.Sprintf("opcode=rdma_write wr_id=3 send_flags=signaled inline_data=aabbcc remote_addr=1000 rkey=%d", dst.RKey))
	e.expect(acq, sendWC(1, "success", "send", a, 40), sendWC(2, "success", "send", a, 5), sendWC(3, "success", "rdma_write", a, 3))
	e.expect(bcq, recvWC(9, "success", "recv", b, 40, a, ""), recvWC(10, "success", "recv", b, 5, a, ""))
	sameBytes(t, dst.Mem()[:20], orig[:20])
	sameBytes(t, dst.Mem()[20:40], orig[100:120])
	sameBytes(t, dst.Mem()[64:69], []byte{1, 2, 3, 4, 5})
	sameBytes(t, dst.Mem()[1000:1003], []byte{0xaa, 0xbb, 0xcc})
	e.healthy(a, b)
	// Larger than max_inline_data: refused at post.
	if err := e.trySend(a, fmt.Sprintf("opcode=send send_flags=inline sge=%d:0:%d", src.LKey, a.Cap.MaxInlineData+1)); Errno(err) != 22 {
		t.Fatalf("oversized inline send: %v, want EINVAL", err)
	}
}

func TestRCZeroByteSendAndWrite(t *testing.T) {
	e := newEnv(t)
	a, b, acq, bcq := e.pair(qp.TypeRC)
	dst := e.mr(64, qp.AccessLocalWrite)
	e.postRecv(b, fmt.Sprintf("wr_id=9 sge=%d:0:64", dst.LKey), "wr_id=10")
	e.postSend(a, "opcode=send wr_id=1 send_flags=signaled",
		// A zero-length write needs no valid rkey (C9-88).
		"opcode=rdma_write wr_id=2 send_flags=signaled remote_addr=0 rkey=0x12345",
		"opcode=send_with_imm wr_id=3 send_flags=signaled imm_data=5")
	e.expect(acq, sendWC(1, "success", "send", a, 0), sendWC(2, "success", "rdma_write", a, 0), sendWC(3, "success", "send", a, 0))
	e.expect(bcq, recvWC(9, "success", "recv", b, 0, a, ""),
		fmt.Sprintf("wr_id=10 status=success opcode=recv qp_num=%d byte_len=0 imm_data=5 src_qp=%d wc_flags=with_imm", b.QPN, a.QPN))
	e.healthy(a, b)
}

func TestRCMultiSGEBothSides(t *testing.T) {
	e := newEnv(t)
	a, b, acq, bcq := e.pair(qp.TypeRC)
	s1, s2 := e.mr(8192, 0), e.mr(8192, 0)
	d1, d2 := e.mr(8192, qp.AccessLocalWrite), e.mr(8192, qp.AccessLocalWrite)
	fill(s1.Mem(), 20)
	fill(s2.Mem(), 90)
	// 1000+1+0+2999 = 4000 bytes out, into 7+3000+993 (+ spare) in.
	e.postRecv(b, fmt.Sprintf("wr_id=9 sge=%d:1:7 sge=%d:100:3000 sge=%d:5000:993 sge=%d:0:500", d1.LKey, d2.LKey, d1.LKey, d2.LKey))
	e.postSend(a, fmt.Sprintf("opcode=send wr_id=1 send_flags=signaled sge=%d:0:1000 sge=%d:50:1 sge=%d:0:0 sge=%d:4000:2999", s1.LKey, s2.LKey, s1.LKey, s2.LKey))
	e.expect(acq, sendWC(1, "success", "send", a, 4000))
	e.expect(bcq, recvWC(9, "success", "recv", b, 4000, a, ""))
	var want []byte
	want = append(want, s1.Mem()[:1000]...)
	want = append(want, s2.Mem()[50:51]...)
	want = append(want, s2.Mem()[4000:6999]...)
	var got []byte
	got = append(got, d1.Mem()[1:8]...)
	got = append(got, d2.Mem()[100:3100]...)
	got = append(got, d1.Mem()[5000:5993]...)
	sameBytes(t, got, want)
	e.healthy(a, b)
}

func TestRCLargeMessagesAllMTUs(t *testing.T) {
	for _, mtu := range []int{256, 512, 1024, 2048, 4096} {
		t.Run(fmt.Sprint(mtu), func(t *testing.T) {
			e := newEnv(t)
			over := fmt.Sprintf("path_mtu=%d", mtu)
			a, b, acq, bcq := e.pairX(qp.TypeRC, over, over)
			const n = 300000 // not a multiple of any MTU
			src := e.mr(n+64, qp.AccessLocalWrite|qp.AccessRemoteRead)
			dst := e.mr(n+64, qp.AccessLocalWrite|qp.AccessRemoteWrite)
			back := e.mr(n+64, qp.AccessLocalWrite)
			fill(src.Mem(), byte(mtu))
			e.postRecv(b, fmt.Sprintf("wr_id=9 sge=%d:0:%d", dst.LKey, n+64))
			e.postSend(a, fmt.Sprintf("opcode=send wr_id=1 send_flags=signaled sge=%d:3:%d", src.LKey, n))
			e.expect(acq, sendWC(1, "success", "send", a, n))
			e.expect(bcq, recvWC(9, "success", "recv", b, n, a, ""))
			sameBytes(t, dst.Mem()[:n], src.Mem()[3:n+3])
			clear(dst.Mem())
			e.postSend(a, fmt.Sprintf("opcode=rdma_write wr_id=2 send_flags=signaled sge=%d:1:%d remote_addr=5 rkey=%d", src.LKey, n, dst.RKey))
			e.expect(acq, sendWC(2, "success", "rdma_write", a, n))
			sameBytes(t, dst.Mem()[5:n+5], src.Mem()[1:n+1])
			e.postSend(a, fmt.Sprintf("opcode=rdma_read wr_id=3 send_flags=signaled sge=%d:0:%d remote_addr=7 rkey=%d", back.LKey, n, src.RKey))
			e.expect(acq, sendWC(3, "success", "rdma_read", a, n))
			sameBytes(t, back.Mem()[:n], src.Mem()[7:n+7])
			e.expect(bcq)
			e.healthy(a, b)
			pk := (n + mtu - 1) / mtu
			e.d.mu.Lock()
			psn := a.req.psn
			e.d.mu.Unlock()
			if want := qp.PSN(500).Add(uint32(3 * pk)); psn != want {
				t.Fatalf("requester psn %d, want %d (3 messages of %d packets)", psn, want, pk)
			}
		})
	}
}

// A READ returns memory as it was when the READ executed, even when a
// WRITE posted right behind it changes the same bytes before the
// requester has taken the response.
func TestRCReadThenWriteSameBytes(t *testing.T) {
	e := newEnv(t)
	a, b, acq, _ := e.pair(qp.TypeRC)
	local := e.mr(16384, qp.AccessLocalWrite)
	remote := e.mr(16384, rwAccess)
	fill(remote.Mem(), 1)
	fill(local.Mem()[8192:], 200)
	old := append([]byte(nil), remote.Mem()[:5000]...)
	e.postSend(a,
		fmt.Sprintf("opcode=rdma_read wr_id=1 send_flags=signaled sge=%d:0:5000 remote_addr=0 rkey=%d", local.LKey, remote.RKey),
		fmt.Sprintf("opcode=rdma_write wr_id=2 send_flags=signaled sge=%d:8192:5000 remote_addr=0 rkey=%d", local.LKey, remote.RKey))
	e.expect(acq, sendWC(1, "success", "rdma_read", a, 5000), sendWC(2, "success", "rdma_write", a, 5000))
	sameBytes(t, local.Mem()[:5000], old)
	sameBytes(t, remote.Mem()[:5000], local.Mem()[8192:8192+5000])
	e.healthy(a, b)
}
