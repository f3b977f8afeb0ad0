package fsnode_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"rdmafs/roce"
)

// cat of MOUNT/capture is a pcap of the device's packets: here the SEND
// and its ACK of a loopback RC pair (fe80:: GIDs, so IPv6 datagrams, with
// the right ICRC).
func TestCaptureCat(t *testing.T) {
	m := mount(t)
	s := m.setup()
	m.connect(s)
	out := filepath.Join(t.TempDir(), "out.pcap")
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cat := exec.Command("cat", m.path("capture"))
	cat.Stdout = f
	if err := cat.Start(); err != nil {
		t.Fatal(err)
	}
	// The capture is on once cat has the pcap header.
	for deadline := time.Now().Add(5 * time.Second); ; {
		if st, _ := f.Stat(); st != nil && st.Size() >= 24 {
			break
		}
		if time.Now().After(deadline) {
			cat.Process.Kill()
			t.Fatal("no pcap header from cat")
		}
		time.Sleep(time.Millisecond)
	}
	m.mustWrite(fmt.Sprintf("wr_id=77 sge=%s:%d:64\n", s.lkeyB, 0x10000), "qp", s.qb, "post_recv")
	m.mustWrite(fmt.Sprintf("opcode=send wr_id=2 sge=%s:0:40 send_flags=signaled\n", s.lkeyA), "qp", s.qa, "post_send")
	m.pollUntil(s.cq, 2)
	var data []byte
	for deadline := time.Now().Add(5 * time.Second); ; {
		data, _ = os.ReadFile(out)
		if n := bytes.Count(data, []byte{0x12, 0xb7}); n >= 2 || time.Now().After(deadline) { // two datagrams to port 4791
			break
		}
		time.Sleep(time.Millisecond)
	}
	cat.Process.Signal(syscall.SIGINT)
	done := make(chan error, 1)
	go func() { done <- cat.Wait() }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		cat.Process.Kill()
		t.Fatal("cat did not end on SIGINT")
	}
	var ops []string
	for rec, err := range roce.ReadPcap(bytes.NewReader(data)) {
		if err != nil {
			t.Fatal(err)
		}
		pkt, ok := rec.IP()
		if !ok {
			t.Fatal("a record is not an IP packet")
		}
		if err := roce.CheckIPv6(pkt); err != nil {
			t.Fatalf("record: %v", err)
		}
		ops = append(ops, roce.Opcode(pkt[roce.HeadroomIPv6]).String())
	}
	if len(ops) != 2 || !strings.Contains(ops[0], "SEND") || !strings.Contains(ops[1], "ACK") {
		t.Fatalf("captured %v, want a SEND and its ACK", ops)
	}
	if c := m.attrs("counters"); c["capture_drops"] != "0" {
		t.Errorf("counters: %v", c)
	}
}

// startCapture runs cat of MOUNT/capture as uid into a file and waits for
// the pcap header; stop ends cat and returns what it wrote.
func startCapture(t *testing.T, m *mnt, uid uint32) (read func() []byte, stop func() []byte) {
	t.Helper()
	out := filepath.Join(t.TempDir(), fmt.Sprintf("uid%d.pcap", uid))
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	cat := exec.Command("cat", m.path("capture"))
	if uid != 0 {
		cat.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	}
	cat.Stdout = f
	if err := cat.Start(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	read = func() []byte { b, _ := os.ReadFile(out); return b }
	stopped := false
	stop = func() []byte {
		if !stopped {
			stopped = true
			cat.Process.Signal(syscall.SIGINT)
			done := make(chan error, 1)
			go func() { done <- cat.Wait() }()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				cat.Process.Kill()
				t.Errorf("cat of uid %d did not end on SIGINT", uid)
			}
		}
		return read()
	}
	t.Cleanup(func() { stop() })
	for deadline := time.Now().Add(5 * time.Second); len(read()) < 24; {
		if time.Now().After(deadline) {
			t.Fatalf("no pcap header from uid %d's cat", uid)
		}
		time.Sleep(time.Millisecond)
	}
	return read, stop
}

// waitFor polls read until it contains every one of want.
func waitFor(t *testing.T, who string, read func() []byte, want ...string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; {
		b, ok := read(), true
		for _, w := range want {
			ok = ok && bytes.Contains(b, []byte(w))
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s's capture lacks one of %q after 10 s (%d bytes)", who, want, len(b))
		}
		time.Sleep(time.Millisecond)
	}
}

// otherUserWrite is a script for a second user: its own PD, MR, CQ and a
// connected RC pair on which it RDMA-WRITEs payload; it prints the
// completion.
func otherUserWrite(dir, payload string) string {
	return fmt.Sprintf(`set -e
M=%s
G=$(grep ^gid= $M/port | cut -d= -f2)
{ echo "" >&0; read -r pd; } <>$M/pd/new
{ echo "pd=$pd length=4096 access=local_write,remote_write" >&0; read -r mr; } <>$M/mr/new
{ echo "cqe=16" >&0; read -r cq; } <>$M/cq/new
q="pd=$pd qp_type=rc send_cq=$cq recv_cq=$cq max_send_wr=4 max_recv_wr=4 max_send_sge=1 max_recv_sge=1"
{ echo "$q" >&0; read -r a; } <>$M/qp/new
{ echo "$q" >&0; read -r b; } <>$M/qp/new
for x in "$a $b" "$b $a"; do
	set -- $x
	echo "modify qp_state=INIT pkey_index=0 port_num=1 qp_access_flags=remote_write" > $M/qp/$1/ctl
	echo "modify qp_state=RTR path_mtu=1024 dest_qp_num=$2 rq_psn=0 dgid=$G max_dest_rd_atomic=1 min_rnr_timer=12" > $M/qp/$1/ctl
	echo "modify qp_state=RTS sq_psn=0 timeout=14 retry_cnt=7 rnr_retry=7 max_rd_atomic=1" > $M/qp/$1/ctl
done
lkey=$(grep ^lkey= $M/mr/$mr/attr | cut -d= -f2)
rkey=$(grep ^rkey= $M/mr/$mr/attr | cut -d= -f2)
printf %%s '%s' | dd of=$M/mr/$mr/mem conv=notrunc status=none
echo "opcode=rdma_write wr_id=1 send_flags=signaled sge=$lkey:0:%d remote_addr=2048 rkey=$rkey" > $M/qp/$a/post_send
for i in $(seq 500); do c=$(cat $M/cq/$cq/poll); [ -n "$c" ] && break; sleep 0.01; done
echo "$c"
`, dir, payload, len(payload))
}

// TestCapturePerOwner: a user's capture holds the packets of its own QPs
// and none of root's; root's holds both.
func TestCapturePerOwner(t *testing.T) {
	m := mount(t)
	s := m.setup()
	m.connect(s)
	readRoot, stopRoot := startCapture(t, m, 0)
	readOther, stopOther := startCapture(t, m, nobody)

	const secret, theirs = "ROOT-SECRET-PAYLOAD", "NOBODY-OWN-PAYLOAD"
	f, err := os.OpenFile(m.path("mr", s.mrA, "mem"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte(secret), 0); err != nil {
		t.Fatal(err)
	}
	f.Close()
	m.mustWrite(fmt.Sprintf("opcode=rdma_write wr_id=5 sge=%s:0:%d remote_addr=%s rkey=%s send_flags=signaled\n",
		s.lkeyA, len(secret), s.iovaB, s.rkeyB), "qp", s.qa, "post_send")
	if wc := findWC(t, m.pollUntil(s.cq, 1), "5"); !strings.Contains(wc, "status=success") {
		t.Fatalf("root's write: %s", wc)
	}
	waitFor(t, "root", readRoot, secret)
	// Then the other user's own traffic, after root's: once it is in the
	// other capture, root's packets would have been there before it.
	out, stderr, err := bash(nobody, otherUserWrite(m.dir, theirs))
	if err != nil || !strings.Contains(out, "status=success") {
		t.Fatalf("uid %d's write: %q %q %v", nobody, out, stderr, err)
	}
	waitFor(t, "root", readRoot, secret, theirs)
	waitFor(t, "uid 65534", readOther, theirs)
	count := func(b []byte) (n int) {
		for _, err := range roce.ReadPcap(bytes.NewReader(b)) {
			if err != nil {
				break // a record cat has not finished writing
			}
			n++
		}
		return n
	}
	// Root: its WRITE and ACK, the other's WRITE and ACK; the other: its
	// two alone. The ACKs may still be on their way to the files.
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if count(readOther()) >= 2 && count(readRoot()) >= 4 {
			break
		}
	}
	time.Sleep(20 * time.Millisecond) // room for a packet too many to show
	other, root := stopOther(), stopRoot()
	if bytes.Contains(other, []byte(secret)) {
		t.Errorf("root's payload is in uid %d's capture", nobody)
	}
	if no, nr := count(other), count(root); no != 2 || nr != 4 {
		t.Errorf("uid %d captured %d packets, root %d; want 2 and 4", nobody, no, nr)
	}
}
