package ring

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func newTestRegion(t testing.TB, size int) *Region {
	t.Helper()
	reg, err := NewRegion("ring-test", size)
	if err != nil {
		t.Fatalf("NewRegion: %v", err)
	}
	t.Cleanup(func() { reg.Close() })
	return reg
}

func mapTestRegion(t testing.TB, fd, size int) *Region {
	t.Helper()
	m, err := Map(fd, size)
	if err != nil {
		t.Fatalf("Map: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func TestNewRegion(t *testing.T) {
	ps := os.Getpagesize()
	for _, size := range []int{1, ps - 1, ps, ps + 1, 3*ps + 17} {
		reg := newTestRegion(t, size)
		want := (size + ps - 1) / ps * ps
		if reg.Size() != want || len(reg.Bytes()) != want || cap(reg.Bytes()) != want {
			t.Errorf("NewRegion(%d): Size %d len %d cap %d, want %d", size, reg.Size(), len(reg.Bytes()), cap(reg.Bytes()), want)
		}
		var st unix.Stat_t
		if err := unix.Fstat(reg.Fd(), &st); err != nil || st.Size != int64(want) {
			t.Errorf("NewRegion(%d): fstat size %d, %v", size, st.Size, err)
		}
		if flags, err := unix.FcntlInt(uintptr(reg.Fd()), unix.F_GETFD, 0); err != nil || flags&unix.FD_CLOEXEC == 0 {
			t.Errorf("NewRegion(%d): fd flags %#x, %v: want FD_CLOEXEC", size, flags, err)
		}
	}
	for _, size := range []int{0, -1} {
		if _, err := NewRegion("bad", size); err == nil {
			t.Errorf("NewRegion(%d) succeeded", size)
		}
	}
}

func TestRegionIsAMemfd(t *testing.T) {
	reg := newTestRegion(t, 100)
	link, err := os.Readlink(filepath.Join("/proc/self/fd", strconv.Itoa(reg.Fd())))
	if err != nil {
		t.Skipf("cannot read /proc/self/fd: %v", err)
	}
	if !strings.HasPrefix(link, "/memfd:ring-test") {
		t.Errorf("fd links to %q, want /memfd:ring-test", link)
	}
}

// TestRegionSizeSealed: nobody holding the fd can shrink the memory under
// the daemon.
func TestRegionSizeSealed(t *testing.T) {
	reg := newTestRegion(t, 4096)
	if err := unix.Ftruncate(reg.Fd(), 0); err == nil {
		t.Error("ftruncate shrank a region")
	}
	if err := unix.Ftruncate(reg.Fd(), 1<<20); err == nil {
		t.Error("ftruncate grew a region")
	}
	reg.Bytes()[4095] = 1 // still mapped and whole
}

func TestMapSharesMemory(t *testing.T) {
	reg := newTestRegion(t, 8192)
	m := mapTestRegion(t, reg.Fd(), reg.Size())
	if &m.Bytes()[0] == &reg.Bytes()[0] {
		t.Fatal("Map returned the same mapping, proves nothing")
	}
	reg.Bytes()[5000] = 0x5A
	if m.Bytes()[5000] != 0x5A {
		t.Error("write through the region not seen through the second mapping")
	}
	m.Bytes()[7] = 0xA5
	if reg.Bytes()[7] != 0xA5 {
		t.Error("write through the second mapping not seen through the region")
	}
}

func TestMapOwnsADuplicate(t *testing.T) {
	reg := newTestRegion(t, 4096)
	m, err := Map(reg.Fd(), 4096)
	if err != nil {
		t.Fatal(err)
	}
	if m.Fd() == reg.Fd() {
		t.Fatal("Map kept the caller's fd")
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := unix.FcntlInt(uintptr(reg.Fd()), unix.F_GETFD, 0); err != nil {
		t.Errorf("closing the mapping closed the caller's fd: %v", err)
	}
	reg.Bytes()[0] = 1
}

func TestMapRejects(t *testing.T) {
	reg := newTestRegion(t, 4096)
	for _, size := range []int{0, -5, 4097, 1 << 20} {
		if m, err := Map(reg.Fd(), size); err == nil {
			m.Close()
			t.Errorf("Map(size %d) of a 4096-byte file succeeded", size)
		}
	}
	if _, err := Map(-1, 4096); err == nil {
		t.Error("Map(-1) succeeded")
	}
}

func TestMapFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ring")
	if err := os.WriteFile(path, make([]byte, 3000), 0o600); err != nil {
		t.Fatal(err)
	}
	reg, err := MapFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if reg.Size() != 3000 {
		t.Errorf("Size = %d", reg.Size())
	}
	copy(reg.Bytes()[10:], "shared")
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(got[10:16]) != "shared" {
		t.Errorf("file reads %q after a write through the mapping", got[10:16])
	}
	if err := reg.Close(); err != nil {
		t.Fatal(err)
	}

	empty := filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := MapFile(empty); err == nil {
		t.Error("MapFile of an empty file succeeded")
	}
	if _, err := MapFile(filepath.Join(t.TempDir(), "missing")); !os.IsNotExist(err) {
		t.Errorf("MapFile of a missing file: %v", err)
	}
}

func TestRegionCloseIdempotent(t *testing.T) {
	reg, err := NewRegion("close", 4096)
	if err != nil {
		t.Fatal(err)
	}
	fd := reg.Fd()
	if err := reg.Close(); err != nil {
		t.Fatalf("first Close: %v", err)
	}
	if err := reg.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err == nil {
		// Another test may have reused the number; only check it is not
		// still our memfd.
		if link, _ := os.Readlink(filepath.Join("/proc/self/fd", strconv.Itoa(fd))); strings.HasPrefix(link, "/memfd:close") {
			t.Error("Close left the fd open")
		}
	}
}

// TestRingOverRegion: daemon Init, client Attach through another mapping,
// and an entry goes across.
func TestRingOverRegion(t *testing.T) {
	const slotSize, slots = 64, 16
	reg := newTestRegion(t, Size(slotSize, slots))
	daemon, err := Init(reg.Bytes(), KindCQ, slotSize, slots)
	if err != nil {
		t.Fatal(err)
	}
	m := mapTestRegion(t, reg.Fd(), reg.Size())
	client, err := Attach(m.Bytes(), KindCQ)
	if err != nil {
		t.Fatal(err)
	}
	p := NewProducer(daemon)
	copy(p.Next(), "completion")
	p.Advance()
	p.Publish()
	c := NewConsumer(client)
	if n, err := c.Pending(); n != 1 || err != nil {
		t.Fatalf("client Pending = %d, %v", n, err)
	}
	if got := string(c.Peek(0)[:10]); got != "completion" {
		t.Fatalf("client read %q", got)
	}
}
