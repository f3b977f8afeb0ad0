// Package examples holds the verbs example programs; its test runs each of
// them against a real mount (a device served by this test process), so
// they stay true.
package examples

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"rdmafs/device"
	"rdmafs/fsnode"
	"rdmafs/internal/testmount"
)

func TestExamples(t *testing.T) {
	dev := testmount.Device(t, device.DefaultConfig())
	dir, _ := testmount.Mount(t, dev, fsnode.Options{})
	bin := t.TempDir()
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"rc_pingpong", []string{"-iters", "300", "-size", "4096"}, "300 iters in"},
		{"rc_pingpong", []string{"-iters", "50", "-size", "8", "-events"}, "50 iters in"},
		{"rdma_rw", []string{"-size", "262144", "-chunk", "16384"}, "rdma_rw: all checks passed"},
		{"ud_pingpong", []string{"-iters", "300", "-size", "512"}, "ud_pingpong: all checks passed"},
	} {
		t.Run(c.name+strings.Join(c.args, ""), func(t *testing.T) {
			exe := filepath.Join(bin, c.name)
			if _, err := os.Stat(exe); err != nil {
				build := exec.Command("go", "build", "-o", exe, "rdmafs/examples/"+c.name)
				if out, err := build.CombinedOutput(); err != nil {
					t.Fatalf("build: %v\n%s", err, out)
				}
			}
			cmd := exec.Command(exe, append([]string{"-mount", dir, "-timeout", "60s"}, c.args...)...)
			out, err := cmd.CombinedOutput()
			if err != nil || !strings.Contains(string(out), c.want) {
				t.Fatalf("%s %v: %v\n%s", c.name, c.args, err, out)
			}
			if testing.Verbose() {
				t.Logf("%s", out)
			}
		})
	}
	// A wrong invocation fails.
	if out, err := exec.Command(filepath.Join(bin, "rc_pingpong"), "-mount", t.TempDir()).CombinedOutput(); err == nil {
		t.Errorf("rc_pingpong on a plain directory succeeded:\n%s", out)
	}
}
