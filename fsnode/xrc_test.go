package fsnode_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// XRC domains of files: a user reaches the domain of a file it can open
// (then also the XRC_RECV QPs in it, by open= and in its lease), and
// nothing through a descriptor it does not have; a file it cannot open
// gives it nothing.
func TestXRCDomainAccess(t *testing.T) {
	m := mount(t)
	dir := t.TempDir()
	if err := os.Chmod(dir, 0755); err != nil {
		t.Fatal(err)
	}
	readable := filepath.Join(dir, "readable")
	secret := filepath.Join(dir, "secret")
	for _, f := range []struct {
		path string
		mode os.FileMode
	}{{readable, 0644}, {secret, 0600}} {
		if err := os.WriteFile(f.path, nil, f.mode); err != nil {
			t.Fatal(err)
		}
	}
	// Root's domains on both files, through this test's descriptors, and
	// an XRC_RECV QP in each.
	var qps []string
	for _, p := range []string{readable, secret} {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		x := m.create("xrcd", fmt.Sprintf("fd=%d create=1", f.Fd()))
		if m.attrs("xrcd", x, "attr")["shared"] != "1" {
			t.Fatalf("xrcd %s is not shared", x)
		}
		qps = append(qps, m.create("qp", "qp_type=xrc_recv xrcd="+x))
	}
	out, stderr := nobodyScript(t, m, fmt.Sprintf(`
lease() { exec 8<>$M/lease; }
lease
exec 7<%s
x=$(mk xrcd "fd=7")
echo "readable xrcd=$x"
q=$(mk qp "qp_type=xrc_recv xrcd=$x open=%s")
echo "open=$q"
echo "qp $q" >&8 && echo "leased $q"
echo "qp %s" >&8 2>/dev/null && echo "leased the secret one"
y=$(mk xrcd "fd=9" 2>/dev/null)
echo "closed fd: [$y]"
exec 6<%s 2>/dev/null && echo "opened the secret file"
`, readable, qps[0], qps[1], secret))
	if !strings.Contains(out, "readable xrcd=") || strings.Contains(out, "readable xrcd=\n") ||
		!strings.Contains(out, "open="+qps[0]+"\n") || !strings.Contains(out, "leased "+qps[0]) {
		t.Fatalf("uid 65534 did not reach the domain of a file it can open:\n%s%s", out, stderr)
	}
	if strings.Contains(out, "leased the secret one") || strings.Contains(out, "opened the secret file") {
		t.Fatalf("uid 65534 reached a domain of a file it cannot open:\n%s%s", out, stderr)
	}
	if !strings.Contains(out, "closed fd: [error: ") {
		t.Fatalf("a descriptor the writer does not have:\n%s%s", out, stderr)
	}
	// The nobody's lease let go at its exit; root's creation is not
	// leased: the QP stays.
	if _, err := os.Stat(m.path("qp", qps[0])); err != nil {
		t.Fatalf("qp %s: %v", qps[0], err)
	}
}

// An XRC_RECV QP lives while a lease holds it: the maker's lease ends,
// an opener's holds it, and the opener's "close qp N" destroys it.
func TestXRCRecvLeases(t *testing.T) {
	m := mount(t)
	x := m.create("xrcd", "")
	q := m.create("qp", "qp_type=xrc_recv xrcd="+x)
	a, err := os.OpenFile(m.path("lease"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.OpenFile(m.path("lease"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for _, l := range []*os.File{a, b} {
		if _, err := fmt.Fprintf(l, "qp %s\n", q); err != nil {
			t.Fatal(err)
		}
	}
	if got := m.create("qp", "qp_type=xrc_recv xrcd="+x+" open="+q); got != q {
		t.Fatalf("open=%s answered %q", q, got)
	}
	a.Close()
	time.Sleep(50 * time.Millisecond) // the lease's end acts in the background
	if _, err := os.Stat(m.path("qp", q)); err != nil {
		t.Fatalf("the qp went with the first lease, though the second holds it: %v", err)
	}
	if _, err := fmt.Fprintf(b, "close qp 999\n"); err == nil {
		t.Fatal("close of an object the lease does not hold")
	}
	if _, err := fmt.Fprintf(b, "close qp %s\n", q); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(m.path("qp", q)); !os.IsNotExist(err) {
		t.Fatalf("the qp outlived its last holder: %v", err)
	}
	// The domain has nothing left: its handle closes.
	if err := os.Remove(m.path("xrcd", x)); err != nil {
		t.Fatal(err)
	}
}
