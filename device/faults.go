package device

import (
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Fault injection (link.FaultInjector, the top of the device's chain):
// the text form MOUNT/faults takes.

// ParseFaults reads "drop=P dup=P delay=P delay_us=N reorder=P seed=N
// qp=N" (any subset; the rest zero) or "off".
func ParseFaults(s string) (Faults, error) {
	const op = "faults"
	var f Faults
	f.DelayFor = time.Millisecond
	s = strings.TrimSpace(s)
	if s == "off" || s == "" {
		return Faults{}, nil
	}
	seen := map[string]bool{}
	for _, tok := range strings.Fields(s) {
		k, v, ok := strings.Cut(tok, "=")
		if !ok || v == "" {
			return Faults{}, errf(op, syscall.EINVAL, "%q: want key=value", tok)
		}
		if seen[k] {
			return Faults{}, errf(op, syscall.EINVAL, "%s: repeated key", k)
		}
		seen[k] = true
		prob := func(dst *float64) error {
			p, err := strconv.ParseFloat(v, 64)
			if err != nil || p < 0 || p > 1 || p != p {
				return errf(op, syscall.EINVAL, "%s: %q is not a probability in [0, 1]", k, v)
			}
			*dst = p
			return nil
		}
		var err error
		switch k {
		case "drop":
			err = prob(&f.Drop)
		case "dup":
			err = prob(&f.Dup)
		case "delay":
			err = prob(&f.Delay)
		case "reorder":
			err = prob(&f.Reorder)
		case "delay_us":
			n, perr := strconv.ParseUint(v, 0, 32)
			if perr != nil || n == 0 || n > 10_000_000 {
				err = errf(op, syscall.EINVAL, "delay_us: %q not in 1..10000000", v)
			}
			f.DelayFor = time.Duration(n) * time.Microsecond
		case "seed":
			n, perr := strconv.ParseUint(v, 0, 64)
			if perr != nil {
				err = errf(op, syscall.EINVAL, "seed: %q is not a number", v)
			}
			f.Seed = n
		case "qp":
			n, perr := strconv.ParseUint(v, 0, 32)
			if perr != nil || n > 0xFFFFFF {
				err = errf(op, syscall.EINVAL, "qp: %q is not a QPN", v)
			}
			f.QPN = uint32(n)
		default:
			err = errf(op, syscall.EINVAL, "%s: unknown key (drop dup delay delay_us reorder seed qp)", k)
		}
		if err != nil {
			return Faults{}, err
		}
	}
	return f, nil
}
