package verbs

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"rdmafs/qp"
)

// XRC (ibv_open_xrcd and what lives in an XRC domain). An XRC_SEND QP is
// made with PD.CreateQP (Type QPTypeXRCSend, no RecvCQ needed); each of
// its sends names the remote XRC SRQ in SendWR.RemoteQPN (ibv_send_wr's
// qp_type.xrc.remote_srqn). An XRC SRQ (PD.CreateXRCSRQ) and an XRC_RECV
// QP (XRCD.CreateQP, XRCD.OpenQP) belong to a domain. The XRC_RECV QP lives
// while a Context holds it (the one that made it, the ones that opened
// it), after its creator is gone.

// XRCDInitAttr is ibv_xrcd_init_attr. Without File the domain is private
// to the handle. With it, the domain is the file's (by inode, shared by
// every handle on the same file in any process), made if there is none
// only with Create (O_CREAT), refused if there is one with Excl (O_EXCL).
type XRCDInitAttr struct {
	File         *os.File
	Create, Excl bool
}

// XRCD is a handle on an XRC domain (ibv_xrcd).
type XRCD struct {
	ctx    *Context
	Handle uint32
}

// OpenXRCD is ibv_open_xrcd. The daemon finds the file through this
// process's own descriptor of it.
func (c *Context) OpenXRCD(a XRCDInitAttr) (*XRCD, error) {
	const op = "open_xrcd"
	req := qp.OpenXRCD{Create: a.Create, Excl: a.Excl}
	if a.File != nil {
		req.FD, req.HasFD = int32(a.File.Fd()), true
	}
	name, err := c.transact(op, "xrcd", qp.FormatOpenXRCD(&req))
	if err != nil {
		var e *Error
		if req.HasFD && errors.As(err, &e) && e.Errno == syscall.ENOENT {
			// No domain for the file yet: the kernel's EAGAIN, which the
			// transaction's write cannot carry (device/xrc.go).
			e.Errno = syscall.EAGAIN
		}
		return nil, err
	}
	h, err := handleOf(op, name)
	if err != nil {
		return nil, err
	}
	return &XRCD{ctx: c, Handle: h}, nil
}

// Close is ibv_close_xrcd: EBUSY when it is the domain's last handle and
// XRC SRQs or XRC_RECV QPs live in the domain.
func (x *XRCD) Close() error { return x.ctx.destroy("close_xrcd", "xrcd", hname(x.Handle)) }

// CreateXRCSRQ is ibv_create_srq_ex with IBV_SRQT_XRC: an SRQ of domain x
// whose receive completions go to cq. Its number (SRQ.Num) is what
// senders name.
func (pd *PD) CreateXRCSRQ(x *XRCD, cq *CQ, a SRQInitAttr) (*SRQ, error) {
	return pd.createSRQ(qp.CreateSRQ{PD: pd.Handle, MaxWR: a.MaxWR, MaxSGE: a.MaxSGE, SRQLimit: a.SRQLimit,
		XRC: true, XRCD: x.Handle, CQ: cq.Handle})
}

// CreateQP is ibv_create_qp_ex for an XRC_RECV QP of the domain: no PD,
// CQs or queues of its own (the XRC SRQ each message names serves it).
func (x *XRCD) CreateQP() (*QP, error) {
	return x.xrcRecv("create_qp", qp.CreateQP{Type: QPTypeXRCRecv, XRCD: x.Handle})
}

// OpenQP is ibv_open_qp: the domain's XRC_RECV QP qpn, which this Context
// then holds too; Destroy lets go of it.
func (x *XRCD) OpenQP(qpn uint32) (*QP, error) {
	return x.xrcRecv("open_qp", qp.CreateQP{Type: QPTypeXRCRecv, XRCD: x.Handle, Open: qpn})
}

func (x *XRCD) xrcRecv(op string, req qp.CreateQP) (*QP, error) {
	c := x.ctx
	name, err := c.transact(op, "qp", qp.FormatCreateQP(&req))
	if err != nil {
		return nil, err
	}
	qpn, err := handleOf(op, name)
	if err != nil {
		return nil, err
	}
	q := &QP{ctx: c, QPN: qpn, Type: QPTypeXRCRecv}
	a, err := q.query(op)
	if err != nil {
		q.closeXRCRecv()
		return nil, err
	}
	q.state.Store(uint32(a.QPState))
	c.track(q)
	return q, nil
}

// closeXRCRecv lets go of an XRC_RECV QP: through the lease, which
// destroys it when no other Context holds it (without a lease, it is
// destroyed outright).
func (q *QP) closeXRCRecv() error {
	const op = "destroy_qp"
	c := q.ctx
	c.mu.RLock()
	lease := c.lease
	c.mu.RUnlock()
	if lease == nil {
		if err := c.destroy(op, "qp", hname(q.QPN)); err != nil {
			return err
		}
	} else if _, err := fmt.Fprintf(lease, "close qp %d\n", q.QPN); err != nil {
		return opError(op, err, "")
	}
	c.untrack(q)
	return nil
}

// Num is ibv_get_srq_num: the number XRC senders name the SRQ by (EINVAL
// for an SRQ that is not an XRC SRQ).
func (s *SRQ) Num() (uint32, error) {
	const op = "get_srq_num"
	a, err := readParsed(s.ctx, op, qp.ParseSRQAttr, "srq", hname(s.Handle), "attr")
	if err != nil {
		return 0, err
	}
	if a.SRQNum == 0 {
		return 0, errorf(op, syscall.EINVAL, "srq %d is not an XRC SRQ", s.Handle)
	}
	return a.SRQNum, nil
}
