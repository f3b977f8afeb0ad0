package fsnode_test

import (
	"bufio"
	"fmt"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"rdmafs/device"
	"rdmafs/qp"
)

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// TestReadersMemoryBounded is issue #26's reader that never reads: uid
// 65534 opens capture 2,000 times and events 2,000 times and keeps them
// open; 256 of each open (EMFILE past them), and while the user's QPs
// send 5,000 packets of 1 KiB that all its captures may see, the daemon's
// heap grows by less than 48 MiB (before: 479 MiB for the capture opens
// alone, a 4,096-entry queue each).
func TestReadersMemoryBounded(t *testing.T) {
	m := mount(t)
	var rl syscall.Rlimit
	syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl)
	if rl.Cur < 8192 {
		old := rl
		rl.Cur = min(8192, rl.Max)
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil || rl.Cur < 4200 {
			t.Fatalf("cannot allow 4,200 descriptors (limit %d): %v", rl.Max, err)
		}
		defer syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old)
	}
	start := time.Now()
	before := heapInUse()
	cmd := exec.Command("bash", "-c", `
M=`+m.dir+`
# No command forks in the loops: a child would inherit the open files and
# close each at exit, one FUSE flush apiece.
for f in capture events; do
  ok=0; fail=0; why=
  for i in $(seq 2000); do
    if { exec {fd}<$M/$f; } 2>/tmp/sec-open-err.$$; then ok=$((ok+1)); else fail=$((fail+1)); read -r why </tmp/sec-open-err.$$; fi
  done
  echo "$f ok=$ok fail=$fail why=$why"
done
rm -f /tmp/sec-open-err.$$
echo ready
read -r x
`)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stdin.Close(); cmd.Wait() }()
	sc := bufio.NewScanner(stdout)
	var lines []string
	for sc.Scan() && sc.Text() != "ready" {
		lines = append(lines, sc.Text())
	}
	got := strings.Join(lines, "\n")
	t.Log(got)
	for _, f := range []string{"capture", "events"} {
		if !strings.Contains(got, f+" ok=256 fail=1744 why=") || !strings.Contains(got, "Too many open files") {
			t.Fatalf("uid 65534's opens of %s:\n%s", f, got)
		}
	}
	opened := heapInUse()
	t.Logf("opens took %v", time.Since(start))

	// The user's own traffic, which each of its captures may see.
	const nobody = device.Owner(65534)
	pd, _ := m.dev.AllocPD(nobody)
	cq, err := m.dev.CreateCQ(nobody, qp.CreateCQ{CQE: 4096})
	if err != nil {
		t.Fatal(err)
	}
	cr, err := qp.ParseCreateQP(fmt.Sprintf("pd=%d qp_type=ud send_cq=%d recv_cq=%d max_send_wr=256 max_recv_wr=1 max_inline_data=512", pd.Handle, cq.Handle, cq.Handle))
	if err != nil {
		t.Fatal(err)
	}
	q, err := m.dev.CreateQP(nobody, cr)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"qp_state=INIT pkey_index=0 port_num=1 qkey=0x11111111", "qp_state=RTR", "qp_state=RTS sq_psn=0"} {
		a, mask, _ := qp.ParseModify(s)
		if err := q.Modify(&a, mask); err != nil {
			t.Fatal(err)
		}
	}
	ahr, err := qp.ParseCreateAH(fmt.Sprintf("pd=%d dgid=%s", pd.Handle, device.GIDString(m.dev.Port().GID)))
	if err != nil {
		t.Fatal(err)
	}
	ah, err := m.dev.CreateAH(nobody, ahr)
	if err != nil {
		t.Fatal(err)
	}
	wr, err := qp.ParseSendWR(fmt.Sprintf("opcode=send ah=%d remote_qpn=%d remote_qkey=0x11111111 inline_data=%s", ah.Handle, q.QPN, strings.Repeat("ab", 512)))
	if err != nil {
		t.Fatal(err)
	}
	drops := m.dev.Counters.CaptureDrops.Load()
	for sent := 0; sent < 5000; {
		if _, err := q.PostSend([]qp.SendWR{wr}); err != nil {
			time.Sleep(100 * time.Microsecond) // the send queue is full
			continue
		}
		sent++
	}
	time.Sleep(100 * time.Millisecond)
	after := heapInUse()
	mib := func(n uint64) float64 { return float64(n) / (1 << 20) }
	t.Logf("heap in use: %.1f MiB before, %.1f MiB with 512 opens (+%.1f), %.1f MiB after 5,000 packets (+%.1f); capture drops %d",
		mib(before), mib(opened), mib(opened-min(opened, before)), mib(after), mib(after-min(after, before)), m.dev.Counters.CaptureDrops.Load()-drops)
	if after > before+48<<20 {
		t.Fatalf("the daemon's heap grew by %.1f MiB", mib(after-before))
	}
	if m.dev.Counters.CaptureDrops.Load() == drops {
		t.Fatal("no packet was dropped for the readers that do not read")
	}
}
