package ring

import (
	"strings"
	"testing"

	"rdmafs/internal/deptest"
)

// TestNoFUSE: ring is shared with the client library and must not pull in
// go-fuse, directly or through another rdmafs package.
func TestNoFUSE(t *testing.T) {
	deptest.Walk(t, "rdmafs/ring", ".", func(pkg, imp string) {
		if strings.Contains(imp, "go-fuse") {
			t.Errorf("%s imports %s", pkg, imp)
		}
	})
}

// TestUnsafeFileNames: only *_unsafe.go files may import unsafe.
func TestUnsafeFileNames(t *testing.T) { deptest.UnsafeFileNames(t) }
