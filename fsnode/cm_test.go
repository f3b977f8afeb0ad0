package fsnode_test

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"rdmafs/cm"
	"rdmafs/device"
	"rdmafs/fsnode"
)

// fifoReader reads 1024-byte event records from a channel's FIFO.
type fifoReader struct {
	t *testing.T
	f *os.File
}

func (m *mnt) openChannel(ch string) *fifoReader {
	m.t.Helper()
	link, err := os.Readlink(m.path("cm", "channel", ch, "fifo"))
	if err != nil {
		m.t.Fatal(err)
	}
	// The daemon holds the FIFO open for writing: this open does not
	// block, and reads never see end of file.
	f, err := os.OpenFile(link, os.O_RDONLY, 0)
	if err != nil {
		m.t.Fatal(err)
	}
	m.t.Cleanup(func() { f.Close() })
	return &fifoReader{t: m.t, f: f}
}

// next reads one record, within timeout.
func (r *fifoReader) next(timeout time.Duration) map[string]string {
	r.t.Helper()
	r.f.SetReadDeadline(time.Now().Add(timeout))
	buf := make([]byte, cm.RecordSize)
	n, err := r.f.Read(buf)
	if err != nil {
		r.t.Fatalf("reading the channel: %v", err)
	}
	if n != cm.RecordSize {
		r.t.Fatalf("read %d bytes: a record is %d", n, cm.RecordSize)
	}
	ev, err := cm.ParseRecord(buf)
	if err != nil {
		r.t.Fatal(err)
	}
	return ev
}

func (r *fifoReader) expect(name, id string) map[string]string {
	r.t.Helper()
	ev := r.next(10 * time.Second)
	if ev["event"] != name || ev["id"] != id {
		r.t.Fatalf("event %v, want %s for id %s", ev, name, id)
	}
	return ev
}

// TestCMFlow drives two ids of one local mount through the whole of a
// connection as a shell (or the C library) would: bind and listen,
// resolve 127.0.0.1, connect, the connect request, accept, the
// connect response, establish, disconnect, and reads every event from the
// channel's FIFO. The QPs are real and the library's QP work is done by
// hand from cm/I/attr; a SEND crosses the connection at the end.
func TestCMFlow(t *testing.T) {
	m := mount(t)
	if got := m.read("cm", "addrs"); got != "127.0.0.1\n::1\n" {
		t.Fatalf("cm/addrs %q", got)
	}
	s := m.setup()
	ch := m.create("cm/channel", "")
	r := m.openChannel(ch)
	l := m.create("cm", "ps=tcp channel="+ch)
	m.mustWrite("bind addr=0.0.0.0 port=7471", "cm", l, "ctl")
	m.mustWrite("listen backlog=4", "cm", l, "ctl")
	if st := strings.TrimSpace(m.read("cm", l, "state")); st != "listen" {
		t.Fatalf("listener state %s", st)
	}
	if got := m.read("cm", "listeners"); !strings.Contains(got, fmt.Sprintf("id=%s uid=0 ps=tcp addr=0.0.0.0 port=7471 service_id=0x0000000001061d2f backlog=4 pending=0", l)) {
		t.Fatalf("cm/listeners %q", got)
	}

	c := m.create("cm", "ps=tcp channel="+ch)
	m.mustWrite("resolve_addr dst=127.0.0.1 port=7471", "cm", c, "ctl")
	ev := r.expect("addr_resolved", c)
	if ev["dst_addr"] != "127.0.0.1" || ev["status"] != "0" {
		t.Fatal(ev)
	}
	m.mustWrite("resolve_route", "cm", c, "ctl")
	r.expect("route_resolved", c)
	ca := m.attrs("cm", c, "attr")
	if ca["dgid"] != m.gid() || ca["hop_limit"] != "1" || ca["state"] != "route_resolved" {
		t.Fatalf("client attr %v", ca)
	}
	m.mustWrite(fmt.Sprintf("connect qp_num=%s psn=500 private_data=68656c6c6f responder_resources=4 initiator_depth=4", s.qa), "cm", c, "ctl")
	ev = r.next(10 * time.Second)
	if ev["event"] != "connect_request" || ev["listen_id"] != l || ev["qp_num"] != s.qa ||
		!strings.HasPrefix(ev["private_data"], "68656c6c6f00") || len(ev["private_data"]) != 112 {
		t.Fatalf("connect_request %v", ev)
	}
	srv := ev["id"]
	// The new id's directory is there before its event.
	if st := strings.TrimSpace(m.read("cm", srv, "state")); st != "req_rcvd" {
		t.Fatalf("server id state %s", st)
	}
	sa := m.attrs("cm", srv, "attr")
	if sa["remote_qp_num"] != s.qa || sa["remote_psn"] != "500" || sa["listen_id"] != l {
		t.Fatalf("server attr %v", sa)
	}
	var st syscall.Stat_t
	for _, f := range []struct {
		name string
		mode uint32
	}{{"ctl", 0600}, {"attr", 0600}, {"state", 0644}, {"error", 0644}} {
		if err := syscall.Stat(m.path("cm", srv, f.name), &st); err != nil || st.Mode&0777 != f.mode {
			t.Errorf("cm/%s/%s: mode %o err %v, want %o", srv, f.name, st.Mode&0777, err, f.mode)
		}
	}
	// The library's work on the passive side: RTR and RTS, then accept.
	m.mustWrite("modify qp_state=INIT pkey_index=0 port_num=1 qp_access_flags="+mrAccess, "qp", s.qb, "ctl")
	m.mustWrite(fmt.Sprintf("modify qp_state=RTR path_mtu=%s rq_psn=%s max_dest_rd_atomic=4 min_rnr_timer=12 dest_qp_num=%s dgid=%s",
		sa["path_mtu"], sa["remote_psn"], sa["remote_qp_num"], sa["dgid"]), "qp", s.qb, "ctl")
	m.mustWrite("modify qp_state=RTS sq_psn=700 timeout=14 retry_cnt=7 rnr_retry=7 max_rd_atomic=4", "qp", s.qb, "ctl")
	m.mustWrite(fmt.Sprintf("accept qp_num=%s psn=700 private_data=6f6b", s.qb), "cm", srv, "ctl")
	ev = r.expect("connect_response", c)
	if ev["qp_num"] != s.qb || !strings.HasPrefix(ev["private_data"], "6f6b00") {
		t.Fatal(ev)
	}
	ca = m.attrs("cm", c, "attr")
	m.mustWrite("modify qp_state=INIT pkey_index=0 port_num=1 qp_access_flags="+mrAccess, "qp", s.qa, "ctl")
	m.mustWrite(fmt.Sprintf("modify qp_state=RTR path_mtu=%s rq_psn=%s max_dest_rd_atomic=4 min_rnr_timer=12 dest_qp_num=%s dgid=%s",
		ca["path_mtu"], ca["remote_psn"], ca["remote_qp_num"], ca["dgid"]), "qp", s.qa, "ctl")
	m.mustWrite("modify qp_state=RTS sq_psn=500 timeout=14 retry_cnt=7 rnr_retry=7 max_rd_atomic=4", "qp", s.qa, "ctl")
	m.mustWrite("establish", "cm", c, "ctl")
	r.expect("established", srv)
	if a, b := strings.TrimSpace(m.read("cm", c, "state")), strings.TrimSpace(m.read("cm", srv, "state")); a != "established" || b != "established" {
		t.Fatalf("states %s %s", a, b)
	}
	// The connection the CM set up carries a SEND.
	m.mustWrite(fmt.Sprintf("wr_id=1 sge=%s:%s:64", s.lkeyB, s.iovaB), "qp", s.qb, "post_recv")
	m.mustWrite(fmt.Sprintf("wr_id=2 opcode=send send_flags=signaled sge=%s:0:64", s.lkeyA), "qp", s.qa, "post_send")
	wcs := m.pollUntil(s.cq, 2)
	if w := findWC(t, wcs, "1"); !strings.Contains(w, "status=success") {
		t.Fatal(w)
	}

	m.mustWrite("disconnect", "cm", c, "ctl")
	r.expect("disconnected", srv)
	m.mustWrite("disconnect", "cm", srv, "ctl")
	r.expect("disconnected", c)
	// The timewait (2 s on RoCE's packet life time), then its exit, for
	// both, in either order.
	got := map[string]bool{}
	for range 2 {
		ev := r.next(10 * time.Second)
		if ev["event"] != "timewait_exit" {
			t.Fatal(ev)
		}
		got[ev["id"]] = true
	}
	if !got[c] || !got[srv] {
		t.Fatalf("timewait_exit for %v", got)
	}
	ctr := m.attrs("cm", "counters")
	for k, want := range map[string]string{"req_sent": "1", "req_recv": "1", "rep_sent": "1", "rtu_recv": "1",
		"dreq_sent": "1", "drep_recv": "1", "mra_sent": "0", "ids": "3", "listeners": "1", "gsi_sent": "5", "gsi_recv": "5"} {
		if ctr[k] != want {
			t.Errorf("counters %s=%s want %s", k, ctr[k], want)
		}
	}
	if a := m.attrs("cm", "channel", ch, "attr"); a["ids"] != "3" || a["pending"] != "0" {
		t.Fatalf("channel attr %v", a)
	}
	if err := syscall.Rmdir(m.path("cm", "channel", ch)); err != syscall.EBUSY {
		t.Fatalf("rmdir of a channel in use: %v", err)
	}
	for _, id := range []string{c, srv, l} {
		if err := syscall.Rmdir(m.path("cm", id)); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Rmdir(m.path("cm", "channel", ch)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(m.srv.RuntimeDir(), "cm-channel"+ch)); !os.IsNotExist(err) {
		t.Fatalf("FIFO after rmdir: %v", err)
	}
}

// TestCMErrorsAndOwnership: bad commands fail with an errno and a reason;
// another user can neither use nor see into an id.
func TestCMErrorsAndOwnership(t *testing.T) {
	m := mount(t)
	ch := m.create("cm/channel", "")
	id := m.create("cm", "ps=tcp channel="+ch)
	for _, c := range []struct {
		cmd   string
		errno syscall.Errno
	}{
		{"bind addr=10.9.9.9", syscall.EADDRNOTAVAIL},
		{"connect qp_num=1", syscall.EINVAL},
		{"frob", syscall.EINVAL},
	} {
		err := m.write(c.cmd, "cm", id, "ctl")
		if errnoOf(err) != c.errno {
			t.Errorf("%q: %v want %v", c.cmd, err, c.errno)
		}
		if m.lastError("cm", id, "ctl") == "" {
			t.Errorf("%q: no reason in the error file", c.cmd)
		}
	}
	for _, line := range []string{"ps=tcp", "ps=sctp channel=" + ch, "ps=tcp channel=99"} {
		if _, err := m.tryCreate("cm", line); err == nil {
			t.Errorf("cm/new %q succeeded", line)
		}
	}
	m.mustWrite("resolve_addr dst=10.1.1.1 port=1", "cm", id, "ctl")
	r := m.openChannel(ch)
	if ev := r.expect("addr_error", id); ev["status"] != "-113" {
		t.Fatal(ev)
	}
	const other = 1000
	for _, f := range []string{"ctl", "attr"} {
		_, stderr, err := bash(other, "cat "+m.path("cm", id, f)+" >/dev/null || echo x > "+m.path("cm", id, "ctl"))
		if err == nil || !strings.Contains(stderr, "Permission denied") {
			t.Errorf("another user on %s: %v %q", f, err, stderr)
		}
	}
	if _, stderr, err := bash(other, "rmdir "+m.path("cm", id)); err == nil {
		t.Errorf("another user removed an id: %q", stderr)
	}
	// Another user's id cannot report to root's channel.
	out, _, _ := bash(other, fmt.Sprintf("{ echo ps=tcp channel=%s >&0; read -r x; echo \"$x\"; } <>%s", ch, m.path("cm", "new")))
	if !strings.Contains(out, "another user") {
		t.Errorf("another user's id on root's channel: %q", out)
	}
}

// TestCMLease: a lease holding a listener and its channel destroys them
// when it is closed, the listener first, and with the channel the id a
// connect request made on it, which the program never leased: its peer is
// rejected.
func TestCMLease(t *testing.T) {
	m := mount(t)
	ch := m.create("cm/channel", "")
	id := m.create("cm", "ps=tcp channel="+ch)
	m.mustWrite("bind addr=127.0.0.1 port=4000", "cm", id, "ctl")
	m.mustWrite("listen", "cm", id, "ctl")
	peerCh := m.create("cm/channel", "")
	pr := m.openChannel(peerCh)
	c := m.create("cm", "ps=tcp channel="+peerCh)
	m.mustWrite("resolve_addr dst=127.0.0.1 port=4000", "cm", c, "ctl")
	m.mustWrite("resolve_route", "cm", c, "ctl")
	m.mustWrite("connect qp_num=5", "cm", c, "ctl")
	pr.expect("addr_resolved", c)
	pr.expect("route_resolved", c)
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(m.read("cm", "listeners"), "pending=1") {
		if time.Now().After(deadline) {
			t.Fatal("no connect request")
		}
		time.Sleep(5 * time.Millisecond)
	}
	f, err := os.OpenFile(m.path("lease"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte(fmt.Sprintf("cm_channel %s\ncm %s\n", ch, id))); err != nil {
		t.Fatal(err)
	}
	f.Close()
	deadline = time.Now().Add(5 * time.Second)
	for {
		_, e1 := os.Stat(m.path("cm", id))
		_, e2 := os.Stat(m.path("cm", "channel", ch))
		if os.IsNotExist(e1) && os.IsNotExist(e2) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("lease did not destroy: %v %v", e1, e2)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := m.read("cm", "listeners"); got != "" {
		t.Fatalf("listener survived its lease: %q", got)
	}
	if ev := pr.expect("rejected", c); ev["status"] != "28" {
		t.Fatal(ev)
	}
	if a := m.attrs("cm", "counters"); a["ids"] != "1" {
		t.Fatalf("ids left: %v", a)
	}
	ents, _ := os.ReadDir(m.path("cm"))
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if got := strings.Join(names, " "); got != c+" addrs channel counters listeners new" {
		t.Fatalf("cm/: %s", got)
	}
}

// wireMount mounts a device on 127.0.81.x (this work's wire tests'
// addresses), trying the next on a collision.
func wireMount(t *testing.T, last byte) *mnt {
	t.Helper()
	for try := byte(0); try < 10; try++ {
		a := netip.AddrFrom4([4]byte{127, 0, 81, last + 20*try})
		dev, err := device.New(device.Config{Addr: a})
		if err != nil {
			if errors.Is(err, syscall.EADDRINUSE) {
				continue
			}
			if errors.Is(err, syscall.EPERM) && os.Getenv("CI") != "true" {
				t.Skipf("no CAP_NET_RAW: %v", err)
			}
			t.Fatal(err)
		}
		dev.Close()
		return mountWith(t, device.Config{Addr: a}, fsnode.Options{})
	}
	t.Fatal("no free address in 127.0.81.0/24")
	return nil
}

// TestCMWire: two mounts on two addresses connect through the CM over
// RoCEv2 (the MADs cross the kernel as UD packets to QP1), and the
// capture shows them.
func TestCMWire(t *testing.T) {
	ma, mb := wireMount(t, 1), wireMount(t, 2)
	addrB := mb.dev.Config().Addr.String()
	if got := mb.read("cm", "addrs"); got != addrB+"\n" {
		t.Fatalf("cm/addrs %q", got)
	}
	chA, chB := ma.create("cm/channel", ""), mb.create("cm/channel", "")
	ra, rb := ma.openChannel(chA), mb.openChannel(chB)
	l := mb.create("cm", "ps=tcp channel="+chB)
	mb.mustWrite("bind addr="+addrB+" port=7471", "cm", l, "ctl")
	mb.mustWrite("listen", "cm", l, "ctl")
	c := ma.create("cm", "ps=tcp channel="+chA)
	ma.mustWrite("resolve_addr dst="+addrB+" port=7471", "cm", c, "ctl")
	ra.expect("addr_resolved", c)
	ma.mustWrite("resolve_route", "cm", c, "ctl")
	ra.expect("route_resolved", c)
	if a := ma.attrs("cm", c, "attr"); a["dgid"] != "::ffff:"+addrB || a["hop_limit"] != "64" {
		t.Fatalf("route %v", a)
	}
	ma.mustWrite("connect qp_num=77 psn=1", "cm", c, "ctl")
	ev := rb.next(10 * time.Second)
	if ev["event"] != "connect_request" || ev["dst_addr"] != ma.dev.Config().Addr.String() || ev["qp_num"] != "77" {
		t.Fatal(ev)
	}
	srv := ev["id"]
	mb.mustWrite("accept qp_num=88 psn=2", "cm", srv, "ctl")
	if ev := ra.expect("connect_response", c); ev["qp_num"] != "88" {
		t.Fatal(ev)
	}
	ma.mustWrite("establish", "cm", c, "ctl")
	rb.expect("established", srv)
	mb.mustWrite("disconnect", "cm", srv, "ctl")
	ra.expect("disconnected", c)
	ma.mustWrite("disconnect", "cm", c, "ctl")
	rb.expect("disconnected", srv)
	if n := ma.dev.Counters.WirePacketsSent.Load(); n < 3 {
		t.Fatalf("wire packets sent: %d", n)
	}
}

// TestCMUDFlow: a UD id resolves a UD listener through SIDR on one mount.
func TestCMUDFlow(t *testing.T) {
	m := mount(t)
	ch := m.create("cm/channel", "")
	r := m.openChannel(ch)
	l := m.create("cm", "ps=udp channel="+ch)
	if a := m.attrs("cm", l, "attr"); a["qp_type"] != "ud" {
		t.Fatal(a)
	}
	m.mustWrite("bind addr=127.0.0.1 port=7174", "cm", l, "ctl")
	m.mustWrite("listen", "cm", l, "ctl")
	c := m.create("cm", "ps=udp channel="+ch)
	m.mustWrite("resolve_addr dst=127.0.0.1 port=7174", "cm", c, "ctl")
	r.expect("addr_resolved", c)
	m.mustWrite("resolve_route", "cm", c, "ctl")
	r.expect("route_resolved", c)
	m.mustWrite("connect private_data=0a0b", "cm", c, "ctl")
	ev := r.next(10 * time.Second)
	if ev["event"] != "connect_request" || ev["listen_id"] != l || !strings.HasPrefix(ev["private_data"], "0a0b00") || len(ev["private_data"]) != 360 {
		t.Fatal(ev)
	}
	m.mustWrite("accept qp_num=4242", "cm", ev["id"], "ctl")
	ev = r.expect("established", c)
	if ev["qp_num"] != "4242" || ev["qkey"] != "19088743" {
		t.Fatal(ev)
	}
	if a := m.attrs("cm", c, "attr"); a["remote_qp_num"] != "4242" || a["remote_qkey"] != "19088743" {
		t.Fatal(a)
	}
}

// TestCMChannelBackpressure: a reader that does not read lets the FIFO
// fill (64 KiB, 64 records); the rest wait in the channel's backlog and
// reach the reader in order once it drains: no event is lost.
func TestCMChannelBackpressure(t *testing.T) {
	m := mount(t)
	ch := m.create("cm/channel", "")
	const n = 200
	var ids []string
	for range n {
		id := m.create("cm", "ps=tcp channel="+ch)
		m.mustWrite("resolve_addr dst=127.0.0.1 port=1", "cm", id, "ctl")
		ids = append(ids, id)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		a := m.attrs("cm", "channel", ch, "attr")
		if a["pending"] != "0" && a["pending"] != "" {
			if a["dropped"] != "0" {
				t.Fatal(a)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("nothing waits in the backlog: %v", a)
		}
		time.Sleep(10 * time.Millisecond)
	}
	r := m.openChannel(ch)
	for _, id := range ids {
		r.expect("addr_resolved", id)
	}
	if a := m.attrs("cm", "channel", ch, "attr"); a["pending"] != "0" || a["dropped"] != "0" || a["ids"] != fmt.Sprint(n) {
		t.Fatal(a)
	}
}

// TestCMConcurrentConnects: many connections set up at once on one mount
// (under -race: commands, the GSI goroutine and the FIFO writer together).
func TestCMConcurrentConnects(t *testing.T) {
	m := mount(t)
	ch := m.create("cm/channel", "")
	r := m.openChannel(ch)
	l := m.create("cm", "ps=tcp channel="+ch)
	m.mustWrite("bind addr=0.0.0.0 port=9000", "cm", l, "ctl")
	m.mustWrite("listen", "cm", l, "ctl")
	const n = 32
	errs := make(chan error, n)
	for i := range n {
		go func() {
			id, err := m.tryCreate("cm", "ps=tcp channel="+ch)
			if err == nil {
				err = m.write("resolve_addr dst=127.0.0.1 port=9000", "cm", id, "ctl")
			}
			if err == nil {
				err = m.write("resolve_route", "cm", id, "ctl")
			}
			if err == nil {
				err = m.write(fmt.Sprintf("connect qp_num=%d", 100+i), "cm", id, "ctl")
			}
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	counts := map[string]int{}
	for counts["established"] < n {
		ev := r.next(10 * time.Second)
		counts[ev["event"]]++
		switch ev["event"] {
		case "connect_request":
			m.mustWrite("accept qp_num=7", "cm", ev["id"], "ctl")
		case "connect_response":
			m.mustWrite("establish", "cm", ev["id"], "ctl")
		}
	}
	if counts["connect_request"] != n || counts["connect_response"] != n || counts["addr_resolved"] != n {
		t.Fatal(counts)
	}
}
