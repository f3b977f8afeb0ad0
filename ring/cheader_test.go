package ring_test

import (
	"bytes"
	"fmt"
	"os"
	"testing"

	"rdmafs/ring/internal/cgen"
)

// TestCHeaderFresh: libibverbs/rdmafs-abi.h is what go generate writes
// from this package's constants now. A stale header would give the C
// library a different ABI from the daemon's.
func TestCHeaderFresh(t *testing.T) {
	want, err := cgen.Generate(".", "rdmafs/ring")
	if err != nil {
		t.Fatal(err)
	}
	const path = "../libibverbs/rdmafs-abi.h"
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go generate ./ring)", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is stale: run go generate ./ring\n%s", path, firstDiff(got, want))
	}
}

func firstDiff(got, want []byte) string {
	g, w := bytes.Split(got, []byte("\n")), bytes.Split(want, []byte("\n"))
	for i := range max(len(g), len(w)) {
		var gl, wl []byte
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if !bytes.Equal(gl, wl) {
			return fmt.Sprintf("line %d:\n  have: %s\n  want: %s", i+1, gl, wl)
		}
	}
	return ""
}
