package fsnode

import (
	"context"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"rdmafs/device"
	"rdmafs/sysview"
)

// addSys adds sys/infiniband/: the device as the kernel shows one under
// /sys/class/infiniband/DEV/ (package sysview), read-only for everyone,
// computed at each read. rdmafs exec binds it into a program's mount
// namespace.
func (t *tree) addSys(ctx context.Context, parent *fs.Inode) {
	o := owner{born: t.born}
	sys := newDir(o)
	addChild(ctx, parent, "sys", sys, syscall.S_IFDIR)
	view := sysview.Tree(sysview.Source{
		Attr:     t.dev.Attr,
		Port:     t.dev.Port,
		Counters: t.dev.Counters.List,
		Addr:     t.dev.Config().Addr,
	})
	view.Name = "infiniband"
	t.addSysNode(ctx, &sys.Inode, view)
}

func (t *tree) addSysNode(ctx context.Context, parent *fs.Inode, n *sysview.Node) {
	o := owner{born: t.born, perm: 0444}
	switch {
	case n.Link != "":
		addChild(ctx, parent, n.Name, &symlink{owner: owner{born: t.born, perm: 0777}, target: n.Link}, syscall.S_IFLNK)
	case n.Dir && n.List != nil:
		addChild(ctx, parent, n.Name, &listDir{dir: *newDir(owner{born: t.born}), list: n.List}, syscall.S_IFDIR)
	case n.Dir:
		d := newDir(owner{born: t.born})
		in := addChild(ctx, parent, n.Name, d, syscall.S_IFDIR)
		for _, c := range n.Children {
			t.addSysNode(ctx, in, c)
		}
	default:
		addChild(ctx, parent, n.Name, sysFile(o, n.Read), syscall.S_IFREG)
	}
}

// sysFile is a sysfs attribute: a snapshot of read at open; a read that
// fails makes every read of the handle fail with its errno, as a kernel
// attribute whose show fails (gid_attrs/ndevs of an IB GID: EINVAL).
func sysFile(o owner, read func() (string, error)) *file {
	render := func() string { s, _ := read(); return s }
	return &file{owner: o, readable: true, text: render,
		open: func(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
			s, err := read()
			if err != nil {
				return failing(device.Errno(err)), openSnapshot, 0
			}
			return &snapshot{data: []byte(s)}, openSnapshot, 0
		}}
}

// failing is a handle whose reads fail with its errno.
type failing syscall.Errno

var _ = (fs.FileReader)(failing(0))

func (f failing) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	return nil, syscall.Errno(f)
}

// listDir is a directory of empty directories whose names list computes
// at each lookup and listing (device/net: the interfaces carrying the
// mount's address, which may come and go).
type listDir struct {
	dir
	list func() []string
}

var (
	_ = (fs.NodeReaddirer)((*listDir)(nil))
	_ = (fs.NodeLookuper)((*listDir)(nil))
)

// sync makes the children the names list gives now.
func (d *listDir) sync(ctx context.Context) {
	want := map[string]bool{}
	for _, n := range d.list() {
		want[n] = true
		if d.GetChild(n) == nil {
			d.AddChild(n, d.NewPersistentInode(ctx, newDir(owner{born: d.born}), fs.StableAttr{Mode: syscall.S_IFDIR}), false)
		}
	}
	for n := range d.Children() {
		if !want[n] {
			d.RmChild(n)
		}
	}
}

func (d *listDir) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	d.sync(ctx)
	return d.dir.Lookup(ctx, name, out)
}

func (d *listDir) Readdir(ctx context.Context) (fs.DirStream, syscall.Errno) {
	d.sync(ctx)
	var es []fuse.DirEntry
	for n := range d.Children() {
		es = append(es, fuse.DirEntry{Name: n, Mode: syscall.S_IFDIR})
	}
	return fs.NewListDirStream(es), 0
}
