package fsnode

import (
	"context"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// owner is who a node belongs to and its permission bits. It never
// changes after the node is made (chmod and chown are EPERM).
type owner struct {
	uid, gid uint32
	perm     uint32 // 0777 bits
	born     time.Time
}

// caller returns the credentials of the process behind a FUSE request.
func caller(ctx context.Context) (uid, gid uint32) {
	if c, ok := fuse.FromContext(ctx); ok {
		return c.Uid, c.Gid
	}
	// Not a FUSE request: nobody.
	return 65534, 65534
}

// callerPID is the process (its thread, as FUSE names it) that made the
// request, in the daemon's pid namespace; 0 when none is visible there.
func callerPID(ctx context.Context) int {
	if c, ok := fuse.FromContext(ctx); ok {
		return int(c.Pid)
	}
	return 0
}

// allows reports whether the caller may use the node with the access bits
// want (4 read, 2 write), from the mode bits as the kernel would check them
// (the mount does not use default_permissions, so this is the check).
// Root may do anything the node supports.
func (o *owner) allows(ctx context.Context, want uint32) syscall.Errno {
	uid, gid := caller(ctx)
	if uid == 0 {
		return 0
	}
	var bits uint32
	switch {
	case uid == o.uid:
		bits = o.perm >> 6
	case gid == o.gid:
		bits = o.perm >> 3
	default:
		bits = o.perm
	}
	if bits&want != want {
		return syscall.EACCES
	}
	return 0
}

// isOwner reports whether the caller owns the node (or is root): the test
// for destroying an object.
func (o *owner) isOwner(ctx context.Context) syscall.Errno {
	uid, _ := caller(ctx)
	if uid == 0 || uid == o.uid {
		return 0
	}
	return syscall.EACCES
}

func (o *owner) fill(a *fuse.Attr, mode uint32) {
	a.Mode = mode | o.perm
	a.Uid, a.Gid = o.uid, o.gid
	a.Nlink = 1
	if mode == syscall.S_IFDIR {
		a.Nlink = 2
	}
	a.SetTimes(&o.born, &o.born, &o.born)
}

// accessWanted maps open flags to the access bits they need.
func accessWanted(flags uint32) uint32 {
	switch flags & syscall.O_ACCMODE {
	case syscall.O_WRONLY:
		return 2
	case syscall.O_RDWR:
		return 6
	default:
		return 4
	}
}

// dir is every directory of the tree: the root, the kind directories
// (pd/, qp/, ...) and the object directories (qp/17/). The tree's shape
// changes only through the */new files and rmdir of an object directory;
// every other change of names is EPERM.
type dir struct {
	fs.Inode
	owner
	obj *object // the object of an object directory, else nil
	// rmdir destroys the object named; nil where nothing may be removed.
	rmdir func(ctx context.Context, name string) syscall.Errno
}

var (
	_ = (fs.NodeGetattrer)((*dir)(nil))
	_ = (fs.NodeSetattrer)((*dir)(nil))
	_ = (fs.NodeLookuper)((*dir)(nil))
	_ = (fs.NodeRmdirer)((*dir)(nil))
	_ = (fs.NodeUnlinker)((*dir)(nil))
	_ = (fs.NodeMkdirer)((*dir)(nil))
	_ = (fs.NodeMknoder)((*dir)(nil))
	_ = (fs.NodeCreater)((*dir)(nil))
	_ = (fs.NodeRenamer)((*dir)(nil))
	_ = (fs.NodeLinker)((*dir)(nil))
	_ = (fs.NodeSymlinker)((*dir)(nil))
)

func newDir(o owner) *dir { o.perm = 0755; return &dir{owner: o} }

// attrTimeout is how long the kernel may keep the attributes of a
// directory, a ring, memory, a stream or a symlink. Text files get none:
// their size is their content's, which changes at any time.
const attrTimeout = time.Second

func (d *dir) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	d.fill(&out.Attr, syscall.S_IFDIR)
	out.SetTimeout(attrTimeout)
	return 0
}

// Lookup finds a child as go-fuse does without a Lookup, and also passes
// the child's attribute timeout on to the kernel (go-fuse would give every
// entry the mount's), so that a text file's size is never cached.
func (d *dir) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	ch := d.GetChild(name)
	if ch == nil {
		return nil, syscall.ENOENT
	}
	if ga, ok := ch.Operations().(fs.NodeGetattrer); ok {
		var a fuse.AttrOut
		if ga.Getattr(ctx, nil, &a) == 0 {
			out.Attr = a.Attr
			out.SetAttrTimeout(a.Timeout())
		}
	}
	return ch, 0
}

func (d *dir) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if in.Valid&^(fuse.FATTR_ATIME|fuse.FATTR_MTIME|fuse.FATTR_ATIME_NOW|fuse.FATTR_MTIME_NOW|fuse.FATTR_CTIME) != 0 {
		return syscall.EPERM
	}
	d.fill(&out.Attr, syscall.S_IFDIR)
	out.SetTimeout(attrTimeout)
	return 0
}

// Rmdir must be defined on every directory: go-fuse removes the child
// silently when a directory has no Rmdir.
func (d *dir) Rmdir(ctx context.Context, name string) syscall.Errno {
	if d.rmdir == nil {
		return syscall.EPERM
	}
	return d.rmdir(ctx, name)
}

// Unlink: like Rmdir, go-fuse would succeed silently without it.
func (d *dir) Unlink(ctx context.Context, name string) syscall.Errno { return syscall.EPERM }

func (d *dir) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, syscall.EPERM
}

func (d *dir) Mknod(ctx context.Context, name string, mode, dev uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, syscall.EPERM
}

func (d *dir) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	return nil, nil, 0, syscall.EPERM
}

func (d *dir) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	return syscall.EPERM
}

func (d *dir) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, syscall.EPERM
}

func (d *dir) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, syscall.EPERM
}

// file is every regular file of the tree. What it does lives in the
// handle open returns; the node holds only ownership, which opens are
// possible and the size stat reports.
type file struct {
	fs.Inode
	owner
	readable, writable bool
	// open makes the handle; it runs after the permission checks.
	open func(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno)
	// size is what stat reports (rings and memory: their length, which
	// mmap needs); nil is 0.
	size func() uint64
	// text renders a text file's content (attr, state, error, counters,
	// device, ...): stat reports its length now, to a caller who may read
	// the file (0 to others, who learn nothing from it), and the kernel
	// keeps that size for no time at all. nil for every other file.
	text func() string
}

var (
	_ = (fs.NodeGetattrer)((*file)(nil))
	_ = (fs.NodeSetattrer)((*file)(nil))
	_ = (fs.NodeOpener)((*file)(nil))
	_ = (fs.NodeFsyncer)((*file)(nil))
)

// Fsync succeeds: every write reaches the device before it returns
// (dd conv=fsync works).
func (f *file) Fsync(ctx context.Context, fh fs.FileHandle, flags uint32) syscall.Errno { return 0 }

func (f *file) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	f.fillAttr(ctx, out)
	return 0
}

func (f *file) fillAttr(ctx context.Context, out *fuse.AttrOut) {
	a := &out.Attr
	f.fill(a, syscall.S_IFREG)
	switch {
	case f.text != nil:
		// No timeout: the size follows the content.
		if f.allows(ctx, 4) == 0 {
			a.Size = uint64(len(f.text()))
		}
		return
	case f.size != nil:
		a.Size = f.size()
	}
	out.SetTimeout(attrTimeout)
}

// Setattr accepts a truncation to 0 of a writable file as a no-op, so that
// a shell's `>` redirection works, and time changes (touch) likewise. A
// truncation to any other size, chmod and chown are EPERM: the files have
// fixed sizes and owners.
func (f *file) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if in.Valid&(fuse.FATTR_MODE|fuse.FATTR_UID|fuse.FATTR_GID) != 0 {
		return syscall.EPERM
	}
	if sz, ok := in.GetSize(); ok {
		if !f.writable {
			return syscall.EACCES
		}
		if e := f.allows(ctx, 2); e != 0 {
			return e
		}
		if sz != 0 {
			return syscall.EPERM
		}
	}
	f.fillAttr(ctx, out)
	return 0
}

// Open checks what the file supports (EACCES for a write open of a
// read-only file and a read open of a write-only one, root included), then
// the caller's permission, then makes the handle.
func (f *file) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	want := accessWanted(flags)
	if want&4 != 0 && !f.readable || want&2 != 0 && !f.writable {
		return nil, 0, syscall.EACCES
	}
	if e := f.allows(ctx, want); e != 0 {
		return nil, 0, e
	}
	return f.open(ctx, flags)
}

// symlink is cq/H/channel.
type symlink struct {
	fs.Inode
	owner
	target string
}

var (
	_ = (fs.NodeGetattrer)((*symlink)(nil))
	_ = (fs.NodeReadlinker)((*symlink)(nil))
)

func (l *symlink) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	l.fill(&out.Attr, syscall.S_IFLNK)
	out.Size = uint64(len(l.target))
	out.SetTimeout(attrTimeout)
	return 0
}

func (l *symlink) Readlink(ctx context.Context) ([]byte, syscall.Errno) {
	return []byte(l.target), 0
}
