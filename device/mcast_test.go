package device

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"rdmafs/qp"
)

// The groups of these tests: an IPv6-style MGID, which stays on the
// device, and an IPv4-mapped one, which in -device.wire mode goes out as
// IP multicast and comes back through the group's socket.
var (
	mgid6 = [16]byte{0xff, 0x0e, 15: 0x42}
	mgid4 = [16]byte{10: 0xff, 11: 0xff, 12: 224, 13: 9, 14: 22, 15: 7}
)

const mlid = 0xC001

// udQP makes a UD QP of owner in RTS with Q_Key qkey, with its own CQ, in
// a PD of owner's.
func (e *env) udQPOf(owner Owner, qkey string) (*QP, *CQ, *PD) {
	e.t.Helper()
	pd := e.pd
	if owner != 0 {
		var err error
		if pd, err = e.d.AllocPD(owner); err != nil {
			e.t.Fatal(err)
		}
	}
	cq, err := e.d.CreateCQ(owner, qp.CreateCQ{CQE: 64})
	if err != nil {
		e.t.Fatal(err)
	}
	q, err := e.d.CreateQP(owner, qp.CreateQP{PD: pd.Handle, Type: qp.TypeUD, SendCQ: cq.Handle, RecvCQ: cq.Handle,
		Cap: qp.Cap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		e.t.Fatal(err)
	}
	e.modify(q, "qp_state=INIT pkey_index=0 port_num=1 qkey="+qkey)
	e.modify(q, "qp_state=RTR")
	e.modify(q, "qp_state=RTS sq_psn=1")
	return q, cq, pd
}

func TestMcastAttachRules(t *testing.T) {
	e := newEnv(t)
	rc, _, _, _ := e.pair(qp.TypeRC)
	ud, _, _ := e.udQPOf(0, "0x1234")
	wantErr := func(err error, errno syscall.Errno, what string) {
		t.Helper()
		var de *Error
		if !errors.As(err, &de) || de.Errno != errno {
			t.Fatalf("%s: %v, want errno %d", what, err, errno)
		}
	}
	wantErr(rc.AttachMcast(mgid6, mlid), syscall.EINVAL, "attach an RC QP")
	wantErr(ud.AttachMcast([16]byte{0xfe, 0x80, 15: 1}, mlid), syscall.EINVAL, "attach to a unicast GID")
	wantErr(ud.AttachMcast([16]byte{10: 0xff, 11: 0xff, 12: 10, 15: 1}, mlid), syscall.EINVAL, "attach to ::ffff:10.0.0.1")
	if !isV4Mapped(e.d.Port().GID) {
		// An InfiniBand-style port: the LID must be a multicast one.
		wantErr(ud.AttachMcast(mgid6, 0x10), syscall.EINVAL, "attach with a unicast LID")
		wantErr(ud.AttachMcast(mgid6, 0xFFFF), syscall.EINVAL, "attach with the permissive LID")
	}
	wantErr(ud.DetachMcast(mgid6, mlid), syscall.EINVAL, "detach from a group never joined")
	if err := ud.AttachMcast(mgid6, mlid); err != nil {
		t.Fatal(err)
	}
	if err := ud.AttachMcast(mgid6, mlid); err != nil {
		t.Fatalf("attaching twice: %v (rxe: no-op)", err)
	}
	if g := ud.McastGroups(); len(g) != 1 || g[0] != "ff0e::42" {
		t.Fatalf("groups %v", g)
	}
	if err := ud.DetachMcast(mgid6, mlid); err != nil {
		t.Fatal(err)
	}
	wantErr(ud.DetachMcast(mgid6, mlid), syscall.EINVAL, "detach twice")
	if a := e.d.Attr(); a.MaxMcastGrp == 0 || a.MaxMcastQPAttach == 0 || a.MaxTotalMcastQPAttach == 0 {
		t.Fatalf("multicast limits %+v", a)
	}

	// max_mcast_qp_attach QPs in one group, not one more.
	var qps []*QP
	for range MaxMcastQPAttach + 1 {
		q, _, _ := e.udQPOf(0, "0x1234")
		qps = append(qps, q)
	}
	for i, q := range qps {
		err := q.AttachMcast(mgid4, mlid)
		if i < MaxMcastQPAttach && err != nil {
			t.Fatalf("attach %d: %v", i, err)
		}
		if i == MaxMcastQPAttach {
			wantErr(err, syscall.ENOMEM, "one attachment beyond max_mcast_qp_attach")
		}
	}
	// Destroying a QP takes it out of its groups: there is room again.
	if err := qps[0].Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := qps[MaxMcastQPAttach].AttachMcast(mgid4, mlid); err != nil {
		t.Fatalf("attach after a member was destroyed: %v", err)
	}
}

// A user's share of the groups: a uid other than root can be in at most
// --user-share percent of max_mcast_grp groups.
func TestMcastUserShare(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.UserShare = 1 }) // 1 % of 1024: 10 groups
	q, _, _ := e.udQPOf(1000, "0x1234")
	share := e.d.cfg.userShare(MaxMcastGrp)
	for i := range share + 1 {
		g := [16]byte{0xff, 0x0e, 14: byte(i >> 8), 15: byte(i)}
		err := q.AttachMcast(g, mlid)
		if i < share && err != nil {
			t.Fatalf("group %d: %v", i, err)
		}
		if i == share {
			var de *Error
			if !errors.As(err, &de) || de.Errno != syscall.ENOMEM {
				t.Fatalf("group %d beyond the share %d: %v", i, share, err)
			}
		}
	}
	// Root is held to the device limits alone.
	r, _, _ := e.udQPOf(0, "0x1234")
	for i := range share + 1 {
		if err := r.AttachMcast([16]byte{0xff, 0x0e, 13: 1, 14: byte(i >> 8), 15: byte(i)}, mlid); err != nil {
			t.Fatalf("root, group %d: %v", i, err)
		}
	}
}

// A datagram to a group reaches every attached QP of the device, another
// user's among them, each with its own copy; the sender's QP gets one only
// when it is attached (as rxe); a QP of another Q_Key drops it; a detached
// or destroyed QP no longer gets any.
func TestMcastDelivery(t *testing.T) {
	for _, g := range []struct {
		name string
		mgid [16]byte
	}{{"ff0e::42", mgid6}, {"::ffff:224.9.22.7", mgid4}} {
		t.Run(g.name, func(t *testing.T) {
			e := newEnv(t)
			const qkey = "0x11111111"
			a, acq, _ := e.udQPOf(0, qkey)
			b, bcq, _ := e.udQPOf(0, qkey)
			c, ccq, _ := e.udQPOf(0, qkey)
			u, ucq, upd := e.udQPOf(1000, qkey)
			k, kcq, _ := e.udQPOf(0, "0x22222222")
			for _, q := range []*QP{b, c, u, k} {
				if err := q.AttachMcast(g.mgid, mlid); err != nil {
					t.Fatal(err)
				}
			}
			src := e.mr(4096, 0)
			fill(src.Mem(), 3)
			umr, err := e.d.RegMR(1000, qp.CreateMR{PD: upd.Handle, Length: 4096, Access: qp.AccessLocalWrite})
			if err != nil {
				t.Fatal(err)
			}
			dst := e.mr(3*4096, qp.AccessLocalWrite)
			kdst := e.mr(4096, qp.AccessLocalWrite)
			asrc := e.mr(4096, qp.AccessLocalWrite)
			recv := func(q *QP, mr *MR, off int) {
				t.Helper()
				if _, err := q.PostRecv([]qp.RecvWR{{WRID: 9, SGL: []qp.SGE{{LKey: mr.LKey, Addr: uint64(off), Length: 1024}}}}); err != nil {
					t.Fatal(err)
				}
			}
			recv(b, dst, 0)
			recv(c, dst, 4096)
			recv(u, umr, 0)
			recv(k, kdst, 0)
			recv(a, asrc, 0)
			ah := e.ah(g.mgid)
			send := func(wrid int, n int) {
				t.Helper()
				e.postSend(a, fmt.Sprintf("opcode=send wr_id=%d send_flags=signaled sge=%d:0:%d ah=%d remote_qpn=%d remote_qkey=%s",
					wrid, src.LKey, n, ah.Handle, MulticastQPN, qkey))
			}
			send(1, 100)
			e.expect(acq, sendWC(1, "success", "send", a, 100))
			for _, x := range []struct {
				q  *QP
				cq *CQ
			}{{b, bcq}, {c, ccq}, {u, ucq}} {
				e.expect(x.cq, recvWC(9, "success", "recv", x.q, 140, a, "wc_flags=grh"))
			}
			e.expect(kcq) // another Q_Key: dropped
			sameBytes(t, dst.Mem()[40:140], src.Mem()[:100])
			sameBytes(t, dst.Mem()[4096+40:4096+140], src.Mem()[:100])
			sameBytes(t, umr.Mem()[40:140], src.Mem()[:100])
			if !isV4Mapped(e.d.Port().GID) {
				// The GRH names the group as its destination.
				if string(dst.Mem()[24:40]) != string(g.mgid[:]) {
					t.Fatalf("GRH dgid % x", dst.Mem()[24:40])
				}
			}

			// The sender attached gets its own datagram; c detached and
			// u destroyed get nothing.
			if err := a.AttachMcast(g.mgid, mlid); err != nil {
				t.Fatal(err)
			}
			if err := c.DetachMcast(g.mgid, mlid); err != nil {
				t.Fatal(err)
			}
			if err := u.Destroy(); err != nil {
				t.Fatal(err)
			}
			recv(b, dst, 0)
			recv(c, dst, 4096)
			send(2, 50)
			e.expect(acq, sendWC(2, "success", "send", a, 50), recvWC(9, "success", "recv", a, 90, a, "wc_flags=grh"))
			e.expect(bcq, recvWC(9, "success", "recv", b, 90, a, "wc_flags=grh"))
			e.expect(ccq)
			c2 := &e.d.Counters
			if c2.McastPacketsSent.Load() != 2 || c2.McastPacketsRecv.Load() != 2 || c2.McastDelivered.Load() != 4+3 {
				t.Fatalf("multicast counters sent %d recv %d delivered %d", c2.McastPacketsSent.Load(), c2.McastPacketsRecv.Load(), c2.McastDelivered.Load())
			}
			// The last member to leave ends the group: a datagram to it
			// is dropped and counted.
			for _, q := range []*QP{a, b, k} {
				if err := q.DetachMcast(g.mgid, mlid); err != nil {
					t.Fatal(err)
				}
			}
			if g.mgid == mgid6 || !e.wire {
				// (On the wire nobody is in the IP group any more: the
				// datagram would never come back, and the harness's
				// quiesce waits for every datagram sent.)
				send(3, 10)
				e.expect(acq, sendWC(3, "success", "send", a, 10))
				if n := e.d.Counters.McastDropped.Load(); n != 1 {
					t.Fatalf("multicast_dropped %d, want 1", n)
				}
			}
			e.healthy(a, b, c, k)
		})
	}
}

// Multicast goes through the link chain like any packet: a capture shows
// the datagram to QPN 0xFFFFFF, and the fault injector drops it.
func TestMcastCaptureAndFaults(t *testing.T) {
	e := newEnv(t)
	const qkey = "0x11111111"
	a, acq, _ := e.udQPOf(0, qkey)
	b, bcq, _ := e.udQPOf(0, qkey)
	if err := b.AttachMcast(mgid6, mlid); err != nil {
		t.Fatal(err)
	}
	src, dst := e.mr(4096, 0), e.mr(4096, qp.AccessLocalWrite)
	ah := e.ah(mgid6)
	for i := range 2 {
		if _, err := b.PostRecv([]qp.RecvWR{{WRID: uint64(10 + i), SGL: []qp.SGE{{LKey: dst.LKey, Length: 1024}}}}); err != nil {
			t.Fatal(err)
		}
	}
	send := func(wrid int) {
		t.Helper()
		e.postSend(a, fmt.Sprintf("opcode=send wr_id=%d send_flags=signaled sge=%d:0:64 ah=%d remote_qpn=%d remote_qkey=%s",
			wrid, src.LKey, ah.Handle, MulticastQPN, qkey))
		e.expect(acq, sendWC(uint64(wrid), "success", "send", a, 64))
	}
	c := e.d.OpenCapture()
	defer c.Close()
	send(1)
	e.expect(bcq, recvWC(10, "success", "recv", b, 104, a, "wc_flags=grh"))
	var pcap []byte
	// The BTH's P_Key, reserved byte and destination QPN 0xFFFFFF.
	for !bytes.Contains(pcap, []byte{0xff, 0xff, 0x00, 0xff, 0xff, 0xff}) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		chunk, err := c.Next(ctx)
		cancel()
		if err != nil {
			t.Fatalf("capture: %v; no datagram to QPN 0xFFFFFF in %d bytes", err, len(pcap))
		}
		pcap = append(pcap, chunk...)
	}
	e.setFaults(Faults{Drop: 1, Seed: 1})
	send(2)
	e.expect(bcq)
	if e.d.Counters.FaultDrops.Load() == 0 {
		t.Fatal("the fault injector dropped nothing")
	}
	e.setFaults(Faults{})
	send(3)
	e.expect(bcq, recvWC(11, "success", "recv", b, 104, a, "wc_flags=grh"))
}

// A user's share of the attachments: a uid other than root can hold at
// most --user-share percent of max_total_mcast_qp_attach (its QPs in its
// groups); another user, and root, can still attach; a detach gives one
// back.
func TestMcastUserAttachShare(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.UserShare = 1 }) // 1 %: 40 attachments, 10 groups, 10 QPs
	share := int(e.d.cfg.userShare(MaxTotalMcastQPAttach))
	groups := int(e.d.cfg.userShare(MaxMcastGrp))
	// QPs of uid 1000 in one PD with one CQ, each attached to each of
	// the user's groups in turn
	pd, err := e.d.AllocPD(1000)
	if err != nil {
		t.Fatal(err)
	}
	cq, err := e.d.CreateCQ(1000, qp.CreateCQ{CQE: 64})
	if err != nil {
		t.Fatal(err)
	}
	var qps []*QP
	group := func(k int) [16]byte { return [16]byte{0xff, 0x0e, 14: 7, 15: byte(k % groups)} }
	for k := range share + 1 {
		if k%groups == 0 {
			q, err := e.d.CreateQP(1000, qp.CreateQP{PD: pd.Handle, Type: qp.TypeUD, SendCQ: cq.Handle, RecvCQ: cq.Handle,
				Cap: qp.Cap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
			if err != nil {
				t.Fatalf("qp %d: %v", len(qps), err)
			}
			qps = append(qps, q)
		}
		err := qps[k/groups].AttachMcast(group(k), mlid)
		if k < share && err != nil {
			t.Fatalf("attachment %d: %v", k, err)
		}
		if k == share {
			var de *Error
			if !errors.As(err, &de) || de.Errno != syscall.ENOMEM || !strings.Contains(err.Error(), "max_total_mcast_qp_attach per user") {
				t.Fatalf("attachment %d beyond the share %d: %v", k, share, err)
			}
		}
	}
	o, _, _ := e.udQPOf(1001, "0x1234")
	r, _, _ := e.udQPOf(0, "0x1234")
	for _, q := range []*QP{o, r} {
		if err := q.AttachMcast(group(0), mlid); err != nil {
			t.Fatalf("uid %d, with uid 1000 at its share: %v", q.Owner, err)
		}
	}
	if err := qps[0].DetachMcast(group(0), mlid); err != nil {
		t.Fatal(err)
	}
	if err := qps[share/groups].AttachMcast(group(share), mlid); err != nil {
		t.Fatalf("after a detach: %v", err)
	}
}
