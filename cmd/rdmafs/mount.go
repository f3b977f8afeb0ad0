package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"rdmafs/clock"
	"rdmafs/cm"
	"rdmafs/device"
	"rdmafs/fsnode"
	"rdmafs/internal/logger"
	"rdmafs/qp"
)

// stateDir holds one pid file per mounted device, so umount can find the
// daemon that serves a mountpoint.
const stateDir = "/run/rdmafs"

func cmdMount(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("mount", "mount [flags] MOUNTPOINT", stderr)
	cfg := device.DefaultConfig()
	foreground := fs.Bool("foreground", false, "stay attached; SIGINT/SIGTERM unmount and exit")
	debug := fs.Bool("debug", false, "log every FUSE request to stderr")
	logFile := fs.String("log", "", "the daemon's log: a FILE to append to, or - for standard error (default: standard error with --foreground, none in the background)")
	runtimeDir := fs.String("runtime-dir", "", "directory for the cq/H/channel FIFOs (default: "+stateDir+"/MOUNT-ID)")
	maxLease := fs.Int("max-lease", 0, "objects one open of MOUNT/lease holds (default: the sum of the object limits)")
	readyFD := fs.Int("ready-fd", -1, "internal: fd on which a background daemon reports readiness")
	fs.MarkHidden("ready-fd")
	fs.Uint32Var(&cfg.MaxQP, "max-qp", cfg.MaxQP, "max_qp: queue pairs")
	fs.Uint32Var(&cfg.MaxQPWR, "max-qp-wr", cfg.MaxQPWR, "max_qp_wr: work requests per queue")
	fs.Uint32Var(&cfg.MaxSGE, "max-sge", cfg.MaxSGE, "max_sge: scatter/gather entries per WR (<= 255)")
	fs.Uint32Var(&cfg.MaxCQ, "max-cq", cfg.MaxCQ, "max_cq: completion queues")
	fs.Uint32Var(&cfg.MaxCQE, "max-cqe", cfg.MaxCQE, "max_cqe: entries per CQ")
	fs.Uint32Var(&cfg.MaxMR, "max-mr", cfg.MaxMR, "max_mr: memory regions")
	fs.Uint64Var(&cfg.MaxMRSize, "max-mr-size", cfg.MaxMRSize, "max_mr_size: bytes per MR")
	fs.Uint64Var(&cfg.MaxTotalMRBytes, "max-total-mr", cfg.MaxTotalMRBytes, "bytes of MR memory the device registers in all")
	fs.Uint32Var(&cfg.MaxPD, "max-pd", cfg.MaxPD, "max_pd: protection domains")
	fs.Uint32Var(&cfg.MaxMW, "max-mw", cfg.MaxMW, "max_mw: memory windows")
	fs.Uint32Var(&cfg.MaxAH, "max-ah", cfg.MaxAH, "max_ah: address handles")
	fs.Uint32Var(&cfg.MaxSRQ, "max-srq", cfg.MaxSRQ, "max_srq: shared receive queues")
	fs.Uint32Var(&cfg.MaxSRQWR, "max-srq-wr", cfg.MaxSRQWR, "max_srq_wr: WRs per SRQ")
	fs.Uint32Var(&cfg.MaxSRQSGE, "max-srq-sge", cfg.MaxSRQSGE, "max_srq_sge: SGEs per SRQ WR")
	fs.Uint8Var(&cfg.MaxQPRdAtom, "max-qp-rd-atom", cfg.MaxQPRdAtom, "max_qp_rd_atom: READ/atomic responder resources per QP")
	fs.Uint8Var(&cfg.MaxQPInitRdAtom, "max-qp-init-rd-atom", cfg.MaxQPInitRdAtom, "max_qp_init_rd_atom: outstanding READ/atomics per QP")
	fs.Uint32Var(&cfg.MaxInlineData, "max-inline-data", cfg.MaxInlineData, "max_inline_data: bytes of inline data per WR")
	fs.Uint32Var(&cfg.UserShare, "user-share", device.DefaultUserShare, "percent of every object limit and of --max-total-mr one user other than root may take (100: no per-user limit)")
	fs.DurationVar(&cfg.SpinIdle, "spin-idle", 50*time.Microsecond, "how long the engine polls busy send rings before it parks and asks for doorbells (negative: park at once)")
	fs.IntVar(&cfg.Engines, "engines", 0, "engines that run the device's QPs in parallel, each on a goroutine of its own (default: one per four CPUs, at least 1, at most 8; with --addr 1, whose wire's receive and doorbell threads then run the turns themselves, one wake-up less a round trip)")
	fs.BoolVar(&cfg.PacketLoopback, "packet-loopback", false, "send packets between the device's own QPs through the link (as when a capture is open or a fault rule applies) instead of the direct path, for comparison")
	mtu := fs.Int("mtu", 4096, "port MTU in bytes (256, 512, 1024, 2048, 4096): max_mtu and active_mtu (default: max_mtu 4096; active_mtu 4096, or with --addr the largest that fits the interface's MTU, as rxe)")
	gid := fs.String("gid", "", "port GID (IPv6 form; default fe80::NODE-GUID, or ::ffff:ADDR with --addr)")
	fs.BoolVar(&cfg.AnySourcePort, "any-source-port", false, "with --addr: take a connected QP's packets from any UDP source port of its peer's address (for RoCE peers whose source port is not rxe's per-QP port)")
	fs.BoolVar(&cfg.NoCoalesce, "no-coalesce", false, "with --addr: hand the kernel one datagram per send instead of a QP's runs of packets as one send with UDP segmentation offload, for comparison")
	addr := fs.String("addr", "", "IPv4 address to speak RoCEv2 on (UDP 4791; needs CAP_NET_RAW): the port GID becomes ::ffff:ADDR and QPs reach other hosts' devices")
	cmAddrFlags := fs.StringArray("cm-addr", nil, "an IP address the connection manager answers for besides the device's own (127.0.0.1 and ::1 on a local mount, ADDR with --addr); repeatable. rdma_resolve_addr to it reaches this device")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var cmAddrs []netip.Addr
	for _, s := range *cmAddrFlags {
		a, err := netip.ParseAddr(s)
		if err != nil || a.Zone() != "" || a.IsUnspecified() || a.IsMulticast() {
			return usageError{fmt.Errorf("--cm-addr %q: want a unicast IPv4 or IPv6 address", s)}
		}
		cmAddrs = append(cmAddrs, a.Unmap())
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return usageError{errors.New("need exactly one MOUNTPOINT")}
	}
	m, ok := qp.MTUFromBytes(*mtu)
	if !ok {
		return usageError{fmt.Errorf("--mtu %d: not one of 256 512 1024 2048 4096", *mtu)}
	}
	if fs.Changed("mtu") {
		cfg.MaxMTU, cfg.ActiveMTU = m, m
	}
	if *addr != "" {
		a, err := netip.ParseAddr(*addr)
		if err != nil || !a.Is4() {
			return usageError{fmt.Errorf("--addr %q: want an IPv4 address", *addr)}
		}
		cfg.Addr = a
	}
	if *gid != "" {
		g, err := netip.ParseAddr(*gid)
		if err != nil {
			return usageError{fmt.Errorf("--gid: %v", err)}
		}
		cfg.GID = g.As16()
	}
	mnt, err := filepath.Abs(fs.Arg(0))
	if err != nil {
		return err
	}
	if err := clearDeadMount(mnt); err != nil {
		return err
	}
	if st, err := os.Stat(mnt); err != nil || !st.IsDir() {
		return fmt.Errorf("%s: not a directory", mnt)
	}
	if !*foreground {
		return mountFailed(spawnDaemon(mnt, args, *logFile))
	}
	logOut := stderr
	if *logFile != "" && *logFile != "-" {
		f, err := os.OpenFile(*logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		defer f.Close()
		logOut = f
	}
	err = serve(mnt, cfg, fsnode.Options{Debug: *debug, RuntimeDir: *runtimeDir, MaxLease: *maxLease, CMAddrs: cmAddrs}, *readyFD, logOut)
	if *readyFD < 0 { // a daemon's parent diagnoses its failure (above)
		err = mountFailed(err)
	}
	return err
}

// spawnDaemon re-executes rdmafs in the foreground, detached in its own
// session, and waits until it reports the mount ready (or why it failed).
func spawnDaemon(mnt string, args []string, logFile string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer r.Close()
	// The daemon outlives this process: its output is a file, or with
	// --log - our standard error, which it keeps writing after we exit
	// (it ignores SIGPIPE: serve). It writes its log itself (--log goes
	// with the arguments); this is for what the runtime prints.
	out := os.Stderr
	if logFile != "-" {
		if logFile == "" {
			logFile = os.DevNull
		}
		f, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		defer f.Close()
		out = f
	}
	cmd := exec.Command(self, append([]string{"mount", "--foreground", "--ready-fd", "3"}, args...)...)
	cmd.ExtraFiles = []*os.File{w}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		w.Close()
		return err
	}
	w.Close()
	line, _ := bufio.NewReader(r).ReadString('\n')
	line = strings.TrimSpace(line)
	if line == "ok" {
		cmd.Process.Release()
		return nil
	}
	cmd.Wait()
	if line == "" {
		line = "daemon exited before the mount was ready"
	}
	return errors.New(line)
}

// serve mounts and serves until unmounted or signalled, logging to
// logOut: start, stop, errors, refused commands and dropped packets, each
// kind rate-limited (internal/logger).
func serve(mnt string, cfg device.Config, opts fsnode.Options, readyFD int, logOut io.Writer) error {
	dlog := logger.New(logOut, clock.Real{})
	// A log on a pipe whose reader went away must not kill the daemon.
	signal.Ignore(syscall.SIGPIPE)
	var ready *os.File
	if readyFD >= 0 {
		ready = os.NewFile(uintptr(readyFD), "ready")
	}
	report := func(err error) error {
		if ready != nil {
			if err != nil {
				fmt.Fprintf(ready, "%v\n", err)
			} else {
				fmt.Fprintln(ready, "ok")
			}
			ready.Close()
			ready = nil
		}
		return err
	}
	// Take the signals before the mount exists: a SIGTERM that arrives
	// once the tree is visible but before the handler would otherwise
	// kill us with the default action and leave a dead mount behind.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sig)
	raiseFileLimit()
	cfg.Logf = dlog.Logf
	opts.Logf = dlog.Logf
	dev, err := device.New(cfg)
	if err != nil {
		dlog.Logf("cannot start the device for %s: %v", mnt, err)
		return report(err)
	}
	defer dev.Close()
	// The connection manager speaks for the device on QP1; closed before
	// the device, so its ids' peers get their REJs and DREQs.
	agent := cm.Attach(dev, cm.Config{Addrs: opts.CMAddrs, Logf: dlog.Logf})
	defer agent.Close()
	opts.CM = agent
	id := mountID(mnt)
	if opts.RuntimeDir == "" {
		opts.RuntimeDir = filepath.Join(stateDir, id)
	}
	runtimeDir := opts.RuntimeDir
	srv, err := fsnode.Mount(mnt, dev, opts)
	if err != nil {
		err = fmt.Errorf("mount %s: %w", mnt, err)
		dlog.Logf("mount failed: %v", err)
		return report(err)
	}
	pidFile := filepath.Join(stateDir, id+".pid")
	if err := os.MkdirAll(stateDir, 0o755); err == nil {
		os.WriteFile(pidFile, []byte(fmt.Sprintf("%d\n%s\n%s\n", os.Getpid(), mnt, runtimeDir)), 0o644)
	}
	defer os.Remove(pidFile)
	defer os.RemoveAll(runtimeDir)
	dlog.Logf("serving %s (pid %d)", mnt, os.Getpid())
	report(nil)

	done := make(chan struct{})
	go func() { srv.Wait(); close(done) }()
	select {
	case s := <-sig:
		dlog.Logf("%v: unmounting %s", s, mnt)
		// A shutdown that does not finish is a bug; leave its stacks in
		// the log and exit rather than hang (umount would SIGKILL us).
		watchdog := time.AfterFunc(20*time.Second, func() {
			dlog.Logf("shutdown stuck for 20 s; goroutines:")
			pprof.Lookup("goroutine").WriteTo(dlog, 2)
			os.Exit(3)
		})
		defer watchdog.Stop()
		if err := srv.Unmount(); err != nil {
			dlog.Logf("unmount: %v", err)
		}
	case <-done:
		dlog.Logf("%s was unmounted", mnt)
	}
	dlog.Logf("stopped serving %s", mnt)
	return nil
}

// cmdUmount stops the daemon serving MOUNTPOINT (it unmounts, lazily if
// mappings pin the mount) or, without a daemon, unmounts directly.
func cmdUmount(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("umount", "umount MOUNTPOINT", stderr)
	timeout := fs.Duration("timeout", 10*time.Second, "how long to wait for the daemon to exit")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return usageError{errors.New("need exactly one MOUNTPOINT")}
	}
	mnt, err := filepath.Abs(fs.Arg(0))
	if err != nil {
		return err
	}
	id := mountID(mnt)
	pidFile := filepath.Join(stateDir, id+".pid")
	b, err := os.ReadFile(pidFile)
	if err != nil {
		return detach(mnt)
	}
	// pid, mountpoint, runtime directory (older daemons wrote two lines).
	f := strings.Split(strings.TrimSpace(string(b)), "\n")
	runtimeDir := filepath.Join(stateDir, id)
	if len(f) >= 3 && f[2] != "" {
		runtimeDir = f[2]
	}
	// Whatever happens to the daemon, its run-time state goes: a daemon
	// killed at the timeout cannot remove it itself.
	defer os.RemoveAll(runtimeDir)
	defer os.Remove(pidFile)
	pid, _ := strconv.Atoi(f[0])
	if pid <= 0 || !isDaemon(pid, mnt, f) {
		return detach(mnt) // a stale pid file
	}
	p, err := openProcess(pid)
	if err != nil {
		return detach(mnt)
	}
	defer p.close()
	if p.signal(syscall.SIGTERM) != nil {
		return detach(mnt)
	}
	if !p.wait(*timeout) {
		p.signal(syscall.SIGKILL)
		p.wait(5 * time.Second)
	}
	// A killed daemon leaves the mountpoint behind.
	return detach(mnt)
}

// isDaemon reports whether pid is the rdmafs daemon serving mnt (the pid
// file says mnt, and the process is a foreground rdmafs mount), so that a
// stale pid file never signals another process that got the pid.
func isDaemon(pid int, mnt string, pidFile []string) bool {
	if len(pidFile) < 2 || pidFile[1] != mnt {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	args := strings.Split(string(b), "\x00")
	return len(args) > 2 && args[1] == "mount" && args[2] == "--foreground"
}

// process is another process to signal and wait for: a pidfd where the
// kernel has them (no pid reuse races, and it reports the exit of a
// process nobody reaps), else the pid and /proc.
type process struct {
	pid, fd int // fd -1 without a pidfd
}

func openProcess(pid int) (*process, error) {
	fd, err := unix.PidfdOpen(pid, 0)
	switch {
	case err == nil:
		return &process{pid: pid, fd: fd}, nil
	case err == unix.ESRCH:
		return nil, err
	}
	return &process{pid: pid, fd: -1}, nil
}

func (p *process) close() {
	if p.fd >= 0 {
		unix.Close(p.fd)
	}
}

func (p *process) signal(sig syscall.Signal) error {
	if p.fd >= 0 {
		return unix.PidfdSendSignal(p.fd, sig, nil, 0)
	}
	return syscall.Kill(p.pid, sig)
}

// wait reports whether the process ends within timeout. A zombie has
// ended: its parent (init, or a subreaper that may never reap it) only has
// not collected it yet, and kill(pid, 0) would still succeed on it.
func (p *process) wait(timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	if p.fd >= 0 {
		fds := []unix.PollFd{{Fd: int32(p.fd), Events: unix.POLLIN}}
		for {
			left := time.Until(deadline)
			if left <= 0 {
				return false
			}
			n, err := unix.Poll(fds, int(left/time.Millisecond)+1)
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				break // fall back to /proc
			}
			if n > 0 {
				return true
			}
		}
	}
	for !exited(p.pid) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}

// exited reports whether pid is gone or a zombie (/proc/PID/stat state Z
// or X).
func exited(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// The state follows the command name, which ends at the last ')'.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 || i+2 >= len(b) {
		return true
	}
	return b[i+2] == 'Z' || b[i+2] == 'X'
}

// clearDeadMount recovers a mount point whose daemon died: statfs says
// ENOTCONN (the FUSE connection has nobody behind it), so the mount is
// lazily detached (root: umount2 MNT_DETACH; others: fusermount -uz),
// and the new mount goes where it was. When that fails, the error says
// what to run.
func clearDeadMount(mnt string) error {
	// statfs always reaches the daemon (stat may be answered from the
	// kernel's attribute cache for a while).
	var st unix.Statfs_t
	if err := unix.Statfs(mnt, &st); err != unix.ENOTCONN {
		return nil
	}
	if err := unix.Unmount(mnt, unix.MNT_DETACH); err == nil {
		return nil
	}
	for _, fm := range []string{"fusermount3", "fusermount"} {
		if exec.Command(fm, "-uz", mnt).Run() == nil {
			if err := unix.Statfs(mnt, &st); err != unix.ENOTCONN {
				return nil
			}
		}
	}
	return fmt.Errorf("%s: the rdmafs daemon that served it is gone (ENOTCONN) and the dead mount could not be cleared; run `fusermount3 -uz %s` (or, as root, `umount -l %s`), then mount again", mnt, mnt, mnt)
}

// detach unmounts mnt, falling back to a lazy unmount when live mappings
// keep it busy; "not mounted" is success.
func detach(mnt string) error {
	err := unix.Unmount(mnt, 0)
	if err == unix.EBUSY {
		err = unix.Unmount(mnt, unix.MNT_DETACH)
	}
	if err == unix.EINVAL || err == unix.ENOENT {
		return nil
	}
	if err != nil {
		return fmt.Errorf("unmount %s: %w", mnt, err)
	}
	return nil
}

// mountID names a mountpoint in stateDir.
func mountID(mnt string) string {
	return strings.ReplaceAll(strings.Trim(mnt, "/"), "/", "_")
}

// raiseFileLimit lifts the soft fd limit to the hard one: every ring and MR
// is a memfd the daemon keeps open.
func raiseFileLimit() {
	var l unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &l) == nil && l.Cur < l.Max {
		l.Cur = l.Max
		unix.Setrlimit(unix.RLIMIT_NOFILE, &l)
	}
}
