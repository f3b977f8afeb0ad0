package qp_test

import (
	"bytes"
	"os"
	"slices"
	"testing"

	"rdmafs/qp"
	"rdmafs/qp/internal/ctext"
)

// TestCTextFresh: libibverbs/rdmafs-text.h is what go generate writes from
// this package's names now; a stale one would make the C library miss or
// misname events.
func TestCTextFresh(t *testing.T) {
	const path = "../libibverbs/rdmafs-text.h"
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go generate ./qp)", err)
	}
	if want := ctext.Generate(); !bytes.Equal(got, want) {
		t.Fatalf("%s is stale: run go generate ./qp\nhave:\n%s\nwant:\n%s", path, got, want)
	}
}

// TestModifyKeysCoverParser: the table the C library writes modify
// commands from names every key ParseModify takes, each under the bit it
// sets, and every named bit is either settable or refused as unsupported.
func TestModifyKeysCoverParser(t *testing.T) {
	var settable qp.AttrMask
	seen := map[string]bool{}
	for _, mk := range qp.ModifyKeys() {
		if settable&mk.Bit != 0 {
			t.Errorf("bit %v listed twice", mk.Bit)
		}
		settable |= mk.Bit
		for _, k := range mk.Keys {
			if seen[k] {
				t.Errorf("key %s under two bits", k)
			}
			seen[k] = true
			if _, m, err := qp.ParseModify(k + "=1"); k != "dgid" && (err != nil || m != mk.Bit) {
				t.Errorf("%s=1: mask %v, %v; want %v", k, m, err, mk.Bit)
			}
		}
	}
	for _, k := range qp.AttrKeys() {
		if !seen[k] && !slices.Contains(qp.AttrFileKeys, k) {
			t.Errorf("attr key %s is neither a modify key nor an identity key", k)
		}
	}
	if settable&qp.MaskUnsupported != 0 {
		t.Errorf("unsupported bits %v are settable", settable&qp.MaskUnsupported)
	}
	for _, b := range []qp.AttrMask{qp.MaskState, qp.MaskAV, qp.MaskCap, qp.MaskDestQPN} {
		if settable&b == 0 {
			t.Errorf("%v is not settable", b)
		}
	}
}
