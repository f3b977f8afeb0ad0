package fsnode

import (
	"context"
	"strings"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"

	"rdmafs/device"
)

// faultsFile is the root file "faults": write "drop=P dup=P delay=P
// delay_us=N reorder=P seed=N [qp=N]" or "off" to the device's fault
// injector; read the setting and what it did. It belongs to root (0644):
// the injector acts on every user's traffic.
func (t *tree) faultsFile() *file {
	f := &file{owner: owner{perm: 0644, born: t.born}, readable: true, writable: true}
	f.text = t.faultsText
	f.open = func(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
		done := false
		h := &stream{}
		h.fill = func(ctx context.Context, n int) ([]byte, error) {
			if done {
				return nil, nil
			}
			done = true
			return []byte(t.faultsText()), nil
		}
		h.write = func(ctx context.Context, data []byte) (uint32, syscall.Errno) {
			text, err := textOf("faults", data)
			if err == nil {
				var f device.Faults
				if f, err = device.ParseFaults(text); err == nil {
					err = t.dev.SetFaults(f)
				}
			}
			if err != nil {
				return 0, errnoOf(err)
			}
			return uint32(len(data)), 0
		}
		return h, openStream, 0
	}
	return f
}

// faultsText is what a read of faults returns: the setting, then the
// injector's counters.
func (t *tree) faultsText() string {
	var b strings.Builder
	b.WriteString(t.dev.Faults().String() + "\n")
	for _, c := range t.dev.Counters.List() {
		if strings.HasPrefix(c.Name, "fault_") {
			b.WriteString(countersText([]device.Counter{c}))
		}
	}
	return b.String()
}
