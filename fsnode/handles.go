package fsnode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"syscall"
	"unicode/utf8"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"rdmafs/device"
)

// maxCommand bounds one write to a text file: a longer one is EINVAL, so a
// runaway writer cannot make the daemon parse megabytes.
const maxCommand = 64 << 10

// Open flags of the handles. Text files are direct I/O so every open sees
// fresh state and the kernel caches nothing; streams are also nonseekable,
// so bash's read builtin reads them byte by byte and the handle hands its
// bytes out in order whatever offset a read names. Passthrough files (rings,
// memory) must not be nonseekable: the kernel refuses passthrough with
// flags outside direct I/O.
const (
	openSnapshot = fuse.FOPEN_DIRECT_IO
	openStream   = fuse.FOPEN_DIRECT_IO | fuse.FOPEN_NONSEEKABLE
	openShared   = fuse.FOPEN_DIRECT_IO
)

// invalid is an EINVAL of fsnode's own (a malformed write), in the device's
// error vocabulary so that device.Errno stays the one errno mapping.
func invalid(op, format string, args ...any) error {
	return &device.Error{Op: op, Errno: syscall.EINVAL, Err: fmt.Errorf(format, args...)}
}

// errnoOf is the one translation of errors to errno: device.Errno, plus
// EINTR for a request the caller interrupted.
func errnoOf(err error) syscall.Errno {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return syscall.EINTR
	}
	return device.Errno(err)
}

// maxReason bounds the text of a failed command (error files, "error:"
// answers of */new): a reason quotes at most this many bytes of it, so a
// 64 KiB bad command never turns into a 64 KiB error file.
const maxReason = 256

// reason is the one-line text of a failed command for an error file: the
// device's errors already name their verb, others get op in front; at most
// maxReason bytes.
func reason(op string, err error) string {
	var de *device.Error
	s := err.Error()
	if !errors.As(err, &de) {
		s = op + ": " + s
	}
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > maxReason {
		i := maxReason - len("...")
		for i > 0 && !utf8.RuneStart(s[i]) {
			i--
		}
		s = s[:i] + "..."
	}
	return s
}

// textOf checks that a write is a command: at most maxCommand bytes of
// UTF-8 text without control characters other than tab, CR and newline.
func textOf(op string, data []byte) (string, error) {
	if len(data) > maxCommand {
		return "", invalid(op, "a write of %d bytes exceeds the limit of %d bytes for one command", len(data), maxCommand)
	}
	if !utf8.Valid(data) {
		return "", invalid(op, "not text: invalid UTF-8")
	}
	for i, r := range string(data) {
		if (r < 0x20 && r != '\n' && r != '\t' && r != '\r') || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return "", invalid(op, "not text: control character %U at byte %d", r, i)
		}
	}
	return string(data), nil
}

// snapshot is the handle of a read-only text file: its content rendered
// once, at open, and read with ordinary offsets.
type snapshot struct{ data []byte }

var _ = (fs.FileReader)((*snapshot)(nil))

func (h *snapshot) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if off >= int64(len(h.data)) {
		return fuse.ReadResultData(nil), 0
	}
	end := min(off+int64(len(dest)), int64(len(h.data)))
	return fuse.ReadResultData(h.data[off:end]), 0
}

// snapshotFile opens as a snapshot of render.
func snapshotFile(render func() string) func(context.Context, uint32) (fs.FileHandle, uint32, syscall.Errno) {
	return func(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
		return &snapshot{data: []byte(render())}, openSnapshot, 0
	}
}

// textFile is a read-only text file of o: a snapshot of render at open,
// whose length stat reports (file.text).
func textFile(o owner, render func() string) *file {
	return &file{owner: o, readable: true, open: snapshotFile(render), text: render}
}

// command is the handle of a write-only control file (ctl, post_send,
// post_recv): each write is one command, run by do. A failed command
// fails the write with its errno and leaves its reason in the object's
// error file.
type command struct {
	op  string
	obj *object
	do  func(ctx context.Context, text string) error
}

var _ = (fs.FileWriter)((*command)(nil))

func (h *command) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	text, err := textOf(h.op, data)
	if err == nil {
		err = h.do(ctx, text)
	}
	if err != nil {
		return 0, h.obj.fail(h.op, err)
	}
	return uint32(len(data)), 0
}

func commandFile(op string, obj *object, do func(ctx context.Context, text string) error) func(context.Context, uint32) (fs.FileHandle, uint32, syscall.Errno) {
	return func(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
		return &command{op: op, obj: obj, do: do}, openStream, 0
	}
}

// stream is the handle of a file whose reads consume something (poll,
// notify, events, */new): bytes produced for the reader wait in out and
// are handed out in order, whatever the offset; fill is asked for more when
// out is empty.
type stream struct {
	mu  sync.Mutex
	out []byte // produced, not yet read; lockcheck:guarded mu
	// fill produces more output for a read of at most n bytes; it may
	// block (honouring ctx) and returns nothing at end of file.
	fill func(ctx context.Context, n int) ([]byte, error)
	// write handles a write (nil: the file is read-only).
	write func(ctx context.Context, data []byte) (uint32, syscall.Errno)
}

var (
	_ = (fs.FileReader)((*stream)(nil))
	_ = (fs.FileWriter)((*stream)(nil))
)

func (h *stream) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.out) == 0 && h.fill != nil {
		b, err := h.fill(ctx, len(dest))
		if err != nil {
			return nil, errnoOf(err)
		}
		h.out = b
	}
	n := copy(dest, h.out)
	h.out = h.out[n:]
	return fuse.ReadResultData(dest[:n]), 0
}

func (h *stream) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	if h.write == nil {
		return 0, syscall.EBADF
	}
	return h.write(ctx, data)
}

// emit appends to the output under the handle's lock (for write handlers
// that answer, like */new).
func (h *stream) emit(s string) {
	h.mu.Lock()
	h.out = append(h.out, s...)
	h.mu.Unlock()
}

// unread is how many bytes of output wait for a read.
func (h *stream) unread() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.out)
}

// shared is a file backed by a daemon memfd (rings, MR memory): the kernel
// maps the memfd itself for a client's mmap (passthrough), while read and
// write reach the daemon (direct I/O). The node keeps its own duplicate of
// the memfd, so an open racing a destroy never names a closed or reused fd;
// each handle has its own duplicate again, which go-fuse registers as the
// backing file on the first open and which Release closes.
type shared struct {
	file
	mu sync.Mutex
	fd int // -1 once the object is gone; lockcheck:guarded mu
	// read and write serve pread and pwrite on a handle; fd is the
	// handle's duplicate.
	read  func(fd int, p []byte, off int64) (int, error)
	write func(ctx context.Context, p []byte, off int64) (int, error)
}

// newShared makes the node for region fd (which it duplicates) of size
// bytes.
func newShared(o owner, fd int, size uint64) (*shared, error) {
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("dup: %w", err)
	}
	s := &shared{fd: dup}
	s.owner = o
	s.readable, s.writable = true, true
	s.size = func() uint64 { return size }
	s.open = s.openHandle
	return s, nil
}

func (s *shared) openHandle(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fd < 0 {
		return nil, 0, syscall.ENOENT
	}
	dup, err := unix.FcntlInt(uintptr(s.fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, 0, syscall.EMFILE
	}
	return &sharedHandle{node: s, fd: dup}, openShared, 0
}

// close drops the node's duplicate once its object is destroyed.
func (s *shared) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fd >= 0 {
		unix.Close(s.fd)
		s.fd = -1
	}
}

// preadFd is a shared file's read of its memfd itself (rings: a snapshot
// of the ring's bytes for xxd and friends).
func preadFd(fd int, p []byte, off int64) (int, error) {
	n, err := unix.Pread(fd, p, off)
	if err == nil && n == 0 {
		return 0, io.EOF
	}
	return n, err
}

type sharedHandle struct {
	node *shared
	mu   sync.Mutex
	fd   int // lockcheck:guarded mu
}

var (
	_ = (fs.FilePassthroughFder)((*sharedHandle)(nil))
	_ = (fs.FileReader)((*sharedHandle)(nil))
	_ = (fs.FileWriter)((*sharedHandle)(nil))
	_ = (fs.FileReleaser)((*sharedHandle)(nil))
)

// PassthroughFd is called once, right after Open, when no other open of
// the node holds a backing file; the kernel takes its own reference.
func (h *sharedHandle) PassthroughFd() (int, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.fd, h.fd >= 0
}

func (h *sharedHandle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.fd < 0 {
		return nil, syscall.EBADF
	}
	n, err := h.node.read(h.fd, dest, off)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, errnoOf(err)
	}
	return fuse.ReadResultData(dest[:n]), 0
}

func (h *sharedHandle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	n, err := h.node.write(ctx, data, off)
	if err != nil && n == 0 {
		return 0, errnoOf(err)
	}
	return uint32(n), 0
}

func (h *sharedHandle) Release(ctx context.Context) syscall.Errno {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.fd >= 0 {
		unix.Close(h.fd)
		h.fd = -1
	}
	return 0
}
