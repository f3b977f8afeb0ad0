package qp

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// textAttrNums are the plain numeric modify keys: width, mask bit and the
// field each sets.
var textAttrNums = []struct {
	textNumCase
	mask AttrMask
	get  func(a *Attr) uint64
}{
	{textNumCase{"pkey_index", 0xffff}, MaskPKeyIndex, func(a *Attr) uint64 { return uint64(a.PKeyIndex) }},
	{textNumCase{"port_num", 0xff}, MaskPort, func(a *Attr) uint64 { return uint64(a.PortNum) }},
	{textNumCase{"qkey", 0xffffffff}, MaskQKey, func(a *Attr) uint64 { return uint64(a.QKey) }},
	{textNumCase{"timeout", 0xff}, MaskTimeout, func(a *Attr) uint64 { return uint64(a.Timeout) }},
	{textNumCase{"retry_cnt", 0xff}, MaskRetryCnt, func(a *Attr) uint64 { return uint64(a.RetryCnt) }},
	{textNumCase{"rnr_retry", 0xff}, MaskRNRRetry, func(a *Attr) uint64 { return uint64(a.RNRRetry) }},
	{textNumCase{"rq_psn", 0xffffff}, MaskRQPSN, func(a *Attr) uint64 { return uint64(a.RQPSN) }},
	{textNumCase{"sq_psn", 0xffffff}, MaskSQPSN, func(a *Attr) uint64 { return uint64(a.SQPSN) }},
	{textNumCase{"max_rd_atomic", 0xff}, MaskMaxQPRdAtomic, func(a *Attr) uint64 { return uint64(a.MaxRdAtomic) }},
	{textNumCase{"max_dest_rd_atomic", 0xff}, MaskMaxDestRdAtomic, func(a *Attr) uint64 { return uint64(a.MaxDestRdAtomic) }},
	{textNumCase{"min_rnr_timer", 0xff}, MaskMinRNRTimer, func(a *Attr) uint64 { return uint64(a.MinRNRTimer) }},
	{textNumCase{"dest_qp_num", 0xffffff}, MaskDestQPN, func(a *Attr) uint64 { return uint64(a.DestQPNum) }},
	{textNumCase{"sgid_index", 0xff}, MaskAV, func(a *Attr) uint64 { return uint64(a.AH.SGIDIndex) }},
	{textNumCase{"hop_limit", 0xff}, MaskAV, func(a *Attr) uint64 { return uint64(a.AH.HopLimit) }},
	{textNumCase{"traffic_class", 0xff}, MaskAV, func(a *Attr) uint64 { return uint64(a.AH.TrafficClass) }},
	{textNumCase{"flow_label", 0xfffff}, MaskAV, func(a *Attr) uint64 { return uint64(a.AH.FlowLabel) }},
	{textNumCase{"sl", 15}, MaskAV, func(a *Attr) uint64 { return uint64(a.AH.SL) }},
	{textNumCase{"dlid", 0xffff}, MaskAV, func(a *Attr) uint64 { return uint64(a.AH.DLID) }},
	{textNumCase{"static_rate", 0xff}, MaskAV, func(a *Attr) uint64 { return uint64(a.AH.StaticRate) }},
	{textNumCase{"max_send_wr", 0xffffffff}, MaskCap, func(a *Attr) uint64 { return uint64(a.Cap.MaxSendWR) }},
	{textNumCase{"max_recv_wr", 0xffffffff}, MaskCap, func(a *Attr) uint64 { return uint64(a.Cap.MaxRecvWR) }},
	{textNumCase{"max_send_sge", 0xffffffff}, MaskCap, func(a *Attr) uint64 { return uint64(a.Cap.MaxSendSGE) }},
	{textNumCase{"max_recv_sge", 0xffffffff}, MaskCap, func(a *Attr) uint64 { return uint64(a.Cap.MaxRecvSGE) }},
	{textNumCase{"max_inline_data", 0xffffffff}, MaskCap, func(a *Attr) uint64 { return uint64(a.Cap.MaxInlineData) }},
}

func TestParseModifyNumbers(t *testing.T) {
	for _, c := range textAttrNums {
		good, bad := textNumValues(c.max)
		for v, want := range good {
			in := c.key + "=" + v
			a, m, err := ParseModify(in)
			if err != nil {
				t.Errorf("%q: %v", in, err)
				continue
			}
			if got := c.get(&a); got != want || m != c.mask {
				t.Errorf("%q: got %d mask %v, want %d mask %v", in, got, m, want, c.mask)
			}
		}
		for v, msg := range bad {
			in := c.key + "=" + v
			_, _, err := ParseModify(in)
			wantTextErr(t, in, err, c.key, msg)
		}
		in := c.key + "="
		_, _, err := ParseModify(in)
		wantTextErr(t, in, err, c.key, "empty value")
	}
}

func TestParseModifyEnums(t *testing.T) {
	good := []struct {
		in   string
		want Attr
		mask AttrMask
	}{
		{"qp_state=RESET", Attr{QPState: StateReset}, MaskState},
		{"qp_state=init", Attr{QPState: StateInit}, MaskState},
		{"qp_state=Rtr", Attr{QPState: StateRTR}, MaskState},
		{"qp_state=rts", Attr{QPState: StateRTS}, MaskState},
		{"qp_state=SQD", Attr{QPState: StateSQD}, MaskState},
		{"qp_state=sqe", Attr{QPState: StateSQE}, MaskState},
		{"qp_state=err", Attr{QPState: StateErr}, MaskState},
		{"qp_state=3", Attr{QPState: StateRTS}, MaskState},
		{"qp_state=0x6", Attr{QPState: StateErr}, MaskState},
		{"cur_qp_state=RTS", Attr{CurQPState: StateRTS}, MaskCurState},
		{"cur_qp_state=0", Attr{CurQPState: StateReset}, MaskCurState},
		{"en_sqd_async_notify=1", Attr{EnSQDAsyncNotify: true}, MaskEnSQDAsyncNotify},
		{"en_sqd_async_notify=0", Attr{}, MaskEnSQDAsyncNotify},
		{"qp_access_flags=0", Attr{}, MaskAccessFlags},
		{"qp_access_flags=remote_write,remote_read", Attr{QPAccessFlags: AccessRemoteWrite | AccessRemoteRead}, MaskAccessFlags},
		{"qp_access_flags=0xe", Attr{QPAccessFlags: AccessRemote}, MaskAccessFlags},
		{"path_mtu=256", Attr{PathMTU: MTU256}, MaskPathMTU},
		{"path_mtu=512", Attr{PathMTU: MTU512}, MaskPathMTU},
		{"path_mtu=1024", Attr{PathMTU: MTU1024}, MaskPathMTU},
		{"path_mtu=2048", Attr{PathMTU: MTU2048}, MaskPathMTU},
		{"path_mtu=4096", Attr{PathMTU: MTU4096}, MaskPathMTU},
		{"path_mtu=0x1000", Attr{PathMTU: MTU4096}, MaskPathMTU},
		{"path_mtu=1", Attr{PathMTU: MTU256}, MaskPathMTU},
		{"path_mtu=5", Attr{PathMTU: MTU4096}, MaskPathMTU},
		{"path_mig_state=migrated", Attr{PathMigState: MigMigrated}, MaskPathMigState},
		{"path_mig_state=REARM", Attr{PathMigState: MigRearm}, MaskPathMigState},
		{"path_mig_state=armed", Attr{PathMigState: MigArmed}, MaskPathMigState},
		{"path_mig_state=2", Attr{PathMigState: MigArmed}, MaskPathMigState},
		{"dgid=fe80::1", Attr{AH: AH{DGID: [16]byte{0: 0xfe, 1: 0x80, 15: 1}}}, MaskAV},
		{"dgid=1.2.3.4", Attr{AH: AH{DGID: [16]byte{10: 0xff, 11: 0xff, 12: 1, 13: 2, 14: 3, 15: 4}}}, MaskAV},
		{"dgid=::ffff:1.2.3.4", Attr{AH: AH{DGID: [16]byte{10: 0xff, 11: 0xff, 12: 1, 13: 2, 14: 3, 15: 4}}}, MaskAV},
		{"", Attr{}, 0},
		{" \t ", Attr{}, 0},
	}
	for _, c := range good {
		a, m, err := ParseModify(c.in)
		if err != nil || !reflect.DeepEqual(a, c.want) || m != c.mask {
			t.Errorf("ParseModify(%q) = %+v, %v, %v; want %+v, %v", c.in, a, m, err, c.want, c.mask)
		}
	}
	bad := []struct{ in, key, msg string }{
		{"qp_state=7", "qp_state", "out of range: 7 > 6"},
		{"qp_state=-1", "qp_state", "out of range: -1 < 0"},
		{"qp_state=ready", "qp_state", `not a QP state: "ready"`},
		{"qp_state=IBV_QPS_RTS", "qp_state", "not a QP state"},
		{"qp_state=", "qp_state", "empty value"},
		{"cur_qp_state=256", "cur_qp_state", "out of range"},
		{"en_sqd_async_notify=2", "en_sqd_async_notify", "out of range: 2 > 1"},
		{"en_sqd_async_notify=true", "en_sqd_async_notify", "not a number"},
		{"qp_access_flags=write", "qp_access_flags", `unknown flag "write"`},
		{"qp_access_flags=0x100000000", "qp_access_flags", "out of range"},
		{"path_mtu=0", "path_mtu", "not an MTU"},
		{"path_mtu=6", "path_mtu", "not an MTU"},
		{"path_mtu=1500", "path_mtu", "not an MTU: 1500"},
		{"path_mtu=8192", "path_mtu", "not an MTU"},
		{"path_mtu=4097", "path_mtu", "not an MTU"},
		{"path_mtu=99999999999999999999", "path_mtu", "out of range"},
		{"path_mtu=mtu_1024", "path_mtu", "not a number"},
		{"path_mig_state=3", "path_mig_state", "out of range: 3 > 2"},
		{"path_mig_state=migrating", "path_mig_state", "not a migration state"},
		{"dgid=fe80::g", "dgid", "not an IPv6 or IPv4 address"},
		{"dgid=fe80::1%eth0", "dgid", "zone"},
		{"dgid=1.2.3", "dgid", "not an IPv6"},
	}
	for _, c := range bad {
		_, _, err := ParseModify(c.in)
		wantTextErr(t, c.in, err, c.key, c.msg)
	}
}

func TestParseModifyKeys(t *testing.T) {
	bad := []struct{ in, key, msg string }{
		{"state=RTS", "state", "unknown key"},
		{"QP_STATE=RTS", "QP_STATE", "unknown key"},
		{"qp_state=RTS qp_state=RTS", "qp_state", "repeated key"},
		{"dgid=::1 sl=1 dgid=::2", "dgid", "repeated key"},
		{"max_send_wr=1 max_send_wr=2", "max_send_wr", "repeated key"},
		{"qp_state=RTS garbage", "garbage", "not a key=value token"},
		{"qp_state", "qp_state", "not a key=value token"},
		{"=RTS", "=RTS", "empty key"},
		{"av=1", "av", "unknown key"},
		{"cap=1", "cap", "unknown key"},
		{"sq_draining=1", "sq_draining", "unknown key"},
		{"qp_state=RTS \x00=1", `\x00`, "unknown key"},
	}
	for _, c := range bad {
		_, _, err := ParseModify(c.in)
		wantTextErr(t, c.in, err, c.key, c.msg)
	}
	// alt_* and rate_limit are well formed but unimplemented: EOPNOTSUPP.
	for _, in := range []string{"alt_path=1", "alt_pkey_index=1", "alt_port_num=1", "alt_timeout=1", "alt_dgid=::1", "qp_state=RTS alt_ah=x", "rate_limit=100"} {
		_, _, err := ParseModify(in)
		var e *Error
		if !errors.Is(err, ErrUnsupported) || !errors.As(err, &e) || !strings.Contains(e.Msg, "not supported") {
			t.Errorf("%q: got %v, want *Error wrapping ErrUnsupported", in, err)
		}
	}
}

func TestParseModifyWhitespaceAndMask(t *testing.T) {
	want := Attr{QPState: StateRTR, PathMTU: MTU1024, DestQPNum: 17, RQPSN: 0x123456,
		AH:  AH{DGID: [16]byte{10: 0xff, 11: 0xff, 12: 10, 15: 1}, SL: 3},
		Cap: Cap{MaxSendWR: 8}}
	wantMask := MaskState | MaskPathMTU | MaskDestQPN | MaskRQPSN | MaskAV | MaskCap
	for _, in := range []string{
		"qp_state=RTR path_mtu=1024 dest_qp_num=17 rq_psn=0x123456 dgid=10.0.0.1 sl=3 max_send_wr=8",
		"  qp_state=RTR\tpath_mtu=1024   dest_qp_num=17\t\trq_psn=0x123456 dgid=10.0.0.1 sl=3 max_send_wr=8  ",
		"\nqp_state=rtr\npath_mtu=3\ndest_qp_num=0x11\nrq_psn=1193046\ndgid=::ffff:a00:1\nsl=3\nmax_send_wr=8\n",
		"max_send_wr=8 sl=3 dgid=10.0.0.1 rq_psn=0x123456 dest_qp_num=17 path_mtu=1024 qp_state=RTR",
	} {
		a, m, err := ParseModify(in)
		if err != nil || !reflect.DeepEqual(a, want) || m != wantMask {
			t.Errorf("ParseModify(%q) = %+v, %v, %v", in, a, m, err)
		}
	}
	// A failed parse returns zero values, never a half-filled Attr.
	a, m, err := ParseModify("qp_state=RTS timeout=300")
	if err == nil || a != (Attr{}) || m != 0 {
		t.Errorf("failed parse returned %+v, %v, %v", a, m, err)
	}
}

// textAttrSample has every field FormatAttr prints set to a non-default value.
func textAttrSample() Attr {
	return Attr{
		QPState:          StateRTS,
		PathMTU:          MTU2048,
		PathMigState:     MigArmed,
		QKey:             0x80010000,
		RQPSN:            0xabcdef,
		SQPSN:            0x123456,
		DestQPNum:        0xfedcba,
		QPAccessFlags:    AccessRemote | AccessLocalWrite | 0x400,
		Cap:              Cap{MaxSendWR: 1, MaxRecvWR: 2, MaxSendSGE: 3, MaxRecvSGE: 4, MaxInlineData: 0xffffffff},
		AH:               AH{DGID: [16]byte{0x20, 0x01, 0x0d, 0xb8, 15: 7}, SGIDIndex: 2, HopLimit: 64, TrafficClass: 0xb8, FlowLabel: 0xfffff, SL: 15},
		PKeyIndex:        0xffff,
		EnSQDAsyncNotify: true,
		MaxRdAtomic:      16,
		MaxDestRdAtomic:  255,
		MinRNRTimer:      31,
		PortNum:          1,
		Timeout:          14,
		RetryCnt:         7,
		RNRRetry:         6,
	}
}

// textAttrPrinted keeps the fields FormatAttr prints for t.
func textAttrPrinted(a Attr, t Type) Attr {
	p := Attr{QPState: a.QPState, PathMTU: a.PathMTU, QPAccessFlags: a.QPAccessFlags,
		PKeyIndex: a.PKeyIndex, PortNum: a.PortNum, PathMigState: a.PathMigState,
		EnSQDAsyncNotify: a.EnSQDAsyncNotify, Cap: a.Cap}
	switch t {
	case TypeUD:
		p.QKey, p.SQPSN = a.QKey, a.SQPSN
	case TypeRC, TypeUC:
		p.DestQPNum, p.RQPSN, p.SQPSN = a.DestQPNum, a.RQPSN, a.SQPSN
		p.AH = AH{DGID: a.AH.DGID, SL: a.AH.SL, HopLimit: a.AH.HopLimit,
			TrafficClass: a.AH.TrafficClass, FlowLabel: a.AH.FlowLabel, SGIDIndex: a.AH.SGIDIndex}
		if t == TypeRC {
			p.Timeout, p.RetryCnt, p.RNRRetry, p.MinRNRTimer = a.Timeout, a.RetryCnt, a.RNRRetry, a.MinRNRTimer
			p.MaxRdAtomic, p.MaxDestRdAtomic = a.MaxRdAtomic, a.MaxDestRdAtomic
		}
	}
	return p
}

func TestFormatAttrOrder(t *testing.T) {
	a := textAttrSample()
	a.AH.DGID = [16]byte{10: 0xff, 11: 0xff, 12: 192, 13: 168, 14: 1, 15: 2}
	want := map[Type]string{
		TypeRC: `qp_state=RTS
path_mtu=2048
qp_access_flags=local_write,remote_write,remote_read,remote_atomic,0x400
pkey_index=65535
port_num=1
dest_qp_num=16702650
rq_psn=11259375
sq_psn=1193046
dgid=::ffff:192.168.1.2
sl=15
hop_limit=64
traffic_class=184
flow_label=1048575
sgid_index=2
timeout=14
retry_cnt=7
rnr_retry=6
min_rnr_timer=31
max_rd_atomic=16
max_dest_rd_atomic=255
path_mig_state=armed
en_sqd_async_notify=1
max_send_wr=1
max_recv_wr=2
max_send_sge=3
max_recv_sge=4
max_inline_data=4294967295
`,
		TypeUC: `qp_state=RTS
path_mtu=2048
qp_access_flags=local_write,remote_write,remote_read,remote_atomic,0x400
pkey_index=65535
port_num=1
dest_qp_num=16702650
rq_psn=11259375
sq_psn=1193046
dgid=::ffff:192.168.1.2
sl=15
hop_limit=64
traffic_class=184
flow_label=1048575
sgid_index=2
path_mig_state=armed
en_sqd_async_notify=1
max_send_wr=1
max_recv_wr=2
max_send_sge=3
max_recv_sge=4
max_inline_data=4294967295
`,
		TypeUD: `qp_state=RTS
path_mtu=2048
qp_access_flags=local_write,remote_write,remote_read,remote_atomic,0x400
pkey_index=65535
port_num=1
qkey=2147549184
sq_psn=1193046
path_mig_state=armed
en_sqd_async_notify=1
max_send_wr=1
max_recv_wr=2
max_send_sge=3
max_recv_sge=4
max_inline_data=4294967295
`,
	}
	for typ, w := range want {
		if got := FormatAttr(&a, typ); got != w {
			t.Errorf("FormatAttr(%v):\n%s\nwant:\n%s", typ, got, w)
		}
	}
	// A fresh QP: zero values print, an unset MTU is left out.
	got := FormatAttr(&Attr{}, TypeUD)
	wantZero := "qp_state=RESET\nqp_access_flags=0\npkey_index=0\nport_num=0\nqkey=0\nsq_psn=0\npath_mig_state=migrated\nen_sqd_async_notify=0\nmax_send_wr=0\nmax_recv_wr=0\nmax_send_sge=0\nmax_recv_sge=0\nmax_inline_data=0\n"
	if got != wantZero {
		t.Errorf("FormatAttr(zero, UD) = %q, want %q", got, wantZero)
	}
}

func TestFormatAttrRoundTrip(t *testing.T) {
	samples := []Attr{textAttrSample(), {}}
	s := textAttrSample()
	s.QPState, s.PathMTU, s.PathMigState, s.EnSQDAsyncNotify = StateSQD, MTU256, MigRearm, false
	s.AH.DGID = [16]byte{10: 0xff, 11: 0xff, 12: 1, 13: 2, 14: 3, 15: 4}
	samples = append(samples, s)
	for i, a := range samples {
		for _, typ := range []Type{TypeRC, TypeUC, TypeUD} {
			text := FormatAttr(&a, typ)
			if !strings.HasSuffix(text, "\n") {
				t.Errorf("sample %d %v: no final newline", i, typ)
			}
			// Each line alone is a valid modify of exactly one key.
			lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
			for _, line := range lines {
				if _, _, err := ParseModify(line); err != nil {
					t.Errorf("sample %d %v: line %q: %v", i, typ, line, err)
				}
				if strings.ContainsAny(line, " \t") {
					t.Errorf("sample %d %v: line %q is more than one token", i, typ, line)
				}
			}
			// The whole file, pasted into one modify, gives the values back.
			got, _, err := ParseModify(strings.Join(lines, " "))
			if err != nil {
				t.Errorf("sample %d %v: %v", i, typ, err)
				continue
			}
			if want := textAttrPrinted(a, typ); !reflect.DeepEqual(got, want) {
				t.Errorf("sample %d %v: round trip\n got %+v\nwant %+v", i, typ, got, want)
			}
			// So does the file as written, newlines and all.
			got2, _, err := ParseModify(text)
			if err != nil || !reflect.DeepEqual(got2, got) {
				t.Errorf("sample %d %v: multi-line parse differs: %v", i, typ, err)
			}
		}
	}
}
