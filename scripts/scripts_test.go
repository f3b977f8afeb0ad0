// Package scripts holds the shell scripts a new user reads and runs; its
// test runs each of them against a real mount, so they stay true.
package scripts

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
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
	// verbs-tools.sh, c-programs.sh, rdma-core-suite.sh, memkinds.sh and
	// mpi.sh (Open MPI and MPICH) run unmodified
	// programs on the drop-in libibverbs (RDMAFS_LIBDIR, or built by lib.sh).
	for _, s := range []string{"demo.sh", "ud.sh", "flush.sh", "wire.sh", "c-programs.sh", "rdma-core-suite.sh", "verbs-tools.sh", "ucx.sh", "rdmacm-tools.sh", "mcast.sh", "rsockets.sh", "libfabric.sh", "install.sh", "doctor.sh", "qperf.sh", "discovery.sh", "memkinds.sh", "mpi.sh"} {
		t.Run(s, func(t *testing.T) {
			cmd := exec.Command("bash", s)
			cmd.Env = append(os.Environ(), "RDMAFS="+bin)
			start := time.Now()
			out, err := cmd.CombinedOutput()
			noteTime(t, s, time.Since(start))
			if err != nil {
				t.Fatalf("%s: %v\n%s", s, err, out)
			}
			if testing.Verbose() {
				t.Logf("%s", out)
			}
		})
	}
}

// A script that fails exits non-zero whatever teardown it registered:
// lib.sh's EXIT trap runs the at_exit hooks (here one that succeeds and
// one that fails) and still exits with the script's own status, so a
// script's failure cannot pass for success in TestScripts.
func TestLibKeepsExitStatus(t *testing.T) {
	for _, c := range []struct {
		body string
		want int
	}{
		{"at_exit 'true'; at_exit 'false'; exit 3", 3},
		{"at_exit 'true'; false", 1},
		{"at_exit 'echo hook'; true", 0},
	} {
		script := filepath.Join(t.TempDir(), "s.sh")
		if err := os.WriteFile(script, []byte("source "+filepath.Join(mustWd(t), "lib.sh")+"\n"+c.body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("bash", script)
		cmd.Env = append(os.Environ(), "RDMAFS=/bin/true")
		out, err := cmd.CombinedOutput()
		rc := 0
		if ee, ok := err.(*exec.ExitError); ok {
			rc = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if rc != c.want {
			t.Errorf("%q: exit %d, want %d\n%s", c.body, rc, c.want, out)
		}
	}
}

func mustWd(t *testing.T) string {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return wd
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

// noteTime appends "script seconds" to the file RDMAFS_SCRIPT_TIMES names
// (scripts/test.sh prints it after the run: the suite's time is kept in
// view script by script).
func noteTime(t *testing.T, script string, d time.Duration) {
	path := os.Getenv("RDMAFS_SCRIPT_TIMES")
	if path == "" {
		return
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Errorf("script times: %v", err)
		return
	}
	defer f.Close()
	fmt.Fprintf(f, "%-20s %5.0f s\n", script, d.Seconds())
}
