package device

import (
	"os/exec"
	"strings"
	"testing"
)

// The device core, the vocabulary and the ring ABI never depend on FUSE
// (DESIGN.md §1): only fsnode/ knows go-fuse.
func TestNoFUSEDependency(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	out, err := exec.Command("go", "list", "-deps", "rdmafs/device", "rdmafs/qp", "rdmafs/ring").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 3 {
		t.Fatalf("go list printed too little: %q", out)
	}
	for _, p := range deps {
		if strings.HasPrefix(p, "github.com/hanwen/go-fuse") {
			t.Errorf("%s is a dependency of the device core", p)
		}
	}
}
