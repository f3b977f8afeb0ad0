package ring

import (
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"sync"

	"golang.org/x/sys/unix"
)

// Region is a shared memory mapping with the file descriptor behind it: a
// memfd the daemon created (NewRegion), or a mapping of an existing fd or
// file (Map, MapFile) such as a client's view of a ring file.
//
// Bytes and every Ring or slot built on it are valid until Close. Keep the
// Region reachable while they are in use: if it is garbage collected
// without Close, a cleanup unmaps the memory and closes the fd as a
// backstop, and stale slices into it would then fault.
type Region struct {
	mem  []byte
	fd   int
	size int

	mu      sync.Mutex
	closed  bool // guarded by mu
	cleanup runtime.Cleanup
}

// mapping is what the GC backstop releases; it must not point at the Region.
type mapping struct {
	mem []byte
	fd  int
}

func (m mapping) release() error {
	return errors.Join(unix.Munmap(m.mem), unix.Close(m.fd))
}

func newRegion(fd int, mem []byte) *Region {
	r := &Region{mem: mem, fd: fd, size: len(mem)}
	r.cleanup = runtime.AddCleanup(r, func(m mapping) { m.release() }, mapping{mem, fd})
	return r
}

// NewRegion creates an anonymous shared memory file (memfd_create with
// MFD_CLOEXEC) of size bytes rounded up to the page size, and maps it
// shared and read-write. name shows in /proc/PID/fd and /proc/PID/maps as
// "memfd:name".
//
// The size is sealed (F_SEAL_SHRINK, F_SEAL_GROW, F_SEAL_SEAL): whoever
// else gets hold of the fd cannot truncate it under the daemon, which would
// turn the daemon's next access into SIGBUS.
func NewRegion(name string, size int) (*Region, error) {
	ps := os.Getpagesize()
	if size <= 0 || size > math.MaxInt-ps {
		return nil, fmt.Errorf("ring: region %q: invalid size %d", name, size)
	}
	n := (size + ps - 1) &^ (ps - 1)
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("ring: memfd_create %q: %w", name, err)
	}
	fail := func(op string, err error) (*Region, error) {
		unix.Close(fd)
		return nil, fmt.Errorf("ring: region %q: %s: %w", name, op, err)
	}
	if err := unix.Ftruncate(fd, int64(n)); err != nil {
		return fail("ftruncate", err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS,
		unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL); err != nil {
		return fail("seal", err)
	}
	mem, err := unix.Mmap(fd, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fail("mmap", err)
	}
	return newRegion(fd, mem), nil
}

// Map maps the first size bytes of an existing fd (a memfd, a ring file)
// shared and read-write. It works on a duplicate of fd, so the caller keeps
// ownership of fd and Close does not close it. The file must be at least
// size bytes long: touching a mapping past end of file is SIGBUS.
func Map(fd int, size int) (*Region, error) {
	if size <= 0 {
		return nil, fmt.Errorf("ring: map fd %d: invalid size %d", fd, size)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("ring: map fd %d: fstat: %w", fd, err)
	}
	if st.Size < int64(size) {
		return nil, fmt.Errorf("ring: map fd %d: file has %d bytes, %d wanted", fd, st.Size, size)
	}
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("ring: map fd %d: dup: %w", fd, err)
	}
	mem, err := unix.Mmap(dup, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(dup)
		return nil, fmt.Errorf("ring: map fd %d: mmap: %w", fd, err)
	}
	return newRegion(dup, mem), nil
}

// MapFile opens path read-write and maps the whole file shared: a client
// opening a ring or MR file of the mount. The Region owns the open file,
// whose fd (Fd) can also carry doorbell writes.
func MapFile(path string) (*Region, error) {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "fstat", Path: path, Err: err}
	}
	if st.Size <= 0 || st.Size > math.MaxInt {
		unix.Close(fd)
		return nil, &os.PathError{Op: "mmap", Path: path, Err: fmt.Errorf("cannot map a file of %d bytes", st.Size)}
	}
	mem, err := unix.Mmap(fd, 0, int(st.Size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "mmap", Path: path, Err: err}
	}
	return newRegion(fd, mem), nil
}

// Fd returns the file descriptor the Region owns; valid until Close.
func (r *Region) Fd() int { return r.fd }

// Bytes returns the whole mapping; valid until Close.
func (r *Region) Bytes() []byte { return r.mem[:r.size:r.size] }

// Size returns the length of the mapping in bytes (for NewRegion, the
// requested size rounded up to the page size).
func (r *Region) Size() int { return r.size }

// Close unmaps the memory and closes the fd. Further calls return nil.
func (r *Region) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil
	}
	r.closed = true
	r.cleanup.Stop()
	return mapping{r.mem, r.fd}.release()
}
