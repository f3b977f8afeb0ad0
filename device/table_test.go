package device

import (
	"fmt"
	"syscall"
	"testing"

	"rdmafs/qp"
)

// stepsFixture is a device with small limits (4 of each kind, a share of
// 1 for a user) and, for root and two users, a PD and a CQ to create on.
type stepsFixture struct {
	*env
	pdOf, cqOf map[Owner]uint32 // by owner: a PD and a CQ of its own
}

const stepsU, stepsV Owner = 5, 6

func newStepsFixture(t *testing.T) *stepsFixture {
	e := newEnv(t, func(c *Config) {
		c.MaxPD, c.MaxMR, c.MaxMW, c.MaxAH, c.MaxCQ, c.MaxSRQ, c.MaxQP = 4, 4, 4, 4, 4, 4, 4
		c.UserShare, c.MaxTotalMRBytes = 25, 8<<20
	})
	f := &stepsFixture{env: e, pdOf: map[Owner]uint32{0: e.pd.Handle}, cqOf: map[Owner]uint32{}}
	for _, o := range []Owner{0, stepsU, stepsV} {
		if o != 0 {
			pd, err := e.d.AllocPD(o)
			if err != nil {
				t.Fatal(err)
			}
			f.pdOf[o] = pd.Handle
		}
		cq, err := e.d.CreateCQ(o, qp.CreateCQ{CQE: 4})
		if err != nil {
			t.Fatal(err)
		}
		f.cqOf[o] = cq.Handle
	}
	return f
}

// qpReq is a small RC QP on pd completing into cq.
func qpReq(pd, cq uint32) qp.CreateQP {
	return qp.CreateQP{PD: pd, Type: qp.TypeRC, SendCQ: cq, RecvCQ: cq,
		Cap: qp.Cap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}}
}

// stepKinds are the object kinds as the shared steps see them: the verb
// that creates one, on the PD and CQ handles given where it needs them.
var stepKinds = []struct {
	kind, op string
	create   func(d *Device, o Owner, pd, cq uint32) error
}{
	{"pd", "alloc_pd", func(d *Device, o Owner, _, _ uint32) error { _, err := d.AllocPD(o); return err }},
	{"mr", "reg_mr", func(d *Device, o Owner, pd, _ uint32) error {
		_, err := d.RegMR(o, qp.CreateMR{PD: pd, Length: 4096, Access: qp.AccessLocalWrite})
		return err
	}},
	{"mw", "alloc_mw", func(d *Device, o Owner, pd, _ uint32) error {
		_, err := d.AllocMW(o, qp.CreateMW{PD: pd, Type: 1})
		return err
	}},
	{"ah", "create_ah", func(d *Device, o Owner, pd, _ uint32) error {
		_, err := d.CreateAH(o, qp.CreateAH{PD: pd, AH: qp.AH{DGID: d.Port().GID, PortNum: 1}})
		return err
	}},
	{"cq", "create_cq", func(d *Device, o Owner, _, _ uint32) error { _, err := d.CreateCQ(o, qp.CreateCQ{CQE: 4}); return err }},
	{"srq", "create_srq", func(d *Device, o Owner, pd, _ uint32) error {
		_, err := d.CreateSRQ(o, qp.CreateSRQ{PD: pd, MaxWR: 4, MaxSGE: 1})
		return err
	}},
	{"qp", "create_qp", func(d *Device, o Owner, pd, cq uint32) error { _, err := d.CreateQP(o, qpReq(pd, cq)); return err }},
}

// wantErr fails t unless err is errno with exactly the reason want.
func wantErr(t *testing.T, err error, errno syscall.Errno, want string) {
	t.Helper()
	if Errno(err) != errno || err.Error() != want {
		t.Fatalf("got %v (%v), want %v: %q", err, Errno(err), errno, want)
	}
}

// The admission every creation makes, for each kind: the device limit,
// the per-user share, and the device being open, which is checked before
// any handle the request names.
func TestObjectAdmission(t *testing.T) {
	for _, k := range stepKinds {
		t.Run(k.kind+"/limit", func(t *testing.T) {
			f := newStepsFixture(t)
			var err error
			for i := 0; i < 8 && err == nil; i++ {
				err = k.create(f.d, 0, f.pdOf[0], f.cqOf[0])
			}
			wantErr(t, err, syscall.ENOMEM, fmt.Sprintf("%s: max_%s (4) reached", k.op, k.kind))
		})
		t.Run(k.kind+"/share", func(t *testing.T) {
			f := newStepsFixture(t)
			var err error
			for i := 0; i < 8 && err == nil; i++ {
				err = k.create(f.d, stepsU, f.pdOf[stepsU], f.cqOf[stepsU])
			}
			wantErr(t, err, syscall.ENOMEM, fmt.Sprintf(
				"%s: max_%s per user (1: --user-share 25%% of 4) reached by uid 5", k.op, k.kind))
			// The other user and root still create.
			if err := k.create(f.d, 0, f.pdOf[0], f.cqOf[0]); err != nil {
				t.Fatal(err)
			}
		})
		t.Run(k.kind+"/closed", func(t *testing.T) {
			f := newStepsFixture(t)
			f.d.Close()
			wantErr(t, k.create(f.d, 0, 999, 999), syscall.Errno(19), k.op+": device is closed")
		})
	}
	t.Run("mr/bytes", func(t *testing.T) {
		f := newStepsFixture(t)
		_, err := f.d.RegMR(stepsU, qp.CreateMR{PD: f.pdOf[stepsU], Length: 2<<20 + 1, Access: qp.AccessLocalWrite})
		wantErr(t, err, syscall.ENOMEM, "reg_mr: registered memory per user would exceed 2097152 bytes "+
			"(--user-share 25% of 8388608) for uid 5 (0 in use)")
	})
}

// The lookups and destroys of each kind: a handle a request names that
// does not exist (EINVAL) or is another user's (EACCES), a destroy while
// the object is in use (EBUSY) and one of an object already destroyed
// (ENOENT), with their reasons.
func TestObjectLookupDestroy(t *testing.T) {
	const u, v = stepsU, stepsV
	steps := []struct {
		name  string
		errno syscall.Errno
		run   func(f *stepsFixture) (want string, err error)
	}{
		{"pd/missing", syscall.EINVAL, func(f *stepsFixture) (string, error) {
			_, err := f.d.AllocMW(0, qp.CreateMW{PD: 999})
			return "alloc_mw: pd 999 does not exist", err
		}},
		{"pd/another user's", syscall.EACCES, func(f *stepsFixture) (string, error) {
			_, err := f.d.CreateSRQ(v, qp.CreateSRQ{PD: f.pdOf[u], MaxWR: 4, MaxSGE: 1})
			return fmt.Sprintf("create_srq: pd %d belongs to another user", f.pdOf[u]), err
		}},
		{"pd/in use", syscall.EBUSY, func(f *stepsFixture) (string, error) {
			f.mr(4096, qp.AccessLocalWrite)
			return fmt.Sprintf("dealloc_pd: pd %d still has 1 objects", f.pdOf[0]), f.env.pd.Dealloc()
		}},
		{"pd/destroyed", syscall.ENOENT, func(f *stepsFixture) (string, error) {
			pd, _ := f.d.AllocPD(0)
			pd.Dealloc()
			return fmt.Sprintf("dealloc_pd: pd %d does not exist", pd.Handle), pd.Dealloc()
		}},
		{"mr/missing", syscall.EINVAL, func(f *stepsFixture) (string, error) {
			_, err := f.d.RegMR(0, qp.CreateMR{PD: f.pdOf[0], Length: 16, Share: 999})
			return "reg_mr: share: no mr 999 of yours", err
		}},
		{"mr/another user's", syscall.EINVAL, func(f *stepsFixture) (string, error) {
			mr, _ := f.d.RegMR(u, qp.CreateMR{PD: f.pdOf[u], Length: 4096, Access: qp.AccessLocalWrite})
			err := mr.Rereg(v, qp.ReregMR{HasTranslation: true, Share: mr.Handle, Length: 16})
			return fmt.Sprintf("rereg_mr: share: no mr %d of yours", mr.Handle), err
		}},
		{"mr/in use", syscall.EBUSY, func(f *stepsFixture) (string, error) {
			mr := boundMR(f)
			return fmt.Sprintf("dereg_mr: mr %d has 1 memory windows bound", mr.Handle), mr.Dereg()
		}},
		{"mr/in use (rereg)", syscall.EBUSY, func(f *stepsFixture) (string, error) {
			mr := boundMR(f)
			return fmt.Sprintf("rereg_mr: mr %d has 1 memory windows bound", mr.Handle), mr.Rereg(0, qp.ReregMR{})
		}},
		{"mr/destroyed", syscall.ENOENT, func(f *stepsFixture) (string, error) {
			mr := f.mr(4096, 0)
			mr.Dereg()
			return fmt.Sprintf("dereg_mr: mr %d does not exist", mr.Handle), mr.Dereg()
		}},
		{"mr/destroyed (file)", syscall.ENOENT, func(f *stepsFixture) (string, error) {
			mr := f.mr(4096, 0)
			mr.Dereg()
			_, err := mr.WriteAt([]byte{1}, 0)
			return fmt.Sprintf("write_mr: mr %d was deregistered", mr.Handle), err
		}},
		{"mw/destroyed", syscall.ENOENT, func(f *stepsFixture) (string, error) {
			mw := f.mw(1)
			mw.Dealloc()
			return fmt.Sprintf("dealloc_mw: mw %d does not exist", mw.Handle), mw.Dealloc()
		}},
		{"ah/destroyed", syscall.ENOENT, func(f *stepsFixture) (string, error) {
			ah := f.ah(f.d.Port().GID)
			ah.Destroy()
			return fmt.Sprintf("destroy_ah: ah %d does not exist", ah.Handle), ah.Destroy()
		}},
		{"cq/missing", syscall.EINVAL, func(f *stepsFixture) (string, error) {
			_, err := f.d.CreateQP(0, qpReq(f.pdOf[0], 999))
			return "create_qp: send_cq: cq 999 does not exist", err
		}},
		{"cq/another user's", syscall.EACCES, func(f *stepsFixture) (string, error) {
			req := qpReq(f.pdOf[v], f.cqOf[v])
			req.RecvCQ = f.cqOf[u]
			_, err := f.d.CreateQP(v, req)
			return fmt.Sprintf("create_qp: recv_cq: cq %d belongs to another user", f.cqOf[u]), err
		}},
		{"cq/in use", syscall.EBUSY, func(f *stepsFixture) (string, error) {
			cq := f.cq(4)
			f.qp(qpOpts{scq: cq, rcq: cq})
			return fmt.Sprintf("destroy_cq: cq %d is used by 2 QPs", cq.Handle), cq.Destroy()
		}},
		{"cq/destroyed", syscall.ENOENT, func(f *stepsFixture) (string, error) {
			cq := f.cq(4)
			cq.Destroy()
			return fmt.Sprintf("destroy_cq: cq %d does not exist", cq.Handle), cq.Destroy()
		}},
		{"srq/missing", syscall.EINVAL, func(f *stepsFixture) (string, error) {
			req := qpReq(f.pdOf[0], f.cqOf[0])
			req.SRQ = 999
			_, err := f.d.CreateQP(0, req)
			return "create_qp: srq: 999 does not exist", err
		}},
		{"srq/another user's", syscall.EACCES, func(f *stepsFixture) (string, error) {
			s, _ := f.d.CreateSRQ(u, qp.CreateSRQ{PD: f.pdOf[u], MaxWR: 4, MaxSGE: 1})
			req := qpReq(f.pdOf[v], f.cqOf[v])
			req.SRQ = s.Handle
			_, err := f.d.CreateQP(v, req)
			return fmt.Sprintf("create_qp: srq: %d belongs to another user", s.Handle), err
		}},
		{"srq/in use", syscall.EBUSY, func(f *stepsFixture) (string, error) {
			s := f.srq(4, 0)
			cq := f.cq(4)
			f.qp(qpOpts{scq: cq, rcq: cq, srq: s})
			return fmt.Sprintf("destroy_srq: srq %d has 1 QPs attached", s.Handle), s.Destroy()
		}},
		{"srq/destroyed", syscall.ENOENT, func(f *stepsFixture) (string, error) {
			s := f.srq(4, 0)
			s.Destroy()
			return fmt.Sprintf("destroy_srq: srq %d does not exist", s.Handle), s.Destroy()
		}},
		{"qp/destroyed", syscall.ENOENT, func(f *stepsFixture) (string, error) {
			q := destroyedQP(f)
			return fmt.Sprintf("destroy_qp: qp %d does not exist", q.QPN), q.Destroy()
		}},
		{"qp/destroyed (probe)", syscall.ENOENT, func(f *stepsFixture) (string, error) {
			q := destroyedQP(f)
			return fmt.Sprintf("probe: qp %d does not exist", q.QPN), q.Probe()
		}},
		{"qp/destroyed (modify)", syscall.ENOENT, func(f *stepsFixture) (string, error) {
			q := destroyedQP(f)
			return fmt.Sprintf("modify_qp: qp %d was destroyed", q.QPN), q.Reset()
		}},
		{"qp/closed device", syscall.ENOENT, func(f *stepsFixture) (string, error) {
			q, _ := f.d.CreateQP(0, qpReq(f.pdOf[0], f.cqOf[0]))
			f.d.Close()
			return fmt.Sprintf("destroy_qp: qp %d does not exist", q.QPN), q.Destroy()
		}},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			f := newStepsFixture(t)
			want, err := s.run(f)
			wantErr(t, err, s.errno, want)
		})
	}
	// The exported lookups find nothing at a handle never handed out.
	f := newStepsFixture(t)
	d := f.d
	if d.PD(999) != nil || d.MR(999) != nil || d.MW(999) != nil || d.AH(999) != nil ||
		d.CQ(999) != nil || d.SRQ(999) != nil || d.QP(999) != nil {
		t.Fatal("a lookup of handle 999 found an object")
	}
}

// destroyedQP is a QP of root's that was destroyed.
func destroyedQP(f *stepsFixture) *QP {
	f.t.Helper()
	q, err := f.d.CreateQP(0, qpReq(f.pdOf[0], f.cqOf[0]))
	if err != nil {
		f.t.Fatal(err)
	}
	if err := q.Destroy(); err != nil {
		f.t.Fatal(err)
	}
	return q
}

// useLockedOn checks useLocked on one table: h is an object of stepsU.
func useLockedOn[T any, P ownedPtr[T]](t *testing.T, d *Device, tab *table[T], kind string, h uint32) {
	t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	_, err := useLocked[T, P](tab, "op", kind, 999, stepsU)
	wantErr(t, err, syscall.EINVAL, "op: "+kind+" 999 does not exist")
	_, err = useLocked[T, P](tab, "op", kind, h, stepsV)
	wantErr(t, err, syscall.EACCES, fmt.Sprintf("op: %s %d belongs to another user", kind, h))
	for _, o := range []Owner{stepsU, 0} {
		if x, err := useLocked[T, P](tab, "op", kind, h, o); err != nil || x != tab.get(h) {
			t.Fatalf("%s %d for uid %d: %v, %v", kind, h, o, x, err)
		}
	}
}

// useLocked on every kind's table: a handle nothing has, another user's
// object, and the owner's or root's.
func TestUseLocked(t *testing.T) {
	f := newStepsFixture(t)
	d, u, pd := f.d, stepsU, f.pdOf[stepsU]
	mr, err := d.RegMR(u, qp.CreateMR{PD: pd, Length: 4096, Access: qp.AccessLocalWrite})
	if err != nil {
		t.Fatal(err)
	}
	mw, err := d.AllocMW(u, qp.CreateMW{PD: pd, Type: 1})
	if err != nil {
		t.Fatal(err)
	}
	ah, err := d.CreateAH(u, qp.CreateAH{PD: pd, AH: qp.AH{DGID: d.Port().GID, PortNum: 1}})
	if err != nil {
		t.Fatal(err)
	}
	s, err := d.CreateSRQ(u, qp.CreateSRQ{PD: pd, MaxWR: 4, MaxSGE: 1})
	if err != nil {
		t.Fatal(err)
	}
	useLockedOn(t, d, &d.pds, "pd", pd)
	useLockedOn(t, d, &d.mrs, "mr", mr.Handle)
	useLockedOn(t, d, &d.mws, "mw", mw.Handle)
	useLockedOn(t, d, &d.ahs, "ah", ah.Handle)
	useLockedOn(t, d, &d.cqs, "cq", f.cqOf[u])
	useLockedOn(t, d, &d.srqs, "srq", s.Handle)
}

// boundMR is an MR of root's PD with a type 1 window bound to it.
func boundMR(f *stepsFixture) *MR {
	f.t.Helper()
	mr := f.mr(4096, qp.AccessLocalWrite|qp.AccessMWBind)
	cq := f.cq(16)
	a := f.qp(qpOpts{scq: cq, rcq: cq})
	f.connect(a, a.QPN, "")
	mw := f.mw(1)
	f.postSend(a, "opcode=bind_mw wr_id=1 send_flags=signaled rkey=1 mw="+itoa(mw.Handle)+
		" bind_lkey="+itoa(mr.LKey)+" bind_addr=0 bind_length=100 bind_access=remote_read")
	f.expect(cq, sendWC(1, "success", "bind_mw", a, 0))
	return mr
}
