package ring

import (
	"bufio"
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A program's own memory, reached by the daemon (mr/new addr=A, and
// access=on_demand). The
// device must see the program's memory exactly as a NIC does (DESIGN.md
// §6): the very pages, not a copy. Every shared mapping (a shared file or
// memfd, SysV shm, hugetlbfs, and the private memory the C library
// re-backed into a memfd of its own) has a file behind it that root may
// open through /proc/PID/map_files/START-END; the daemon maps each piece of
// the range from that file at the same offset, one piece after the other in
// one reservation of its address space, so that the MR's bytes are one
// slice however many objects back them. Like a NIC's pinned pages, the
// mapping holds the memory until deregistration, whatever the program does
// to its own mappings meanwhile.
//
// Access is checked against the mapping as the kernel's ib_umem_get checks
// it: a hole or PROT_NONE is EFAULT, and so is write access on memory the
// program cannot write. Private memory has no file to share; it is
// EOPNOTSUPP with a reason (the C library re-backs it first).

// hugeAlign is the largest page a piece may come in (hugetlbfs 2 MiB; a
// 1 GiB page is refused as too large to align).
const hugeAlign = 2 << 20

// procVMA is one line of /proc/PID/maps.
type procVMA struct {
	start, end uint64
	read       bool
	write      bool
	shared     bool
	offset     uint64
	inode      uint64
	name       string
}

// parseMapsLine parses "start-end perms offset dev inode [name]".
func parseMapsLine(line string) (procVMA, bool) {
	var v procVMA
	f := strings.Fields(line)
	if len(f) < 5 {
		return v, false
	}
	se := strings.SplitN(f[0], "-", 2)
	if len(se) != 2 || len(f[1]) < 4 {
		return v, false
	}
	var err1, err2, err3, err4 error
	v.start, err1 = strconv.ParseUint(se[0], 16, 64)
	v.end, err2 = strconv.ParseUint(se[1], 16, 64)
	v.offset, err3 = strconv.ParseUint(f[2], 16, 64)
	v.inode, err4 = strconv.ParseUint(f[4], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || err4 != nil || v.end <= v.start {
		return v, false
	}
	v.read, v.write, v.shared = f[1][0] == 'r', f[1][1] == 'w', f[1][3] == 's'
	if len(f) > 5 {
		v.name = strings.Join(f[5:], " ")
	}
	return v, true
}

// procVMAs returns the mappings of pid that meet [lo, hi), in order.
func procVMAs(pid int, lo, hi uint64) ([]procVMA, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []procVMA
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		v, ok := parseMapsLine(sc.Text())
		if !ok || v.end <= lo {
			continue
		}
		if v.start >= hi {
			break
		}
		out = append(out, v)
	}
	return out, sc.Err()
}

// procPiece is one VMA's share of a range: [start, end) of the program's
// address space, backed by the file of the VMA starting at vmStart.
type procPiece struct {
	procVMA
	from, to uint64
}

// procPieces checks [lo, hi) (page aligned) against pid's mappings: every
// byte mapped, readable, writable when write is asked, and shared.
func procPieces(pid int, lo, hi uint64, write bool) ([]procPiece, error) {
	vmas, err := procVMAs(pid, lo, hi)
	if err != nil {
		return nil, memErr(syscall.EFAULT, "reading the mappings of pid %d: %v", pid, err)
	}
	var out []procPiece
	at := lo
	for _, v := range vmas {
		if v.start > at {
			break
		}
		p := procPiece{procVMA: v, from: at, to: min(v.end, hi)}
		switch {
		case !v.read && !v.write:
			return nil, memErr(syscall.EFAULT, "%#x-%#x is PROT_NONE", p.from, p.to)
		case write && !v.write:
			return nil, memErr(syscall.EFAULT, "%#x-%#x is read-only and the access asks to write it", p.from, p.to)
		case !v.shared:
			return nil, memErr(syscall.EOPNOTSUPP, "%#x-%#x is private memory (%s): only the C library's re-backing or on_demand access reaches it",
				p.from, p.to, vmaName(v))
		}
		out = append(out, p)
		at = p.to
		if at >= hi {
			return out, nil
		}
	}
	return nil, memErr(syscall.EFAULT, "%#x is not mapped", at)
}

func vmaName(v procVMA) string {
	if v.name == "" {
		return "anonymous"
	}
	return v.name
}

// ProcMapping is a program's memory mapped into the daemon.
type ProcMapping struct {
	res []byte // the whole reservation, unmapped by Close
	// Mem is the registered bytes; Writable says they were mapped for
	// writing (the program may write every piece).
	Mem      []byte
	Writable bool
}

// Close unmaps the memory.
func (m *ProcMapping) Close() {
	if m.res != nil {
		unix.Munmap(m.res)
		m.res, m.Mem = nil, nil
	}
}

// mmapFixed maps fd at addr, inside a reservation of the daemon's own.
func mmapFixed(addr unsafe.Pointer, length uint64, prot, flags, fd int, off uint64) error {
	r, _, e := unix.Syscall6(unix.SYS_MMAP, uintptr(addr), uintptr(length), uintptr(prot), uintptr(flags), uintptr(fd), uintptr(off))
	if e != 0 {
		return e
	}
	if r != uintptr(addr) {
		unix.Syscall(unix.SYS_MUNMAP, r, uintptr(length), 0)
		return syscall.ENOMEM
	}
	return nil
}

// MapProcess maps length bytes of pid's memory at addr. write maps it
// for writing (an MR with any write right, as ib_umem_get's FOLL_WRITE).
func MapProcess(pid int, addr, length uint64, write bool) (*ProcMapping, error) {
	if pid <= 0 {
		return nil, memErr(syscall.EFAULT, "the caller's process is not visible to the daemon (another pid namespace?)")
	}
	ps := uint64(os.Getpagesize())
	if length == 0 || addr+length < addr {
		return nil, memErr(syscall.EINVAL, "%d bytes at %#x", length, addr)
	}
	lo, hi := addr&^(ps-1), (addr+length+ps-1)&^(ps-1)
	pieces, err := procPieces(pid, lo, hi, write)
	if err != nil {
		return nil, err
	}
	// The reservation keeps addresses congruent modulo hugeAlign, so a
	// hugetlb piece lands on a huge boundary in the daemon too.
	base := lo &^ (hugeAlign - 1)
	span := ((hi + hugeAlign - 1) &^ (hugeAlign - 1)) - base
	res, err := unix.Mmap(-1, 0, int(span+hugeAlign), unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		return nil, memErr(syscall.ENOMEM, "reserving %d bytes of address space: %v", span, err)
	}
	r0 := unsafe.Pointer(&res[0])
	skew := (hugeAlign - uint64(uintptr(r0))%hugeAlign) % hugeAlign
	at := func(va uint64) unsafe.Pointer { return unsafe.Add(r0, skew+va-base) }
	m := &ProcMapping{res: res, Writable: true}
	for _, p := range pieces {
		if err := m.mapPiece(pid, p, at, write); err != nil {
			m.Close()
			return nil, err
		}
	}
	m.Mem = unsafe.Slice((*byte)(at(addr)), length)
	return m, nil
}

// mapPiece maps one piece from the VMA's file at the same offset.
func (m *ProcMapping) mapPiece(pid int, p procPiece, at func(uint64) unsafe.Pointer, write bool) error {
	path := fmt.Sprintf("/proc/%d/map_files/%x-%x", pid, p.start, p.end)
	mode, prot := unix.O_RDONLY, unix.PROT_READ
	if p.write {
		mode, prot = unix.O_RDWR, unix.PROT_READ|unix.PROT_WRITE
	}
	fd, err := unix.Open(path, mode|unix.O_CLOEXEC, 0)
	if err != nil {
		return memErr(syscall.EFAULT, "opening the backing of %#x-%#x (%s): %v", p.from, p.to, vmaName(p.procVMA), err)
	}
	defer unix.Close(fd)
	if !p.write {
		m.Writable = false
	}
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(fd, &sfs); err != nil {
		return memErr(syscall.EFAULT, "the backing of %#x-%#x (%s): %v", p.from, p.to, vmaName(p.procVMA), err)
	}
	if !cannotShrink(fd, p.name, sfs.Type) {
		return ErrMayShrink
	}
	from, to := p.from, p.to
	if sfs.Type == unix.HUGETLBFS_MAGIC {
		h := uint64(sfs.Bsize)
		if h > hugeAlign || h == 0 {
			return memErr(syscall.EOPNOTSUPP, "%#x-%#x is in %d-byte huge pages; up to 2 MiB are supported", p.from, p.to, h)
		}
		from, to = from&^(h-1), (to+h-1)&^(h-1)
	}
	off := p.offset + (from - p.start)
	if err := mmapFixed(at(from), to-from, prot, unix.MAP_SHARED|unix.MAP_FIXED, fd, off); err != nil {
		return memErr(syscall.EFAULT, "mapping %#x-%#x (%s): %v", p.from, p.to, vmaName(p.procVMA), err)
	}
	return nil
}

// ErrMayShrink is MapProcess's answer for memory whose file the program
// (or anyone holding it) could truncate under the daemon: touching a
// mapping past the end of its file is SIGBUS, which would stop the
// daemon. Such memory is reached through the program's address space
// instead (ProcMem), where a truncated page is an error, not a signal.
var ErrMayShrink = errors.New("ring: the memory's file can shrink under the daemon")

// cannotShrink reports whether the file behind fd (named name in the maps)
// keeps its size while the daemon maps it: a memfd sealed against
// shrinking (the C library's shadows are), or kernel-made shared memory no
// program holds a descriptor of (MAP_SHARED|MAP_ANONYMOUS, SysV shm,
// MAP_HUGETLB anonymous memory; their names cannot be spoofed by a file
// without root, which could stop the daemon anyway).
func cannotShrink(fd int, name string, fsType int64) bool {
	if seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0); err == nil && seals&unix.F_SEAL_SHRINK != 0 {
		return true
	}
	switch {
	case fsType == unix.TMPFS_MAGIC && (name == "/dev/zero (deleted)" || strings.HasPrefix(name, "/SYSV") && strings.HasSuffix(name, " (deleted)")):
		return true
	case fsType == unix.HUGETLBFS_MAGIC && name == "/anon_hugepage (deleted)":
		return true
	}
	return false
}

// ProcMem is an on-demand MR's way into the program (IBV_ACCESS_ON_DEMAND):
// nothing is mapped or pinned; each access reads or writes the program's
// address space through /proc/PID/mem, opened at registration. That file
// is bound to the address space it was opened on, so after the program
// exits or execs every access fails (as a NIC's ODP MR loses its mm), and
// a reused pid reaches nothing. An access to memory the program does not
// map fails, and the work request completes with the error a NIC gives.
//
// /proc/PID/mem writes as a debugger does (FOLL_FORCE): an on-demand MR
// granted write access may change the registering program's own
// read-only pages, which a NIC would refuse with a fault. That reaches no
// one else's memory.
type ProcMem struct {
	fd int
}

func OpenProcMem(pid int) (*ProcMem, error) {
	if pid <= 0 {
		return nil, memErr(syscall.EFAULT, "the caller's process is not visible to the daemon (another pid namespace?)")
	}
	fd, err := unix.Open(fmt.Sprintf("/proc/%d/mem", pid), unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, memErr(syscall.EFAULT, "opening pid %d's address space: %v", pid, err)
	}
	return &ProcMem{fd: fd}, nil
}

// Close closes the file.
func (o *ProcMem) Close() {
	if o.fd >= 0 {
		unix.Close(o.fd)
		o.fd = -1
	}
}

// read returns a copy of n bytes at va, or false where the program maps
// no readable memory.
func (o *ProcMem) Read(va, n uint64) ([]byte, bool) {
	if n > math.MaxInt32 || va > math.MaxInt64-n {
		return nil, false
	}
	b := make([]byte, n)
	for done := 0; done < len(b); {
		k, err := unix.Pread(o.fd, b[done:], int64(va)+int64(done))
		if err == syscall.EINTR {
			continue
		}
		if err != nil || k <= 0 {
			return nil, false
		}
		done += k
	}
	return b, true
}

// write stores b at va; false where the program maps no memory there.
func (o *ProcMem) Write(va uint64, b []byte) bool {
	for done := 0; done < len(b); {
		k, err := unix.Pwrite(o.fd, b[done:], int64(va)+int64(done))
		if err == syscall.EINTR {
			continue
		}
		if err != nil || k <= 0 {
			return false
		}
		done += k
	}
	return true
}

// MemError is why a program's memory cannot be mapped: an errno, as the
// kernel's ib_umem_get would give it, and a reason.
type MemError struct {
	Errno syscall.Errno
	Msg   string
}

func (e *MemError) Error() string { return e.Msg }

func memErr(errno syscall.Errno, format string, args ...any) error {
	return &MemError{Errno: errno, Msg: fmt.Sprintf(format, args...)}
}
