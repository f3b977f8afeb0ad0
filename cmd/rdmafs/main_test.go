package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"rdmafs/internal/testmount"
)

func TestHelp(t *testing.T) {
	var out, errb bytes.Buffer
	if rc := run([]string{"--help"}, &out, &errb); rc != 0 {
		t.Fatalf("--help exit %d", rc)
	}
	for _, w := range []string{"mount", "umount", "new", "show", "trace"} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("--help does not mention %s", w)
		}
	}
	out.Reset()
	errb.Reset()
	if rc := run([]string{"mount", "--help"}, &out, &errb); rc != 0 {
		t.Fatalf("mount --help exit %d", rc)
	}
	for _, f := range []string{"--foreground", "--max-qp", "--max-qp-wr", "--max-sge", "--max-cqe", "--max-mr-size", "--max-inline-data", "--mtu", "--cm-addr"} {
		if !strings.Contains(errb.String(), f) {
			t.Errorf("mount --help does not document %s", f)
		}
	}
	if rc := run([]string{"bogus"}, &out, &errb); rc != 2 {
		t.Errorf("unknown command exit %d, want 2", rc)
	}
	if rc := run([]string{"mount", "--mtu", "1000", "/"}, &out, &errb); rc != 2 {
		t.Errorf("bad --mtu exit %d, want 2", rc)
	}
	errb.Reset()
	if rc := run([]string{"mount", "--cm-addr", "nowhere", "/"}, &out, &errb); rc != 2 || !strings.Contains(errb.String(), "--cm-addr") {
		t.Errorf("bad --cm-addr exit %d: %q", rc, errb.String())
	}
}

// TestMountCMAddr: a local mount answers for 127.0.0.1, ::1 and every
// --cm-addr, and resolves them to itself.
func TestMountCMAddr(t *testing.T) {
	testmount.NeedRoot(t)
	bin := testmount.Rdmafs(t)
	mnt := t.TempDir()
	if out, err := exec.Command(bin, "mount", "--cm-addr", "10.55.0.1", "--cm-addr", "fd00::5", mnt).CombinedOutput(); err != nil {
		t.Fatalf("mount: %v\n%s", err, out)
	}
	t.Cleanup(func() { exec.Command(bin, "umount", mnt).Run() })
	b, err := os.ReadFile(filepath.Join(mnt, "cm", "addrs"))
	if err != nil || string(b) != "127.0.0.1\n::1\n10.55.0.1\nfd00::5\n" {
		t.Fatalf("cm/addrs %q %v", b, err)
	}
	ch, err := exec.Command(bin, "new", mnt, "cm/channel").CombinedOutput()
	if err != nil {
		t.Fatalf("new cm/channel: %v %s", err, ch)
	}
	id, err := exec.Command(bin, "new", mnt, "cm", "ps=tcp", "channel="+strings.TrimSpace(string(ch))).CombinedOutput()
	if err != nil {
		t.Fatalf("new cm: %v %s", err, id)
	}
	ctl := filepath.Join(mnt, "cm", strings.TrimSpace(string(id)), "ctl")
	if err := os.WriteFile(ctl, []byte("resolve_addr dst=10.55.0.1 port=1"), 0); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ctl, []byte("resolve_route"), 0); err != nil {
		t.Fatal(err)
	}
	b, _ = os.ReadFile(filepath.Join(mnt, "cm", strings.TrimSpace(string(id)), "attr"))
	if !strings.Contains(string(b), "state=route_resolved") || !strings.Contains(string(b), "src_addr=10.55.0.1") {
		t.Fatalf("attr:\n%s", b)
	}
}

// The background daemon serves, `new` prints names, and `umount` tears the
// device down while a client still maps its memory: the daemon exits, the
// mapping stays readable, the mount is gone.
func TestMountNewUmountWithLiveMapping(t *testing.T) {
	testmount.NeedRoot(t)
	bin := testmount.Rdmafs(t)
	mnt := t.TempDir()
	if out, err := exec.Command(bin, "mount", mnt).CombinedOutput(); err != nil {
		t.Fatalf("mount: %v\n%s", err, out)
	}
	t.Cleanup(func() { exec.Command(bin, "umount", mnt).Run() })
	rdmafs := func(args ...string) string {
		out, err := exec.Command(bin, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("rdmafs %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	pd := rdmafs("new", mnt, "pd")
	mr := rdmafs("new", mnt, "mr", "pd="+pd, "length=4096", "access=local_write")
	if _, err := strconv.Atoi(mr); err != nil {
		t.Fatalf("new mr printed %q", mr)
	}
	out, err := exec.Command(bin, "new", mnt, "mr", "pd="+pd, "length=0").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "length") {
		t.Fatalf("a bad transaction: err %v, output %q", err, out)
	}

	f, err := os.OpenFile(filepath.Join(mnt, "mr", mr, "mem"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	copy(mem, "still here")

	pidb, err := os.ReadFile(filepath.Join(stateDir, mountID(mnt)+".pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.SplitN(string(pidb), "\n", 2)[0])
	rdmafs("umount", mnt)
	deadline := time.Now().Add(10 * time.Second)
	for unix.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatal("the daemon did not exit")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if string(mem[:10]) != "still here" {
		t.Fatalf("mapping after umount reads %q", mem[:10])
	}
	if _, err := os.Stat(filepath.Join(mnt, "mr")); err == nil {
		t.Fatal("the tree is still mounted")
	}
}

func TestForegroundSignalUnmounts(t *testing.T) {
	testmount.NeedRoot(t)
	bin := testmount.Rdmafs(t)
	for _, sig := range []os.Signal{os.Interrupt, unix.SIGTERM} {
		mnt := t.TempDir()
		cmd := exec.Command(bin, "mount", "--foreground", mnt)
		var logs bytes.Buffer
		cmd.Stdout, cmd.Stderr = &logs, &logs
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			if _, err := os.Stat(filepath.Join(mnt, "device")); err == nil {
				break
			}
			if time.Now().After(deadline) {
				cmd.Process.Kill()
				t.Fatal("the foreground mount never appeared")
			}
			time.Sleep(10 * time.Millisecond)
		}
		cmd.Process.Signal(sig)
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		select {
		case err := <-exited:
			if err != nil {
				t.Fatalf("%v: exit %v\n%s", sig, err, logs.String())
			}
		case <-time.After(60 * time.Second):
			cmd.Process.Kill()
			select {
			case <-exited:
				t.Fatalf("%v: the daemon did not exit in 60 s\n%s", sig, logs.String())
			case <-time.After(10 * time.Second):
				// Not even SIGKILL ends it: stuck in the kernel.
				t.Fatalf("%v: the daemon did not exit in 60 s, nor on SIGKILL (stuck in the kernel)", sig)
			}
		}
		if _, err := os.Stat(filepath.Join(mnt, "device")); err == nil {
			t.Fatalf("%v: still mounted", sig)
		}
	}
}

// A copy of the mount in another mount namespace (unshare -m) keeps the
// FUSE connection alive after the daemon's unmount; umount still ends the
// daemon within a couple of seconds (it aborts the connection), removes its
// run-time state, and the copy fails with ENOTCONN instead of hanging.
func TestUmountWithNamespaceCopy(t *testing.T) {
	testmount.NeedRoot(t)
	bin := testmount.Rdmafs(t)
	mnt := t.TempDir()
	if out, err := exec.Command(bin, "mount", mnt).CombinedOutput(); err != nil {
		t.Fatalf("mount: %v\n%s", err, out)
	}
	t.Cleanup(func() { exec.Command(bin, "umount", mnt).Run() })
	id := mountID(mnt)
	pidb, err := os.ReadFile(filepath.Join(stateDir, id+".pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.SplitN(string(pidb), "\n", 2)[0])
	// The copy: a process in a new mount namespace (unshare makes its
	// mounts private, so our unmount does not reach it).
	holder := exec.Command("unshare", "-m", "sleep", "30")
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { holder.Process.Kill(); holder.Wait() })
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		b, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(holder.Process.Pid), "mountinfo"))
		ours, _ := os.Readlink("/proc/self/ns/mnt")
		theirs, _ := os.Readlink(filepath.Join("/proc", strconv.Itoa(holder.Process.Pid), "ns", "mnt"))
		if theirs != ours && bytes.Contains(b, []byte(" "+mnt+" ")) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the namespace copy of the mount never appeared")
		}
	}
	start := time.Now()
	if out, err := exec.Command(bin, "umount", mnt).CombinedOutput(); err != nil {
		t.Fatalf("umount: %v\n%s", err, out)
	}
	took := time.Since(start)
	t.Logf("umount with a namespace copy took %v", took)
	if took > 3*time.Second {
		t.Errorf("umount took %v, want < 3 s", took)
	}
	if !exited(pid) {
		t.Errorf("daemon %d still runs after umount", pid)
	}
	for _, p := range []string{filepath.Join(stateDir, id+".pid"), filepath.Join(stateDir, id)} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s left behind: %v", p, err)
		}
	}
	if _, err := os.Stat(filepath.Join(mnt, "device")); err == nil {
		t.Error("still mounted here")
	}
	// In the copy the tree is dead, not hanging.
	ls := exec.Command("nsenter", "-t", strconv.Itoa(holder.Process.Pid), "-m", "stat", filepath.Join(mnt, "device"))
	done := make(chan []byte, 1)
	go func() { out, _ := ls.CombinedOutput(); done <- out }()
	select {
	case out := <-done:
		if !bytes.Contains(out, []byte("not connected")) {
			t.Errorf("stat in the namespace copy: %s", out)
		}
	case <-time.After(5 * time.Second):
		ls.Process.Kill()
		t.Error("stat in the namespace copy hangs")
	}
}

// A daemon that is a zombie (ended, not reaped) counts as exited.
func TestExitedZombie(t *testing.T) {
	cmd := exec.Command("true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p, err := openProcess(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	// Not reaped yet: a zombie once it ends, and kill(pid, 0) succeeds.
	if !p.wait(5 * time.Second) {
		t.Fatal("wait did not see the zombie's exit")
	}
	if unix.Kill(cmd.Process.Pid, 0) != nil {
		t.Fatal("the child was reaped under us")
	}
	if !exited(cmd.Process.Pid) {
		t.Error("exited(zombie) is false")
	}
	cmd.Wait()
	if !exited(cmd.Process.Pid) {
		t.Error("exited(reaped) is false")
	}
	if p := (&process{pid: os.Getpid(), fd: -1}); p.wait(50 * time.Millisecond) {
		t.Error("wait reports a running process as exited")
	}
}

// TestMountOverDeadMount: the daemon of a mount is killed (SIGKILL: the
// mount point is left ENOTCONN); `rdmafs mount` on it clears the dead
// connection and mounts, where it said "not a directory" before.
func TestMountOverDeadMount(t *testing.T) {
	testmount.NeedRoot(t)
	bin := testmount.Rdmafs(t)
	mnt := t.TempDir()
	cmd := exec.Command(bin, "mount", "--foreground", mnt)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitMounted := func() {
		t.Helper()
		for end := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if _, err := os.Stat(filepath.Join(mnt, "device")); err == nil {
				return
			}
			if time.Now().After(end) {
				t.Fatal("the mount never appeared")
			}
		}
	}
	waitMounted()
	// Killed after its start-up has settled: a daemon killed while a
	// request of its own to its own mount is in flight (a FLUSH at exit
	// was seen on 2026-12-03, after the stat fixed in fsnode) never
	// exits, and the mount hangs: an open defect (RELIABILITY.md).
	time.Sleep(time.Second)
	cmd.Process.Kill()
	cmd.Wait()
	var st unix.Statfs_t
	if err := unix.Statfs(mnt, &st); err != unix.ENOTCONN {
		t.Fatalf("statfs after SIGKILL: %v, want ENOTCONN", err)
	}
	out, err := exec.Command(bin, "mount", mnt).CombinedOutput()
	if err != nil {
		t.Fatalf("mount over the dead mount: %v\n%s", err, out)
	}
	t.Cleanup(func() { exec.Command(bin, "umount", mnt).Run() })
	waitMounted()
}
