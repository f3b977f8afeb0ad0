// Package scripts holds the shell scripts a new user reads and runs; its
// test runs each of them against a real mount, so they stay true.
package scripts

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

func TestScripts(t *testing.T) {
	if os.Geteuid() != 0 || !exists("/dev/fuse") {
		if os.Getenv("CI") == "true" {
			t.Fatal("the scripts need root and /dev/fuse, which CI has")
		}
		t.Skip("needs root and /dev/fuse")
	}
	bin := filepath.Join(t.TempDir(), "rdmafs")
	build := exec.Command("go", "build", "-o", bin, "rdmafs/cmd/rdmafs")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	// verbs-tools.sh, c-programs.sh and rdma-core-suite.sh run unmodified
	// programs on the drop-in libibverbs (RDMAFS_LIBDIR, or built by lib.sh).
	for _, s := range []string{"demo.sh", "ud.sh", "flush.sh", "wire.sh", "c-programs.sh", "rdma-core-suite.sh", "verbs-tools.sh"} {
		t.Run(s, func(t *testing.T) {
			cmd := exec.Command("bash", s)
			cmd.Env = append(os.Environ(), "RDMAFS="+bin)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%s: %v\n%s", s, err, out)
			}
			if testing.Verbose() {
				t.Logf("%s", out)
			}
		})
	}
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }
