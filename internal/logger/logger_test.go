package logger_test

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"rdmafs/clock"
	"rdmafs/device"
	"rdmafs/fsnode"
	"rdmafs/internal/logger"
	"rdmafs/internal/testmount"
	"rdmafs/roce"
)

// logFile is the log, a file as the daemon's is: the daemon's goroutines
// write it while the test reads it.
type logFile struct {
	t    *testing.T
	f    *os.File
	path string
}

func newLogFile(t *testing.T) *logFile {
	path := filepath.Join(t.TempDir(), "daemon.log")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return &logFile{t: t, f: f, path: path}
}

func (l *logFile) lines() []string {
	b, err := os.ReadFile(l.path)
	if err != nil {
		l.t.Fatal(err)
	}
	s := strings.TrimSuffix(string(b), "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

func count(lines []string, sub string) int {
	n := 0
	for _, l := range lines {
		if strings.Contains(l, sub) {
			n++
		}
	}
	return n
}

// A flood of one kind of line is cut to the burst, then to one line a
// second of the clock, and the next line logged counts the ones left out;
// another kind is not held back by it.
func TestFlood(t *testing.T) {
	clk := clock.NewFake()
	out := newLogFile(t)
	l := logger.New(out.f, clk)
	for i := 0; i < 1000; i++ {
		l.Logf("dropped a malformed datagram of %d bytes", i)
	}
	l.Logf("serving %s", "/mnt")
	lines := out.lines()
	if n := count(lines, "malformed"); n != logger.Burst {
		t.Fatalf("%d lines of a flood of 1000, want the burst %d:\n%s", n, logger.Burst, strings.Join(lines, "\n"))
	}
	if count(lines, "serving /mnt") != 1 {
		t.Fatalf("another kind was held back:\n%s", strings.Join(lines, "\n"))
	}
	// Three seconds earn three lines; the first says how many were left out.
	clk.Advance(3 * logger.Every)
	for i := 0; i < 10; i++ {
		l.Logf("dropped a malformed datagram of %d bytes", 2000+i)
	}
	lines = out.lines()[len(lines):]
	if len(lines) != 3 {
		t.Fatalf("after 3 s: %d lines, want 3:\n%s", len(lines), strings.Join(lines, "\n"))
	}
	want := fmt.Sprintf("dropped a malformed datagram of 2000 bytes (%d more like this not logged)", 1000-logger.Burst)
	if !strings.HasSuffix(lines[0], want) {
		t.Errorf("first line after the flood %q, want it to end %q", lines[0], want)
	}
	if strings.Contains(lines[1], "not logged") {
		t.Errorf("the count repeats: %q", lines[1])
	}
	if !regexp.MustCompile(`^rdmafs: \d{4}/\d\d/\d\d \d\d:\d\d:\d\d dropped`).MatchString(lines[0]) {
		t.Errorf("line format %q", lines[0])
	}
	// A quiet kind fills its burst again, and no more.
	clk.Advance(time.Hour)
	before := len(out.lines())
	for i := 0; i < 100; i++ {
		l.Logf("dropped a malformed datagram of %d bytes", i)
	}
	if n := len(out.lines()) - before; n != logger.Burst {
		t.Errorf("after an hour: %d lines, want %d", n, logger.Burst)
	}
}

// On a mount, a command refused on a ctl file and a bad creation line are
// in the log with their errno and reason (the ones the error file and the
// */new answer give), and a program writing bad commands in a loop leaves
// only the burst.
func TestRefusedInput(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI runs as root; mounting must work")
		}
		t.Skip("needs root")
	}
	clk := clock.NewFake()
	out := newLogFile(t)
	l := logger.New(out.f, clk)
	dev := testmount.Device(t, device.Config{Logf: l.Logf})
	dir, _ := testmount.Mount(t, dev, fsnode.Options{Logf: l.Logf})
	create := func(kind, line string) string {
		t.Helper()
		f, err := os.OpenFile(filepath.Join(dir, kind, "new"), os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		_, werr := f.Write([]byte(line + "\n"))
		b := make([]byte, 256)
		n, _ := f.Read(b)
		if werr != nil {
			return "error " + strings.TrimSpace(string(b[:n]))
		}
		return strings.TrimSpace(string(b[:n]))
	}
	pd := create("pd", "")
	cq := create("cq", "cqe=4")
	q := create("qp", "pd="+pd+" qp_type=rc send_cq="+cq+" recv_cq="+cq+" max_send_wr=1 max_recv_wr=1 max_send_sge=1 max_recv_sge=1")
	if bad := create("qp", "pd="+pd+" qp_type=rc bogus=1"); !strings.HasPrefix(bad, "error error: ") {
		t.Fatalf("a bad qp/new line: %q", bad)
	}
	ctl := filepath.Join(dir, "qp", q, "ctl")
	if err := os.WriteFile(ctl, []byte("modify qp_state=BOGUS\n"), 0); err == nil {
		t.Fatal("a bad modify succeeded")
	}
	reason, err := os.ReadFile(filepath.Join(dir, "qp", q, "error"))
	if err != nil {
		t.Fatal(err)
	}
	lines := out.lines()
	for _, want := range []string{
		"refused modify_qp on qp/" + q + ": EINVAL: " + strings.TrimSpace(string(reason)),
		"refused create_qp on qp/new: EINVAL: ",
	} {
		if count(lines, want) != 1 {
			t.Errorf("the log lacks %q:\n%s", want, strings.Join(lines, "\n"))
		}
	}
	for i := 0; i < 200; i++ {
		os.WriteFile(ctl, []byte("modify qp_state=BOGUS\n"), 0)
	}
	if n := count(out.lines(), "refused "); n != logger.Burst {
		t.Errorf("201 refused writes and 1 bad line left %d lines, want the burst %d", n, logger.Burst)
	}
}

// A device speaking RoCEv2 logs the datagrams it drops: one too short to
// be RoCE (malformed) and one whose ICRC does not match.
func TestDroppedDatagrams(t *testing.T) {
	out := newLogFile(t)
	l := logger.New(out.f, clock.Real{})
	addr := netip.AddrFrom4([4]byte{127, 0, 93, 1})
	dev, err := device.New(device.Config{Addr: addr, Logf: l.Logf})
	for i := byte(2); errors.Is(err, syscall.EADDRINUSE) && i < 32; i++ { // another test's device
		addr = netip.AddrFrom4([4]byte{127, 0, 93, i})
		dev, err = device.New(device.Config{Addr: addr, Logf: l.Logf})
	}
	if errors.Is(err, syscall.EPERM) && os.Getenv("CI") != "true" {
		t.Skipf("no CAP_NET_RAW: %v", err) // CI runs as root: there it fails
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	// A verb takes the device's lock, which the wire's receive goroutine
	// takes too: without one, the race detector sees engine.start (in New,
	// after the receive goroutine started) race the first datagram's turn.
	if _, err := dev.AllocPD(0); err != nil {
		t.Fatal(err)
	}
	conn, err := net.DialUDP("udp4", nil, &net.UDPAddr{IP: addr.AsSlice(), Port: roce.UDPPort})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// A BTH for qp 0x42 and an ICRC of zeros.
	badICRC := []byte{0x64, 0, 0xff, 0xff, 0, 0, 0, 0x42, 0, 0, 0, 1, 0, 0, 0, 0}
	for _, d := range [][]byte{{1, 2, 3}, badICRC} {
		if _, err := conn.Write(d); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"dropped a malformed datagram of", "dropped a packet for qp 66: bad ICRC"}
	for deadline := time.Now().Add(10 * time.Second); ; {
		lines := out.lines()
		if count(lines, want[0]) == 1 && count(lines, want[1]) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the log lacks %q after 10 s:\n%s", want, strings.Join(lines, "\n"))
		}
		time.Sleep(10 * time.Millisecond)
	}
}
