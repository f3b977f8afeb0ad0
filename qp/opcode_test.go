package qp

import "testing"

func TestOpcodeTable(t *testing.T) {
	// Typed from the brief / VERBS.md §3.2 and §4.2.
	cases := []struct {
		op      WROpcode
		types   []Type
		wc      WCOpcode
		flags   string // letters: R remote, r read, a atomic, w write, s send, i imm, v inv, l local
		sgeAcc  Access
		rwqe    bool
		dataOut bool
	}{
		{WRRDMAWrite, []Type{TypeRC, TypeUC}, WCRDMAWrite, "Rw", 0, false, true},
		{WRRDMAWriteWithImm, []Type{TypeRC, TypeUC}, WCRDMAWrite, "Rwi", 0, true, true},
		{WRSend, []Type{TypeRC, TypeUC, TypeUD}, WCSend, "s", 0, true, true},
		{WRSendWithImm, []Type{TypeRC, TypeUC, TypeUD}, WCSend, "si", 0, true, true},
		{WRRDMARead, []Type{TypeRC}, WCRDMARead, "Rr", AccessLocalWrite, false, false},
		{WRAtomicCmpAndSwp, []Type{TypeRC}, WCCompSwap, "Ra", AccessLocalWrite, false, false},
		{WRAtomicFetchAndAdd, []Type{TypeRC}, WCFetchAdd, "Ra", AccessLocalWrite, false, false},
		{WRLocalInv, []Type{TypeRC, TypeUC}, WCLocalInv, "vl", 0, false, false},
		{WRBindMW, []Type{TypeRC, TypeUC}, WCBindMW, "l", 0, false, false},
		{WRSendWithInv, []Type{TypeRC}, WCSend, "sv", 0, true, true},
	}
	if len(cases) != int(numWROpcodes) {
		t.Fatalf("test covers %d opcodes of %d", len(cases), numWROpcodes)
	}
	has := func(s string, c byte) bool {
		for i := 0; i < len(s); i++ {
			if s[i] == c {
				return true
			}
		}
		return false
	}
	for _, c := range cases {
		info, ok := c.op.Info()
		if !ok {
			t.Fatalf("%v: no info", c.op)
		}
		got := map[Type]bool{}
		for _, typ := range allTypes {
			got[typ] = c.op.AllowedOn(typ)
		}
		for _, typ := range allTypes {
			want := false
			for _, w := range c.types {
				want = want || w == typ
			}
			if got[typ] != want {
				t.Errorf("%v on %v: allowed=%v want %v", c.op, typ, got[typ], want)
			}
		}
		if info.WC != c.wc {
			t.Errorf("%v: wc %v want %v", c.op, info.WC, c.wc)
		}
		flags := []struct {
			c   byte
			got bool
		}{{'R', info.Remote}, {'r', info.Read}, {'a', info.Atomic}, {'w', info.Write},
			{'s', info.Send}, {'i', info.Imm}, {'v', info.Inv}, {'l', info.Local}}
		for _, f := range flags {
			if f.got != has(c.flags, f.c) {
				t.Errorf("%v: flag %c = %v", c.op, f.c, f.got)
			}
		}
		if info.SGEAccess != c.sgeAcc {
			t.Errorf("%v: sge access %v want %v", c.op, info.SGEAccess, c.sgeAcc)
		}
		if info.ConsumesRWQE() != c.rwqe || info.DataOut() != c.dataOut {
			t.Errorf("%v: rwqe=%v dataOut=%v", c.op, info.ConsumesRWQE(), info.DataOut())
		}
		// The types byte agrees with AllowedOn.
		for _, typ := range allTypes {
			if (info.Types&(1<<typ) != 0) != got[typ] {
				t.Errorf("%v: Types bit for %v disagrees", c.op, typ)
			}
		}
	}
}

func TestOpcodeUnknown(t *testing.T) {
	for _, op := range []WROpcode{numWROpcodes, 11, 0x20, 0xf0, 255} {
		if _, ok := op.Info(); ok {
			t.Errorf("%v: Info ok", op)
		}
		for _, typ := range allTypes {
			if op.AllowedOn(typ) {
				t.Errorf("%v allowed on %v", op, typ)
			}
		}
	}
	for _, typ := range []Type{0, 1, 5, 7, 8, 9, 200} {
		if WRSend.AllowedOn(typ) {
			t.Errorf("send allowed on %v", typ)
		}
	}
}
