package qp

import (
	"fmt"
	"strconv"
	"strings"
)

func equalFold(a, b string) bool { return strings.EqualFold(a, b) }

type flagName struct {
	bit  uint32
	name string
}

// formatFlags prints set bits as a comma list of names; unknown bits as hex;
// the empty set as "0" so that the output always parses back.
func formatFlags(v uint32, names []flagName) string {
	if v == 0 {
		return "0"
	}
	var parts []string
	for _, n := range names {
		if v&n.bit != 0 {
			parts = append(parts, n.name)
			v &^= n.bit
		}
	}
	if v != 0 {
		parts = append(parts, fmt.Sprintf("%#x", v))
	}
	return strings.Join(parts, ",")
}

// parseFlags accepts a comma list of names and numbers ("local_write,0x4"),
// a lone number, or "0"/"" for none.
func parseFlags(s string, names []flagName) (uint32, error) {
	var v uint32
	if s == "" {
		return 0, nil
	}
next:
	for _, part := range strings.Split(s, ",") {
		if part == "" {
			return 0, fmt.Errorf("empty flag in %q", s)
		}
		for _, n := range names {
			if strings.EqualFold(part, n.name) {
				v |= n.bit
				continue next
			}
		}
		n, err := strconv.ParseUint(part, 0, 32)
		if err != nil {
			return 0, fmt.Errorf("unknown flag %q", part)
		}
		v |= uint32(n)
	}
	return v, nil
}
