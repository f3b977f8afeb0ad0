package device

import (
	"runtime"
	"syscall"
	"testing"

	"rdmafs/qp"
)

// Every object count, size and the device-wide memory cap refuse requests
// beyond them with ENOMEM (counts, memory) or EINVAL (sizes, as the kernel
// providers do) and a reason; a client that loops creating objects keeps
// hitting the limit without growing the daemon.
func TestLimits(t *testing.T) {
	e := newEnv(t, func(c *Config) {
		c.MaxPD, c.MaxCQ, c.MaxQP, c.MaxMR, c.MaxSRQ, c.MaxAH, c.MaxMW = 3, 3, 2, 3, 1, 1, 1
		c.MaxCQE, c.MaxQPWR, c.MaxTotalMRBytes = 64, 32, 3<<20
	})
	d := e.d
	want := func(err error, errno syscall.Errno, what string) {
		t.Helper()
		if Errno(err) != errno {
			t.Fatalf("%s: %v, want %v", what, err, errno)
		}
	}
	// e already made one PD.
	d.AllocPD(0)
	d.AllocPD(0)
	_, err := d.AllocPD(0)
	want(err, syscall.ENOMEM, "4th pd")
	pd := e.pd.Handle
	c1 := e.cq(8)
	e.cq(8)
	e.cq(8)
	_, err = d.CreateCQ(0, qp.CreateCQ{CQE: 8})
	want(err, syscall.ENOMEM, "4th cq")
	_, err = d.CreateCQ(0, qp.CreateCQ{CQE: 65})
	want(err, syscall.EINVAL, "cqe over max_cqe")
	// Memory: 1 MiB + 2 MiB fit the 3 MiB cap, one more byte does not.
	e.mr(1<<20, qp.AccessLocalWrite)
	m2 := e.mr(2<<20, qp.AccessLocalWrite)
	_, err = d.RegMR(0, qp.CreateMR{PD: pd, Length: 1, Access: qp.AccessLocalWrite})
	want(err, syscall.ENOMEM, "mr over the memory cap")
	m2.Dereg()
	e.mr(4096, qp.AccessLocalWrite)
	e.mr(4096, qp.AccessLocalWrite)
	_, err = d.RegMR(0, qp.CreateMR{PD: pd, Length: 4096, Access: qp.AccessLocalWrite})
	want(err, syscall.ENOMEM, "4th mr")
	big := qp.CreateQP{PD: pd, Type: qp.TypeRC, SendCQ: c1.Handle, RecvCQ: c1.Handle,
		Cap: qp.Cap{MaxSendWR: 33, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}}
	_, err = d.CreateQP(0, big)
	want(err, syscall.EINVAL, "max_send_wr over max_qp_wr")
	ok := big
	ok.Cap.MaxSendWR = 32
	if _, err := d.CreateQP(0, ok); err != nil {
		t.Fatal(err)
	}
	if _, err := d.CreateQP(0, ok); err != nil {
		t.Fatal(err)
	}
	_, err = d.CreateQP(0, ok)
	want(err, syscall.ENOMEM, "3rd qp")
	d.CreateSRQ(0, qp.CreateSRQ{PD: pd, MaxWR: 4, MaxSGE: 1})
	_, err = d.CreateSRQ(0, qp.CreateSRQ{PD: pd, MaxWR: 4, MaxSGE: 1})
	want(err, syscall.ENOMEM, "2nd srq")

	// A client looping on refused creations does not grow the daemon.
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := 0; i < 20000; i++ {
		d.AllocPD(0)
		d.CreateQP(0, ok)
		d.RegMR(0, qp.CreateMR{PD: pd, Length: 4096, Access: qp.AccessLocalWrite})
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if grown := int64(after.HeapAlloc) - int64(before.HeapAlloc); grown > 1<<20 {
		t.Fatalf("heap grew by %d bytes over 60000 refused creations", grown)
	}
}
