package fsnode

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"rdmafs/cm"
	"rdmafs/device"
	"rdmafs/internal/execview"
)

// Options configure a mount.
type Options struct {
	Debug      bool   // FUSE debug log
	RuntimeDir string // where cq/H/channel FIFOs live (created 0755 if missing); default: a temp dir
	// MaxLease caps the objects one open of MOUNT/lease holds; 0 is the
	// sum of the device's object limits (no program can own more).
	MaxLease int
	// CM is the device's connection manager (cm.Attach); nil makes one
	// for the mount, with CMAddrs as extra addresses it answers for, and
	// closes it at unmount.
	CM      *cm.Agent
	CMAddrs []netip.Addr
	// Logf, when set, is told of every command refused (its errno and
	// reason), as the daemon's log reports refused inputs.
	Logf func(format string, args ...any)
}

// Server is one mounted device.
type Server struct {
	srv    *fuse.Server
	dir    string
	tree   *tree
	connID uint32 // the FUSE connection (fusectl directory name)

	ownRuntime bool // RuntimeDir was made by Mount and is removed at the end
	ownCM      bool // the CM agent was made by Mount and is closed at the end
	once       sync.Once
	unmountMu  sync.Mutex // one Unmount at a time
}

// unmountGrace is how long Unmount lets the FUSE server end by itself
// after the unmount before it aborts the connection. The connection lives
// as long as any mount namespace holds a copy of the mount (unshare -m, ip
// netns exec, a container, systemd's PrivateTmp), and go-fuse's Unmount
// waits for it to end, forever when such a copy exists.
const unmountGrace = time.Second

// Mount mounts dev at dir and returns once the mount is serving. It needs
// root: the mount is made directly (no fusermount) with allow_other, and
// FUSE passthrough, which shares rings and memory with clients, needs
// CAP_SYS_ADMIN and Linux 6.9 or later. Mount probes passthrough by
// registering a backing file and fails (unmounting again) if the kernel
// refuses: go-fuse would otherwise turn passthrough off for the whole mount
// at the first failure, silently, and clients would map private copies.
func Mount(dir string, dev *device.Device, opts Options) (*Server, error) {
	if dev == nil {
		return nil, errors.New("fsnode: Mount: nil device")
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	rt, own := opts.RuntimeDir, false
	if rt == "" {
		d, err := os.MkdirTemp("", "rdmafs-run-")
		if err != nil {
			return nil, fmt.Errorf("fsnode: runtime directory: %w", err)
		}
		rt, own = d, true
	} else if err := os.MkdirAll(rt, 0755); err != nil {
		return nil, fmt.Errorf("fsnode: runtime directory: %w", err)
	}
	if own {
		// Others must reach the FIFOs of their own CQs.
		if err := os.Chmod(rt, 0755); err != nil {
			os.RemoveAll(rt)
			return nil, fmt.Errorf("fsnode: runtime directory: %w", err)
		}
	}
	if rt, err = filepath.Abs(rt); err != nil {
		return nil, err
	}
	s := &Server{dir: dir, ownRuntime: own}
	fail := func(err error) (*Server, error) {
		if own {
			os.RemoveAll(rt)
		}
		if s.ownCM {
			s.tree.cm.Close()
		}
		return nil, err
	}
	s.tree = newTree(dev, rt)
	if opts.Logf != nil {
		s.tree.logf = opts.Logf
	}
	s.tree.cm = opts.CM
	if s.tree.cm == nil {
		s.tree.cm = cm.Attach(dev, cm.Config{Addrs: opts.CMAddrs, Logf: opts.Logf})
		s.ownCM = true
	}
	s.tree.maxLease = opts.MaxLease
	if s.tree.maxLease <= 0 {
		c := dev.Config()
		s.tree.maxLease = int(c.MaxPD) + int(c.MaxMR) + int(c.MaxMW) + int(c.MaxCQ) + int(c.MaxSRQ) + int(c.MaxAH) + int(c.MaxQP)
	}
	sec := time.Second
	fsOpts := &fs.Options{
		MountOptions: fuse.MountOptions{
			AllowOther:        true,
			DirectMountStrict: true,
			FsName:            "rdmafs",
			Name:              "rdmafs",
			Debug:             opts.Debug,
			DisableXAttrs:     true,
		},
		EntryTimeout: &sec,
		// No AttrTimeout: every node sets its own (attrTimeout), and
		// text files none, which go-fuse would replace by this one.
	}
	// Symlinks resolved before the mount, as mountinfo will name dir:
	// after it, any look at dir is a request to this server.
	real := dir
	if r, err := filepath.EvalSymlinks(dir); err == nil {
		real = r
	}
	srv, err := fs.Mount(dir, s.tree.root, fsOpts)
	if err != nil {
		return fail(fmt.Errorf("fsnode: mounting %s (needs root and /dev/fuse): %w", dir, err))
	}
	s.srv = srv
	if err := probePassthrough(srv); err != nil {
		srv.Unmount()
		return fail(err)
	}
	if info, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		s.connID = fuseConnID(string(info), real)
	}
	return s, nil
}

// fuseConnID is the FUSE connection of the newest FUSE mount on dir in a
// mountinfo text: the minor of the mount's device, which names its
// fusectl directory (0: none). It is read from mountinfo rather than by a
// stat of dir, which would be a request to this very server: a daemon
// killed while it waits for its own answer never exits (the kernel waits
// uninterruptibly for an answer once the request was read), and its
// mount hangs everyone who touches it.
func fuseConnID(mountinfo, dir string) uint32 {
	var id uint32
	for _, line := range strings.Split(mountinfo, "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		f := strings.Fields(pre)
		if !ok || len(f) < 5 || !strings.HasPrefix(post, "fuse") || execview.Unescape(f[4]) != dir {
			continue
		}
		maj, min, ok := strings.Cut(f[2], ":")
		if n, err := strconv.ParseUint(min, 10, 32); ok && maj == "0" && err == nil {
			id = uint32(n)
		}
	}
	return id
}

// probePassthrough registers a throwaway memfd as a backing file, the
// operation every ring and memory open needs.
func probePassthrough(srv *fuse.Server) error {
	if srv.KernelSettings().Flags64()&fuse.CAP_PASSTHROUGH == 0 {
		return errors.New("fsnode: the kernel does not offer FUSE passthrough (needs Linux 6.9 or later with CONFIG_FUSE_PASSTHROUGH); rings and memory could not be shared with clients")
	}
	fd, err := unix.MemfdCreate("rdmafs-probe", unix.MFD_CLOEXEC)
	if err != nil {
		return fmt.Errorf("fsnode: passthrough probe: memfd_create: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Ftruncate(fd, int64(os.Getpagesize())); err != nil {
		return fmt.Errorf("fsnode: passthrough probe: %w", err)
	}
	id, errno := srv.RegisterBackingFd(&fuse.BackingMap{Fd: int32(fd)})
	if errno != 0 {
		why := "the kernel refused it"
		if errno == syscall.EPERM {
			why = "it needs CAP_SYS_ADMIN: run the daemon as root"
		}
		return fmt.Errorf("fsnode: FUSE passthrough is not available (registering a backing file: %v; %s); rings and memory could not be shared with clients", errno, why)
	}
	if errno := srv.UnregisterBackingFd(id); errno != 0 {
		return fmt.Errorf("fsnode: passthrough probe: unregistering the backing file: %v", errno)
	}
	return nil
}

// Dir is the mount point.
func (s *Server) Dir() string { return s.dir }

// RuntimeDir is where the CQ channel FIFOs live.
func (s *Server) RuntimeDir() string { return s.tree.runtimeDir }

// Unmount unmounts the tree. When the mount is busy (a client holds a file
// open or, as the kernel counts it, a mapping), it detaches it lazily
// (MNT_DETACH) and aborts the FUSE connection, so the server stops: open
// files then fail with ENOTCONN, while mappings of rings and memory stay
// valid (they are the memfds themselves). When the server has not stopped
// unmountGrace after the unmount (another mount namespace holds a copy of
// the mount), it aborts the connection too: the copies then fail with
// ENOTCONN. The device is not closed.
func (s *Server) Unmount() error {
	s.unmountMu.Lock()
	defer s.unmountMu.Unlock()
	defer s.cleanup()
	done := make(chan error, 1)
	go func() { done <- s.srv.Unmount() }()
	var err error
	aborted := false
	select {
	case err = <-done:
	case <-time.After(unmountGrace):
		// Unmounted here (or still retrying a busy mount), but the
		// connection is up: end it, and the server with it.
		if aerr := s.abort(); aerr != nil {
			return fmt.Errorf("fsnode: %s: the FUSE server did not stop in %v after the unmount and the connection could not be aborted: %w", s.dir, unmountGrace, aerr)
		}
		aborted = true
		select {
		case err = <-done:
		case <-time.After(10 * time.Second):
			return fmt.Errorf("fsnode: %s: the FUSE server did not stop after its connection was aborted", s.dir)
		}
	}
	if err == nil || errors.Is(err, syscall.EINVAL) {
		// Unmounted, now or before (by umount(8) or an earlier call).
		return nil
	}
	if derr := syscall.Unmount(s.dir, unix.MNT_DETACH); derr != nil && !errors.Is(derr, syscall.EINVAL) {
		return fmt.Errorf("fsnode: unmount %s: %v; lazy unmount: %w", s.dir, err, derr)
	}
	if aborted {
		return nil
	}
	if aerr := s.abort(); aerr != nil {
		return fmt.Errorf("fsnode: %s detached, but the FUSE connection stays up until its files are closed: %w", s.dir, aerr)
	}
	return nil
}

// Wait blocks until the file system is unmounted.
func (s *Server) Wait() {
	s.srv.Wait()
	s.cleanup()
}

func (s *Server) cleanup() {
	s.once.Do(func() {
		if s.ownCM {
			// Peers get the REJs and DREQs of the ids still open.
			s.tree.cm.Close()
		}
		s.tree.closeChannels()
		if s.ownRuntime {
			os.RemoveAll(s.tree.runtimeDir)
		}
	})
}

// abort ends the FUSE connection through fusectl, mounting fusectl on a
// private directory when /sys/fs/fuse/connections is not populated.
func (s *Server) abort() error {
	if s.connID == 0 {
		return errors.New("unknown FUSE connection")
	}
	name := strconv.FormatUint(uint64(s.connID), 10)
	write := func(base string) error {
		return os.WriteFile(filepath.Join(base, name, "abort"), []byte("1"), 0)
	}
	if err := write("/sys/fs/fuse/connections"); err == nil {
		return nil
	}
	tmp, err := os.MkdirTemp("", "rdmafs-fusectl-")
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	if err := unix.Mount("fusectl", tmp, "fusectl", 0, ""); err != nil {
		return fmt.Errorf("mounting fusectl: %w", err)
	}
	defer unix.Unmount(tmp, unix.MNT_DETACH)
	if err := write(tmp); err != nil {
		return fmt.Errorf("aborting FUSE connection %s: %w", name, err)
	}
	return nil
}
