package fsnode_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// TestUnmountWithNamespaceCopy: another mount namespace holding a copy of
// the mount keeps the FUSE connection up; Unmount aborts it after a short
// grace instead of waiting forever, and the server stops.
func TestUnmountWithNamespaceCopy(t *testing.T) {
	m := mount(t)
	holder := exec.Command("unshare", "-m", "sleep", "30")
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { holder.Process.Kill(); holder.Wait() }()
	info := filepath.Join("/proc", strconv.Itoa(holder.Process.Pid), "mountinfo")
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		ours, _ := os.Readlink("/proc/self/ns/mnt")
		theirs, _ := os.Readlink(filepath.Join("/proc", strconv.Itoa(holder.Process.Pid), "ns", "mnt"))
		if b, _ := os.ReadFile(info); theirs != ours && bytes.Contains(b, []byte(" "+m.dir+" ")) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the namespace copy of the mount never appeared")
		}
	}
	start := time.Now()
	if err := m.srv.Unmount(); err != nil {
		t.Fatalf("unmount: %v", err)
	}
	waited := make(chan struct{})
	go func() { m.srv.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-time.After(5 * time.Second):
		t.Fatal("Wait did not return after Unmount")
	}
	took := time.Since(start)
	t.Logf("unmount with a namespace copy: %v", took)
	if took > 3*time.Second {
		t.Errorf("unmount took %v", took)
	}
	if _, err := os.Stat(m.path("device")); err == nil {
		t.Error("still mounted")
	}
}
