package verbs

import (
	"fmt"
	"sync"
	"syscall"
	"unsafe"

	"rdmafs/qp"
	"rdmafs/ring"
)

// PD is a protection domain (ibv_pd).
type PD struct {
	ctx    *Context
	Handle uint32
}

// AllocPD is ibv_alloc_pd.
func (c *Context) AllocPD() (*PD, error) {
	const op = "alloc_pd"
	name, err := c.transact(op, "pd", "")
	if err != nil {
		return nil, err
	}
	h, err := handleOf(op, name)
	if err != nil {
		return nil, err
	}
	return &PD{ctx: c, Handle: h}, nil
}

// Context is the device the PD belongs to.
func (pd *PD) Context() *Context { return pd.ctx }

// Dealloc is ibv_dealloc_pd: EBUSY while MRs, QPs, SRQs, AHs or MWs use it.
func (pd *PD) Dealloc() error { return pd.ctx.destroy("dealloc_pd", "pd", hname(pd.Handle)) }

// MR is a registered memory region (ibv_mr). Buf is the memory itself,
// mapped shared from mr/H/mem: what the program writes there the device
// reads, and what the device writes the program sees. Byte i of Buf is at
// IOVA+i in the addresses work requests use.
type MR struct {
	ctx    *Context
	pd     *PD
	Handle uint32
	LKey   uint32
	RKey   uint32
	IOVA   uint64
	Length uint64
	Access Access
	Buf    []byte

	mu     sync.Mutex
	region *ring.Region // nil once released; guarded by mu
}

// RegMR is ibv_reg_mr: length bytes of device memory with the given
// access, at an iova the daemon chooses (its own address of the memory).
func (pd *PD) RegMR(length int, access Access) (*MR, error) {
	return pd.regMR(length, qp.CreateMR{Access: access})
}

// RegMRIOVA is RegMR with the iova given: work requests address byte i of
// the MR as iova+i (ibv_reg_mr_iova).
func (pd *PD) RegMRIOVA(length int, iova uint64, access Access) (*MR, error) {
	return pd.regMR(length, qp.CreateMR{IOVA: iova, HasIOVA: true, Access: access})
}

// RegMRMem is ibv_reg_mr on the program's own memory, with buf's address
// as its iova: the device reads and writes buf itself, as a NIC would.
// The rules are the C library's (docs/c-libraries.md): memory that is
// already shared (unix.Mmap with MAP_SHARED, a memfd, SysV shm, a file) is
// registered as it is; with AccessOnDemand any memory is, the Go heap
// included, reached when the device moves its bytes. Private memory
// without AccessOnDemand is EOPNOTSUPP: the C library re-backs such pages
// into shared memory, which under the Go runtime's own heap would not be
// safe. Access is checked against the mapping (EFAULT for memory the
// program may not write when the access writes). Keep buf alive and in
// place until Dereg: the device holds its address.
func (pd *PD) RegMRMem(buf []byte, access Access) (*MR, error) {
	const op = "reg_mr"
	if len(buf) == 0 {
		return nil, errorf(op, syscall.EINVAL, "buf: empty")
	}
	addr := uint64(uintptr(unsafe.Pointer(&buf[0])))
	mr, err := pd.regMR(len(buf), qp.CreateMR{Addr: addr, HasAddr: true, Access: access})
	if err != nil {
		return nil, err
	}
	mr.Buf = buf
	return mr, nil
}

func (pd *PD) regMR(length int, req qp.CreateMR) (*MR, error) {
	const op = "reg_mr"
	c := pd.ctx
	if length < 0 {
		return nil, errorf(op, syscall.EINVAL, "length: %d is negative", length)
	}
	req.PD, req.Length = pd.Handle, uint64(length)
	name, err := c.transact(op, "mr", qp.FormatCreateMR(&req))
	if err != nil {
		return nil, err
	}
	h, err := handleOf(op, name)
	if err != nil {
		return nil, err
	}
	mr := &MR{ctx: c, pd: pd, Handle: h}
	fail := func(err error) (*MR, error) {
		mr.release()
		c.destroy(op, "mr", name)
		return nil, err
	}
	a, err := readParsed(c, op, qp.ParseMRAttr, "mr", name, "attr")
	if err != nil {
		return fail(err)
	}
	mr.LKey, mr.RKey, mr.IOVA, mr.Length, mr.Access = a.LKey, a.RKey, a.IOVA, a.Length, a.Access
	if !req.HasAddr {
		// device memory: the MR's mem file, mapped
		reg, err := ring.MapFile(c.path("mr", name, "mem"))
		if err != nil {
			return fail(opError(op, err, ""))
		}
		if uint64(reg.Size()) < mr.Length {
			reg.Close()
			return fail(errorf(op, syscall.EIO, "mr %s: mem has %d bytes, length is %d", name, reg.Size(), mr.Length))
		}
		mr.region = reg
		mr.Buf = reg.Bytes()[:mr.Length:mr.Length]
	}
	c.mu.Lock()
	c.mrs[mr.LKey] = mr
	c.objs[mr] = struct{}{}
	c.mu.Unlock()
	return mr, nil
}

// PD is the protection domain the MR was registered in.
func (mr *MR) PD() *PD { return mr.pd }

// Addr is the iova of byte off of the MR.
func (mr *MR) Addr(off int) uint64 { return mr.IOVA + uint64(off) }

// SGE describes length bytes at offset off of the MR.
func (mr *MR) SGE(off, length int) SGE {
	return SGE{Addr: mr.IOVA + uint64(off), Length: uint32(length), LKey: mr.LKey}
}

// Dereg is ibv_dereg_mr. Buf must not be used afterwards: it is unmapped.
func (mr *MR) Dereg() error {
	if err := mr.ctx.destroy("dereg_mr", "mr", hname(mr.Handle)); err != nil {
		return err
	}
	mr.ctx.mu.Lock()
	if mr.ctx.mrs[mr.LKey] == mr {
		delete(mr.ctx.mrs, mr.LKey)
	}
	delete(mr.ctx.objs, mr)
	mr.ctx.mu.Unlock()
	return mr.release()
}

func (mr *MR) release() error {
	mr.mu.Lock()
	defer mr.mu.Unlock()
	if mr.region == nil {
		return nil
	}
	err := mr.region.Close()
	mr.region = nil
	mr.Buf = nil
	return err
}

// gather copies the bytes sge names out of an MR this Context registered
// in pd (the inline path of PostSend). The caller holds c.mu for reading.
func (c *Context) gatherLocked(pd *PD, s SGE, dst []byte) ([]byte, error) {
	mr := c.mrs[s.LKey]
	if mr == nil || mr.pd != pd {
		return dst, &qp.Error{Key: "sge", Msg: fmt.Sprintf("lkey %#x is not an MR of this context in pd %d", s.LKey, pd.Handle)}
	}
	if s.Addr < mr.IOVA || s.Addr-mr.IOVA > mr.Length || uint64(s.Length) > mr.Length-(s.Addr-mr.IOVA) {
		return dst, &qp.Error{Key: "sge", Msg: fmt.Sprintf("addr %#x length %d is outside mr %d", s.Addr, s.Length, mr.Handle)}
	}
	off := s.Addr - mr.IOVA
	return append(dst, mr.Buf[off:off+uint64(s.Length)]...), nil
}

// AH is an address handle (ibv_ah) for UD sends.
type AH struct {
	ctx    *Context
	Handle uint32
	Attr   AHAttr
}

// CreateAH is ibv_create_ah. DGID is required; on this device any GID
// equal to the port's reaches the device itself.
func (pd *PD) CreateAH(a AHAttr) (*AH, error) {
	const op = "create_ah"
	name, err := pd.ctx.transact(op, "ah", qp.FormatCreateAH(&qp.CreateAH{PD: pd.Handle, AH: a}))
	if err != nil {
		return nil, err
	}
	h, err := handleOf(op, name)
	if err != nil {
		return nil, err
	}
	return &AH{ctx: pd.ctx, Handle: h, Attr: a}, nil
}

// Destroy is ibv_destroy_ah.
func (ah *AH) Destroy() error { return ah.ctx.destroy("destroy_ah", "ah", hname(ah.Handle)) }

// ImportPD is ibv_import_pd: PD handle of the Context's device (another
// Context's, given its CmdFile to Import). Its attr file is its owner's
// alone, so another user's PD is EACCES. Dealloc destroys the PD;
// Unimport only forgets it here.
func (c *Context) ImportPD(handle uint32) (*PD, error) {
	if _, err := readParsed(c, "import_pd", qp.ParsePDAttr, "pd", hname(handle), "attr"); err != nil {
		return nil, err
	}
	return &PD{ctx: c, Handle: handle}, nil
}

// Unimport is ibv_unimport_pd: the PD stays in the daemon.
func (pd *PD) Unimport() {}

// ImportMR is ibv_import_mr: MR handle, under pd, with the keys, iova,
// length and access the daemon's attr gives (another user's MR is
// EACCES). An MR of device memory maps it again into Buf; the program
// memory of an MR registered on it stays its registrant's (Buf is nil).
// Dereg destroys the MR; Unimport only releases it here.
func (pd *PD) ImportMR(handle uint32) (*MR, error) {
	const op = "import_mr"
	c := pd.ctx
	name := hname(handle)
	a, err := readParsed(c, op, qp.ParseMRAttr, "mr", name, "attr")
	if err != nil {
		return nil, err
	}
	mr := &MR{ctx: c, pd: pd, Handle: handle, LKey: a.LKey, RKey: a.RKey, IOVA: a.IOVA, Length: a.Length,
		Access: a.Access}
	if a.Memory == "device" {
		reg, err := ring.MapFile(c.path("mr", name, "mem"))
		if err != nil {
			return nil, opError(op, err, "")
		}
		if uint64(reg.Size()) < mr.Length {
			reg.Close()
			return nil, errorf(op, syscall.EIO, "mr %s: mem has %d bytes, length is %d", name, reg.Size(), mr.Length)
		}
		mr.region = reg
		mr.Buf = reg.Bytes()[:mr.Length:mr.Length]
	}
	c.mu.Lock()
	if mr.Buf != nil {
		c.mrs[mr.LKey] = mr
	}
	c.objs[mr] = struct{}{}
	c.mu.Unlock()
	return mr, nil
}

// Unimport is ibv_unimport_mr: the MR stays in the daemon; its mapping
// here is released (Buf must not be used afterwards).
func (mr *MR) Unimport() error {
	mr.ctx.mu.Lock()
	if mr.ctx.mrs[mr.LKey] == mr {
		delete(mr.ctx.mrs, mr.LKey)
	}
	delete(mr.ctx.objs, mr)
	mr.ctx.mu.Unlock()
	return mr.release()
}
