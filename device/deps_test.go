package device

import (
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
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

// TestNoSockets: sockets, system calls and the kernel's network are the
// link's (package link); the device core talks to them only through
// link.Endpoint. Its production files import neither x/sys/unix nor net,
// nor make a socket through syscall.
func TestNoSockets(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	n := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		n++
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		af, err := parser.ParseFile(fset, f, src, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range af.Imports {
			switch imp.Path.Value {
			case `"golang.org/x/sys/unix"`, `"net"`:
				t.Errorf("%s imports %s: that belongs in package link", f, imp.Path.Value)
			}
		}
		for _, s := range []string{"syscall.Socket", "syscall.Sendto", "syscall.Recvfrom"} {
			if strings.Contains(string(src), s) {
				t.Errorf("%s calls %s: that belongs in package link", f, s)
			}
		}
	}
	if n < 10 {
		t.Fatalf("only %d files looked at", n)
	}
}
