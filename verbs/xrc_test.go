package verbs

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// Two Contexts (as two processes) on one file's XRC domain: the XRC_RECV
// QP one made outlives it while the other holds it, carries messages into
// the XRC SRQ each names, and goes with its last holder.
func TestXRC(t *testing.T) {
	e := mount(t, testOpts)
	f, err := os.Create(filepath.Join(t.TempDir(), "domain"))
	e.must(err)
	defer f.Close()
	if _, err := e.ctx.OpenXRCD(XRCDInitAttr{File: f}); !isErrno(err, syscall.EAGAIN) {
		t.Fatalf("open_xrcd without create on a new file: %v", err)
	}
	xa, err := e.ctx.OpenXRCD(XRCDInitAttr{File: f, Create: true})
	e.must(err)
	tgt, err := xa.CreateQP()
	e.must(err)
	if tgt.Type != QPTypeXRCRecv {
		t.Fatalf("type %v", tgt.Type)
	}

	other, err := OpenWithOptions(e.dir, testOpts)
	e.must(err)
	defer other.Close()
	xb, err := other.OpenXRCD(XRCDInitAttr{File: f})
	e.must(err)
	opened, err := xb.OpenQP(tgt.QPN)
	e.must(err)
	private, err := other.OpenXRCD(XRCDInitAttr{})
	e.must(err)
	if _, err := private.OpenQP(tgt.QPN); !isErrno(err, syscall.EINVAL) {
		t.Fatalf("open_qp through another domain: %v", err)
	}

	// The maker goes; the QP stays, held by the other.
	e.must(e.ctx.Close())
	qpDir := filepath.Join(e.dir, "qp", hname(tgt.QPN))
	if _, err := os.Stat(qpDir); err != nil {
		t.Fatalf("the xrc_recv qp went with its maker: %v", err)
	}

	pd, err := other.AllocPD()
	e.must(err)
	scq, err := other.CreateCQ(16)
	e.must(err)
	rcq, err := other.CreateCQ(16)
	e.must(err)
	mr, err := pd.RegMR(4096, allAccess)
	e.must(err)
	s1, err := pd.CreateXRCSRQ(xb, rcq, SRQInitAttr{MaxWR: 4, MaxSGE: 1})
	e.must(err)
	s2, err := pd.CreateXRCSRQ(xb, rcq, SRQInitAttr{MaxWR: 4, MaxSGE: 1})
	e.must(err)
	n2, err := s2.Num()
	e.must(err)
	if n1, err := s1.Num(); err != nil || n1 == n2 || n2 == 0 {
		t.Fatalf("srq numbers %d %d (%v)", n1, n2, err)
	}
	ini, err := pd.CreateQP(QPInitAttr{Type: QPTypeXRCSend, SendCQ: scq, Cap: QPCap{MaxSendWR: 4, MaxSendSGE: 1}})
	e.must(err)
	e.must(opened.Connect(ConnectAttr{DestQPN: ini.QPN, DGID: e.gid}))
	e.must(ini.Connect(ConnectAttr{DestQPN: opened.QPN, DGID: e.gid}))
	if err := ini.PostRecv(RecvWR{WRID: 1}); !isErrno(err, syscall.EINVAL) {
		t.Errorf("post_recv on xrc_send: %v", err)
	}
	e.must(s1.PostSRQRecv(RecvWR{WRID: 31, SGL: []SGE{mr.SGE(2048, 64)}}))
	e.must(s2.PostSRQRecv(RecvWR{WRID: 32, SGL: []SGE{mr.SGE(3072, 64)}}))
	copy(mr.Buf, "into srq two")
	e.must(ini.PostSend(SendWR{WRID: 1, Opcode: WRSend, SendFlags: SendSignaled, SGL: []SGE{mr.SGE(0, 12)}, RemoteQPN: n2}))
	if wc := pollN(t, scq, 1)[0]; wc.Status != WCSuccess || wc.WRID != 1 {
		t.Fatalf("send: %+v", wc)
	}
	wc := pollN(t, rcq, 1)[0]
	if wc.Status != WCSuccess || wc.WRID != 32 || wc.QPNum != tgt.QPN || wc.SrcQP != ini.QPN || string(mr.Buf[3072:3084]) != "into srq two" {
		t.Fatalf("recv: %+v %q", wc, mr.Buf[3072:3084])
	}
	if a, err := s1.Query(); err != nil || a.Pending != 1 {
		t.Fatalf("srq one: %+v %v", a, err)
	}

	// The last holder lets go: the QP is destroyed.
	e.must(opened.Destroy())
	if _, err := os.Stat(qpDir); !os.IsNotExist(err) {
		t.Fatalf("the xrc_recv qp outlived its last holder: %v", err)
	}
	e.must(ini.Destroy())
	e.must(s1.Destroy())
	e.must(s2.Destroy())
	e.must(xb.Close())
	e.must(private.Close())
}
