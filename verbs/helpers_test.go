package verbs

import (
	"errors"
	"syscall"
	"testing"
	"time"

	"rdmafs/device"
	"rdmafs/fsnode"
	"rdmafs/internal/testmount"
)

// env is one mounted device and a Context on it.
type env struct {
	t   testing.TB
	dir string
	dev *device.Device
	ctx *Context
	gid [16]byte
	srv *fsnode.Server
}

// mount mounts a fresh device in a temporary directory and opens it. It
// skips when mounting is impossible here, except in CI, where it fails.
func mount(t testing.TB, opts Options) *env { return mountConfig(t, opts, nil) }

// mountConfig is mount with a device configuration changed by set.
func mountConfig(t testing.TB, opts Options, set func(*device.Config)) *env {
	t.Helper()
	cfg := device.DefaultConfig()
	if set != nil {
		set(&cfg)
	}
	dev := testmount.Device(t, cfg)
	dir, srv := testmount.Mount(t, dev, fsnode.Options{})
	ctx, err := OpenWithOptions(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ctx.Close() })
	port, err := ctx.QueryPort(1)
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, dir: dir, dev: dev, ctx: ctx, gid: port.GID, srv: srv}
}

// testOpts: doorbells only on NEED_WAKEUP, as programs run. Setting
// RDMAFS_ALWAYS_DOORBELL=1 runs the suite with a doorbell per batch.
var testOpts = Options{}

const allAccess = AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic

// pair is two connected RC (or UC) QPs on one PD and CQ with one MR each.
type pair struct {
	pd     *PD
	cq     *CQ
	a, b   *QP
	ma, mb *MR
}

func (e *env) must(err error) {
	e.t.Helper()
	if err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) rcPair(typ QPType, cqe int, capa QPCap, mrLen int) *pair {
	e.t.Helper()
	p := &pair{}
	var err error
	p.pd, err = e.ctx.AllocPD()
	e.must(err)
	p.cq, err = e.ctx.CreateCQ(cqe)
	e.must(err)
	p.ma, err = p.pd.RegMR(mrLen, allAccess)
	e.must(err)
	p.mb, err = p.pd.RegMRIOVA(mrLen, 0x100000, allAccess)
	e.must(err)
	init := QPInitAttr{Type: typ, SendCQ: p.cq, RecvCQ: p.cq, Cap: capa}
	p.a, err = p.pd.CreateQP(init)
	e.must(err)
	p.b, err = p.pd.CreateQP(init)
	e.must(err)
	e.connect(p.a, p.b)
	e.connect(p.b, p.a)
	return p
}

// connect walks q through INIT and RTR (towards dest) to RTS.
func (e *env) connect(q, dest *QP) {
	e.t.Helper()
	e.must(q.Connect(ConnectAttr{DestQPN: dest.QPN, DGID: e.gid}))
}

// pollN polls cq until it has n completions (or fails after 10s).
func pollN(t testing.TB, cq *CQ, n int) []WC {
	t.Helper()
	out := make([]WC, 0, n)
	buf := make([]WC, 16)
	deadline := time.Now().Add(10 * time.Second)
	for len(out) < n {
		k, err := cq.PollCQ(buf)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, buf[:k]...)
		if k == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("cq %d: %d of %d completions after 10s: %+v", cq.Handle, len(out), n, out)
			}
			time.Sleep(50 * time.Microsecond)
		}
	}
	return out
}

func findWC(t testing.TB, wcs []WC, id uint64) WC {
	t.Helper()
	for _, wc := range wcs {
		if wc.WRID == id {
			return wc
		}
	}
	t.Fatalf("no completion with wr_id=%d in %+v", id, wcs)
	return WC{}
}

func isErrno(err error, e syscall.Errno) bool { return errors.Is(err, e) }

// postRetry posts wr, waiting while the send queue is full.
func postRetry(q *QP, wr SendWR) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := q.PostSend(wr)
		if !isErrno(err, syscall.ENOMEM) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Microsecond)
	}
}
