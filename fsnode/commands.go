package fsnode

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"unicode"

	"github.com/hanwen/go-fuse/v2/fs"
	"golang.org/x/sys/unix"

	"rdmafs/device"
	"rdmafs/qp"
	"rdmafs/ring"
)

// clip shortens user input quoted back in a message.
func clip(s string) string {
	const max = 64
	if len(s) <= max {
		return s
	}
	i := max
	for i > 0 && !utf8RuneStart(s[i]) {
		i--
	}
	return s[:i] + "..."
}

func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }

// splitCommand splits a control write into its first word and the rest.
func splitCommand(text string) (cmd, rest string) {
	text = strings.TrimSpace(text)
	i := strings.IndexFunc(text, unicode.IsSpace)
	if i < 0 {
		return text, ""
	}
	return text[:i], strings.TrimSpace(text[i:])
}

// oneNumber parses the single token key=N of a resize or an SRQ modify
// (N decimal or 0x hex, 32 bits), in qp's error vocabulary.
func oneNumber(rest, key string) (uint32, error) {
	fields := strings.Fields(rest)
	if len(fields) != 1 {
		return 0, &qp.Error{Key: key, Msg: fmt.Sprintf("want exactly one token %s=N, got %d", key, len(fields))}
	}
	k, v, ok := strings.Cut(fields[0], "=")
	switch {
	case !ok:
		return 0, &qp.Error{Key: clip(fields[0]), Msg: "not a key=value token"}
	case k != key:
		return 0, &qp.Error{Key: clip(k), Msg: "unknown key (want " + key + ")"}
	}
	digits, base := v, 10
	if len(v) > 2 && (v[:2] == "0x" || v[:2] == "0X") {
		digits, base = v[2:], 16
	}
	n, err := strconv.ParseUint(digits, base, 32)
	if err != nil {
		return 0, &qp.Error{Key: key, Msg: fmt.Sprintf("not a 32-bit number: %q", clip(v))}
	}
	return uint32(n), nil
}

// postLines posts one work request a line, in order, and stops at the
// first line that does not parse or post: the ones before it stay posted
// (bad_wr). Errors name the line.
func postLines[W any](op, text string, parse func(string) (W, error), post func([]W) (int, error)) error {
	var (
		wrs    []W
		lineNo []int
		perr   error
	)
	for i, l := range strings.Split(text, "\n") {
		if strings.TrimSpace(l) == "" {
			continue
		}
		w, err := parse(l)
		if err != nil {
			perr = fmt.Errorf("line %d: %w", i+1, err)
			break
		}
		wrs = append(wrs, w)
		lineNo = append(lineNo, i+1)
	}
	if len(wrs) == 0 && perr == nil {
		return invalid(op, "no work request in the write")
	}
	if len(wrs) > 0 {
		n, err := post(wrs)
		if err != nil {
			if n >= 0 && n < len(lineNo) {
				return fmt.Errorf("line %d: %w", lineNo[n], err)
			}
			return err
		}
	}
	return perr
}

// cqRingWrite: a CQ has no doorbell (the device produces into it).
func cqRingWrite(ctx context.Context, p []byte, off int64) (int, error) {
	return 0, invalid("cq_ring", "a CQ ring takes no writes (map it to consume completions)")
}

// replaceRing swaps the ring file of a resized CQ or SRQ for one on its
// new ring reg, and tells the kernel to forget the old name so the next
// open finds the new file; open handles and mappings of the old one keep
// the old memory. Preconditions: the object's ringMu is held.
func (t *tree) replaceRing(ctx context.Context, o *object, op string, reg *ring.Region,
	write func(context.Context, []byte, int64) (int, error), cur **shared) error {
	ow := o.owner
	ow.perm = 0600
	s, err := newShared(ow, reg.Fd(), uint64(reg.Size()))
	if err != nil {
		return &device.Error{Op: op, Errno: syscall.ENOMEM, Err: err}
	}
	s.read, s.write = preadFd, write
	d := &o.dir.Inode
	ch := d.NewPersistentInode(ctx, s, fs.StableAttr{Mode: syscall.S_IFREG})
	d.AddChild("ring", ch, true)
	(*cur).close()
	*cur = s
	d.NotifyEntry("ring")
	return nil
}

// channel is a CQ's completion channel: a FIFO in the runtime directory,
// owned like the CQ, that the daemon holds open read-write (so readers
// never see end of file) and writes one line to per completion event,
// without blocking: when the FIFO is full, events are dropped, as the
// reader only needs to know that one happened.
type channel struct {
	path string
	f    *os.File
	// stop, when set, ends the goroutine that writes to the FIFO (a CM
	// event channel's); closeChannel calls it before closing the file.
	stop func()
}

func (t *tree) newChannel(handle uint32, uid, gid uint32) (*channel, error) {
	return t.newFIFO(fmt.Sprintf("cq%d", handle), uid, gid)
}

// newFIFO makes a FIFO called name in the runtime directory, owned by
// uid and gid (0600), and holds it open read-write without blocking.
func (t *tree) newFIFO(name string, uid, gid uint32) (*channel, error) {
	path := filepath.Join(t.runtimeDir, name)
	os.Remove(path) // a stale one from an earlier mount
	if err := unix.Mkfifo(path, 0600); err != nil {
		return nil, fmt.Errorf("channel: mkfifo %s: %w", path, err)
	}
	if err := os.Chown(path, int(uid), int(gid)); err != nil {
		os.Remove(path)
		return nil, fmt.Errorf("channel: %w", err)
	}
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		os.Remove(path)
		return nil, fmt.Errorf("channel: open %s: %w", path, err)
	}
	ch := &channel{path: path, f: os.NewFile(uintptr(fd), path)}
	t.mu.Lock()
	t.channels[ch] = true
	t.mu.Unlock()
	return ch, nil
}

// signal writes line to the FIFO if there is room; it never blocks.
func (c *channel) signal(line []byte) {
	rc, err := c.f.SyscallConn()
	if err != nil {
		return
	}
	rc.Write(func(fd uintptr) bool {
		unix.Write(int(fd), line)
		return true // never wait for room
	})
}

func (t *tree) closeChannel(c *channel) {
	t.mu.Lock()
	live := t.channels[c]
	delete(t.channels, c)
	t.mu.Unlock()
	if live {
		if c.stop != nil {
			c.stop()
		}
		c.f.Close()
		os.Remove(c.path)
	}
}

// closeChannels closes every channel (at unmount).
func (t *tree) closeChannels() {
	t.mu.Lock()
	var cs []*channel
	for c := range t.channels {
		cs = append(cs, c)
	}
	t.mu.Unlock()
	for _, c := range cs {
		t.closeChannel(c)
	}
}

// parseMcast parses attach_mcast's and detach_mcast's arguments: gid=G
// (a multicast GID in IPv6 text form) and lid=N (the multicast LID; 0 on
// a RoCE port, where it means nothing).
func parseMcast(cmd, rest string) (gid [16]byte, lid uint16, err error) {
	haveGID := false
	for _, f := range strings.Fields(rest) {
		k, v, ok := strings.Cut(f, "=")
		switch {
		case !ok:
			return gid, 0, &qp.Error{Key: clip(f), Msg: "not a key=value token (" + cmd + " gid=G lid=N)"}
		case k == qp.KeyGID:
			if gid, err = qp.ParseGID(v); err != nil {
				return gid, 0, &qp.Error{Key: qp.KeyGID, Msg: fmt.Sprintf("not a GID: %q", clip(v))}
			}
			haveGID = true
		case k == qp.KeyLID:
			digits, base := v, 10
			if len(v) > 2 && (v[:2] == "0x" || v[:2] == "0X") {
				digits, base = v[2:], 16
			}
			n, perr := strconv.ParseUint(digits, base, 16)
			if perr != nil {
				return gid, 0, &qp.Error{Key: qp.KeyLID, Msg: fmt.Sprintf("not a 16-bit number: %q", clip(v))}
			}
			lid = uint16(n)
		default:
			return gid, 0, &qp.Error{Key: clip(k), Msg: "unknown key (want gid, lid)"}
		}
	}
	if !haveGID {
		return gid, 0, &qp.Error{Key: qp.KeyGID, Msg: "missing (" + cmd + " gid=G lid=N)"}
	}
	return gid, lid, nil
}
