package fsnode_test

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
)

// Text files stat as the length of their content (as a read would return
// it now), so `[ -s error ]` tells an empty error file from one with a
// reason in it; the size is never cached (it changes right after a failed
// command); a user who may not read a file sees 0; streams, control files
// and rings keep the sizes they had.
func TestTextFileSizes(t *testing.T) {
	m := mount(t)
	s := m.setup()
	size := func(parts ...string) int64 {
		t.Helper()
		st, err := os.Stat(m.path(parts...))
		if err != nil {
			t.Fatal(err)
		}
		return st.Size()
	}
	for _, p := range [][]string{
		{"README"}, {"device"}, {"port"}, {"faults"},
		{"qp", s.qa, "attr"}, {"qp", s.qa, "state"}, {"qp", s.qa, "counters"},
		{"mr", s.mrA, "attr"}, {"cq", s.cq, "attr"}, {"pd", s.pd, "attr"},
	} {
		content := m.read(p...)
		if got := size(p...); got != int64(len(content)) || got == 0 {
			t.Errorf("%s: stat size %d, content %d bytes", strings.Join(p, "/"), got, len(content))
		}
	}
	// README is longer than a page: cat and a single large read get all of it.
	if n := len(m.read("README")); n <= 4096 {
		t.Logf("README is %d bytes", n)
	}
	out, stderr, err := bash(0, fmt.Sprintf(`e=%s
[ -s "$e" ] && echo before=nonempty || echo before=empty
echo "modify qp_state=BOGUS" > %s 2>/dev/null
[ -s "$e" ] && echo after=nonempty || echo after=empty
read -r line < "$e"; echo "read=$line"
echo "size=$(stat -c %%s "$e")"
cat "$e" | wc -c`, m.path("qp", s.qa, "error"), m.path("qp", s.qa, "ctl")))
	if err != nil {
		t.Fatalf("%v %s", err, stderr)
	}
	errText := m.read("qp", s.qa, "error")
	want := fmt.Sprintf("before=empty\nafter=nonempty\nread=%s\nsize=%d\n%d\n", strings.TrimSpace(errText), len(errText), len(errText))
	if out != want {
		t.Errorf("shell sees\n%s\nwant\n%s", out, want)
	}
	// A size that changes right away: a shorter reason is seen at once.
	m.write("modify x=1\n", "qp", s.qa, "ctl")
	if got, n := size("qp", s.qa, "error"), len(m.read("qp", s.qa, "error")); got != int64(n) {
		t.Errorf("error: size %d right after a new reason of %d bytes", got, n)
	}
	// An open file reads what was there at open, whole, whatever the size
	// says now (direct I/O: the kernel does not cut reads at st_size).
	f, err := os.Open(m.path("qp", s.qa, "error"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m.write("modify qp_state=ERR path_mtu=1024 sq_psn=1 rq_psn=1 dest_qp_num=77 bogus=1\n", "qp", s.qa, "ctl")
	m.write("modify y=1\n", "qp", s.qa, "ctl")
	b := make([]byte, 4096)
	n, _ := f.Read(b)
	if got := string(b[:n]); !strings.Contains(got, "x: unknown key") {
		t.Errorf("read of a handle opened before: %q", got)
	}

	// Another user: 0 for what it cannot read, the size of what it can.
	for _, c := range []struct {
		parts []string
		zero  bool
	}{{[]string{"qp", s.qa, "attr"}, true}, {[]string{"qp", s.qa, "counters"}, true}, {[]string{"qp", s.qa, "state"}, false}, {[]string{"device"}, false}} {
		out, stderr, err := bash(nobody, "stat -c %s "+m.path(c.parts...))
		if err != nil {
			t.Fatalf("%v %s", err, stderr)
		}
		got := strings.TrimSpace(out)
		if c.zero && got != "0" || !c.zero && got != fmt.Sprint(len(m.read(c.parts...))) {
			t.Errorf("uid %d: %s stats as %s", nobody, strings.Join(c.parts, "/"), got)
		}
	}
	// Streams, control files and rings are unchanged.
	for _, p := range [][]string{{"events"}, {"capture"}, {"qp", s.qa, "ctl"}, {"qp", s.qa, "post_send"}, {"cq", s.cq, "poll"}, {"pd", "new"}} {
		if got := size(p...); got != 0 {
			t.Errorf("%s: size %d, want 0", strings.Join(p, "/"), got)
		}
	}
	var st syscall.Stat_t
	if err := syscall.Stat(m.path("qp", s.qa, "sq"), &st); err != nil || st.Size < 4096 {
		t.Errorf("sq: size %d, %v", st.Size, err)
	}
}
