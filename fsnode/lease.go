package fsnode

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// The root file "lease" ties objects to the life of a program. A program
// opens it, and after creating each object writes its name ("qp 17") into
// that descriptor. When the last copy of the descriptor is closed (the
// program closed it or exited, however it died) the kernel releases the
// handle and every object named in it is destroyed, QPs first, PDs last,
// as rmdir would. Objects nobody leased (a shell's) live until rmdir.

// leaseOrder is the destruction order: dependents before what they use.
var leaseOrder = map[string]int{"qp": 0, "srq": 1, "ah": 2, "mw": 3, "mr": 4, "cq": 5, "pd": 6}

type leased struct{ kind, name string }

type leaseHandle struct {
	t   *tree
	uid uint32

	mu     sync.Mutex
	held   []leased // guarded by mu
	cursor int      // read position in the listing (the file is not seekable); guarded by mu
}

var (
	_ = (fs.FileWriter)((*leaseHandle)(nil))
	_ = (fs.FileReader)((*leaseHandle)(nil))
	_ = (fs.FileReleaser)((*leaseHandle)(nil))
)

func (t *tree) leaseFile() *file {
	f := &file{owner: owner{perm: 0666, born: t.born}, readable: true, writable: true}
	f.open = func(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
		uid, _ := caller(ctx)
		return &leaseHandle{t: t, uid: uid}, openStream, 0
	}
	return f
}

// Write adopts objects, one "KIND NAME" a line. Only the caller's own
// objects may be leased.
func (h *leaseHandle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	const op = "lease"
	text, err := textOf(op, data)
	if err != nil {
		return 0, errnoOf(err)
	}
	var add []leased
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) != 2 {
			return 0, errnoOf(invalid(op, "%q: want KIND NAME", line))
		}
		kd := h.t.kinds[f[0]]
		if kd == nil {
			return 0, errnoOf(invalid(op, "%q: unknown kind %q", line, f[0]))
		}
		o := objectIn(kd, f[1])
		if o == nil {
			return 0, syscall.ENOENT
		}
		if h.uid != 0 && o.uid != h.uid {
			return 0, syscall.EACCES
		}
		add = append(add, leased{f[0], f[1]})
	}
	h.mu.Lock()
	h.held = append(h.held, add...)
	h.mu.Unlock()
	return uint32(len(data)), 0
}

// Read lists what the lease holds, one "KIND NAME" a line; after the end
// of the list one read returns end of file and the next starts over.
func (h *leaseHandle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var b strings.Builder
	for _, l := range h.held {
		fmt.Fprintf(&b, "%s %s\n", l.kind, l.name)
	}
	s := b.String()
	if h.cursor >= len(s) {
		h.cursor = 0
		return fuse.ReadResultData(nil), 0
	}
	n := copy(dest, s[h.cursor:])
	h.cursor += n
	return fuse.ReadResultData(dest[:n]), 0
}

// Release runs when the last descriptor of the open file is gone.
func (h *leaseHandle) Release(ctx context.Context) syscall.Errno {
	h.mu.Lock()
	held := h.held
	h.held = nil
	h.mu.Unlock()
	if len(held) > 0 {
		// Kernel notifications must not be sent from inside a request.
		go h.t.expire(held)
	}
	return 0
}

// objectIn finds the object directory NAME in kind directory kd.
func objectIn(kd *dir, name string) *object {
	ch := kd.GetChild(name)
	if ch == nil {
		return nil
	}
	d, ok := ch.Operations().(*dir)
	if !ok {
		return nil
	}
	return d.obj
}

// expire destroys leased objects in dependency order; ones already gone
// are skipped, ones still in use by someone else's objects stay (EBUSY).
func (t *tree) expire(held []leased) {
	sort.SliceStable(held, func(i, j int) bool { return leaseOrder[held[i].kind] < leaseOrder[held[j].kind] })
	for _, l := range held {
		kd := t.kinds[l.kind]
		o := objectIn(kd, l.name)
		if o == nil {
			continue
		}
		if err := o.destroy(); err != nil {
			o.record("lease", err)
			continue
		}
		for _, c := range o.cleanup {
			c()
		}
		kd.RmChild(l.name)
		kd.NotifyEntry(l.name)
	}
}
