package fsnode_test

import (
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
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
