// Package deptest holds the checks the packages' dependency tests share
// (after tailscale's tstest/deptest): which packages a package reaches,
// and where it may import unsafe.
package deptest

import (
	"go/build"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// Walk calls check for every import of pkg (the rdmafs package in dir, a
// path relative to the module root's child, as the caller's own "."), and
// of every rdmafs package it reaches, directly or not. go/build reads the
// imports of the non-test files without running go. It returns the rdmafs
// packages it visited.
func Walk(t testing.TB, pkg, dir string, check func(pkg, imp string)) map[string]bool {
	t.Helper()
	root, err := filepath.Abs(filepath.Join(dir, ".."))
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
			check(pkg, imp)
			if rest, ok := strings.CutPrefix(imp, "rdmafs/"); ok {
				walk(imp, filepath.Join(root, filepath.FromSlash(rest)))
			}
		}
	}
	walk(pkg, dir)
	return seen
}

// UnsafeFileNames fails t for every .go file in the current directory that
// imports unsafe without a name ending in _unsafe.go (gVisor's rule).
func UnsafeFileNames(t testing.TB) {
	t.Helper()
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
