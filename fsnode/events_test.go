package fsnode_test

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// readEvents reads one batch from an open events file, failing after 10 s.
func readEvents(t *testing.T, f *os.File) string {
	t.Helper()
	got := make(chan string, 1)
	go func() {
		b := make([]byte, 4096)
		n, err := f.Read(b)
		if err != nil {
			got <- "error: " + err.Error()
			return
		}
		got <- string(b[:n])
	}()
	select {
	case s := <-got:
		return s
	case <-time.After(10 * time.Second):
		t.Fatal("events read blocked for 10 s")
		return ""
	}
}

// TestEventsPerOpener: every open of MOUNT/events has its own copy of the
// events it may see; another uid sees only its own objects' events and
// takes none of root's; root sees them all.
func TestEventsPerOpener(t *testing.T) {
	m := mount(t)
	s := m.setup()
	// qb stays in RTR, so the SEND it receives raises comm_est.
	m.toRTR(s.qa, s.qb)
	m.toRTR(s.qb, s.qa)
	m.toRTS(s.qa)
	first, err := os.Open(m.path("events"))
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	second, err := os.Open(m.path("events"))
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()

	// The other user opens its events file, then (told to) makes an
	// event of its own and reads its file.
	script := fmt.Sprintf(`set -e
M=%s
exec 3<$M/events
echo ready
read -r go
G=$(grep ^gid= $M/port | cut -d= -f2)
{ echo "" >&0; read -r pd; } <>$M/pd/new
{ echo "pd=$pd length=4096 access=local_write" >&0; read -r mr; } <>$M/mr/new
{ echo "cqe=16" >&0; read -r cq; } <>$M/cq/new
q="pd=$pd qp_type=rc send_cq=$cq recv_cq=$cq max_send_wr=4 max_recv_wr=4 max_send_sge=1 max_recv_sge=1"
{ echo "$q" >&0; read -r a; } <>$M/qp/new
{ echo "$q" >&0; read -r b; } <>$M/qp/new
for x in "$a $b" "$b $a"; do
	set -- $x
	echo "modify qp_state=INIT pkey_index=0 port_num=1 qp_access_flags=local_write" > $M/qp/$1/ctl
	echo "modify qp_state=RTR path_mtu=1024 dest_qp_num=$2 rq_psn=0 dgid=$G max_dest_rd_atomic=1 min_rnr_timer=12" > $M/qp/$1/ctl
done
echo "modify qp_state=RTS sq_psn=0 timeout=14 retry_cnt=7 rnr_retry=7 max_rd_atomic=1" > $M/qp/$a/ctl
lkey=$(grep ^lkey= $M/mr/$mr/attr | cut -d= -f2)
echo "wr_id=1 sge=$lkey:0:64" > $M/qp/$b/post_recv
echo "opcode=send wr_id=2 sge=$lkey:64:8 send_flags=signaled" > $M/qp/$a/post_send
n=0; for i in $(seq 500); do n=$((n + $(cat $M/cq/$cq/poll | grep -c wr_id || true))); [ $n -ge 2 ] && break; sleep 0.01; done
echo "own=$b"
timeout 5 cat <&3
`, m.dir)
	cmd := exec.Command("bash", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	out := bufio.NewReader(stdout)
	if l, err := out.ReadString('\n'); l != "ready\n" {
		t.Fatalf("uid %d: %q %v %s", nobody, l, err, stderr.String())
	}

	// Root's event, while both root files and the other user's are open.
	m.mustWrite(fmt.Sprintf("wr_id=77 sge=%s:%d:64\n", s.lkeyB, 0x10000), "qp", s.qb, "post_recv")
	m.mustWrite(fmt.Sprintf("opcode=send wr_id=2 sge=%s:0:8 send_flags=signaled\n", s.lkeyA), "qp", s.qa, "post_send")
	m.pollUntil(s.cq, 2)
	rootEv := "event=comm_est qp=" + s.qb + "\n"
	if got := readEvents(t, first); got != rootEv {
		t.Errorf("root's first opener: %q, want %q", got, rootEv)
	}

	io.WriteString(stdin, "go\n")
	rest, _ := io.ReadAll(out)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("uid %d: %v\n%s\n%s", nobody, err, rest, stderr.String())
	}
	own, evs, _ := strings.Cut(string(rest), "\n")
	theirEv := "event=comm_est qp=" + strings.TrimPrefix(own, "own=") + "\n"
	if evs != theirEv {
		t.Errorf("uid %d's events: %q, want only its own %q", nobody, evs, theirEv)
	}
	// Root's second opener still has root's event (nobody took it), and
	// the other user's as well.
	if got := readEvents(t, second); got != rootEv+theirEv {
		t.Errorf("root's second opener: %q, want %q", got, rootEv+theirEv)
	}
	// Nothing of root's waits for the other user's next open either.
	if o, _, err := bash(nobody, "timeout 0.3 cat "+m.path("events")); o != "" {
		t.Errorf("uid %d's later open: %q %v, want nothing", nobody, o, err)
	}
}

// TestEventsFileKeepsReading: after a batch one read is at end of file
// (so cat ends), and the read after it on the same open waits for and
// gets the next batch. The C library keeps its open for its context's
// life: an event raised between a close and a reopen would go to another
// open of the same user (here: other) and never to it.
func TestEventsFileKeepsReading(t *testing.T) {
	m := mount(t)
	f, err := os.Open(m.path("events"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	other, err := os.Open(m.path("events"))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	commEst := func() string {
		s := m.setup()
		m.toRTR(s.qa, s.qb)
		m.toRTR(s.qb, s.qa)
		m.toRTS(s.qa)
		m.mustWrite(fmt.Sprintf("wr_id=1 sge=%s:%d:64\n", s.lkeyB, 0x10000), "qp", s.qb, "post_recv")
		m.mustWrite(fmt.Sprintf("opcode=send wr_id=2 sge=%s:0:8 send_flags=signaled\n", s.lkeyA), "qp", s.qa, "post_send")
		m.pollUntil(s.cq, 2)
		return "event=comm_est qp=" + s.qb + "\n"
	}
	first := commEst()
	if got := readEvents(t, f); got != first {
		t.Fatalf("first batch: %q, want %q", got, first)
	}
	if got := readEvents(t, f); got != "error: EOF" {
		t.Fatalf("after the batch: %q, want end of file", got)
	}
	// The next read waits (it is not another end of file) and wakes with
	// the next event.
	next := make(chan string, 1)
	go func() { next <- readEvents(t, f) }()
	second := commEst()
	if got := <-next; got != second {
		t.Fatalf("the same open's next batch: %q, want %q", got, second)
	}
	if got := readEvents(t, other); got != first+second {
		t.Errorf("the other open: %q, want both", got)
	}
}
