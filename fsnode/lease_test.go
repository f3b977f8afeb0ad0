package fsnode_test

import (
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"rdmafs/device"
	"rdmafs/fsnode"
)

// Children never get cmd.Dir inside the mount: Go forks with vfork, and a
// chdir into our own FUSE mount before exec can deadlock with a GC
// stop-the-world (the vforking thread holds a P that cannot stop while the
// server goroutines are stopped). The shell changes directory itself.

// A program's leased objects die with it; a shell's unleased ones stay.
func TestLeaseDestroysOnExit(t *testing.T) {
	m := mount(t)
	keep := m.create("pd", "")
	// A child process: open the lease, create objects, lease them, exit
	// without cleaning up (as a crashed program would).
	script := `
set -e
exec 9<>lease
# A FUSE write can return EINTR when a signal (SIGCHLD) arrives; retry.
tx() { local k=$1; shift; local n; { echo "$*" >&0; read -r n; } <>$k/new; until echo "$k $n" >&9; do :; done; echo "$k $n"; }
pd=$(tx pd "" | cut -d' ' -f2)
cq=$(tx cq "cqe=4" | cut -d' ' -f2)
mr=$(tx mr "pd=$pd length=4096 access=local_write" | cut -d' ' -f2)
qp=$(tx qp "pd=$pd qp_type=rc send_cq=$cq recv_cq=$cq max_send_wr=4 max_recv_wr=4" | cut -d' ' -f2)
cat <&9 >/dev/null || true
echo "$pd $cq $mr $qp"
`
	cmd := exec.Command("bash", "-c", "cd \"$1\"\n"+script, "bash", m.dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	f := strings.Fields(strings.TrimSpace(string(out)))
	names := f[len(f)-4:]
	gone := func(kind, name string) bool {
		_, err := os.Stat(m.path(kind, name))
		return err != nil
	}
	deadline := time.Now().Add(5 * time.Second)
	for _, kn := range [][2]string{{"qp", names[3]}, {"mr", names[2]}, {"cq", names[1]}, {"pd", names[0]}} {
		for !gone(kn[0], kn[1]) {
			if time.Now().After(deadline) {
				t.Fatalf("%s %s outlived the program that leased it (error file: %q; child said %q)",
					kn[0], kn[1], m.lastError(kn[0], kn[1], "attr"), out)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	if gone("pd", keep) {
		t.Fatal("an unleased pd was destroyed")
	}
	if m.dev.QP(mustAtoi(t, names[3])) != nil {
		t.Fatal("the device still has the leased qp")
	}
}

func TestLeaseRejects(t *testing.T) {
	m := mount(t)
	pd := m.create("pd", "")
	f, err := os.OpenFile(m.path("lease"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, c := range []struct {
		line string
		want syscall.Errno
	}{
		{"pd\n", syscall.EINVAL},
		{"bogus 1\n", syscall.EINVAL},
		{"pd 999\n", syscall.ENOENT},
		{"\x00\x01\x02", syscall.EINVAL},
	} {
		if _, err := f.Write([]byte(c.line)); errnoOf(err) != c.want {
			t.Errorf("lease %q: %v, want %v", c.line, err, c.want)
		}
	}
	if _, err := f.Write([]byte("pd " + pd + "\n")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	n, _ := f.Read(buf)
	if got := string(buf[:n]); got != "pd "+pd+"\n" {
		t.Fatalf("lease lists %q", got)
	}
	// Another user cannot lease (and so destroy) my objects.
	cmd := exec.Command("bash", "-c", "cd \"$1\" && exec 9<>lease && echo 'pd "+pd+"' >&9", "bash", m.dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "Permission denied") {
		t.Fatalf("another user leased my pd: %v %s", err, out)
	}
	// Nor through my lease, passed to it (an imported command fd): the
	// writer's uid counts, not the opener's. Its own objects it may.
	cmd = exec.Command("bash", "-c", "echo 'pd "+pd+"' >&3 || echo refused; "+
		"{ echo '' >&0; read -r x; echo \"pd $x\" >&3 && echo own; } <>\"$1/pd/new\"", "bash", m.dir)
	cmd.ExtraFiles = []*os.File{f}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "refused") || !strings.Contains(string(out), "own") {
		t.Fatalf("another user writing my lease: %v %s", err, out)
	}
}

func mustAtoi(t *testing.T, s string) uint32 {
	t.Helper()
	var n uint32
	for _, c := range s {
		if c < '0' || c > '9' {
			t.Fatalf("not a number: %q", s)
		}
		n = n*10 + uint32(c-'0')
	}
	return n
}

func TestFaultsFile(t *testing.T) {
	m := mount(t)
	if got := m.read("faults"); !strings.HasPrefix(got, "off\n") || !strings.Contains(got, "fault_drops=0") {
		t.Fatalf("faults reads %q", got)
	}
	m.mustWrite("drop=0.5 seed=3\n", "faults")
	if got := m.read("faults"); !strings.HasPrefix(got, "drop=0.5 dup=0 delay=0 delay_us=1000 reorder=0 seed=3\n") {
		t.Fatalf("faults reads %q", got)
	}
	if err := m.write("drop=2\n", "faults"); errnoOf(err) != syscall.EINVAL {
		t.Fatalf("drop=2: %v", err)
	}
	m.mustWrite("off\n", "faults")
	if got := m.read("faults"); !strings.HasPrefix(got, "off\n") {
		t.Fatalf("faults reads %q after off", got)
	}
	// Only root may set faults: they act on everyone's traffic.
	cmd := exec.Command("bash", "-c", "echo drop=1 > \"$1/faults\"", "bash", m.dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "Permission denied") {
		t.Fatalf("another user set faults: %v %s", err, out)
	}
}

// leaseListing reads a lease file's whole listing.
func leaseListing(t *testing.T, f *os.File) []string {
	t.Helper()
	var b []byte
	buf := make([]byte, 64<<10)
	for {
		n, err := f.Read(buf)
		b = append(b, buf[:n]...)
		if n == 0 || err != nil {
			break
		}
	}
	if s := strings.TrimSpace(string(b)); s != "" {
		return strings.Split(s, "\n")
	}
	return nil
}

// A lease holds each object once, however often it is named, and drops
// the objects destroyed meanwhile.
func TestLeaseBounded(t *testing.T) {
	m := mount(t)
	pd := m.create("pd", "")
	mr := m.create("mr", "pd="+pd+" length=4096 access=local_write")
	f, err := os.OpenFile(m.path("lease"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	// 100,000 names: 9 writes of 10,000 lines and 10,000 single writes.
	batch := strings.Repeat("pd "+pd+"\n", 10000)
	for range 9 {
		if _, err := f.Write([]byte(batch)); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	for range 10000 {
		if _, err := f.Write([]byte("pd " + pd + "\n")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.Write([]byte("mr " + mr + "\npd " + pd + "\n")); err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	got := leaseListing(t, f)
	t.Logf("100,000 names of one pd: %d entries; heap %+d bytes; 10,000 single writes in %v",
		len(got), int64(after.HeapAlloc)-int64(before.HeapAlloc), time.Since(start))
	if want := []string{"pd " + pd, "mr " + mr}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("lease lists %q, want %q", got, want)
	}
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > 4<<20 {
		t.Errorf("heap grew by %d bytes", grew)
	}
	if err := os.Remove(m.path("mr", mr)); err != nil {
		t.Fatal(err)
	}
	if got := leaseListing(t, f); strings.Join(got, ",") != "pd "+pd {
		t.Errorf("after rmdir of the mr the lease lists %q", got)
	}
}

// One open lease file holds at most Options.MaxLease objects: beyond it a
// write is ENOSPC, adds nothing, and the listing says why.
func TestLeaseCap(t *testing.T) {
	m := mountWith(t, device.Config{}, fsnode.Options{MaxLease: 3})
	var pds []string
	for range 5 {
		pds = append(pds, m.create("pd", ""))
	}
	f, err := os.OpenFile(m.path("lease"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, pd := range pds[:3] {
		if _, err := f.Write([]byte("pd " + pd + "\n")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.Write([]byte("pd " + pds[0] + "\n")); err != nil {
		t.Errorf("naming a held object again at the cap: %v", err)
	}
	if _, err := f.Write([]byte("pd " + pds[3] + "\n")); errnoOf(err) != syscall.ENOSPC {
		t.Fatalf("a 4th object: %v, want ENOSPC", err)
	}
	got := leaseListing(t, f)
	if len(got) != 4 || !strings.HasPrefix(got[3], "error: lease: ") || !strings.Contains(got[3], "limit of 3") {
		t.Fatalf("listing after the refusal: %q", got)
	}
	// A destroyed object makes room.
	if err := os.Remove(m.path("pd", pds[1])); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("pd " + pds[3] + "\n")); err != nil {
		t.Fatalf("after a destroy: %v", err)
	}
	want := []string{"pd " + pds[0], "pd " + pds[2], "pd " + pds[3]}
	if got := leaseListing(t, f); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("lease lists %q, want %q", got, want)
	}
}
