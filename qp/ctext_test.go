package qp_test

import (
	"bytes"
	"os"
	"testing"

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
