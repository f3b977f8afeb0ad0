package device

import (
	"fmt"
	"syscall"
)

// Per-user shares of the device's limits. Every count limit (max_pd,
// max_mr, max_mw, max_cq, max_srq, max_ah, max_qp) and the registered
// memory cap (MaxTotalMRBytes) has a share that one uid other than root
// may take: Config.UserShare percent of it, at least 1 (at least one page
// of memory). Root, the mount's owner, is limited by the device limits
// alone. A creation beyond the share is ENOMEM with a reason naming the
// per-user limit, as one beyond the device limit is.
//
// The default, DefaultUserShare, lets four users fill a device; no single
// user can starve root or the others.

// DefaultUserShare is Config.UserShare when it is 0: percent of every limit
// one non-root uid may take.
const DefaultUserShare = 25

// UserShareOf is the per-user share of limit under share percent.
func UserShareOf(limit uint64, share uint32) uint64 {
	s := limit / 100 * uint64(share)
	s += limit % 100 * uint64(share) / 100
	return max(s, 1)
}

// UserShares are the per-user limits a configuration gives.
type UserShares struct {
	PD, MR, MW, CQ, SRQ, AH, QP uint32
	MRBytes                     uint64
}

// UserShares is Config's per-user limits (after defaults).
func (c *Config) UserShares() UserShares {
	s := func(limit uint32) uint32 { return uint32(UserShareOf(uint64(limit), c.UserShare)) }
	return UserShares{PD: s(c.MaxPD), MR: s(c.MaxMR), MW: s(c.MaxMW), CQ: s(c.MaxCQ),
		SRQ: s(c.MaxSRQ), AH: s(c.MaxAH), QP: s(c.MaxQP),
		MRBytes: max(UserShareOf(c.MaxTotalMRBytes, c.UserShare), 4096)}
}

// ownedIn counts o's objects in t.
func ownedIn[T any](t *table[T], o Owner, owner func(*T) Owner) int {
	n := 0
	for _, v := range t.m {
		if owner(v) == o {
			n++
		}
	}
	return n
}

// userShareLocked refuses the creation of one more object of kind ("pd",
// "mr", ...; for "mr" also length more bytes) by owner beyond its share.
func (d *Device) userShareLocked(op string, owner Owner, kind string, length uint64) error {
	if owner == 0 {
		return nil
	}
	c := &d.cfg
	sh := c.UserShares()
	var n int
	var limit, share uint32
	switch kind {
	case "pd":
		n, limit, share = ownedIn(&d.pds, owner, func(p *PD) Owner { return p.Owner }), c.MaxPD, sh.PD
	case "mr":
		n, limit, share = ownedIn(&d.mrs, owner, func(m *MR) Owner { return m.Owner }), c.MaxMR, sh.MR
	case "mw":
		n, limit, share = ownedIn(&d.mws, owner, func(m *MW) Owner { return m.Owner }), c.MaxMW, sh.MW
	case "cq":
		n, limit, share = ownedIn(&d.cqs, owner, func(q *CQ) Owner { return q.Owner }), c.MaxCQ, sh.CQ
	case "srq":
		n, limit, share = ownedIn(&d.srqs, owner, func(s *SRQ) Owner { return s.Owner }), c.MaxSRQ, sh.SRQ
	case "ah":
		n, limit, share = ownedIn(&d.ahs, owner, func(a *AH) Owner { return a.Owner }), c.MaxAH, sh.AH
	case "qp":
		for _, q := range d.qps {
			if q.Owner == owner {
				n++
			}
		}
		limit, share = c.MaxQP, sh.QP
	default:
		panic("userShareLocked: kind " + kind)
	}
	if uint32(n) >= share {
		return errf(op, syscall.ENOMEM, "max_%s per user (%d: --user-share %d%% of %d) reached by uid %d",
			kind, share, c.UserShare, limit, owner)
	}
	if kind == "mr" {
		// Memory counts once however many MRs share it (share=H).
		var used uint64
		seen := map[*mrBacking]bool{}
		for _, m := range d.mrs.m {
			if m.Owner == owner && !seen[m.backing] {
				seen[m.backing] = true
				used += m.backing.bytes
			}
		}
		if used+length > sh.MRBytes {
			return &Error{Op: op, Errno: syscall.ENOMEM, Err: fmt.Errorf(
				"registered memory per user would exceed %d bytes (--user-share %d%% of %d) for uid %d (%d in use)",
				sh.MRBytes, c.UserShare, c.MaxTotalMRBytes, owner, used)}
		}
	}
	return nil
}
