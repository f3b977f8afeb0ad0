// Package libcheck holds what the tests of the drop-in C libraries
// (libibverbs/libtest, librdmacm/libtest) share: finding the tools and the
// system library they compare against, and reading a library's dynamic
// symbol table.
package libcheck

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Need skips a test that needs a tool or file this machine lacks, except
// in CI (CI=true), which installs everything the C libraries need: there a
// missing tool fails the test.
func Need(t testing.TB, what string, ok bool) {
	t.Helper()
	if ok {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI must have %s", what)
	}
	t.Skipf("no %s", what)
}

// Tool is the path of the program name, from Debian package pkg.
func Tool(t testing.TB, name, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	Need(t, name+" ("+pkg+")", err == nil)
	return p
}

// SystemLib is the installed library soname (from Debian package pkg),
// found as the Makefiles find it, with its symlinks resolved.
func SystemLib(t testing.TB, soname, pkg string) string {
	t.Helper()
	out, err := exec.Command(Tool(t, "cc", "gcc"), "-print-file-name="+soname).Output()
	p := strings.TrimSpace(string(out))
	Need(t, "the system "+soname+" ("+pkg+")", err == nil && filepath.IsAbs(p))
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		t.Fatal(err)
	}
	return real
}

// DynSyms reads objdump -T: every symbol the library defines, as
// "FLAGS VERSION NAME" ("gDF IBVERBS_1.1 ibv_alloc_pd", a hidden version in
// parentheses), with the size appended for data objects, sorted. The
// section is left out (ours and theirs lay out differently) except that a
// version node's own symbol is marked *ABS*.
func DynSyms(t testing.TB, lib string) []string {
	t.Helper()
	out, err := exec.Command("objdump", "-T", lib).Output()
	if err != nil {
		t.Fatalf("objdump -T %s: %v", lib, err)
	}
	var syms []string
	for l := range strings.Lines(string(out)) {
		f := strings.Fields(l)
		sec := slices.IndexFunc(f, func(s string) bool {
			return strings.HasPrefix(s, ".") || strings.HasPrefix(s, "*")
		})
		if sec < 2 || len(f) != sec+4 || f[sec] == "*UND*" {
			continue
		}
		flags := strings.Join(f[1:sec], "")
		s := flags + " " + f[sec+2] + " " + f[sec+3]
		if f[sec] == "*ABS*" {
			s += " *ABS*"
		} else if strings.HasSuffix(flags, "O") {
			s += " size=" + strings.TrimLeft(f[sec+1], "0")
		}
		syms = append(syms, s)
	}
	slices.Sort(syms)
	return syms
}
