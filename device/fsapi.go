package device

import (
	"io"
	"syscall"
)

// Accessors for fsnode: the file view of an MR's memory (mr/H/mem read and
// written with pread/pwrite semantics). They hold Device.mu, so they never
// race a deregistration and never touch memory that was given back.

// ReadAt copies the MR's bytes at offset off (0 is the first byte, iova)
// into p, as pread(2) would: io.EOF at or past the end, a short count at the
// end. After Dereg it fails with ENOENT.
func (mr *MR) ReadAt(p []byte, off int64) (int, error) {
	mr.dev.mu.Lock()
	defer mr.dev.mu.Unlock()
	if err := mr.fileLocked("read_mr", off); err != nil {
		return 0, err
	}
	if uint64(off) >= mr.Length {
		return 0, io.EOF
	}
	return copy(p, mr.mem[off:]), nil
}

// WriteAt copies p into the MR's bytes at offset off, as pwrite(2) to a file
// of fixed size would: a short count at the end, ENOSPC for a write that
// starts at or past it. After Dereg it fails with ENOENT.
func (mr *MR) WriteAt(p []byte, off int64) (int, error) {
	mr.dev.mu.Lock()
	defer mr.dev.mu.Unlock()
	if err := mr.fileLocked("write_mr", off); err != nil {
		return 0, err
	}
	if len(p) == 0 {
		return 0, nil
	}
	if uint64(off) >= mr.Length {
		return 0, errf("write_mr", syscall.ENOSPC, "offset %d is past the end of mr %d (%d bytes)", off, mr.Handle, mr.Length)
	}
	return copy(mr.mem[off:], p), nil
}

// fileLocked is the check both accessors make first: the MR is still
// registered and off is not negative.
func (mr *MR) fileLocked(op string, off int64) error {
	if mr.dev.mrs.get(mr.Handle) != mr || mr.mem == nil {
		return errf(op, syscall.ENOENT, "mr %d was deregistered", mr.Handle)
	}
	if off < 0 {
		return errf(op, syscall.EINVAL, "negative offset %d", off)
	}
	return nil
}

// Attr is what cat cq/H/attr shows: the capacity (which Resize changes)
// and whether the CQ overflowed.
func (cq *CQ) Attr() (cqe uint32, overflowed bool) {
	cq.dev.mu.Lock()
	defer cq.dev.mu.Unlock()
	return cq.CQE, cq.overflowed
}
