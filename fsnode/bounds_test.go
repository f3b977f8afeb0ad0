package fsnode_test

import (
	"os"
	"strings"
	"syscall"
	"testing"
	"unicode/utf8"
)

// A reason that quotes input is at most 256 bytes, in an error file or a
// */new answer, however long the bad command was.
func TestErrorReasonsBounded(t *testing.T) {
	m := mount(t)
	s := m.setup()
	srq := m.create("srq", "pd="+s.pd+" max_wr=4 max_sge=1")
	long := strings.Repeat("A", 60000)
	inputs := []string{
		long,
		"modify " + long + "=1",
		"modify qp_state=" + long,
		"modify srq_limit=" + long,
		"resize cqe=" + long,
		"opcode=" + long,
		"wr_id=1 sge=" + long,
		"wr_id=" + long,
		long + "=1",
		"next" + long,
		"modify qp_state=" + strings.Repeat("é", 30000),
	}
	files := [][]string{
		{"qp", s.qa, "ctl"}, {"qp", s.qa, "post_send"}, {"qp", s.qa, "post_recv"},
		{"cq", s.cq, "ctl"}, {"cq", s.cq, "notify"},
		{"srq", srq, "ctl"}, {"srq", srq, "post_recv"},
	}
	const limit = 256 + len("\n")
	worst := 0
	for _, f := range files {
		for _, in := range inputs {
			if err := m.write(in, f...); err == nil {
				t.Fatalf("%s accepted a %d-byte bad command", strings.Join(f, "/"), len(in))
			}
			b, err := os.ReadFile(m.path(append(append([]string{}, f[:len(f)-1]...), "error")...))
			if err != nil {
				t.Fatal(err)
			}
			worst = max(worst, len(b))
			if len(b) > limit || len(b) < 10 || !utf8.Valid(b) {
				t.Errorf("%s after %q...: error file of %d bytes: %.80q", strings.Join(f, "/"), in[:min(len(in), 20)], len(b), b)
			}
		}
	}
	for _, kind := range []string{"pd", "mr", "mw", "cq", "srq", "ah", "qp"} {
		for _, in := range inputs {
			answer, err := m.tryCreate(kind, in)
			worst = max(worst, len(answer)+1)
			if err == nil || !strings.HasPrefix(answer, "error: ") || len(answer)+1 > limit+len("error: ") {
				t.Errorf("%s/new %q...: %v, answer of %d bytes: %.80q", kind, in[:min(len(in), 20)], err, len(answer), answer)
			}
		}
	}
	t.Logf("longest reason for a 60,000-byte bad command: %d bytes", worst)
}

// Unread answers of a */new open are bounded: a writer that never reads
// gets ENOBUFS, nothing more is created, and reading makes room again.
func TestUnreadAnswersBounded(t *testing.T) {
	m := mount(t)
	f, err := os.OpenFile(m.path("pd", "new"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	failed := 0
	for {
		_, err := f.Write([]byte("bogus=1\n"))
		if errnoOf(err) == syscall.ENOBUFS {
			break
		}
		if errnoOf(err) != syscall.EINVAL {
			t.Fatalf("write %d: %v", failed, err)
		}
		if failed++; failed > 1<<20 {
			t.Fatal("a million unread answers and no ENOBUFS")
		}
	}
	// A valid creation is refused too, and creates nothing.
	if _, err := f.Write([]byte("\n")); errnoOf(err) != syscall.ENOBUFS {
		t.Fatalf("a creation past the bound: %v", err)
	}
	if m.dev.PD(1) != nil {
		t.Fatal("a pd was made past the bound")
	}
	var answers []byte
	buf := make([]byte, 4096)
	for {
		n, err := f.Read(buf)
		answers = append(answers, buf[:n]...)
		if n == 0 || err != nil {
			break
		}
	}
	lines := strings.Split(strings.TrimSuffix(string(answers), "\n"), "\n")
	t.Logf("%d failed creations wait unread (%d bytes) before ENOBUFS", failed, len(answers))
	if len(lines) != failed || !strings.HasPrefix(lines[0], "error: ") || len(answers) > 17<<10 {
		t.Fatalf("%d answers (%d bytes) for %d failed writes", len(lines), len(answers), failed)
	}
	if _, err := f.Write([]byte("\n")); err != nil {
		t.Fatalf("a creation after reading: %v", err)
	}
}
