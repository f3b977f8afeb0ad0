package ring

import (
	"errors"
	"os"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

func TestParseMapsLine(t *testing.T) {
	for _, c := range []struct {
		line string
		ok   bool
		want procVMA
	}{
		{"7f00a000-7f00c000 rw-s 00003000 00:01 1234 /memfd:x (deleted)", true,
			procVMA{start: 0x7f00a000, end: 0x7f00c000, read: true, write: true, shared: true, offset: 0x3000, inode: 1234, name: "/memfd:x (deleted)"}},
		{"55d0-55e0 r--p 00000000 00:00 0", true, procVMA{start: 0x55d0, end: 0x55e0, read: true}},
		{"55e0-55d0 r--p 00000000 00:00 0", false, procVMA{}},
		{"zz-55d0 r--p 00000000 00:00 0", false, procVMA{}},
		{"55d0-55e0 r--p", false, procVMA{}},
	} {
		got, ok := parseMapsLine(c.line)
		if ok != c.ok || ok && got != c.want {
			t.Errorf("%q: got %+v %v, want %+v %v", c.line, got, ok, c.want, c.ok)
		}
	}
}

// mapAnon maps n bytes for the test and unmaps them at its end.
func mapAnon(t *testing.T, fd, n, prot, flags int) []byte {
	t.Helper()
	b, err := unix.Mmap(fd, 0, n, prot, flags)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(b) })
	return b
}

func addrOf(b []byte) uint64 { return uint64(uintptr(unsafe.Pointer(&b[0]))) }

func TestMapProcessSeesTheProgramsPages(t *testing.T) {
	const n = 3 << 12
	fd, err := unix.MemfdCreate("procmem-test", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Ftruncate(fd, 4*n); err != nil {
		t.Fatal(err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK); err != nil {
		t.Fatal(err)
	}
	prog := mapAnon(t, fd, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	shm := mapAnon(t, -1, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
	for _, mem := range [][]byte{prog, shm} {
		// Not page aligned at either end.
		m, err := MapProcess(os.Getpid(), addrOf(mem)+100, n-200, true)
		if err != nil {
			t.Fatal(err)
		}
		mem[100], mem[n-101] = 7, 9
		if m.Mem[0] != 7 || m.Mem[n-201] != 9 {
			t.Errorf("daemon sees %d %d, want 7 9", m.Mem[0], m.Mem[n-201])
		}
		m.Mem[1] = 42
		if mem[101] != 42 {
			t.Errorf("program sees %d, want the daemon's 42", mem[101])
		}
		m.Close()
	}
}

func TestMapProcessRefusals(t *testing.T) {
	const ps = 4096
	pid := os.Getpid()
	private := mapAnon(t, -1, 2*ps, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	none := mapAnon(t, -1, ps, unix.PROT_NONE, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
	ro := mapAnon(t, -1, ps, unix.PROT_READ, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
	hole := mapAnon(t, -1, 3*ps, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
	if _, _, e := unix.Syscall(unix.SYS_MUNMAP, uintptr(addrOf(hole))+ps, ps, 0); e != 0 {
		t.Fatal(e)
	}
	for _, c := range []struct {
		name  string
		addr  uint64
		n     uint64
		write bool
		errno syscall.Errno
	}{
		{"private", addrOf(private), ps, false, syscall.EOPNOTSUPP},
		{"PROT_NONE", addrOf(none), ps, false, syscall.EFAULT},
		{"read-only for writing", addrOf(ro), ps, true, syscall.EFAULT},
		{"a hole", addrOf(hole), 3 * ps, false, syscall.EFAULT},
		{"no pid", addrOf(ro), ps, false, syscall.EFAULT},
		{"overflow", ^uint64(0) - 10, 100, false, syscall.EINVAL},
	} {
		p := pid
		if c.name == "no pid" {
			p = 0
		}
		m, err := MapProcess(p, c.addr, c.n, c.write)
		var me *MemError
		if !errors.As(err, &me) || me.Errno != c.errno {
			t.Errorf("%s: got %v, want errno %d", c.name, err, c.errno)
		}
		if m != nil {
			m.Close()
		}
	}
	// Read-only memory registers for reading.
	m, err := MapProcess(pid, addrOf(ro), ps, false)
	if err != nil {
		t.Fatalf("read-only for reading: %v", err)
	}
	if m.Writable {
		t.Error("a read-only mapping reports writable")
	}
	m.Close()
}

// TestMapProcessRefusesShrinkableFiles: a file the program could
// truncate is not mapped into the daemon (ErrMayShrink: the caller
// reaches it through the address space), a memfd sealed against
// shrinking and kernel-made shared memory are.
func TestMapProcessRefusesShrinkableFiles(t *testing.T) {
	const n = 2 << 12
	pid := os.Getpid()
	f, err := os.CreateTemp(t.TempDir(), "shared-file")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(n); err != nil {
		t.Fatal(err)
	}
	loose, err := unix.MemfdCreate("loose", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(loose)
	sealed, err := unix.MemfdCreate("sealed", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(sealed)
	for _, fd := range []int{loose, sealed} {
		if err := unix.Ftruncate(fd, n); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := unix.FcntlInt(uintptr(sealed), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK); err != nil {
		t.Fatal(err)
	}
	rw, shared := unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED
	for _, c := range []struct {
		name   string
		mem    []byte
		mapped bool
	}{
		{"a file", mapAnon(t, int(f.Fd()), n, rw, shared), false},
		{"an unsealed memfd", mapAnon(t, loose, n, rw, shared), false},
		{"a memfd sealed against shrinking", mapAnon(t, sealed, n, rw, shared), true},
		{"shared anonymous memory", mapAnon(t, -1, n, rw, shared|unix.MAP_ANONYMOUS), true},
	} {
		m, err := MapProcess(pid, addrOf(c.mem), n, true)
		switch {
		case c.mapped && err != nil:
			t.Errorf("%s: %v, want it mapped", c.name, err)
		case !c.mapped && !errors.Is(err, ErrMayShrink):
			t.Errorf("%s: %v, want ErrMayShrink", c.name, err)
		}
		if m != nil {
			m.Close()
		}
	}
}
