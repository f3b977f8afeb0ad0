// Package doctor checks whether a machine can run rdmafs: the kernel and
// its FUSE passthrough, /dev/fuse and the privileges a mount needs, the
// drop-in C libraries and the system rdma-core they stand in for, the
// Debian packages rdmafs exec's programs come from, hugepages, existing
// mounts and kernel RDMA devices. Each check gives one line: ok, or what
// is wrong and the command that fixes it. rdmafs doctor prints them all;
// rdmafs mount runs the ones a mount needs when it fails, to say why.
//
// Everything the checks read goes through Env, so that tests can point
// them at a fake /proc, /sys and /dev and at fake commands.
package doctor

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Status is a check's verdict.
type Status int

const (
	OK   Status = iota
	Info        // nothing wrong, something worth knowing
	Warn        // rdmafs runs, but some programs will not
	Fail        // rdmafs cannot do what the check is about
	Skip        // the check could not run (another check says why)
)

func (s Status) String() string {
	return [...]string{"ok", "info", "warn", "FAIL", "skip"}[s]
}

// Result is one check's line.
type Result struct {
	Name   string // short and stable: kernel, passthrough, /dev/fuse, ...
	Status Status
	Detail string // what was found, or what is wrong and what it breaks
	Fix    string // the command that fixes it; "" when there is nothing to fix
	// Mount is set on the checks a mount needs to pass: those rdmafs
	// mount runs again when it fails.
	Mount bool
}

func (r Result) String() string {
	s := fmt.Sprintf("%-4s  %-15s %s", r.Status, r.Name, r.Detail)
	if r.Fix != "" && (r.Status == Warn || r.Status == Fail) {
		s += "\n      " + strings.Repeat(" ", 15) + " fix: " + r.Fix
	}
	return s
}

// Env is what the checks look at. Zero fields take the machine's own
// (Default fills them).
type Env struct {
	Root   string // prefix of /proc, /sys, /dev and /etc paths ("" for /)
	Euid   int
	CapEff uint64 // effective capabilities (/proc/self/status CapEff)
	// Release is the kernel release (uname -r).
	Release string
	// Probe is the passthrough check mount makes (fsnode.ProbePassthrough);
	// nil skips it.
	Probe func() error
	// LibDir is where rdmafs exec takes libibverbs.so.1 from, LibErr why
	// there is none; CMLibDir where it takes librdmacm.so.1 from ("" for
	// LibDir).
	LibDir   string
	LibErr   error
	CMLibDir string
	// SourceDir is the source tree rdmafs was built from, if known, for
	// the make commands of fixes.
	SourceDir string
	// SystemLib finds the system's copy of a library (libibverbs.so.1),
	// "" when there is none.
	SystemLib func(name string) string
	// Dpkg reports a Debian package's installed version ("" when it is
	// not installed) and ok=false when there is no dpkg to ask.
	Dpkg func(pkg string) (version string, ok bool)
}

// Default is the Env of this process, with the given library lookup.
func Default(libDir string, libErr error, cmLibDir, sourceDir string, probe func() error) *Env {
	e := &Env{
		Euid:      os.Geteuid(),
		Probe:     probe,
		LibDir:    libDir,
		LibErr:    libErr,
		CMLibDir:  cmLibDir,
		SourceDir: sourceDir,
		SystemLib: systemLib,
		Dpkg:      dpkg,
	}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		e.Release = unix.ByteSliceToString(u.Release[:])
	}
	e.CapEff = capEff("/proc/self/status")
	return e
}

func (e *Env) path(p string) string { return filepath.Join(e.Root, p) }

// CapSysAdmin is CAP_SYS_ADMIN's bit in CapEff.
const CapSysAdmin = 1 << 21

// Run runs every check, in order; a check another one makes pointless
// (the passthrough probe without /dev/fuse) is skipped with the reason.
func Run(e *Env) []Result {
	var rs []Result
	kernel := e.kernel()
	dev := e.devFuse()
	priv := e.privileges()
	rs = append(rs, kernel, dev, priv)
	rs = append(rs, e.passthrough(kernel, dev, priv))
	rs = append(rs, e.libraries()...)
	rs = append(rs, e.packages(), e.hugepages(), e.mounts(), e.rdmaDevices())
	return rs
}

// RunMount runs the checks a mount needs and returns those that failed.
func RunMount(e *Env) []Result {
	var bad []Result
	for _, r := range Run(e) {
		if r.Mount && r.Status == Fail {
			bad = append(bad, r)
		}
	}
	return bad
}

// Print writes one line per result and a verdict, and reports whether
// the machine can run rdmafs (no check failed).
func Print(w io.Writer, rs []Result) bool {
	failed := 0
	for _, r := range rs {
		fmt.Fprintln(w, r)
		if r.Status == Fail {
			failed++
		}
	}
	if failed == 0 {
		fmt.Fprintln(w, "rdmafs can run here")
		return true
	}
	fmt.Fprintf(w, "rdmafs cannot run here: %d check(s) failed\n", failed)
	return false
}

// MinKernel is the first Linux with FUSE passthrough.
var MinKernel = [2]int{6, 9}

func (e *Env) kernel() Result {
	r := Result{Name: "kernel", Mount: true}
	maj, min, ok := parseRelease(e.Release)
	switch {
	case !ok:
		r.Status, r.Detail = Warn, fmt.Sprintf("cannot read the kernel version from %q; rdmafs needs Linux %d.%d or later", e.Release, MinKernel[0], MinKernel[1])
	case maj < MinKernel[0] || maj == MinKernel[0] && min < MinKernel[1]:
		r.Status = Fail
		r.Detail = fmt.Sprintf("Linux %s: FUSE passthrough, which shares rings and memory with programs, needs Linux %d.%d or later", e.Release, MinKernel[0], MinKernel[1])
		r.Fix = "boot a Linux 6.9 or later kernel built with CONFIG_FUSE_PASSTHROUGH=y (Debian: apt-get install -t bookworm-backports linux-image-amd64)"
	default:
		r.Detail = "Linux " + e.Release
	}
	return r
}

// parseRelease takes the major and minor numbers of a kernel release
// ("6.18.44-fc-v1147").
func parseRelease(s string) (int, int, bool) {
	f := strings.FieldsFunc(s, func(r rune) bool { return r < '0' || r > '9' })
	if len(f) < 2 {
		return 0, 0, false
	}
	maj, err1 := strconv.Atoi(f[0])
	min, err2 := strconv.Atoi(f[1])
	return maj, min, err1 == nil && err2 == nil
}

func (e *Env) devFuse() Result {
	r := Result{Name: "/dev/fuse", Mount: true}
	var st unix.Stat_t
	err := unix.Stat(e.path("/dev/fuse"), &st)
	switch {
	case errors.Is(err, unix.ENOENT):
		r.Status, r.Detail = Fail, "/dev/fuse is missing: no FUSE mount is possible"
		r.Fix = "modprobe fuse; [ -e /dev/fuse ] || mknod -m 0666 /dev/fuse c 10 229  (in a container: run it with --device /dev/fuse)"
		return r
	case err != nil:
		r.Status, r.Detail, r.Fix = Fail, fmt.Sprintf("/dev/fuse: %v", err), "ls -l /dev/fuse"
		return r
	case st.Mode&unix.S_IFMT != unix.S_IFCHR || unix.Major(st.Rdev) != 10 || unix.Minor(st.Rdev) != 229:
		r.Status = Fail
		r.Detail = fmt.Sprintf("/dev/fuse is not the FUSE character device 10:229 (mode %o, %d:%d)", st.Mode, unix.Major(st.Rdev), unix.Minor(st.Rdev))
		r.Fix = "rm /dev/fuse; mknod -m 0666 /dev/fuse c 10 229"
		return r
	}
	f, err := os.OpenFile(e.path("/dev/fuse"), os.O_RDWR, 0)
	if err != nil {
		r.Status = Fail
		r.Detail = fmt.Sprintf("/dev/fuse cannot be opened: %v", unwrap(err))
		r.Fix = "run rdmafs as root (sudo rdmafs ...)"
		if errors.Is(err, unix.EPERM) && e.Euid == 0 {
			// root refused: a device cgroup (a container without it)
			r.Fix = "in a container: run it with --device /dev/fuse (docker/podman), or allow c 10:229 in its device cgroup"
		}
		return r
	}
	f.Close()
	r.Detail = "/dev/fuse opens read-write"
	return r
}

func (e *Env) privileges() Result {
	r := Result{Name: "privileges", Mount: true}
	switch {
	case e.Euid == 0 && e.CapEff&CapSysAdmin != 0:
		r.Detail = "root with CAP_SYS_ADMIN"
	case e.CapEff&CapSysAdmin != 0:
		r.Status = Fail
		r.Detail = fmt.Sprintf("uid %d with CAP_SYS_ADMIN: the daemon mounts directly (no fusermount) with allow_other, which needs root", e.Euid)
		r.Fix = "sudo rdmafs mount MOUNTPOINT"
	case e.Euid == 0:
		r.Status = Fail
		r.Detail = "root without CAP_SYS_ADMIN: FUSE passthrough (registering backing files) needs it"
		r.Fix = "in a container: run it with --cap-add SYS_ADMIN (or --privileged)"
	default:
		r.Status = Fail
		r.Detail = fmt.Sprintf("uid %d is not root: mounting needs root, FUSE passthrough CAP_SYS_ADMIN (other users can run programs on a device root mounted)", e.Euid)
		r.Fix = "sudo rdmafs doctor; sudo rdmafs mount MOUNTPOINT"
	}
	return r
}

func (e *Env) passthrough(kernel, dev, priv Result) Result {
	r := Result{Name: "passthrough", Mount: true}
	switch {
	case e.Probe == nil:
		r.Status, r.Detail = Skip, "not probed"
	case dev.Status == Fail:
		r.Status, r.Detail = Skip, "not probed: needs /dev/fuse (above)"
	case priv.Status == Fail:
		r.Status, r.Detail = Skip, "not probed: needs root (above)"
	default:
		if err := e.Probe(); err != nil {
			r.Status = Fail
			r.Detail = strings.TrimPrefix(err.Error(), "fsnode: ")
			r.Fix = "boot a Linux 6.9 or later kernel built with CONFIG_FUSE_PASSTHROUGH=y, and run rdmafs as root"
			if kernel.Status == Fail {
				r.Fix = kernel.Fix
			}
			return r
		}
		r.Detail = "FUSE passthrough works (a backing file registered, as mount does)"
	}
	return r
}

func unwrap(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// capEff reads the effective capability set of a /proc/PID/status file.
func capEff(status string) uint64 {
	b, err := os.ReadFile(status)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			n, _ := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return n
		}
	}
	return 0
}

// run runs a helper program bounded in time, as every external program
// the checks use: a wedged dpkg must not hang a mount's diagnosis.
func run(name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.WaitDelay = time.Second
	done := make(chan struct{})
	var out []byte
	var err error
	go func() { out, err = cmd.Output(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		if cmd.Process != nil {
			cmd.Process.Kill()
		}
		<-done
		return "", fmt.Errorf("%s: timed out", name)
	}
	return string(out), err
}

// dpkg asks dpkg-query for a package's installed version.
func dpkg(pkg string) (string, bool) {
	if _, err := exec.LookPath("dpkg-query"); err != nil {
		return "", false
	}
	out, err := run("dpkg-query", "-W", "-f=${Status}\t${Version}", pkg)
	if err != nil {
		return "", true
	}
	status, version, _ := strings.Cut(out, "\t")
	if !strings.HasSuffix(status, " installed") {
		return "", true
	}
	return version, true
}

// systemLib finds the loader's copy of a library the way ld.so would for
// a program without LD_LIBRARY_PATH: ldconfig's cache, else the usual
// directories.
func systemLib(name string) string {
	if out, err := run("ldconfig", "-p"); err == nil {
		for _, line := range strings.Split(out, "\n") {
			f := strings.Fields(line)
			if len(f) >= 4 && f[0] == name && f[len(f)-2] == "=>" {
				return f[len(f)-1]
			}
		}
	}
	for _, d := range []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib"} {
		p := filepath.Join(d, name)
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}
