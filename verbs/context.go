package verbs

import (
	"bytes"
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

// keyValues reads a key=value file into a map.
func (c *Context) keyValues(op string, parts ...string) (map[string]string, error) {
	b, err := os.ReadFile(c.path(parts...))
	if err != nil {
		return nil, opError(op, err, "")
	}
	return parseKeyValues(b), nil
}

func parseKeyValues(b []byte) map[string]string {
	m := map[string]string{}
	for _, l := range bytes.Split(b, []byte("\n")) {
		k, v, ok := strings.Cut(strings.TrimSpace(string(l)), "=")
		if ok {
			m[k] = v
		}
	}
	return m
}

// kv decodes numbers out of a key=value map, remembering the first error.
type kv struct {
	op  string
	m   map[string]string
	err error
}

func (d *kv) str(k string) string {
	v, ok := d.m[k]
	if !ok && d.err == nil {
		d.err = errorf(d.op, syscall.EIO, "the daemon did not report %s", k)
	}
	return v
}

func (d *kv) u64(k string) uint64 {
	s := d.str(k)
	if s == "" {
		return 0
	}
	n, err := strconv.ParseUint(s, 0, 64)
	if err != nil && d.err == nil {
		d.err = errorf(d.op, syscall.EIO, "%s=%q is not a number", k, s)
	}
	return n
}

func (d *kv) u32(k string) uint32 { return uint32(d.u64(k)) }

// DeviceAttr is ibv_device_attr as the device file reports it.
type DeviceAttr = qp.DeviceAttr

// QueryDevice is ibv_query_device.
func (c *Context) QueryDevice() (*DeviceAttr, error) {
	const op = "query_device"
	m, err := c.keyValues(op, "device")
	if err != nil {
		return nil, err
	}
	d := kv{op: op, m: m}
	a := &DeviceAttr{
		FwVer: d.str("fw_ver"), NodeGUID: d.u64("node_guid"), SysImageGUID: d.u64("sys_image_guid"),
		MaxMRSize: d.u64("max_mr_size"), PageSizeCap: d.u64("page_size_cap"),
		VendorID: d.u32("vendor_id"), VendorPartID: d.u32("vendor_part_id"), HwVer: d.u32("hw_ver"),
		MaxQP: d.u32("max_qp"), MaxQPWR: d.u32("max_qp_wr"), DeviceCapFlags: d.u32("device_cap_flags"),
		DeviceCapFlagsEx: d.u64("device_cap_flags_ex"),
		MaxSGE:           d.u32("max_sge"), MaxSGERd: d.u32("max_sge_rd"), MaxCQ: d.u32("max_cq"),
		MaxCQE: d.u32("max_cqe"), MaxMR: d.u32("max_mr"), MaxPD: d.u32("max_pd"),
		MaxQPRdAtom: d.u32("max_qp_rd_atom"), MaxResRdAtom: d.u32("max_res_rd_atom"),
		MaxQPInitRdAtom: d.u32("max_qp_init_rd_atom"), AtomicCap: d.str("atomic_cap"),
		MaxMW: d.u32("max_mw"), MaxAH: d.u32("max_ah"), MaxSRQ: d.u32("max_srq"),
		MaxSRQWR: d.u32("max_srq_wr"), MaxSRQSGE: d.u32("max_srq_sge"), MaxPKeys: d.u32("max_pkeys"),
		LocalCAAckDelay: d.u32("local_ca_ack_delay"), PhysPortCnt: d.u32("phys_port_cnt"),
		MaxInlineData: d.u32("max_inline_data"), MaxTotalMRBytes: d.u64("max_total_mr_bytes"),
		HCACoreClock: d.u64("hca_core_clock"), CompletionTimestampMask: d.u64("completion_timestamp_mask"),
		MaxMcastGrp: d.u32("max_mcast_grp"), MaxMcastQPAttach: d.u32("max_mcast_qp_attach"),
		MaxTotalMcastQPAttach: d.u32("max_total_mcast_qp_attach"),
	}
	if d.err != nil {
		return nil, d.err
	}
	return a, nil
}

// QueryRTValues is ibv_query_rt_values_ex: the device clock (ticks at
// DeviceAttr.HCACoreClock kHz, the unit of WC.CompletionTS) and the wall
// clock (ns since the Unix epoch) read by the device at one instant.
func (c *Context) QueryRTValues() (rawClock, wallclockNS uint64, err error) {
	const op = "query_rt_values"
	m, err := c.keyValues(op, "clock")
	if err != nil {
		return 0, 0, err
	}
	d := kv{op: op, m: m}
	rawClock, wallclockNS = d.u64("raw_clock"), d.u64("wallclock_ns")
	return rawClock, wallclockNS, d.err
}

// PortAttr is ibv_port_attr as the port file reports it.
type PortAttr struct {
	PortNum    uint8
	State      string // "ACTIVE"
	MaxMTU     MTU
	ActiveMTU  MTU
	GID        [16]byte // GID index 0
	LID        uint16
	LinkLayer  string
	GIDTblLen  uint32
	PKeyTblLen uint32
	MaxMsgSz   uint32
}

// QueryPort is ibv_query_port. The device has one port, 1.
func (c *Context) QueryPort(port uint8) (*PortAttr, error) {
	const op = "query_port"
	if port != 1 {
		return nil, errorf(op, syscall.EINVAL, "port %d: the device has one port, 1", port)
	}
	m, err := c.keyValues(op, "port")
	if err != nil {
		return nil, err
	}
	d := kv{op: op, m: m}
	a := &PortAttr{PortNum: uint8(d.u32("port_num")), State: d.str("state"), LID: uint16(d.u32("lid")),
		LinkLayer: d.str("link_layer"), GIDTblLen: d.u32("gid_tbl_len"), PKeyTblLen: d.u32("pkey_tbl_len"),
		MaxMsgSz: d.u32("max_msg_sz")}
	var ok bool
	if a.MaxMTU, ok = qp.MTUFromBytes(int(d.u32("max_mtu"))); !ok && d.err == nil {
		d.err = errorf(op, syscall.EIO, "max_mtu=%s is not an MTU", m["max_mtu"])
	}
	if a.ActiveMTU, ok = qp.MTUFromBytes(int(d.u32("active_mtu"))); !ok && d.err == nil {
		d.err = errorf(op, syscall.EIO, "active_mtu=%s is not an MTU", m["active_mtu"])
	}
	if d.err == nil {
		if a.GID, err = qp.ParseGID(d.str("gid")); err != nil {
			d.err = errorf(op, syscall.EIO, "gid: %v", err)
		}
	}
	if d.err != nil {
		return nil, d.err
	}
	return a, nil
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
