package device

import "syscall"

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

// userShare is one uid's share of a count limit.
func (c *Config) userShare(limit uint32) uint32 {
	return uint32(UserShareOf(uint64(limit), c.UserShare))
}

// UserShares is Config's per-user limits (after defaults).
func (c *Config) UserShares() UserShares {
	s := c.userShare
	return UserShares{PD: s(c.MaxPD), MR: s(c.MaxMR), MW: s(c.MaxMW), CQ: s(c.MaxCQ),
		SRQ: s(c.MaxSRQ), AH: s(c.MaxAH), QP: s(c.MaxQP),
		MRBytes: max(UserShareOf(c.MaxTotalMRBytes, c.UserShare), 4096)}
}

// ownedIn counts o's objects in m.
func ownedIn[T any, P ownedPtr[T]](m map[uint32]*T, o Owner) int {
	n := 0
	for _, v := range m {
		if P(v).owner() == o {
			n++
		}
	}
	return n
}

// admitLocked is the check every creation makes before it allocates:
// fewer than limit objects of the kind ("pd", "qp", ...) in m, all the
// device has, and for a uid other than root fewer of its own than its
// share of limit. An MR's memory is checked after, by userBytesLocked.
func admitLocked[T any, P ownedPtr[T]](d *Device, op, kind string, m map[uint32]*T, limit uint32, owner Owner) error {
	if uint32(len(m)) >= limit {
		return errf(op, syscall.ENOMEM, "max_%s (%d) reached", kind, limit)
	}
	if owner == 0 {
		return nil
	}
	share := d.cfg.userShare(limit)
	if uint32(ownedIn[T, P](m, owner)) >= share {
		return errf(op, syscall.ENOMEM, "max_%s per user (%d: --user-share %d%% of %d) reached by uid %d",
			kind, share, d.cfg.UserShare, limit, owner)
	}
	return nil
}

// userBytesLocked refuses length more bytes of registered memory for a
// uid other than root beyond its share of MaxTotalMRBytes.
func (d *Device) userBytesLocked(op string, owner Owner, length uint64) error {
	if owner == 0 {
		return nil
	}
	c := &d.cfg
	share := c.UserShares().MRBytes
	// Memory counts once however many MRs share it (share=H).
	var used uint64
	seen := map[*mrBacking]bool{}
	for _, m := range d.mrs.m {
		if m.Owner == owner && !seen[m.backing] {
			seen[m.backing] = true
			used += m.backing.bytes
		}
	}
	if used+length > share {
		return errf(op, syscall.ENOMEM,
			"registered memory per user would exceed %d bytes (--user-share %d%% of %d) for uid %d (%d in use)",
			share, c.UserShare, c.MaxTotalMRBytes, owner, used)
	}
	return nil
}
