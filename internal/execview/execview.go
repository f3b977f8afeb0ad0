// Package execview gives a program that rdmafs exec runs the view of its
// RDMA devices a kernel device gives, in a private mount namespace of the
// program (the network namespace stays the machine's, so its own sockets
// reach what they reach without rdmafs):
//
//	/sys/class/infiniband/rdmafsN        the mount's sys/infiniband (live, from the daemon)
//	/sys/class/infiniband_verbs/uverbsN  ibdev, abi_version, dev
//	/sys/class/infiniband_verbs/abi_version
//	/sys/class/infiniband_mad/abi_version (libibumad's check)
//	/dev/infiniband/uverbsN              a character device the program may open (/dev/null's)
//
// The names are the ones the drop-in libibverbs gives the same mounts:
// fuse.rdmafs mounts of /proc/self/mountinfo whose root is the mount's
// own, in that order, limited by RDMAFS_DEVICE_MOUNT, whose device file
// can be read. /sys/class and /dev are covered by a tmpfs each that
// holds the new entries and bind mounts of every old one, since neither
// sysfs nor devtmpfs takes new names (and a name made in devtmpfs would
// be every namespace's).
//
// rdmafs exec runs in two stages. The first (Command) execs util-linux's
// unshare, which makes the mount namespace (and, for a user other than
// root, a user namespace in which it is root) and execs rdmafs again; the
// second (Setup, Final) makes the view and execs the program, for a user
// other than root through a nested user namespace in which the program is
// its own uid again. The process keeps its PID through every exec, so the
// program's signals and exit status are its own, and the daemon sees the
// program's real uid.
package execview

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// StageEnv marks the second stage: rdmafs exec runs inside the new
// namespaces.
const StageEnv = "RDMAFS_EXEC_STAGE"

// UIDEnv and GIDEnv carry the program's uid and gid into the second
// stage of a user other than root (who is root there).
const (
	UIDEnv = "RDMAFS_EXEC_UID"
	GIDEnv = "RDMAFS_EXEC_GID"
)

// Device is one device as the library names it.
type Device struct {
	Name  string // rdmafsN
	Mount string
}

// Devices lists the devices the library shows: the fuse.rdmafs mounts of
// mountinfo whose root is "/" (a bind of a subtree, such as the view's
// own, is not a device), in order, those selected (RDMAFS_DEVICE_MOUNT's
// list, colon-separated; empty: all), whose device file readable says
// can be read.
func Devices(mountinfo io.Reader, selection string, readable func(mount string) bool) ([]Device, error) {
	var out []Device
	sc := bufio.NewScanner(mountinfo)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		if t := strings.Fields(post); len(t) == 0 || t[0] != "fuse.rdmafs" {
			continue
		}
		f := strings.Fields(pre)
		if len(f) < 5 || f[3] != "/" {
			continue
		}
		mnt := Unescape(f[4])
		if !selected(mnt, selection) || dup(out, mnt) || !readable(mnt) {
			continue
		}
		out = append(out, Device{Name: fmt.Sprintf("rdmafs%d", len(out)), Mount: mnt})
	}
	return out, sc.Err()
}

func dup(l []Device, mnt string) bool {
	for _, d := range l {
		if d.Mount == mnt {
			return true
		}
	}
	return false
}

func selected(mnt, selection string) bool {
	if selection == "" {
		return true
	}
	for _, want := range strings.Split(selection, ":") {
		if want == "" {
			continue
		}
		if want == mnt {
			return true
		}
		if real, err := filepath.EvalSymlinks(want); err == nil && real == mnt {
			return true
		}
	}
	return false
}

// Unescape undoes mountinfo's \ooo escapes (\040 for a space); fsnode
// and doctor read mountinfo with it too.
func Unescape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// Readable says whether a mount's device file can be read, as the
// library's test for listing it.
func Readable(mount string) bool {
	f, err := os.Open(filepath.Join(mount, "device"))
	if err != nil {
		return false
	}
	defer f.Close()
	var b [1]byte
	n, _ := f.Read(b[:])
	return n == 1
}

// Probe is Readable within wait: a mount whose daemon does not answer (a
// stopped or stuck daemon's mount, which would block the open for ever)
// is not readable, and answered is false. The probe left behind ends
// with the process (exec kills it) or when the daemon answers.
func Probe(mount string, wait time.Duration) (readable, answered bool) {
	ch := make(chan bool, 1)
	go func() { ch <- Readable(mount) }()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case ok := <-ch:
		return ok, true
	case <-t.C:
		return false, false
	}
}

// Command is the first stage: the argv that runs self (rdmafs) as
// `exec ARGS...` with StageEnv set, inside a new mount namespace (and a
// user namespace where uid is not 0), through unshare.
func Command(unshare, self string, uid int, args []string) []string {
	argv := []string{unshare, "--mount", "--propagation", "private"}
	if uid != 0 {
		argv = append(argv, "--user", "--map-root-user")
	}
	return append(append(argv, "--", self, "exec"), args...)
}

// Final is the second stage's last exec: the program itself, or for a
// user other than root (uid and gid, from UIDEnv and GIDEnv) the program
// through unshare into a nested user namespace where it is its own uid
// and gid again (the outer one maps root to them).
func Final(unshare string, uid, gid int, program []string) []string {
	if uid == 0 {
		return program
	}
	argv := []string{unshare, "--user", "--map-user=" + strconv.Itoa(uid), "--map-group=" + strconv.Itoa(gid), "--"}
	return append(argv, program...)
}

// Setup makes the view in the current mount namespace, which must be the
// process's own (made by the first stage): it needs CAP_SYS_ADMIN there.
func Setup(devs []Device) error {
	if err := coverClass(devs); err != nil {
		return err
	}
	return coverDev(len(devs))
}

// opErr is an error with the failing operation, its path and errno.
func opErr(op, path string, err error) error {
	var en unix.Errno
	if errors.As(err, &en) {
		return fmt.Errorf("%s %s: %w (errno %d)", op, path, err, int(en))
	}
	return fmt.Errorf("%s %s: %w", op, path, err)
}

func mount(src, dst, fstype string, flags uintptr, data string) error {
	if err := unix.Mount(src, dst, fstype, flags, data); err != nil {
		return opErr("mount", fmt.Sprintf("%s on %s", src, dst), err)
	}
	return nil
}

func writeFile(path, content string) error {
	if err := os.WriteFile(path, []byte(content), 0o444); err != nil {
		return opErr("write", path, err)
	}
	return nil
}

func mkdir(path string) error {
	if err := os.Mkdir(path, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return opErr("mkdir", path, err)
	}
	return nil
}

// cover mounts a tmpfs on dir holding bind mounts of every entry dir had
// (skipping those skip names), symlinks copied; then fill adds the new
// entries and the tmpfs turns read-only.
func cover(dir string, skip map[string]bool, fill func() error) error {
	old, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return opErr("open", dir, err)
	}
	defer unix.Close(old)
	oldPath := fmt.Sprintf("/proc/self/fd/%d", old)
	ents, err := os.ReadDir(oldPath)
	if err != nil {
		return opErr("read", dir, err)
	}
	if err := mount("rdmafs-view", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "mode=0755"); err != nil {
		return err
	}
	for _, e := range ents {
		name := e.Name()
		if skip[name] {
			continue
		}
		src, dst := oldPath+"/"+name, filepath.Join(dir, name)
		switch t := e.Type(); {
		case t&os.ModeSymlink != 0:
			target, err := os.Readlink(src)
			if err != nil {
				return opErr("readlink", src, err)
			}
			if err := os.Symlink(target, dst); err != nil {
				return opErr("symlink", dst, err)
			}
			continue
		case t.IsDir():
			if err := mkdir(dst); err != nil {
				return err
			}
		default:
			if err := os.WriteFile(dst, nil, 0o644); err != nil {
				return opErr("create", dst, err)
			}
		}
		if err := mount(src, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return err
		}
	}
	if err := fill(); err != nil {
		return err
	}
	return mount("", dir, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NOEXEC, "")
}

// ABI versions a kernel shows: uverbs' device and class, ib_umad's class.
const (
	uverbsABI      = "1"
	uverbsClassABI = "6"
	umadClassABI   = "5"
	uverbsMajor    = 231
	uverbsMinor0   = 192
)

func coverClass(devs []Device) error {
	const class = "/sys/class"
	skip := map[string]bool{"infiniband": true, "infiniband_verbs": true, "infiniband_mad": true}
	return cover(class, skip, func() error {
		ib, verbs, mad := class+"/infiniband", class+"/infiniband_verbs", class+"/infiniband_mad"
		for _, d := range []string{ib, verbs, mad} {
			if err := mkdir(d); err != nil {
				return err
			}
		}
		if err := writeFile(verbs+"/abi_version", uverbsClassABI+"\n"); err != nil {
			return err
		}
		if err := writeFile(mad+"/abi_version", umadClassABI+"\n"); err != nil {
			return err
		}
		for i, d := range devs {
			dst := filepath.Join(ib, d.Name)
			if err := mkdir(dst); err != nil {
				return err
			}
			// A daemon older than the view has no sys/: its device
			// keeps its name and an empty directory.
			src := filepath.Join(d.Mount, "sys", "infiniband")
			if _, err := os.Stat(src); err == nil {
				if err := mount(src, dst, "", unix.MS_BIND, ""); err != nil {
					return err
				}
			}
			u := filepath.Join(verbs, fmt.Sprintf("uverbs%d", i))
			if err := mkdir(u); err != nil {
				return err
			}
			for name, v := range map[string]string{
				"ibdev":       d.Name,
				"abi_version": uverbsABI,
				"dev":         fmt.Sprintf("%d:%d", uverbsMajor, uverbsMinor0+i),
			} {
				if err := writeFile(filepath.Join(u, name), v+"\n"); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// coverDev gives /dev an infiniband/ with uverbs0..n-1, each a bind of
// /dev/null: a character device anyone may open for reading and writing,
// which is all UCX asks of it (nothing is done there: the mount is the
// device). Where /dev/infiniband exists (a machine with RDMA hardware or
// the kernel's rxe) a tmpfs covers just that directory, and its own
// uverbsN of those names are left out (the program does not see those
// devices through rdmafs's library).
func coverDev(n int) error {
	const ibdir = "/dev/infiniband"
	fill := func() error {
		if err := mkdir(ibdir); err != nil {
			return err
		}
		for i := 0; i < n; i++ {
			p := fmt.Sprintf("%s/uverbs%d", ibdir, i)
			if err := os.WriteFile(p, nil, 0o666); err != nil {
				return opErr("create", p, err)
			}
			if err := mount("/dev/null", p, "", unix.MS_BIND, ""); err != nil {
				return err
			}
		}
		return nil
	}
	if fi, err := os.Stat(ibdir); err == nil && fi.IsDir() {
		skip := map[string]bool{}
		for i := 0; i < n; i++ {
			skip[fmt.Sprintf("uverbs%d", i)] = true
		}
		return cover(ibdir, skip, fill)
	}
	return cover("/dev", map[string]bool{}, fill)
}
