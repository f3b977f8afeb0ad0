package device

import (
	"fmt"
	"math"
	"syscall"

	"rdmafs/qp"
	"rdmafs/ring"
)

// Owner is the uid that created an object. Another uid may not use it,
// neither directly nor by naming it in a request (a QP on someone's PD).
// Root (0) may use anything, as it could anyway.
type Owner uint32

func (o Owner) mayUse(obj Owner) bool { return o == 0 || o == obj }

// PD is a protection domain.
type PD struct {
	dev    *Device
	Handle uint32
	Owner  Owner
	users  int // MRs, MWs, AHs, SRQs, QPs on this PD; lockcheck:guarded dev.mu
}

// AllocPD is ibv_alloc_pd.
func (d *Device) AllocPD(owner Owner) (*PD, error) {
	const op = "alloc_pd"
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.checkOpenLocked(op); err != nil {
		return nil, err
	}
	if err := admitLocked(d, op, "pd", d.pds.m, d.cfg.MaxPD, owner); err != nil {
		return nil, err
	}
	pd := &PD{dev: d, Owner: owner}
	pd.Handle = d.pds.add(pd)
	return pd, nil
}

// PD looks a PD up by handle.
func (d *Device) PD(h uint32) *PD { return lookup(d, &d.pds, h) }

// Dealloc is ibv_dealloc_pd: EBUSY while anything lives on the PD.
func (pd *PD) Dealloc() error { return destroy(pd.dev, &pd.dev.pds, "dealloc_pd", "pd", pd.Handle, pd) }

func (pd *PD) owner() Owner { return pd.Owner }

func (pd *PD) usersLocked() (int, string) { return pd.users, "pd %d still has %d objects" }
func (pd *PD) releaseLocked()             {}

// MR is a memory region. Its memory is a memfd the daemon maps; a client
// maps the same file (mr/H/mem), so the device and the client see one copy.
type MR struct {
	dev     *Device
	Handle  uint32
	Owner   Owner
	PD      *PD
	IOVA    uint64
	Length  uint64
	Access  qp.Access
	LKey    uint32
	RKey    uint32
	keyTag  uint32     // the key table's name for it (keys.go); lockcheck:guarded dev.mu
	backing *mrBacking // the memory; shared with the MRs registered on it (share=H); lockcheck:guarded dev.mu
	mem     []byte     // the MR's bytes in backing, len == Length; lockcheck:guarded dev.mu
	// MemOffset is where the MR's bytes start in its backing's region (0
	// unless registered with share=H offset=N).
	MemOffset uint64
	valid     bool   // false after LOCAL_INV / SEND_WITH_INV, until re-registered; lockcheck:guarded dev.mu
	odpVA     uint64 // on demand: the program's address of iova's byte; lockcheck:guarded dev.mu
	boundMWs  int    // lockcheck:guarded dev.mu
}

// mrBacking is the memfd behind one or more MRs. An MR made with
// share=H uses H's backing at an offset, so that several registrations of
// one buffer (the C library re-backs a program's pages once and registers
// every MR of them on that memory) see the same bytes. The region is
// closed, and its bytes leave the device's total, when the last MR on it
// is deregistered. Guarded by Device.mu.
//
// A program's own memory (mr/new addr=A) is a backing of its own, mapped
// from the program's mappings (procmem.go); it counts no bytes, since the
// memory is the program's, as a NIC's pinned pages are.
type mrBacking struct {
	region *ring.Region      // device memory; nil for a program's own
	proc   *ring.ProcMapping // a program's own memory; nil for device memory
	odp    *ring.ProcMem     // on-demand access to a program's memory (mem nil)
	mem    []byte            // the whole backing as the daemon maps it
	bytes  uint64            // counted in Device.mrBytes
	refs   int
}

// release gives back the memory of a backing no MR took (a mapping of
// the program's, or its address space).
func (b *mrBacking) release() {
	if b.proc != nil {
		b.proc.Close()
	}
	if b.odp != nil {
		b.odp.Close()
	}
}

func (d *Device) releaseBackingLocked(b *mrBacking) {
	b.refs--
	if b.refs == 0 {
		d.mrBytes -= b.bytes
		if b.region != nil {
			b.region.Close()
		}
		if b.proc != nil {
			b.proc.Close()
		}
		if b.odp != nil {
			b.odp.Close()
			d.odpMRs.Add(-1)
		}
		b.mem = nil
	}
}

// checkMRAccess refuses access flags an MR cannot have.
func checkMRAccess(op string, acc qp.Access) error {
	if acc&^qp.AccessSupportedMR != 0 {
		return errf(op, syscall.EINVAL, "access: unsupported flags %s", acc&^qp.AccessSupportedMR)
	}
	// IBA 10.6.3.1: remote write or atomic needs local write.
	if acc&(qp.AccessRemoteWrite|qp.AccessRemoteAtomic) != 0 && acc&qp.AccessLocalWrite == 0 {
		return errf(op, syscall.EINVAL, "access: remote_write and remote_atomic need local_write")
	}
	return nil
}

// sharedLocked is the memory that share=H offset=N names for length
// bytes: H's, which must be an MR of owner's whose memory holds them.
// Both failures read alike (EINVAL), so another user's MR is not told
// apart from a missing one.
func (d *Device) sharedLocked(op string, owner Owner, h uint32, off, length uint64) (*mrBacking, error) {
	base := d.mrs.get(h)
	if base == nil || !owner.mayUse(base.Owner) {
		return nil, errf(op, syscall.EINVAL, "share: no mr %d of yours", h)
	}
	size := base.backing.bytes // what was asked for, not the page-rounded region
	if base.backing.region == nil {
		size = uint64(len(base.backing.mem))
	}
	if off > size || length > size-off {
		return nil, errf(op, syscall.EINVAL, "offset: %d bytes at %d do not fit mr %d's %d-byte memory", length, off, h, size)
	}
	return base.backing, nil
}

// RegMR is ibv_reg_mr with device-allocated memory, or (req.Share) on the
// memory of another MR of the same owner.
func (d *Device) RegMR(owner Owner, req qp.CreateMR) (*MR, error) {
	const op = "reg_mr"
	if err := checkMRAccess(op, req.Access); err != nil {
		return nil, err
	}
	if req.Length == 0 && req.Share == 0 && !req.Implicit {
		return nil, errf(op, syscall.EINVAL, "length: must be at least 1 (0 only with share=H)")
	}
	if req.Access&qp.AccessOnDemand != 0 && !req.HasAddr && !req.Implicit {
		return nil, errf(op, syscall.EINVAL, "access: on_demand needs addr=A or implicit=1")
	}
	if req.HasAddr && req.Share != 0 {
		return nil, errf(op, syscall.EINVAL, "addr: not with share")
	}
	if req.HasAddr && req.Length > d.cfg.MaxMRSize {
		return nil, errf(op, syscall.EINVAL, "length: %d exceeds max_mr_size %d", req.Length, d.cfg.MaxMRSize)
	}
	// The program's memory is reached before the device lock is taken:
	// mapping it reads the program's mappings and opens their files,
	// which may be files of this very mount (served by the daemon, whose
	// handlers may need the lock).
	var own *mrBacking
	var err error
	switch {
	case req.Access&qp.AccessOnDemand != 0:
		own, err = odpBacking(op, req.PID)
	case req.HasAddr:
		own, err = procBacking(op, req.PID, req.Addr, req.Length, req.Access)
	}
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	registered := false
	defer func() {
		if own != nil && !registered {
			own.release()
		}
	}()
	pd, err := d.openPDLocked(op, req.PD, owner)
	if err != nil {
		return nil, err
	}
	if req.Length > d.cfg.MaxMRSize {
		return nil, errf(op, syscall.EINVAL, "length: %d exceeds max_mr_size %d", req.Length, d.cfg.MaxMRSize)
	}
	iova := uint64(0)
	if req.HasAddr {
		iova = req.Addr
	}
	if req.HasIOVA {
		iova = req.IOVA
	}
	if iova+req.Length < iova {
		return nil, errf(op, syscall.EINVAL, "iova: %#x + length %d overflows", iova, req.Length)
	}
	newBytes := req.Length
	if req.Share != 0 || req.HasAddr {
		newBytes = 0 // memory the owner already has
	}
	if err := admitLocked(d, op, "mr", d.mrs.m, d.cfg.MaxMR, owner); err != nil {
		return nil, err
	}
	if err := d.userBytesLocked(op, owner, newBytes); err != nil {
		return nil, err
	}
	mr := &MR{dev: d, Owner: owner, PD: pd, IOVA: iova, Length: req.Length, Access: req.Access, valid: true}
	switch {
	case own != nil:
		mr.backing = own
		mr.odpVA = req.Addr
		if req.Implicit {
			mr.IOVA, mr.Length = 0, math.MaxUint64
		}
	case req.Share != 0:
		mr.backing, err = d.sharedLocked(op, owner, req.Share, req.Offset, req.Length)
		if err != nil {
			return nil, err
		}
		mr.MemOffset = req.Offset
		mr.backing.refs++
	default:
		if req.Offset != 0 {
			return nil, errf(op, syscall.EINVAL, "offset: only with share")
		}
		if d.mrBytes+req.Length > d.cfg.MaxTotalMRBytes {
			return nil, errf(op, syscall.ENOMEM, "registered memory would exceed the device cap of %d bytes (%d in use)", d.cfg.MaxTotalMRBytes, d.mrBytes)
		}
		region, err := ring.NewRegion(fmt.Sprintf("rdmafs-mr-pd%d", pd.Handle), int(req.Length))
		if err != nil {
			return nil, errf(op, syscall.ENOMEM, "allocating %d bytes: %v", req.Length, err)
		}
		mr.backing = &mrBacking{region: region, mem: region.Bytes(), bytes: req.Length, refs: 1}
		d.mrBytes += req.Length
	}
	if mr.backing.odp == nil {
		mr.mem = mr.backing.mem[mr.MemOffset : mr.MemOffset+req.Length : mr.MemOffset+req.Length]
	} else {
		d.odpMRs.Add(1) // released with the backing
	}
	registered = true
	mr.keyTag = d.keys.alloc(keyEntry{mr: mr})
	mr.LKey = mr.keyTag<<8 | randomKeyByte()
	mr.RKey = mr.LKey
	mr.Handle = d.mrs.add(mr)
	pd.users++
	return mr, nil
}

// Rereg is ibv_rereg_mr: the MR's PD, access or memory change and its keys
// stay, so a peer holding the rkey keeps reaching it (rdma-core's suite
// relies on that). A new translation is memory of another MR of the same
// owner (share=H offset=N). It fails with EBUSY while windows are bound,
// as deregistration does, and leaves the MR valid again (an invalidated
// MR is reregistered). Nothing changes on a failure.
func (mr *MR) Rereg(owner Owner, req qp.ReregMR) error {
	const op = "rereg_mr"
	d := mr.dev
	// A new translation on the program's memory is mapped before the
	// device lock is taken, as in RegMR.
	var fresh *mrBacking
	if req.HasTranslation && req.HasAddr {
		acc := req.Access
		if !req.HasAccess {
			d.mu.Lock()
			acc = mr.Access
			d.mu.Unlock()
		}
		b, err := procBacking(op, req.PID, req.Addr, req.Length, acc)
		if err != nil {
			return err
		}
		fresh = b
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	taken := false
	defer func() {
		if fresh != nil && !taken {
			fresh.release()
		}
	}()
	if err := d.mrs.live(op, "mr", mr.Handle, mr); err != nil {
		return err
	}
	if err := idle(op, mr.Handle, mr); err != nil {
		return err
	}
	pd, acc := mr.PD, mr.Access
	if req.PD != 0 {
		p, err := useLocked(&d.pds, op, "pd", req.PD, owner)
		if err != nil {
			return err
		}
		pd = p
	}
	if req.HasAccess {
		acc = req.Access
	}
	if err := checkMRAccess(op, acc); err != nil {
		return err
	}
	if (acc^mr.Access)&qp.AccessOnDemand != 0 {
		return errf(op, syscall.EINVAL, "access: on_demand cannot be turned on or off by rereg")
	}
	if req.HasTranslation && mr.backing.odp != nil {
		return errf(op, syscall.EOPNOTSUPP, "a new translation of an on_demand mr: register it anew")
	}
	backing, off, length, iova := mr.backing, mr.MemOffset, mr.Length, mr.IOVA
	switch {
	case req.HasTranslation && req.HasAddr:
		if req.IOVA+req.Length < req.IOVA {
			return errf(op, syscall.EINVAL, "iova: %#x + length %d overflows", req.IOVA, req.Length)
		}
		if acc.Writable() && fresh.proc != nil && !fresh.proc.Writable {
			// mapped for the access the MR had, which changed meanwhile
			return errf(op, syscall.EFAULT, "access: the memory is read-only in the program")
		}
		taken = true
		backing, off, length, iova = fresh, 0, req.Length, req.IOVA
		if fresh.odp != nil {
			d.odpMRs.Add(1) // released with the backing
		}
	case req.HasTranslation:
		b, err := d.sharedLocked(op, owner, req.Share, req.Offset, req.Length)
		if err != nil {
			return err
		}
		if req.IOVA+req.Length < req.IOVA {
			return errf(op, syscall.EINVAL, "iova: %#x + length %d overflows", req.IOVA, req.Length)
		}
		backing, off, length, iova = b, req.Offset, req.Length, req.IOVA
	case req.HasAccess && acc.Writable() && backing.proc != nil && !backing.proc.Writable:
		// The kernel keeps the pinned pages on an access change; pages
		// pinned for reading cannot take writes.
		return errf(op, syscall.EFAULT, "access: mr %d's memory is read-only in the program", mr.Handle)
	}
	d.detachPacketsLocked(mr)
	if pd != mr.PD {
		mr.PD.users--
		pd.users++
		mr.PD = pd
	}
	mr.Access = acc
	if backing != mr.backing {
		if fresh == nil {
			backing.refs++
		}
		d.releaseBackingLocked(mr.backing)
		mr.backing = backing
	}
	mr.MemOffset, mr.Length, mr.IOVA = off, length, iova
	if fresh != nil {
		mr.odpVA = req.Addr
	}
	if backing.odp == nil {
		mr.mem = backing.mem[off : off+length : off+length]
	}
	mr.valid = true
	return nil
}

// MRAttr is what mr/H/attr shows, read under the device lock (Rereg
// changes it).
type MRAttr struct {
	PD                      uint32
	Length, IOVA, MemOffset uint64
	Access                  qp.Access
	LKey, RKey              uint32
	Valid                   bool
	// Memory is how the device reaches the bytes: "device" (the daemon's
	// memfd), "mapped" (the program's pages, mapped), or
	// "address_space" (read and written through the program's address
	// space: on demand, or a file that could shrink under the daemon).
	Memory string
}

// Attr returns the MR's current attributes.
func (mr *MR) Attr() MRAttr {
	mr.dev.mu.Lock()
	defer mr.dev.mu.Unlock()
	a := MRAttr{PD: mr.PD.Handle, Length: mr.Length, IOVA: mr.IOVA, MemOffset: mr.MemOffset,
		Access: mr.Access, LKey: mr.LKey, RKey: mr.RKey, Valid: mr.valid, Memory: "device"}
	switch b := mr.backing; {
	case b == nil:
	case b.odp != nil:
		a.Memory = "address_space"
	case b.proc != nil:
		a.Memory = "mapped"
	}
	return a
}

// MR looks an MR up by handle.
func (d *Device) MR(h uint32) *MR { return lookup(d, &d.mrs, h) }

// Region is the MR's shared memory (for mapping by clients): its
// backing's whole region, in which the MR's bytes start at MemOffset.
// It is nil for an MR on the program's own memory (addr=A), which the
// program maps already.
func (mr *MR) Region() *ring.Region {
	mr.dev.mu.Lock()
	defer mr.dev.mu.Unlock()
	return mr.backing.region
}

// Mem is the MR's memory as the daemon maps it.
func (mr *MR) Mem() []byte {
	mr.dev.mu.Lock()
	defer mr.dev.mu.Unlock()
	return mr.mem
}

// Valid reports whether the MR's keys are usable (not invalidated).
func (mr *MR) Valid() bool {
	mr.dev.mu.Lock()
	defer mr.dev.mu.Unlock()
	return mr.valid
}

// Dereg is ibv_dereg_mr: EBUSY while memory windows are bound to it (IBA
// 10.6.7.2.6). QPs whose WQEs still name its keys find them gone and fail
// those WQEs with a protection error.
func (mr *MR) Dereg() error { return destroy(mr.dev, &mr.dev.mrs, "dereg_mr", "mr", mr.Handle, mr) }

func (mr *MR) owner() Owner { return mr.Owner }

func (mr *MR) usersLocked() (int, string) { return mr.boundMWs, "mr %d has %d memory windows bound" }

func (mr *MR) releaseLocked() {
	d := mr.dev
	d.detachPacketsLocked(mr)
	d.keys.free(mr.keyTag)
	mr.PD.users--
	mr.valid = false
	d.releaseBackingLocked(mr.backing)
	mr.mem = nil
}

// MW is a memory window. Type 1 is bound with ibv_bind_mw semantics (here:
// the BIND_MW work request, as for type 2); type 2 is bound to one QP.
type MW struct {
	dev    *Device
	Handle uint32
	Owner  Owner
	PD     *PD
	Type   uint8
	RKey   uint32
	keyTag uint32    // lockcheck:guarded dev.mu
	valid  bool      // bound and not invalidated; lockcheck:guarded dev.mu
	mr     *MR       // lockcheck:guarded dev.mu
	addr   uint64    // lockcheck:guarded dev.mu
	length uint64    // lockcheck:guarded dev.mu
	access qp.Access // lockcheck:guarded dev.mu
	qp     *QP       // type 2: the QP it is bound through; lockcheck:guarded dev.mu
}

// AllocMW is ibv_alloc_mw.
func (d *Device) AllocMW(owner Owner, req qp.CreateMW) (*MW, error) {
	const op = "alloc_mw"
	if req.Type == 0 {
		req.Type = 1
	}
	if req.Type != 1 && req.Type != 2 {
		return nil, errf(op, syscall.EINVAL, "type: %d is not 1 or 2", req.Type)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	pd, err := d.openPDLocked(op, req.PD, owner)
	if err != nil {
		return nil, err
	}
	if err := admitLocked(d, op, "mw", d.mws.m, d.cfg.MaxMW, owner); err != nil {
		return nil, err
	}
	mw := &MW{dev: d, Owner: owner, PD: pd, Type: req.Type}
	mw.keyTag = d.keys.alloc(keyEntry{mw: mw})
	mw.RKey = mw.keyTag<<8 | randomKeyByte()
	mw.Handle = d.mws.add(mw)
	pd.users++
	return mw, nil
}

// MW looks an MW up by handle.
func (d *Device) MW(h uint32) *MW { return lookup(d, &d.mws, h) }

// MWAttr is what cat mw/H/attr shows.
type MWAttr struct {
	PD, Type     uint32
	RKey         uint32
	Bound        bool
	MR           uint32
	Addr, Length uint64
	Access       qp.Access
}

// Attr snapshots the window.
func (mw *MW) Attr() MWAttr {
	mw.dev.mu.Lock()
	defer mw.dev.mu.Unlock()
	a := MWAttr{PD: mw.PD.Handle, Type: uint32(mw.Type), RKey: mw.RKey, Bound: mw.valid,
		Addr: mw.addr, Length: mw.length, Access: mw.access}
	if mw.mr != nil {
		a.MR = mw.mr.Handle
	}
	return a
}

func (mw *MW) unbindLocked() {
	if mw.mr != nil {
		mw.mr.boundMWs--
		mw.mr = nil
	}
	mw.qp = nil
	mw.valid = false
}

// Dealloc is ibv_dealloc_mw; a bound window is unbound.
func (mw *MW) Dealloc() error { return destroy(mw.dev, &mw.dev.mws, "dealloc_mw", "mw", mw.Handle, mw) }

func (mw *MW) owner() Owner               { return mw.Owner }
func (mw *MW) usersLocked() (int, string) { return 0, "" }

func (mw *MW) releaseLocked() {
	mw.unbindLocked()
	mw.dev.keys.free(mw.keyTag)
	mw.PD.users--
}

// AH is an address handle for UD.
type AH struct {
	dev    *Device
	Handle uint32
	Owner  Owner
	PD     *PD
	Attr   qp.AH
}

// CreateAH is ibv_create_ah.
func (d *Device) CreateAH(owner Owner, req qp.CreateAH) (*AH, error) {
	const op = "create_ah"
	if req.AH.PortNum > 1 {
		return nil, errf(op, syscall.EINVAL, "port_num: %d (the device has port 1)", req.AH.PortNum)
	}
	if req.AH.SGIDIndex != 0 {
		return nil, errf(op, syscall.EINVAL, "sgid_index: %d (the GID table has one entry)", req.AH.SGIDIndex)
	}
	if req.AH.SL > 15 {
		return nil, errf(op, syscall.EINVAL, "sl: %d > 15", req.AH.SL)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	pd, err := d.openPDLocked(op, req.PD, owner)
	if err != nil {
		return nil, err
	}
	if err := admitLocked(d, op, "ah", d.ahs.m, d.cfg.MaxAH, owner); err != nil {
		return nil, err
	}
	ah := &AH{dev: d, Owner: owner, PD: pd, Attr: req.AH}
	ah.Handle = d.ahs.add(ah)
	pd.users++
	return ah, nil
}

// AH looks an AH up by handle.
func (d *Device) AH(h uint32) *AH { return lookup(d, &d.ahs, h) }

// Destroy is ibv_destroy_ah. A UD send that names it and that the engine
// has not yet taken from the ring fails with LOC_QP_OP_ERR.
func (ah *AH) Destroy() error { return destroy(ah.dev, &ah.dev.ahs, "destroy_ah", "ah", ah.Handle, ah) }

func (ah *AH) owner() Owner               { return ah.Owner }
func (ah *AH) usersLocked() (int, string) { return 0, "" }
func (ah *AH) releaseLocked()             { ah.PD.users-- }
