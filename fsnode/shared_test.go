package fsnode_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"rdmafs/device"
	"rdmafs/fsnode"
	"rdmafs/internal/testmount"
	"rdmafs/qp"
	"rdmafs/ring"
)

const nobody = 65534

// TestOtherUser: a second, unprivileged uid cannot touch root's objects
// but can make and use its own.
func TestOtherUser(t *testing.T) {
	m := mount(t)
	s := m.setup()
	for _, tc := range []struct{ what, script string }{
		{"write qp ctl", fmt.Sprintf(`echo "modify qp_state=INIT pkey_index=0 port_num=1 qp_access_flags=local_write" > %s`, m.path("qp", s.qa, "ctl"))},
		{"post_send", fmt.Sprintf(`echo "opcode=send wr_id=1" > %s`, m.path("qp", s.qa, "post_send"))},
		{"read mr mem", "cat " + m.path("mr", s.mrA, "mem")},
		{"write mr mem", "echo hi > " + m.path("mr", s.mrA, "mem")},
		{"open sq", "cat " + m.path("qp", s.qa, "sq")},
		{"poll cq", "cat " + m.path("cq", s.cq, "poll")},
		{"rmdir qp", "rmdir " + m.path("qp", s.qa)},
		{"rmdir pd", "rmdir " + m.path("pd", s.pd)},
	} {
		_, stderr, err := bash(nobody, tc.script)
		if err == nil || !strings.Contains(stderr, "Permission denied") {
			t.Errorf("uid %d %s: err %v stderr %q, want Permission denied", nobody, tc.what, err, stderr)
		}
	}
	if st := m.state(s.qa); st != "RESET" {
		t.Errorf("qp state after the other user's attempt: %s", st)
	}
	// 0644 files are readable.
	out, stderr, err := bash(nobody, "cat "+m.path("qp", s.qa, "state"))
	if err != nil || out != "RESET\n" {
		t.Errorf("uid %d cat state: %q %q %v", nobody, out, stderr, err)
	}
	// Naming root's PD in a request is EACCES too.
	_, stderr, _ = bash(nobody, fmt.Sprintf(`{ echo "pd=%s length=64" >&0; read -r x; echo "$x"; } <>%s`, s.pd, m.path("mr", "new")))
	if !strings.Contains(stderr, "Permission denied") {
		t.Errorf("mr on another user's pd: stderr %q", stderr)
	}
	// Its own objects: created, owned, usable, removable.
	script := fmt.Sprintf(`set -e
M=%s
{ echo "" >&0; read -r pd; } <>$M/pd/new
{ echo "pd=$pd length=64 access=local_write" >&0; read -r mr; } <>$M/mr/new
{ echo "cqe=4" >&0; read -r cq; } <>$M/cq/new
{ echo "pd=$pd qp_type=rc send_cq=$cq recv_cq=$cq max_send_wr=2 max_recv_wr=2" >&0; read -r qp; } <>$M/qp/new
echo "modify qp_state=INIT pkey_index=0 port_num=1 qp_access_flags=local_write" > $M/qp/$qp/ctl
printf hello | dd of=$M/mr/$mr/mem conv=notrunc status=none
echo "$pd $mr $cq $qp $(cat $M/qp/$qp/state) $(head -c 5 $M/mr/$mr/mem)"
`, m.dir)
	out, stderr, err = bash(nobody, script)
	if err != nil {
		t.Fatalf("uid %d own objects: %v\n%s", nobody, err, stderr)
	}
	f := strings.Fields(out)
	if len(f) != 6 || f[4] != "INIT" || f[5] != "hello" {
		t.Fatalf("uid %d own objects: %q", nobody, out)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(m.path("qp", f[3], "ctl"), &st); err != nil {
		t.Fatal(err)
	}
	if st.Uid != nobody || st.Mode&0777 != 0600 {
		t.Errorf("qp/%s/ctl: uid %d mode %o", f[3], st.Uid, st.Mode&0777)
	}
	// Root may use it; the owner removes it.
	if st := m.state(f[3]); st != "INIT" {
		t.Errorf("root reads state: %s", st)
	}
	if _, stderr, err := bash(nobody, fmt.Sprintf("rmdir %s %s", m.path("qp", f[3]), m.path("cq", f[2]))); err != nil {
		t.Errorf("owner rmdir: %v %s", err, stderr)
	}
}

// TestOtherUserCannotReadKeys: keys, PSNs and per-QP counters are the
// owner's (0600); state, error and the device's files stay readable by all.
func TestOtherUserCannotReadKeys(t *testing.T) {
	m := mount(t)
	s := m.setup()
	secret := [][]string{
		{"mr", s.mrA, "attr"}, {"mr", s.mrB, "attr"}, {"qp", s.qa, "attr"},
		{"qp", s.qa, "counters"}, {"pd", s.pd, "attr"}, {"cq", s.cq, "attr"},
	}
	for _, p := range secret {
		_, stderr, err := bash(nobody, "cat "+m.path(p...))
		if err == nil || !strings.Contains(stderr, "Permission denied") {
			t.Errorf("uid %d cat %s: err %v stderr %q, want Permission denied", nobody, strings.Join(p, "/"), err, stderr)
		}
		var st syscall.Stat_t
		if err := syscall.Stat(m.path(p...), &st); err != nil {
			t.Fatal(err)
		}
		if st.Mode&0777 != 0600 {
			t.Errorf("%s: mode %o, want 600", strings.Join(p, "/"), st.Mode&0777)
		}
	}
	// The owner (root here) reads them.
	if a := m.attrs("mr", s.mrB, "attr"); a["rkey"] == "" {
		t.Errorf("root cannot read its rkey: %v", a)
	}
	for _, p := range [][]string{{"qp", s.qa, "state"}, {"qp", s.qa, "error"}, {"mr", s.mrA, "error"}, {"device"}, {"port"}, {"README"}} {
		if _, stderr, err := bash(nobody, "cat "+m.path(p...)+" >/dev/null"); err != nil {
			t.Errorf("uid %d cat %s: %v %q", nobody, strings.Join(p, "/"), err, stderr)
		}
	}
	// And a second user's own attr is its own: root reads it too.
	out, stderr, err := bash(nobody, fmt.Sprintf(`set -e; M=%s
{ echo "" >&0; read -r pd; } <>$M/pd/new
{ echo "pd=$pd length=64 access=local_write" >&0; read -r mr; } <>$M/mr/new
grep -c key= $M/mr/$mr/attr; echo $mr`, m.dir))
	f := strings.Fields(out)
	if err != nil || len(f) != 2 || f[0] != "2" {
		t.Fatalf("uid %d reads its own attr: %q %q %v", nobody, out, stderr, err)
	}
	if a := m.attrs("mr", f[1], "attr"); a["lkey"] == "" {
		t.Errorf("root cannot read uid %d's attr: %v", nobody, a)
	}
}

// mapFile maps a file of the tree and unmaps it at the end of the test.
func mapFile(t *testing.T, path string) *ring.Region {
	t.Helper()
	r, err := ring.MapFile(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// TestMmapDataPath drives an RDMA WRITE with no text file at all: the WQE
// goes into the mapped SQ, a write() to the sq file rings the doorbell,
// the completion appears in the mapped CQ ring and the data in the mapped
// MR.
func TestMmapDataPath(t *testing.T) {
	m := mount(t)
	s := m.setup()
	m.connect(s)
	sq := mapFile(t, m.path("qp", s.qa, "sq"))
	cqr := mapFile(t, m.path("cq", s.cq, "ring"))
	memA := mapFile(t, m.path("mr", s.mrA, "mem"))
	memB := mapFile(t, m.path("mr", s.mrB, "mem"))
	if len(memA.Bytes()) != 4096 || len(memB.Bytes()) != 8192 {
		t.Fatalf("mr mappings: %d and %d bytes", len(memA.Bytes()), len(memB.Bytes()))
	}

	// The mapping is the device's memory: a byte written through the file
	// is in the mapping, and the other way round.
	if err := os.WriteFile(m.path("mr", s.mrA, "mem"), []byte("via file"), 0); err != nil {
		t.Fatal(err)
	}
	if got := string(memA.Bytes()[:8]); got != "via file" {
		t.Fatalf("mapping does not see a write through the file: %q", got)
	}
	payload := []byte("straight through shared memory!!")
	copy(memA.Bytes()[256:], payload)

	sqRing, err := ring.Attach(sq.Bytes(), ring.KindSQ)
	if err != nil {
		t.Fatal(err)
	}
	cqRing, err := ring.Attach(cqr.Bytes(), ring.KindCQ)
	if err != nil {
		t.Fatal(err)
	}
	lkey, _ := strconv.ParseUint(s.lkeyA, 0, 32)
	rkey, _ := strconv.ParseUint(s.rkeyB, 0, 32)
	iova, _ := strconv.ParseUint(s.iovaB, 0, 64)
	p := ring.NewProducer(sqRing)
	if free, err := p.Free(); err != nil || free == 0 {
		t.Fatalf("sq free %d, %v", free, err)
	}
	wr := qp.SendWR{WRID: 4242, Opcode: qp.WRRDMAWrite, SendFlags: qp.SendSignaled,
		SGL:        []qp.SGE{{Addr: 256, Length: uint32(len(payload)), LKey: uint32(lkey)}},
		RemoteAddr: iova + 512, RKey: uint32(rkey)}
	if err := ring.EncodeSendWQE(p.Next(), &wr); err != nil {
		t.Fatal(err)
	}
	p.Advance()
	p.Publish()
	doorbells := m.dev.Counters.Doorbells.Load()
	if _, err := unix.Write(sq.Fd(), []byte{1}); err != nil {
		t.Fatalf("doorbell: %v", err)
	}
	if m.dev.Counters.Doorbells.Load() != doorbells+1 {
		t.Errorf("the write to sq did not ring the doorbell")
	}

	c := ring.NewConsumer(cqRing)
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, err := c.Pending()
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no completion in the mapped CQ ring after 10s")
		}
		time.Sleep(100 * time.Microsecond)
	}
	var wc qp.WC
	ring.DecodeCQE(c.Peek(0), &wc)
	c.Advance(1)
	c.Publish()
	if wc.WRID != 4242 || wc.Status != qp.WCSuccess || wc.Opcode != qp.WCRDMAWrite {
		t.Errorf("completion: %s", qp.FormatWC(&wc))
	}
	if got := memB.Bytes()[512 : 512+len(payload)]; !bytes.Equal(got, payload) {
		t.Errorf("mapped MR B: %q", got)
	}
	// The mapped consumer took it: the poll file has nothing.
	if s := m.read("cq", s.cq, "poll"); s != "" {
		t.Errorf("poll after consuming through the mapping: %q", s)
	}
	// And a read of the MR through the daemon sees the same bytes.
	f, err := os.Open(m.path("mr", s.mrB, "mem"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got := make([]byte, len(payload))
	if _, err := f.ReadAt(got, 512); err != nil || !bytes.Equal(got, payload) {
		t.Errorf("pread of mr B: %q %v", got, err)
	}
}

// TestNotify: a read of notify blocks until an armed event fires; the
// channel FIFO gets a line for the same event; an interrupted read ends
// cleanly.
func TestNotify(t *testing.T) {
	m := mount(t)
	s := m.setup()
	m.connect(s)

	link, err := os.Readlink(m.path("cq", s.cq, "channel"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(link, m.srv.RuntimeDir()) {
		t.Errorf("channel -> %s, not in %s", link, m.srv.RuntimeDir())
	}
	fifo, err := os.OpenFile(m.path("cq", s.cq, "channel"), os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fifo.Close()

	n, err := os.OpenFile(m.path("cq", s.cq, "notify"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if _, err := n.Write([]byte("next\n")); err != nil {
		t.Fatal(err)
	}
	type result struct {
		s   string
		err error
	}
	done := make(chan result, 1)
	go func() {
		b := make([]byte, 100)
		k, err := n.Read(b)
		done <- result{string(b[:k]), err}
	}()
	select {
	case r := <-done:
		t.Fatalf("notify returned before any completion: %q %v", r.s, r.err)
	default:
	}
	m.mustWrite(fmt.Sprintf("opcode=rdma_write wr_id=8 sge=%s:0:8 remote_addr=%s rkey=%s send_flags=signaled", s.lkeyA, s.iovaB, s.rkeyB), "qp", s.qa, "post_send")
	select {
	case r := <-done:
		if r.err != nil || r.s != "event cq="+s.cq+"\n" {
			t.Errorf("notify: %q %v", r.s, r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("notify did not return within 10s of a signaled completion")
	}
	// One event per open: then end of file.
	b := make([]byte, 100)
	if k, err := n.Read(b); k != 0 {
		t.Errorf("second read of notify: %q %v", b[:k], err)
	}
	fifo.SetReadDeadline(time.Now().Add(10 * time.Second))
	k, err := fifo.Read(b)
	if err != nil || string(b[:k]) != "event cq="+s.cq+"\n" {
		t.Errorf("channel: %q %v", b[:k], err)
	}
	m.pollUntil(s.cq, 1)

	// Bad arming requests.
	if _, err := n.Write([]byte("later")); errnoOf(err) != syscall.EINVAL {
		t.Errorf("notify 'later': %v", err)
	}
	if e := m.lastError("cq", s.cq, "notify"); !strings.Contains(e, "later") {
		t.Errorf("error file: %q", e)
	}

	// An interrupted wait ends cleanly (SIGINT, as Ctrl-C), for notify and
	// events alike, and the daemon goes on.
	for _, f := range []string{m.path("cq", s.cq, "notify"), m.path("events")} {
		start := time.Now()
		cmd := exec.Command("timeout", "-s", "INT", "0.3", "cat", f)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !asExit(err, &ee) || ee.ExitCode() != 124 {
			t.Errorf("interrupted cat %s: %v %q", f, err, out)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("interrupted cat %s took %v", f, d)
		}
	}
	m.create("pd", "")
}

func asExit(err error, ee **exec.ExitError) bool {
	e, ok := err.(*exec.ExitError)
	if ok {
		*ee = e
	}
	return ok
}

// TestUnmountWithLiveMapping: a mapping pins the mount; Unmount detaches
// it lazily, the server stops, and the mapping still works.
func TestUnmountWithLiveMapping(t *testing.T) {
	dev, err := device.New(device.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	dir := t.TempDir()
	srv, err := fsnode.Mount(dir, dev, fsnode.Options{})
	if err != nil {
		testmount.CannotMount(t, err)
	}
	m := &mnt{t: t, dir: dir, dev: dev, srv: srv}
	pd := m.create("pd", "")
	mr := m.create("mr", "pd="+pd+" length=4096 access=local_write")
	r, err := ring.MapFile(m.path("mr", mr, "mem"))
	if err != nil {
		srv.Unmount()
		t.Fatal(err)
	}
	defer r.Close()
	copy(r.Bytes(), "still here")
	// A reader blocked in the daemon must see an error, not hang.
	ev, err := os.Open(m.path("events"))
	if err != nil {
		t.Fatal(err)
	}
	defer ev.Close()
	evErr := make(chan error, 1)
	go func() {
		_, err := ev.Read(make([]byte, 100))
		evErr <- err
	}()
	if err := srv.Unmount(); err != nil {
		t.Fatalf("unmount with a live mapping: %v", err)
	}
	select {
	case err := <-evErr:
		// The kernel fails requests in flight at the abort with
		// ECONNABORTED, later ones with ENOTCONN.
		if e := errnoOf(err); e != syscall.ECONNABORTED && e != syscall.ENOTCONN {
			t.Errorf("blocked events read after unmount: %v, want ECONNABORTED", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a blocked read hangs after unmount")
	}
	if _, err := unix.Write(r.Fd(), []byte{1}); err != syscall.ENOTCONN {
		t.Errorf("write to an open file after unmount: %v, want ENOTCONN", err)
	}
	if err := srv.Unmount(); err != nil {
		t.Errorf("second Unmount: %v", err)
	}
	waited := make(chan struct{})
	go func() { srv.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not return after Unmount")
	}
	if got := string(r.Bytes()[:10]); got != "still here" {
		t.Errorf("mapping after unmount: %q", got)
	}
	if _, err := os.Stat(m.path("README")); !os.IsNotExist(err) {
		t.Errorf("tree still visible after unmount: %v", err)
	}
	if _, err := os.Stat(srv.RuntimeDir()); !os.IsNotExist(err) {
		t.Errorf("runtime dir left behind: %v", err)
	}
}
