package verbs

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"rdmafs/qp"
	"rdmafs/ring"
)

// Options tune a Context.
type Options struct {
	// AlwaysDoorbell rings a QP's doorbell after every PostSend batch, not
	// only when the engine set NEED_WAKEUP on the send queue. It is also
	// on when the environment has RDMAFS_ALWAYS_DOORBELL=1. Needed with a
	// daemon whose engine does not maintain NEED_WAKEUP.
	AlwaysDoorbell bool
	// Persistent leaves the objects this Context creates alive after it is
	// closed or the program exits (until rmdir). By default they are
	// leased: the daemon destroys them when the program closes the Context
	// or dies, as the kernel does for a closed uverbs file.
	Persistent bool
	// WriteDoorbell wakes a parked engine with a write() to the QP's sq
	// file (a FUSE request) instead of the device's futex doorbell
	// (MOUNT/doorbell). For comparison; the futex is about 10x cheaper.
	WriteDoorbell bool
}

// Context is an open device: one mounted rdmafs (ibv_context). Its
// methods and the objects it makes are safe for concurrent use, the way
// libibverbs' are: posting to one QP from several goroutines is serialised
// by the library, different QPs do not contend.
type Context struct {
	mount          string
	alwaysDoorbell bool

	// lease is the mount's lease file, open for the Context's life; every
	// object created is named in it (nil with Options.Persistent).
	lease *os.File
	// bell is the device doorbell page (nil: write() doorbells).
	bell       *ring.Ring
	bellRegion *ring.Region

	mu     sync.RWMutex
	mrs    map[uint32]*MR // by lkey, for inline gathers; guarded by mu
	objs   map[closer]struct{}
	closed bool
}

type closer interface{ release() error }

// Open opens the device mounted at mount.
func Open(mount string) (*Context, error) { return OpenWithOptions(mount, Options{}) }

// OpenWithOptions is Open with options.
func OpenWithOptions(mount string, opts Options) (*Context, error) {
	abs, err := filepath.Abs(mount)
	if err != nil {
		return nil, opError("open_device", err, "")
	}
	if _, err := os.Stat(filepath.Join(abs, "device")); err != nil {
		return nil, opError("open_device", err, abs+" is not an rdmafs mount")
	}
	c := &Context{
		mount:          abs,
		alwaysDoorbell: opts.AlwaysDoorbell || os.Getenv("RDMAFS_ALWAYS_DOORBELL") == "1",
		mrs:            map[uint32]*MR{},
		objs:           map[closer]struct{}{},
	}
	if !opts.WriteDoorbell {
		if reg, err := ring.MapFile(filepath.Join(abs, "doorbell")); err == nil {
			if r, err := ring.Attach(reg.Bytes(), ring.KindDoorbell); err == nil {
				c.bell, c.bellRegion = r, reg
			} else {
				reg.Close()
			}
		}
	}
	if !opts.Persistent {
		if c.lease, err = os.OpenFile(filepath.Join(abs, "lease"), os.O_RDWR, 0); err != nil {
			return nil, opError("open_device", err, "cannot open the lease file")
		}
	}
	return c, nil
}

// Mount is the directory the Context was opened on.
func (c *Context) Mount() string { return c.mount }

// Close releases the mappings and files of every object this Context
// still holds (ibv_close_device) and then its lease, so the daemon
// destroys every object the Context created and did not destroy (with
// Options.Persistent they stay until rmdir).
func (c *Context) Close() error {
	c.mu.Lock()
	objs := c.objs
	c.objs, c.closed = map[closer]struct{}{}, true
	clear(c.mrs)
	lease := c.lease
	c.lease = nil
	c.mu.Unlock()
	var errs []error
	for o := range objs {
		errs = append(errs, o.release())
	}
	if lease != nil {
		errs = append(errs, lease.Close())
	}
	if c.bellRegion != nil {
		errs = append(errs, c.bellRegion.Close())
		c.bellRegion = nil
	}
	return errors.Join(errs...)
}

func (c *Context) track(o closer) {
	c.mu.Lock()
	c.objs[o] = struct{}{}
	c.mu.Unlock()
}

func (c *Context) untrack(o closer) {
	c.mu.Lock()
	delete(c.objs, o)
	c.mu.Unlock()
}

func (c *Context) path(parts ...string) string {
	return filepath.Join(append([]string{c.mount}, parts...)...)
}

// transact runs one */new transaction: write the request line, read the
// new object's name. A refused request fails the write with an errno; the
// read then returns "error: REASON".
func (c *Context) transact(op, kind, line string) (string, error) {
	f, err := os.OpenFile(c.path(kind, "new"), os.O_RDWR, 0)
	if err != nil {
		return "", opError(op, err, "")
	}
	defer f.Close()
	_, werr := f.Write([]byte(line + "\n"))
	buf := make([]byte, 4096)
	n, rerr := f.Read(buf)
	answer := strings.TrimSpace(string(buf[:n]))
	if werr != nil {
		return "", opError(op, werr, strings.TrimPrefix(answer, "error: "))
	}
	if rerr != nil {
		return "", opError(op, rerr, "")
	}
	if answer == "" || strings.HasPrefix(answer, "error: ") {
		return "", errorf(op, syscall.EIO, "unexpected answer %q to %s", answer, line)
	}
	c.mu.RLock()
	lease := c.lease
	c.mu.RUnlock()
	if lease != nil {
		if _, err := lease.Write([]byte(kind + " " + answer + "\n")); err != nil {
			return "", opError(op, err, "cannot lease "+kind+" "+answer)
		}
	}
	return answer, nil
}

// command writes one command to an object's control file; on failure the
// reason is the object's error file.
func (c *Context) command(op, cmd string, dir ...string) error {
	p := c.path(dir...)
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		return opError(op, err, "")
	}
	_, err = f.Write([]byte(cmd + "\n"))
	f.Close()
	if err != nil {
		return opError(op, err, c.lastError(filepath.Dir(p)))
	}
	return nil
}

// lastError reads an object's error file.
func (c *Context) lastError(dir string) string {
	b, _ := os.ReadFile(filepath.Join(dir, "error"))
	return strings.TrimSpace(string(b))
}

// destroy removes an object's directory: the daemon destroys it, with the
// verbs rules (EBUSY while others depend on it).
func (c *Context) destroy(op string, dir ...string) error {
	p := c.path(dir...)
	if err := syscall.Rmdir(p); err != nil {
		return opError(op, &os.PathError{Op: "rmdir", Path: p, Err: err}, c.lastError(p))
	}
	return nil
}

// readParsed reads a file of the mount with qp's parser of it: the daemon
// printed it with the matching formatter. A file that does not parse is
// EIO, the reason naming the file.
func readParsed[T any](c *Context, op string, parse func(string) (T, error), parts ...string) (T, error) {
	var zero T
	b, err := os.ReadFile(c.path(parts...))
	if err != nil {
		return zero, opError(op, err, "")
	}
	v, err := parse(string(b))
	if err != nil {
		return zero, errorf(op, syscall.EIO, "%s: %v", strings.Join(parts, "/"), err)
	}
	return v, nil
}

// DeviceAttr is ibv_device_attr as the device file reports it.
type DeviceAttr = qp.DeviceAttr

// QueryDevice is ibv_query_device.
func (c *Context) QueryDevice() (*DeviceAttr, error) {
	f, err := readParsed(c, "query_device", qp.ParseDeviceFile, "device")
	if err != nil {
		return nil, err
	}
	return &f.Attr, nil
}

// QueryRTValues is ibv_query_rt_values_ex: the device clock (ticks at
// DeviceAttr.HCACoreClock kHz, the unit of WC.CompletionTS) and the wall
// clock (ns since the Unix epoch) read by the device at one instant.
func (c *Context) QueryRTValues() (rawClock, wallclockNS uint64, err error) {
	f, err := readParsed(c, "query_rt_values", qp.ParseClockFile, "clock")
	return f.RawClock, f.WallclockNS, err
}

// PortAttr is ibv_port_attr as the port file reports it.
type PortAttr = qp.PortAttr

// QueryPort is ibv_query_port. The device has one port, 1.
func (c *Context) QueryPort(port uint8) (*PortAttr, error) {
	const op = "query_port"
	if port != 1 {
		return nil, errorf(op, syscall.EINVAL, "port %d: the device has one port, 1", port)
	}
	a, err := readParsed(c, op, qp.ParsePortAttr, "port")
	if err != nil {
		return nil, err
	}
	return &a, nil
}

// handleOf parses an object name the daemon gave.
func handleOf(op, name string) (uint32, error) {
	n, err := strconv.ParseUint(name, 10, 32)
	if err != nil || n == 0 {
		return 0, errorf(op, syscall.EIO, "the daemon answered %q, not a handle", name)
	}
	return uint32(n), nil
}

func hname(h uint32) string { return strconv.FormatUint(uint64(h), 10) }

// CmdFile is the Context's command file, ibv_context's cmd_fd: its lease
// (nil with Options.Persistent, which has none). Give a duplicate of it
// (os.NewFile of a dup, or its descriptor over SCM_RIGHTS) to Import, in
// this process or another: objects leased in it live while any copy of it
// is open.
func (c *Context) CmdFile() *os.File {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.lease
}

// Import is ibv_import_device: a Context on f, a duplicate of another
// Context's CmdFile (the mount's lease). The new Context owns f (Close
// closes it) and leases what it creates in it, so its objects and the
// other Context's share one life. What it may touch is what the caller's
// uid may: ImportPD and ImportMR of another user's objects are EACCES.
func Import(f *os.File) (*Context, error) {
	const op = "import_device"
	if f == nil {
		return nil, errorf(op, syscall.EINVAL, "no file")
	}
	fi, err := f.Stat()
	if err != nil {
		return nil, opError(op, err, "")
	}
	p, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(int(f.Fd())))
	if err != nil {
		return nil, opError(op, err, "")
	}
	mount := filepath.Dir(p)
	li, err := os.Stat(filepath.Join(mount, "lease"))
	if err != nil || filepath.Base(p) != "lease" || !os.SameFile(fi, li) {
		return nil, errorf(op, syscall.EINVAL, "%s is not an rdmafs mount's lease", p)
	}
	c, err := OpenWithOptions(mount, Options{Persistent: true})
	if err != nil {
		return nil, err
	}
	c.lease = f
	return c, nil
}
