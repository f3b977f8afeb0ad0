package device

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"rdmafs/qp"
	"rdmafs/roce"
)

// Multicast between two devices on the wire (two loopback addresses), as
// between two hosts: an IPv4 group is an IP multicast group that each
// device's wire joins; an ff.. group has no IPv4 address to go to and stays
// on its device.

// randomGroup is an IPv4-mapped MGID of a random group of 239.64.0.0/10
// (administratively scoped), so that test binaries running at the same
// time do not hear each other's groups.
func randomGroup() ([16]byte, netip.Addr) {
	g := netip.AddrFrom4([4]byte{239, byte(64 + rand.IntN(64)), byte(rand.IntN(256)), byte(1 + rand.IntN(254))})
	return netip.AddrFrom16(g.As16()).As16(), g
}

// mcastSend posts a signaled UD send of n bytes of src from q to the
// group's AH with QPN 0xFFFFFF and Q_Key qkey.
func (e *env) mcastSend(q *QP, src *MR, ah *AH, wrid, n int, qkey string) {
	e.t.Helper()
	e.postSend(q, fmt.Sprintf("opcode=send wr_id=%d send_flags=signaled sge=%d:0:%d ah=%d remote_qpn=%d remote_qkey=%s",
		wrid, src.LKey, n, ah.Handle, MulticastQPN, qkey))
}

// An IPv4 group reaches the members on the other device through the wire;
// an ff.. group's datagram leaves no packet on the wire and reaches only
// its own device's members (rxe on an IPv4 netdev sends it nowhere: a
// non-mapped GID has no IPv4 address, rdma_cm refuses IPv6 joins on
// RoCEv2).
func TestWireMcastGroups(t *testing.T) {
	ea, eb := newWirePair(t)
	envs := []*env{ea, eb}
	const qkey = "0x11111111"
	mgid, group := randomGroup()
	a, acq, _ := ea.udQPOf(0, qkey)
	l, lcq, _ := ea.udQPOf(0, qkey) // a member on the sender's device
	b, bcq, _ := eb.udQPOf(0, qkey)
	for _, x := range []struct {
		e *env
		q *QP
	}{{ea, l}, {eb, b}} {
		for _, g := range [][16]byte{mgid, mgid6} {
			if err := x.q.AttachMcast(g, mlid); err != nil {
				t.Fatal(err)
			}
		}
	}
	src := ea.mr(4096, 0)
	fill(src.Mem(), 5)
	ldst, bdst := ea.mr(4096, qp.AccessLocalWrite), eb.mr(4096, qp.AccessLocalWrite)
	ea.postRecv(l, fmt.Sprintf("wr_id=1 sge=%d:0:1024", ldst.LKey), fmt.Sprintf("wr_id=2 sge=%d:1024:1024", ldst.LKey))
	eb.postRecv(b, fmt.Sprintf("wr_id=1 sge=%d:0:1024", bdst.LKey), fmt.Sprintf("wr_id=2 sge=%d:1024:1024", bdst.LKey))

	capA, capB := ea.d.OpenCapture(), eb.d.OpenCapture()
	defer capA.Close()
	defer capB.Close()
	ea.mcastSend(a, src, ea.ah(mgid), 1, 200, qkey)
	wexpect(t, acq, envs, sendWC(1, "success", "send", a, 200))
	wexpect(t, bcq, envs, recvWC(1, "success", "recv", b, 240, a, "wc_flags=grh"))
	wexpect(t, lcq, envs, recvWC(1, "success", "recv", l, 240, a, "wc_flags=grh"))
	sameBytes(t, bdst.Mem()[40:240], src.Mem()[:200])
	sent := ea.d.Counters.WirePacketsSent.Load()
	if sent != 1 {
		t.Fatalf("wire_packets_sent %d after one datagram to an IPv4 group", sent)
	}
	// Both captures show it: an IPv4 datagram to the group, QPN 0xFFFFFF,
	// with a good ICRC; A's as sent (the host's multicast loop brings it
	// back to A's own member, which its capture shows too), B's as received.
	for name, c := range map[string]*CaptureReader{"sender": capA, "receiver": capB} {
		n := 0
		for rec, err := range roce.ReadPcap(bytes.NewReader(readCapture(t, c))) {
			if err != nil {
				t.Fatal(err)
			}
			pkt, ok := rec.IP()
			if !ok || len(pkt) < roce.HeadroomIPv4+roce.BTHLen || roce.CheckIPv4(pkt) != nil {
				t.Fatalf("%s's capture: a record that is not a good RoCEv2 datagram: % x", name, pkt)
			}
			bth := pkt[roce.HeadroomIPv4:]
			if netip.AddrFrom4([4]byte(pkt[16:20])) != group || [3]byte(bth[5:8]) != [3]byte{0xff, 0xff, 0xff} {
				t.Fatalf("%s's capture: a datagram to %v QPN % x, want %v QPN ff ff ff", name, netip.AddrFrom4([4]byte(pkt[16:20])), bth[5:8], group)
			}
			n++
		}
		if n == 0 {
			t.Fatalf("%s's capture has no datagram to the group", name)
		}
	}
	// The sender's fault injector drops it like any packet.
	ea.setFaults(Faults{Drop: 1, Seed: 1})
	ea.mcastSend(a, src, ea.ah(mgid), 3, 10, qkey)
	wexpect(t, acq, envs, sendWC(3, "success", "send", a, 10))
	wexpect(t, bcq, envs)
	wexpect(t, lcq, envs)
	if ea.d.Counters.FaultDrops.Load() == 0 || ea.d.Counters.WirePacketsSent.Load() != sent {
		t.Fatalf("fault_drops %d, wire_packets_sent %d: the datagram was not dropped", ea.d.Counters.FaultDrops.Load(), ea.d.Counters.WirePacketsSent.Load())
	}
	ea.setFaults(Faults{})

	ea.mcastSend(a, src, ea.ah(mgid6), 2, 100, qkey)
	wexpect(t, acq, envs, sendWC(2, "success", "send", a, 100))
	wexpect(t, lcq, envs, recvWC(2, "success", "recv", l, 140, a, "wc_flags=grh"))
	wexpect(t, bcq, envs)
	if n := ea.d.Counters.WirePacketsSent.Load(); n != sent {
		t.Fatalf("a datagram to %s went on the wire (wire_packets_sent %d -> %d)", GIDString(mgid6), sent, n)
	}
	if n := eb.d.Counters.McastPacketsRecv.Load(); n != 1 {
		t.Fatalf("the other device received %d multicast datagrams, want 1", n)
	}
	ea.healthy(a, l)
	eb.healthy(b)
	// Leaving ends the sender device's membership (and the goroutine of
	// its group's socket, which the other device's leak check would see).
	if err := l.DetachMcast(mgid, mlid); err != nil {
		t.Fatal(err)
	}
}

// A flood to a joined group from a plain UDP socket. Junk alone never
// needs the device's lock. Then junk, datagrams with a bad ICRC, and good
// UD datagrams to QPN 0xFFFFFF that nobody has a
// receive WQE for, while the device is busy (its lock held), so that the
// group's socket overflows. Every datagram is accounted for (received and
// counted by kind, or dropped by the kernel and counted as an overrun),
// the heap stays bounded, and the group still delivers afterwards.
func TestWireMcastFlood(t *testing.T) {
	ea, eb := newWirePair(t)
	envs := []*env{ea, eb}
	const qkey = "0x11111111"
	mgid, group := randomGroup()
	a, acq, _ := ea.udQPOf(0, qkey)
	b, bcq, _ := eb.udQPOf(0, qkey)
	if err := b.AttachMcast(mgid, mlid); err != nil {
		t.Fatal(err)
	}

	from := netip.AddrFrom4([4]byte{127, 0, 5, byte(1 + rand.IntN(254))})
	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: from.AsSlice()})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	setDF(t, conn)
	rc, err := conn.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	lo, err := net.InterfaceByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	var serr error
	rc.Control(func(fd uintptr) {
		// out by lo, where the devices' wires joined the group
		serr = unix.SetsockoptIPMreqn(int(fd), unix.IPPROTO_IP, unix.IP_MULTICAST_IF, &unix.IPMreqn{Ifindex: int32(lo.Index)})
	})
	if serr != nil {
		t.Fatal(serr)
	}
	sport := uint16(conn.LocalAddr().(*net.UDPAddr).Port)
	to := &net.UDPAddr{IP: group.AsSlice(), Port: roce.UDPPort}
	rp := roce.Packet{Opcode: roce.Opcode(roce.TransportUD | roce.OpSendOnly), PKey: 0xFFFF, DestQP: MulticastQPN,
		QKey: 0x11111111, SrcQP: 77, Payload: make([]byte, 256)}
	ib, err := rp.AppendIB(nil)
	if err != nil {
		t.Fatal(err)
	}
	dg, err := roce.BuildIPv4(from, group, sport, ib, 0, 0, 64)
	if err != nil {
		t.Fatal(err)
	}
	good := dg[28:] // BTH .. ICRC: what the UDP socket sends
	bad := append([]byte(nil), good...)
	bad[len(bad)-5] ^= 1
	junk := []byte{0x64, 0, 0xff, 0xff, 0, 0xff, 0xff, 0xff, 1, 2, 3}

	c := &eb.d.Counters
	// Junk to the group is counted without the device's lock (which the
	// engines need): it goes on while the lock is held.
	eb.d.mu.Lock()
	for i := range 200 {
		if _, err := conn.WriteToUDP([][]byte{bad, junk}[i%2], to); err != nil {
			eb.d.mu.Unlock()
			t.Fatal(err)
		}
	}
	var junkSeen uint64
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if junkSeen = c.MalformedPackets.Load() + c.ICRCErrors.Load(); junkSeen >= 200 {
			break
		}
	}
	eb.d.mu.Unlock()
	if junkSeen != 200 {
		t.Fatalf("%d of 200 junk datagrams counted while the device's lock was held", junkSeen)
	}

	recv0 := c.WirePacketsRecv.Load()
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	const flood = 20000
	sent := [3]int{}
	eb.d.mu.Lock() // the device is busy: the group's socket fills up
	for i := range flood {
		if _, err := conn.WriteToUDP([][]byte{good, bad, junk}[i%3], to); err == nil {
			sent[i%3]++
		}
	}
	eb.d.mu.Unlock()

	// Wait until every datagram the kernel queued is taken.
	total := sent[0] + sent[1] + sent[2]
	accounted := func() int {
		return int(c.WirePacketsRecv.Load()-recv0) + int(c.WireMcastOverruns.Load())
	}
	last, stable := -1, time.Now()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if n := accounted(); n != last {
			last, stable = n, time.Now()
		} else if time.Since(stable) > 300*time.Millisecond {
			break
		}
	}
	// The overruns are reported with the next datagram taken.
	ea.mcastSend(a, ea.mr(64, 0), ea.ah(mgid), 1, 32, qkey)
	wexpect(t, acq, envs, sendWC(1, "success", "send", a, 32))
	runtime.GC()
	runtime.ReadMemStats(&m1)
	got := accounted() - 1
	over := c.WireMcastOverruns.Load()
	t.Logf("flood of %d datagrams (%v good, bad ICRC, junk): taken %d, kernel drops counted %d; malformed %d, icrc %d, multicast recv %d; b dropped %d; heap %d -> %d KiB",
		total, sent, got-int(over), over, c.MalformedPackets.Load(), c.ICRCErrors.Load(), c.McastPacketsRecv.Load(),
		b.CountersSnapshot().Dropped, m0.HeapInuse>>10, m1.HeapInuse>>10)
	if over == 0 {
		t.Fatal("the group's socket overflowed (the device was busy) and no overrun was counted")
	}
	// Loopback can drop before the socket too (its backlog), uncounted
	// here; never more than a few percent.
	if got > total || got < total*9/10 {
		t.Fatalf("%d datagrams sent, %d accounted for", total, got)
	}
	if c.MalformedPackets.Load() == 0 || c.ICRCErrors.Load() == 0 || c.McastPacketsRecv.Load() == 0 || b.CountersSnapshot().Dropped == 0 {
		t.Fatalf("a kind of the flood was not counted: %v", c.List())
	}
	if m1.HeapInuse > m0.HeapInuse+32<<20 {
		t.Fatalf("the heap grew from %d to %d KiB", m0.HeapInuse>>10, m1.HeapInuse>>10)
	}

	// The group still delivers.
	dst := eb.mr(4096, qp.AccessLocalWrite)
	eb.postRecv(b, fmt.Sprintf("wr_id=9 sge=%d:0:1024", dst.LKey))
	ea.mcastSend(a, ea.mr(64, 0), ea.ah(mgid), 2, 48, qkey)
	wexpect(t, acq, envs, sendWC(2, "success", "send", a, 48))
	wexpect(t, bcq, envs, recvWC(9, "success", "recv", b, 88, a, "wc_flags=grh"))
	ea.healthy(a)
	eb.healthy(b)
}
