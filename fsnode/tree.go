package fsnode

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"

	"rdmafs/cm"
	"rdmafs/device"
	"rdmafs/qp"
	"rdmafs/ring"
)

// tree is one mount's view of one device.
type tree struct {
	dev        *device.Device
	runtimeDir string
	born       time.Time
	root       *root
	kinds      map[string]*dir // pd, mr, ... once OnAdd ran
	maxLease   int             // objects one open lease file holds
	cm         *cm.Agent       // the connection manager (cm.go)
	logf       logFunc         // the daemon's log (Options.Logf); never nil

	mu       sync.Mutex
	channels map[*channel]bool // live CQ channels; lockcheck:guarded mu
}

func newTree(dev *device.Device, runtimeDir string) *tree {
	t := &tree{dev: dev, runtimeDir: runtimeDir, born: time.Now(),
		kinds: map[string]*dir{}, channels: map[*channel]bool{}, logf: func(string, ...any) {}}
	t.root = &root{t: t}
	t.root.owner = owner{perm: 0755, born: t.born}
	return t
}

// kind is one directory of objects and its creation verb.
type kind struct {
	name, op string
	create   func(t *tree, ctx context.Context, text string) (string, error)
}

var kinds = []kind{
	{"pd", "alloc_pd", (*tree).createPD},
	{"mr", "reg_mr", (*tree).createMR},
	{"mw", "alloc_mw", (*tree).createMW},
	{"cq", "create_cq", (*tree).createCQ},
	{"srq", "create_srq", (*tree).createSRQ},
	{"ah", "create_ah", (*tree).createAH},
	{"qp", "create_qp", (*tree).createQP},
	{"xrcd", "open_xrcd", (*tree).createXRCD},
}

// root is the mount's root directory; it builds the static tree.
type root struct {
	dir
	t *tree
}

var _ = (fs.NodeOnAdder)((*root)(nil))

func addChild(ctx context.Context, parent *fs.Inode, name string, node fs.InodeEmbedder, mode uint32) *fs.Inode {
	ch := parent.NewPersistentInode(ctx, node, fs.StableAttr{Mode: mode})
	parent.AddChild(name, ch, false)
	return ch
}

func (r *root) OnAdd(ctx context.Context) {
	t := r.t
	sys := owner{perm: 0444, born: t.born}
	ro := func(render func() string) *file { return textFile(sys, render) }
	in := &r.Inode
	addChild(ctx, in, "README", ro(func() string { return readme(t.runtimeDir) }), syscall.S_IFREG)
	addChild(ctx, in, "device", ro(t.deviceText), syscall.S_IFREG)
	addChild(ctx, in, "port", ro(t.portText), syscall.S_IFREG)
	addChild(ctx, in, "counters", ro(t.countersText), syscall.S_IFREG)
	addChild(ctx, in, "clock", ro(t.clockText), syscall.S_IFREG)
	addChild(ctx, in, "events", &file{owner: sys, readable: true, open: t.openEvents}, syscall.S_IFREG)
	addChild(ctx, in, "capture", t.captureFile(sys), syscall.S_IFREG)
	addChild(ctx, in, "lease", t.leaseFile(), syscall.S_IFREG)
	addChild(ctx, in, "faults", t.faultsFile(), syscall.S_IFREG)
	// doorbell: the device's futex doorbell page, mapped by clients that
	// wake a parked engine without a FUSE request (device/doorbell.go).
	// Anyone may ring it; it only makes the engine look at the rings of
	// the QPs marked in it.
	if bell := t.dev.Doorbell(); bell != nil {
		if s, err := newShared(owner{perm: 0666, born: t.born}, bell.Fd(), uint64(bell.Size())); err == nil {
			s.read, s.write = preadFd, doorbell(nil)
			addChild(ctx, in, "doorbell", s, syscall.S_IFREG)
		}
	}
	for _, k := range kinds {
		kd := newDir(owner{born: t.born})
		kd.rmdir = t.rmdirIn(kd)
		addChild(ctx, in, k.name, kd, syscall.S_IFDIR)
		addChild(ctx, &kd.Inode, "new", t.newFile(k), syscall.S_IFREG)
		t.kinds[k.name] = kd
	}
	t.addCM(ctx, in)
	t.addSys(ctx, in)
}

func (t *tree) deviceText() string {
	a := t.dev.Attr()
	cfg := t.dev.Config()
	sh := cfg.UserShares()
	f := qp.DeviceFile{Attr: a, Engines: uint32(cfg.Engines), UserShare: cfg.UserShare,
		// What one user other than root may take (root: the limits).
		PerUser: qp.UserLimits{QP: sh.QP, CQ: sh.CQ, MR: sh.MR, PD: sh.PD, MW: sh.MW, AH: sh.AH, SRQ: sh.SRQ,
			TotalMRBytes:       sh.MRBytes,
			McastGrp:           device.UserShareOf(uint64(a.MaxMcastGrp), cfg.UserShare),
			TotalMcastQPAttach: device.UserShareOf(uint64(a.MaxTotalMcastQPAttach), cfg.UserShare),
			EventReaders:       device.MaxEventReaders, Captures: device.MaxCaptureReaders}}
	return qp.FormatDeviceFile(&f)
}

// clockText is the device clock and the wall clock at one instant.
func (t *tree) clockText() string {
	ticks, wall := t.dev.RawClock()
	return qp.FormatClockFile(&qp.ClockFile{RawClock: ticks, WallclockNS: wall})
}

func (t *tree) portText() string {
	p := t.dev.Port()
	return qp.FormatPortAttr(&qp.PortAttr{PortNum: 1, State: p.State, MaxMTU: p.MaxMTU, ActiveMTU: p.ActiveMTU,
		GID: p.GID, LID: p.LID, LinkLayer: p.LinkLayer, GIDTblLen: p.GIDTblLen, PKeyTblLen: p.PKeyTblLen,
		MaxMsgSz: p.MaxMsgSz})
}

// countersText is the device's counters and, last, the daemon's own
// footprint (goroutines, heap, mapped objects), so a soak can see that
// nothing grows.
func (t *tree) countersText() string {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return countersText(t.dev.Counters.List()) + countersText([]device.Counter{
		{Name: "event_drops", Value: t.dev.EventDrops()},
		{Name: "daemon_goroutines", Value: uint64(runtime.NumGoroutine())},
		{Name: "daemon_heap_bytes", Value: ms.HeapAlloc},
		{Name: "daemon_sys_bytes", Value: ms.Sys},
	})
}

// qpCountersText is qp/N/counters: the QP's counters and, last, the
// gauges of its queues (posted and in-flight send WRs, posted receive WRs,
// whether an RNR NAK holds the requester) and its live PSNs (the next to
// send, the next expected).
func qpCountersText(q *device.QP) string {
	c := q.CountersSnapshot()
	s := q.Queues()
	return countersText(c.List()) + lines("sq_posted", s.SQPosted, "sq_in_flight", s.SQInFlight,
		"rq_posted", s.RQPosted, "rnr_wait", boolNum(s.RNRWait),
		"send_psn", uint32(s.SendPSN), "expected_psn", uint32(s.ExpectedPSN))
}

func countersText(cs []device.Counter) string {
	var b strings.Builder
	for _, c := range cs {
		fmt.Fprintf(&b, "%s=%d\n", c.Name, c.Value)
	}
	return b.String()
}

// openEvents opens a reader of the async events of the opener's objects
// (root: of all). The first read blocks until there are events and takes
// those that fit; later reads take the rest without blocking, and once
// they are read one read returns end of file (so "cat events" shows one
// batch and ends). The read after that blocks for the next batch: a
// program that keeps the file open misses nothing between batches, as one
// that reopened it could (another reader of its owner would take the
// events raised between the close and the open). Each read returns whole
// lines.
func (t *tree) openEvents(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	uid, _ := caller(ctx)
	r, err := t.dev.OpenEventsLimited(device.Owner(uid))
	if err != nil {
		return nil, 0, errnoOf(err) // EMFILE: the user holds its most readers
	}
	h := &eventsHandle{r: r}
	done := false
	h.fill = func(ctx context.Context, n int) ([]byte, error) {
		// An event line is under 64 bytes: take what fits in the read.
		most := max(1, n/64)
		var evs []device.Event
		if !done {
			var err error
			if evs, err = r.Read(ctx, most); err != nil {
				return nil, err
			}
			done = true
		} else if evs = r.TryRead(most); len(evs) == 0 {
			done = false // end of this batch; the next read waits for another
			return nil, nil
		}
		var b []byte
		for _, e := range evs {
			b = append(b, e.String()...)
			b = append(b, '\n')
		}
		return b, nil
	}
	return h, openStream, 0
}

// eventsHandle is a stream over one event reader, closed with the file.
type eventsHandle struct {
	stream
	r *device.EventReader
}

var _ = (fs.FileReleaser)((*eventsHandle)(nil))

// Release ends the reader; its unread events go back to its owner.
func (h *eventsHandle) Release(ctx context.Context) syscall.Errno {
	h.r.Close()
	return 0
}

// maxUnreadAnswers bounds the answers of a */new open that wait for a
// read: a write beyond is ENOBUFS and creates nothing, so a writer that
// never reads cannot grow the daemon.
const maxUnreadAnswers = 16 << 10

// newFile is KIND/new: every write is one creation, answered on the read
// side by the new name or by "error: REASON".
func (t *tree) newFile(k kind) *file {
	f := &file{owner: owner{perm: 0666, born: t.born}, readable: true, writable: true}
	f.open = func(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
		h := &stream{}
		h.write = func(ctx context.Context, data []byte) (uint32, syscall.Errno) {
			if h.unread() >= maxUnreadAnswers {
				return 0, syscall.ENOBUFS
			}
			text, err := textOf(k.op, data)
			var name string
			if err == nil {
				name, err = k.create(t, ctx, text)
			}
			if err != nil {
				r := reason(k.op, err)
				h.emit("error: " + r + "\n")
				e := errnoOf(err)
				t.logf.refused(k.op, k.name+"/new", e, r)
				return 0, e
			}
			h.emit(name + "\n")
			return uint32(len(data)), 0
		}
		return h, openStream, 0
	}
	return f
}

// newObject starts the fsnode side of an object the device just made for
// the caller.
func (t *tree) newObject(ctx context.Context, kind string, handle uint32) *object {
	uid, gid := caller(ctx)
	return &object{owner: owner{uid: uid, gid: gid, born: time.Now()}, kind: kind,
		name: strconv.FormatUint(uint64(handle), 10), logf: t.logf}
}

// publish makes the object's directory appear, with attr, error and
// entries.
func (t *tree) publish(ctx context.Context, o *object, attr func() string, entries ...entry) {
	kd := t.kinds[o.kind]
	d := newDir(o.owner)
	d.obj = o
	o.dir = d
	ch := kd.NewPersistentInode(ctx, d, fs.StableAttr{Mode: syscall.S_IFDIR})
	entries = append([]entry{named("attr", o.privFile(attr)), named("error", o.roFile(o.errorText))}, entries...)
	for _, e := range entries {
		addChild(ctx, ch, e.name, e.node, e.mode)
	}
	kd.AddChild(o.name, ch, false)
}

// rmdirIn destroys the object named in kind directory kd. go-fuse removes
// the child when this returns 0; the kernel drops its dentry itself.
func (t *tree) rmdirIn(kd *dir) func(ctx context.Context, name string) syscall.Errno {
	return func(ctx context.Context, name string) syscall.Errno {
		ch := kd.GetChild(name)
		if ch == nil {
			return syscall.ENOENT
		}
		d, ok := ch.Operations().(*dir)
		if !ok || d.obj == nil {
			return syscall.ENOTDIR
		}
		o := d.obj
		if e := o.isOwner(ctx); e != 0 {
			return e
		}
		if err := o.destroy(); err != nil {
			return o.fail("rmdir", err)
		}
		o.gone.Store(true)
		for _, c := range o.cleanup {
			c()
		}
		return 0
	}
}

// sharedEntry is a ring or memory file of o.
func (o *object) sharedEntry(name string, fd int, size uint64,
	read func(fd int, p []byte, off int64) (int, error),
	write func(ctx context.Context, p []byte, off int64) (int, error)) (entry, *shared, error) {
	ow := o.owner
	ow.perm = 0600
	s, err := newShared(ow, fd, size)
	if err != nil {
		return entry{}, nil, err
	}
	s.read, s.write = read, write
	o.cleanup = append(o.cleanup, s.close)
	return entry{name: name, node: s, mode: syscall.S_IFREG}, s, nil
}

// doorbell is a ring write that kicks: the bytes are ignored.
func doorbell(kick func()) func(context.Context, []byte, int64) (int, error) {
	return func(ctx context.Context, p []byte, off int64) (int, error) {
		if kick != nil {
			kick()
		}
		return len(p), nil
	}
}

func boolNum(b bool) int {
	if b {
		return 1
	}
	return 0
}

func lines(kv ...any) string {
	var b strings.Builder
	for i := 0; i+1 < len(kv); i += 2 {
		fmt.Fprintf(&b, "%v=%v\n", kv[i], kv[i+1])
	}
	return b.String()
}

// --- creators, one per kind ---------------------------------------------

func (t *tree) createPD(ctx context.Context, text string) (string, error) {
	if _, err := qp.ParseCreatePD(text); err != nil {
		return "", err
	}
	uid, _ := caller(ctx)
	pd, err := t.dev.AllocPD(device.Owner(uid))
	if err != nil {
		return "", err
	}
	o := t.newObject(ctx, "pd", pd.Handle)
	o.destroy = pd.Dealloc
	t.publish(ctx, o, func() string { return qp.FormatPDAttr(&qp.PDAttr{Handle: pd.Handle}) })
	return o.name, nil
}

func (t *tree) createMR(ctx context.Context, text string) (string, error) {
	req, err := qp.ParseCreateMR(text)
	if err != nil {
		return "", err
	}
	uid, _ := caller(ctx)
	req.PID = callerPID(ctx)
	mr, err := t.dev.RegMR(device.Owner(uid), req)
	if err != nil {
		return "", err
	}
	o := t.newObject(ctx, "mr", mr.Handle)
	o.destroy = mr.Dereg
	var entries []entry
	// A shared MR's mem maps its backing's whole region (mem_offset says
	// where its bytes start); read and write reach its own bytes. An MR on
	// the program's own memory has none: the program maps it already.
	if reg := mr.Region(); reg != nil {
		memSize := mr.Length
		if req.Share != 0 {
			memSize = uint64(reg.Size())
		}
		mem, _, err := o.sharedEntry("mem", reg.Fd(), memSize,
			func(fd int, p []byte, off int64) (int, error) { return mr.ReadAt(p, off) },
			func(ctx context.Context, p []byte, off int64) (int, error) { return mr.WriteAt(p, off) })
		if err != nil {
			mr.Dereg()
			return "", &device.Error{Op: "reg_mr", Errno: syscall.ENOMEM, Err: err}
		}
		entries = append(entries, mem)
	}
	uid32 := device.Owner(uid)
	ctl := o.cmdFile("rereg_mr", func(ctx context.Context, text string) error {
		cmd, rest := splitCommand(text)
		if cmd != "rereg" {
			return invalid("rereg_mr", "unknown command %q (want: rereg [pd=H] [access=...] [share=H offset=N length=N iova=N | addr=A length=N iova=N])", clip(cmd))
		}
		req, err := qp.ParseReregMR(rest)
		if err != nil {
			return err
		}
		req.PID = callerPID(ctx)
		return mr.Rereg(uid32, req)
	})
	entries = append(entries, named("ctl", ctl))
	t.publish(ctx, o, func() string {
		a := mr.Attr()
		return qp.FormatMRAttr(&qp.MRAttr{PD: a.PD, Length: a.Length, IOVA: a.IOVA, Access: a.Access,
			LKey: a.LKey, RKey: a.RKey, Valid: a.Valid, MemOffset: a.MemOffset, Memory: a.Memory})
	}, entries...)
	return o.name, nil
}

func (t *tree) createMW(ctx context.Context, text string) (string, error) {
	req, err := qp.ParseCreateMW(text)
	if err != nil {
		return "", err
	}
	uid, _ := caller(ctx)
	mw, err := t.dev.AllocMW(device.Owner(uid), req)
	if err != nil {
		return "", err
	}
	o := t.newObject(ctx, "mw", mw.Handle)
	o.destroy = mw.Dealloc
	t.publish(ctx, o, func() string {
		a := mw.Attr()
		return qp.FormatMWAttr(&qp.MWAttr{PD: a.PD, Type: a.Type, RKey: a.RKey, Bound: a.Bound, MR: a.MR,
			Addr: a.Addr, Length: a.Length, Access: a.Access})
	})
	return o.name, nil
}

func (t *tree) createAH(ctx context.Context, text string) (string, error) {
	req, err := qp.ParseCreateAH(text)
	if err != nil {
		return "", err
	}
	uid, _ := caller(ctx)
	ah, err := t.dev.CreateAH(device.Owner(uid), req)
	if err != nil {
		return "", err
	}
	o := t.newObject(ctx, "ah", ah.Handle)
	o.destroy = ah.Destroy
	t.publish(ctx, o, func() string {
		return qp.FormatAHAttr(&qp.AHAttr{PD: ah.PD.Handle, AH: ah.Attr})
	})
	return o.name, nil
}

func (t *tree) createSRQ(ctx context.Context, text string) (string, error) {
	req, err := qp.ParseCreateSRQ(text)
	if err != nil {
		return "", err
	}
	uid, _ := caller(ctx)
	srq, err := t.dev.CreateSRQ(device.Owner(uid), req)
	if err != nil {
		return "", err
	}
	o := t.newObject(ctx, "srq", srq.Handle)
	reg := srq.Region()
	ring, ringNode, err := o.sharedEntry("ring", reg.Fd(), uint64(reg.Size()), preadFd, doorbell(nil))
	if err != nil {
		srq.Destroy()
		return "", &device.Error{Op: "create_srq", Errno: syscall.ENOMEM, Err: err}
	}
	// ringMu serialises resizes, which replace the ring file, with each
	// other and with the destroy; ringNode is the current ring file.
	var ringMu sync.Mutex
	o.destroy = func() error {
		ringMu.Lock()
		defer ringMu.Unlock()
		return srq.Destroy()
	}
	o.cleanup = append(o.cleanup, func() {
		ringMu.Lock()
		ringNode.close()
		ringMu.Unlock()
	})
	ctl := o.cmdFile("modify_srq", func(ctx context.Context, text string) error {
		cmd, rest := splitCommand(text)
		if cmd != "modify" {
			return invalid("modify_srq", "unknown command %q (want: modify [max_wr=N] [srq_limit=N])", clip(cmd))
		}
		m, err := qp.ParseModifySRQ(rest)
		if err != nil {
			return err
		}
		ringMu.Lock()
		defer ringMu.Unlock()
		if err := srq.ModifyAttr(m); err != nil {
			return err
		}
		if m.Mask&qp.SRQMaxWR == 0 {
			return nil
		}
		return t.replaceRing(ctx, o, "modify_srq", srq.Region(), doorbell(nil), &ringNode)
	})
	post := o.cmdFile("post_srq_recv", func(ctx context.Context, text string) error {
		return postLines("post_srq_recv", text, qp.ParseRecvWR, srq.PostRecv)
	})
	t.publish(ctx, o, func() string {
		a := srq.Attr()
		typ := "basic"
		if srq.SRQNum() != 0 {
			typ = "xrc"
		}
		return qp.FormatSRQAttr(&qp.SRQAttr{PD: a.PD, MaxWR: a.MaxWR, MaxSGE: a.MaxSGE, SRQLimit: a.SRQLimit,
			Pending: a.Pending, SRQType: typ, SRQNum: srq.SRQNum(), CQ: srq.XRCInfo()})
	}, ring, named("ctl", ctl), named("post_recv", post))
	return o.name, nil
}

func (t *tree) createQP(ctx context.Context, text string) (string, error) {
	req, err := qp.ParseCreateQP(text)
	if err != nil {
		return "", err
	}
	if req.Open != 0 {
		return t.openQP(ctx, req)
	}
	uid, _ := caller(ctx)
	q, err := t.dev.CreateQP(device.Owner(uid), req)
	if err != nil {
		return "", err
	}
	o := t.newObject(ctx, "qp", q.QPN)
	o.destroy = q.Destroy
	var entries []entry
	var sq entry
	if q.Type == qp.TypeXRCRecv {
		// Responses are all it sends: no queue of its own to show.
		xrcRecvHooks(o, q)
	} else if sq, _, err = o.sharedEntry("sq", q.SQ().Fd(), uint64(q.SQ().Size()), preadFd, doorbell(q.Kick)); err == nil {
		entries = append(entries, sq)
		if rq := q.RQ(); rq != nil {
			var e entry
			e, _, err = o.sharedEntry("rq", rq.Fd(), uint64(rq.Size()), preadFd, doorbell(q.Kick))
			entries = append(entries, e)
		}
	}
	if err != nil {
		for _, c := range o.cleanup {
			c()
		}
		q.Destroy()
		return "", &device.Error{Op: "create_qp", Errno: syscall.ENOMEM, Err: err}
	}
	ctl := o.cmdFile("modify_qp", func(ctx context.Context, text string) error {
		cmd, rest := splitCommand(text)
		switch cmd {
		case "modify":
			a, mask, err := qp.ParseModify(rest)
			if err != nil {
				return err
			}
			if mask&qp.MaskQKey != 0 && a.QKey&device.ControlledQKey != 0 && !callerHasCap(ctx, capNetRaw) {
				// As ib_uverbs' modify_qp: a controlled Q_Key (QP1's
				// 0x80010000 among them) would let the QP send MADs the
				// CM takes for the device's own.
				return &device.Error{Op: "modify_qp", Errno: syscall.EPERM,
					Err: fmt.Errorf("qkey 0x%08x has the high bit set (a controlled Q_Key): it needs CAP_NET_RAW", a.QKey)}
			}
			return q.Modify(&a, mask)
		case "reset", "error", "probe":
			if rest != "" {
				return invalid("modify_qp", "%s takes no arguments", cmd)
			}
			switch cmd {
			case "reset":
				return q.Reset()
			case "probe":
				return q.Probe()
			}
			return q.Error()
		case "attach_mcast", "detach_mcast":
			gid, lid, err := parseMcast(cmd, rest)
			if err != nil {
				return err
			}
			if cmd == "attach_mcast" {
				return q.AttachMcast(gid, lid)
			}
			return q.DetachMcast(gid, lid)
		case "":
			return invalid("modify_qp", "empty command (want: modify key=value ..., reset, error, probe, attach_mcast or detach_mcast)")
		}
		return invalid("modify_qp", "unknown command %q (want: modify key=value ..., reset, error, probe, attach_mcast gid=G lid=N or detach_mcast gid=G lid=N)", clip(cmd))
	})
	postSend := o.cmdFile("post_send", func(ctx context.Context, text string) error {
		return postLines("post_send", text, qp.ParseSendWR, q.PostSend)
	})
	postRecv := o.cmdFile("post_recv", func(ctx context.Context, text string) error {
		return postLines("post_recv", text, qp.ParseRecvWR, q.PostRecv)
	})
	entries = append(entries,
		named("ctl", ctl),
		named("state", o.roFile(func() string { return q.State().String() + "\n" })),
		named("post_send", postSend),
		named("post_recv", postRecv),
		named("counters", o.privFile(func() string { return qpCountersText(q) })),
	)
	t.publish(ctx, o, func() string {
		f := qp.AttrFile{Attr: q.Query(), QPN: q.QPN, Type: q.Type, PD: q.PDHandle(),
			SendCQ: q.SendCQHandle(), RecvCQ: q.RecvCQHandle(), SRQ: q.SRQHandle(), SQSigAll: q.SQSigAll,
			McastGroups: q.McastGroups()}
		slices.Sort(f.McastGroups)
		return qp.FormatAttrFile(&f)
	}, entries...)
	return o.name, nil
}

func (t *tree) createCQ(ctx context.Context, text string) (string, error) {
	req, err := qp.ParseCreateCQ(text)
	if err != nil {
		return "", err
	}
	uid, gid := caller(ctx)
	cq, err := t.dev.CreateCQ(device.Owner(uid), req)
	if err != nil {
		return "", err
	}
	o := t.newObject(ctx, "cq", cq.Handle)
	reg := cq.Region()
	ringEntry, ringNode, err := o.sharedEntry("ring", reg.Fd(), uint64(reg.Size()), preadFd, cqRingWrite)
	var ch *channel
	if err == nil {
		ch, err = t.newChannel(cq.Handle, uid, gid)
	}
	if err != nil {
		for _, c := range o.cleanup {
			c()
		}
		cq.Destroy()
		return "", &device.Error{Op: "create_cq", Errno: syscall.ENOMEM, Err: err}
	}
	line := []byte(fmt.Sprintf("event %s=%d\n", qp.KeyCQ, cq.Handle))
	cq.SetEventHook(func() { ch.signal(line) })
	// ringMu serialises resizes, which replace the ring file, with each
	// other and with the destroy; ringNode is the current ring file.
	var ringMu sync.Mutex
	o.destroy = func() error {
		ringMu.Lock()
		defer ringMu.Unlock()
		return cq.Destroy()
	}
	o.cleanup = append(o.cleanup, func() {
		cq.SetEventHook(nil)
		t.closeChannel(ch)
		ringMu.Lock()
		ringNode.close()
		ringMu.Unlock()
	})
	ctl := o.cmdFile("resize_cq", func(ctx context.Context, text string) error {
		cmd, rest := splitCommand(text)
		if cmd != "resize" {
			return invalid("resize_cq", "unknown command %q (want: resize cqe=N)", clip(cmd))
		}
		n, err := oneNumber(rest, qp.KeyCQE)
		if err != nil {
			return err
		}
		ringMu.Lock()
		defer ringMu.Unlock()
		if err := cq.Resize(n); err != nil {
			return err
		}
		return t.replaceRing(ctx, o, "resize_cq", cq.Region(), cqRingWrite, &ringNode)
	})
	poll := o.fileNode(0600, true, false, func(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
		h := &stream{}
		h.fill = func(ctx context.Context, n int) ([]byte, error) {
			wcs, err := cq.Poll(max(1, n/256))
			if err != nil {
				return nil, o.record("poll_cq", err)
			}
			var b []byte
			for i := range wcs {
				b = append(b, qp.FormatWC(&wcs[i])...)
				b = append(b, '\n')
			}
			return b, nil
		}
		return h, openStream, 0
	})
	notify := o.fileNode(0600, true, true, func(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
		done := false
		h := &stream{}
		h.write = func(ctx context.Context, data []byte) (uint32, syscall.Errno) {
			text, err := textOf("req_notify_cq", data)
			if err == nil {
				w := strings.TrimSpace(text)
				if a, ok := ring.ParseArm(w); ok && a != ring.ArmNone {
					cq.ReqNotify(a == ring.ArmSolicited)
					return uint32(len(data)), 0
				}
				err = invalid("req_notify_cq", "unknown request %q (want next or solicited)", clip(w))
			}
			return 0, o.fail("req_notify_cq", err)
		}
		h.fill = func(ctx context.Context, n int) ([]byte, error) {
			if done {
				return nil, nil
			}
			if err := cq.WaitEvent(ctx); err != nil {
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				return nil, o.record("get_cq_event", err)
			}
			done = true
			return line, nil
		}
		return h, openStream, 0
	})
	ow := o.owner
	ow.perm = 0777
	t.publish(ctx, o, func() string {
		s := cq.Status()
		return qp.FormatCQAttr(&qp.CQAttr{CQE: s.CQE, WCFlags: cq.WCFlags, Overflowed: s.Overflowed,
			Pending: s.Pending, Armed: s.Armed, Overflows: s.Overflows})
	}, ringEntry, named("poll", entry{node: poll, mode: syscall.S_IFREG}),
		named("notify", entry{node: notify, mode: syscall.S_IFREG}),
		named("ctl", ctl),
		entry{name: "channel", node: &symlink{owner: ow, target: ch.path}, mode: syscall.S_IFLNK})
	return o.name, nil
}
