package fsnode_test

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"rdmafs/ring"
)

func TestRootFiles(t *testing.T) {
	m := mount(t)
	dev := m.attrs("device")
	for _, k := range []string{"fw_ver", "node_guid", "max_qp", "max_qp_wr", "max_sge", "max_cq", "max_cqe",
		"max_mr", "max_mr_size", "max_pd", "max_qp_rd_atom", "max_qp_init_rd_atom", "max_srq", "max_srq_wr",
		"max_srq_sge", "max_mw", "max_ah", "max_inline_data", "phys_port_cnt", "atomic_cap"} {
		if _, ok := dev[k]; !ok {
			t.Errorf("device: no %s in %v", k, dev)
		}
	}
	if dev["max_qp"] != "1024" || dev["phys_port_cnt"] != "1" {
		t.Errorf("device: max_qp=%s phys_port_cnt=%s", dev["max_qp"], dev["phys_port_cnt"])
	}
	port := m.attrs("port")
	if port["state"] != "ACTIVE" || port["active_mtu"] != "4096" || port["gid"] == "" {
		t.Errorf("port: %v", port)
	}
	if c := m.attrs("counters"); c["completions"] != "0" {
		t.Errorf("counters: %v", c)
	}
	if r := m.read("README"); !strings.Contains(r, "qp/new") || !strings.Contains(r, "post_send") {
		t.Errorf("README does not describe the tree:\n%s", r)
	}
	ents, err := os.ReadDir(m.dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	want := "README ah capture clock cm counters cq device doorbell events faults lease mr mw pd port qp srq sys xrcd"
	if got := strings.Join(names, " "); got != want {
		t.Errorf("root: %q, want %q", got, want)
	}
}

// TestBashTransaction is the shell idiom of DESIGN.md: one <> open, a
// write, a read of the answer; and the failing variant.
func TestBashTransaction(t *testing.T) {
	m := mount(t)
	out, stderr, err := bash(0, fmt.Sprintf(`{ echo "" >&0; read -r pd; echo "pd=$pd"; } <>%s/pd/new`, m.dir))
	if err != nil || strings.TrimSpace(out) != "pd=1" {
		t.Fatalf("pd transaction: out %q stderr %q err %v", out, stderr, err)
	}
	out, stderr, err = bash(0, fmt.Sprintf(`{ echo "cqe=8" >&0; read -r cq; echo "$cq"; echo "cqe=16" >&0; read -r cq2; echo "$cq2"; } <>%s/cq/new`, m.dir))
	if err != nil || out != "1\n2\n" {
		t.Fatalf("two cq transactions on one open: out %q stderr %q err %v", out, stderr, err)
	}
	out, stderr, _ = bash(0, fmt.Sprintf(`{ echo "pd=1 qp_type=rc send_cq=1 recv_cq=1 bogus=3" >&0; read -r qpn; echo "$qpn"; } <>%s/qp/new`, m.dir))
	if !strings.Contains(stderr, "write error: Invalid argument") {
		t.Errorf("failed transaction: stderr %q", stderr)
	}
	if !strings.HasPrefix(out, "error: ") || !strings.Contains(out, "bogus") {
		t.Errorf("failed transaction: read %q, want error: ... bogus", out)
	}
	if _, err := os.Stat(m.path("qp", "16")); !os.IsNotExist(err) {
		t.Errorf("a failed create left a directory: %v", err)
	}
}

func TestRCSendAndWrite(t *testing.T) {
	m := mount(t)
	s := m.setup()

	// B stays in RTR for the SEND: its first packet raises comm_est.
	m.toRTR(s.qa, s.qb)
	m.toRTR(s.qb, s.qa)
	m.toRTS(s.qa)

	// Memory through dd (pwrite at an offset) and os.WriteFile (offset 0).
	if out, stderr, err := bash(0, fmt.Sprintf(`printf 'SENDDATA' | dd of=%s bs=1 seek=100 conv=notrunc status=none`, m.path("mr", s.mrA, "mem"))); err != nil {
		t.Fatalf("dd: %v %s %s", err, out, stderr)
	}
	if err := os.WriteFile(m.path("mr", s.mrA, "mem"), []byte("hello rdma"), 0); err != nil {
		t.Fatal(err)
	}

	m.mustWrite(fmt.Sprintf("wr_id=77 sge=%s:%d:64\n", s.lkeyB, 0x10000+200), "qp", s.qb, "post_recv")
	m.mustWrite(fmt.Sprintf("opcode=send wr_id=2 sge=%s:100:8 send_flags=signaled\n", s.lkeyA), "qp", s.qa, "post_send")
	wcs := m.pollUntil(s.cq, 2)
	if wc := findWC(t, wcs, "2"); !strings.Contains(wc, "status=success") || !strings.Contains(wc, "opcode=send") {
		t.Errorf("send completion: %s", wc)
	}
	if wc := findWC(t, wcs, "77"); !strings.Contains(wc, "status=success opcode=recv qp_num="+s.qb+" byte_len=8") {
		t.Errorf("recv completion: %s", wc)
	}
	f, err := os.Open(m.path("mr", s.mrB, "mem"))
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 8)
	if _, err := f.ReadAt(got, 200); err != nil || string(got) != "SENDDATA" {
		t.Errorf("mr %s at 200: %q, %v", s.mrB, got, err)
	}
	f.Close()
	ev := m.read("events")
	if !strings.Contains(ev, "event=comm_est qp="+s.qb) {
		t.Errorf("events: %q, want comm_est for qp %s", ev, s.qb)
	}

	m.toRTS(s.qb)
	m.mustWrite(fmt.Sprintf("opcode=rdma_write wr_id=3 sge=%s:0:10 remote_addr=%s rkey=%s send_flags=signaled\n",
		s.lkeyA, s.iovaB, s.rkeyB), "qp", s.qa, "post_send")
	if wc := findWC(t, m.pollUntil(s.cq, 1), "3"); !strings.Contains(wc, "status=success opcode=rdma_write") {
		t.Errorf("write completion: %s", wc)
	}
	out, stderr, err := bash(0, fmt.Sprintf(`dd if=%s bs=1 count=10 status=none`, m.path("mr", s.mrB, "mem")))
	if err != nil || out != "hello rdma" {
		t.Errorf("dd of mr %s: %q %v %s", s.mrB, out, err, stderr)
	}
	out, _, err = bash(0, fmt.Sprintf(`cat %s %s`, m.path("qp", s.qa, "state"), m.path("qp", s.qb, "state")))
	if err != nil || out != "RTS\nRTS\n" {
		t.Errorf("cat state: %q %v", out, err)
	}
	if c := m.attrs("qp", s.qa, "counters"); c["send_wqes"] == "0" && c["packets_sent"] == "0" {
		t.Errorf("qp counters did not move: %v", c)
	}
	a := m.attrs("qp", s.qa, "attr")
	if a["qp_state"] != "RTS" || a["dest_qp_num"] != s.qb || a["qp_num"] != s.qa || a["qp_type"] != "rc" ||
		a["pd"] != s.pd || a["send_cq"] != s.cq || a["path_mtu"] != "1024" {
		t.Errorf("qp attr: %v", a)
	}
	// bash's read builtin reads the nonseekable poll file byte by byte;
	// the completions come out whole and in order.
	m.mustWrite(fmt.Sprintf("opcode=rdma_write wr_id=20 sge=%s:0:4 remote_addr=%s rkey=%s send_flags=signaled\nopcode=rdma_write wr_id=21 sge=%s:0:4 remote_addr=%s rkey=%s send_flags=signaled\n",
		s.lkeyA, s.iovaB, s.rkeyB, s.lkeyA, s.iovaB, s.rkeyB), "qp", s.qa, "post_send")
	deadline := time.Now().Add(10 * time.Second)
	for m.attrs("counters")["completions"] != "5" && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	out, _, err = bash(0, fmt.Sprintf(`{ read -r a; read -r b; echo "$a|$b"; } < %s`, m.path("cq", s.cq, "poll")))
	if err != nil || !strings.HasPrefix(out, "wr_id=20 status=success") || !strings.Contains(out, "|wr_id=21 status=success") {
		t.Errorf("bash read of poll: %q %v", out, err)
	}
	// Empty poll once everything is consumed.
	if p := m.read("cq", s.cq, "poll"); p != "" {
		t.Errorf("poll after draining: %q", p)
	}

	// A multi-line post stops at the first bad line; the earlier ones stay
	// posted and complete.
	err = m.write(fmt.Sprintf("opcode=rdma_write wr_id=10 sge=%s:0:4 remote_addr=%s rkey=%s send_flags=signaled\nopcode=teleport wr_id=11\nopcode=send wr_id=12\n",
		s.lkeyA, s.iovaB, s.rkeyB), "qp", s.qa, "post_send")
	if errnoOf(err) != syscall.EINVAL {
		t.Errorf("post with a bad second line: %v, want EINVAL", err)
	}
	if e := m.lastError("qp", s.qa, "post_send"); !strings.Contains(e, "line 2") || !strings.Contains(e, "opcode") {
		t.Errorf("error file: %q", e)
	}
	wcs = m.pollUntil(s.cq, 1)
	if len(wcs) != 1 || !strings.HasPrefix(wcs[0], "wr_id=10 status=success") {
		t.Errorf("completions after partial post: %q", wcs)
	}
}

func TestTransactionErrors(t *testing.T) {
	m := mount(t)
	pd := m.create("pd", "")
	cq := m.create("cq", "cqe=4")
	for _, tc := range []struct {
		kind, line string
		errno      syscall.Errno
		reason     string // in the read-back line
	}{
		{"pd", "bogus=1", syscall.EINVAL, "bogus: unknown key"},
		{"qp", "pd=" + pd + " qp_type=rc send_cq=" + cq + " recv_cq=" + cq + " colour=red", syscall.EINVAL, "colour: unknown key"},
		{"qp", "pd=" + pd + " pd=" + pd + " qp_type=rc send_cq=" + cq + " recv_cq=" + cq, syscall.EINVAL, "pd: repeated key"},
		{"qp", "pd=" + pd + " qp_type=rc send_cq=" + cq, syscall.EINVAL, "recv_cq: missing required key"},
		{"qp", "pd=" + pd + " qp_type=rc send_cq=" + cq + " recv_cq=" + cq + " max_send_wr=99999999", syscall.EINVAL, "max_send_wr"},
		{"qp", "pd=" + pd + " qp_type=raw_packet send_cq=" + cq + " recv_cq=" + cq, syscall.EOPNOTSUPP, "not supported"},
		{"qp", "qp_type=xrc_recv xrcd=77", syscall.EINVAL, "xrcd 77 does not exist"},
		{"qp", "qp_type=xrc_recv xrcd=1 pd=" + pd, syscall.EINVAL, "only xrcd="},
		{"xrcd", "fd=987", syscall.EBADF, "not an open descriptor"},
		{"xrcd", "excl=1", syscall.EINVAL, "need fd=N"},
		{"qp", "pd=" + pd + " qp_type=rc send_cq=999 recv_cq=" + cq, syscall.EINVAL, "cq 999 does not exist"},
		{"cq", "cqe=0", syscall.EINVAL, "cqe: out of range"},
		{"cq", "cqe=99999999999", syscall.EINVAL, "cqe: out of range"},
		{"cq", "cqe=-1", syscall.EINVAL, "cqe"},
		{"mr", "pd=" + pd + " length=4096 access=remote_write", syscall.EINVAL, "need local_write"},
		{"mr", "pd=77 length=4096", syscall.EINVAL, "pd 77 does not exist"},
		{"mr", "pd=" + pd + " length=4096 access=bogus", syscall.EINVAL, "unknown flag"},
		{"srq", "pd=" + pd + " max_wr=0 max_sge=1", syscall.EINVAL, "max_wr"},
		{"ah", "pd=" + pd + " dgid=nonsense", syscall.EINVAL, "dgid"},
		{"mw", "pd=" + pd + " type=3", syscall.EINVAL, "type"},
		{"pd", "x", syscall.EINVAL, "not a key=value token"},
	} {
		resp, err := m.tryCreate(tc.kind, tc.line)
		if errnoOf(err) != tc.errno {
			t.Errorf("%s/new %q: %v, want %v", tc.kind, tc.line, err, tc.errno)
		}
		if !strings.HasPrefix(resp, "error: ") || !strings.Contains(resp, tc.reason) {
			t.Errorf("%s/new %q: read %q, want error: ...%s...", tc.kind, tc.line, resp, tc.reason)
		}
	}
	// Nothing was created by the failures.
	for _, k := range []string{"qp", "mr", "srq", "ah", "mw", "xrcd"} {
		ents, _ := os.ReadDir(m.path(k))
		if len(ents) != 1 {
			t.Errorf("%s/ has %d entries after failed creates, want only new", k, len(ents))
		}
	}
	// The others work.
	m.create("srq", "pd="+pd+" max_wr=8 max_sge=1")
	ah := m.create("ah", "pd="+pd+" dgid="+m.gid()+" sl=3")
	if a := m.attrs("ah", ah, "attr"); a["sl"] != "3" || a["dgid"] != m.gid() {
		t.Errorf("ah attr: %v", a)
	}
	mw := m.create("mw", "pd="+pd+" type=2")
	if a := m.attrs("mw", mw, "attr"); a["type"] != "2" || a["bound"] != "0" {
		t.Errorf("mw attr: %v", a)
	}
}

func TestIllegalTransitions(t *testing.T) {
	m := mount(t)
	s := m.setup()
	ctl := func(cmd string) error { return m.write(cmd, "qp", s.qa, "ctl") }
	before := m.read("qp", s.qa, "attr")
	for _, tc := range []struct {
		cmd, reason string
	}{
		{"modify qp_state=RTS", "qp_state"},
		{"modify qp_state=INIT", "required for RESET -> INIT"}, // missing required attributes
		{"modify qp_state=INIT pkey_index=0 port_num=1 qp_access_flags=local_write path_mtu=1024", "path_mtu"},
		{"modify qp_state=BOGUS", "qp_state"},
		{"modify colour=blue", "colour"},
		{"modify timeout=99999", "timeout"},
		{"frobnicate", "unknown command"},
		{"reset now", "no arguments"},
		{"", "empty command"},
	} {
		err := ctl(tc.cmd + "\n")
		if errnoOf(err) != syscall.EINVAL {
			t.Errorf("%q: %v, want EINVAL", tc.cmd, err)
		}
		if e := m.lastError("qp", s.qa, "ctl"); !strings.Contains(e, tc.reason) {
			t.Errorf("%q: error file %q, want %q in it", tc.cmd, e, tc.reason)
		}
		if st := m.state(s.qa); st != "RESET" {
			t.Errorf("%q: state %s, want RESET", tc.cmd, st)
		}
	}
	if after := m.read("qp", s.qa, "attr"); after != before {
		t.Errorf("failed modifies changed attr:\n%s\nvs\n%s", before, after)
	}
	// In INIT, an RTR without its required attributes changes nothing.
	m.mustWrite("modify qp_state=INIT pkey_index=0 port_num=1 qp_access_flags=local_write", "qp", s.qa, "ctl")
	before = m.read("qp", s.qa, "attr")
	if err := ctl("modify qp_state=RTR path_mtu=1024"); errnoOf(err) != syscall.EINVAL {
		t.Errorf("RTR without dest: %v", err)
	}
	if after := m.read("qp", s.qa, "attr"); after != before || m.state(s.qa) != "INIT" {
		t.Errorf("failed RTR changed the QP:\n%s\nvs\n%s", before, after)
	}
	// Posting a send in INIT is EINVAL.
	if err := m.write("opcode=send wr_id=1\n", "qp", s.qa, "post_send"); errnoOf(err) != syscall.EINVAL {
		t.Errorf("send in INIT: %v", err)
	}
	// error, then reset.
	m.mustWrite("error\n", "qp", s.qa, "ctl")
	if st := m.state(s.qa); st != "ERR" {
		t.Errorf("after error: %s", st)
	}
	m.mustWrite("reset\n", "qp", s.qa, "ctl")
	if st := m.state(s.qa); st != "RESET" {
		t.Errorf("after reset: %s", st)
	}
	// A pasted attr line is a valid modify token.
	m.mustWrite("modify qp_state=INIT pkey_index=0 port_num=1 qp_access_flags=local_write,remote_write", "qp", s.qa, "ctl")
	a := m.attrs("qp", s.qa, "attr")
	if a["qp_access_flags"] != "local_write,remote_write" {
		t.Errorf("qp_access_flags: %q", a["qp_access_flags"])
	}
}

func TestRmdir(t *testing.T) {
	m := mount(t)
	s := m.setup()
	for _, tc := range []struct{ kind, name string }{{"pd", s.pd}, {"cq", s.cq}} {
		err := syscall.Rmdir(m.path(tc.kind, tc.name))
		if err != syscall.EBUSY {
			t.Errorf("rmdir %s/%s in use: %v, want EBUSY", tc.kind, tc.name, err)
		}
		if e := m.lastError(tc.kind, tc.name, "attr"); e == "" {
			t.Errorf("rmdir %s/%s: no reason in the error file", tc.kind, tc.name)
		}
		if _, err := os.Stat(m.path(tc.kind, tc.name)); err != nil {
			t.Errorf("%s/%s gone after a failed rmdir: %v", tc.kind, tc.name, err)
		}
	}
	// A QP with work outstanding goes; then its CQ, MRs and PD can.
	m.connect(s)
	m.mustWrite(fmt.Sprintf("wr_id=1 sge=%s:%s:16\n", s.lkeyB, s.iovaB), "qp", s.qb, "post_recv")
	for _, p := range [][]string{{"qp", s.qa}, {"qp", s.qb}, {"cq", s.cq}, {"mr", s.mrA}, {"mr", s.mrB}, {"pd", s.pd}} {
		if err := os.Remove(m.path(p...)); err != nil {
			t.Fatalf("rmdir %v: %v", p, err)
		}
		if _, err := os.Stat(m.path(p...)); !os.IsNotExist(err) {
			t.Errorf("%v still there: %v", p, err)
		}
	}
	if err := syscall.Rmdir(m.path("qp", s.qa)); err != syscall.ENOENT {
		t.Errorf("second rmdir: %v", err)
	}
	// The device lets the handles go: new objects work.
	m.create("pd", "")
}

func TestStructuralChanges(t *testing.T) {
	m := mount(t)
	s := m.setup()
	q := func(p ...string) string { return m.path(append([]string{"qp", s.qa}, p...)...) }
	checks := []struct {
		what  string
		err   error
		errno syscall.Errno
	}{
		{"mkdir in root", syscall.Mkdir(m.path("x"), 0755), syscall.EPERM},
		{"mkdir in pd/", syscall.Mkdir(m.path("pd", "9"), 0755), syscall.EPERM},
		{"mkdir in qp/N", syscall.Mkdir(q("x"), 0755), syscall.EPERM},
		{"unlink README", syscall.Unlink(m.path("README")), syscall.EPERM},
		{"unlink new", syscall.Unlink(m.path("qp", "new")), syscall.EPERM},
		{"unlink ctl", syscall.Unlink(q("ctl")), syscall.EPERM},
		{"rename qp", syscall.Rename(m.path("qp", s.qa), m.path("qp", "99")), syscall.EPERM},
		{"rename ctl", syscall.Rename(q("ctl"), q("ctl2")), syscall.EPERM},
		{"symlink", syscall.Symlink("/tmp", q("link")), syscall.EPERM},
		{"link", syscall.Link(q("ctl"), q("ctl2")), syscall.EPERM},
		{"mknod", syscall.Mknod(q("fifo"), syscall.S_IFIFO|0600, 0), syscall.EPERM},
		{"rmdir pd/", syscall.Rmdir(m.path("pd")), syscall.EPERM},
		{"truncate ctl to 10", syscall.Truncate(q("ctl"), 10), syscall.EPERM},
		{"truncate mem to 10", syscall.Truncate(m.path("mr", s.mrA, "mem"), 10), syscall.EPERM},
		{"truncate attr", syscall.Truncate(q("attr"), 0), syscall.EACCES},
		{"chmod ctl", syscall.Chmod(q("ctl"), 0666), syscall.EPERM},
		{"chown ctl", syscall.Chown(q("ctl"), 1, 1), syscall.EPERM},
	}
	_, createErr := os.OpenFile(m.path("qp", s.qa, "newfile"), os.O_CREATE|os.O_WRONLY, 0644)
	checks = append(checks, struct {
		what  string
		err   error
		errno syscall.Errno
	}{"create", createErr, syscall.EPERM})
	for _, c := range checks {
		if errnoOf(c.err) != c.errno {
			t.Errorf("%s: %v, want %v", c.what, c.err, c.errno)
		}
	}
	// Read-only files refuse writes and write-only files reads, at open.
	for _, p := range [][]string{{"device"}, {"README"}, {"events"}, {"qp", s.qa, "attr"}, {"qp", s.qa, "state"}, {"qp", s.qa, "error"}, {"cq", s.cq, "poll"}} {
		_, err := os.OpenFile(m.path(p...), os.O_WRONLY, 0)
		if errnoOf(err) != syscall.EACCES {
			t.Errorf("write open of %v: %v, want EACCES", p, err)
		}
	}
	for _, p := range [][]string{{"qp", s.qa, "ctl"}, {"qp", s.qa, "post_send"}, {"qp", s.qa, "post_recv"}, {"cq", s.cq, "ctl"}} {
		_, err := os.Open(m.path(p...))
		if errnoOf(err) != syscall.EACCES {
			t.Errorf("read open of %v: %v, want EACCES", p, err)
		}
	}
	// Shell redirection (O_TRUNC) works on command files.
	if _, stderr, err := bash(0, fmt.Sprintf(`echo "modify qp_state=INIT pkey_index=0 port_num=1 qp_access_flags=local_write" > %s`, q("ctl"))); err != nil {
		t.Errorf("echo > ctl: %v %s", err, stderr)
	}
	if st := m.state(s.qa); st != "INIT" {
		t.Errorf("state after echo > ctl: %s", st)
	}
	if _, stderr, err := bash(0, "touch "+q("attr")+" "+q("ctl")); err != nil {
		t.Errorf("touch: %v %s", err, stderr)
	}
}

// TestGarbage writes binary junk and oversized lines into every writable
// text file: each write is EINVAL with a reason, and the daemon lives on.
func TestGarbage(t *testing.T) {
	m := mount(t)
	s := m.setup()
	srq := m.create("srq", "pd="+s.pd+" max_wr=4 max_sge=1")
	junk := [][]byte{
		{0, 1, 2, 3, 0xff, 0xfe, '\n'},
		[]byte("\xc3\x28 invalid utf8"),
		[]byte("opcode=send\x00wr_id=1"),
		bytes.Repeat([]byte("A"), 65*1024),
		bytes.Repeat([]byte("k=v "), 17*1024),
		[]byte(strings.Repeat("=", 100)),
		[]byte("\x1b[31mred\x1b[0m"),
	}
	objFiles := [][]string{
		{"qp", s.qa, "ctl"}, {"qp", s.qa, "post_send"}, {"qp", s.qa, "post_recv"},
		{"cq", s.cq, "ctl"}, {"cq", s.cq, "notify"},
		{"srq", srq, "ctl"}, {"srq", srq, "post_recv"},
	}
	for _, j := range junk {
		for _, p := range objFiles {
			flag := os.O_WRONLY
			if p[len(p)-1] == "notify" {
				flag = os.O_RDWR
			}
			f, err := os.OpenFile(m.path(p...), flag, 0)
			if err != nil {
				t.Fatal(err)
			}
			_, err = f.Write(j)
			f.Close()
			if errnoOf(err) != syscall.EINVAL {
				t.Errorf("%d bytes of junk into %v: %v, want EINVAL", len(j), p, err)
			}
			if e := m.lastError(p...); e == "" || strings.ContainsAny(e, "\x00\n") {
				t.Errorf("junk into %v: error file %q", p, e)
			}
		}
		for _, k := range []string{"pd", "mr", "mw", "cq", "srq", "ah", "qp"} {
			resp, err := m.tryCreate(k, string(j))
			if errnoOf(err) != syscall.EINVAL || !strings.HasPrefix(resp, "error: ") {
				t.Errorf("%d bytes of junk into %s/new: %v, %q", len(j), k, err, clipTest(resp))
			}
		}
	}
	// Still alive and well.
	m.connect(s)
	m.mustWrite(fmt.Sprintf("opcode=rdma_write wr_id=5 sge=%s:0:8 remote_addr=%s rkey=%s send_flags=signaled", s.lkeyA, s.iovaB, s.rkeyB), "qp", s.qa, "post_send")
	if wc := findWC(t, m.pollUntil(s.cq, 1), "5"); !strings.Contains(wc, "success") {
		t.Errorf("after junk: %s", wc)
	}
}

func clipTest(s string) string {
	if len(s) > 100 {
		return s[:100] + "..."
	}
	return s
}

func TestSRQAndResize(t *testing.T) {
	m := mount(t)
	pd := m.create("pd", "")
	cq := m.create("cq", "cqe=4")
	srq := m.create("srq", "pd="+pd+" max_wr=8 max_sge=2")
	mr := m.create("mr", "pd="+pd+" length=4096 access=local_write")
	lkey := m.attrs("mr", mr, "attr")["lkey"]
	m.mustWrite(fmt.Sprintf("wr_id=1 sge=%s:0:64\nwr_id=2 sge=%s:64:64\n", lkey, lkey), "srq", srq, "post_recv")
	if a := m.attrs("srq", srq, "attr"); a["pending"] != "2" || a["max_wr"] != "8" {
		t.Errorf("srq attr: %v", a)
	}
	m.mustWrite("modify srq_limit=1", "srq", srq, "ctl")
	if a := m.attrs("srq", srq, "attr"); a["srq_limit"] != "1" {
		t.Errorf("srq_limit: %v", a)
	}
	if err := m.write("modify srq_limit=100", "srq", srq, "ctl"); errnoOf(err) != syscall.EINVAL {
		t.Errorf("srq_limit beyond max_wr: %v", err)
	}
	// A QP on the SRQ has no rq file.
	q := m.create("qp", fmt.Sprintf("pd=%s qp_type=rc send_cq=%s recv_cq=%s srq=%s max_send_wr=4", pd, cq, cq, srq))
	if _, err := os.Stat(m.path("qp", q, "rq")); !os.IsNotExist(err) {
		t.Errorf("qp on an srq has an rq file: %v", err)
	}
	if err := syscall.Rmdir(m.path("srq", srq)); err != syscall.EBUSY {
		t.Errorf("rmdir srq with a qp: %v", err)
	}

	st1, err := os.Stat(m.path("cq", cq, "ring"))
	if err != nil {
		t.Fatal(err)
	}
	m.mustWrite("resize cqe=1000", "cq", cq, "ctl")
	if a := m.attrs("cq", cq, "attr"); a["cqe"] != "1024" {
		t.Errorf("cq attr after resize: %v", a)
	}
	st2, err := os.Stat(m.path("cq", cq, "ring"))
	if err != nil {
		t.Fatal(err)
	}
	if st2.Size() <= st1.Size() {
		t.Errorf("ring file %d bytes before resize, %d after", st1.Size(), st2.Size())
	}
	r := mapFile(t, m.path("cq", cq, "ring"))
	if cr, err := ring.Attach(r.Bytes(), ring.KindCQ); err != nil || cr.SlotCount() != 1024 {
		t.Errorf("mapping the resized ring: %v", err)
	}
	for _, bad := range []string{"resize", "resize cqe=0", "resize cqe=x", "resize size=8", "grow cqe=8"} {
		if err := m.write(bad, "cq", cq, "ctl"); errnoOf(err) != syscall.EINVAL {
			t.Errorf("%q: %v", bad, err)
		}
	}
	if err := m.write("opcode=send wr_id=1", "qp", q, "post_recv"); errnoOf(err) != syscall.EINVAL {
		t.Errorf("post_recv on an srq qp: %v", err)
	}
}

// TestConcurrent creates, drives and destroys objects from several
// goroutines at once while others read the device files (run with -race).
func TestConcurrent(t *testing.T) {
	m := mount(t)
	const workers = 6
	errs := make(chan error, workers)
	stop := make(chan struct{})
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		for {
			select {
			case <-stop:
				return
			default:
			}
			for _, f := range []string{"counters", "device", "port"} {
				if _, err := os.ReadFile(m.path(f)); err != nil {
					errs <- err
					return
				}
			}
		}
	}()
	for w := 0; w < workers; w++ {
		go func() {
			errs <- func() error {
				for i := 0; i < 5; i++ {
					pd, err := m.tryCreate("pd", "")
					if err != nil {
						return err
					}
					cq, err := m.tryCreate("cq", "cqe=8")
					if err != nil {
						return err
					}
					mr, err := m.tryCreate("mr", "pd="+pd+" length=4096 access=local_write")
					if err != nil {
						return err
					}
					q, err := m.tryCreate("qp", fmt.Sprintf("pd=%s qp_type=ud send_cq=%s recv_cq=%s max_send_wr=4 max_recv_wr=4", pd, cq, cq))
					if err != nil {
						return err
					}
					if err := m.write("modify qp_state=INIT pkey_index=0 port_num=1 qkey=7", "qp", q, "ctl"); err != nil {
						return fmt.Errorf("modify qp %s: %w", q, err)
					}
					lkey := ""
					b, err := os.ReadFile(m.path("mr", mr, "attr"))
					if err != nil {
						return err
					}
					for _, l := range strings.Split(string(b), "\n") {
						if v, ok := strings.CutPrefix(l, "lkey="); ok {
							lkey = v
						}
					}
					if err := m.write(fmt.Sprintf("wr_id=%d sge=%s:0:64", i, lkey), "qp", q, "post_recv"); err != nil {
						return fmt.Errorf("post_recv qp %s: %w", q, err)
					}
					if _, err := os.ReadFile(m.path("qp", q, "attr")); err != nil {
						return err
					}
					for _, p := range [][]string{{"qp", q}, {"cq", cq}, {"mr", mr}, {"pd", pd}} {
						if err := os.Remove(m.path(p...)); err != nil {
							return err
						}
					}
				}
				return nil
			}()
		}()
	}
	for w := 0; w < workers; w++ {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	close(stop)
	<-readerDone
	select {
	case err := <-errs:
		t.Error(err)
	default:
	}
	for _, k := range []string{"pd", "cq", "mr", "qp"} {
		if ents, _ := os.ReadDir(m.path(k)); len(ents) != 1 {
			t.Errorf("%s/ has %d entries at the end", k, len(ents))
		}
	}
}

// TestMRShareAndRereg: mr/new share=H registers on another MR's memory
// (one byte written through the mem of either is read through the other);
// mr/H/ctl's rereg changes access and memory and keeps the keys; bad
// commands are EINVAL with a reason.
func TestMRShareAndRereg(t *testing.T) {
	m := mount(t)
	pd := m.create("pd", "")
	base := m.create("mr", "pd="+pd+" length=8192 access=local_write")
	mr := m.create("mr", "pd="+pd+" length=100 iova=0x1000 access=local_write share="+base+" offset=4096")
	a := m.attrs("mr", mr, "attr")
	if a["mem_offset"] != "4096" || a["length"] != "100" || a["iova"] != "4096" {
		t.Fatalf("shared mr attr: %v", a)
	}
	m.mustWrite("hello", "mr", mr, "mem")
	if got := m.read("mr", base, "mem")[4096:4101]; got != "hello" {
		t.Fatalf("base mem at 4096 = %q", got)
	}
	lkey, rkey := a["lkey"], a["rkey"]
	m.mustWrite("rereg access=local_write,remote_read share="+base+" offset=0 length=50 iova=0", "mr", mr, "ctl")
	a = m.attrs("mr", mr, "attr")
	if a["lkey"] != lkey || a["rkey"] != rkey || a["access"] != "local_write,remote_read" || a["mem_offset"] != "0" || a["length"] != "50" {
		t.Fatalf("after rereg: %v (keys were %s/%s)", a, lkey, rkey)
	}
	for _, bad := range []string{"rereg", "rereg share=1", "rereg access=remote_write", "grow length=5", "rereg pd=999"} {
		if err := m.write(bad, "mr", mr, "ctl"); errnoOf(err) != syscall.EINVAL {
			t.Errorf("%q: %v, want EINVAL", bad, err)
		}
		if m.lastError("mr", mr, "ctl") == "" {
			t.Errorf("%q left no reason", bad)
		}
	}
	if _, err := m.tryCreate("mr", "pd="+pd+" length=10 share=999"); errnoOf(err) != syscall.EINVAL {
		t.Errorf("share of no mr: %v", err)
	}
}
