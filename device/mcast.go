package device

import (
	"fmt"
	"net/netip"
	"syscall"

	"rdmafs/link"
	"rdmafs/qp"
)

// UD multicast (IBA 10.5, ibv_attach_mcast): a UD QP attached to a
// multicast group receives every datagram sent to the group's GID with
// the multicast QPN (0xFFFFFF) in its BTH, whichever QP of whichever
// process or user sent it. As rxe (rxe_rcv_mcast_pkt), the device hands
// each attached QP its own copy, and each copy passes the checks a
// unicast datagram would (QP type and state, Q_Key); nothing excludes the
// sender's own QP: it gets a copy when it is attached, as on rxe, where
// the host's IP multicast loop brings the datagram back.
//
// The groups are the device's (one table, keyed by MGID): on the wire a
// group whose MGID is an IPv4-mapped multicast address (::ffff:224.x.y.z,
// what the kernel's rdma_cm makes of an IPv4 group on RoCEv2) is also an
// IP multicast group that the link joins on its interface (link/mcast.go),
// so devices on other hosts, or other --addr mounts of this one, take part.
// Other MGIDs (ff..) stay on the device: the wire carries IPv4 only (rxe
// on an IPv4 netdev sends them nowhere: such a GID has no IPv4 address;
// and the kernel's rdma_cm joins no IPv6 group on RoCEv2).

// MulticastQPN is the destination QPN of a multicast datagram.
const MulticastQPN = 0xFFFFFF

// The device's multicast limits, as ibv_query_device reports them. rxe
// has 8192 groups, 56 QPs a group and 0x70000 attachments; these are
// smaller, since every attachment of a group costs a copy of each of its
// datagrams.
const (
	MaxMcastGrp           = 1024
	MaxMcastQPAttach      = 56
	MaxTotalMcastQPAttach = 4096
)

// mcGroup is one multicast group: the QPs attached to it, in the order
// they attached.
type mcGroup struct {
	mgid [16]byte
	qps  []*QP // lockcheck:guarded Device.mu
}

// IsMulticastGID reports whether g is a multicast GID: an IPv6 multicast
// address (ff..) or an IPv4-mapped IPv4 multicast address, the kernel's
// rdma_is_multicast_addr.
func IsMulticastGID(g [16]byte) bool {
	a := netip.AddrFrom16(g)
	if a.Is4In6() {
		return a.Unmap().IsMulticast()
	}
	return g[0] == 0xff
}

// validMLID is the IBA's multicast LID range (0xC000-0xFFFE; 0xFFFF is
// the permissive LID).
func validMLID(lid uint16) bool { return lid >= 0xC000 && lid != 0xFFFF }

// checkMcastLocked applies ib_attach_mcast's rules: a UD QP, a multicast
// GID and, on an InfiniBand link layer, a multicast LID. The C library
// presents a mount whose GID is not IPv4-mapped as InfiniBand (it has
// LIDs), one on the wire as Ethernet, where the LID means nothing.
func (q *QP) checkMcastLocked(op string, mgid [16]byte, lid uint16) error {
	if err := q.liveLocked(op); err != nil {
		return err
	}
	if q.Type != qp.TypeUD {
		return errf(op, syscall.EINVAL, "qp %d is %s: only UD QPs join multicast groups", q.QPN, q.Type)
	}
	if !IsMulticastGID(mgid) {
		return errf(op, syscall.EINVAL, "gid %s is not a multicast GID (ff00::/8, or ::ffff:224.0.0.0/100)", GIDString(mgid))
	}
	if !isV4Mapped(q.dev.cfg.GID) && !validMLID(lid) {
		return errf(op, syscall.EINVAL, "lid 0x%04x is not a multicast LID (0xc000-0xfffe) on an InfiniBand port", lid)
	}
	return nil
}

// AttachMcast is ibv_attach_mcast: q receives the datagrams sent to the
// group mgid. Attaching again is a no-op (as rxe). A new group counts
// against MaxMcastGrp, an attachment against MaxMcastQPAttach for the
// group and MaxTotalMcastQPAttach for the device; a user other than root
// may hold at most its share (--user-share) of the attachments and be in
// at most its share of the groups: ENOMEM beyond, naming the limit.
func (q *QP) AttachMcast(mgid [16]byte, lid uint16) error {
	const op = "attach_mcast"
	d := q.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := q.checkMcastLocked(op, mgid, lid); err != nil {
		return err
	}
	g := d.mcast[mgid]
	if g != nil {
		for _, x := range g.qps {
			if x == q {
				return nil
			}
		}
		if len(g.qps) >= MaxMcastQPAttach {
			return errf(op, syscall.ENOMEM, "max_mcast_qp_attach (%d) reached for group %s", MaxMcastQPAttach, GIDString(mgid))
		}
	} else if len(d.mcast) >= MaxMcastGrp {
		return errf(op, syscall.ENOMEM, "max_mcast_grp (%d) reached", MaxMcastGrp)
	}
	if d.mcastAttached >= MaxTotalMcastQPAttach {
		return errf(op, syscall.ENOMEM, "max_total_mcast_qp_attach (%d) reached", MaxTotalMcastQPAttach)
	}
	if q.Owner != 0 {
		attached, groups := 0, 0
		for _, x := range d.mcast {
			in := false
			for _, y := range x.qps {
				if y.Owner == q.Owner {
					attached++
					in = true
				}
			}
			if in {
				groups++
			}
		}
		if s := d.cfg.userShare(MaxTotalMcastQPAttach); uint32(attached) >= s {
			return errf(op, syscall.ENOMEM, "max_total_mcast_qp_attach per user (%d: --user-share %d%% of %d) reached by uid %d",
				s, d.cfg.UserShare, MaxTotalMcastQPAttach, q.Owner)
		}
		if s := d.cfg.userShare(MaxMcastGrp); g == nil && uint32(groups) >= s {
			return errf(op, syscall.ENOMEM, "max_mcast_grp per user (%d: --user-share %d%% of %d) reached by uid %d",
				s, d.cfg.UserShare, MaxMcastGrp, q.Owner)
		}
	}
	if g == nil {
		if err := d.chain.JoinGroup(mgid); err != nil {
			return &Error{Op: op, Errno: syscall.EADDRNOTAVAIL, Err: fmt.Errorf("joining %s on the wire: %w", GIDString(mgid), err)}
		}
		g = &mcGroup{mgid: mgid}
		if d.mcast == nil {
			d.mcast = map[[16]byte]*mcGroup{}
		}
		d.mcast[mgid] = g
	}
	g.qps = append(g.qps, q)
	d.mcastAttached++
	q.mcastGroups++
	return nil
}

// DetachMcast is ibv_detach_mcast: EINVAL if q is not attached to mgid
// (as rxe). The last QP to leave a group ends it (and the link leaves the
// IP group).
func (q *QP) DetachMcast(mgid [16]byte, lid uint16) error {
	const op = "detach_mcast"
	d := q.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := q.checkMcastLocked(op, mgid, lid); err != nil {
		return err
	}
	if !d.detachMcastLocked(q, mgid) {
		return errf(op, syscall.EINVAL, "qp %d is not attached to %s", q.QPN, GIDString(mgid))
	}
	return nil
}

// detachMcastLocked takes q out of group mgid; it reports whether q was in.
func (d *Device) detachMcastLocked(q *QP, mgid [16]byte) bool {
	g := d.mcast[mgid]
	if g == nil {
		return false
	}
	for i, x := range g.qps {
		if x != q {
			continue
		}
		g.qps = append(g.qps[:i], g.qps[i+1:]...)
		d.mcastAttached--
		q.mcastGroups--
		if len(g.qps) == 0 {
			delete(d.mcast, mgid)
			d.chain.LeaveGroup(mgid)
		}
		return true
	}
	return false
}

// detachAllMcastLocked takes a QP being destroyed out of every group, as
// the kernel does when a process closes its verbs context.
func (d *Device) detachAllMcastLocked(q *QP) {
	if q.mcastGroups == 0 {
		return
	}
	for mgid := range d.mcast {
		d.detachMcastLocked(q, mgid)
	}
}

// McastGroups lists the groups q is attached to (for its attr).
func (q *QP) McastGroups() []string {
	d := q.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []string
	for _, g := range d.mcast {
		for _, x := range g.qps {
			if x == q {
				out = append(out, GIDString(g.mgid))
			}
		}
	}
	return out
}

// multicastLocked delivers a datagram sent to the multicast QPN: a copy
// to every QP attached to its destination GID's group, each through
// acceptLocked as a datagram addressed to that QP. The original goes back
// to the pool. A datagram for a group the device does not have, or not a
// UD one, is dropped and counted.
func (d *Device) multicastLocked(p *packet, cur *engine) {
	d.Counters.McastPacketsRecv.Add(1)
	g := d.mcast[p.dgid]
	if g == nil || !IsMulticastGID(p.dgid) || p.Opcode&0xE0 != transportOf(qp.TypeUD) {
		d.Counters.McastDropped.Add(1)
		d.Counters.DroppedPackets.Add(1)
		d.poolLocked(cur).put(p)
		return
	}
	pool := d.poolLocked(cur)
	for _, q := range g.qps {
		c := pool.get()
		buf := c.buf
		*c = *p
		c.next = nil
		c.buf = append(buf[:0], p.Payload...)
		c.Payload = c.buf
		c.mr = nil
		c.DestQP = q.QPN
		d.Counters.McastDelivered.Add(1)
		d.acceptLocked(c, cur)
	}
	pool.put(p)
}

// routeMcastLocked routes a multicast datagram: on the wire, an IPv4
// group goes to its IP multicast address (the host's multicast loop
// brings it back to this device's own attached QPs, and to other mounts'
// of this host, as rxe's do); anything else stays on the device.
func (d *Device) routeMcastLocked(p *packet) {
	d.Counters.McastPacketsSent.Add(1)
	if d.hasWire && isV4Mapped(p.dgid) {
		p.route, p.hop = link.Wire, [4]byte(p.dgid[12:])
		return
	}
	p.route = link.Local
}
