package fsnode

import (
	"context"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"

	"rdmafs/device"
)

// The root file capture: each open is one packet capture of the device
// (device.OpenCapture). Reads stream a pcap file, the header first, then
// every packet the device sends or receives, blocking until there is one;
// so `cat MOUNT/capture | tshark -r -` shows the RoCE traffic live. Closing
// the file stops the capture. A reader that falls behind loses packets
// (counted in counters as capture_drops) rather than slowing the device.
// After the device is gone, reads are at end of file.
//
// Everyone may open it (0444), and each open shows its opener only the
// packets of the QPs the opener owns (sent by one of them or delivered to
// one); root, the mount's owner, sees every packet. Another user's payload
// never reaches the file. One user other than root may hold 256 opens
// (EMFILE beyond), and what its opens have not read is bounded together
// (link.Capture): opening the file many times costs the daemon little.

// captureHandle is a stream whose bytes come from one capture.
type captureHandle struct {
	stream
	c *device.CaptureReader
}

var _ = (fs.FileReleaser)((*captureHandle)(nil))

func (t *tree) openCapture(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	uid, _ := caller(ctx)
	c, err := t.dev.OpenCaptureLimited(device.Owner(uid))
	if err != nil {
		return nil, 0, errnoOf(err) // EMFILE: the user holds its most captures
	}
	h := &captureHandle{c: c}
	h.fill = func(ctx context.Context, n int) ([]byte, error) { return c.Next(ctx) }
	return h, openStream, 0
}

// Release stops the capture when the last descriptor is closed.
func (h *captureHandle) Release(ctx context.Context) syscall.Errno {
	h.c.Close()
	return 0
}

// captureFile is the root's capture node: readable by everyone, filtered
// per opener.
func (t *tree) captureFile(o owner) *file {
	return &file{owner: o, readable: true, open: t.openCapture}
}
