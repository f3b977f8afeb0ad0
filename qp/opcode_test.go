package qp

import (
	"fmt"
	"testing"
	"unsafe"
)

func TestOpcodeTable(t *testing.T) {
	// Typed from the brief / VERBS.md §3.2 and §4.2.
	cases := []struct {
		op      WROpcode
		types   []Type
		wc      WCOpcode
		flags   string // letters: R remote, r read, a atomic, A atomic write, w write, s send, i imm, v inv, l local
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
		{WRAtomicWrite, []Type{TypeRC}, WCAtomicWrite, "RA", 0, false, false},
	}
	if len(cases) != len(WROpcodes()) {
		t.Fatalf("test covers %d opcodes of %d", len(cases), len(WROpcodes()))
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
		}{{'R', info.Remote}, {'r', info.Read}, {'a', info.Atomic}, {'A', info.AtomicWrite}, {'w', info.Write},
			{'s', info.Send}, {'i', info.Imm}, {'v', info.Inv}, {'l', info.Local}}
		for _, f := range flags {
			if f.got != has(c.flags, f.c) {
				t.Errorf("%v: flag %c = %v", c.op, f.c, f.got)
			}
		}
		if info.SGEAccess != c.sgeAcc {
			t.Errorf("%v: sge access %v want %v", c.op, info.SGEAccess, c.sgeAcc)
		}
		if info.RdAtomic() != (has(c.flags, 'r') || has(c.flags, 'a') || has(c.flags, 'A')) {
			t.Errorf("%v: RdAtomic %v", c.op, info.RdAtomic())
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
	// 10-14 are libibverbs opcodes rdmafs has not (TSO, DRIVER1, the
	// kernel's masked atomics, FLUSH).
	for _, op := range []WROpcode{10, 11, 12, 13, 14, numWROpcodes, 0x20, 0xf0, 255} {
		if _, ok := op.Info(); ok {
			t.Errorf("%v: Info ok", op)
		}
		if op.Valid() {
			t.Errorf("%d: valid", uint8(op))
		}
		if got, want := op.String(), fmt.Sprintf("WROpcode(%d)", uint8(op)); got != want {
			t.Errorf("%d: String %q, want %q", uint8(op), got, want)
		}
		for _, typ := range allTypes {
			if op.AllowedOn(typ) {
				t.Errorf("%v allowed on %v", op, typ)
			}
		}
	}
	for _, typ := range []Type{0, 1, 5, 7, 8, TypeXRCRecv, 200} {
		if WRSend.AllowedOn(typ) {
			t.Errorf("send allowed on %v", typ)
		}
	}
}

// TestWROpcodeNumbers pins the numbers to enum ibv_wr_opcode and enum
// ibv_wc_opcode of rdma-core's verbs.h: the ring and the C library carry
// them as they are.
func TestWROpcodeNumbers(t *testing.T) {
	wr := map[WROpcode]uint8{
		WRRDMAWrite: 0, WRRDMAWriteWithImm: 1, WRSend: 2, WRSendWithImm: 3, WRRDMARead: 4,
		WRAtomicCmpAndSwp: 5, WRAtomicFetchAndAdd: 6, WRLocalInv: 7, WRBindMW: 8, WRSendWithInv: 9,
		WRAtomicWrite: 15,
	}
	all := WROpcodes()
	if len(all) != len(wr) {
		t.Fatalf("WROpcodes() = %v, want %d opcodes", all, len(wr))
	}
	for i, o := range all {
		if n, ok := wr[o]; !ok || uint8(o) != n {
			t.Errorf("%v = %d, want %d", o, uint8(o), n)
		}
		if i > 0 && all[i-1] >= o {
			t.Errorf("WROpcodes() not in order: %v", all)
		}
		if p, ok := ParseWROpcode(o.String()); !ok || p != o {
			t.Errorf("ParseWROpcode(%q) = %v, %v", o.String(), p, ok)
		}
	}
	if WCAtomicWrite != 9 || WCAtomicWrite.String() != "atomic_write" {
		t.Errorf("WCAtomicWrite = %d %q, want 9 atomic_write", uint8(WCAtomicWrite), WCAtomicWrite.String())
	}
	if o, ok := ParseWCOpcode("ATOMIC_WRITE"); !ok || o != WCAtomicWrite {
		t.Errorf("ParseWCOpcode(ATOMIC_WRITE) = %v, %v", o, ok)
	}
	if _, ok := ParseWROpcode(""); ok {
		t.Error(`ParseWROpcode("") matched a gap of the table`)
	}
}

// OpInfo is copied for every WQE the engine fetches: at 16 bytes a copy is
// one 16-byte move; at 20 it was two overlapping ones, whose reload
// stalled store forwarding (the field order keeps it at 16).
func TestOpInfoSize(t *testing.T) {
	if n := unsafe.Sizeof(OpInfo{}); n != 16 {
		t.Fatalf("OpInfo is %d bytes, want 16", n)
	}
}
