package show

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"rdmafs/internal/testmount"
	"rdmafs/roce"
)

// lockedBuffer is a bytes.Buffer a command writes while the test reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// pcapOf writes datagrams into a pcap stream, a microsecond apart.
func pcapOf(t *testing.T, dgs ...[]byte) []byte {
	t.Helper()
	var b bytes.Buffer
	w, err := roce.NewPcapWriter(&b, roce.LinkTypeRaw)
	if err != nil {
		t.Fatal(err)
	}
	ts := time.Date(2025, 1, 2, 3, 4, 5, 0, time.Local)
	for i, d := range dgs {
		if err := w.WritePacket(ts.Add(time.Duration(i)*time.Microsecond), d); err != nil {
			t.Fatal(err)
		}
	}
	return b.Bytes()
}

// traceOf runs a tracer over a pcap stream to its end and returns its
// output lines.
func traceOf(t *testing.T, tr *Tracer, pcap []byte) []string {
	t.Helper()
	tr.mnt = t.TempDir() // no counters file: no drop line
	tr.now = func() time.Time { return time.Unix(0, 0) }
	tr.nakSent, tr.nakRecv = map[string]int{}, map[string]int{}
	var out bytes.Buffer
	if err := tr.Run(context.Background(), bytes.NewReader(pcap), &out, 0); err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(out.String()), "\n")
}

// The decoder on a capture made by hand, as two devices on the wire would
// see it (IPv4): the QP's requests and responses each way, an RNR NAK and
// the retransmission after it, a READ retried from its middle, an atomic,
// error and sequence NAKs, the peer's duplicate request; packets of
// another QP from the same host, of a remote QP with the same number, to
// another address and garbage are not the QP's.
func TestTraceDecode(t *testing.T) {
	us, them, other := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("10.0.0.3")
	const qpn, peer = 17, 0x99
	dg := func(src, dst netip.Addr, sport uint16, p roce.Packet) []byte {
		p.PKey = 0xFFFF
		ib, err := p.AppendIB(nil)
		if err != nil {
			t.Fatal(err)
		}
		b, err := roce.BuildIPv4(src, dst, sport, ib, 0, 0, 64)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	mine, theirs := roce.QPSourcePort(qpn), roce.QPSourcePort(peer)
	out := func(p roce.Packet) []byte { p.DestQP = peer; return dg(us, them, mine, p) }
	in := func(p roce.Packet) []byte { p.DestQP = qpn; return dg(them, us, theirs, p) }
	kb := make([]byte, 1024)
	bad := out(roce.Packet{Opcode: roce.RCSendOnly, PSN: 99, Payload: kb[:8]})
	bad[len(bad)-1] ^= 0xFF // ICRC
	pcap := pcapOf(t,
		out(roce.Packet{Opcode: roce.RCWriteFirst, PSN: 10, VA: 0x1000, RKey: 0xabc, DMALen: 2048, Payload: kb}),
		out(roce.Packet{Opcode: roce.RCWriteLast, PSN: 11, AckReq: true, Payload: kb}),
		in(roce.Packet{Opcode: roce.RCAcknowledge, PSN: 11, Syndrome: 0x1F, MSN: 1}),
		out(roce.Packet{Opcode: roce.RCSendOnly, PSN: 12, AckReq: true, Payload: kb[:16]}),
		in(roce.Packet{Opcode: roce.RCAcknowledge, PSN: 12, Syndrome: 0x20 | 12, MSN: 1}),
		out(roce.Packet{Opcode: roce.RCSendOnly, PSN: 12, AckReq: true, Payload: kb[:16]}),
		in(roce.Packet{Opcode: roce.RCAcknowledge, PSN: 12, Syndrome: 3, MSN: 2}),
		out(roce.Packet{Opcode: roce.RCReadRequest, PSN: 13, VA: 0x2000, RKey: 0xabc, DMALen: 3000, AckReq: true}),
		in(roce.Packet{Opcode: roce.RCReadResponseFirst, PSN: 13, Syndrome: 0x1F, MSN: 2, Payload: kb}),
		out(roce.Packet{Opcode: roce.RCReadRequest, PSN: 14, VA: 0x2400, RKey: 0xabc, DMALen: 1976, AckReq: true}),
		in(roce.Packet{Opcode: roce.RCReadResponseMiddle, PSN: 14, Payload: kb}),
		in(roce.Packet{Opcode: roce.RCReadResponseLast, PSN: 15, Syndrome: 0x1F, MSN: 3, Payload: kb[:952]}),
		out(roce.Packet{Opcode: roce.RCCompareSwap, PSN: 16, VA: 0x3000, RKey: 0xabc, Compare: 1, SwapAdd: 2, AckReq: true}),
		in(roce.Packet{Opcode: roce.RCAtomicAcknowledge, PSN: 16, Syndrome: 0x1F, MSN: 4, OrigData: 1}),
		out(roce.Packet{Opcode: roce.RCWriteOnly, PSN: 17, VA: 0, RKey: 0xbad, DMALen: 8, AckReq: true, Payload: kb[:8]}),
		in(roce.Packet{Opcode: roce.RCAcknowledge, PSN: 17, Syndrome: 0x62, MSN: 4}),
		// The peer's requests to us, one of them twice, and our answers.
		in(roce.Packet{Opcode: roce.RCSendOnlyImm, PSN: 50, Imm: 0x1234, SE: true, AckReq: true, Payload: kb[:4]}),
		in(roce.Packet{Opcode: roce.RCSendOnlyImm, PSN: 50, Imm: 0x1234, AckReq: true, Payload: kb[:4]}),
		out(roce.Packet{Opcode: roce.RCAcknowledge, PSN: 50, Syndrome: 0x1F, MSN: 1}),
		in(roce.Packet{Opcode: roce.RCSendOnly, PSN: 52, AckReq: true, Payload: kb[:4]}),
		out(roce.Packet{Opcode: roce.RCAcknowledge, PSN: 51, Syndrome: 0x60, MSN: 1}),
		// Not the QP's.
		dg(us, them, roce.QPSourcePort(18), roce.Packet{Opcode: roce.RCSendOnly, DestQP: qpn, PSN: 1}),
		dg(them, other, theirs, roce.Packet{Opcode: roce.RCSendOnly, DestQP: qpn, PSN: 1}),
		[]byte("not a datagram"),
		bad,
	)
	lines := traceOf(t, &Tracer{qpn: qpn, addr: us, typ: "rc", peer: peer, mtu: 1024, known: true}, pcap)
	want := []string{
		`out  RC_RDMA_WRITE_FIRST +psn 10 +len 1024 +va 0x1000 rkey 0xabc dmalen 2048$`,
		`out  RC_RDMA_WRITE_LAST +psn 11 +len 1024 +ackreq$`,
		`in   RC_ACKNOWLEDGE +psn 11 +len 0 +msn 1 ACK credits unlimited$`,
		`out  RC_SEND_ONLY +psn 12 +len 16 +ackreq$`,
		`in   RC_ACKNOWLEDGE +psn 12 +len 0 +msn 1 RNR-NAK timer 12 \(640µs\)$`,
		`out  RC_SEND_ONLY +psn 12 +len 16 +RETRANSMIT ackreq$`,
		`in   RC_ACKNOWLEDGE +psn 12 +len 0 +msn 2 ACK credits 3$`,
		`out  RC_RDMA_READ_REQUEST +psn 13 +len 0 +va 0x2000 rkey 0xabc dmalen 3000 ackreq$`,
		`in   RC_RDMA_READ_RESPONSE_FIRST +psn 13 +len 1024 +msn 2 ACK credits unlimited$`,
		`out  RC_RDMA_READ_REQUEST +psn 14 +len 0 +RETRANSMIT va 0x2400 rkey 0xabc dmalen 1976 ackreq$`,
		`in   RC_RDMA_READ_RESPONSE_MIDDLE +psn 14 +len 1024$`,
		`in   RC_RDMA_READ_RESPONSE_LAST +psn 15 +len 952 +msn 3 ACK credits unlimited$`,
		`out  RC_COMPARE_SWAP +psn 16 +len 0 +va 0x3000 rkey 0xabc compare 0x1 swap 0x2 ackreq$`,
		`in   RC_ATOMIC_ACKNOWLEDGE +psn 16 +len 0 +msn 4 ACK credits unlimited orig 0x1$`,
		`out  RC_RDMA_WRITE_ONLY +psn 17 +len 8 +va 0x0 rkey 0xbad dmalen 8 ackreq$`,
		`in   RC_ACKNOWLEDGE +psn 17 +len 0 +msn 4 NAK rem_access_err$`,
		`in   RC_SEND_ONLY_WITH_IMMEDIATE +psn 50 +len 4 +imm 0x1234 ackreq se$`,
		`in   RC_SEND_ONLY_WITH_IMMEDIATE +psn 50 +len 4 +RETRANSMIT imm 0x1234 ackreq$`,
		`out  RC_ACKNOWLEDGE +psn 50 +len 0 +msn 1 ACK credits unlimited$`,
		`in   RC_SEND_ONLY +psn 52 +len 4 +ackreq$`,
		`out  RC_ACKNOWLEDGE +psn 51 +len 0 +msn 1 NAK psn_seq_err$`,
		`out  RC_SEND_ONLY +psn 99 +len 8 +BAD-ICRC$`,
		`^--- qp 17: 0.0 s ---$`,
		`^out: 11 packets, 2096 payload bytes, 2 retransmitted$`,
		`^in:  11 packets, 3012 payload bytes, 1 retransmitted$`,
		`^NAKs sent: 1 \(psn_seq_err 1\)$`,
		`^NAKs received: 2 \(rnr 1, rem_access_err 1\)$`,
	}
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), len(want), strings.Join(lines, "\n"))
	}
	for i, w := range want {
		if !regexp.MustCompile(w).MatchString(lines[i]) {
			t.Errorf("line %d:\n %s\nwant /%s/", i, lines[i], w)
		}
	}
	if !strings.HasPrefix(lines[0], "03:04:05.000000 ") {
		t.Errorf("time: %q", lines[0])
	}
}

// A UD QP's packets: from it (its DETH names it) and to it.
func TestTraceDecodeUD(t *testing.T) {
	us, them := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	dg := func(src, dst netip.Addr, sport uint16, p roce.Packet) []byte {
		p.PKey = 0xFFFF
		ib, _ := p.AppendIB(nil)
		b, err := roce.BuildIPv4(src, dst, sport, ib, 0, 0, 64)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	pcap := pcapOf(t,
		dg(us, them, roce.QPSourcePort(17), roce.Packet{Opcode: roce.UDSendOnly, DestQP: 30, PSN: 5, QKey: 0x11111111, SrcQP: 17, Payload: make([]byte, 64)}),
		dg(them, us, roce.QPSourcePort(40), roce.Packet{Opcode: roce.UDSendOnlyImm, DestQP: 17, PSN: 9, QKey: 0x11111111, SrcQP: 40, Imm: 7, Payload: make([]byte, 32)}),
		// Another UD QP whose port collides: its DETH says it is not ours.
		dg(us, them, roce.QPSourcePort(17), roce.Packet{Opcode: roce.UDSendOnly, DestQP: 30, PSN: 5, QKey: 0x11111111, SrcQP: 99}),
	)
	lines := traceOf(t, &Tracer{qpn: 17, addr: us, typ: "ud", known: true}, pcap)
	want := []string{
		`out  UD_SEND_ONLY +psn 5 +len 64 +qkey 0x11111111 src_qp 17 dest_qp 30$`,
		`in   UD_SEND_ONLY_WITH_IMMEDIATE +psn 9 +len 32 +qkey 0x11111111 src_qp 40 imm 0x7$`,
		`^--- qp 17`,
		`^out: 1 packets, 64 payload bytes, 0 retransmitted$`,
		`^in:  1 packets, 32 payload bytes, 0 retransmitted$`,
		`^NAKs sent: 0$`,
		`^NAKs received: 0$`,
	}
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), len(want), strings.Join(lines, "\n"))
	}
	for i, w := range want {
		if !regexp.MustCompile(w).MatchString(lines[i]) {
			t.Errorf("line %d:\n %s\nwant /%s/", i, lines[i], w)
		}
	}
}

// rdmafs trace on a mount with loopback traffic, ended by SIGINT: every
// packet of the QP each way, and a summary whose counts are the QPs'
// counters (which started at zero with the trace): packets and payload
// bytes each way, the retransmission after an RNR NAK, the NAKs by kind.
func TestTraceLive(t *testing.T) {
	m := mountDevice(t)
	bin := testmount.Rdmafs(t)
	p := m.newPair(64, 0) // qb's RNR timer: 655 ms, one NAK
	drops := m.kv("counters")["capture_drops"]
	tr := exec.Command(bin, "trace", m.dir, p.qa)
	var stdout lockedBuffer
	tr.Stdout = &stdout
	stderr, err := tr.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Process.Kill(); tr.Wait() })
	// The banner comes once the capture is open.
	banner, err := bufio.NewReader(stderr).ReadString('\n')
	if err != nil || !strings.HasPrefix(banner, "tracing qp "+p.qa+" (RC, peer qp "+p.qb+")") {
		t.Fatalf("banner %q %v", banner, err)
	}
	// A 3000-byte WRITE (3 packets at MTU 1024), a SEND that meets an RNR
	// NAK and goes again once a receive is posted, a 5000-byte READ (5
	// responses), a WRITE with a bad rkey (NAK, both QPs to ERR).
	m.post(p, fmt.Sprintf("opcode=rdma_write wr_id=1 send_flags=signaled sge=%s:0:3000 remote_addr=0 rkey=%s", p.lkeyA, p.rkeyB))
	m.pollN(p.cqA, 1)
	m.post(p, fmt.Sprintf("opcode=send wr_id=2 send_flags=signaled sge=%s:0:100", p.lkeyA))
	m.waitFor("the RNR NAK", func() bool { return m.kv("qp", p.qa, "counters")["rnr_naks_recv"] == "1" })
	m.must(fmt.Sprintf("wr_id=9 sge=%s:0:4096\n", p.lkeyB), "qp", p.qb, "post_recv")
	m.pollN(p.cqA, 1)
	m.post(p, fmt.Sprintf("opcode=rdma_read wr_id=3 send_flags=signaled sge=%s:8192:5000 remote_addr=0 rkey=%s", p.lkeyA, p.rkeyB))
	m.pollN(p.cqA, 1)
	rkey, _ := strconv.ParseUint(p.rkeyB, 0, 32)
	m.post(p, fmt.Sprintf("opcode=rdma_write wr_id=4 send_flags=signaled sge=%s:0:8 remote_addr=0 rkey=%d", p.lkeyA, rkey^0xff))
	m.pollN(p.cqA, 1)
	ca, cb := m.kv("qp", p.qa, "counters"), m.kv("qp", p.qb, "counters")
	// Every packet reached the trace before it stops.
	want := ca.u64("packets_sent") + cb.u64("packets_sent")
	m.waitFor("the trace's lines", func() bool {
		return uint64(strings.Count(stdout.String(), "\n")) >= want
	})
	tr.Process.Signal(syscall.SIGINT)
	done := make(chan error, 1)
	go func() { done <- tr.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("trace: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("trace did not end on SIGINT")
	}
	out := stdout.String()
	t.Logf("rdmafs trace:\n%s", out)
	if d := m.kv("counters")["capture_drops"]; d != drops {
		t.Fatalf("capture_drops %s -> %s: the comparison needs every packet", drops, d)
	}
	count := func(re string) int { return len(regexp.MustCompile(re).FindAllString(out, -1)) }
	for re, n := range map[string]uint64{
		`(?m)^\S+ out `:                       ca.u64("packets_sent"),
		`(?m)^\S+ in `:                        cb.u64("packets_sent"),
		`(?m)^\S+ out .*RETRANSMIT`:           ca.u64("retransmits"),
		`RNR-NAK timer 0 `:                    cb.u64("rnr_naks_sent"),
		`NAK rem_access_err`:                  cb.u64("rem_access_naks_sent"),
		`(?m)^\S+ in +RC_RDMA_READ_RESPONSE_`: 5,
		`(?m)^\S+ out +RC_RDMA_WRITE_FIRST +psn 100 +len 1024 +va 0x0 rkey ` + fmt.Sprintf("0x%x", rkey) + ` dmalen 3000$`: 1,
		`(?m)^\S+ out +RC_SEND_ONLY +psn 103 +len 100 +RETRANSMIT ackreq$`:                                                 1,
	} {
		if got := count(re); uint64(got) != n {
			t.Errorf("/%s/: %d lines, want %d", re, got, n)
		}
	}
	for _, w := range []string{
		fmt.Sprintf("out: %d packets, %d payload bytes, %d retransmitted\n", ca.u64("packets_sent"), ca.u64("bytes_sent"), ca.u64("retransmits")),
		fmt.Sprintf("in:  %d packets, %d payload bytes, 0 retransmitted\n", cb.u64("packets_sent"), ca.u64("bytes_recv")),
		"NAKs sent: 0\n",
		fmt.Sprintf("NAKs received: %d (rnr %d, rem_access_err %d)\n", ca.u64("rnr_naks_recv")+ca.u64("rem_access_naks_recv"),
			ca.u64("rnr_naks_recv"), ca.u64("rem_access_naks_recv")),
	} {
		if !strings.Contains(out, w) {
			t.Errorf("summary lacks %q", w)
		}
	}
	if ca.u64("rnr_naks_recv") != 1 || ca.u64("retransmits") != 1 || ca.u64("rem_access_naks_recv") != 1 {
		t.Errorf("counters of qa: %v", ca)
	}
}

// Another user's QP is not traced (its packets are not in that user's
// capture); a QP that does not exist neither.
func TestTraceRefuses(t *testing.T) {
	m := mountDevice(t)
	bin := testmount.Rdmafs(t)
	p := m.newPair(16, 12)
	out, err := exec.Command(bin, "trace", m.dir, "4242").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "qp 4242 does not exist") {
		t.Errorf("trace of a missing QP: %v %s", err, out)
	}
	chmodUp(t, bin)
	c := exec.Command(bin, "trace", m.dir, p.qa)
	c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err = c.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "belongs to another user") {
		t.Errorf("uid 65534's trace of root's QP: %v %s", err, out)
	}
}
