package verbs

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"rdmafs/qp"
)

func TestOpenQuery(t *testing.T) {
	e := mount(t, testOpts)
	d, err := e.ctx.QueryDevice()
	if err != nil {
		t.Fatal(err)
	}
	if d.MaxQP != 1024 || d.PhysPortCnt != 1 || d.MaxInlineData == 0 || d.FwVer == "" || d.MaxQPWR == 0 {
		t.Errorf("device: %+v", d)
	}
	// device_cap_flags_ex: device_cap_flags and the kernel's
	// IB_UVERBS_DEVICE_ATOMIC_WRITE (1 << 40).
	if d.DeviceCapFlagsEx&0xffffffff != uint64(d.DeviceCapFlags) || d.DeviceCapFlagsEx&(1<<40) == 0 {
		t.Errorf("device_cap_flags %#x, device_cap_flags_ex %#x", d.DeviceCapFlags, d.DeviceCapFlagsEx)
	}
	p, err := e.ctx.QueryPort(1)
	if err != nil {
		t.Fatal(err)
	}
	if p.State != "ACTIVE" || p.ActiveMTU != MTU4096 || p.PortNum != 1 {
		t.Errorf("port: %+v", p)
	}
	if _, err := e.ctx.QueryPort(2); !isErrno(err, syscall.EINVAL) {
		t.Errorf("port 2: %v", err)
	}
	if _, err := Open(t.TempDir()); err == nil {
		t.Error("Open of a plain directory succeeded")
	}
	// A refused creation carries the errno and the daemon's reason.
	_, err = e.ctx.CreateCQ(1 << 30)
	var ve *Error
	if !isErrno(err, syscall.EINVAL) || !errors.As(err, &ve) || !strings.Contains(ve.Reason, "cqe") {
		t.Errorf("huge CQ: %v", err)
	}
}

func TestRCSendRecv(t *testing.T) {
	e := mount(t, testOpts)
	p := e.rcPair(QPTypeRC, 64, QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 2, MaxRecvSGE: 2, MaxInlineData: 64}, 4096)
	if p.a.Cap.MaxSendWR < 16 || p.a.Cap.MaxInlineData < 64 || p.a.Cap.MaxSendSGE < 2 {
		t.Fatalf("caps: %+v", p.a.Cap)
	}
	copy(p.ma.Buf[100:], "hello, ")
	copy(p.ma.Buf[200:], "verbs")
	e.must(p.b.PostRecv(RecvWR{WRID: 77, SGL: []SGE{p.mb.SGE(0, 64)}}))
	// Two SGEs gathered into one message, with immediate data.
	e.must(p.a.PostSend(SendWR{WRID: 1, Opcode: WRSendWithImm, SendFlags: SendSignaled | SendSolicited, ImmData: 0xdead,
		SGL: []SGE{p.ma.SGE(100, 7), p.ma.SGE(200, 5)}}))
	wcs := pollN(t, p.cq, 2)
	if wc := findWC(t, wcs, 1); wc.Status != WCSuccess || wc.Opcode != WCSend || wc.QPNum != p.a.QPN {
		t.Errorf("send wc: %+v", wc)
	}
	wc := findWC(t, wcs, 77)
	if wc.Status != WCSuccess || wc.Opcode != WCRecv || wc.ByteLen != 12 || wc.WCFlags&WCWithImm == 0 ||
		wc.ImmData != 0xdead || wc.QPNum != p.b.QPN || wc.SrcQP != p.a.QPN {
		t.Errorf("recv wc: %+v", wc)
	}
	if got := string(p.mb.Buf[:12]); got != "hello, verbs" {
		t.Errorf("received %q", got)
	}

	// Inline from an SGL: the bytes are taken at post time, so changing
	// the buffer right after PostSend does not change what is sent.
	e.must(p.b.PostRecv(RecvWR{WRID: 78, SGL: []SGE{p.mb.SGE(512, 64)}}))
	copy(p.ma.Buf[300:], "inline!")
	e.must(p.a.PostSend(SendWR{WRID: 2, Opcode: WRSend, SendFlags: SendSignaled | SendInline, SGL: []SGE{p.ma.SGE(300, 7)}}))
	copy(p.ma.Buf[300:], "XXXXXXX")
	wcs = pollN(t, p.cq, 2)
	if wc := findWC(t, wcs, 78); wc.Status != WCSuccess || wc.ByteLen != 7 || string(p.mb.Buf[512:519]) != "inline!" {
		t.Errorf("inline recv: %+v %q", wc, p.mb.Buf[512:519])
	}
	// InlineData given directly.
	e.must(p.b.PostRecv(RecvWR{WRID: 79, SGL: []SGE{p.mb.SGE(1024, 64)}}))
	e.must(p.a.PostSend(SendWR{WRID: 3, Opcode: WRSend, SendFlags: SendSignaled | SendInline, InlineData: []byte("direct")}))
	wcs = pollN(t, p.cq, 2)
	if wc := findWC(t, wcs, 79); wc.Status != WCSuccess || string(p.mb.Buf[1024:1030]) != "direct" {
		t.Errorf("inline data recv: %+v %q", wc, p.mb.Buf[1024:1030])
	}
	// An inline SGE outside the MR is refused at post time.
	err := p.a.PostSend(SendWR{WRID: 4, Opcode: WRSend, SendFlags: SendInline, SGL: []SGE{p.ma.SGE(4090, 40)}})
	var pe *PostError
	if !errors.As(err, &pe) || pe.Index != 0 || !isErrno(err, syscall.EINVAL) {
		t.Errorf("inline outside the MR: %v", err)
	}
	// Unsignaled sends complete nothing.
	e.must(p.b.PostRecv(RecvWR{WRID: 80, SGL: []SGE{p.mb.SGE(0, 64)}}))
	e.must(p.a.PostSend(SendWR{WRID: 5, Opcode: WRSend, SGL: []SGE{p.ma.SGE(0, 8)}}))
	if wc := pollN(t, p.cq, 1)[0]; wc.WRID != 80 {
		t.Errorf("unsignaled send completed: %+v", wc)
	}
}

func TestRCWriteReadAtomics(t *testing.T) {
	e := mount(t, testOpts)
	p := e.rcPair(QPTypeRC, 64, QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 2, MaxRecvSGE: 1}, 8192)

	t.Run("write", func(t *testing.T) {
		copy(p.ma.Buf, "written by rdma")
		e.must(p.a.PostSend(SendWR{WRID: 10, Opcode: WRRDMAWrite, SendFlags: SendSignaled,
			SGL: []SGE{p.ma.SGE(0, 15)}, RemoteAddr: p.mb.Addr(4000), RKey: p.mb.RKey}))
		if wc := pollN(t, p.cq, 1)[0]; wc.WRID != 10 || wc.Status != WCSuccess || wc.Opcode != WCRDMAWrite || wc.ByteLen != 15 {
			t.Errorf("write wc: %+v", wc)
		}
		if got := string(p.mb.Buf[4000:4015]); got != "written by rdma" {
			t.Errorf("remote memory: %q", got)
		}
	})
	t.Run("read", func(t *testing.T) {
		copy(p.mb.Buf[6000:], "read me back, please")
		e.must(p.a.PostSend(SendWR{WRID: 11, Opcode: WRRDMARead, SendFlags: SendSignaled,
			SGL: []SGE{p.ma.SGE(1000, 10), p.ma.SGE(2000, 10)}, RemoteAddr: p.mb.Addr(6000), RKey: p.mb.RKey}))
		if wc := pollN(t, p.cq, 1)[0]; wc.WRID != 11 || wc.Status != WCSuccess || wc.Opcode != WCRDMARead || wc.ByteLen != 20 {
			t.Errorf("read wc: %+v", wc)
		}
		if got := string(p.ma.Buf[1000:1010]) + string(p.ma.Buf[2000:2010]); got != "read me back, please" {
			t.Errorf("read scattered: %q", got)
		}
	})
	t.Run("atomics", func(t *testing.T) {
		binary.LittleEndian.PutUint64(p.mb.Buf[64:], 100)
		e.must(p.a.PostSend(SendWR{WRID: 12, Opcode: WRAtomicFetchAndAdd, SendFlags: SendSignaled,
			SGL: []SGE{p.ma.SGE(64, 8)}, RemoteAddr: p.mb.Addr(64), RKey: p.mb.RKey, CompareAdd: 5}))
		e.must(p.a.PostSend(SendWR{WRID: 13, Opcode: WRAtomicCmpAndSwp, SendFlags: SendSignaled,
			SGL: []SGE{p.ma.SGE(72, 8)}, RemoteAddr: p.mb.Addr(64), RKey: p.mb.RKey, CompareAdd: 105, Swap: 7}))
		wcs := pollN(t, p.cq, 2)
		if wc := findWC(t, wcs, 12); wc.Status != WCSuccess || wc.Opcode != WCFetchAdd {
			t.Errorf("fetch_add wc: %+v", wc)
		}
		if wc := findWC(t, wcs, 13); wc.Status != WCSuccess || wc.Opcode != WCCompSwap {
			t.Errorf("cmp_swap wc: %+v", wc)
		}
		if old := binary.LittleEndian.Uint64(p.ma.Buf[64:]); old != 100 {
			t.Errorf("fetch_add returned %d", old)
		}
		if old := binary.LittleEndian.Uint64(p.ma.Buf[72:]); old != 105 {
			t.Errorf("cmp_swap returned %d", old)
		}
		if v := binary.LittleEndian.Uint64(p.mb.Buf[64:]); v != 7 {
			t.Errorf("remote word %d, want 7", v)
		}
		// Misaligned: refused at post time.
		err := p.a.PostSend(SendWR{WRID: 14, Opcode: WRAtomicFetchAndAdd, SGL: []SGE{p.ma.SGE(64, 8)},
			RemoteAddr: p.mb.Addr(65), RKey: p.mb.RKey})
		if !isErrno(err, syscall.EINVAL) || !strings.Contains(err.Error(), "remote_addr") {
			t.Errorf("misaligned atomic: %v", err)
		}
	})
	t.Run("atomic_write", func(t *testing.T) {
		// The 8 bytes are the WR's CompareAdd, stored in the remote word as
		// one; no SGL.
		e.must(p.a.PostSend(SendWR{WRID: 18, Opcode: WRAtomicWrite, SendFlags: SendSignaled,
			RemoteAddr: p.mb.Addr(128), RKey: p.mb.RKey, CompareAdd: 0x1122334455667788}))
		if wc := pollN(t, p.cq, 1)[0]; wc.WRID != 18 || wc.Status != WCSuccess || wc.Opcode != WCAtomicWrite || wc.ByteLen != 8 {
			t.Errorf("atomic_write wc: %+v", wc)
		}
		if v := binary.LittleEndian.Uint64(p.mb.Buf[128:]); v != 0x1122334455667788 {
			t.Errorf("remote word %#x", v)
		}
		err := p.a.PostSend(SendWR{WRID: 19, Opcode: WRAtomicWrite, SGL: []SGE{p.ma.SGE(0, 8)},
			RemoteAddr: p.mb.Addr(128), RKey: p.mb.RKey})
		if !isErrno(err, syscall.EINVAL) || !strings.Contains(err.Error(), "sge") {
			t.Errorf("atomic_write with an sge: %v", err)
		}
	})
	t.Run("write_with_imm", func(t *testing.T) {
		e.must(p.b.PostRecv(RecvWR{WRID: 90}))
		copy(p.ma.Buf[500:], "imm")
		e.must(p.a.PostSend(SendWR{WRID: 15, Opcode: WRRDMAWriteWithImm, SendFlags: SendSignaled, ImmData: 4242,
			SGL: []SGE{p.ma.SGE(500, 3)}, RemoteAddr: p.mb.Addr(7000), RKey: p.mb.RKey}))
		wcs := pollN(t, p.cq, 2)
		if wc := findWC(t, wcs, 15); wc.Status != WCSuccess || wc.Opcode != WCRDMAWrite {
			t.Errorf("write_with_imm wc: %+v", wc)
		}
		if wc := findWC(t, wcs, 90); wc.Status != WCSuccess || wc.Opcode != WCRecvRDMAWithImm || wc.ImmData != 4242 ||
			wc.WCFlags&WCWithImm == 0 || wc.ByteLen != 3 {
			t.Errorf("recv_rdma_with_imm wc: %+v", wc)
		}
		if string(p.mb.Buf[7000:7003]) != "imm" {
			t.Errorf("remote memory: %q", p.mb.Buf[7000:7003])
		}
	})
	t.Run("remote_access_error", func(t *testing.T) {
		e.must(p.a.PostSend(SendWR{WRID: 16, Opcode: WRRDMAWrite, SendFlags: SendSignaled,
			SGL: []SGE{p.ma.SGE(0, 8)}, RemoteAddr: p.mb.Addr(0), RKey: p.mb.RKey + 1}))
		if wc := pollN(t, p.cq, 1)[0]; wc.WRID != 16 || wc.Status != WCRemAccessErr {
			t.Errorf("bad rkey wc: %+v", wc)
		}
		st, err := p.a.State()
		if err != nil || st != StateErr {
			t.Errorf("state after a remote access error: %v %v", st, err)
		}
		// In ERR, posts are accepted and flushed.
		e.must(p.a.PostSend(SendWR{WRID: 17, Opcode: WRSend, SendFlags: SendSignaled, SGL: []SGE{p.ma.SGE(0, 8)}}))
		if wc := findWC(t, pollN(t, p.cq, 1), 17); wc.Status != WCWRFlushErr {
			t.Errorf("flushed wc: %+v", wc)
		}
	})
}

func TestModifyQuery(t *testing.T) {
	e := mount(t, testOpts)
	pd, err := e.ctx.AllocPD()
	e.must(err)
	cq, err := e.ctx.CreateCQ(8)
	e.must(err)
	q, err := pd.CreateQP(QPInitAttr{Type: QPTypeRC, SendCQ: cq, RecvCQ: cq, Cap: QPCap{MaxSendWR: 3, MaxRecvWR: 5}})
	e.must(err)
	if q.Cap.MaxSendWR != 4 || q.Cap.MaxRecvWR != 8 {
		t.Errorf("caps %+v, want the powers of two", q.Cap)
	}
	// RESET → RTR is illegal; the reason names it.
	err = q.Modify(&QPAttr{QPState: StateRTR}, QPAttrState)
	var ve *Error
	if !isErrno(err, syscall.EINVAL) || !errors.As(err, &ve) || ve.Reason == "" {
		t.Errorf("RESET→RTR: %v", err)
	}
	// INIT without port_num: the missing attribute is named.
	err = q.Modify(&QPAttr{QPState: StateInit}, QPAttrState)
	if !isErrno(err, syscall.EINVAL) {
		t.Errorf("INIT without required attributes: %v", err)
	}
	if err := q.Modify(&QPAttr{QPState: StateInit, PortNum: 1, QPAccessFlags: AccessRemoteWrite},
		QPAttrState|QPAttrPort|QPAttrPKeyIndex|QPAttrAccessFlags); err != nil {
		t.Fatal(err)
	}
	a, err := q.Query()
	e.must(err)
	if a.QPState != StateInit || a.PortNum != 1 || a.QPAccessFlags != AccessRemoteWrite || a.Cap != q.Cap {
		t.Errorf("query: %+v", a)
	}
	// Sends need RTS: refused by the library.
	if err := q.PostSend(SendWR{Opcode: WRSend}); !isErrno(err, syscall.EINVAL) {
		t.Errorf("post in INIT: %v", err)
	}
	if err := q.Modify(&QPAttr{RateLimit: 1}, QPAttrRateLimit); !isErrno(err, syscall.EOPNOTSUPP) {
		t.Errorf("rate_limit: %v", err)
	}
	e.must(q.Destroy())
}

func TestUD(t *testing.T) {
	e := mount(t, testOpts)
	pd, err := e.ctx.AllocPD()
	e.must(err)
	cq, err := e.ctx.CreateCQ(16)
	e.must(err)
	mr, err := pd.RegMR(4096, AccessLocalWrite)
	e.must(err)
	init := QPInitAttr{Type: QPTypeUD, SendCQ: cq, RecvCQ: cq, Cap: QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}
	a, err := pd.CreateQP(init)
	e.must(err)
	b, err := pd.CreateQP(init)
	e.must(err)
	for _, q := range []*QP{a, b} {
		e.must(q.Connect(ConnectAttr{QKey: 0x1234}))
	}
	ah, err := pd.CreateAH(AHAttr{DGID: e.gid, HopLimit: 64})
	e.must(err)
	copy(mr.Buf[1024:], "datagram!")
	e.must(b.PostRecv(RecvWR{WRID: 5, SGL: []SGE{mr.SGE(0, 512)}}))
	e.must(a.PostSend(SendWR{WRID: 6, Opcode: WRSendWithImm, SendFlags: SendSignaled, ImmData: 42,
		SGL: []SGE{mr.SGE(1024, 9)}, AH: ah.Handle, RemoteQPN: b.QPN, RemoteQKey: 0x1234}))
	wcs := pollN(t, cq, 2)
	if wc := findWC(t, wcs, 6); wc.Status != WCSuccess || wc.Opcode != WCSend {
		t.Errorf("ud send wc: %+v", wc)
	}
	wc := findWC(t, wcs, 5)
	if wc.Status != WCSuccess || wc.ByteLen != 40+9 || wc.SrcQP != a.QPN || wc.WCFlags != WCGRH|WCWithImm || wc.ImmData != 42 {
		t.Errorf("ud recv wc: %+v", wc)
	}
	if got := string(mr.Buf[40:49]); got != "datagram!" {
		t.Errorf("payload after the GRH: %q", got)
	}
	// The GRH carries the source GID (bytes 8-23) of the sender's port.
	if !bytes.Equal(mr.Buf[8:24], e.gid[:]) {
		t.Errorf("GRH sgid % x, want % x", mr.Buf[8:24], e.gid[:])
	}
	// UD needs an AH: refused at post time.
	if err := a.PostSend(SendWR{WRID: 7, Opcode: WRSend, SGL: []SGE{mr.SGE(0, 1)}}); !isErrno(err, syscall.EINVAL) {
		t.Errorf("ud send without ah: %v", err)
	}
	e.must(a.Destroy())
	e.must(b.Destroy())
	e.must(ah.Destroy())
}

func TestSRQ(t *testing.T) {
	e := mount(t, testOpts)
	pd, err := e.ctx.AllocPD()
	e.must(err)
	cq, err := e.ctx.CreateCQ(16)
	e.must(err)
	mr, err := pd.RegMR(4096, allAccess)
	e.must(err)
	srq, err := pd.CreateSRQ(SRQInitAttr{MaxWR: 8, MaxSGE: 1})
	e.must(err)
	a, err := pd.CreateQP(QPInitAttr{Type: QPTypeRC, SendCQ: cq, RecvCQ: cq, Cap: QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	e.must(err)
	b, err := pd.CreateQP(QPInitAttr{Type: QPTypeRC, SendCQ: cq, RecvCQ: cq, SRQ: srq, Cap: QPCap{MaxSendWR: 4, MaxSendSGE: 1}})
	e.must(err)
	e.connect(a, b)
	e.connect(b, a)
	if err := b.PostRecv(RecvWR{WRID: 1}); !isErrno(err, syscall.EINVAL) {
		t.Errorf("post_recv on an SRQ QP: %v", err)
	}
	e.must(srq.PostSRQRecv(RecvWR{WRID: 21, SGL: []SGE{mr.SGE(2048, 100)}}, RecvWR{WRID: 22, SGL: []SGE{mr.SGE(3072, 100)}}))
	if at, err := srq.Query(); err != nil || at.Pending != 2 {
		t.Errorf("srq attr: %+v %v", at, err)
	}
	copy(mr.Buf, "to the srq")
	e.must(a.PostSend(SendWR{WRID: 1, Opcode: WRSend, SendFlags: SendSignaled, SGL: []SGE{mr.SGE(0, 10)}}))
	wcs := pollN(t, cq, 2)
	if wc := findWC(t, wcs, 21); wc.Status != WCSuccess || wc.QPNum != b.QPN || string(mr.Buf[2048:2058]) != "to the srq" {
		t.Errorf("srq recv: %+v %q", wc, mr.Buf[2048:2058])
	}
	if err := srq.Destroy(); !isErrno(err, syscall.EBUSY) {
		t.Errorf("destroy of a used srq: %v", err)
	}
	e.must(b.Destroy())
	e.must(srq.Destroy())
}

func TestPostErrors(t *testing.T) {
	e := mount(t, testOpts)
	p := e.rcPair(QPTypeRC, 64, QPCap{MaxSendWR: 8, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}, 4096)
	n := int(p.a.Cap.MaxSendWR)
	// One batch of n+1 WRs: the free space is taken once per batch, so
	// WR n does not fit whatever the engine does meanwhile.
	wrs := make([]SendWR, n+1)
	for i := range wrs {
		wrs[i] = SendWR{WRID: uint64(i), Opcode: WRRDMAWrite, SendFlags: SendSignaled,
			SGL: []SGE{p.ma.SGE(0, 8)}, RemoteAddr: p.mb.Addr(0), RKey: p.mb.RKey}
	}
	err := p.a.PostSend(wrs...)
	var pe *PostError
	if !errors.As(err, &pe) || pe.Index != n || !isErrno(err, syscall.ENOMEM) {
		t.Fatalf("full send queue: %v", err)
	}
	for i, wc := range pollN(t, p.cq, n) {
		if wc.WRID != uint64(i) || wc.Status != WCSuccess {
			t.Errorf("wc %d: %+v", i, wc)
		}
	}
	// A bad WR in the middle: the ones before it are posted and complete.
	tooMany := make([]SGE, p.a.Cap.MaxSendSGE+1)
	for i := range tooMany {
		tooMany[i] = p.ma.SGE(i, 1)
	}
	bad := []SendWR{wrs[0], wrs[1], {WRID: 99, Opcode: WRSend, SGL: tooMany}, wrs[3]}
	err = p.a.PostSend(bad...)
	if !errors.As(err, &pe) || pe.Index != 2 || !isErrno(err, syscall.EINVAL) || !strings.Contains(err.Error(), "sge") {
		t.Fatalf("bad wr: %v", err)
	}
	var qe *qp.Error
	if !errors.As(err, &qe) || qe.Key != "sge" {
		t.Errorf("bad wr: the reason does not name the field: %v", err)
	}
	if wcs := pollN(t, p.cq, 2); wcs[0].WRID != 0 || wcs[1].WRID != 1 {
		t.Errorf("completions of the WRs before the bad one: %+v", wcs)
	}
	// Unknown opcode, and a receive queue overflow.
	if err := p.a.PostSend(SendWR{Opcode: 77}); !errors.As(err, &pe) || pe.Index != 0 {
		t.Errorf("unknown opcode: %v", err)
	}
	recvs := make([]RecvWR, p.b.Cap.MaxRecvWR+1)
	if err := p.b.PostRecv(recvs...); !errors.As(err, &pe) || pe.Index != int(p.b.Cap.MaxRecvWR) || !isErrno(err, syscall.ENOMEM) {
		t.Errorf("full receive queue: %v", err)
	}
}

// TestConcurrentPostSend: 8 goroutines post to one QP; every WR completes
// exactly once.
func TestConcurrentPostSend(t *testing.T) {
	e := mount(t, testOpts)
	const goroutines, perG = 8, 200
	const cqe = 128
	p := e.rcPair(QPTypeRC, cqe, QPCap{MaxSendWR: 32, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}, 4096)
	// At most cqe WRs are posted and not yet polled, so the CQ cannot
	// overflow.
	credits := make(chan struct{}, cqe)
	for range cqe {
		credits <- struct{}{}
	}
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perG {
				<-credits
				wr := SendWR{WRID: uint64(g)<<32 | uint64(i), Opcode: WRRDMAWrite, SendFlags: SendSignaled,
					SGL: []SGE{p.ma.SGE(g*8, 8)}, RemoteAddr: p.mb.Addr(g * 8), RKey: p.mb.RKey}
				for {
					err := p.a.PostSend(wr)
					if err == nil {
						break
					}
					if !isErrno(err, syscall.ENOMEM) {
						errs <- err
						return
					}
					time.Sleep(20 * time.Microsecond)
				}
			}
		}()
	}
	seen := map[uint64]int{}
	buf := make([]WC, 32)
	deadline := time.Now().Add(30 * time.Second)
	for len(seen) < goroutines*perG && time.Now().Before(deadline) {
		select {
		case err := <-errs:
			t.Fatal(err)
		default:
		}
		n, err := p.cq.PollCQ(buf)
		e.must(err)
		for _, wc := range buf[:n] {
			if wc.Status != WCSuccess {
				t.Fatalf("wc: %+v", wc)
			}
			seen[wc.WRID]++
			credits <- struct{}{}
		}
		if n == 0 {
			time.Sleep(20 * time.Microsecond)
		}
	}
	wg.Wait()
	if len(seen) != goroutines*perG {
		t.Fatalf("%d distinct completions, want %d", len(seen), goroutines*perG)
	}
	for id, c := range seen {
		if c != 1 || id>>32 >= goroutines || id&0xffffffff >= perG {
			t.Errorf("wr_id %#x completed %d times", id, c)
		}
	}
	if n, _ := p.cq.PollCQ(buf); n != 0 {
		t.Errorf("%d extra completions", n)
	}
}

func TestCQEvents(t *testing.T) {
	e := mount(t, testOpts)
	p := e.rcPair(QPTypeRC, 16, QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}, 4096)
	write := SendWR{WRID: 1, Opcode: WRRDMAWrite, SendFlags: SendSignaled, SGL: []SGE{p.ma.SGE(0, 8)},
		RemoteAddr: p.mb.Addr(0), RKey: p.mb.RKey}

	// Not armed: no event; the wait ends with the context.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	start := time.Now()
	err := p.cq.GetCQEvent(ctx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 2*time.Second {
		t.Fatalf("unarmed wait: %v after %v", err, time.Since(start))
	}
	// Armed, then a completion from another goroutine wakes the waiter.
	e.must(p.cq.ReqNotifyCQ(false))
	done := make(chan error, 1)
	go func() { done <- p.cq.GetCQEvent(context.Background()) }()
	time.Sleep(20 * time.Millisecond)
	e.must(p.a.PostSend(write))
	select {
	case err := <-done:
		e.must(err)
	case <-time.After(10 * time.Second):
		t.Fatal("no CQ event after a completion")
	}
	pollN(t, p.cq, 1)
	// The event was taken: the next wait blocks until cancelled.
	ctx, cancel = context.WithCancel(context.Background())
	go func() { time.Sleep(30 * time.Millisecond); cancel() }()
	if err := p.cq.GetCQEvent(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("second wait: %v", err)
	}
	// Solicited only: an unsolicited completion fires nothing; an error
	// completion does. The channel FIFO gets a line per event.
	ch, err := p.cq.Channel()
	e.must(err)
	defer ch.Close()
	e.must(p.cq.ReqNotifyCQ(true))
	e.must(p.a.PostSend(write))
	pollN(t, p.cq, 1)
	ctx, cancel = context.WithTimeout(context.Background(), 60*time.Millisecond)
	if err := p.cq.GetCQEvent(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("solicited-only fired on an unsolicited completion: %v", err)
	}
	cancel()
	// solicited does not weaken a pending next.
	e.must(p.cq.ReqNotifyCQ(false))
	e.must(p.cq.ReqNotifyCQ(true))
	e.must(p.a.PostSend(write))
	e.must(p.cq.GetCQEvent(context.Background()))
	pollN(t, p.cq, 1)
	line := make([]byte, 64)
	n, _ := ch.Read(line)
	if !strings.Contains(string(line[:n]), "event cq=") {
		t.Errorf("channel: %q", line[:n])
	}
}

func TestCQResize(t *testing.T) {
	e := mount(t, testOpts)
	p := e.rcPair(QPTypeRC, 4, QPCap{MaxSendWR: 4, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}, 4096)
	if p.cq.CQE() != 4 {
		t.Fatalf("cqe %d", p.cq.CQE())
	}
	w := func(id uint64) SendWR {
		return SendWR{WRID: id, Opcode: WRRDMAWrite, SendFlags: SendSignaled, SGL: []SGE{p.ma.SGE(0, 8)},
			RemoteAddr: p.mb.Addr(0), RKey: p.mb.RKey}
	}
	e.must(p.a.PostSend(w(1), w(2), w(3)))
	deadline := time.Now().Add(10 * time.Second)
	for e.dev.Counters.Completions.Load() < 3 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Microsecond)
	}
	e.must(p.cq.ReqNotifyCQ(false))
	oldRing := p.cq.r
	e.must(p.cq.Resize(100))
	if p.cq.CQE() != 128 || p.cq.r == oldRing {
		t.Fatalf("after resize: cqe %d, ring remapped %v", p.cq.CQE(), p.cq.r != oldRing)
	}
	// The three completions moved to the new ring, and the arming too.
	e.must(p.a.PostSend(w(4)))
	e.must(p.cq.GetCQEvent(context.Background()))
	wcs := pollN(t, p.cq, 4)
	for i, wc := range wcs {
		if wc.WRID != uint64(i+1) || wc.Status != WCSuccess {
			t.Errorf("wc %d: %+v", i, wc)
		}
	}
	// More than 4 outstanding now fit.
	for i := range 20 {
		e.must(postRetry(p.a, w(uint64(10+i))))
	}
	pollN(t, p.cq, 20)
	if err := p.cq.Resize(0); !isErrno(err, syscall.EINVAL) {
		t.Errorf("resize to 0: %v", err)
	}
}

func TestDestroyBusy(t *testing.T) {
	e := mount(t, testOpts)
	pd, err := e.ctx.AllocPD()
	e.must(err)
	cq, err := e.ctx.CreateCQ(8)
	e.must(err)
	mr, err := pd.RegMR(4096, AccessLocalWrite)
	e.must(err)
	q, err := pd.CreateQP(QPInitAttr{Type: QPTypeRC, SendCQ: cq, RecvCQ: cq, Cap: QPCap{MaxSendWR: 1, MaxRecvWR: 1}})
	e.must(err)
	var ve *Error
	if err := cq.Destroy(); !isErrno(err, syscall.EBUSY) || !errors.As(err, &ve) || !strings.Contains(ve.Reason, "cq") {
		t.Errorf("destroy of a used cq: %v", err)
	}
	if err := pd.Dealloc(); !isErrno(err, syscall.EBUSY) {
		t.Errorf("dealloc of a used pd: %v", err)
	}
	// The CQ still works after the refused destroy.
	if _, err := cq.PollCQ(make([]WC, 1)); err != nil {
		t.Errorf("poll after a refused destroy: %v", err)
	}
	e.must(q.Destroy())
	if err := q.PostSend(SendWR{}); !isErrno(err, syscall.EBADF) {
		t.Errorf("post to a destroyed qp: %v", err)
	}
	e.must(cq.Destroy())
	if _, err := cq.PollCQ(make([]WC, 1)); !isErrno(err, syscall.EBADF) {
		t.Errorf("poll of a destroyed cq: %v", err)
	}
	e.must(mr.Dereg())
	e.must(pd.Dealloc())
	if err := pd.Dealloc(); !isErrno(err, syscall.ENOENT) {
		t.Errorf("second dealloc: %v", err)
	}
}

func TestAsyncEvents(t *testing.T) {
	e := mount(t, testOpts)
	// Nothing queued: the read blocks and is interrupted by the context.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	start := time.Now()
	evs, err := e.ctx.ReadAsyncEvents(ctx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 5*time.Second {
		t.Fatalf("empty events: %v %v after %v", evs, err, time.Since(start))
	}
	// The first message received in RTR raises comm_est.
	pd, err := e.ctx.AllocPD()
	e.must(err)
	cq, err := e.ctx.CreateCQ(8)
	e.must(err)
	mr, err := pd.RegMR(4096, allAccess)
	e.must(err)
	init := QPInitAttr{Type: QPTypeRC, SendCQ: cq, RecvCQ: cq, Cap: QPCap{MaxSendWR: 2, MaxRecvWR: 2, MaxSendSGE: 1, MaxRecvSGE: 1}}
	a, err := pd.CreateQP(init)
	e.must(err)
	b, err := pd.CreateQP(init)
	e.must(err)
	e.connect(a, b)
	e.must(b.Modify(&QPAttr{QPState: StateInit, PortNum: 1, QPAccessFlags: allAccess}, QPAttrState|QPAttrPort|QPAttrPKeyIndex|QPAttrAccessFlags))
	rtr := QPAttr{QPState: StateRTR, PathMTU: MTU1024, DestQPNum: a.QPN, MaxDestRdAtomic: 1, MinRNRTimer: 12}
	rtr.AH.DGID = e.gid
	e.must(b.Modify(&rtr, QPAttrState|QPAttrPathMTU|QPAttrDestQPN|QPAttrRQPSN|QPAttrAV|QPAttrMaxDestRdAtomic|QPAttrMinRNRTimer))
	e.must(b.PostRecv(RecvWR{WRID: 1, SGL: []SGE{mr.SGE(0, 64)}}))
	e.must(a.PostSend(SendWR{WRID: 2, Opcode: WRSend, SendFlags: SendSignaled, SGL: []SGE{mr.SGE(100, 4)}}))
	pollN(t, cq, 2)
	evs, err = e.ctx.ReadAsyncEvents(context.Background())
	e.must(err)
	if len(evs) != 1 || evs[0].Type != qp.EventCommEst || evs[0].Kind != "qp" || evs[0].Handle != b.QPN {
		t.Errorf("events: %+v", evs)
	}
}

// TestSendSlotFreeAtCompletion: once a send completion is polled, its SQ
// slot is free again (rxe advances the SQ consumer before it posts the
// CQE), so a QP with a one-deep send queue can post, poll, post, ...
func TestSendSlotFreeAtCompletion(t *testing.T) {
	e := mount(t, testOpts)
	p := e.rcPair(QPTypeRC, 4, QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}, 4096)
	if p.a.Cap.MaxSendWR != 1 {
		t.Fatalf("max_send_wr %d", p.a.Cap.MaxSendWR)
	}
	wr := SendWR{WRID: 1, Opcode: WRRDMAWrite, SendFlags: SendSignaled, SGL: []SGE{p.ma.SGE(0, 8)},
		RemoteAddr: p.mb.Addr(0), RKey: p.mb.RKey}
	for i := range 500 {
		if err := p.a.PostSend(wr); err != nil {
			t.Fatalf("post %d after its predecessor's completion was polled: %v", i, err)
		}
		if i%2 == 1 {
			// Sleep until the CQE's event: the waiter runs the moment
			// the completion is published.
			e.must(p.cq.ReqNotifyCQ(false))
			if n, _ := p.cq.PollCQ(make([]WC, 1)); n == 1 {
				continue
			}
			e.must(p.cq.GetCQEvent(context.Background()))
		}
		pollN(t, p.cq, 1)
	}
}

// TestRecvFlushInErr: receives posted to a QP in ERR complete at once with
// wr_flush_err.
func TestRecvFlushInErr(t *testing.T) {
	e := mount(t, testOpts)
	p := e.rcPair(QPTypeRC, 16, QPCap{MaxSendWR: 2, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}, 4096)
	e.must(p.b.Modify(&QPAttr{QPState: StateErr}, QPAttrState))
	e.must(p.b.PostRecv(RecvWR{WRID: 5, SGL: []SGE{p.mb.SGE(0, 8)}}, RecvWR{WRID: 6}))
	wcs := pollN(t, p.cq, 2)
	for i, wc := range wcs {
		if wc.WRID != uint64(5+i) || wc.Status != WCWRFlushErr || wc.Opcode != WCRecv || wc.QPNum != p.b.QPN {
			t.Errorf("wc %d: %+v", i, wc)
		}
	}
}

// TestUDMulticast: two UD QPs join a group with AttachMcast; a send to
// the group (QPN 0xFFFFFF) reaches both and not the sender, which is not
// attached; after DetachMcast only the other gets the next one; the rules
// are EINVAL.
func TestUDMulticast(t *testing.T) {
	e := mount(t, testOpts)
	pd, err := e.ctx.AllocPD()
	e.must(err)
	cq, err := e.ctx.CreateCQ(16)
	e.must(err)
	mr, err := pd.RegMR(4096, AccessLocalWrite)
	e.must(err)
	init := QPInitAttr{Type: QPTypeUD, SendCQ: cq, RecvCQ: cq, Cap: QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}
	var qps [3]*QP
	for i := range qps {
		qps[i], err = pd.CreateQP(init)
		e.must(err)
		e.must(qps[i].Connect(ConnectAttr{QKey: 0x1234}))
	}
	a, b, c := qps[0], qps[1], qps[2]
	if da, err := e.ctx.QueryDevice(); err != nil || da.MaxMcastGrp == 0 || da.MaxMcastQPAttach == 0 || da.MaxTotalMcastQPAttach == 0 {
		t.Fatalf("multicast limits: %+v %v", da, err)
	}
	grp := [16]byte{0xff, 0x0e, 14: 0x12, 15: 0x34}
	const lid = 0xc123
	if err := b.AttachMcast([16]byte{0xfe, 0x80, 15: 1}, lid); !isErrno(err, syscall.EINVAL) {
		t.Fatalf("attach to a unicast GID: %v", err)
	}
	if err := b.DetachMcast(grp, lid); !isErrno(err, syscall.EINVAL) {
		t.Fatalf("detach before attach: %v", err)
	}
	e.must(b.AttachMcast(grp, lid))
	e.must(c.AttachMcast(grp, lid))
	ah, err := pd.CreateAH(AHAttr{DGID: grp, HopLimit: 64})
	e.must(err)
	copy(mr.Buf[3000:], "to all")
	send := func(wr uint64) {
		e.must(a.PostSend(SendWR{WRID: wr, Opcode: WRSend, SendFlags: SendSignaled,
			SGL: []SGE{mr.SGE(3000, 6)}, AH: ah.Handle, RemoteQPN: 0xFFFFFF, RemoteQKey: 0x1234}))
	}
	e.must(b.PostRecv(RecvWR{WRID: 11, SGL: []SGE{mr.SGE(0, 512)}}))
	e.must(c.PostRecv(RecvWR{WRID: 12, SGL: []SGE{mr.SGE(1024, 512)}}))
	send(1)
	wcs := pollN(t, cq, 3)
	for _, x := range []struct {
		id uint64
		q  *QP
	}{{11, b}, {12, c}} {
		if wc := findWC(t, wcs, x.id); wc.Status != WCSuccess || wc.QPNum != x.q.QPN || wc.SrcQP != a.QPN || wc.ByteLen != 46 {
			t.Errorf("member %d: %+v", x.q.QPN, wc)
		}
	}
	if string(mr.Buf[40:46]) != "to all" || string(mr.Buf[1064:1070]) != "to all" {
		t.Errorf("payloads %q %q", mr.Buf[40:46], mr.Buf[1064:1070])
	}
	e.must(c.DetachMcast(grp, lid))
	e.must(b.PostRecv(RecvWR{WRID: 13, SGL: []SGE{mr.SGE(0, 512)}}))
	e.must(c.PostRecv(RecvWR{WRID: 14, SGL: []SGE{mr.SGE(1024, 512)}}))
	send(2)
	wcs = pollN(t, cq, 2)
	findWC(t, wcs, 2)
	findWC(t, wcs, 13)
	time.Sleep(20 * time.Millisecond)
	extra := make([]WC, 4)
	if n, _ := cq.PollCQ(extra); n != 0 {
		t.Errorf("after detach: %+v", extra[:n])
	}
}
