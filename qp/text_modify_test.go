package qp

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
)

// project keeps the fields of a that mask names, as ParseModify fills them.
func project(a *Attr, mask AttrMask) Attr {
	var w Attr
	set := func(bit AttrMask, f func()) {
		if mask&bit != 0 {
			f()
		}
	}
	set(MaskState, func() { w.QPState = a.QPState })
	set(MaskCurState, func() { w.CurQPState = a.CurQPState })
	set(MaskEnSQDAsyncNotify, func() { w.EnSQDAsyncNotify = a.EnSQDAsyncNotify })
	set(MaskAccessFlags, func() { w.QPAccessFlags = a.QPAccessFlags })
	set(MaskPKeyIndex, func() { w.PKeyIndex = a.PKeyIndex })
	set(MaskPort, func() { w.PortNum = a.PortNum })
	set(MaskQKey, func() { w.QKey = a.QKey })
	set(MaskAV, func() { w.AH = a.AH; w.AH.PortNum = 0 })
	set(MaskPathMTU, func() { w.PathMTU = a.PathMTU })
	set(MaskTimeout, func() { w.Timeout = a.Timeout })
	set(MaskRetryCnt, func() { w.RetryCnt = a.RetryCnt })
	set(MaskRNRRetry, func() { w.RNRRetry = a.RNRRetry })
	set(MaskRQPSN, func() { w.RQPSN = a.RQPSN })
	set(MaskMaxQPRdAtomic, func() { w.MaxRdAtomic = a.MaxRdAtomic })
	set(MaskMinRNRTimer, func() { w.MinRNRTimer = a.MinRNRTimer })
	set(MaskSQPSN, func() { w.SQPSN = a.SQPSN })
	set(MaskMaxDestRdAtomic, func() { w.MaxDestRdAtomic = a.MaxDestRdAtomic })
	set(MaskPathMigState, func() { w.PathMigState = a.PathMigState })
	set(MaskCap, func() { w.Cap = a.Cap })
	set(MaskDestQPN, func() { w.DestQPNum = a.DestQPNum })
	return w
}

// randomAttr fills every field with a value its text form can carry.
func randomAttr(r *rand.Rand) Attr {
	var a Attr
	a.QPState = State(r.IntN(int(numStates)))
	a.CurQPState = State(r.IntN(int(numStates)))
	a.EnSQDAsyncNotify = r.IntN(2) == 1
	a.QPAccessFlags = Access(r.Uint32())
	a.PKeyIndex = uint16(r.Uint32())
	a.PortNum = uint8(r.Uint32())
	a.QKey = r.Uint32()
	for i := range a.AH.DGID {
		a.AH.DGID[i] = byte(r.Uint32())
	}
	a.AH.SGIDIndex = uint8(r.Uint32())
	a.AH.HopLimit = uint8(r.Uint32())
	a.AH.TrafficClass = uint8(r.Uint32())
	a.AH.FlowLabel = r.Uint32() & (1<<20 - 1)
	a.AH.SL = uint8(r.IntN(16))
	a.AH.DLID = uint16(r.Uint32())
	a.AH.StaticRate = uint8(r.Uint32())
	a.AH.PortNum = uint8(r.Uint32())
	a.PathMTU = MTU(1 + r.IntN(5))
	a.Timeout = uint8(r.Uint32())
	a.RetryCnt = uint8(r.Uint32())
	a.RNRRetry = uint8(r.Uint32())
	a.RQPSN = PSN(r.Uint32() & PSNMask)
	a.SQPSN = PSN(r.Uint32() & PSNMask)
	a.MaxRdAtomic = uint8(r.Uint32())
	a.MaxDestRdAtomic = uint8(r.Uint32())
	a.MinRNRTimer = uint8(r.Uint32())
	a.PathMigState = MigState(r.IntN(3))
	a.Cap = Cap{r.Uint32(), r.Uint32(), r.Uint32(), r.Uint32(), r.Uint32()}
	a.DestQPNum = r.Uint32() & PSNMask
	return a
}

func TestFormatModifyRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	textual := maskKnown &^ (MaskAltPath | MaskRateLimit)
	for i := range 20000 {
		a := randomAttr(r)
		mask := AttrMask(r.Uint32()) & textual
		if i < 64 {
			mask = 0
			for _, n := range maskNames {
				if n.bit&textual != 0 && r.IntN(4) == 0 {
					mask |= n.bit
				}
			}
		}
		if i == 0 {
			mask = textual
		}
		s := FormatModify(&a, mask)
		got, gotMask, err := ParseModify(s)
		if err != nil {
			t.Fatalf("mask %v: ParseModify(%q): %v", mask, s, err)
		}
		if gotMask != mask {
			t.Fatalf("mask %v: got mask %v from %q", mask, gotMask, s)
		}
		if want := project(&a, mask); got != want {
			t.Fatalf("mask %v: %q parsed to\n%+v\nwant\n%+v", mask, s, got, want)
		}
	}
}

func TestFormatModifyExact(t *testing.T) {
	a := Attr{QPState: StateRTR, PathMTU: MTU1024, DestQPNum: 17, RQPSN: 5, MaxDestRdAtomic: 1, MinRNRTimer: 12}
	a.AH.DGID[10], a.AH.DGID[11], a.AH.DGID[15] = 0xff, 0xff, 1
	got := FormatModify(&a, MaskState|MaskPathMTU|MaskDestQPN|MaskRQPSN|MaskMaxDestRdAtomic|MaskMinRNRTimer)
	want := "qp_state=RTR path_mtu=1024 rq_psn=5 min_rnr_timer=12 max_dest_rd_atomic=1 dest_qp_num=17"
	if got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	if s := FormatModify(&a, 0); s != "" {
		t.Errorf("empty mask: %q", s)
	}
	if s := FormatModify(&a, MaskAV); !strings.HasPrefix(s, "dgid=::ffff:0.0.0.1 ") {
		t.Errorf("av: %q", s)
	}
}

func TestFormatModifyUnsupported(t *testing.T) {
	a := Attr{QPState: StateRTS, RateLimit: 5}
	for _, m := range []AttrMask{MaskAltPath, MaskRateLimit} {
		s := FormatModify(&a, MaskState|m)
		if _, _, err := ParseModify(s); !errors.Is(err, ErrUnsupported) {
			t.Errorf("%v: ParseModify(%q) = %v, want ErrUnsupported", m, s, err)
		}
	}
	// An invalid state or MTU does not turn into a valid one.
	bad := Attr{QPState: 9, PathMTU: 0}
	for _, m := range []AttrMask{MaskState, MaskPathMTU} {
		if s := FormatModify(&bad, m); s != "" {
			if _, _, err := ParseModify(s); err == nil {
				t.Errorf("%v: invalid value %q parsed", m, s)
			}
		}
	}
}
