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

	"rdmafs/device"
)

// The root file "lease" ties objects to the life of a program. A program
// opens it, and after creating each object writes its name ("qp 17") into
// that descriptor. When the last copy of the descriptor is closed (the
// program closed it or exited, however it died) the kernel releases the
// handle and every object named in it is destroyed, QPs first, PDs last,
// as rmdir would. Objects nobody leased (a shell's) live until rmdir.
//
// A lease is bounded: naming an object it already holds changes nothing,
// an object destroyed meanwhile drops out of it, and one open file holds
// at most tree.maxLease objects (Options.MaxLease; by default the sum of
// the device's object limits). A write that would go beyond is ENOSPC and
// adds nothing. The reason of a failed write is the listing's last line,
// "error: REASON", until the next write succeeds.

// leaseOrder is the destruction order: dependents before what they use.
// CM ids go first (their peers get REJ or DREQ while the QP still
// exists), then their event channels.
var leaseOrder = map[string]int{"cm": -2, "cm_channel": -1, "qp": 0, "srq": 1, "ah": 2, "mw": 3, "mr": 4, "cq": 5, "pd": 6}

type leased struct {
	kind, name string
	obj        *object
}

type leaseHandle struct {
	t *tree

	mu     sync.Mutex
	held   []leased             // in the order leased; lockcheck:guarded mu
	has    map[*object]struct{} // the objects in held; lockcheck:guarded mu
	failed string               // the last failed write's reason; lockcheck:guarded mu
	cursor int                  // read position in the listing (the file is not seekable); lockcheck:guarded mu
}

var (
	_ = (fs.FileWriter)((*leaseHandle)(nil))
	_ = (fs.FileReader)((*leaseHandle)(nil))
	_ = (fs.FileReleaser)((*leaseHandle)(nil))
)

func (t *tree) leaseFile() *file {
	f := &file{owner: owner{perm: 0666, born: t.born}, readable: true, writable: true}
	f.open = func(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
		return &leaseHandle{t: t, has: map[*object]struct{}{}}, openStream, 0
	}
	return f
}

// Write adopts objects, one "KIND NAME" a line, all or none. Only the
// writer's own objects may be leased (root's: any): the writer, not who
// opened the file, because an open lease is a context's command fd that a
// program may pass to another process (ibv_import_device), of another
// user perhaps, which must not adopt objects it could not destroy.
func (h *leaseHandle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	uid, _ := caller(ctx)
	n, err := h.write(data, uid)
	h.mu.Lock()
	h.failed = ""
	if err != nil {
		h.failed = reason("lease", err)
	}
	h.mu.Unlock()
	if err != nil {
		return 0, errnoOf(err)
	}
	return n, 0
}

func (h *leaseHandle) write(data []byte, uid uint32) (uint32, error) {
	const op = "lease"
	text, err := textOf(op, data)
	if err != nil {
		return 0, err
	}
	var add []leased
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) != 2 {
			return 0, invalid(op, "%q: want KIND NAME", clip(line))
		}
		kd := h.t.kinds[f[0]]
		if kd == nil {
			return 0, invalid(op, "%q: unknown kind %q", clip(line), clip(f[0]))
		}
		o := objectIn(kd, f[1])
		if o == nil {
			return 0, &device.Error{Op: op, Errno: syscall.ENOENT, Err: fmt.Errorf("no %s %q", f[0], clip(f[1]))}
		}
		if uid != 0 && o.uid != uid {
			return 0, &device.Error{Op: op, Errno: syscall.EACCES, Err: fmt.Errorf("%s %s belongs to another user", f[0], f[1])}
		}
		add = append(add, leased{f[0], f[1], o})
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	var fresh []leased
	seen := map[*object]struct{}{}
	for _, l := range add {
		if _, ok := h.has[l.obj]; ok {
			continue
		}
		if _, ok := seen[l.obj]; ok {
			continue
		}
		seen[l.obj] = struct{}{}
		fresh = append(fresh, l)
	}
	if len(h.held)+len(fresh) > h.t.maxLease {
		h.pruneLocked()
		if len(h.held)+len(fresh) > h.t.maxLease {
			return 0, &device.Error{Op: op, Errno: syscall.ENOSPC,
				Err: fmt.Errorf("this lease holds %d objects; %d more exceed its limit of %d (open another lease file)", len(h.held), len(fresh), h.t.maxLease)}
		}
	}
	for _, l := range fresh {
		h.held = append(h.held, l)
		h.has[l.obj] = struct{}{}
	}
	return uint32(len(data)), nil
}

// pruneLocked drops the objects destroyed since they were leased.
func (h *leaseHandle) pruneLocked() {
	kept := h.held[:0]
	for _, l := range h.held {
		if l.obj.gone.Load() {
			delete(h.has, l.obj)
			continue
		}
		kept = append(kept, l)
	}
	clear(h.held[len(kept):])
	h.held = kept
}

// Read lists what the lease holds, one "KIND NAME" a line (and the reason
// of a failed last write); after the end of the list one read returns end
// of file and the next starts over.
func (h *leaseHandle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cursor == 0 {
		h.pruneLocked()
	}
	var b strings.Builder
	for _, l := range h.held {
		fmt.Fprintf(&b, "%s %s\n", l.kind, l.name)
	}
	if h.failed != "" {
		fmt.Fprintf(&b, "error: %s\n", h.failed)
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
	h.held, h.has = nil, nil
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
		if o == nil || o != l.obj {
			continue
		}
		destroy := o.destroy
		if o.expire != nil {
			destroy = o.expire
		}
		if err := destroy(); err != nil {
			o.record("lease", err)
			continue
		}
		o.gone.Store(true)
		for _, c := range o.cleanup {
			c()
		}
		kd.RmChild(l.name)
		kd.NotifyEntry(l.name)
	}
}
