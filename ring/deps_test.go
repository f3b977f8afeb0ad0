package ring

import (
	"go/build"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// TestNoFUSE: ring is shared with the client library and must not pull in
// go-fuse, directly or through another rdmafs package. Only the module's
// own packages are followed; go/build reads imports without running go.
func TestNoFUSE(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	var walk func(pkg, dir string)
	walk = func(pkg, dir string) {
		if seen[pkg] {
			return
		}
		seen[pkg] = true
		p, err := build.ImportDir(dir, 0)
		if err != nil {
			t.Fatalf("%s: %v", pkg, err)
		}
		for _, imp := range p.Imports {
			if strings.Contains(imp, "go-fuse") {
				t.Errorf("%s imports %s", pkg, imp)
			}
			if rest, ok := strings.CutPrefix(imp, "rdmafs/"); ok {
				walk(imp, filepath.Join(root, filepath.FromSlash(rest)))
			}
		}
	}
	walk("rdmafs/ring", ".")
}

// TestUnsafeFileNames: only *_unsafe.go files may import unsafe.
func TestUnsafeFileNames(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_unsafe.go") || strings.HasSuffix(f, "_unsafe_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range af.Imports {
			if imp.Path.Value == `"unsafe"` {
				t.Errorf("%s imports unsafe; name it *_unsafe.go", f)
			}
		}
	}
}
