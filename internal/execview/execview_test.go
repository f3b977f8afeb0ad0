package execview

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestDevices: the library's names for the mounts of a mountinfo: the
// fuse.rdmafs mounts whose root is the mount's own, in order, as selected;
// the view's own binds of MOUNT/sys/infiniband are no devices.
func TestDevices(t *testing.T) {
	mi := strings.Join([]string{
		"22 1 0:21 / /sys rw - sysfs sysfs rw",
		"40 22 0:50 / /tmp/a rw,nosuid - fuse.rdmafs rdmafs rw",
		"41 22 0:51 / /tmp/b\\040c rw,nosuid - fuse.rdmafs rdmafs rw",
		"42 22 0:50 /sys/infiniband /sys/class/infiniband/rdmafs0 ro - fuse.rdmafs rdmafs rw",
		"43 22 0:52 / /tmp/gone rw - fuse.rdmafs rdmafs rw",
	}, "\n")
	readable := func(m string) bool { return m != "/tmp/gone" }
	got, err := Devices(strings.NewReader(mi), "", readable)
	if err != nil {
		t.Fatal(err)
	}
	want := []Device{{"rdmafs0", "/tmp/a"}, {"rdmafs1", "/tmp/b c"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("all: %v, want %v", got, want)
	}
	got, _ = Devices(strings.NewReader(mi), "/tmp/b c", readable)
	if want := []Device{{"rdmafs0", "/tmp/b c"}}; !reflect.DeepEqual(got, want) {
		t.Errorf("selected: %v, want %v", got, want)
	}
}

func TestStages(t *testing.T) {
	if got := Command("/usr/bin/unshare", "/bin/rdmafs", 0, []string{"--", "ibstat"}); strings.Join(got, " ") !=
		"/usr/bin/unshare --mount --propagation private -- /bin/rdmafs exec -- ibstat" {
		t.Errorf("root: %v", got)
	}
	if got := Command("/usr/bin/unshare", "/bin/rdmafs", 1000, []string{"ibstat"}); strings.Join(got, " ") !=
		"/usr/bin/unshare --mount --propagation private --user --map-root-user -- /bin/rdmafs exec ibstat" {
		t.Errorf("user: %v", got)
	}
	if got := Final("/usr/bin/unshare", 1000, 100, []string{"/usr/sbin/ibstat"}); strings.Join(got, " ") !=
		"/usr/bin/unshare --user --map-user=1000 --map-group=100 -- /usr/sbin/ibstat" {
		t.Errorf("final: %v", got)
	}
}

// A mount whose daemon does not answer blocks the open of its device file
// for ever (a FIFO without a writer stands in for it here): Probe gives up
// after its wait and says the mount did not answer; a readable one answers.
func TestProbeHungMount(t *testing.T) {
	hung, ok := t.TempDir(), t.TempDir()
	if err := unix.Mkfifo(filepath.Join(hung, "device"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ok, "device"), []byte("node_guid=1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if r, answered := Probe(hung, 100*time.Millisecond); r || answered {
		t.Errorf("hung mount: readable %v, answered %v", r, answered)
	}
	if r, answered := Probe(ok, 5*time.Second); !r || !answered {
		t.Errorf("readable mount: readable %v, answered %v", r, answered)
	}
	// Unblock the hung probe's goroutine.
	if f, err := os.OpenFile(filepath.Join(hung, "device"), os.O_WRONLY|unix.O_NONBLOCK, 0); err == nil {
		f.Close()
	}
}

func TestUnescape(t *testing.T) {
	if got := Unescape(`a\134b\011c\0`); got != "a\\b\tc\\0" {
		t.Errorf("unescape: %q", got)
	}
	if got := Unescape(`/tmp/with\040space`); got != "/tmp/with space" {
		t.Errorf("unescape: %q", got)
	}
}
