package device

import (
	"fmt"
	"testing"

	"rdmafs/qp"
)

// The error rows of VERBS.md §4.4, each as an engine test.

func TestRCRecvTooSmall(t *testing.T) {
	e := newEnv(t)
	a, b, acq, bcq := e.pair(qp.TypeRC)
	src, dst := e.mr(8192, 0), e.mr(8192, qp.AccessLocalWrite)
	e.postRecv(b, fmt.Sprintf("wr_id=9 sge=%d:0:1000", dst.LKey), fmt.Sprintf("wr_id=10 sge=%d:0:8192", dst.LKey), fmt.Sprintf("wr_id=11 sge=%d:0:8192", dst.LKey))
	e.postSend(a,
		fmt.Sprintf("opcode=send wr_id=1 send_flags=signaled sge=%d:0:2000", src.LKey),
		fmt.Sprintf("opcode=send wr_id=2 send_flags=signaled sge=%d:0:10", src.LKey),
		fmt.Sprintf("opcode=send wr_id=3 sge=%d:0:10", src.LKey))
	e.expect(acq, cat(sendWC(1, "rem_inv_req_err", "send", a, 0), flushed(a, "send", 2, 3))...)
	e.expect(bcq, cat(recvWC(9, "loc_len_err", "recv", b, 0, nil, ""), flushed(b, "recv", 10, 11))...)
	e.state(a, qp.StateErr)
	e.state(b, qp.StateErr)
	e.expectEvents(fmt.Sprintf("event=qp_req_err qp=%d", b.QPN))
	if ca, cb := e.qpCounters(a), e.qpCounters(b); ca.InvReqNaksRecv != 1 || cb.InvReqNaksSent != 1 || ca.RemoteErrNak != 1 {
		t.Fatalf("requester %+v responder %+v", ca, cb)
	}
}

func TestRCRecvBadLKey(t *testing.T) {
	e := newEnv(t)
	a, b, acq, bcq := e.pair(qp.TypeRC)
	src, ro := e.mr(8192, 0), e.mr(8192, 0) // ro: no local_write
	e.postRecv(b, fmt.Sprintf("wr_id=9 sge=%d:0:100", ro.LKey), fmt.Sprintf("wr_id=10 sge=%d:0:100", ro.LKey))
	e.postSend(a, fmt.Sprintf("opcode=send wr_id=1 sge=%d:0:10", src.LKey))
	e.expect(acq, sendWC(1, "rem_op_err", "send", a, 0))
	e.expect(bcq, cat(recvWC(9, "loc_prot_err", "recv", b, 0, nil, ""), flushed(b, "recv", 10))...)
	e.state(a, qp.StateErr)
	e.state(b, qp.StateErr)
	e.expectEvents(fmt.Sprintf("event=qp_req_err qp=%d", b.QPN))
	if ca, cb := e.qpCounters(a), e.qpCounters(b); ca.RemOpNaksRecv != 1 || cb.RemOpNaksSent != 1 {
		t.Fatalf("requester %+v responder %+v", ca, cb)
	}
}

func TestRCRemoteAccessErrors(t *testing.T) {
	type tc struct {
		name string
		// op builds the WR from the local lkey and the remote MRs.
		op     func(lkey uint32, good, noAcc, otherPD *MR) string
		opcode string
	}
	write := func(addr uint64, n int, rkey func(good, noAcc, otherPD *MR) uint32) func(uint32, *MR, *MR, *MR) string {
		return func(lkey uint32, g, na, o *MR) string {
			return fmt.Sprintf("opcode=rdma_write wr_id=1 sge=%d:0:%d remote_addr=%d rkey=%d", lkey, n, addr, rkey(g, na, o))
		}
	}
	read := func(addr uint64, n int, rkey func(good, noAcc, otherPD *MR) uint32) func(uint32, *MR, *MR, *MR) string {
		return func(lkey uint32, g, na, o *MR) string {
			return fmt.Sprintf("opcode=rdma_read wr_id=1 sge=%d:0:%d remote_addr=%d rkey=%d", lkey, n, addr, rkey(g, na, o))
		}
	}
	atomic := func(addr uint64, rkey func(good, noAcc, otherPD *MR) uint32) func(uint32, *MR, *MR, *MR) string {
		return func(lkey uint32, g, na, o *MR) string {
			return fmt.Sprintf("opcode=atomic_fetch_and_add wr_id=1 sge=%d:0:8 remote_addr=%d rkey=%d compare_add=1", lkey, addr, rkey(g, na, o))
		}
	}
	good := func(g, na, o *MR) uint32 { return g.RKey }
	badKey := func(g, na, o *MR) uint32 { return g.RKey ^ 0x1 }
	noIdx := func(g, na, o *MR) uint32 { return 0x7fff00 }
	noAcc := func(g, na, o *MR) uint32 { return na.RKey }
	other := func(g, na, o *MR) uint32 { return o.RKey }
	for _, c := range []tc{
		{"WriteBadRKey", write(0, 100, badKey), "rdma_write"},
		{"WriteUnknownKey", write(0, 100, noIdx), "rdma_write"},
		{"WriteOutOfRange", write(4000, 100, good), "rdma_write"},
		{"WriteBeforeStart", write(1<<64-50, 100, good), "rdma_write"},
		{"WriteOtherPD", write(0, 100, other), "rdma_write"},
		{"WriteNoRemoteWrite", write(0, 100, noAcc), "rdma_write"},
		{"MultiPacketWriteOutOfRange", write(1000, 3100, good), "rdma_write"},
		{"ReadBadRKey", read(0, 100, badKey), "rdma_read"},
		{"ReadOutOfRange", read(4090, 7, good), "rdma_read"},
		{"ReadOtherPD", read(0, 100, other), "rdma_read"},
		{"ReadNoRemoteRead", read(0, 100, noAcc), "rdma_read"},
		{"AtomicBadRKey", atomic(0, badKey), "fetch_add"},
		{"AtomicOutOfRange", atomic(4096, good), "fetch_add"},
		{"AtomicOtherPD", atomic(0, other), "fetch_add"},
		{"AtomicNoRemoteAtomic", atomic(0, noAcc), "fetch_add"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			a, b, acq, bcq := e.pair(qp.TypeRC)
			local := e.mr(8192, qp.AccessLocalWrite)
			g := e.mr(4096, rwAccess)
			na := e.mr(4096, qp.AccessLocalWrite) // no remote rights at all
			o := e.foreignMR(4096, rwAccess)
			e.postRecv(b, fmt.Sprintf("wr_id=9 sge=%d:0:100", g.LKey))
			e.postSend(a, c.op(local.LKey, g, na, o), fmt.Sprintf("opcode=send wr_id=2 sge=%d:0:8", local.LKey))
			e.expect(acq, sendWC(1, "rem_access_err", c.opcode, a, 0), flushed(a, "send", 2)[0])
			e.expect(bcq, flushed(b, "recv", 9)...)
			e.state(a, qp.StateErr)
			e.state(b, qp.StateErr)
			e.expectEvents(fmt.Sprintf("event=qp_access_err qp=%d", b.QPN))
			for _, m := range []*MR{g, na, o} {
				for _, x := range m.Mem() {
					if x != 0 {
						t.Fatal("a refused request changed memory")
					}
				}
			}
		})
	}
}

func TestRCOpNotAllowedByQPAccess(t *testing.T) {
	for _, c := range []struct{ name, acc, op, opcode string }{
		{"Write", "local_write,remote_read,remote_atomic", "opcode=rdma_write wr_id=1 sge=%d:0:8 remote_addr=0 rkey=%d", "rdma_write"},
		{"WriteWithImm", "local_write,remote_read", "opcode=rdma_write_with_imm wr_id=1 sge=%d:0:8 remote_addr=0 rkey=%d", "rdma_write"},
		{"Read", "local_write,remote_write,remote_atomic", "opcode=rdma_read wr_id=1 sge=%d:0:8 remote_addr=0 rkey=%d", "rdma_read"},
		{"Atomic", "local_write,remote_write,remote_read", "opcode=atomic_cmp_and_swp wr_id=1 sge=%d:0:8 remote_addr=0 rkey=%d", "comp_swap"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			a, b, acq, bcq := e.pairX(qp.TypeRC, "", "qp_access_flags="+c.acc)
			local, remote := e.mr(64, qp.AccessLocalWrite), e.mr(64, rwAccess)
			e.postRecv(b, fmt.Sprintf("wr_id=9 sge=%d:0:64", local.LKey))
			e.postSend(a, fmt.Sprintf(c.op, local.LKey, remote.RKey))
			e.expect(acq, sendWC(1, "rem_inv_req_err", c.opcode, a, 0))
			e.expect(bcq, flushed(b, "recv", 9)...)
			e.state(a, qp.StateErr)
			e.state(b, qp.StateErr)
			e.expectEvents(fmt.Sprintf("event=qp_req_err qp=%d", b.QPN))
		})
	}
}

func TestRCReadWithoutResponderResources(t *testing.T) {
	e := newEnv(t)
	a, b, acq, bcq := e.pairX(qp.TypeRC, "", "max_dest_rd_atomic=0")
	local, remote := e.mr(64, qp.AccessLocalWrite), e.mr(64, rwAccess)
	e.postSend(a, fmt.Sprintf("opcode=rdma_read wr_id=1 sge=%d:0:8 remote_addr=0 rkey=%d", local.LKey, remote.RKey))
	e.expect(acq, sendWC(1, "rem_inv_req_err", "rdma_read", a, 0))
	e.expect(bcq)
	e.state(a, qp.StateErr)
	e.state(b, qp.StateErr)
	e.expectEvents(fmt.Sprintf("event=qp_req_err qp=%d", b.QPN))
}

func TestRCMisalignedAtomic(t *testing.T) {
	e := newEnv(t)
	a, b, acq, bcq := e.pair(qp.TypeRC)
	local := e.mr(64, qp.AccessLocalWrite)
	// remote_addr is 8-byte aligned in the MR's iova space (post checks
	// that), but the MR's iova is 3 bytes off its memory.
	remote, err := e.d.RegMR(0, qp.CreateMR{PD: e.pd.Handle, Length: 64, IOVA: 3, HasIOVA: true, Access: rwAccess})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.trySend(a, fmt.Sprintf("opcode=atomic_fetch_and_add sge=%d:0:8 remote_addr=13 rkey=%d", local.LKey, remote.RKey)); Errno(err) != 22 {
		t.Fatalf("misaligned remote_addr at post: %v, want EINVAL", err)
	}
	e.postSend(a, fmt.Sprintf("opcode=atomic_fetch_and_add wr_id=1 sge=%d:0:8 remote_addr=8 rkey=%d compare_add=1", local.LKey, remote.RKey))
	e.expect(acq, sendWC(1, "rem_inv_req_err", "fetch_add", a, 0))
	e.expect(bcq)
	e.state(a, qp.StateErr)
	e.state(b, qp.StateErr)
	e.expectEvents(fmt.Sprintf("event=qp_req_err qp=%d", b.QPN))
	for _, x := range remote.Mem() {
		if x != 0 {
			t.Fatal("misaligned atomic changed memory")
		}
	}
}

func TestRCLocalProtectionError(t *testing.T) {
	for _, c := range []struct{ name, op, opcode string }{
		{"SendBadLKey", "opcode=send wr_id=1 sge=%[1]d:0:8 sge=%[3]d:0:8", "send"},
		{"SendOutOfRange", "opcode=send wr_id=1 sge=%[2]d:4000:100", "send"},
		{"WriteBadLKey", "opcode=rdma_write wr_id=1 sge=%[3]d:0:8 remote_addr=0 rkey=%[4]d", "rdma_write"},
		{"ReadIntoReadOnly", "opcode=rdma_read wr_id=1 sge=%[2]d:0:8 remote_addr=0 rkey=%[4]d", "rdma_read"},
		{"AtomicIntoReadOnly", "opcode=atomic_fetch_and_add wr_id=1 sge=%[2]d:0:8 remote_addr=0 rkey=%[4]d", "fetch_add"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			a, b, acq, bcq := e.pair(qp.TypeRC)
			rw := e.mr(4096, qp.AccessLocalWrite)
			ro := e.mr(4096, 0)
			remote := e.mr(4096, rwAccess)
			e.postSend(a, fmt.Sprintf(c.op, rw.LKey, ro.LKey, rw.LKey+1, remote.RKey), fmt.Sprintf("opcode=send wr_id=2 sge=%d:0:8", rw.LKey))
			e.expect(acq, sendWC(1, "loc_prot_err", c.opcode, a, 0), flushed(a, "send", 2)[0])
			e.expect(bcq)
			e.state(a, qp.StateErr)
			e.state(b, qp.StateRTS)
			e.expectEvents()
			for _, x := range remote.Mem() {
				if x != 0 {
					t.Fatal("remote memory changed")
				}
			}
		})
	}
}

func TestRCSendWithInvBadRKey(t *testing.T) {
	for _, c := range []struct {
		name string
		key  func(mr, local *MR, mw *MW) uint32
	}{
		{"UnknownKey", func(mr, local *MR, mw *MW) uint32 { return mr.RKey + 1 }},
		{"NoRemoteAccess", func(mr, local *MR, mw *MW) uint32 { return local.RKey }},
		{"Type1MW", func(mr, local *MR, mw *MW) uint32 { return mw.RKey }},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			a, b, acq, bcq := e.pair(qp.TypeRC)
			src, dst := e.mr(64, 0), e.mr(64, qp.AccessLocalWrite)
			victim := e.mr(64, rwAccess)
			mw := e.mw(1)
			e.postRecv(b, fmt.Sprintf("wr_id=9 sge=%d:0:64", dst.LKey), fmt.Sprintf("wr_id=10 sge=%d:0:64", dst.LKey))
			e.postSend(a, fmt.Sprintf("opcode=send_with_inv wr_id=1 invalidate_rkey=%d sge=%d:0:8", c.key(victim, dst, mw), src.LKey))
			e.expect(acq, sendWC(1, "rem_inv_req_err", "send", a, 0))
			e.expect(bcq, cat(recvWC(9, "rem_inv_req_err", "recv", b, 0, nil, ""), flushed(b, "recv", 10))...)
			e.state(a, qp.StateErr)
			e.state(b, qp.StateErr)
			e.expectEvents(fmt.Sprintf("event=qp_req_err qp=%d", b.QPN))
			if !victim.Valid() || !dst.Valid() {
				t.Fatal("an MR was invalidated")
			}
		})
	}
}

func TestRCLocalInvBadKey(t *testing.T) {
	for _, c := range []struct {
		name string
		key  func(mr, otherPD *MR, mw1 *MW) uint32
	}{
		{"UnknownKey", func(mr, o *MR, mw1 *MW) uint32 { return mr.LKey ^ 0x80 }},
		{"ZeroKey", func(mr, o *MR, mw1 *MW) uint32 { return 0 }},
		{"OtherPD", func(mr, o *MR, mw1 *MW) uint32 { return o.LKey }},
		{"Type1MW", func(mr, o *MR, mw1 *MW) uint32 { return mw1.RKey }},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			a, b, acq, bcq := e.pair(qp.TypeRC)
			mr := e.mr(64, rwAccess)
			o := e.foreignMR(64, rwAccess)
			mw1 := e.mw(1)
			e.postSend(a, fmt.Sprintf("opcode=local_inv wr_id=1 invalidate_rkey=%d", c.key(mr, o, mw1)), "opcode=send wr_id=2")
			e.expect(acq, sendWC(1, "loc_qp_op_err", "local_inv", a, 0), flushed(a, "send", 2)[0])
			e.expect(bcq)
			e.state(a, qp.StateErr)
			e.state(b, qp.StateRTS)
			e.expectEvents()
			if !mr.Valid() || !o.Valid() {
				t.Fatal("an MR was invalidated")
			}
		})
	}
}

func TestRCBindMWErrors(t *testing.T) {
	type objs struct {
		good, noBind, noLocalWrite, otherPD *MR
		mw1, mw2, mwOther                   *MW
	}
	for _, c := range []struct {
		name string
		wr   func(o *objs) string
	}{
		{"MRWithoutMWBind", func(o *objs) string {
			return fmt.Sprintf("mw=%d bind_lkey=%d bind_addr=0 bind_length=64 bind_access=remote_read", o.mw2.Handle, o.noBind.LKey)
		}},
		{"WindowPastMR", func(o *objs) string {
			return fmt.Sprintf("mw=%d bind_lkey=%d bind_addr=4000 bind_length=97 bind_access=remote_read", o.mw2.Handle, o.good.LKey)
		}},
		{"WindowOverflow", func(o *objs) string {
			return fmt.Sprintf("mw=%d bind_lkey=%d bind_addr=10 bind_length=0xfffffffffffffffe bind_access=remote_read", o.mw2.Handle, o.good.LKey)
		}},
		{"RemoteWriteWithoutLocalWrite", func(o *objs) string {
			return fmt.Sprintf("mw=%d bind_lkey=%d bind_addr=0 bind_length=64 bind_access=remote_write", o.mw2.Handle, o.noLocalWrite.LKey)
		}},
		{"MROfOtherPD", func(o *objs) string {
			return fmt.Sprintf("mw=%d bind_lkey=%d bind_addr=0 bind_length=64 bind_access=remote_read", o.mw2.Handle, o.otherPD.LKey)
		}},
		{"MWOfOtherPD", func(o *objs) string {
			return fmt.Sprintf("mw=%d bind_lkey=%d bind_addr=0 bind_length=64 bind_access=remote_read", o.mwOther.Handle, o.good.LKey)
		}},
		{"Type2ZeroLength", func(o *objs) string {
			return fmt.Sprintf("mw=%d bind_lkey=%d bind_addr=0 bind_length=0 bind_access=remote_read", o.mw2.Handle, o.good.LKey)
		}},
		{"Type1ZeroBased", func(o *objs) string {
			return fmt.Sprintf("mw=%d bind_lkey=%d bind_addr=0 bind_length=64 bind_access=remote_read,zero_based", o.mw1.Handle, o.good.LKey)
		}},
		{"BadLKey", func(o *objs) string {
			return fmt.Sprintf("mw=%d bind_lkey=%d bind_addr=0 bind_length=64 bind_access=remote_read", o.mw2.Handle, o.good.LKey^1)
		}},
		{"NoSuchMW", func(o *objs) string {
			return fmt.Sprintf("mw=999 bind_lkey=%d bind_addr=0 bind_length=64 bind_access=remote_read", o.good.LKey)
		}},
		{"UnsupportedAccess", func(o *objs) string {
			return fmt.Sprintf("mw=%d bind_lkey=%d bind_addr=0 bind_length=64 bind_access=local_write", o.mw2.Handle, o.good.LKey)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			a, b, acq, bcq := e.pair(qp.TypeRC)
			pd2, _ := e.d.AllocPD(0)
			o := &objs{
				good:         e.mr(4096, qp.AccessLocalWrite|qp.AccessMWBind),
				noBind:       e.mr(4096, qp.AccessLocalWrite),
				noLocalWrite: e.mr(4096, qp.AccessMWBind),
				mw1:          e.mw(1),
				mw2:          e.mw(2),
			}
			var err error
			if o.otherPD, err = e.d.RegMR(0, qp.CreateMR{PD: pd2.Handle, Length: 4096, Access: qp.AccessLocalWrite | qp.AccessMWBind}); err != nil {
				t.Fatal(err)
			}
			if o.mwOther, err = e.d.AllocMW(0, qp.CreateMW{PD: pd2.Handle, Type: 2}); err != nil {
				t.Fatal(err)
			}
			e.postSend(a, "opcode=bind_mw wr_id=1 rkey=7 "+c.wr(o), "opcode=send wr_id=2")
			e.expect(acq, sendWC(1, "mw_bind_err", "bind_mw", a, 0), flushed(a, "send", 2)[0])
			e.expect(bcq)
			e.state(a, qp.StateErr)
			e.state(b, qp.StateRTS)
			e.expectEvents()
			for _, mw := range []*MW{o.mw1, o.mw2, o.mwOther} {
				if mw.Attr().Bound {
					t.Fatal("a failed bind bound a window")
				}
			}
		})
	}
}

func TestRCBindMWType2AlreadyBound(t *testing.T) {
	e := newEnv(t)
	a, b, acq, bcq := e.pair(qp.TypeRC)
	mr := e.mr(4096, qp.AccessLocalWrite|qp.AccessMWBind)
	mw := e.mw(2)
	bind := fmt.Sprintf("opcode=bind_mw send_flags=signaled rkey=1 mw=%d bind_lkey=%d bind_addr=0 bind_length=64 bind_access=remote_read", mw.Handle, mr.LKey)
	e.postSend(a, bind+" wr_id=1", bind+" wr_id=2")
	e.expect(acq, sendWC(1, "success", "bind_mw", a, 0), sendWC(2, "mw_bind_err", "bind_mw", a, 0))
	e.state(a, qp.StateErr)
	e.state(b, qp.StateRTS)
	e.expect(bcq)
	// A type 2 window is invalidated (LOCAL_INV) before it is bound
	// again; that works on a fresh QP of the same PD.
	c, d, ccq, _ := e.pair(qp.TypeRC)
	rkey := mw.Attr().RKey
	e.postSend(c, fmt.Sprintf("opcode=local_inv wr_id=3 send_flags=signaled invalidate_rkey=%d", rkey))
	e.expect(ccq, sendWC(3, "success", "local_inv", c, 0))
	e.postSend(c, bind+" wr_id=4")
	e.expect(ccq, sendWC(4, "success", "bind_mw", c, 0))
	e.healthy(c, d)
}
