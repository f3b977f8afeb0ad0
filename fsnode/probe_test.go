package fsnode_test

import (
	"strings"
	"syscall"
	"testing"
	"time"
)

// `echo probe > qp/N/ctl` checks a connected RC QP from a shell: the
// outcome shows in counters, no completion appears, and a probe the QP
// cannot send is refused with its reason.
func TestProbeFromShell(t *testing.T) {
	m := mount(t)
	s := m.setup()
	if err := m.write("probe", "qp", s.qa, "ctl"); errnoOf(err) != syscall.EINVAL {
		t.Fatalf("probe in RESET: %v, want EINVAL", err)
	}
	if r := m.lastError("qp", s.qa, "ctl"); !strings.Contains(r, "needs RTS") {
		t.Fatalf("error file after a refused probe: %q", r)
	}
	m.connect(s)
	if got := m.attrs("device")["reserved_operations"]; got != "2" {
		t.Fatalf("device reserved_operations=%q, want 2", got)
	}
	for i := 0; i < 5; i++ {
		m.mustWrite("probe", "qp", s.qa, "ctl")
		deadline := time.Now().Add(5 * time.Second)
		for m.attrs("qp", s.qa, "counters")["probes_ok"] != string(rune('1'+i)) {
			if time.Now().After(deadline) {
				t.Fatalf("probe %d not acknowledged: %v", i+1, m.attrs("qp", s.qa, "counters"))
			}
			time.Sleep(time.Millisecond)
		}
	}
	c := m.attrs("qp", s.qa, "counters")
	if c["probes"] != "5" || c["probes_failed"] != "0" || c["probe_rtt_us"] == "" {
		t.Fatalf("counters after 5 probes: %v", c)
	}
	if got := m.read("cq", s.cq, "poll"); got != "" {
		t.Fatalf("a probe completed to the user's CQ: %q", got)
	}
	if err := m.write("probe now", "qp", s.qa, "ctl"); errnoOf(err) != syscall.EINVAL {
		t.Fatalf("probe with an argument: %v, want EINVAL", err)
	}
	if st := m.state(s.qa); st != "RTS" {
		t.Fatalf("qp state %s after probes", st)
	}
}
