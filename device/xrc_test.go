package device

import (
	"encoding/binary"
	"fmt"
	"strings"
	"syscall"
	"testing"

	"rdmafs/qp"
	"rdmafs/roce"
)

// xrcEnv is one XRC connection on an env: a domain with two XRC SRQs
// (each with its own CQ), an XRC_RECV QP in it and an XRC_SEND QP aimed
// at it.
type xrcEnv struct {
	*env
	xrcd       *XRCD
	s1, s2     *SRQ
	c1, c2     *CQ
	tgt, ini   *QP
	scq        *CQ
	src, dst   *MR
	otherXRCD  *XRCD
	otherSRQ   *SRQ
	otherCQ    *CQ
	otherRecvs int
}

func newXRC(t *testing.T) *xrcEnv { return xrcOn(newEnv(t)) }

// xrcOn sets the XRC connection up on env.
func xrcOn(env *env) *xrcEnv {
	e := &xrcEnv{env: env}
	t := env.t
	var err error
	if e.xrcd, err = e.d.OpenXRCD(0, nil, nil, false, false); err != nil {
		t.Fatal(err)
	}
	e.c1, e.c2, e.scq = e.cq(64), e.cq(64), e.cq(64)
	e.s1, e.s2 = e.xrcSRQ(e.xrcd, e.c1), e.xrcSRQ(e.xrcd, e.c2)
	if e.tgt, err = e.d.CreateQP(0, qp.CreateQP{Type: qp.TypeXRCRecv, XRCD: e.xrcd.Handle}); err != nil {
		t.Fatal(err)
	}
	e.ini, err = e.d.CreateQP(0, qp.CreateQP{Type: qp.TypeXRCSend, PD: e.pd.Handle, SendCQ: e.scq.Handle,
		Cap: qp.Cap{MaxSendWR: 16, MaxSendSGE: 2, MaxInlineData: 64}})
	if err != nil {
		t.Fatal(err)
	}
	gid := GIDString(e.gidOf(0))
	e.modify(e.tgt, "qp_state=INIT pkey_index=0 port_num=1 qp_access_flags="+allAccess)
	e.modify(e.tgt, "qp_state=RTR path_mtu=1024 rq_psn=500 max_dest_rd_atomic=4 min_rnr_timer=12 dest_qp_num="+itoa(e.ini.QPN)+" dgid="+gid)
	e.modify(e.tgt, "qp_state=RTS sq_psn=700 timeout=14")
	e.modify(e.ini, "qp_state=INIT pkey_index=0 port_num=1 qp_access_flags=0")
	e.modify(e.ini, "qp_state=RTR path_mtu=1024 rq_psn=700 dest_qp_num="+itoa(e.tgt.QPN)+" dgid="+gid)
	e.modify(e.ini, "qp_state=RTS sq_psn=500 timeout=14 retry_cnt=7 rnr_retry=7 max_rd_atomic=4")
	e.src, e.dst = e.mr(4096, qp.AccessLocalWrite), e.mr(4096, rwAccess)
	return e
}

func (e *xrcEnv) xrcSRQ(x *XRCD, cq *CQ) *SRQ {
	e.t.Helper()
	s, err := e.d.CreateSRQ(0, qp.CreateSRQ{PD: e.pd.Handle, MaxWR: 16, MaxSGE: 1, XRC: true, XRCD: x.Handle, CQ: cq.Handle})
	if err != nil {
		e.t.Fatal(err)
	}
	return s
}

// A SEND lands in the SRQ its XRCETH names, whose CQ gets the receive
// completion (qp_num the XRC_RECV QP, src_qp the sender), not in the
// domain's other SRQ.
func TestXRCSendToNamedSRQ(t *testing.T) {
	e := newXRC(t)
	fill(e.src.Mem(), 5)
	e.postSRQ(e.s1, fmt.Sprintf("wr_id=1 sge=%d:0:2048", e.dst.LKey))
	e.postSRQ(e.s2, fmt.Sprintf("wr_id=2 sge=%d:2048:2048", e.dst.LKey))
	if e.s1.SRQNum() != e.s1.Handle || e.s2.SRQNum() == e.s1.SRQNum() {
		t.Fatalf("srq numbers %d %d", e.s1.SRQNum(), e.s2.SRQNum())
	}
	e.postSend(e.ini, fmt.Sprintf("opcode=send wr_id=7 send_flags=signaled remote_srqn=%d sge=%d:0:1500", e.s2.SRQNum(), e.src.LKey))
	e.expect(e.scq, sendWC(7, "success", "send", e.ini, 1500))
	e.expect(e.c2, recvWC(2, "success", "recv", e.tgt, 1500, e.ini, ""))
	e.expect(e.c1)
	sameBytes(t, e.dst.Mem()[2048:2048+1500], e.src.Mem()[:1500])
	if e.s1.Attr().Pending != 1 || e.s2.Attr().Pending != 0 {
		t.Fatalf("pending: s1 %d, s2 %d", e.s1.Attr().Pending, e.s2.Attr().Pending)
	}

	// Then the other SRQ, with immediate data, in a message of several
	// packets.
	e.postSend(e.ini, fmt.Sprintf("opcode=send_with_imm wr_id=8 send_flags=signaled imm_data=9 remote_srqn=%d sge=%d:0:2000", e.s1.SRQNum(), e.src.LKey))
	e.expect(e.scq, sendWC(8, "success", "send", e.ini, 2000))
	e.expect(e.c1, fmt.Sprintf("wr_id=1 status=success opcode=recv qp_num=%d byte_len=2000 imm_data=9 src_qp=%d wc_flags=with_imm", e.tgt.QPN, e.ini.QPN))
	sameBytes(t, e.dst.Mem()[:2000], e.src.Mem()[:2000])
	e.healthy(e.ini, e.tgt)
}

// RDMA WRITE, READ and the atomics go through the named SRQ's PD.
func TestXRCRemoteOps(t *testing.T) {
	e := newXRC(t)
	fill(e.src.Mem(), 9)
	n := e.s1.SRQNum()
	e.postSend(e.ini, fmt.Sprintf("opcode=rdma_write wr_id=1 send_flags=signaled remote_srqn=%d sge=%d:0:3000 remote_addr=100 rkey=%d", n, e.src.LKey, e.dst.RKey))
	e.expect(e.scq, sendWC(1, "success", "rdma_write", e.ini, 3000))
	sameBytes(t, e.dst.Mem()[100:3100], e.src.Mem()[:3000])

	e.postSend(e.ini, fmt.Sprintf("opcode=rdma_read wr_id=2 send_flags=signaled remote_srqn=%d sge=%d:0:1000 remote_addr=3000 rkey=%d", n, e.src.LKey, e.dst.RKey))
	e.expect(e.scq, sendWC(2, "success", "rdma_read", e.ini, 1000))
	sameBytes(t, e.src.Mem()[:1000], e.dst.Mem()[3000:4000])

	binary.LittleEndian.PutUint64(e.dst.Mem()[8:], 40)
	e.postSend(e.ini, fmt.Sprintf("opcode=atomic_fetch_and_add wr_id=3 send_flags=signaled remote_srqn=%d sge=%d:16:8 remote_addr=8 rkey=%d compare_add=2", n, e.src.LKey, e.dst.RKey))
	e.expect(e.scq, sendWC(3, "success", "fetch_add", e.ini, 8))
	if got, old := binary.LittleEndian.Uint64(e.dst.Mem()[8:]), binary.LittleEndian.Uint64(e.src.Mem()[16:]); got != 42 || old != 40 {
		t.Fatalf("fetch_and_add: remote %d, returned %d", got, old)
	}
	e.postSend(e.ini, fmt.Sprintf("opcode=atomic_cmp_and_swp wr_id=4 send_flags=signaled remote_srqn=%d sge=%d:16:8 remote_addr=8 rkey=%d compare_add=42 swap=7", n, e.src.LKey, e.dst.RKey))
	e.expect(e.scq, sendWC(4, "success", "comp_swap", e.ini, 8))
	if got := binary.LittleEndian.Uint64(e.dst.Mem()[8:]); got != 7 {
		t.Fatalf("cmp_and_swp: remote %d", got)
	}
	e.healthy(e.ini, e.tgt)
}

// A number that is no XRC SRQ is an invalid request: the sender's WQE
// completes with rem_inv_req_err, the XRC_RECV QP goes to ERR.
func TestXRCBadSRQNumber(t *testing.T) {
	e := newXRC(t)
	e.postSend(e.ini, fmt.Sprintf("opcode=send wr_id=1 send_flags=signaled remote_srqn=%d sge=%d:0:10", 4000, e.src.LKey))
	e.expect(e.scq, sendWC(1, "rem_inv_req_err", "send", e.ini, 0))
	e.state(e.tgt, qp.StateErr)
	e.state(e.ini, qp.StateErr)
	e.expect(e.c1)
	e.expect(e.c2)
}

// A basic SRQ (not XRC) is not a target either.
func TestXRCBasicSRQNumber(t *testing.T) {
	e := newXRC(t)
	basic := e.srq(8, 0)
	e.postSRQ(basic, fmt.Sprintf("wr_id=1 sge=%d:0:64", e.dst.LKey))
	e.postSend(e.ini, fmt.Sprintf("opcode=send wr_id=1 send_flags=signaled remote_srqn=%d sge=%d:0:10", basic.Handle, e.src.LKey))
	e.expect(e.scq, sendWC(1, "rem_inv_req_err", "send", e.ini, 0))
	if basic.Attr().Pending != 1 {
		t.Fatal("the basic SRQ's WQE was taken")
	}
}

// An XRC SRQ of another domain is refused like a missing one, and its
// WQEs stay.
func TestXRCDomainMismatch(t *testing.T) {
	e := newXRC(t)
	other, err := e.d.OpenXRCD(0, nil, nil, false, false)
	if err != nil {
		t.Fatal(err)
	}
	ocq := e.cq(8)
	os := e.xrcSRQ(other, ocq)
	e.postSRQ(os, fmt.Sprintf("wr_id=1 sge=%d:0:64", e.dst.LKey))
	e.postSend(e.ini, fmt.Sprintf("opcode=send wr_id=1 send_flags=signaled remote_srqn=%d sge=%d:0:10", os.SRQNum(), e.src.LKey))
	e.expect(e.scq, sendWC(1, "rem_inv_req_err", "send", e.ini, 0))
	e.expect(ocq)
	if os.Attr().Pending != 1 {
		t.Fatal("the other domain's WQE was taken")
	}
	// And an XRC_RECV QP is made in a domain only through a handle of it.
	if _, err := e.d.OpenQP(0, other.Handle, e.tgt.QPN); Errno(err) != syscall.EINVAL {
		t.Fatalf("open_qp through another domain: %v", err)
	}
}

// Domains of files: one per inode, made with create, refused with excl,
// and kept while a handle is open; the last handle cannot close while the
// domain has SRQs or QPs.
func TestXRCDShared(t *testing.T) {
	e := newEnv(t)
	f := FileKey{Dev: 3, Ino: 77}
	if _, err := e.d.OpenXRCD(1000, &f, nil, false, false); Errno(err) != syscall.ENOENT {
		t.Fatalf("without create: %v", err)
	}
	// The domain keeps the first opener's reference to the file (so its
	// inode number stays its own) until it goes; later ones are let go.
	pinA, pinB := &countCloser{}, &countCloser{}
	a, err := e.d.OpenXRCD(1000, &f, pinA, true, false)
	if err != nil {
		t.Fatal(err)
	}
	b, err := e.d.OpenXRCD(2000, &f, pinB, false, false)
	if err != nil {
		t.Fatal(err)
	}
	if pinA.n != 0 || pinB.n != 1 {
		t.Fatalf("file references closed: the domain's %d times, the second opener's %d", pinA.n, pinB.n)
	}
	if _, err := e.d.OpenXRCD(1000, &f, nil, true, true); Errno(err) != syscall.EINVAL {
		t.Fatalf("excl on an existing domain: %v", err)
	}
	if a.dom != b.dom {
		t.Fatal("two handles on one file have two domains")
	}
	// uid 2000 holds the domain: it may hold uid 1000's XRC_RECV QP.
	q, err := e.d.CreateQP(1000, qp.CreateQP{Type: qp.TypeXRCRecv, XRCD: a.Handle})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := e.d.OpenQP(2000, b.Handle, q.QPN); err != nil || got != q || !q.MayHold(2000) || q.MayHold(3000) {
		t.Fatalf("open_qp by the other uid: %v %v", got, err)
	}
	if _, err := e.d.OpenQP(2000, a.Handle, q.QPN); Errno(err) != syscall.EACCES {
		t.Fatalf("open_qp through another uid's handle: %v", err)
	}
	q.Hold() // the opener; its maker holds it from its creation
	if q.Unhold() || !q.Unhold() {
		t.Fatal("holders miscounted")
	}
	if err := a.Close(); err != nil {
		t.Fatalf("close of a handle that is not the last: %v", err)
	}
	if err := b.Close(); Errno(err) != syscall.EBUSY {
		t.Fatalf("close of the last handle with a qp in the domain: %v", err)
	}
	if err := q.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if pinA.n != 1 {
		t.Fatalf("the domain's file reference closed %d times at its end", pinA.n)
	}
	// The file's domain is gone with its last handle.
	if _, err := e.d.OpenXRCD(1000, &f, nil, false, false); Errno(err) != syscall.ENOENT {
		t.Fatalf("domain outlived its handles: %v", err)
	}
	// XRC_SEND and XRC_RECV QPs have no receive queue.
	x, _ := e.d.OpenXRCD(0, nil, nil, false, false)
	r, err := e.d.CreateQP(0, qp.CreateQP{Type: qp.TypeXRCRecv, XRCD: x.Handle})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.PostRecv([]qp.RecvWR{{WRID: 1}}); Errno(err) != syscall.EINVAL {
		t.Fatalf("post_recv on xrc_recv: %v", err)
	}
	if _, err := r.PostSend([]qp.SendWR{{Opcode: qp.WRSend}}); err == nil {
		t.Fatal("post_send on xrc_recv")
	}
}

type countCloser struct{ n int }

func (c *countCloser) Close() error { c.n++; return nil }

// FuzzXRCReceive hands arbitrary IB bytes, as a packet from the XRC_SEND
// QP's address and QPN, to the device that holds the XRC_RECV QP: every
// opcode, XRCETH number and PSN the parser accepts. The device must not
// panic, the other domain's SRQ must keep its WQE, and nothing lands
// outside the named SRQ's PD.
func FuzzXRCReceive(f *testing.F) {
	for _, p := range []roce.Packet{
		{Opcode: roce.XRCSendOnly, PSN: 500, XRCSRQ: 1, AckReq: true, Payload: []byte("hello")},
		{Opcode: roce.XRCSendFirst, PSN: 500, XRCSRQ: 2, Payload: make([]byte, 1024)},
		{Opcode: roce.XRCSendLast, PSN: 501, XRCSRQ: 1, Payload: []byte("x")},
		{Opcode: roce.XRCWriteOnly, PSN: 500, XRCSRQ: 1, VA: 10, RKey: 0, DMALen: 4, Payload: []byte("abcd")},
		{Opcode: roce.XRCReadRequest, PSN: 500, XRCSRQ: 2, VA: 0, DMALen: 4096},
		{Opcode: roce.XRCFetchAdd, PSN: 499, XRCSRQ: 3, VA: 8, SwapAdd: 1},
		{Opcode: roce.XRCAcknowledge, PSN: 500, MSN: 1},
		{Opcode: roce.XRCSendOnly, PSN: 500, XRCSRQ: 0xFFFFFF},
	} {
		p.DestQP = 0 // the harness aims it at the target
		b, err := p.AppendIB(nil)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		e := xrcOn(buildEnv(t, false))
		other, err := e.d.OpenXRCD(0, nil, nil, false, false)
		if err != nil {
			t.Fatal(err)
		}
		os := e.xrcSRQ(other, e.cq(4))
		foreign := e.foreignMR(4096, rwAccess)
		e.postSRQ(os, fmt.Sprintf("wr_id=1 sge=%d:0:64", foreign.LKey))
		e.postSRQ(e.s1, fmt.Sprintf("wr_id=2 sge=%d:0:2048", e.dst.LKey))
		var rp roce.Packet
		if roce.ParseIB(b, &rp) != nil {
			return
		}
		d := e.d
		d.mu.Lock()
		p := d.poolLocked(nil).get()
		p.Packet = rp
		p.own() // the fuzzer's bytes are not the packet's to keep
		p.buf = append(p.buf[:0], rp.Payload...)
		p.Payload = p.buf
		p.DestQP = e.tgt.QPN
		p.sgid, p.dgid = d.cfg.GID, d.cfg.GID
		p.srcQPN, p.local = e.ini.QPN, true
		d.receiveLocked(p, nil)
		d.mu.Unlock()
		e.quiesce()
		if os.Attr().Pending != 1 {
			t.Fatal("a WQE of another domain's SRQ was taken")
		}
		for i, c := range foreign.Mem()[:64] {
			if c != 0 {
				t.Fatalf("byte %d of another PD's MR changed", i)
			}
		}
		if err := e.tgt.Destroy(); err != nil {
			t.Fatal(err)
		}
	})
}

// XRC domain handles have the bounds of PDs: max_pd of them, and a user
// other than root its share.
func TestXRCDBounds(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.MaxPD = 8 })
	for i := 0; i < 2; i++ {
		if _, err := e.d.OpenXRCD(1000, nil, nil, false, false); err != nil {
			t.Fatal(err)
		}
	}
	pin := &countCloser{}
	_, err := e.d.OpenXRCD(1000, &FileKey{Ino: 5}, pin, true, false)
	if Errno(err) != syscall.ENOMEM || !strings.Contains(err.Error(), "max_xrcd per user") || pin.n != 1 {
		t.Fatalf("third handle of uid 1000: %v (file reference closed %d times)", err, pin.n)
	}
	for i := 0; i < 6; i++ {
		if _, err := e.d.OpenXRCD(0, nil, nil, false, false); err != nil {
			t.Fatalf("root's handle %d: %v", i, err)
		}
	}
	if _, err := e.d.OpenXRCD(0, nil, nil, false, false); Errno(err) != syscall.ENOMEM {
		t.Fatalf("past max_pd: %v", err)
	}
}
