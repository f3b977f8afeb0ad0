package qp

import "testing"

func TestEventLineRoundTrip(t *testing.T) {
	for e := range numEvents {
		line := FormatEvent(e, "qp", 17)
		got, kind, h, err := ParseEvent(line)
		if err != nil || got != e || kind != "qp" || h != 17 {
			t.Errorf("ParseEvent(%q) = %v %q %d %v", line, got, kind, h, err)
		}
	}
	if got := FormatEvent(EventCommEst, "qp", 17); got != "event=comm_est qp=17" {
		t.Errorf("FormatEvent = %q", got)
	}
}

func TestParseEventRejects(t *testing.T) {
	for _, line := range []string{
		"", "event=comm_est", "comm_est qp=17", "event=comm_est qp=17 extra",
		"event=no_such qp=17", "event=comm_est qp", "event=comm_est qp=x", "event=comm_est qp=4294967296",
	} {
		if _, _, _, err := ParseEvent(line); err == nil {
			t.Errorf("ParseEvent(%q) accepted", line)
		}
	}
}
