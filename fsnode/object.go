package fsnode

import (
	"context"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"golang.org/x/sys/unix"
)

// object is the fsnode side of one verbs object: its directory, the last
// error of a command on it, and how to destroy it.
type object struct {
	owner
	kind, name string
	dir        *dir
	logf       logFunc // the daemon's log; nil logs nothing

	// destroy is the verb (dealloc_pd, destroy_qp, ...); cleanup releases
	// fsnode's resources (memfd duplicates, the channel FIFO) after it
	// succeeded.
	destroy func() error
	cleanup []func()
	// expire, when set, is what a lease does instead of destroy (a CM
	// channel takes its ids with it).
	expire func() error
	// gone is set once destroy succeeded (a lease drops the object).
	gone atomic.Bool

	mu      sync.Mutex
	lastErr string // lockcheck:guarded mu
}

// fail records err as the object's last error and returns its errno.
func (o *object) fail(op string, err error) syscall.Errno {
	r := reason(op, err)
	o.mu.Lock()
	o.lastErr = r
	o.mu.Unlock()
	e := errnoOf(err)
	o.logf.refused(op, o.kind+"/"+o.name, e, r)
	return e
}

// logFunc is the daemon's log, a printf.
type logFunc func(format string, args ...any)

// refused logs a command refused on the file of what, with its errno and
// reason, as the daemon's log reports refused inputs. An interrupted one
// (EINTR: the caller gave up) was not refused.
func (f logFunc) refused(op, what string, e syscall.Errno, reason string) {
	if f == nil || e == syscall.EINTR {
		return
	}
	name := unix.ErrnoName(e)
	if name == "" {
		name = e.Error()
	}
	f("refused %s on %s: %s: %s", op, what, name, reason)
}

// record is fail for paths that return an error rather than an errno.
func (o *object) record(op string, err error) error {
	o.mu.Lock()
	o.lastErr = reason(op, err)
	o.mu.Unlock()
	return err
}

func (o *object) errorText() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.lastErr == "" {
		return ""
	}
	return o.lastErr + "\n"
}

// entry is one file of an object directory.
type entry struct {
	name string
	node fs.InodeEmbedder
	mode uint32 // S_IFREG, S_IFLNK
}

// fileNode builds a plain file owned like o with perm.
func (o *object) fileNode(perm uint32, readable, writable bool,
	open func(context.Context, uint32) (fs.FileHandle, uint32, syscall.Errno)) *file {
	f := &file{owner: o.owner, readable: readable, writable: writable, open: open}
	f.perm = perm
	return f
}

// roFile is a text file rendered at open that anyone may read (state,
// error): it shows nothing another user could aim with.
func (o *object) roFile(render func() string) entry {
	return o.textEntry(0644, render)
}

// privFile is a text file rendered at open that only the owner (and root)
// may read (attr, counters): keys, PSNs and the counters that follow them
// are capabilities, whoever reads them can aim a QP at the object.
func (o *object) privFile(render func() string) entry {
	return o.textEntry(0600, render)
}

func (o *object) textEntry(perm uint32, render func() string) entry {
	ow := o.owner
	ow.perm = perm
	return entry{node: textFile(ow, render), mode: syscall.S_IFREG}
}

// cmdFile is a write-only control file.
func (o *object) cmdFile(op string, do func(ctx context.Context, text string) error) entry {
	return entry{node: o.fileNode(0600, false, true, commandFile(op, o, do)), mode: syscall.S_IFREG}
}

func named(name string, e entry) entry { e.name = name; return e }
