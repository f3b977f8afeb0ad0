// Package testmount is the one helper every package's FUSE tests use to
// serve a device on a real mount. A test that cannot mount (no /dev/fuse,
// not root) skips on a developer's machine and fails under CI=true, where
// a skipped FUSE test would hide a broken product.
package testmount

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"rdmafs/device"
	"rdmafs/fsnode"
)

// Device makes a device with cfg and closes it when the test ends.
func Device(t testing.TB, cfg device.Config) *device.Device {
	t.Helper()
	dev, err := device.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	return dev
}

// Mount serves dev on a fresh directory and unmounts it when the test
// ends (an unmount error fails the test). The directories above the
// mount point are 0755, so a second user's test process can reach it.
func Mount(t testing.TB, dev *device.Device, opts fsnode.Options) (string, *fsnode.Server) {
	t.Helper()
	base := t.TempDir()
	// t.TempDir's directories are 0700.
	for _, d := range []string{filepath.Dir(base), base} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	dir := filepath.Join(base, "mnt")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	srv, err := fsnode.Mount(dir, dev, opts)
	if err != nil {
		CannotMount(t, err)
	}
	t.Cleanup(func() {
		if err := srv.Unmount(); err != nil {
			t.Errorf("unmount: %v", err)
		}
	})
	return dir, srv
}

// CannotMount ends a test whose mount failed with err: a skip here, a
// failure in CI. For the tests that mount and unmount by themselves.
func CannotMount(t testing.TB, err error) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("mount: %v", err)
	}
	t.Skipf("cannot mount rdmafs here: %v", err)
}

// NeedRoot ends a test that needs root without it: a skip here, a failure
// in CI, which runs as root.
func NeedRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI runs as root; mounting must work")
		}
		t.Skip("needs root")
	}
}

// Rdmafs builds the rdmafs command into the test's temporary directory,
// for the tests that run it (as another user, or to end it by a signal).
func Rdmafs(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "rdmafs")
	if out, err := exec.Command("go", "build", "-o", bin, "rdmafs/cmd/rdmafs").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	return bin
}

// Write writes s to the file at path in one write, as a command of the
// tree must be written, and closes it: the write's error, else the close's.
func Write(path, s string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.Write([]byte(s))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// Create runs one transaction on the new file at path: write the line,
// read the answer (the new object's name, or the error's text with the
// write's error).
func Create(path, line string) (string, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	_, werr := f.Write([]byte(line + "\n"))
	buf := make([]byte, 4096)
	n, rerr := f.Read(buf)
	if rerr != nil && werr == nil {
		return "", rerr
	}
	return strings.TrimSuffix(string(buf[:n]), "\n"), werr
}
