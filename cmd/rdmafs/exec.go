package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"rdmafs/internal/execview"
)

// libName is the library exec puts first on the loader's path.
const libName = "libibverbs.so.1"

// cmLibName is rdmafs's librdmacm, put on the path beside libName when
// there is one (cmLibDir).
const cmLibName = "librdmacm.so.1"

// probeWait is how long exec waits for a mount's daemon to answer before
// it leaves the mount out of the program's devices.
const probeWait = 2 * time.Second

// sourceRoot is the source tree the binary was built from, for the third
// place libdir looks. Builds may set it (go build -ldflags "-X
// main.sourceRoot=DIR"); otherwise it is the tree this file was compiled
// in, known from its own path unless the build used -trimpath.
var sourceRoot string

const libdirRule = `The library is looked for, in this order, in:
  1. $RDMAFS_LIBDIR, if set (then it must be there);
  2. lib/ next to the rdmafs executable, then ../lib/rdmafs/ (where
     make -C libibverbs install PREFIX=P puts it for P/bin/rdmafs);
  3. libibverbs/build/ of the source tree rdmafs was built from, if that
     tree still exists (make -C libibverbs builds it there).
rdmafs's librdmacm.so.1 (for rping, ucmatose, ib_write_bw -R, ...) is
taken from the same directory (make -C librdmacm install puts it there),
or, when that is the source tree's libibverbs/build/, from its
librdmacm/build/ (make -C librdmacm); without it programs get the
system's librdmacm.
`

const execHelp = `Usage: rdmafs exec [--mount MOUNTPOINT] -- PROGRAM [ARGS...]

Run an unmodified libibverbs program (ibv_devinfo, ibv_rc_pingpong,
ib_write_bw, python3 with pyverbs, ...) on rdmafs: PROGRAM is exec'd in
place of rdmafs with LD_LIBRARY_PATH=LIBDIR[:$LD_LIBRARY_PATH], so it loads
rdmafs's libibverbs.so.1 instead of rdma-core's, and its signals and exit
status are its own. The library finds the machine's rdmafs mounts itself;
--mount sets RDMAFS_DEVICE_MOUNT so that it shows only that device.

The program also sees its devices where programs look for a kernel's
before they call libibverbs (ibstat, ibstatus, UCX, Open MPI, rdma-core's
tests): /sys/class/infiniband/rdmafsN (the mount's sys/infiniband, served
live by the daemon), /sys/class/infiniband_verbs/uverbsN and
/dev/infiniband/uverbsN, in a mount namespace of its own (made with
util-linux's unshare; for a user other than root inside a user namespace,
where the program keeps its uid). Its network is the machine's.
RDMAFS_EXEC_SYSFS=0 or --no-sysfs runs it without that view.

` + libdirRule + `
Flags:
`

const libdirHelp = `Usage: rdmafs libdir

Print the directory holding rdmafs's libibverbs.so.1, the one rdmafs exec
puts on LD_LIBRARY_PATH.

` + libdirRule

// defaultSourceRoot is the module root this file was compiled in, or ""
// when the build recorded no absolute path (-trimpath) or the tree is
// gone.
func defaultSourceRoot() string {
	if sourceRoot != "" {
		return sourceRoot
	}
	_, file, _, ok := runtime.Caller(0)
	if !ok || !filepath.IsAbs(file) {
		return ""
	}
	root := filepath.Dir(filepath.Dir(filepath.Dir(file))) // cmd/rdmafs/exec.go
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		return ""
	}
	return root
}

// findLibDir applies libdirRule. env is the environment lookup, exe the
// rdmafs executable and root the source tree ("" for none).
func findLibDir(env func(string) (string, bool), exe, root string) (string, error) {
	has := func(dir string) bool {
		fi, err := os.Stat(filepath.Join(dir, libName))
		return err == nil && fi.Mode().IsRegular()
	}
	if dir, ok := env("RDMAFS_LIBDIR"); ok && dir != "" {
		if !has(dir) {
			return "", fmt.Errorf("RDMAFS_LIBDIR=%s has no %s", dir, libName)
		}
		return filepath.Abs(dir)
	}
	var looked []string
	if exe != "" {
		bin := filepath.Dir(exe)
		looked = append(looked, filepath.Join(bin, "lib"), filepath.Join(filepath.Dir(bin), "lib", "rdmafs"))
	}
	if root != "" {
		looked = append(looked, filepath.Join(root, "libibverbs", "build"))
	}
	for _, dir := range looked {
		if has(dir) {
			return dir, nil
		}
	}
	how := "make -C libibverbs"
	if root != "" {
		how = "make -C " + filepath.Join(root, "libibverbs")
	}
	return "", fmt.Errorf("no %s found (RDMAFS_LIBDIR is unset; looked in %s): build it with `%s` in the rdmafs source tree, or set RDMAFS_LIBDIR",
		libName, strings.Join(looked, ", "), how)
}

// cmLibDir is the directory to add for librdmacm.so.1 beside ibvDir, the
// one findLibDir chose: "" when ibvDir holds it too (an install, or
// RDMAFS_LIBDIR) or there is none; the source tree's librdmacm/build when
// ibvDir is the tree's libibverbs/build.
func cmLibDir(ibvDir, root string) string {
	has := func(dir string) bool {
		fi, err := os.Stat(filepath.Join(dir, cmLibName))
		return err == nil && fi.Mode().IsRegular()
	}
	if has(ibvDir) || root == "" || ibvDir != filepath.Join(root, "libibverbs", "build") {
		return ""
	}
	if dir := filepath.Join(root, "librdmacm", "build"); has(dir) {
		return dir
	}
	return ""
}

// libDir is findLibDir for this process.
func libDir() (string, error) {
	exe, err := os.Executable()
	if err == nil {
		if real, err := filepath.EvalSymlinks(exe); err == nil {
			exe = real
		}
	} else {
		exe = ""
	}
	return findLibDir(os.LookupEnv, exe, defaultSourceRoot())
}

func cmdLibdir(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("libdir", "libdir", stderr)
	fs.Usage = func() { fmt.Fprint(stderr, libdirHelp) }
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		fs.Usage()
		return usageError{errors.New("takes no arguments")}
	}
	dir, err := libDir()
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, dir)
	return nil
}

// exitCode makes run exit with a given status: 127 for a program that is
// not there, 126 for one that cannot be run, as env(1) and shells do.
type exitCode struct {
	code int
	err  error
}

func (e exitCode) Error() string { return e.err.Error() }

func cmdExec(args []string, stderr io.Writer) error {
	fs := newFlags("exec", "exec [--mount MOUNTPOINT] -- PROGRAM [ARGS...]", stderr)
	fs.SetInterspersed(false) // everything from PROGRAM on is the program's
	mount := fs.String("mount", "", "show the program only this rdmafs mount's device (sets RDMAFS_DEVICE_MOUNT)")
	noSysfs := fs.Bool("no-sysfs", false, "no /sys/class/infiniband and /dev/infiniband view (as RDMAFS_EXEC_SYSFS=0)")
	fs.Usage = func() { fmt.Fprintf(stderr, "%s%s", execHelp, fs.FlagUsages()) }
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return usageError{errors.New("need a PROGRAM")}
	}
	dir, err := libDir()
	if err != nil {
		return err
	}
	env := os.Environ()
	if *mount != "" {
		m, err := filepath.Abs(*mount)
		if err != nil {
			return err
		}
		if _, err := os.Stat(filepath.Join(m, "device")); err != nil {
			return fmt.Errorf("--mount %s: not an rdmafs mount (%v)", *mount, err)
		}
		env = setEnv(env, "RDMAFS_DEVICE_MOUNT", m)
	}
	ldpath := os.Getenv("LD_LIBRARY_PATH")
	if cm := cmLibDir(dir, defaultSourceRoot()); cm != "" {
		ldpath = prependPath(cm, ldpath)
	}
	env = setEnv(env, "LD_LIBRARY_PATH", prependPath(dir, ldpath))

	argv := fs.Args()
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return exitCode{127, err}
	}
	if *noSysfs || os.Getenv("RDMAFS_EXEC_SYSFS") == "0" {
		err = unix.Exec(path, argv, env)
		return exitCode{126, fmt.Errorf("%s: %w", path, err)}
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		return fmt.Errorf("the /sys/class/infiniband view needs util-linux's unshare (%v); RDMAFS_EXEC_SYSFS=0 runs the program without it", err)
	}
	if os.Getenv(execview.StageEnv) == "" {
		// The first stage: into a mount namespace of the program's own,
		// where this runs again.
		self, err := os.Executable()
		if err != nil {
			return fmt.Errorf("rdmafs exec: its own executable: %w", err)
		}
		outer := setEnv(setEnv(setEnv(os.Environ(), execview.StageEnv, "1"),
			execview.UIDEnv, strconv.Itoa(os.Getuid())), execview.GIDEnv, strconv.Itoa(os.Getgid()))
		cmd := execview.Command(unshare, self, os.Getuid(), args)
		err = unix.Exec(unshare, cmd, outer)
		return exitCode{126, fmt.Errorf("%s: %w", unshare, err)}
	}
	// The second stage: make the view, then the program.
	uid, _ := strconv.Atoi(os.Getenv(execview.UIDEnv))
	gid, _ := strconv.Atoi(os.Getenv(execview.GIDEnv))
	env = unsetEnv(env, execview.StageEnv, execview.UIDEnv, execview.GIDEnv)
	mi, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	// A mount that does not answer is left out, and named to the program's
	// library (RDMAFS_DEVICE_MOUNT), which would otherwise block on it.
	selection := envValue(env, "RDMAFS_DEVICE_MOUNT")
	skipped := false
	devs, err := execview.Devices(mi, selection, func(m string) bool {
		ok, answered := execview.Probe(m, probeWait)
		if !answered {
			fmt.Fprintf(os.Stderr, "rdmafs exec: %s does not answer within %v (its daemon is stopped or stuck): not a device for this program\n", m, probeWait)
			skipped = true
		}
		return ok
	})
	mi.Close()
	if skipped && selection == "" && len(devs) > 0 {
		var ms []string
		for _, d := range devs {
			ms = append(ms, d.Mount)
		}
		if list := strings.Join(ms, ":"); strings.Count(list, ":") == len(ms)-1 {
			env = setEnv(env, "RDMAFS_DEVICE_MOUNT", list)
		}
	}
	if err == nil {
		err = execview.Setup(devs)
	}
	if err != nil {
		return fmt.Errorf("%w (RDMAFS_EXEC_SYSFS=0 runs the program without the /sys/class/infiniband view)", err)
	}
	final := execview.Final(unshare, uid, gid, append([]string{path}, argv[1:]...))
	if uid == 0 {
		final[0] = argv[0]
	} else {
		path = unshare
	}
	err = unix.Exec(path, final, env)
	return exitCode{126, fmt.Errorf("%s: %w", path, err)}
}

// unsetEnv removes every k of keys from env.
func unsetEnv(env []string, keys ...string) []string {
	out := env[:0:0]
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		keep := true
		for _, x := range keys {
			if k == x {
				keep = false
			}
		}
		if keep {
			out = append(out, kv)
		}
	}
	return out
}

// envValue is k's value in env ("" when unset).
func envValue(env []string, k string) string {
	v := ""
	for _, kv := range env {
		if key, val, ok := strings.Cut(kv, "="); ok && key == k {
			v = val
		}
	}
	return v
}

// prependPath puts dir first on a colon-separated path, once.
func prependPath(dir, old string) string {
	if old == "" {
		return dir
	}
	if first, _, _ := strings.Cut(old, ":"); first == dir {
		return old
	}
	return dir + ":" + old
}

// setEnv sets k=v in env, replacing every earlier k.
func setEnv(env []string, k, v string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, k+"=") {
			out = append(out, kv)
		}
	}
	return append(out, k+"="+v)
}
