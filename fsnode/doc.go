// Package fsnode shows a *device.Device as the FUSE tree of DESIGN.md §3.
// It is the only package of rdmafs that imports go-fuse, and it holds no
// verbs logic: every node translates bytes to one device call and the
// answer back to bytes or an errno.
//
// # Pieces
//
//   - mount.go: Mount (direct mount as root, allow_other, passthrough probe),
//     Server.Unmount (lazy detach plus connection abort when busy, and an
//     abort after a 1 s grace when a copy of the mount in another mount
//     namespace keeps the connection up), Wait.
//   - node.go: the three node types. dir is every directory (mkdir, unlink,
//     rename, create, link, symlink are EPERM; rmdir of an object destroys
//     it), file is every regular file (ownership and permission checks at
//     open; what it does is in its handle), symlink is cq/H/channel.
//   - handles.go: the file handles: snapshot (read-only text rendered at
//     open), command (write-only control files), stream (reads that consume:
//     poll, notify, events, */new), shared (memfd-backed rings and MR memory,
//     passthrough for mmap and direct I/O for read and write).
//   - tree.go: the static tree, the */new transactions and the object
//     directories of each kind.
//   - commands.go: small parsers of the control commands fsnode owns
//     (command word, resize cqe=N, post lines), the CQ channel FIFOs.
//   - cm.go: the cm/ tree over package cm (the RDMA CM agent): ids and
//     event channels as objects, a goroutine per channel writing its
//     events to the channel's FIFO as 1024-byte records.
//
// # Sizes
//
// A text file (attr, state, error, counters, device, port, README, faults)
// stats as the length of its content as a read would return it at that
// moment: Getattr renders the file, and its attributes carry no timeout,
// so the kernel asks again at every stat (every other node keeps one
// second). The length, not sysfs's fixed 4096, because a fixed size would
// make `[ -s qp/17/error ]` true for an empty error file, as useless as the
// 0 it replaces, and a program that sizes its buffer from st_size gets the
// exact one. A caller who may not read the file (another user's attr or
// counters) sees 0, and nothing is rendered for it. The size is a hint, as
// sysfs's is: every text handle is direct I/O, so the kernel never cuts a
// read at st_size, and a read returns the content rendered at open, whole,
// however it changed since the stat (cat, bash's read, read() loops and
// os.ReadFile all read to end of file). Streams (events, capture, poll,
// notify, lease, */new) and write-only control files stay 0, like files in
// /proc; rings and memory report their mapping size.
//
// # Errors
//
// device.Errno maps every error to its errno, once; fsnode's own errors
// (a write that is not text or longer than 64 KiB, an unknown command) are
// *device.Error values with EINVAL. A context cancelled by a FUSE interrupt
// is EINTR. Every failing command on an object leaves its reason in the
// object's error file; a failed creation answers "error: REASON" on the
// read side of the */new handle. A reason is at most 256 bytes whatever
// the command quoted (maxReason), and one */new open keeps at most 16 KiB
// of unread answers (ENOBUFS beyond, nothing created). Structural changes anywhere (mkdir,
// unlink, rename, create, link, symlink, mknod, chmod, chown, truncation
// to a non-zero size) are EPERM; truncation to 0 of a writable file is
// accepted and ignored so that shell redirection works. Another user's
// files are EACCES by their mode bits (0600 for ring, mem, ctl, post_*,
// poll, notify, attr and counters, because keys and PSNs are capabilities
// and per-QP counters follow the PSNs; 0644 for state and error; the
// device's and port's files are world-readable), rmdir of another user's
// object is EACCES; root bypasses both. A write open of a read-only
// file or a read open of a write-only one is EACCES.
//
// # Locking
//
// fsnode keeps little state of its own: an object's last error (object.mu),
// a stream handle's pending output (stream.mu), a shared node's memfd
// duplicate (shared.mu), a CQ's ring file across resizes (a per-CQ mutex
// that also orders resize against destroy) and the set of live channels
// (tree.mu). None of them is held across a call that can block on the
// kernel except stream.mu, which only orders reads of one open file.
// Notifications to the kernel (NotifyEntry after a CQ resize) are made with
// no fsnode lock held but the CQ's, which no FUSE request waits on.
//
// The CM agent's lock (cm.Agent's) is taken by every cm/ node that calls
// the agent, and the agent calls back into fsnode under it in one place:
// publishing the directory of an id a connect request made (AddChild,
// which takes go-fuse's inode locks for a moment). go-fuse holds no inode
// lock while it runs a node's method, so the order is always the agent's
// lock, then go-fuse's.
package fsnode
