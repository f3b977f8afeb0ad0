package doctor

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func fakeRoot(t *testing.T, files map[string]string) *Env {
	t.Helper()
	root := t.TempDir()
	for p, body := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return &Env{Root: root, Euid: 0, CapEff: CapSysAdmin, Release: "6.9.0"}
}

func TestKernel(t *testing.T) {
	for rel, want := range map[string]Status{
		"6.18.44-fc-v1147": OK, "6.9.0": OK, "7.0": OK,
		"6.8.12-amd64": Fail, "5.15.0-91-generic": Fail, "weird": Warn,
	} {
		e := &Env{Release: rel}
		if got := e.kernel(); got.Status != want {
			t.Errorf("%s: %v (%s), want %v", rel, got.Status, got.Detail, want)
		}
	}
}

func TestPrivileges(t *testing.T) {
	for _, c := range []struct {
		euid int
		caps uint64
		want Status
	}{{0, CapSysAdmin, OK}, {0, 0, Fail}, {1000, 0, Fail}, {1000, CapSysAdmin, Fail}} {
		e := &Env{Euid: c.euid, CapEff: c.caps}
		if got := e.privileges(); got.Status != c.want || (got.Status == Fail && got.Fix == "") {
			t.Errorf("euid %d caps %x: %v %q fix %q", c.euid, c.caps, got.Status, got.Detail, got.Fix)
		}
	}
}

// A soft RDMA device is a warning with its rdma link delete; a mount
// that does not answer is one with its umount.
func TestDevicesAndMounts(t *testing.T) {
	e := fakeRoot(t, map[string]string{
		"/sys/class/infiniband/rxe0/parent":      "eth0\n",
		"/sys/class/infiniband/mlx5_0/node_type": "1: CA\n",
		"/proc/self/mountinfo": "36 25 0:32 / /mnt/a\\040b rw - fuse.rdmafs rdmafs rw\n" +
			"37 25 0:33 / /mnt/c rw - ext4 /dev/sda rw\n",
	})
	r := e.rdmaDevices()
	if r.Status != Warn || r.Fix != "rdma link delete rxe0" {
		t.Errorf("rdma devices: %v %q fix %q", r.Status, r.Detail, r.Fix)
	}
	ms, err := e.Mounts()
	if err != nil || len(ms) != 1 || ms[0].Dir != "/mnt/a b" || ms[0].Err == nil {
		t.Fatalf("mounts: %+v %v", ms, err)
	}
	if r := e.mounts(); r.Status != Warn || r.Fix != "rdmafs umount /mnt/a b" {
		t.Errorf("mounts: %v %q fix %q", r.Status, r.Detail, r.Fix)
	}
}

func TestRunMountKeepsMountFailures(t *testing.T) {
	e := fakeRoot(t, nil) // no /dev/fuse
	e.Dpkg = func(string) (string, bool) { return "", true }
	bad := RunMount(e)
	if len(bad) != 1 || bad[0].Name != "/dev/fuse" {
		t.Fatalf("RunMount: %+v, want only /dev/fuse", bad)
	}
	for _, r := range Run(e) {
		if r.Name == "packages" && r.Status != Warn {
			t.Errorf("packages all missing: %v", r.Status)
		}
	}
}

// The packages the doctor asks for are among those scripts/setup.sh
// installs, so that the fix it prints and the suite's setup agree.
func TestPackagesInSetup(t *testing.T) {
	b, err := os.ReadFile("../../scripts/setup.sh")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?s)pkgs=\((.*?)\)`).FindSubmatch(b)
	if m == nil {
		t.Fatal("no pkgs=(...) in setup.sh")
	}
	have := map[string]bool{}
	for _, p := range strings.Fields(string(m[1])) {
		have[p] = true
	}
	// setup.sh installs the -dev packages, which pull in the libraries.
	have["libibverbs1"], have["librdmacm1"] = have["libibverbs-dev"], have["librdmacm-dev"]
	for _, p := range Packages {
		if !have[p] {
			t.Errorf("doctor asks for %s, which scripts/setup.sh does not install", p)
		}
	}
}

func TestExportsDiff(t *testing.T) {
	missing, extra := diff(map[string]bool{"a@@V1": true, "b@V1": true}, map[string]bool{"a@@V1": true, "c@@V2": true})
	if strings.Join(missing, ",") != "b@V1" || strings.Join(extra, ",") != "c@@V2" {
		t.Errorf("diff: missing %v extra %v", missing, extra)
	}
}
