package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// fakeLib makes dir/libibverbs.so.1 (any regular file will do for the
// lookup) and returns dir.
func fakeLib(t *testing.T, dir string) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, libName), []byte("not really\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func envOf(kv map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := kv[k]; return v, ok }
}

func TestFindLibDir(t *testing.T) {
	tmp := t.TempDir()
	exe := filepath.Join(tmp, "prefix", "bin", "rdmafs")
	root := filepath.Join(tmp, "src")
	none := envOf(nil)

	// Nothing anywhere: the error says how to build it.
	_, err := findLibDir(none, exe, root)
	if err == nil || !strings.Contains(err.Error(), "make -C "+filepath.Join(root, "libibverbs")) {
		t.Fatalf("no library: %v", err)
	}

	// 3. the source tree's build directory.
	build := fakeLib(t, filepath.Join(root, "libibverbs", "build"))
	if got, err := findLibDir(none, exe, root); err != nil || got != build {
		t.Errorf("source tree: %q, %v; want %q", got, err, build)
	}
	// 2b. ../lib/rdmafs beside bin/ (make install) wins over the tree.
	installed := fakeLib(t, filepath.Join(tmp, "prefix", "lib", "rdmafs"))
	if got, err := findLibDir(none, exe, root); err != nil || got != installed {
		t.Errorf("installed: %q, %v; want %q", got, err, installed)
	}
	// 2a. lib/ next to the executable wins over that.
	beside := fakeLib(t, filepath.Join(tmp, "prefix", "bin", "lib"))
	if got, err := findLibDir(none, exe, root); err != nil || got != beside {
		t.Errorf("beside: %q, %v; want %q", got, err, beside)
	}
	// 1. RDMAFS_LIBDIR wins over everything, and must hold the library.
	mine := fakeLib(t, filepath.Join(tmp, "mine"))
	if got, err := findLibDir(envOf(map[string]string{"RDMAFS_LIBDIR": mine}), exe, root); err != nil || got != mine {
		t.Errorf("RDMAFS_LIBDIR: %q, %v; want %q", got, err, mine)
	}
	_, err = findLibDir(envOf(map[string]string{"RDMAFS_LIBDIR": tmp}), exe, root)
	if err == nil || !strings.Contains(err.Error(), "RDMAFS_LIBDIR") {
		t.Errorf("RDMAFS_LIBDIR without the library: %v", err)
	}
	// An empty RDMAFS_LIBDIR is unset.
	if got, err := findLibDir(envOf(map[string]string{"RDMAFS_LIBDIR": ""}), exe, root); err != nil || got != beside {
		t.Errorf("empty RDMAFS_LIBDIR: %q, %v", got, err)
	}
}

// librdmacm.so.1 is added from the source tree only beside the tree's
// libibverbs build; anywhere else it is in libibverbs's directory or not
// at all.
func TestCMLibDir(t *testing.T) {
	tmp := t.TempDir()
	root := filepath.Join(tmp, "src")
	ibv := fakeLib(t, filepath.Join(root, "libibverbs", "build"))
	if got := cmLibDir(ibv, root); got != "" {
		t.Errorf("no librdmacm built: %q", got)
	}
	cm := filepath.Join(root, "librdmacm", "build")
	if err := os.MkdirAll(cm, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cm, cmLibName), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if got := cmLibDir(ibv, root); got != cm {
		t.Errorf("source tree: %q, want %q", got, cm)
	}
	other := fakeLib(t, filepath.Join(tmp, "lib"))
	if got := cmLibDir(other, root); got != "" {
		t.Errorf("RDMAFS_LIBDIR or an install without librdmacm took the tree's: %q", got)
	}
	if err := os.WriteFile(filepath.Join(other, cmLibName), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if got := cmLibDir(other, root); got != "" {
		t.Errorf("librdmacm beside libibverbs is already on the path: %q", got)
	}
}

// A binary built from this tree knows the tree, so libdir finds
// libibverbs/build without configuration.
func TestDefaultSourceRoot(t *testing.T) {
	want, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if got := defaultSourceRoot(); got != want {
		t.Errorf("defaultSourceRoot() = %q, want %q", got, want)
	}
}

func TestPrependPath(t *testing.T) {
	for _, c := range [][3]string{
		{"/l", "", "/l"},
		{"/l", "/a:/b", "/l:/a:/b"},
		{"/l", "/l:/a", "/l:/a"},
		{"/l", "/a:/l", "/l:/a:/l"},
	} {
		if got := prependPath(c[0], c[1]); got != c[2] {
			t.Errorf("prependPath(%q, %q) = %q, want %q", c[0], c[1], got, c[2])
		}
	}
}

var (
	execBinOnce sync.Once
	execBin     string
	execBinErr  error
)

// rdmafsBin is this command built once for the exec tests, with a source
// root that does not exist, so only RDMAFS_LIBDIR and the executable's
// neighbours can supply the library.
func rdmafsBin(t *testing.T) string {
	t.Helper()
	execBinOnce.Do(func() {
		dir, err := os.MkdirTemp("", "rdmafs-exec-test")
		if err != nil {
			execBinErr = err
			return
		}
		execBin = filepath.Join(dir, "bin", "rdmafs")
		if err := os.Mkdir(filepath.Dir(execBin), 0o755); err != nil {
			execBinErr = err
			return
		}
		out, err := exec.Command("go", "build", "-o", execBin,
			"-ldflags", "-X main.sourceRoot="+filepath.Join(dir, "no-such-tree"), ".").CombinedOutput()
		if err != nil {
			execBinErr = errors.New(err.Error() + "\n" + string(out))
		}
	})
	if execBinErr != nil {
		t.Fatal(execBinErr)
	}
	return execBin
}

func TestMain(m *testing.M) {
	code := m.Run()
	if execBin != "" {
		os.RemoveAll(filepath.Dir(filepath.Dir(execBin)))
	}
	os.Exit(code)
}

// environ is os.Environ with the variables exec reads or sets replaced.
func environ(kv ...string) []string {
	var env []string
	for _, e := range os.Environ() {
		k, _, _ := strings.Cut(e, "=")
		switch k {
		case "RDMAFS_LIBDIR", "LD_LIBRARY_PATH", "RDMAFS_DEVICE_MOUNT":
			continue
		}
		env = append(env, e)
	}
	return append(env, kv...)
}

// exec replaces rdmafs with the program: same pid, the program's exit
// status, the library directory first on LD_LIBRARY_PATH, and
// RDMAFS_DEVICE_MOUNT only with --mount.
func TestExec(t *testing.T) {
	bin := rdmafsBin(t)
	lib := fakeLib(t, filepath.Join(t.TempDir(), "lib"))
	mnt := t.TempDir()
	if err := os.WriteFile(filepath.Join(mnt, "device"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	script := `echo "$$|$LD_LIBRARY_PATH|${RDMAFS_DEVICE_MOUNT-unset}|$1"; exit 7`
	for _, c := range []struct {
		name  string
		args  []string
		env   []string
		ldlib string
		mount string
	}{
		{"plain", nil, nil, lib, "unset"},
		{"old path", nil, []string{"LD_LIBRARY_PATH=/old:/older"}, lib + ":/old:/older", "unset"},
		{"mount", []string{"--mount", mnt}, nil, lib, mnt},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := append(append(c.args, "--", "sh", "-c", script, "sh"), "--not-a-flag")
			cmd := exec.Command(bin, append([]string{"exec"}, args...)...)
			cmd.Env = environ(append(c.env, "RDMAFS_LIBDIR="+lib)...)
			var out, errb bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errb
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			err := cmd.Wait()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 7 {
				t.Fatalf("exit %v, want status 7; stderr %q", err, errb.String())
			}
			want := strconv.Itoa(cmd.Process.Pid) + "|" + c.ldlib + "|" + c.mount + "|--not-a-flag\n"
			if out.String() != want {
				t.Errorf("program saw %q, want %q", out.String(), want)
			}
		})
	}

	// A signal that kills the program is the status rdmafs exec reports.
	cmd := exec.Command(bin, "exec", "--", "sh", "-c", "kill -TERM $$")
	cmd.Env = environ("RDMAFS_LIBDIR=" + lib)
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("killed program: %v", err)
	}
	if ws := ee.Sys().(syscall.WaitStatus); !ws.Signaled() || ws.Signal() != syscall.SIGTERM {
		t.Errorf("killed program: status %v, want killed by SIGTERM", ws)
	}
}

func TestExecErrors(t *testing.T) {
	bin := rdmafsBin(t)
	lib := fakeLib(t, filepath.Join(t.TempDir(), "lib"))
	for _, c := range []struct {
		name string
		args []string
		env  []string
		code int
		says string
	}{
		{"no program", []string{"exec"}, []string{"RDMAFS_LIBDIR=" + lib}, 2, "need a PROGRAM"},
		{"not found", []string{"exec", "--", "no-such-program-rdmafs"}, []string{"RDMAFS_LIBDIR=" + lib}, 127, "not found"},
		{"not a mount", []string{"exec", "--mount", t.TempDir(), "--", "true"}, []string{"RDMAFS_LIBDIR=" + lib}, 1, "not an rdmafs mount"},
		{"no library", []string{"exec", "--", "true"}, nil, 1, "make -C"},
		{"bad RDMAFS_LIBDIR", []string{"libdir"}, []string{"RDMAFS_LIBDIR=" + t.TempDir()}, 1, "has no libibverbs.so.1"},
		{"libdir no library", []string{"libdir"}, nil, 1, "make -C"},
		{"libdir args", []string{"libdir", "x"}, nil, 2, "no arguments"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cmd := exec.Command(bin, c.args...)
			cmd.Env = environ(c.env...)
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != c.code {
				t.Fatalf("%v: %v, want exit %d\n%s", c.args, err, c.code, out)
			}
			if !strings.Contains(string(out), c.says) {
				t.Errorf("%v said %q, want it to mention %q", c.args, out, c.says)
			}
		})
	}
}

// libdir prints the directory next to the executable when there is one.
func TestLibdirBesideExecutable(t *testing.T) {
	bin := rdmafsBin(t)
	lib := fakeLib(t, filepath.Join(filepath.Dir(bin), "lib"))
	defer os.RemoveAll(lib)
	cmd := exec.Command(bin, "libdir")
	cmd.Env = environ()
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(out)); got != lib {
		t.Errorf("libdir printed %q, want %q", got, lib)
	}
}

func TestUsageMentionsExec(t *testing.T) {
	var out, errb bytes.Buffer
	if rc := run([]string{"help"}, &out, &errb); rc != 0 {
		t.Fatalf("help: exit %d", rc)
	}
	for _, w := range []string{"rdmafs exec [--mount M] -- PROGRAM", "rdmafs libdir"} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("usage does not mention %q", w)
		}
	}
	out.Reset()
	errb.Reset()
	if rc := run([]string{"help", "exec"}, &out, &errb); rc != 0 {
		t.Fatalf("help exec: exit %d", rc)
	}
	for _, w := range []string{"--mount", "RDMAFS_LIBDIR", "lib/rdmafs", "libibverbs/build", "LD_LIBRARY_PATH"} {
		if !strings.Contains(errb.String(), w) {
			t.Errorf("exec --help does not mention %s", w)
		}
	}
}
