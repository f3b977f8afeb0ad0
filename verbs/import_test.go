package verbs

import (
	"os"
	"syscall"
	"testing"
)

// TestImport: a Context imported from a duplicate of another's CmdFile
// (ibv_import_device) imports its PD and MR with the same handles, keys,
// iova, length and access; its QPs on the imported PD WRITE into the
// imported MR, and the original sees the bytes; Unimport leaves the
// objects, Dealloc of an imported PD destroys it; closing the importer
// leaves the lease (and the original's objects) to the original.
// C programs: libibverbs/tests/import.c (across processes and uids).
func TestImport(t *testing.T) {
	e := mount(t, testOpts)
	pd, err := e.ctx.AllocPD()
	e.must(err)
	pd2, err := e.ctx.AllocPD()
	e.must(err)
	mr, err := pd.RegMR(8192, allAccess)
	e.must(err)
	fd, err := syscall.Dup(int(e.ctx.CmdFile().Fd()))
	e.must(err)
	ic, err := Import(os.NewFile(uintptr(fd), "cmd_fd"))
	e.must(err)
	ipd, err := ic.ImportPD(pd.Handle)
	e.must(err)
	imr, err := ipd.ImportMR(mr.Handle)
	e.must(err)
	if imr.Handle != mr.Handle || imr.LKey != mr.LKey || imr.RKey != mr.RKey || imr.IOVA != mr.IOVA ||
		imr.Length != mr.Length || imr.Access != mr.Access || len(imr.Buf) != len(mr.Buf) {
		t.Fatalf("imported %+v, original %+v", imr, mr)
	}
	copy(mr.Buf, "seen by both")
	if string(imr.Buf[:12]) != "seen by both" {
		t.Errorf("the imported MR's memory: %q", imr.Buf[:12])
	}
	if _, err := ic.ImportPD(99999); !isErrno(err, syscall.ENOENT) {
		t.Errorf("a PD that is not there: %v", err)
	}
	if _, err := ipd.ImportMR(99999); !isErrno(err, syscall.ENOENT) {
		t.Errorf("an MR that is not there: %v", err)
	}

	// QPs of the imported Context, on the imported PD, into the imported MR
	cq, err := ic.CreateCQ(16)
	e.must(err)
	src, err := ipd.RegMR(64, allAccess)
	e.must(err)
	init := QPInitAttr{Type: QPTypeRC, SendCQ: cq, RecvCQ: cq, Cap: QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}
	a, err := ipd.CreateQP(init)
	e.must(err)
	b, err := ipd.CreateQP(init)
	e.must(err)
	e.connect(a, b)
	e.connect(b, a)
	copy(src.Buf, "written through the import")
	e.must(a.PostSend(SendWR{WRID: 1, Opcode: WRRDMAWrite, SendFlags: SendSignaled,
		SGL: []SGE{src.SGE(0, 26)}, RemoteAddr: imr.Addr(100), RKey: imr.RKey}))
	if wc := pollN(t, cq, 1)[0]; wc.Status != WCSuccess {
		t.Fatalf("write: %+v", wc)
	}
	if got := string(mr.Buf[100:126]); got != "written through the import" {
		t.Errorf("the original MR: %q", got)
	}

	// destroying an import destroys the object
	ipd2, err := ic.ImportPD(pd2.Handle)
	e.must(err)
	e.must(ipd2.Dealloc())
	if _, err := e.ctx.ImportPD(pd2.Handle); !isErrno(err, syscall.ENOENT) {
		t.Errorf("pd2 after the import's Dealloc: %v", err)
	}
	// what the importer made shares the lease: it lives until destroyed
	// or until every copy of the lease is closed, as on a uverbs file
	e.must(a.Destroy())
	e.must(b.Destroy())
	e.must(src.Dereg())
	e.must(cq.Destroy())
	e.must(imr.Unimport())
	ipd.Unimport()
	e.must(ic.Close())
	// the original's objects are still there, and still its own
	if _, err := e.ctx.ImportPD(pd.Handle); err != nil {
		t.Errorf("the PD after the importer closed: %v", err)
	}
	copy(mr.Buf, "still mapped")
	e.must(mr.Dereg())
	e.must(pd.Dealloc())
}

// TestImportNotALease: Import of a file that is not a lease is EINVAL.
func TestImportNotALease(t *testing.T) {
	e := mount(t, testOpts)
	f, err := os.Open(e.dir + "/device")
	e.must(err)
	if _, err := Import(f); !isErrno(err, syscall.EINVAL) {
		t.Errorf("Import of MOUNT/device: %v", err)
	}
	f.Close()
}
