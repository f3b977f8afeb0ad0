package verbs

import (
	"context"
	"testing"
	"time"

	"rdmafs/qp"
)

// Closing a Context destroys what it created (the lease), as closing a
// uverbs file does; a Persistent one leaves its objects to rmdir.
func TestCloseDestroysLeasedObjects(t *testing.T) {
	for _, persistent := range []bool{false, true} {
		e := mount(t, Options{Persistent: persistent})
		c, err := OpenWithOptions(e.dir, Options{Persistent: persistent})
		if err != nil {
			t.Fatal(err)
		}
		pd, err := c.AllocPD()
		if err != nil {
			t.Fatal(err)
		}
		cq, err := c.CreateCQ(4)
		if err != nil {
			t.Fatal(err)
		}
		mr, err := pd.RegMR(4096, AccessLocalWrite)
		if err != nil {
			t.Fatal(err)
		}
		q, err := pd.CreateQP(QPInitAttr{Type: QPTypeRC, SendCQ: cq, RecvCQ: cq,
			Cap: QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		qpn, mrh := q.QPN, mr.Handle
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(5 * time.Second)
		for !persistent && (e.dev.QP(qpn) != nil || e.dev.MR(mrh) != nil) {
			if time.Now().After(deadline) {
				t.Fatal("leased objects outlived their Context")
			}
			time.Sleep(5 * time.Millisecond)
		}
		if persistent && (e.dev.QP(qpn) == nil || e.dev.MR(mrh) == nil) {
			t.Fatal("a Persistent Context's objects were destroyed")
		}
	}
}

// When the device goes away under a client, a blocked ReadAsyncEvents
// reports device_fatal instead of hanging, and mapped memory stays
// readable.
func TestDeviceFatalOnUnmount(t *testing.T) {
	e := mount(t, testOpts)
	pd, err := e.ctx.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	mr, err := pd.RegMR(4096, AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	copy(mr.Buf, "kept")
	got := make(chan []AsyncEvent, 1)
	go func() {
		evs, err := e.ctx.ReadAsyncEvents(context.Background())
		if err != nil {
			t.Errorf("ReadAsyncEvents: %v", err)
		}
		got <- evs
	}()
	time.Sleep(50 * time.Millisecond) // let the read block (not an assertion)
	if err := e.srv.Unmount(); err != nil {
		t.Fatal(err)
	}
	select {
	case evs := <-got:
		if len(evs) != 1 || evs[0].Type != qp.EventDeviceFatal {
			t.Fatalf("events after unmount: %v", evs)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("ReadAsyncEvents hung after the device went away")
	}
	if string(mr.Buf[:4]) != "kept" {
		t.Fatalf("mapping reads %q after unmount", mr.Buf[:4])
	}
	// Later reads fail fast with device_fatal too.
	evs, err := e.ctx.ReadAsyncEvents(context.Background())
	if err != nil || len(evs) != 1 || evs[0].Type != qp.EventDeviceFatal {
		t.Fatalf("second read: %v %v", evs, err)
	}
}
