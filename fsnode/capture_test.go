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
