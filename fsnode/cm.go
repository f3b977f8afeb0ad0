package fsnode

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"

	"rdmafs/cm"
	"rdmafs/device"
)

// The cm/ tree (cm/CONTRACT.md): the connection manager's ids and
// event channels as objects, and its addresses, counters and listeners.
// Every node is a thin adapter over package cm; the commands, the
// protocol and the limits live there.
//
// An event channel is a FIFO in the runtime directory that the daemon
// holds open read-write (readers never see end of file). One goroutine per
// channel takes the channel's events in order and writes each as one
// 1024-byte record, waiting for room when the FIFO is full: the events
// wait in the channel's bounded backlog meanwhile, none is dropped.

// addCM builds cm/ under the root.
func (t *tree) addCM(ctx context.Context, in *fs.Inode) {
	a := t.cm
	pub := owner{perm: 0644, born: t.born}
	d := newDir(owner{born: t.born})
	d.rmdir = t.rmdirIn(d)
	addChild(ctx, in, "cm", d, syscall.S_IFDIR)
	t.kinds["cm"] = d
	addChild(ctx, &d.Inode, "addrs", textFile(pub, a.AddrsText), syscall.S_IFREG)
	addChild(ctx, &d.Inode, "counters", textFile(pub, func() string {
		return a.CountersText() + countersText(t.dev.GSICounters())
	}), syscall.S_IFREG)
	addChild(ctx, &d.Inode, "listeners", textFile(pub, func() string { return a.ListenersText(0) }), syscall.S_IFREG)
	addChild(ctx, &d.Inode, "new", t.newFile(kind{"cm", "create_id", (*tree).createCMID}), syscall.S_IFREG)
	chd := newDir(owner{born: t.born})
	chd.rmdir = t.rmdirIn(chd)
	addChild(ctx, &d.Inode, "channel", chd, syscall.S_IFDIR)
	t.kinds["cm_channel"] = chd
	addChild(ctx, &chd.Inode, "new", t.newFile(kind{"cm_channel", "create_event_channel", (*tree).createCMChannel}), syscall.S_IFREG)
	a.SetNewIDHook(t.publishRequestID)
}

func (t *tree) createCMChannel(ctx context.Context, text string) (string, error) {
	const op = "create_event_channel"
	if strings.TrimSpace(text) != "" {
		return "", invalid(op, "cm/channel/new takes an empty line, not %q", clip(text))
	}
	uid, gid := caller(ctx)
	c, err := t.cm.NewChannel(uid)
	if err != nil {
		return "", err
	}
	fifo, err := t.newFIFO(fmt.Sprintf("cm-channel%d", c.Num), uid, gid)
	if err != nil {
		t.cm.DestroyChannel(c)
		return "", &device.Error{Op: op, Errno: syscall.ENOMEM, Err: err}
	}
	startRecordWriter(fifo, c)
	o := t.newObject(ctx, "cm_channel", c.Num)
	o.destroy = func() error { return t.cm.DestroyChannel(c) }
	// A program that leased its channel is gone: the ids still on the
	// channel (those its listeners' requests made and it never leased)
	// go with it, as they go with a closed rdma_cm file.
	o.expire = func() error {
		for _, n := range t.cm.DestroyChannelIDs(c) {
			t.forgetID(n)
		}
		return t.cm.DestroyChannel(c)
	}
	o.cleanup = append(o.cleanup, func() { t.closeChannel(fifo) })
	ow := o.owner
	ow.perm = 0777
	t.publish(ctx, o, func() string {
		return lines("ids", t.cm.ChannelIDs(c), "pending", c.Pending(), "dropped", c.Dropped())
	}, entry{name: "fifo", node: &symlink{owner: ow, target: fifo.path}, mode: syscall.S_IFLNK})
	return o.name, nil
}

// startRecordWriter runs the goroutine that writes c's events to fifo;
// closing the FIFO (closeChannel) stops it.
func startRecordWriter(fifo *channel, c *cm.Channel) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			e, ok := c.Next(done)
			if !ok {
				return
			}
			// One write of 1024 bytes (< PIPE_BUF): the kernel takes all
			// of it or, when the FIFO is full, none, and the write
			// waits in the poller for room.
			rec := e.Record()
			if _, err := fifo.f.Write(rec[:]); err != nil {
				return
			}
		}
	}()
	fifo.stop = func() {
		close(done)
		fifo.f.SetWriteDeadline(time.Now())
		wg.Wait()
	}
}

// forgetID removes the directory of an id the agent destroyed (not from
// inside a FUSE request: it notifies the kernel).
func (t *tree) forgetID(num uint32) {
	kd := t.kinds["cm"]
	name := strconv.FormatUint(uint64(num), 10)
	o := objectIn(kd, name)
	if o == nil {
		return
	}
	o.gone.Store(true)
	kd.RmChild(name)
	kd.NotifyEntry(name)
}

func (t *tree) createCMID(ctx context.Context, text string) (string, error) {
	const op = "create_id"
	ps, qt, chn, err := cm.ParseNew(text)
	if err != nil {
		return "", err
	}
	uid, gid := caller(ctx)
	c := t.cm.Channel(chn)
	if c == nil {
		return "", &device.Error{Op: op, Errno: syscall.ENOENT, Err: fmt.Errorf("no channel %d", chn)}
	}
	if uid != 0 && c.Owner != uid {
		return "", &device.Error{Op: op, Errno: syscall.EACCES, Err: fmt.Errorf("channel %d belongs to another user", chn)}
	}
	id, err := t.cm.Create(uid, c, ps, qt)
	if err != nil {
		return "", err
	}
	t.publishID(ctx, id, uid, gid)
	return strconv.FormatUint(uint64(id.Num), 10), nil
}

// publishRequestID makes the directory of an id a connect request made
// (cm.Config.NewID, under the agent's lock): it belongs to the listener's
// owner, with the listener's group.
func (t *tree) publishRequestID(id *cm.ID) {
	gid := id.Owner
	if l := objectIn(t.kinds["cm"], strconv.FormatUint(uint64(id.ListenID), 10)); l != nil {
		gid = l.gid
	}
	t.publishID(context.Background(), id, id.Owner, gid)
}

func (t *tree) publishID(ctx context.Context, id *cm.ID, uid, gid uint32) {
	o := &object{owner: owner{uid: uid, gid: gid, born: time.Now()}, kind: "cm",
		name: strconv.FormatUint(uint64(id.Num), 10), logf: t.logf}
	o.destroy = id.Destroy
	ctl := o.cmdFile("cm", func(ctx context.Context, text string) error {
		return id.DoAs(text, cm.Caps{NetBindService: callerHasCap(ctx, capNetBindService)})
	})
	t.publish(ctx, o, id.Attr,
		named("ctl", ctl),
		named("state", o.roFile(func() string { return id.State().String() + "\n" })))
}
