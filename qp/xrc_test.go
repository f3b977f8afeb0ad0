package qp

import (
	"testing"
)

// The XRC rows of the modify table are the kernel's (qp_state_table):
// the target needs max_dest_rd_atomic and min_rnr_timer at RTR and only
// timeout and sq_psn at RTS; the initiator the reverse.
func TestModifyOKXRC(t *testing.T) {
	cases := []struct {
		name      string
		cur, next State
		typ       Type
		mask      AttrMask
		ok        bool
	}{
		{"send init", StateReset, StateInit, TypeXRCSend, MaskState | MaskPKeyIndex | MaskPort | MaskAccessFlags, true},
		{"recv init", StateReset, StateInit, TypeXRCRecv, MaskState | MaskPKeyIndex | MaskPort | MaskAccessFlags, true},
		{"recv init qkey", StateReset, StateInit, TypeXRCRecv, MaskState | MaskPKeyIndex | MaskPort | MaskQKey, false},
		{"send rtr", StateInit, StateRTR, TypeXRCSend, MaskState | MaskAV | MaskPathMTU | MaskDestQPN | MaskRQPSN, true},
		{"send rtr with responder attrs", StateInit, StateRTR, TypeXRCSend,
			MaskState | MaskAV | MaskPathMTU | MaskDestQPN | MaskRQPSN | MaskMaxDestRdAtomic, false},
		{"recv rtr short", StateInit, StateRTR, TypeXRCRecv, MaskState | MaskAV | MaskPathMTU | MaskDestQPN | MaskRQPSN, false},
		{"recv rtr", StateInit, StateRTR, TypeXRCRecv,
			MaskState | MaskAV | MaskPathMTU | MaskDestQPN | MaskRQPSN | MaskMaxDestRdAtomic | MaskMinRNRTimer, true},
		{"recv rts", StateRTR, StateRTS, TypeXRCRecv, MaskState | MaskTimeout | MaskSQPSN, true},
		{"recv rts retry", StateRTR, StateRTS, TypeXRCRecv, MaskState | MaskTimeout | MaskSQPSN | MaskRetryCnt, false},
		{"send rts short", StateRTR, StateRTS, TypeXRCSend, MaskState | MaskTimeout | MaskSQPSN, false},
		{"send rts", StateRTR, StateRTS, TypeXRCSend,
			MaskState | MaskTimeout | MaskRetryCnt | MaskRNRRetry | MaskSQPSN | MaskMaxQPRdAtomic, true},
		{"send sqe rts", StateSQE, StateRTS, TypeXRCSend, MaskState | MaskAccessFlags, false},
	}
	for _, c := range cases {
		err := ModifyOK(c.cur, c.next, c.typ, c.mask)
		if (err == nil) != c.ok {
			t.Errorf("%s: ModifyOK = %v, want ok=%v", c.name, err, c.ok)
		}
	}
}

func TestParseXRCCreates(t *testing.T) {
	for _, in := range []string{
		"qp_type=xrc_recv xrcd=2",
		"qp_type=xrc_recv xrcd=2 open=17",
		"pd=1 qp_type=xrc_send send_cq=3 max_send_wr=8 max_send_sge=1 max_inline_data=0 max_recv_wr=0 max_recv_sge=0",
	} {
		c, err := ParseCreateQP(in)
		if err != nil {
			t.Fatalf("%q: %v", in, err)
		}
		back, err := ParseCreateQP(FormatCreateQP(&c))
		if err != nil || back != c {
			t.Errorf("%q: round trip %q gives %+v, %v", in, FormatCreateQP(&c), back, err)
		}
	}
	for _, c := range []struct{ in, key string }{
		{"qp_type=xrc_recv", "xrcd"},
		{"qp_type=xrc_recv xrcd=1 pd=1", "xrcd"},
		{"qp_type=xrc_recv xrcd=1 max_send_wr=4", "xrcd"},
		{"pd=1 qp_type=rc send_cq=1 recv_cq=1 xrcd=1", "xrcd"},
		{"pd=1 qp_type=rc send_cq=1 recv_cq=1 open=3", "open"},
		{"pd=1 qp_type=xrc_send send_cq=1 srq=1", "srq"},
		{"pd=1 qp_type=rc send_cq=1", "recv_cq"},
	} {
		_, err := ParseCreateQP(c.in)
		wantTextErr(t, c.in, err, c.key, "")
	}

	s, err := ParseCreateSRQ("pd=1 max_wr=4 max_sge=1 srq_type=xrc xrcd=2 cq=3")
	if err != nil || !s.XRC || s.XRCD != 2 || s.CQ != 3 {
		t.Fatalf("xrc srq: %+v, %v", s, err)
	}
	if back, err := ParseCreateSRQ(FormatCreateSRQ(&s)); err != nil || back != s {
		t.Errorf("srq round trip: %+v, %v", back, err)
	}
	for _, c := range []struct{ in, key string }{
		{"pd=1 max_wr=4 max_sge=1 srq_type=xrc cq=3", "xrcd"},
		{"pd=1 max_wr=4 max_sge=1 srq_type=xrc xrcd=3", "cq"},
		{"pd=1 max_wr=4 max_sge=1 xrcd=3", "xrcd"},
		{"pd=1 max_wr=4 max_sge=1 srq_type=fancy", "srq_type"},
	} {
		_, err := ParseCreateSRQ(c.in)
		wantTextErr(t, c.in, err, c.key, "")
	}

	x, err := ParseOpenXRCD("fd=5 create=1")
	if err != nil || !x.HasFD || x.FD != 5 || !x.Create || x.Excl {
		t.Fatalf("xrcd: %+v, %v", x, err)
	}
	if back, err := ParseOpenXRCD(FormatOpenXRCD(&x)); err != nil || back != x {
		t.Errorf("xrcd round trip: %+v, %v", back, err)
	}
	if p, err := ParseOpenXRCD(""); err != nil || p.HasFD {
		t.Errorf("private xrcd: %+v, %v", p, err)
	}
	_, err = ParseOpenXRCD("create=1")
	wantTextErr(t, "create=1", err, "create", "")

	w, err := ParseSendWR("opcode=send wr_id=1 remote_srqn=77")
	if err != nil || w.RemoteQPN != 77 {
		t.Errorf("remote_srqn: %+v, %v", w, err)
	}
}
