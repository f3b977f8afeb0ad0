package libtest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"rdmafs/internal/libcheck"
)

var (
	buildOnce       sync.Once
	buildErr        string
	cmDir, verbsDir string
)

// built makes librdmacm/ and libibverbs/ once and returns their build
// directories.
func built(t *testing.T) (string, string) {
	t.Helper()
	mk := libcheck.Tool(t, "make", "make")
	libcheck.Tool(t, "cc", "gcc")
	libcheck.Tool(t, "objdump", "binutils")
	_, err := os.Stat("/usr/include/rdma/rdma_cma.h")
	libcheck.Need(t, "<rdma/rdma_cma.h> (librdmacm-dev)", err == nil)
	buildOnce.Do(func() {
		root, err := filepath.Abs("../..")
		if err != nil {
			buildErr = err.Error()
			return
		}
		for _, d := range []string{"librdmacm", "libibverbs"} {
			if out, err := exec.Command(mk, "-C", filepath.Join(root, d)).CombinedOutput(); err != nil {
				buildErr = "make -C " + d + ": " + err.Error() + "\n" + string(out)
				return
			}
		}
		cmDir = filepath.Join(root, "librdmacm", "build")
		verbsDir = filepath.Join(root, "libibverbs", "build")
	})
	if buildErr != "" {
		t.Fatal(buildErr)
	}
	return cmDir, verbsDir
}

// TestExportSet: our dynamic symbol table is the system librdmacm's.
func TestExportSet(t *testing.T) {
	dir, _ := built(t)
	sys := libcheck.SystemLib(t, "librdmacm.so.1", "librdmacm1")
	ours, theirs := libcheck.DynSyms(t, filepath.Join(dir, "librdmacm.so.1")), libcheck.DynSyms(t, sys)
	if !slices.Equal(ours, theirs) {
		var missing, extra []string
		for _, s := range theirs {
			if !slices.Contains(ours, s) {
				missing = append(missing, s)
			}
		}
		for _, s := range ours {
			if !slices.Contains(theirs, s) {
				extra = append(extra, s)
			}
		}
		t.Fatalf("export set differs from %s\nmissing:\n  %s\nextra:\n  %s", sys,
			strings.Join(missing, "\n  "), strings.Join(extra, "\n  "))
	}
	if len(ours) < 60 {
		t.Fatalf("only %d symbols read", len(ours))
	}
	t.Logf("%d symbols, as %s", len(ours), sys)
}

// TestSonameAndNodes: the soname, and the version nodes with their
// inheritance (objdump -p), as the system library's.
func TestSonameAndNodes(t *testing.T) {
	dir, _ := built(t)
	defs := func(lib string) (string, []string) {
		out, err := exec.Command("objdump", "-p", lib).Output()
		if err != nil {
			t.Fatal(err)
		}
		var soname string
		var d []string
		in := false
		for l := range strings.Lines(string(out)) {
			f := strings.Fields(l)
			switch {
			case len(f) == 2 && f[0] == "SONAME":
				soname = f[1]
			case strings.HasPrefix(l, "Version definitions:"):
				in = true
			case in && (len(f) == 0 || strings.HasPrefix(l, "Version References")):
				in = false
			case in && len(f) == 4 && f[1] != "0x01":
				d = append(d, f[3])
			case in && len(f) == 1 && len(d) > 0:
				d[len(d)-1] += " < " + f[0]
			}
		}
		return soname, d
	}
	so, ours := defs(filepath.Join(dir, "librdmacm.so.1"))
	_, theirs := defs(libcheck.SystemLib(t, "librdmacm.so.1", "librdmacm1"))
	if so != "librdmacm.so.1" {
		t.Errorf("soname %q", so)
	}
	if !slices.Equal(ours, theirs) || len(ours) == 0 {
		t.Errorf("version definitions\n  ours:   %v\n  system: %v", ours, theirs)
	}
}

// TestProgramsLoad: Debian's unmodified CM programs start against our
// librdmacm and libibverbs (every import resolves at once, the system
// librdmacm is never mapped). Without a mount they find no device.
func TestProgramsLoad(t *testing.T) {
	cm, verbs := built(t)
	sys := libcheck.SystemLib(t, "librdmacm.so.1", "librdmacm1")
	for _, c := range []struct {
		pkg  string
		args []string
	}{
		{"rdmacm-utils", []string{"rping", "-h"}},
		{"rdmacm-utils", []string{"ucmatose", "-h"}},
		{"rdmacm-utils", []string{"udaddy", "-h"}},
		{"rdmacm-utils", []string{"cmtime", "-h"}},
		{"rdmacm-utils", []string{"rdma_server", "-h"}},
		{"rdmacm-utils", []string{"rdma_client", "-h"}},
		{"perftest", []string{"ib_write_bw", "--help"}},
	} {
		t.Run(c.args[0], func(t *testing.T) {
			prog := libcheck.Tool(t, c.args[0], c.pkg)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, prog, c.args[1:]...)
			cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+verbs+":"+cm, "LD_BIND_NOW=1", "LD_DEBUG=files",
				"RDMAFS_DEVICE_MOUNT=/nonexistent")
			out, _ := cmd.CombinedOutput()
			text := string(out)
			for _, bad := range []string{"symbol lookup error", "undefined symbol", "error while loading shared libraries", "version `RDMACM"} {
				if strings.Contains(text, bad) {
					t.Fatalf("%v: %s:\n%s", c.args, bad, text)
				}
			}
			if strings.Contains(text, "file="+sys) || strings.Contains(text, "/x86_64-linux-gnu/librdmacm.so.1 ") {
				t.Errorf("%v mapped the system librdmacm", c.args)
			}
			if !strings.Contains(text, filepath.Join(cm, "librdmacm.so.1")) {
				t.Errorf("%v did not load ours:\n%s", c.args, text)
			}
		})
	}
}
