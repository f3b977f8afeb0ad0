package fsnode

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

// reason caps any message at maxReason bytes on a rune boundary, whatever
// its source quoted.
func TestReasonCapped(t *testing.T) {
	for _, msg := range []string{strings.Repeat("x", 70000), strings.Repeat("é", 5000), "a\nb\tc"} {
		got := reason("op", errors.New(msg))
		if len(got) > maxReason || !utf8.ValidString(got) || strings.ContainsAny(got, "\n\t") {
			t.Errorf("reason of %d bytes: %d bytes %.40q", len(msg), len(got), got)
		}
		if len(msg) > maxReason && !strings.HasSuffix(got, "...") {
			t.Errorf("a clipped reason does not say so: %.40q", got)
		}
	}
	if got := reason("op", errors.New("short")); got != "op: short" {
		t.Errorf("reason: %q", got)
	}
}
