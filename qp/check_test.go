package qp

import (
	"errors"
	"reflect"
	"sort"
	"strings"
	"testing"
)

var testLimits = Limits{
	PhysPortCnt:     1,
	MaxMTU:          MTU1024,
	MaxQPRdAtom:     16,
	MaxQPInitRdAtom: 8, // different from MaxQPRdAtom so a swap is caught
	NumPKeys:        2,
}

func TestCheckAttr(t *testing.T) {
	cases := []struct {
		name   string
		typ    Type
		mask   AttrMask
		set    func(*Attr)
		key    string // "" = legal
		msg    string // substring of Msg when key != ""
		unsupp bool
	}{
		{"state ok", TypeRC, MaskState, func(a *Attr) { a.QPState = StateErr }, "", "", false},
		{"state bad", TypeRC, MaskState, func(a *Attr) { a.QPState = 7 }, "qp_state", "invalid state 7", false},
		{"cur state ok", TypeRC, MaskCurState, func(a *Attr) { a.CurQPState = StateSQE }, "", "", false},
		{"cur state bad", TypeRC, MaskCurState, func(a *Attr) { a.CurQPState = 200 }, "cur_qp_state", "200", false},
		{"access all rc", TypeRC, MaskAccessFlags, func(a *Attr) { a.QPAccessFlags = AccessSupportedQP }, "", "", false},
		{"access all uc", TypeUC, MaskAccessFlags, func(a *Attr) { a.QPAccessFlags = AccessRemoteWrite }, "", "", false},
		{"access zero_based", TypeRC, MaskAccessFlags, func(a *Attr) { a.QPAccessFlags = AccessRemoteRead | AccessZeroBased },
			"qp_access_flags", "zero_based", false},
		{"access unknown bit", TypeRC, MaskAccessFlags, func(a *Attr) { a.QPAccessFlags = 0x100 }, "qp_access_flags", "0x100", false},
		{"access on ud", TypeUD, MaskAccessFlags, func(a *Attr) { a.QPAccessFlags = 0 }, "qp_access_flags", "ud", false},
		{"pkey max", TypeRC, MaskPKeyIndex, func(a *Attr) { a.PKeyIndex = 1 }, "", "", false},
		{"pkey max+1", TypeRC, MaskPKeyIndex, func(a *Attr) { a.PKeyIndex = 2 }, "pkey_index", "2 out of range (table has 2", false},
		{"port 1", TypeRC, MaskPort, func(a *Attr) { a.PortNum = 1 }, "", "", false},
		{"port 0", TypeRC, MaskPort, func(a *Attr) { a.PortNum = 0 }, "port_num", "0 out of range 1..1", false},
		{"port 2", TypeRC, MaskPort, func(a *Attr) { a.PortNum = 2 }, "port_num", "2 out of range 1..1", false},
		{"qkey any", TypeUD, MaskQKey, func(a *Attr) { a.QKey = 0xFFFFFFFF }, "", "", false},
		{"av ok", TypeRC, MaskAV, func(a *Attr) {
			a.AH = AH{DGID: [16]byte{0xfe, 0x80}, StaticRate: 200, SL: 15, HopLimit: 255, FlowLabel: 0xFFFFFFFF, PortNum: 1}
		}, "", "", false},
		{"av port 0", TypeRC, MaskAV, func(a *Attr) { a.AH.PortNum = 0 }, "", "", false},
		{"av port 2", TypeRC, MaskAV, func(a *Attr) { a.AH.PortNum = 2 }, "dgid", "port 2", false},
		{"av sgid 1", TypeRC, MaskAV, func(a *Attr) { a.AH.SGIDIndex = 1 }, "sgid_index", "1", false},
		{"av unmasked ignored", TypeRC, MaskPort, func(a *Attr) { a.PortNum = 1; a.AH.SGIDIndex = 9 }, "", "", false},
		{"mtu max", TypeRC, MaskPathMTU, func(a *Attr) { a.PathMTU = MTU1024 }, "", "", false},
		{"mtu min", TypeRC, MaskPathMTU, func(a *Attr) { a.PathMTU = MTU256 }, "", "", false},
		{"mtu max+1", TypeRC, MaskPathMTU, func(a *Attr) { a.PathMTU = MTU2048 }, "path_mtu", "2048 bytes exceeds port max_mtu 1024", false},
		{"mtu 0", TypeRC, MaskPathMTU, func(a *Attr) { a.PathMTU = 0 }, "path_mtu", "invalid", false},
		{"mtu 6", TypeRC, MaskPathMTU, func(a *Attr) { a.PathMTU = 6 }, "path_mtu", "invalid", false},
		{"timeout 31", TypeRC, MaskTimeout, func(a *Attr) { a.Timeout = 31 }, "", "", false},
		{"timeout 32", TypeRC, MaskTimeout, func(a *Attr) { a.Timeout = 32 }, "timeout", "32 exceeds 31", false},
		{"retry 7", TypeRC, MaskRetryCnt, func(a *Attr) { a.RetryCnt = 7 }, "", "", false},
		{"retry 8", TypeRC, MaskRetryCnt, func(a *Attr) { a.RetryCnt = 8 }, "retry_cnt", "8 exceeds 7", false},
		{"rnr_retry 7", TypeRC, MaskRNRRetry, func(a *Attr) { a.RNRRetry = 7 }, "", "", false},
		{"rnr_retry 8", TypeRC, MaskRNRRetry, func(a *Attr) { a.RNRRetry = 8 }, "rnr_retry", "8 exceeds 7", false},
		{"rq_psn max", TypeRC, MaskRQPSN, func(a *Attr) { a.RQPSN = 0xFFFFFF }, "", "", false},
		{"rq_psn max+1", TypeRC, MaskRQPSN, func(a *Attr) { a.RQPSN = 0x1000000 }, "rq_psn", "0x1000000", false},
		{"max_rd_atomic max", TypeRC, MaskMaxQPRdAtomic, func(a *Attr) { a.MaxRdAtomic = 8 }, "", "", false},
		{"max_rd_atomic max+1", TypeRC, MaskMaxQPRdAtomic, func(a *Attr) { a.MaxRdAtomic = 9 },
			"max_rd_atomic", "9 exceeds max_qp_init_rd_atom 8", false},
		{"alt path", TypeRC, MaskAltPath, func(a *Attr) {}, "alt_path", "not implemented", true},
		{"min_rnr 31", TypeRC, MaskMinRNRTimer, func(a *Attr) { a.MinRNRTimer = 31 }, "", "", false},
		{"min_rnr 32", TypeRC, MaskMinRNRTimer, func(a *Attr) { a.MinRNRTimer = 32 }, "min_rnr_timer", "32 exceeds 31", false},
		{"sq_psn max", TypeRC, MaskSQPSN, func(a *Attr) { a.SQPSN = 0xFFFFFF }, "", "", false},
		{"sq_psn max+1", TypeRC, MaskSQPSN, func(a *Attr) { a.SQPSN = 0x1000000 }, "sq_psn", "0x1000000", false},
		{"max_dest_rd_atomic max", TypeRC, MaskMaxDestRdAtomic, func(a *Attr) { a.MaxDestRdAtomic = 16 }, "", "", false},
		{"max_dest_rd_atomic max+1", TypeRC, MaskMaxDestRdAtomic, func(a *Attr) { a.MaxDestRdAtomic = 17 },
			"max_dest_rd_atomic", "17 exceeds max_qp_rd_atom 16", false},
		{"mig armed", TypeRC, MaskPathMigState, func(a *Attr) { a.PathMigState = MigArmed }, "", "", false},
		{"mig 3", TypeRC, MaskPathMigState, func(a *Attr) { a.PathMigState = 3 }, "path_mig_state", "3 out of range", false},
		{"cap", TypeRC, MaskCap, func(a *Attr) {}, "cap", "resizing", true},
		{"dest_qp max", TypeRC, MaskDestQPN, func(a *Attr) { a.DestQPNum = 0xFFFFFF }, "", "", false},
		{"dest_qp max+1", TypeRC, MaskDestQPN, func(a *Attr) { a.DestQPNum = 0x1000000 }, "dest_qp_num", "0x1000000", false},
		{"rate limit", TypeRC, MaskRateLimit, func(a *Attr) {}, "rate_limit", "not implemented", true},
		{"unknown bit", TypeRC, 1 << 22, func(a *Attr) {}, "attr_mask", "0x400000", true},
		{"bad type", 1, MaskState, func(a *Attr) {}, "qp_type", "not implemented", true},
		{"first bad in bit order", TypeRC, MaskTimeout | MaskRetryCnt, func(a *Attr) { a.Timeout = 40; a.RetryCnt = 9 },
			"timeout", "40", false},
		{"unmasked garbage ignored", TypeRC, 0, func(a *Attr) { a.Timeout = 99; a.PathMTU = 9; a.DestQPNum = ^uint32(0) }, "", "", false},
	}
	for _, c := range cases {
		var a Attr
		c.set(&a)
		before := a
		err := CheckAttr(c.typ, &a, c.mask, testLimits)
		if !reflect.DeepEqual(a, before) {
			t.Errorf("%s: CheckAttr modified attr", c.name)
		}
		if c.key == "" {
			if err != nil {
				t.Errorf("%s: unexpected %v", c.name, err)
			}
			continue
		}
		var e *Error
		if !errors.As(err, &e) {
			t.Errorf("%s: got %v, want *Error key %s", c.name, err, c.key)
			continue
		}
		if e.Key != c.key || !strings.Contains(e.Msg, c.msg) {
			t.Errorf("%s: got key=%q msg=%q, want key=%q msg containing %q", c.name, e.Key, e.Msg, c.key, c.msg)
		}
		if errors.Is(err, ErrUnsupported) != c.unsupp {
			t.Errorf("%s: errors.Is(ErrUnsupported)=%v", c.name, !c.unsupp)
		}
	}
}

// A realistic RC bring-up passes both checks at every step.
func TestCheckAttrBringUp(t *testing.T) {
	steps := []struct {
		from State
		mask AttrMask
		a    Attr
	}{
		{StateReset, MaskState | MaskPKeyIndex | MaskPort | MaskAccessFlags,
			Attr{QPState: StateInit, PortNum: 1, QPAccessFlags: AccessLocalWrite | AccessRemote}},
		{StateInit, MaskState | MaskAV | MaskPathMTU | MaskDestQPN | MaskRQPSN | MaskMaxDestRdAtomic | MaskMinRNRTimer,
			Attr{QPState: StateRTR, PathMTU: MTU1024, DestQPNum: 17, RQPSN: 0xFFFFFF, MaxDestRdAtomic: 16, MinRNRTimer: 12, AH: AH{PortNum: 1}}},
		{StateRTR, MaskState | MaskTimeout | MaskRetryCnt | MaskRNRRetry | MaskSQPSN | MaskMaxQPRdAtomic,
			Attr{QPState: StateRTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7, SQPSN: 0, MaxRdAtomic: 8}},
	}
	var qp Attr
	for _, s := range steps {
		if err := CheckAttr(TypeRC, &s.a, s.mask, testLimits); err != nil {
			t.Fatalf("%v: CheckAttr: %v", s.from, err)
		}
		if err := ModifyOK(s.from, s.a.QPState, TypeRC, s.mask); err != nil {
			t.Fatalf("%v: ModifyOK: %v", s.from, err)
		}
		ApplyAttr(&qp, &s.a, s.mask)
	}
	if qp.QPState != StateRTS || qp.DestQPNum != 17 || qp.Timeout != 14 || qp.MaxDestRdAtomic != 16 || qp.PathMTU != MTU1024 {
		t.Fatalf("final attr %+v", qp)
	}
}

// changedFields lists the fields of a that differ from the zero Attr.
func changedFields(a *Attr) []string {
	var out []string
	v := reflect.ValueOf(a).Elem()
	for i := 0; i < v.NumField(); i++ {
		if !v.Field(i).IsZero() {
			out = append(out, v.Type().Field(i).Name)
		}
	}
	sort.Strings(out)
	return out
}

func TestApplyAttrCopiesOnlyMasked(t *testing.T) {
	src := Attr{
		QPState: StateRTS, CurQPState: StateRTR, PathMTU: MTU2048, PathMigState: MigArmed,
		QKey: 0x1111, RQPSN: 0x1234567, SQPSN: 0xF000001, DestQPNum: 99,
		QPAccessFlags: AccessRemoteRead, Cap: Cap{MaxSendWR: 4},
		AH: AH{SL: 3}, AltAH: AH{SL: 4}, PKeyIndex: 1, AltPKeyIndex: 2,
		EnSQDAsyncNotify: true, SQDraining: true, MaxRdAtomic: 5, MaxDestRdAtomic: 6,
		MinRNRTimer: 7, PortNum: 1, Timeout: 9, RetryCnt: 3, RNRRetry: 4,
		AltPortNum: 1, AltTimeout: 10, RateLimit: 1000,
	}
	want := map[AttrMask][]string{
		MaskState:            {"QPState"},
		MaskCurState:         nil, // an assertion, not stored
		MaskEnSQDAsyncNotify: {"EnSQDAsyncNotify"},
		MaskAccessFlags:      {"QPAccessFlags"},
		MaskPKeyIndex:        {"PKeyIndex"},
		MaskPort:             {"PortNum"},
		MaskQKey:             {"QKey"},
		MaskAV:               {"AH"},
		MaskPathMTU:          {"PathMTU"},
		MaskTimeout:          {"Timeout"},
		MaskRetryCnt:         {"RetryCnt"},
		MaskRNRRetry:         {"RNRRetry"},
		MaskRQPSN:            {"RQPSN"},
		MaskMaxQPRdAtomic:    {"MaxRdAtomic"},
		MaskAltPath:          {"AltAH", "AltPKeyIndex", "AltPortNum", "AltTimeout"},
		MaskMinRNRTimer:      {"MinRNRTimer"},
		MaskSQPSN:            {"SQPSN"},
		MaskMaxDestRdAtomic:  {"MaxDestRdAtomic"},
		MaskPathMigState:     {"PathMigState"},
		MaskCap:              {"Cap"},
		MaskDestQPN:          {"DestQPNum"},
		MaskRateLimit:        {"RateLimit"},
	}
	if len(want) != len(maskNames) {
		t.Fatalf("test covers %d bits, mask.go has %d", len(want), len(maskNames))
	}
	for bit, fields := range want {
		var dst Attr
		ApplyAttr(&dst, &src, bit)
		got := changedFields(&dst)
		sort.Strings(fields)
		if !reflect.DeepEqual(got, fields) && (len(got) != 0 || len(fields) != 0) {
			t.Errorf("%v: changed %v, want %v", bit, got, fields)
		}
		// Fields it copies hold src's value (PSNs masked).
		sv, dv := reflect.ValueOf(src), reflect.ValueOf(dst)
		for _, f := range fields {
			s, d := sv.FieldByName(f).Interface(), dv.FieldByName(f).Interface()
			if p, ok := s.(PSN); ok {
				s = p & PSNMask
			}
			if !reflect.DeepEqual(s, d) {
				t.Errorf("%v: %s = %v, want %v", bit, f, d, s)
			}
		}
	}
	// Unmasked fields of dst are left alone.
	dst := Attr{Timeout: 20, QKey: 5}
	ApplyAttr(&dst, &src, MaskQKey|MaskSQPSN)
	if dst.Timeout != 20 || dst.QKey != 0x1111 || dst.SQPSN != 1 {
		t.Errorf("partial apply: %+v", dst)
	}
	// Mask 0 copies nothing; src is never modified.
	before := src
	var zero Attr
	ApplyAttr(&zero, &src, 0)
	if !reflect.DeepEqual(zero, Attr{}) || !reflect.DeepEqual(before, src) {
		t.Errorf("mask 0 changed something")
	}
}
