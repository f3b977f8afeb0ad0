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
	buildOnce sync.Once
	buildErr  string
	libDir    string
)

// built runs make in libibverbs/ once for the package and returns the
// build directory, which holds libibverbs.so.1.
func built(t *testing.T) string {
	t.Helper()
	mk := libcheck.Tool(t, "make", "make")
	libcheck.Tool(t, "cc", "gcc")
	libcheck.Tool(t, "nm", "binutils")
	libcheck.Tool(t, "objdump", "binutils")
	_, err := os.Stat("/usr/include/infiniband/verbs.h")
	libcheck.Need(t, "<infiniband/verbs.h> (libibverbs-dev)", err == nil)
	buildOnce.Do(func() {
		dir, err := filepath.Abs("..")
		if err != nil {
			buildErr = err.Error()
			return
		}
		out, err := exec.Command(mk, "-C", dir).CombinedOutput()
		if err != nil {
			buildErr = "make -C libibverbs: " + err.Error() + "\n" + string(out)
			return
		}
		libDir = filepath.Join(dir, "build")
	})
	if buildErr != "" {
		t.Fatal(buildErr)
	}
	return libDir
}

// TestExportSet: our library's dynamic symbol table is the system's,
// symbol for symbol: names, version nodes, default or hidden, function or
// data (and the data's size).
func TestExportSet(t *testing.T) {
	dir := built(t)
	sys := libcheck.SystemLib(t, "libibverbs.so.1", "libibverbs1")
	ours, theirs := libcheck.DynSyms(t, filepath.Join(dir, "libibverbs.so.1")), libcheck.DynSyms(t, sys)
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
	if len(missing)+len(extra) > 0 {
		t.Fatalf("export set differs from %s\nmissing:\n  %s\nextra:\n  %s", sys,
			strings.Join(missing, "\n  "), strings.Join(extra, "\n  "))
	}
	nodes, hidden := 0, 0
	for _, s := range ours {
		if strings.HasSuffix(s, "*ABS*") {
			nodes++
		}
		if strings.Contains(s, " (") {
			hidden++
		}
	}
	if len(theirs) == 0 || nodes == 0 {
		t.Fatalf("nothing read from %s", sys)
	}
	t.Logf("%d symbols (%d hidden) in %d version nodes, as %s", len(ours)-nodes, hidden, nodes, sys)
}

// versionDefs reads objdump -p: the SONAME and each version definition
// with the node it inherits from ("IBVERBS_1.1 < IBVERBS_1.0").
func versionDefs(t *testing.T, lib string) (soname string, defs []string) {
	t.Helper()
	out, err := exec.Command("objdump", "-p", lib).Output()
	if err != nil {
		t.Fatalf("objdump -p %s: %v", lib, err)
	}
	in := false
	for l := range strings.Lines(string(out)) {
		f := strings.Fields(l)
		switch {
		case len(f) == 2 && f[0] == "SONAME":
			soname = f[1]
		case strings.HasPrefix(l, "Version definitions:"):
			in = true
		case in && len(f) == 0, in && strings.HasPrefix(l, "Version References"):
			in = false
		case in && len(f) == 4 && f[1] != "0x01": // 0x01: the file's own base entry
			defs = append(defs, f[3])
		case in && len(f) == 1 && strings.HasPrefix(l, "\t") && len(defs) > 0:
			defs[len(defs)-1] += " < " + f[0]
		}
	}
	return soname, defs
}

// TestVersionNodes: the soname, and the version nodes in the same order
// with the same inheritance.
func TestVersionNodes(t *testing.T) {
	dir := built(t)
	sys := libcheck.SystemLib(t, "libibverbs.so.1", "libibverbs1")
	soname, ours := versionDefs(t, filepath.Join(dir, "libibverbs.so.1"))
	if soname != "libibverbs.so.1" {
		t.Errorf("soname %q, want libibverbs.so.1", soname)
	}
	_, theirs := versionDefs(t, sys)
	if !slices.Equal(ours, theirs) {
		t.Errorf("version definitions\n  ours:   %v\n  system: %v", ours, theirs)
	}
	if len(ours) == 0 {
		t.Error("no version definitions read")
	}
	link, err := os.Readlink(filepath.Join(dir, "libibverbs.so"))
	if err != nil || link != "libibverbs.so.1" {
		t.Errorf("libibverbs.so -> %q (%v), want libibverbs.so.1", link, err)
	}
}

// TestProgramsLoad: unmodified programs start against our library: every
// symbol they and the providers they pull in (libmlx5, libefa, librdmacm)
// import resolves, the constructors run, and the real library is never
// mapped. Without an rdmafs mount they find no device, or whatever the
// implementation finds; that is not what is checked here.
func TestProgramsLoad(t *testing.T) {
	dir := built(t)
	sys := libcheck.SystemLib(t, "libibverbs.so.1", "libibverbs1")
	for _, c := range []struct {
		pkg  string
		args []string
	}{
		{"ibverbs-utils", []string{"ibv_devices"}},
		{"ibverbs-utils", []string{"ibv_devinfo", "-l"}},
		{"perftest", []string{"ib_write_bw", "--help"}},
		{"python3-pyverbs", []string{"/usr/bin/python3", "-c",
			"import pyverbs.device, pyverbs.providers.mlx5.mlx5dv, pyverbs.providers.efa.efadv"}},
	} {
		t.Run(filepath.Base(c.args[0]), func(t *testing.T) {
			prog := libcheck.Tool(t, c.args[0], c.pkg)
			if c.pkg == "python3-pyverbs" {
				err := exec.Command(prog, "-c", "import pyverbs").Run()
				libcheck.Need(t, "pyverbs (python3-pyverbs)", err == nil)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, prog, c.args[1:]...)
			cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+dir, "LD_BIND_NOW=1", "LD_DEBUG=files")
			out, err := cmd.CombinedOutput()
			text := string(out)
			for _, bad := range []string{"symbol lookup error", "undefined symbol", "error while loading shared libraries", "version `IBVERBS"} {
				if strings.Contains(text, bad) {
					t.Fatalf("%v: %s:\n%s", c.args, bad, tail(text))
				}
			}
			if ee, ok := err.(*exec.ExitError); ok && (ee.ExitCode() == 127 || !ee.Exited()) {
				t.Fatalf("%v: %v\n%s", c.args, err, tail(text))
			} else if err != nil && !ok {
				t.Fatalf("%v: %v", c.args, err)
			}
			ourInit := "calling init: " + filepath.Join(dir, "libibverbs.so.1")
			if !strings.Contains(text, ourInit) {
				t.Errorf("%v: our library was not initialised (no %q)", c.args, ourInit)
			}
			if strings.Contains(text, sys) {
				t.Errorf("%v: the system library %s was loaded", c.args, sys)
			}
		})
	}
}

// tail is the end of a long LD_DEBUG transcript, where the error is.
func tail(s string) string {
	ls := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(ls) > 40 {
		ls = ls[len(ls)-40:]
	}
	return strings.Join(ls, "\n")
}

// TestRdmafsExec: rdmafs exec, built from this tree with no configuration,
// finds the library in libibverbs/build and runs a program on it.
func TestRdmafsExec(t *testing.T) {
	dir := built(t)
	gobin := libcheck.Tool(t, "go", "Go")
	prog := libcheck.Tool(t, "ibv_devices", "ibverbs-utils")
	bin := filepath.Join(t.TempDir(), "rdmafs")
	if out, err := exec.Command(gobin, "build", "-o", bin, "rdmafs/cmd/rdmafs").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	var env []string
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "RDMAFS_LIBDIR=") && !strings.HasPrefix(e, "LD_LIBRARY_PATH=") {
			env = append(env, e)
		}
	}
	cmd := exec.Command(bin, "libdir")
	cmd.Env = env
	out, err := cmd.Output()
	if err != nil || strings.TrimSpace(string(out)) != dir {
		t.Fatalf("rdmafs libdir: %q, %v; want %s", out, err, dir)
	}
	cmd = exec.Command(bin, "exec", "--", prog)
	cmd.Env = append(env, "LD_DEBUG=files")
	out, _ = cmd.CombinedOutput()
	if want := "calling init: " + filepath.Join(dir, "libibverbs.so.1"); !strings.Contains(string(out), want) {
		t.Errorf("rdmafs exec -- ibv_devices did not load %s:\n%s", dir, tail(string(out)))
	}
}
