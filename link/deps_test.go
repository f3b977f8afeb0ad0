package link

import (
	"strings"
	"testing"

	"rdmafs/internal/deptest"
)

// TestNoDeviceDependency: the link is below the device core (DESIGN.md
// §1) and cannot reach it, directly or through another rdmafs package;
// the device talks to it through Endpoint and Dispatcher alone.
func TestNoDeviceDependency(t *testing.T) {
	seen := deptest.Walk(t, "rdmafs/link", ".", func(pkg, imp string) {
		if imp == "rdmafs/device" || strings.Contains(imp, "go-fuse") {
			t.Errorf("%s imports %s", pkg, imp)
		}
	})
	if !seen["rdmafs/roce"] {
		t.Errorf("the walk never reached rdmafs/roce: %v", seen)
	}
}

// TestUnsafeFileNames: only *_unsafe.go files may import unsafe.
func TestUnsafeFileNames(t *testing.T) { deptest.UnsafeFileNames(t) }
