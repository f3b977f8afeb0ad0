package fsnode_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"rdmafs/device"
	"rdmafs/fsnode"
	"rdmafs/internal/testmount"
)

// mnt is one mounted device under test.
type mnt struct {
	t   *testing.T
	dir string
	dev *device.Device
	srv *fsnode.Server
}

// mount mounts a fresh device (default config) in a temporary directory
// that other users can reach, and unmounts it at the end of the test. It
// skips the test when mounting is impossible here, except in CI, where it
// fails.
func mount(t *testing.T) *mnt {
	t.Helper()
	return mountWith(t, device.Config{}, fsnode.Options{})
}

// mountWith is mount with a device configuration and mount options.
func mountWith(t *testing.T, cfg device.Config, opts fsnode.Options) *mnt {
	t.Helper()
	dev := testmount.Device(t, cfg)
	opts.Debug = testing.Verbose() && os.Getenv("RDMAFS_FUSE_DEBUG") != ""
	dir, srv := testmount.Mount(t, dev, opts)
	return &mnt{t: t, dir: dir, dev: dev, srv: srv}
}

func (m *mnt) path(parts ...string) string {
	return filepath.Join(append([]string{m.dir}, parts...)...)
}

// errnoOf extracts the errno of a failed file operation (0 if none).
func errnoOf(err error) syscall.Errno {
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	return 0
}

// tryCreate runs one transaction on KIND/new: write the line, read the
// answer.
func (m *mnt) tryCreate(kind, line string) (string, error) {
	return testmount.Create(m.path(kind, "new"), line)
}

func (m *mnt) create(kind, line string) string {
	m.t.Helper()
	name, err := m.tryCreate(kind, line)
	if err != nil {
		m.t.Fatalf("%s/new %q: %v (%s)", kind, line, err, name)
	}
	return name
}

func (m *mnt) read(parts ...string) string {
	m.t.Helper()
	b, err := os.ReadFile(m.path(parts...))
	if err != nil {
		m.t.Fatalf("read %s: %v", filepath.Join(parts...), err)
	}
	return string(b)
}

// write writes s to a file of the tree in one write.
func (m *mnt) write(s string, parts ...string) error { return testmount.Write(m.path(parts...), s) }

func (m *mnt) mustWrite(s string, parts ...string) {
	m.t.Helper()
	if err := m.write(s, parts...); err != nil {
		m.t.Fatalf("write %q to %s: %v (error file: %q)", s, filepath.Join(parts...), err, m.lastError(parts...))
	}
}

// lastError reads the error file next to parts (an object's file).
func (m *mnt) lastError(parts ...string) string {
	p := append(append([]string{}, parts[:len(parts)-1]...), "error")
	b, _ := os.ReadFile(m.path(p...))
	return strings.TrimSpace(string(b))
}

// attrs parses a key=value file.
func (m *mnt) attrs(parts ...string) map[string]string {
	m.t.Helper()
	out := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(m.read(parts...)), "\n") {
		k, v, ok := strings.Cut(l, "=")
		if !ok {
			m.t.Fatalf("%s: line %q is not key=value", filepath.Join(parts...), l)
		}
		out[k] = v
	}
	return out
}

func (m *mnt) state(q string) string {
	m.t.Helper()
	return strings.TrimSpace(m.read("qp", q, "state"))
}

// pollUntil reads cq/H/poll until it has returned n completions or the
// deadline passes; it returns the lines.
func (m *mnt) pollUntil(cq string, n int) []string {
	m.t.Helper()
	var got []string
	deadline := time.Now().Add(10 * time.Second)
	for len(got) < n {
		s := m.read("cq", cq, "poll")
		for _, l := range strings.Split(s, "\n") {
			if l != "" {
				got = append(got, l)
			}
		}
		if len(got) >= n {
			break
		}
		if time.Now().After(deadline) {
			m.t.Fatalf("cq %s: %d of %d completions after 10s: %q", cq, len(got), n, got)
		}
		time.Sleep(time.Millisecond)
	}
	return got
}

// findWC returns the completion line with wr_id=id.
func findWC(t *testing.T, lines []string, id string) string {
	t.Helper()
	for _, l := range lines {
		if strings.HasPrefix(l, "wr_id="+id+" ") {
			return l
		}
	}
	t.Fatalf("no completion with wr_id=%s in %q", id, lines)
	return ""
}

// bash runs a script, as root or as uid (if uid != 0). The working
// directory is never inside the mount (go-fuse's deadlock 1a).
func bash(uid uint32, script string) (stdout, stderr string, err error) {
	cmd := exec.Command("bash", "-c", script)
	if uid != 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	}
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	return o.String(), e.String(), err
}

// setup is a PD, a CQ, two MRs and two RC QPs on them.
type setup struct {
	pd, cq       string
	mrA, mrB     string
	qa, qb       string
	lkeyA, rkeyB string
	lkeyB        string
	iovaB        string
}

const mrAccess = "local_write,remote_write,remote_read,remote_atomic"

func (m *mnt) setup() *setup {
	m.t.Helper()
	s := &setup{}
	s.pd = m.create("pd", "")
	s.cq = m.create("cq", "cqe=64")
	s.mrA = m.create("mr", fmt.Sprintf("pd=%s length=4096 access=%s", s.pd, mrAccess))
	s.mrB = m.create("mr", fmt.Sprintf("pd=%s length=8192 iova=0x10000 access=%s", s.pd, mrAccess))
	qpLine := fmt.Sprintf("pd=%s qp_type=rc send_cq=%s recv_cq=%s max_send_wr=16 max_recv_wr=16 max_send_sge=2 max_recv_sge=2", s.pd, s.cq, s.cq)
	s.qa = m.create("qp", qpLine)
	s.qb = m.create("qp", qpLine)
	a, b := m.attrs("mr", s.mrA, "attr"), m.attrs("mr", s.mrB, "attr")
	s.lkeyA, s.lkeyB, s.rkeyB, s.iovaB = a["lkey"], b["lkey"], b["rkey"], b["iova"]
	return s
}

func (m *mnt) gid() string {
	m.t.Helper()
	return m.attrs("port")["gid"]
}

// toRTR walks q from RESET through INIT to RTR towards dest.
func (m *mnt) toRTR(q, dest string) {
	m.t.Helper()
	m.mustWrite("modify qp_state=INIT pkey_index=0 port_num=1 qp_access_flags="+mrAccess, "qp", q, "ctl")
	if st := m.state(q); st != "INIT" {
		m.t.Fatalf("qp %s: state %s after INIT", q, st)
	}
	m.mustWrite(fmt.Sprintf("modify qp_state=RTR path_mtu=1024 rq_psn=500 max_dest_rd_atomic=4 min_rnr_timer=12 dest_qp_num=%s dgid=%s", dest, m.gid()), "qp", q, "ctl")
	if st := m.state(q); st != "RTR" {
		m.t.Fatalf("qp %s: state %s after RTR", q, st)
	}
}

func (m *mnt) toRTS(q string) {
	m.t.Helper()
	m.mustWrite("modify qp_state=RTS sq_psn=500 timeout=14 retry_cnt=7 rnr_retry=7 max_rd_atomic=4", "qp", q, "ctl")
	if st := m.state(q); st != "RTS" {
		m.t.Fatalf("qp %s: state %s after RTS", q, st)
	}
}

// connect brings both QPs of s to RTS, connected to each other.
func (m *mnt) connect(s *setup) {
	m.t.Helper()
	m.toRTR(s.qa, s.qb)
	m.toRTR(s.qb, s.qa)
	m.toRTS(s.qa)
	m.toRTS(s.qb)
}
