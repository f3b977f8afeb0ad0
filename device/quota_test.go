package device

import (
	"strings"
	"syscall"
	"testing"

	"rdmafs/qp"
)

// Every object limit and the memory cap have a per-user share: a uid
// other than root gets ENOMEM naming the per-user limit at its share,
// another uid and root still create.
func TestUserShares(t *testing.T) {
	e := newEnv(t, func(c *Config) {
		c.MaxPD, c.MaxCQ, c.MaxQP, c.MaxMR, c.MaxSRQ, c.MaxAH, c.MaxMW = 8, 8, 8, 8, 8, 8, 8
		c.MaxTotalMRBytes, c.UserShare = 8<<20, 25
	})
	d := e.d
	const u, v Owner = 5, 6
	refused := func(err error, what, name string) {
		t.Helper()
		if Errno(err) != syscall.ENOMEM || !strings.Contains(err.Error(), name+" per user") {
			t.Fatalf("%s: %v, want ENOMEM naming %s per user", what, err, name)
		}
	}
	must := func(err error, what string) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	// 25% of 8 is 2 of each kind.
	var pds []*PD
	for range 2 {
		pd, err := d.AllocPD(u)
		must(err, "pd of uid 5")
		pds = append(pds, pd)
	}
	_, err := d.AllocPD(u)
	refused(err, "3rd pd of uid 5", "max_pd")
	pd := pds[0]
	var cqs []*CQ
	for range 2 {
		cq, err := d.CreateCQ(u, qp.CreateCQ{CQE: 4})
		must(err, "cq of uid 5")
		cqs = append(cqs, cq)
	}
	_, err = d.CreateCQ(u, qp.CreateCQ{CQE: 4})
	refused(err, "3rd cq", "max_cq")
	for range 2 {
		_, err := d.RegMR(u, qp.CreateMR{PD: pd.Handle, Length: 4096, Access: qp.AccessLocalWrite})
		must(err, "mr of uid 5")
	}
	_, err = d.RegMR(u, qp.CreateMR{PD: pd.Handle, Length: 4096, Access: qp.AccessLocalWrite})
	refused(err, "3rd mr", "max_mr")
	for range 2 {
		_, err := d.AllocMW(u, qp.CreateMW{PD: pd.Handle, Type: 1})
		must(err, "mw of uid 5")
	}
	_, err = d.AllocMW(u, qp.CreateMW{PD: pd.Handle, Type: 1})
	refused(err, "3rd mw", "max_mw")
	for range 2 {
		_, err := d.CreateAH(u, qp.CreateAH{PD: pd.Handle, AH: qp.AH{DGID: d.Port().GID, PortNum: 1}})
		must(err, "ah of uid 5")
	}
	_, err = d.CreateAH(u, qp.CreateAH{PD: pd.Handle, AH: qp.AH{DGID: d.Port().GID, PortNum: 1}})
	refused(err, "3rd ah", "max_ah")
	for range 2 {
		_, err := d.CreateSRQ(u, qp.CreateSRQ{PD: pd.Handle, MaxWR: 4, MaxSGE: 1})
		must(err, "srq of uid 5")
	}
	_, err = d.CreateSRQ(u, qp.CreateSRQ{PD: pd.Handle, MaxWR: 4, MaxSGE: 1})
	refused(err, "3rd srq", "max_srq")
	qpReq := qp.CreateQP{PD: pd.Handle, Type: qp.TypeRC, SendCQ: cqs[0].Handle, RecvCQ: cqs[0].Handle,
		Cap: qp.Cap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}}
	var qps []*QP
	for range 2 {
		q, err := d.CreateQP(u, qpReq)
		must(err, "qp of uid 5")
		qps = append(qps, q)
	}
	_, err = d.CreateQP(u, qpReq)
	refused(err, "3rd qp", "max_qp")

	// Another uid has a share of its own, and root is held only by the
	// device limits (e made one PD for root already).
	_, err = d.AllocPD(v)
	must(err, "pd of uid 6")
	for i := range 4 {
		_, err := d.AllocPD(0)
		must(err, "root's pd "+itoa(uint32(i)))
	}
	_, err = d.AllocPD(0)
	if Errno(err) != syscall.ENOMEM || strings.Contains(err.Error(), "per user") {
		t.Fatalf("root past max_pd: %v, want the device limit", err)
	}
	// A destroy gives the share back.
	must(qps[1].Destroy(), "destroy qp")
	_, err = d.CreateQP(u, qpReq)
	must(err, "qp after a destroy")

	// Memory: 25% of 8 MiB is 2 MiB a user, whatever the count.
	_, err = d.RegMR(v, qp.CreateMR{PD: mustPD(t, d, v).Handle, Length: 2 << 20, Access: qp.AccessLocalWrite})
	must(err, "2 MiB of uid 6")
	_, err = d.RegMR(v, qp.CreateMR{PD: mustPD(t, d, v).Handle, Length: 1, Access: qp.AccessLocalWrite})
	if Errno(err) != syscall.ENOMEM || !strings.Contains(err.Error(), "registered memory per user") {
		t.Fatalf("uid 6 past its memory share: %v", err)
	}
	_, err = d.RegMR(0, qp.CreateMR{PD: e.pd.Handle, Length: 4 << 20, Access: qp.AccessLocalWrite})
	must(err, "root's 4 MiB")
}

// mustPD finds a PD of owner.
func mustPD(t *testing.T, d *Device, o Owner) *PD {
	t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, p := range d.pds.m {
		if p.Owner == o {
			return p
		}
	}
	t.Fatalf("uid %d has no pd", o)
	return nil
}

func TestUserShareOf(t *testing.T) {
	for _, c := range []struct {
		limit uint64
		share uint32
		want  uint64
	}{{1024, 25, 256}, {1, 25, 1}, {0, 25, 1}, {4 << 30, 25, 1 << 30}, {1<<64 - 1, 100, 1<<64 - 1}, {7, 50, 3}} {
		if got := UserShareOf(c.limit, c.share); got != c.want {
			t.Errorf("UserShareOf(%d, %d) = %d, want %d", c.limit, c.share, got, c.want)
		}
	}
	if _, err := New(Config{UserShare: 101}); err == nil {
		t.Error("a share of 101% was accepted")
	}
}
