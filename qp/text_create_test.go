package qp

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestParseCreatePD(t *testing.T) {
	for _, in := range []string{"", " ", "\t\n"} {
		if _, err := ParseCreatePD(in); err != nil {
			t.Errorf("%q: %v", in, err)
		}
	}
	for _, c := range []struct{ in, key, msg string }{
		{"pd=1", "pd", "unknown key"},
		{"x", "x", "not a key=value token"},
	} {
		_, err := ParseCreatePD(c.in)
		wantTextErr(t, c.in, err, c.key, c.msg)
	}
}

func TestParseCreateMR(t *testing.T) {
	good := []struct {
		in   string
		want CreateMR
	}{
		{"pd=1 length=4096", CreateMR{PD: 1, Length: 4096}},
		{"pd=0x2 length=0x1000 iova=0 access=local_write,remote_write",
			CreateMR{PD: 2, Length: 4096, HasIOVA: true, Access: AccessLocalWrite | AccessRemoteWrite}},
		{" access=0 iova=0xffffffffffffffff length=18446744073709551615 pd=4294967295 ",
			CreateMR{PD: 0xffffffff, Length: ^uint64(0), IOVA: ^uint64(0), HasIOVA: true}},
	}
	for _, c := range good {
		got, err := ParseCreateMR(c.in)
		if err != nil || got != c.want {
			t.Errorf("%q: got %+v, %v; want %+v", c.in, got, err, c.want)
		}
	}
	bad := []struct{ in, key, msg string }{
		{"", "pd", "missing required key"},
		{"pd=1", "length", "missing required key"},
		{"length=1", "pd", "missing required key"},
		{"pd=0 length=1", "pd", "out of range: 0 < 1"},
		{"pd=1 length=0", "length", "out of range: 0 < 1"},
		{"pd=4294967296 length=1", "pd", "out of range"},
		{"pd=-1 length=1", "pd", "out of range: -1 < 0"},
		{"pd=one length=1", "pd", "not a number"},
		{"pd=1 length=18446744073709551616", "length", "out of range"},
		{"pd=1 length=1 iova=x", "iova", "not a number"},
		{"pd=1 length=1 access=local_read", "access", "unknown flag"},
		{"pd=1 length=1 pd=1", "pd", "repeated key"},
		{"pd=1 length=1 lkey=1", "lkey", "unknown key"},
		{"pd=1 length=", "length", "empty value"},
	}
	for _, c := range bad {
		_, err := ParseCreateMR(c.in)
		wantTextErr(t, c.in, err, c.key, c.msg)
	}
}

func TestParseReregMR(t *testing.T) {
	good := []struct {
		in   string
		want ReregMR
	}{
		{"pd=2", ReregMR{PD: 2}},
		{"access=local_write,remote_read", ReregMR{Access: AccessLocalWrite | AccessRemoteRead, HasAccess: true}},
		{"access=0", ReregMR{HasAccess: true}},
		{"share=3 offset=16 length=100 iova=0x1010 pd=1",
			ReregMR{PD: 1, Share: 3, Offset: 16, Length: 100, IOVA: 0x1010, HasTranslation: true}},
	}
	for _, c := range good {
		got, err := ParseReregMR(c.in)
		if err != nil || got != c.want {
			t.Errorf("%q: got %+v, %v; want %+v", c.in, got, err, c.want)
		}
	}
	bad := []struct{ in, key, msg string }{
		{"", "rereg", "nothing to change"},
		{"share=1 offset=0", "share", "together"},
		{"share=1 offset=0 length=0 iova=0", "length", "out of range"},
		{"share=0 offset=0 length=1 iova=0", "share", "out of range"},
		{"pd=1 pd=2", "pd", "repeated key"},
		{"lkey=5", "lkey", "unknown key"},
	}
	for _, c := range bad {
		_, err := ParseReregMR(c.in)
		wantTextErr(t, c.in, err, c.key, c.msg)
	}
	share := []struct {
		in   string
		want CreateMR
	}{
		{"pd=1 length=8 share=2 offset=4096", CreateMR{PD: 1, Length: 8, Share: 2, Offset: 4096}},
		{"pd=1 length=0 share=2", CreateMR{PD: 1, Share: 2}},
	}
	for _, c := range share {
		got, err := ParseCreateMR(c.in)
		if err != nil || got != c.want {
			t.Errorf("%q: got %+v, %v; want %+v", c.in, got, err, c.want)
		}
	}
}

func TestParseCreateMW(t *testing.T) {
	good := []struct {
		in   string
		want CreateMW
	}{
		{"pd=1", CreateMW{PD: 1, Type: 1}},
		{"pd=1 type=1", CreateMW{PD: 1, Type: 1}},
		{"type=2 pd=3", CreateMW{PD: 3, Type: 2}},
		{"pd=3 type=0x2", CreateMW{PD: 3, Type: 2}},
	}
	for _, c := range good {
		got, err := ParseCreateMW(c.in)
		if err != nil || got != c.want {
			t.Errorf("%q: got %+v, %v; want %+v", c.in, got, err, c.want)
		}
	}
	bad := []struct{ in, key, msg string }{
		{"", "pd", "missing required key"},
		{"type=1", "pd", "missing required key"},
		{"pd=1 type=0", "type", "want 1 or 2"},
		{"pd=1 type=3", "type", "want 1 or 2"},
		{"pd=1 type=256", "type", "out of range"},
		{"pd=1 type=a", "type", "not a number"},
		{"pd=1 type=1 type=2", "type", "repeated key"},
	}
	for _, c := range bad {
		_, err := ParseCreateMW(c.in)
		wantTextErr(t, c.in, err, c.key, c.msg)
	}
}

func TestParseCreateCQ(t *testing.T) {
	good := []struct {
		in   string
		want CreateCQ
	}{
		{"cqe=1", CreateCQ{CQE: 1}},
		{"cqe=0xffffffff comp_vector=0", CreateCQ{CQE: 0xffffffff}},
		{"comp_vector=3\tcqe=16", CreateCQ{CQE: 16, CompVector: 3}},
		{"cqe=4 wc_flags=completion_timestamp", CreateCQ{CQE: 4, WCFlags: CQTimestamp}},
		{"cqe=4 wc_flags=completion_timestamp_wallclock,completion_timestamp",
			CreateCQ{CQE: 4, WCFlags: CQTimestamp | CQTimestampWallclock}},
	}
	for _, c := range good {
		got, err := ParseCreateCQ(c.in)
		if err != nil || got != c.want {
			t.Errorf("%q: got %+v, %v; want %+v", c.in, got, err, c.want)
		}
	}
	bad := []struct{ in, key, msg string }{
		{"", "cqe", "missing required key"},
		{"comp_vector=1", "cqe", "missing required key"},
		{"cqe=0", "cqe", "out of range: 0 < 1"},
		{"cqe=4294967296", "cqe", "out of range"},
		{"cqe=1 comp_vector=-1", "comp_vector", "out of range: -1 < 0"},
		{"cqe=1 cqe=2", "cqe", "repeated key"},
		{"cqe=1 pd=1", "pd", "unknown key"},
		{"cqe=1 wc_flags=flow_tag", "wc_flags", "unknown flag"},
		{"cqe=1 wc_flags=completion_timestamp,", "wc_flags", "unknown flag"},
	}
	for _, c := range bad {
		_, err := ParseCreateCQ(c.in)
		wantTextErr(t, c.in, err, c.key, c.msg)
	}
}

func TestParseCreateSRQ(t *testing.T) {
	good := []struct {
		in   string
		want CreateSRQ
	}{
		{"pd=1 max_wr=16 max_sge=1", CreateSRQ{PD: 1, MaxWR: 16, MaxSGE: 1}},
		{"pd=1 max_wr=0 max_sge=0 srq_limit=0x8", CreateSRQ{PD: 1, SRQLimit: 8}},
	}
	for _, c := range good {
		got, err := ParseCreateSRQ(c.in)
		if err != nil || got != c.want {
			t.Errorf("%q: got %+v, %v; want %+v", c.in, got, err, c.want)
		}
	}
	bad := []struct{ in, key, msg string }{
		{"", "pd", "missing required key"},
		{"pd=1 max_sge=1", "max_wr", "missing required key"},
		{"pd=1 max_wr=1", "max_sge", "missing required key"},
		{"pd=0 max_wr=1 max_sge=1", "pd", "out of range: 0 < 1"},
		{"pd=1 max_wr=4294967296 max_sge=1", "max_wr", "out of range"},
		{"pd=1 max_wr=1 max_sge=x", "max_sge", "not a number"},
		{"pd=1 max_wr=1 max_sge=1 srq_limit=", "srq_limit", "empty value"},
		{"pd=1 max_wr=1 max_sge=1 limit=1", "limit", "unknown key"},
	}
	for _, c := range bad {
		_, err := ParseCreateSRQ(c.in)
		wantTextErr(t, c.in, err, c.key, c.msg)
	}
}

func TestParseModifySRQ(t *testing.T) {
	good := []struct {
		in   string
		want ModifySRQ
	}{
		{"max_wr=16", ModifySRQ{Mask: SRQMaxWR, MaxWR: 16}},
		{"srq_limit=0", ModifySRQ{Mask: SRQLimit}},
		{"srq_limit=0x4 max_wr=8", ModifySRQ{Mask: SRQMaxWR | SRQLimit, MaxWR: 8, SRQLimit: 4}},
	}
	for _, c := range good {
		got, err := ParseModifySRQ(c.in)
		if err != nil || got != c.want {
			t.Errorf("%q: got %+v, %v; want %+v", c.in, got, err, c.want)
		}
		line := FormatModifySRQ(&got)
		if back, err := ParseModifySRQ(strings.TrimPrefix(line, "modify ")); err != nil || back != got || !strings.HasPrefix(line, "modify ") {
			t.Errorf("%q: %q does not parse back: %+v %v", c.in, line, back, err)
		}
	}
	bad := []struct{ in, key, msg string }{
		{"", "", "nothing to modify"},
		{"max_wr=0", "max_wr", "out of range: 0 < 1"},
		{"max_wr=4294967296", "max_wr", "out of range"},
		{"max_wr=1 max_wr=2", "max_wr", "repeated key"},
		{"limit=1", "limit", "unknown key"},
	}
	for _, c := range bad {
		_, err := ParseModifySRQ(c.in)
		wantTextErr(t, c.in, err, c.key, c.msg)
	}
}

func TestParseCreateAH(t *testing.T) {
	v4 := [16]byte{10: 0xff, 11: 0xff, 12: 10, 15: 2}
	good := []struct {
		in   string
		want CreateAH
	}{
		{"pd=1 dgid=10.0.0.2", CreateAH{PD: 1, AH: AH{DGID: v4}}},
		{"pd=1 dgid=::ffff:10.0.0.2 sl=15 sgid_index=1 hop_limit=64 traffic_class=0xff flow_label=0xfffff dlid=0xffff static_rate=3 port_num=1",
			CreateAH{PD: 1, AH: AH{DGID: v4, SL: 15, SGIDIndex: 1, HopLimit: 64, TrafficClass: 0xff, FlowLabel: 0xfffff, DLID: 0xffff, StaticRate: 3, PortNum: 1}}},
	}
	for _, c := range good {
		got, err := ParseCreateAH(c.in)
		if err != nil || got != c.want {
			t.Errorf("%q: got %+v, %v; want %+v", c.in, got, err, c.want)
		}
	}
	bad := []struct{ in, key, msg string }{
		{"", "pd", "missing required key"},
		{"pd=1", "dgid", "missing required key"},
		{"dgid=::1", "pd", "missing required key"},
		{"pd=1 dgid=x", "dgid", "not an IPv6 or IPv4 address"},
		{"pd=1 dgid=::1 sl=16", "sl", "out of range: 16 > 15"},
		{"pd=1 dgid=::1 flow_label=0x100000", "flow_label", "out of range"},
		{"pd=1 dgid=::1 hop_limit=256", "hop_limit", "out of range"},
		{"pd=1 dgid=::1 port_num=256", "port_num", "out of range"},
		{"pd=1 dgid=::1 dgid=::2", "dgid", "repeated key"},
		{"pd=1 dgid=::1 qkey=1", "qkey", "unknown key"},
	}
	for _, c := range bad {
		_, err := ParseCreateAH(c.in)
		wantTextErr(t, c.in, err, c.key, c.msg)
	}
}

func TestParseCreateQP(t *testing.T) {
	good := []struct {
		in   string
		want CreateQP
	}{
		{"pd=1 qp_type=rc send_cq=1 recv_cq=1", CreateQP{PD: 1, Type: TypeRC, SendCQ: 1, RecvCQ: 1}},
		{"pd=1 qp_type=UD send_cq=1 recv_cq=2 srq=3 max_send_wr=16 max_recv_wr=32 max_send_sge=2 max_recv_sge=3 max_inline_data=64 sq_sig_all=1",
			CreateQP{PD: 1, Type: TypeUD, SendCQ: 1, RecvCQ: 2, SRQ: 3, Cap: Cap{16, 32, 2, 3, 64}, SQSigAll: true}},
		{"\trecv_cq=0x2 send_cq=1 qp_type=Uc pd=1 sq_sig_all=0\n", CreateQP{PD: 1, Type: TypeUC, SendCQ: 1, RecvCQ: 2}},
	}
	for _, c := range good {
		got, err := ParseCreateQP(c.in)
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%q: got %+v, %v; want %+v", c.in, got, err, c.want)
		}
	}
	const base = "pd=1 qp_type=rc send_cq=1 recv_cq=1 "
	bad := []struct{ in, key, msg string }{
		{"", "qp_type", "missing required key"},
		{"qp_type=rc send_cq=1 recv_cq=1", "pd", "missing required key"},
		{"pd=1 send_cq=1 recv_cq=1", "qp_type", "missing required key"},
		{"pd=1 qp_type=rc recv_cq=1", "send_cq", "missing required key"},
		{"pd=1 qp_type=rc send_cq=1", "recv_cq", "missing required key"},
		{"pd=1 qp_type=rd send_cq=1 recv_cq=1", "qp_type", `unknown QP type "rd"`},
		{"pd=1 qp_type=2 send_cq=1 recv_cq=1", "qp_type", "unknown QP type"},
		{"pd=1 qp_type=rc send_cq=0 recv_cq=1", "send_cq", "out of range: 0 < 1"},
		{base + "srq=0", "srq", "out of range: 0 < 1"},
		{base + "sq_sig_all=2", "sq_sig_all", "out of range: 2 > 1"},
		{base + "max_send_wr=4294967296", "max_send_wr", "out of range"},
		{base + "max_inline_data=x", "max_inline_data", "not a number"},
		{base + "max_recv_sge=-1", "max_recv_sge", "out of range: -1 < 0"},
		{base + "qp_type=uc", "qp_type", "repeated key"},
		{base + "qp_state=rts", "qp_state", "unknown key"},
		{base + "cq=1", "cq", "unknown key"},
	}
	for _, c := range bad {
		_, err := ParseCreateQP(c.in)
		wantTextErr(t, c.in, err, c.key, c.msg)
	}
	for _, typ := range []string{"raw_packet", "driver"} {
		_, err := ParseCreateQP("pd=1 send_cq=1 recv_cq=1 qp_type=" + typ)
		var e *Error
		if !errors.Is(err, ErrUnsupported) || !errors.As(err, &e) || e.Key != "qp_type" {
			t.Errorf("qp_type=%s: got %v, want ErrUnsupported for qp_type", typ, err)
		}
	}
}

// TestFormatCreateRoundTrip: every formatter writes a line its parser
// reads back to the same request, defaults left out and fields set.
func TestFormatCreateRoundTrip(t *testing.T) {
	gid := [16]byte{0xfe, 0x80, 15: 1}
	check := func(t *testing.T, line string, want, got any, err error) {
		t.Helper()
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%q parsed to %+v, %v; want %+v", line, got, err, want)
		}
	}
	for _, c := range []CreateMR{
		{PD: 1, Length: 4096},
		{PD: 2, Length: 1 << 40, IOVA: 0x1000, HasIOVA: true, Access: AccessLocalWrite | AccessRemoteRead | AccessZeroBased},
		{PD: 3, Length: 0, Share: 4, Offset: 64},
	} {
		line := FormatCreateMR(&c)
		got, err := ParseCreateMR(line)
		check(t, line, c, got, err)
	}
	for _, c := range []CreateCQ{{CQE: 1}, {CQE: 1 << 20, CompVector: 3}, {CQE: 2, WCFlags: CQTimestamp | CQTimestampWallclock}} {
		line := FormatCreateCQ(&c)
		got, err := ParseCreateCQ(line)
		check(t, line, c, got, err)
	}
	for _, c := range []CreateSRQ{{PD: 1, MaxWR: 16, MaxSGE: 2}, {PD: 1, MaxWR: 16, MaxSGE: 2, SRQLimit: 4}} {
		line := FormatCreateSRQ(&c)
		got, err := ParseCreateSRQ(line)
		check(t, line, c, got, err)
	}
	for _, c := range []CreateAH{
		{PD: 1, AH: AH{DGID: gid}},
		{PD: 1, AH: AH{DGID: gid, SGIDIndex: 1, HopLimit: 64, TrafficClass: 3, FlowLabel: 0xfffff, SL: 7, DLID: 9, PortNum: 1, StaticRate: 2}},
	} {
		line := FormatCreateAH(&c)
		got, err := ParseCreateAH(line)
		check(t, line, c, got, err)
	}
	for _, c := range []CreateQP{
		{PD: 1, Type: TypeRC, SendCQ: 2, RecvCQ: 3, Cap: Cap{MaxSendWR: 4, MaxRecvWR: 5, MaxSendSGE: 1, MaxRecvSGE: 2, MaxInlineData: 64}},
		{PD: 1, Type: TypeUD, SendCQ: 2, RecvCQ: 2, SRQ: 7, Cap: Cap{MaxSendWR: 4}, SQSigAll: true},
		{PD: 1, Type: TypeUC, SendCQ: 2, RecvCQ: 2},
	} {
		line := FormatCreateQP(&c)
		got, err := ParseCreateQP(line)
		check(t, line, c, got, err)
	}
	if got := FormatCreateQP(&CreateQP{PD: 1, Type: TypeRC, SendCQ: 2, RecvCQ: 2, SRQ: 3, Cap: Cap{MaxRecvWR: 9}}); got !=
		"pd=1 qp_type=rc send_cq=2 recv_cq=2 max_send_wr=0 max_send_sge=0 max_inline_data=0 srq=3" {
		t.Errorf("with an SRQ the receive caps are left out: %q", got)
	}
}
