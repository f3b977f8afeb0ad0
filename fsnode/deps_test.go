package fsnode_test

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestOnlyFsnodeImportsFUSE enforces the fence of DESIGN.md §1: the device
// core and its vocabulary never depend on go-fuse.
func TestOnlyFsnodeImportsFUSE(t *testing.T) {
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	for _, pkg := range []string{"rdmafs/device", "rdmafs/qp", "rdmafs/ring", "rdmafs/clock"} {
		out, err := exec.Command(gobin, "list", "-deps", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			if strings.HasPrefix(dep, "github.com/hanwen/go-fuse") {
				t.Errorf("%s depends on %s", pkg, dep)
			}
		}
	}
}
