package device

import (
	"io"
	"syscall"

	"rdmafs/qp"
	"rdmafs/roce"
)

// XRC, the extended reliable connected transport (IBA Annex A14, as
// libibverbs and mlx5 offer it):
//
//   - An XRC domain groups XRC SRQs and XRC_RECV QPs. ibv_open_xrcd gives a
//     handle (XRCD) on one: a private domain of its own, or the domain of a
//     file, shared by every handle opened on the same inode, in any process
//     of any user that can open the file (the kernel's xrcd table by inode).
//   - An XRC SRQ is an SRQ in a domain with a CQ of its own: receive
//     completions of messages that land in it go there. Its number (its
//     handle, ibv_get_srq_num) is what senders name.
//   - An XRC_SEND QP is a requester only. Each of its requests carries an
//     XRCETH naming the remote XRC SRQ (SendWR.RemoteQPN holds the number).
//   - An XRC_RECV QP is a responder only, in a domain, with no PD, CQ or
//     queue of its own: each request's XRCETH chooses the XRC SRQ of the
//     domain whose WQE it consumes, whose PD checks its keys and whose CQ
//     gets its completion (xrcSelectLocked). It lives while a holder holds
//     it (Hold, Unhold: the file system's leases, one per context that
//     created or opened it), after its creator is gone.

// FileKey names a file by device and inode, as the kernel's XRCD table
// does: the same file through any path or descriptor is the same key.
type FileKey struct{ Dev, Ino uint64 }

// xrcDomain is one XRC domain. Guarded by Device.mu.
type xrcDomain struct {
	key    FileKey
	shared bool // of a file (key), not private to one handle
	// pin keeps the file open while the domain lives, as the kernel's
	// table holds the inode: its number cannot go to another file meanwhile.
	pin     io.Closer
	handles int // XRCD handles open on it
	users   int // XRC SRQs and XRC_RECV QPs in it
}

// XRCD is one handle on an XRC domain: what ibv_open_xrcd returns.
type XRCD struct {
	dev    *Device
	Handle uint32
	Owner  Owner
	dom    *xrcDomain
}

// OpenXRCD is ibv_open_xrcd. Without file (nil) the domain is a new
// private one. With it, the domain is the file's: made if there is none
// and create is set (O_CREAT; EAGAIN without it, as the kernel answers),
// refused with EINVAL if there is one and excl is set (O_EXCL). A file
// without a domain is ENOENT here, where the kernel says EAGAIN: a write
// that fails with EAGAIN reads as "try again" to a writer whose file is
// non-blocking (Go's os.File waits for ever), so the libraries map it back.
// The caller
// identifies the file from a descriptor the caller holds (never from a
// number a program claims), so a program reaches only the domains of files
// it can open.
//
// pin, when not nil, is an open reference to the file: the domain keeps
// it while it lives (it is closed otherwise).
func (d *Device) OpenXRCD(owner Owner, file *FileKey, pin io.Closer, create, excl bool) (*XRCD, error) {
	const op = "open_xrcd"
	d.mu.Lock()
	defer d.mu.Unlock()
	defer func() {
		if pin != nil {
			pin.Close()
		}
	}()
	if err := d.checkOpenLocked(op); err != nil {
		return nil, err
	}
	if err := admitLocked(d, op, "xrcd", d.xrcds.m, d.cfg.MaxPD, owner); err != nil {
		return nil, err
	}
	var dom *xrcDomain
	if file != nil {
		dom = d.xrcDomains[*file]
		switch {
		case dom == nil && !create:
			return nil, errf(op, syscall.ENOENT, "fd: the file has no XRC domain yet; create=1 (O_CREAT) makes one")
		case dom != nil && excl:
			return nil, errf(op, syscall.EINVAL, "excl: the file has an XRC domain already (O_EXCL)")
		case dom == nil:
			dom = &xrcDomain{key: *file, shared: true, pin: pin}
			pin = nil
			d.xrcDomains[*file] = dom
		}
	} else {
		dom = &xrcDomain{}
	}
	dom.handles++
	x := &XRCD{dev: d, Owner: owner, dom: dom}
	x.Handle = d.xrcds.add(x)
	return x, nil
}

// XRCD looks an XRC domain handle up.
func (d *Device) XRCD(h uint32) *XRCD { return lookup(d, &d.xrcds, h) }

// Close is ibv_close_xrcd: EBUSY when it is the domain's last handle and
// XRC SRQs or XRC_RECV QPs still live in the domain.
func (x *XRCD) Close() error { return destroy(x.dev, &x.dev.xrcds, "close_xrcd", "xrcd", x.Handle, x) }

// Shared reports whether the domain is a file's, and the file.
func (x *XRCD) Shared() (FileKey, bool) { return x.dom.key, x.dom.shared }

func (x *XRCD) owner() Owner { return x.Owner }

func (x *XRCD) usersLocked() (int, string) {
	if x.dom.handles > 1 {
		return 0, ""
	}
	return x.dom.users, "xrcd %d is its domain's last handle and the domain has %d XRC SRQs and QPs"
}

func (x *XRCD) releaseLocked() {
	x.dom.handles--
	if x.dom.handles == 0 && x.dom.shared && x.dev.xrcDomains[x.dom.key] == x.dom {
		delete(x.dev.xrcDomains, x.dom.key)
		if x.dom.pin != nil {
			x.dom.pin.Close()
		}
	}
}

// heldByLocked reports whether owner has a handle on dom (root: always).
func (d *Device) heldByLocked(dom *xrcDomain, owner Owner) bool {
	if owner == 0 {
		return true
	}
	for _, x := range d.xrcds.m {
		if x.dom == dom && x.Owner == owner {
			return true
		}
	}
	return false
}

// xrcSRQLocked resolves what an XRC SRQ's creation names: its domain
// handle and its CQ, both the owner's.
func (d *Device) xrcSRQLocked(op string, req qp.CreateSRQ, owner Owner) (*xrcDomain, *CQ, error) {
	x, err := useLocked(&d.xrcds, op, "xrcd", req.XRCD, owner)
	if err != nil {
		return nil, nil, err
	}
	cq, err := useLocked(&d.cqs, op, "cq", req.CQ, owner)
	if err != nil {
		return nil, nil, err
	}
	return x.dom, cq, nil
}

// SRQNum is ibv_get_srq_num: the number requests name an XRC SRQ by (0
// for another SRQ).
func (s *SRQ) SRQNum() uint32 {
	if s.xrcd == nil {
		return 0
	}
	return s.Handle
}

// XRCInfo is what an XRC SRQ has beyond a basic one: its CQ's handle
// (0 for a basic SRQ).
func (s *SRQ) XRCInfo() (cq uint32) {
	if s.cq == nil {
		return 0
	}
	return s.cq.Handle
}

// releaseXRCLocked is an XRC SRQ's part of its destroy: the XRC_RECV
// QPs whose current message was landing in it let go of it (a message in
// progress there is cut off: its WQE went with the SRQ).
func (s *SRQ) releaseXRCLocked() {
	if s.xrcd == nil {
		return
	}
	s.cq.users--
	s.xrcd.users--
	for _, q := range s.dev.qps {
		if q.Type == qp.TypeXRCRecv && q.srq == s {
			q.srq, q.recvCQ, q.pd = nil, nil, nil
			q.resp.haveRWQE = false
			q.resp.lkeyHint, q.resp.rkeyHint = nil, nil
		}
	}
}

// xrcRecvDomainLocked resolves the domain handle an XRC_RECV QP's
// creation or opening names.
func (d *Device) xrcRecvDomainLocked(op string, h uint32, owner Owner) (*xrcDomain, error) {
	x, err := useLocked(&d.xrcds, op, "xrcd", h, owner)
	if err != nil {
		return nil, err
	}
	return x.dom, nil
}

// OpenQP is ibv_open_qp: the XRC_RECV QP qpn of the domain the caller's
// handle xrcd is on. The caller holds it through the lease it names it
// in (Hold); a QP of another domain, or no such QP, is EINVAL alike.
func (d *Device) OpenQP(owner Owner, xrcd, qpn uint32) (*QP, error) {
	const op = "open_qp"
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.checkOpenLocked(op); err != nil {
		return nil, err
	}
	dom, err := d.xrcRecvDomainLocked(op, xrcd, owner)
	if err != nil {
		return nil, err
	}
	q := d.qps[qpn]
	if q == nil || q.destroyed || q.Type != qp.TypeXRCRecv || q.xrcd != dom {
		return nil, errf(op, syscall.EINVAL, "open: no xrc_recv qp %d in xrcd %d's domain", qpn, xrcd)
	}
	return q, nil
}

// Hold and Unhold count the holders of an XRC_RECV QP: its maker from its
// creation, and each context that opened it (the file system: each lease
// that names it but the maker's first, which carries the maker's hold).
// Unhold reports whether that was the last holder, when the QP is to be
// destroyed: a QP made outside any lease (a shell's) is not destroyed by
// others letting go of it.
func (q *QP) Hold() {
	q.dev.mu.Lock()
	q.holders++
	q.dev.mu.Unlock()
}

func (q *QP) Unhold() (last bool) {
	q.dev.mu.Lock()
	defer q.dev.mu.Unlock()
	if q.holders > 0 {
		q.holders--
	}
	return q.holders == 0
}

// MayHold reports whether uid may hold q: its own QP, or an XRC_RECV QP
// of a domain uid has a handle on (whoever could open the domain's file).
func (q *QP) MayHold(uid Owner) bool {
	if uid.mayUse(q.Owner) {
		return true
	}
	if q.Type != qp.TypeXRCRecv {
		return false
	}
	q.dev.mu.Lock()
	defer q.dev.mu.Unlock()
	return !q.destroyed && q.dev.heldByLocked(q.xrcd, uid)
}

// xrcSelectLocked points an XRC_RECV QP at the XRC SRQ request p names
// (its XRCETH): the SRQ's WQEs, PD and CQ serve the message. An SRQ that
// is not an XRC SRQ of the QP's domain is an invalid request (NAK, the
// requester's WQE completes with rem_inv_req_err), as is a number that
// changes in the middle of a message. It reports whether p may go on.
func (q *QP) xrcSelectLocked(p *packet) bool {
	if p.Opcode.Class()&roce.ClassRequest == 0 {
		return true
	}
	s := q.dev.srqs.get(p.XRCSRQ)
	if s != nil && (s.xrcd == nil || s.xrcd != q.xrcd) {
		s = nil
	}
	inMsg := q.resp.inSend || q.resp.inWrite
	if p.psn() != q.resp.psn {
		// A duplicate or a gap starts no message: the transport answers
		// it as it does on RC, under the SRQ it names if that is a good
		// one (a repeated READ reads through that SRQ's PD).
		if s != nil && !inMsg {
			q.useSRQLocked(s)
		}
		if q.pd == nil {
			q.Counters.Dropped++
			return false
		}
		return true
	}
	if s == nil || inMsg && s != q.srq {
		q.resp.nakLocked(p.psn(), aethNAKInvReq, qp.WCRemInvReqErr)
		return false
	}
	q.useSRQLocked(s)
	return true
}

// useSRQLocked makes s the XRC SRQ an XRC_RECV QP serves messages from.
func (q *QP) useSRQLocked(s *SRQ) {
	if q.srq != s {
		q.srq, q.recvCQ, q.pd = s, s.cq, s.PD
		q.resp.lkeyHint, q.resp.rkeyHint = nil, nil
	}
}
