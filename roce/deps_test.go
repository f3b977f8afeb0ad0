package roce

import (
	"go/build"
	"strings"
	"testing"
)

// TestStdlibOnly: roce is a leaf wire-format package. It imports only the
// standard library (so in particular never go-fuse, nor another rdmafs
// package that might), in its code and in its tests. go/build reads the
// imports without running go.
func TestStdlibOnly(t *testing.T) {
	p, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.GoFiles) == 0 {
		t.Fatal("no Go files found")
	}
	for _, list := range [][]string{p.Imports, p.TestImports, p.XTestImports} {
		for _, imp := range list {
			if imp == "rdmafs/roce" { // the external tests' own package
				continue
			}
			first, _, _ := strings.Cut(imp, "/")
			if strings.Contains(imp, "go-fuse") || strings.Contains(first, ".") || first == "rdmafs" {
				t.Errorf("roce imports %s", imp)
			}
		}
	}
}
