package fsnode

import (
	"fmt"
	"os"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// Readme is the text of MOUNT/README with runtimeDir where the mount's
// FIFOs live. rdmafs(5) is generated from it, so that the manual page and
// the file a mount serves are one text.
func Readme(runtimeDir string) string { return readme(runtimeDir) }

// ProbePassthrough makes the check Mount makes before it serves a device,
// without a device: it mounts an empty FUSE file system on a fresh
// directory under os.TempDir() with Mount's options, registers a backing
// file (probePassthrough) and unmounts. rdmafs doctor runs it so that its
// verdict is the one mount would reach, not a guess from the kernel
// version. Needs root, as Mount does.
func ProbePassthrough() error {
	dir, err := os.MkdirTemp("", "rdmafs-probe-")
	if err != nil {
		return fmt.Errorf("fsnode: probe directory: %w", err)
	}
	defer os.Remove(dir)
	srv, err := fs.Mount(dir, &fs.Inode{}, &fs.Options{
		MountOptions: fuse.MountOptions{
			AllowOther:        true,
			DirectMountStrict: true,
			// Not "rdmafs": the library and rdmafs show take every
			// fuse.rdmafs mount for a device.
			FsName:        "rdmafs-probe",
			Name:          "rdmafs-probe",
			DisableXAttrs: true,
		},
	})
	if err != nil {
		return fmt.Errorf("fsnode: mounting a FUSE file system (needs root and /dev/fuse): %w", err)
	}
	defer srv.Unmount()
	return probePassthrough(srv)
}
