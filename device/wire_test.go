package device

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"rdmafs/clock"
	"rdmafs/link"
	"rdmafs/qp"
	"rdmafs/ring"
	"rdmafs/roce"
)

// Two devices in one process, each with its own loopback address, talk
// RoCEv2 through the kernel (raw sockets on lo): the same transport as on
// loopback, now with every packet encoded, checksummed and parsed. They run
// on the real clock.

// randomLoopback returns a random address of 127.64.0.0/10, so that test
// binaries running at the same time (other packages, other checkouts)
// rarely pick the same; newWireEnv tries another on a collision.
func randomLoopback() netip.Addr {
	return netip.AddrFrom4([4]byte{127, byte(64 + rand.IntN(64)), byte(rand.IntN(256)), byte(1 + rand.IntN(254))})
}

// wireAddrs returns two distinct random loopback addresses.
func wireAddrs() (netip.Addr, netip.Addr) {
	a := randomLoopback()
	for {
		if b := randomLoopback(); b != a {
			return a, b
		}
	}
}

// newWireEnv is a device on addr with the real clock (env.clk is nil:
// the timers are real). It skips the test without CAP_NET_RAW.
func newWireEnv(t testing.TB, addr netip.Addr, mod ...func(*Config)) *env {
	t.Helper()
	goroutineLeakCheck(t)
	cfg := Config{Clock: clock.Real{}, Addr: addr}
	for _, m := range mod {
		m(&cfg)
	}
	d, err := New(cfg)
	for try := 0; errors.Is(err, syscall.EADDRINUSE) && try < 20; try++ {
		cfg.Addr = randomLoopback()
		d, err = New(cfg)
	}
	if err != nil {
		if errors.Is(err, syscall.EPERM) && os.Getenv("CI") != "true" {
			t.Skipf("no CAP_NET_RAW: %v", err) // CI runs as root: there it fails
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	pd, err := d.AllocPD(0)
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, d: d, pd: pd}
}

// newWirePair is two devices on two addresses.
func newWirePair(t testing.TB, mod ...func(*Config)) (*env, *env) {
	t.Helper()
	aa, ab := wireAddrs()
	return newWireEnv(t, aa, mod...), newWireEnv(t, ab, mod...)
}

func gidText(e *env) string { return GIDString(e.d.Port().GID) }

// wireQPs makes a QP of type typ on each device and connects them to each
// other by GID and QPN; over adds connect attributes to both.
func wireQPs(ea, eb *env, typ qp.Type, overA, overB string) (a, b *QP, acq, bcq *CQ) {
	acq, bcq = ea.cq(1024), eb.cq(1024)
	a = ea.qp(qpOpts{typ: typ, scq: acq, rcq: acq, cap: qp.Cap{MaxSendWR: 256, MaxRecvWR: 256, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInlineData: 64}})
	b = eb.qp(qpOpts{typ: typ, scq: bcq, rcq: bcq, cap: qp.Cap{MaxSendWR: 256, MaxRecvWR: 256, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInlineData: 64}})
	if typ == qp.TypeUD {
		ea.connectX(a, 0, overA)
		eb.connectX(b, 0, overB)
		return
	}
	ea.connectX(a, b.QPN, "dgid="+gidText(eb)+" "+overA)
	eb.connectX(b, a.QPN, "dgid="+gidText(ea)+" "+overB)
	return
}

// wireSettle waits until both engines are idle and every datagram either
// device sent has been read by the other (lo does not lose them).
func wireSettle(t testing.TB, envs ...*env) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	stable := 0
	for stable < 3 {
		if time.Now().After(deadline) {
			var st []string
			for _, e := range envs {
				c := &e.d.Counters
				st = append(st, fmt.Sprintf("%v: sent %d recv %d, overruns %d, send errors %d, coalesced sends %d recv %d, icrc %d malformed %d, idle %v",
					e.d.Config().Addr, c.WirePacketsSent.Load(), c.WirePacketsRecv.Load(), c.WireRecvOverruns.Load(),
					c.WireSendErrors.Load(), c.WireCoalescedSends.Load(), c.WireCoalescedRecv.Load(), c.ICRCErrors.Load(), c.MalformedPackets.Load(), e.d.enginesIdle()))
			}
			t.Fatalf("wire did not settle: %s", strings.Join(st, "; "))
		}
		var sent, recv uint64
		idle := true
		for _, e := range envs {
			sent += e.d.Counters.WirePacketsSent.Load()
			recv += e.d.Counters.WirePacketsRecv.Load()
			idle = idle && e.d.enginesIdle()
		}
		if idle && recv >= sent {
			stable++
		} else {
			stable = 0
		}
		time.Sleep(200 * time.Microsecond)
	}
}

// waitWCs polls cq until it has n completions or timeout passes.
func waitWCs(t testing.TB, cq *CQ, n int, timeout time.Duration) []string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var out []string
	for len(out) < n && time.Now().Before(deadline) {
		wcs, err := cq.Poll(1 << 20)
		if err != nil {
			t.Fatal(err)
		}
		for i := range wcs {
			out = append(out, qp.FormatWC(&wcs[i]))
		}
		if len(wcs) == 0 {
			time.Sleep(20 * time.Microsecond)
		}
	}
	return out
}

// wexpect is expect across the wire: the completions must come (within a
// generous time), then the devices settle and nothing more may come.
func wexpect(t testing.TB, cq *CQ, envs []*env, want ...string) {
	t.Helper()
	got := waitWCs(t, cq, len(want), 20*time.Second)
	wireSettle(t, envs...)
	got = append(got, waitWCs(t, cq, 1<<30, 0)...)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("completions on cq %d:\n got: %s\nwant: %s", cq.Handle, strings.Join(got, "\n      "), strings.Join(want, "\n      "))
	}
}

// collectWire is integ.collect across the wire.
func (g *integ) collectWire(e *env, cq *CQ, want int) []string {
	got := waitWCs(g.t, cq, want, 120*time.Second)
	if len(got) < want {
		g.t.Fatalf("stuck: %d of %d completions on cq %d:\n%s\nrequester: %s\nresponder: %s", len(got), want, cq.Handle,
			strings.Join(got, "\n"), g.a.debugState(), g.b.debugState())
	}
	if !g.lossy {
		wireSettle(g.t, g.ea, g.eb)
		got = append(got, waitWCs(g.t, cq, 1<<30, 0)...)
	}
	return got
}

func TestWireNeedsFreshAddress(t *testing.T) {
	goroutineLeakCheck(t)
	aa, _ := wireAddrs()
	e := newWireEnv(t, aa)
	if g := e.d.Port().GID; g != roce.GIDFromIPv4(aa) {
		t.Fatalf("gid %s, want ::ffff:%v", GIDString(g), aa)
	}
	if _, err := New(Config{Addr: aa}); err == nil {
		t.Fatal("a second device on the same address started")
	}
	if _, err := New(Config{Addr: netip.MustParseAddr("ff02::1")}); err == nil {
		t.Fatal("an IPv6 address was accepted")
	}
}

func TestWireRCOps(t *testing.T) {
	for _, mtu := range []int{256, 1024, 4096} {
		t.Run(fmt.Sprint(mtu), func(t *testing.T) {
			ea, eb := newWirePair(t)
			envs := []*env{ea, eb}
			over := fmt.Sprintf("path_mtu=%d", mtu)
			a, b, acq, bcq := wireQPs(ea, eb, qp.TypeRC, over, over)
			src, res := ea.mr(1<<16, 0), ea.mr(1<<16, qp.AccessLocalWrite)
			dst := eb.mr(1<<16, rwAccess)
			fill(src.Mem(), 11)
			fill(dst.Mem()[32768:], 12)
			binary.LittleEndian.PutUint64(dst.Mem()[48000:], 1000)
			eb.postRecv(b, fmt.Sprintf("wr_id=9 sge=%d:0:16384", dst.LKey), fmt.Sprintf("wr_id=10 sge=%d:0:16", dst.LKey))
			ea.postSend(a,
				fmt.Sprintf("opcode=send wr_id=1 send_flags=signaled sge=%d:0:5000 sge=%d:6000:5000", src.LKey, src.LKey),
				fmt.Sprintf("opcode=rdma_write wr_id=2 send_flags=signaled sge=%d:0:9000 remote_addr=16384 rkey=%d", src.LKey, dst.RKey),
				fmt.Sprintf("opcode=rdma_write_with_imm wr_id=3 send_flags=signaled imm_data=77 sge=%d:100:3000 remote_addr=25384 rkey=%d", src.LKey, dst.RKey),
				fmt.Sprintf("opcode=rdma_read wr_id=4 send_flags=signaled sge=%d:0:12000 remote_addr=32768 rkey=%d", res.LKey, dst.RKey),
				fmt.Sprintf("opcode=atomic_fetch_and_add wr_id=5 send_flags=signaled sge=%d:20000:8 remote_addr=48000 rkey=%d compare_add=5", res.LKey, dst.RKey),
				fmt.Sprintf("opcode=atomic_cmp_and_swp wr_id=6 send_flags=signaled sge=%d:20008:8 remote_addr=48000 rkey=%d compare_add=1005 swap=42", res.LKey, dst.RKey),
				fmt.Sprintf("opcode=atomic_write wr_id=7 send_flags=signaled remote_addr=48008 rkey=%d compare_add=0x1122334455667788", dst.RKey))
			wexpect(t, acq, envs,
				sendWC(1, "success", "send", a, 10000), sendWC(2, "success", "rdma_write", a, 9000),
				sendWC(3, "success", "rdma_write", a, 3000), sendWC(4, "success", "rdma_read", a, 12000),
				sendWC(5, "success", "fetch_add", a, 8), sendWC(6, "success", "comp_swap", a, 8),
				sendWC(7, "success", "atomic_write", a, 8))
			wexpect(t, bcq, envs, recvWC(9, "success", "recv", b, 10000, a, ""),
				fmt.Sprintf("wr_id=10 status=success opcode=recv_rdma_with_imm qp_num=%d byte_len=3000 imm_data=77 src_qp=%d wc_flags=with_imm", b.QPN, a.QPN))
			want := append(append([]byte(nil), src.Mem()[:5000]...), src.Mem()[6000:11000]...)
			sameBytes(t, dst.Mem()[:10000], want)
			sameBytes(t, dst.Mem()[16384:25384], src.Mem()[:9000])
			sameBytes(t, dst.Mem()[25384:28384], src.Mem()[100:3100])
			sameBytes(t, res.Mem()[:12000], dst.Mem()[32768:44768])
			if o1, o2, v := binary.LittleEndian.Uint64(res.Mem()[20000:]), binary.LittleEndian.Uint64(res.Mem()[20008:]), binary.LittleEndian.Uint64(dst.Mem()[48000:]); o1 != 1000 || o2 != 1005 || v != 42 {
				t.Fatalf("atomics: %d %d, memory %d", o1, o2, v)
			}
			sameBytes(t, dst.Mem()[48008:48016], []byte{0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11})
			ea.healthy(a)
			eb.healthy(b)
			for _, e := range envs {
				c := &e.d.Counters
				if c.WirePacketsSent.Load() == 0 || c.WirePacketsRecv.Load() == 0 || c.ICRCErrors.Load() != 0 || c.MalformedPackets.Load() != 0 || c.NoRoute.Load() != 0 {
					t.Fatalf("counters %v", c.List())
				}
			}
		})
	}
}

func TestWireUC(t *testing.T) {
	ea, eb := newWirePair(t)
	envs := []*env{ea, eb}
	a, b, acq, bcq := wireQPs(ea, eb, qp.TypeUC, "path_mtu=512", "path_mtu=512")
	src, dst := ea.mr(16384, 0), eb.mr(16384, qp.AccessLocalWrite|qp.AccessRemoteWrite)
	fill(src.Mem(), 21)
	eb.postRecv(b, fmt.Sprintf("wr_id=9 sge=%d:0:8192", dst.LKey))
	ea.postSend(a,
		fmt.Sprintf("opcode=send wr_id=1 send_flags=signaled sge=%d:0:5000", src.LKey),
		fmt.Sprintf("opcode=rdma_write wr_id=2 send_flags=signaled sge=%d:0:4000 remote_addr=8192 rkey=%d", src.LKey, dst.RKey))
	wexpect(t, acq, envs, sendWC(1, "success", "send", a, 5000), sendWC(2, "success", "rdma_write", a, 4000))
	wexpect(t, bcq, envs, recvWC(9, "success", "recv", b, 5000, a, ""))
	sameBytes(t, dst.Mem()[:5000], src.Mem()[:5000])
	sameBytes(t, dst.Mem()[8192:12192], src.Mem()[:4000])
	ea.healthy(a)
	eb.healthy(b)
}

// A UD datagram across the wire: the receive buffer's GRH holds the IPv4
// header of the addresses it came between.
func TestWireUD(t *testing.T) {
	ea, eb := newWirePair(t)
	envs := []*env{ea, eb}
	a, b, acq, bcq := wireQPs(ea, eb, qp.TypeUD, "", "")
	src, dst := ea.mr(4096, 0), eb.mr(8192, qp.AccessLocalWrite)
	fill(src.Mem(), 31)
	ah := ea.ah(eb.d.Port().GID)
	eb.postRecv(b, fmt.Sprintf("wr_id=9 sge=%d:0:8192", dst.LKey))
	ea.postSend(a, fmt.Sprintf("opcode=send_with_imm wr_id=1 send_flags=signaled imm_data=5 sge=%d:0:3000 ah=%d remote_qpn=%d remote_qkey=0x11111111", src.LKey, ah.Handle, b.QPN))
	wexpect(t, acq, envs, sendWC(1, "success", "send", a, 3000))
	wexpect(t, bcq, envs, fmt.Sprintf("wr_id=9 status=success opcode=recv qp_num=%d byte_len=3040 imm_data=5 src_qp=%d wc_flags=grh,with_imm", b.QPN, a.QPN))
	sameBytes(t, dst.Mem()[40:3040], src.Mem()[:3000])
	ip := dst.Mem()[20:40]
	sa, da := ea.d.Config().Addr.As4(), eb.d.Config().Addr.As4()
	// The header as it arrived: total length covers IP, UDP, BTH, DETH,
	// ImmDt, payload and ICRC; DF; ID 0; TTL 64.
	if ip[0] != 0x45 || ip[9] != 17 || string(ip[12:16]) != string(sa[:]) || string(ip[16:20]) != string(da[:]) ||
		binary.BigEndian.Uint16(ip[2:]) != 20+8+12+8+4+3000+4 || ip[6] != 0x40 || ip[8] != 64 {
		t.Fatalf("GRH % x", dst.Mem()[:40])
	}
	ea.healthy(a)
	eb.healthy(b)
}

func TestWireRNR(t *testing.T) {
	ea, eb := newWirePair(t)
	envs := []*env{ea, eb}
	a, b, acq, bcq := wireQPs(ea, eb, qp.TypeRC, "", "min_rnr_timer=4")
	src, dst := ea.mr(64, 0), eb.mr(64, qp.AccessLocalWrite)
	fill(src.Mem(), 1)
	ea.postSend(a, fmt.Sprintf("opcode=send wr_id=1 send_flags=signaled sge=%d:0:40", src.LKey))
	deadline := time.Now().Add(10 * time.Second)
	for a.CountersSnapshot().RNRNaksRecv < 2 {
		if time.Now().After(deadline) {
			t.Fatal("no RNR NAKs came")
		}
		time.Sleep(100 * time.Microsecond)
	}
	eb.postRecv(b, fmt.Sprintf("wr_id=9 sge=%d:0:64", dst.LKey))
	wexpect(t, acq, envs, sendWC(1, "success", "send", a, 40))
	wexpect(t, bcq, envs, recvWC(9, "success", "recv", b, 40, a, ""))
	sameBytes(t, dst.Mem()[:40], src.Mem()[:40])
	ca, cb := a.CountersSnapshot(), b.CountersSnapshot()
	if ca.RNRNaksRecv < 2 || cb.RNRNaksSent != ca.RNRNaksRecv {
		t.Fatalf("requester %+v responder %+v", ca, cb)
	}
	ea.healthy(a)
	eb.healthy(b)
}

func TestWireRemoteAccessError(t *testing.T) {
	ea, eb := newWirePair(t)
	envs := []*env{ea, eb}
	a, b, acq, bcq := wireQPs(ea, eb, qp.TypeRC, "", "")
	src, dst := ea.mr(4096, 0), eb.mr(4096, qp.AccessLocalWrite|qp.AccessRemoteRead)
	ea.postSend(a, fmt.Sprintf("opcode=rdma_write wr_id=1 send_flags=signaled sge=%d:0:100 remote_addr=0 rkey=%d", src.LKey, dst.RKey),
		"opcode=send wr_id=2 send_flags=signaled")
	wexpect(t, acq, envs, sendWC(1, "rem_access_err", "rdma_write", a, 0), flushed(a, "send", 2)[0])
	wexpect(t, bcq, envs)
	ea.state(a, qp.StateErr)
	eb.state(b, qp.StateErr)
	ca, cb := a.CountersSnapshot(), b.CountersSnapshot()
	if ca.RemAccessNaksRecv != 1 || cb.RemAccessNaksSent != 1 {
		t.Fatalf("requester %+v responder %+v", ca, cb)
	}
	if got := eb.events(); len(got) != 1 || !strings.Contains(got[0], "qp_access_err") {
		t.Fatalf("responder events %q", got)
	}
	ea.events()
}

// Datagrams that are not good RoCEv2 are counted and have no effect; a
// good one built by hand and sent from a plain UDP socket (unconnected,
// bound, DF: the kernel writes IP ID 0, so its ICRC is computable) is
// received.
func TestWireICRCAndMalformed(t *testing.T) {
	ea, eb := newWirePair(t)
	envs := []*env{ea, eb}
	a, b, acq, bcq := wireQPs(ea, eb, qp.TypeUD, "", "")
	dst := eb.mr(4096, qp.AccessLocalWrite)
	eb.postRecv(b, fmt.Sprintf("wr_id=9 sge=%d:0:4096", dst.LKey))

	from := netip.AddrFrom4([4]byte{127, 0, 4, 9})
	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: from.AsSlice(), Port: 40000})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	setDF(t, conn)
	to := &net.UDPAddr{IP: eb.d.Config().Addr.AsSlice(), Port: roce.UDPPort}
	rp := roce.Packet{Opcode: roce.Opcode(roce.TransportUD | roce.OpSendOnly), PKey: 0xFFFF, DestQP: b.QPN, PSN: 7,
		QKey: 0x11111111, SrcQP: 77, Payload: []byte("hello over plain UDP")}
	ib, err := rp.AppendIB(nil)
	if err != nil {
		t.Fatal(err)
	}
	good, err := roce.BuildIPv4(from, eb.d.Config().Addr, 40000, ib, 0, 0, 64)
	if err != nil {
		t.Fatal(err)
	}
	payload := good[28:] // what the UDP socket sends: BTH .. ICRC
	bad := append([]byte(nil), payload...)
	bad[len(bad)-5] ^= 1 // a payload bit: the ICRC no longer matches
	for _, d := range [][]byte{{1, 2, 3}, bad, payload} {
		if _, err := conn.WriteToUDP(d, to); err != nil {
			t.Fatal(err)
		}
	}
	wexpect(t, bcq, envs, fmt.Sprintf("wr_id=9 status=success opcode=recv qp_num=%d byte_len=%d src_qp=77 wc_flags=grh", b.QPN, 40+len(rp.Payload)))
	if string(dst.Mem()[40:40+len(rp.Payload)]) != string(rp.Payload) {
		t.Fatalf("payload %q", dst.Mem()[40:60])
	}
	c := &eb.d.Counters
	if c.ICRCErrors.Load() != 1 || c.MalformedPackets.Load() != 1 || c.WirePacketsRecv.Load() != 3 {
		t.Fatalf("counters %v", c.List())
	}
	if q := b.CountersSnapshot(); q.ICRCErrors != 1 || q.PacketsRecv != 1 {
		t.Fatalf("qp counters %+v", q)
	}
	wexpect(t, acq, envs)
	ea.healthy(a)
	eb.healthy(b)
}

// readCapture takes what a capture has queued, until it has been quiet
// for a moment.
func readCapture(t testing.TB, c *CaptureReader) []byte {
	t.Helper()
	var out []byte
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		b, err := c.Next(ctx)
		cancel()
		if err != nil || b == nil {
			return out
		}
		out = append(out, b...)
	}
}

func captureOpcodes(t testing.TB, pcap []byte, check func([]byte) error) map[roce.Opcode]int {
	t.Helper()
	ops := map[roce.Opcode]int{}
	n := 0
	for rec, err := range roce.ReadPcap(strings.NewReader(string(pcap))) {
		if err != nil {
			t.Fatal(err)
		}
		pkt, ok := rec.IP()
		if !ok {
			t.Fatalf("record %d is not IP", n)
		}
		if err := check(pkt); err != nil {
			t.Fatalf("record %d: %v\n% x", n, err, pkt)
		}
		hl := roce.HeadroomIPv4
		if pkt[0]>>4 == 6 {
			hl = roce.HeadroomIPv6
		}
		ops[roce.Opcode(pkt[hl])]++
		n++
	}
	if n == 0 {
		t.Fatal("empty capture")
	}
	return ops
}

// The capture shows every packet sent and received, wire and loopback, as
// datagrams whose ICRCs are right.
func TestWireCapture(t *testing.T) {
	ea, eb := newWirePair(t)
	envs := []*env{ea, eb}
	c := ea.d.OpenCapture()
	defer c.Close()
	a, b, acq, bcq := wireQPs(ea, eb, qp.TypeRC, "path_mtu=1024", "path_mtu=1024")
	src, dst := ea.mr(8192, qp.AccessLocalWrite), eb.mr(8192, rwAccess)
	eb.postRecv(b, fmt.Sprintf("wr_id=9 sge=%d:0:8192", dst.LKey))
	ea.postSend(a,
		fmt.Sprintf("opcode=send wr_id=1 send_flags=signaled sge=%d:0:3000", src.LKey),
		fmt.Sprintf("opcode=rdma_write wr_id=2 send_flags=signaled sge=%d:0:100 remote_addr=0 rkey=%d", src.LKey, dst.RKey),
		fmt.Sprintf("opcode=rdma_read wr_id=3 send_flags=signaled sge=%d:0:100 remote_addr=0 rkey=%d", src.LKey, dst.RKey),
		fmt.Sprintf("opcode=atomic_cmp_and_swp wr_id=4 send_flags=signaled sge=%d:0:8 remote_addr=8 rkey=%d compare_add=0 swap=1", src.LKey, dst.RKey),
		fmt.Sprintf("opcode=atomic_write wr_id=7 send_flags=signaled remote_addr=16 rkey=%d compare_add=3", dst.RKey))
	wexpect(t, acq, envs, sendWC(1, "success", "send", a, 3000), sendWC(2, "success", "rdma_write", a, 100),
		sendWC(3, "success", "rdma_read", a, 100), sendWC(4, "success", "comp_swap", a, 8),
		sendWC(7, "success", "atomic_write", a, 8))
	wexpect(t, bcq, envs, recvWC(9, "success", "recv", b, 3000, a, ""))
	// And a loopback pair on device a.
	la, lb, lacq, lbcq := ea.pair(qp.TypeUC)
	ea.postRecv(lb, "wr_id=5")
	ea.postSend(la, "opcode=send wr_id=6 send_flags=signaled")
	wexpect(t, lacq, envs, sendWC(6, "success", "send", la, 0))
	wexpect(t, lbcq, envs, recvWC(5, "success", "recv", lb, 0, la, ""))

	ops := captureOpcodes(t, readCapture(t, c), roce.CheckIPv4)
	want := map[roce.Opcode]int{
		roce.TransportRC | roce.OpSendFirst: 1, roce.TransportRC | roce.OpSendMiddle: 1, roce.TransportRC | roce.OpSendLast: 1,
		// Two READ RESPONSE ONLYs: the READ's and the ATOMIC WRITE's answers.
		roce.TransportRC | roce.OpWriteOnly: 1, roce.TransportRC | roce.OpReadRequest: 1, roce.TransportRC | roce.OpReadResponseOnly: 2,
		roce.TransportRC | roce.OpCompareSwap: 1, roce.TransportRC | roce.OpAtomicAcknowledge: 1, roce.TransportRC | roce.OpAtomicWrite: 1,
		roce.TransportUC | roce.OpSendOnly: 1,
	}
	for op, n := range want {
		if ops[op] != n {
			t.Errorf("opcode %v: %d packets, want %d (all: %v)", op, ops[op], n, ops)
		}
	}
	if ops[roce.TransportRC|roce.OpAcknowledge] == 0 {
		t.Errorf("no ACKs captured: %v", ops)
	}
	if d := ea.d.Counters.CaptureDrops.Load(); d != 0 {
		t.Errorf("%d capture drops", d)
	}
}

// Without an address the GIDs are fe80:: ones and the capture holds IPv6
// datagrams.
func TestCaptureIPv6Loopback(t *testing.T) {
	if *wireFlag {
		t.Skip("-device.wire sends packets as IPv4 datagrams")
	}
	e := newEnv(t)
	c := e.d.OpenCapture()
	defer c.Close()
	a, b, acq, bcq := e.pair(qp.TypeRC)
	e.postRecv(b, "wr_id=5")
	e.postSend(a, "opcode=send wr_id=6 send_flags=signaled")
	e.expect(acq, sendWC(6, "success", "send", a, 0))
	e.expect(bcq, recvWC(5, "success", "recv", b, 0, a, ""))
	ops := captureOpcodes(t, readCapture(t, c), roce.CheckIPv6)
	if ops[roce.OpSendOnly] != 1 || ops[roce.OpAcknowledge] != 1 || len(ops) != 2 {
		t.Fatalf("opcodes %v", ops)
	}
}

// A slow capture reader loses packets (counted); the engine never waits.
func TestCaptureBounded(t *testing.T) {
	e := newEnv(t)
	c := e.d.OpenCapture()
	a, b, acq, _ := e.pair(qp.TypeUC)
	for i := 0; i < 3*link.CaptureQueue/64; i++ {
		lines := make([]string, 64)
		for j := range lines {
			lines[j] = "opcode=send"
		}
		e.postSend(a, lines...)
		e.quiesce()
	}
	_ = b
	e.poll(acq)
	if e.d.Counters.CaptureDrops.Load() == 0 {
		t.Fatal("no drops counted")
	}
	c.Close()
	if e.d.chain.Capture.On() {
		t.Fatal("capture still on after close")
	}
}

// faultLink is a fault injector in front of the device's link: it drops,
// duplicates and reorders (holds one packet back behind the next) packets
// at random, rates per thousand.
type faultLink struct {
	d                   *Device
	rng                 *rand.Rand
	drop, dup, reorder  int
	held                *packet
	dropped, duped, reo int
}

// clone copies p for the link to keep.
//
// lockcheck:ok WritePackets calls it, under the chain's lock, Device.mu
func (l *faultLink) clone(p *packet) *packet {
	c := l.d.poolLocked(l.d.chainEngine()).get()
	buf := c.buf
	*c = *p
	c.next, c.mr = nil, nil
	c.buf = append(buf[:0], p.Payload...)
	c.Payload = c.buf
	return c
}

func (l *faultLink) WritePackets(pkts []link.Packet) {
	for _, lp := range pkts {
		l.write(lp.(*packet))
	}
}

func (*faultLink) Attach(link.Dispatcher) {}
func (*faultLink) Close()                 {}

// write delivers, drops, duplicates or holds back p.
//
// lockcheck:ok WritePackets calls it, under the chain's lock, Device.mu
func (l *faultLink) write(p *packet) {
	r := l.rng.IntN(1000)
	switch {
	case r < l.drop:
		l.dropped++
		l.d.poolLocked(l.d.chainEngine()).put(p)
		return
	case r < l.drop+l.dup:
		l.duped++
		injectLocked(l.d, l.clone(p))
	case r < l.drop+l.dup+l.reorder && l.held == nil:
		l.reo++
		l.held = l.clone(p)
		l.d.poolLocked(l.d.chainEngine()).put(p)
		return
	}
	injectLocked(l.d, p)
	if h := l.held; h != nil {
		l.held = nil
		injectLocked(l.d, h)
	}
}

// faults puts a faultLink before the env's device and returns it.
func (e *env) faults(seed uint64, drop, dup, reorder int) *faultLink {
	l := &faultLink{d: e.d, rng: rand.New(rand.NewPCG(seed, 3)), drop: drop, dup: dup, reorder: reorder}
	e.d.mu.Lock()
	e.d.link = l
	e.d.mu.Unlock()
	return l
}

// The data-integrity random mix across the wire: RC and UC, and RC with a
// fault injector on both devices that drops, duplicates and reorders.
func TestWireDataIntegrity(t *testing.T) {
	for _, tc := range []struct {
		name   string
		typ    qp.Type
		faults bool
	}{{"rc", qp.TypeRC, false}, {"uc", qp.TypeUC, false}, {"rc-faults", qp.TypeRC, true}} {
		t.Run(tc.name, func(t *testing.T) {
			ea, eb := newWirePair(t)
			seed := uint64(0x31e0) + uint64(tc.typ)
			over := ""
			if tc.faults {
				// 67 ms: the timeout must outlast the time a loaded machine
				// (CI, -race) takes to push a window of 128 PSNs through both
				// kernels, or every retry rewinds before its ACKs return and
				// the retries run out with no progress (as they would on
				// any RC link whose timeout is below its round trip).
				over = "timeout=14"
			}
			g := newInteg(t, ea, eb, tc.typ, seed, over)
			g.collect = g.collectWire
			g.ops = 600
			if tc.typ == qp.TypeUC {
				g.ops = 300
			}
			var la, lb *faultLink
			if tc.faults {
				g.lossy, g.maxMsg, g.ops = true, 256<<10, 400
				la, lb = ea.faults(seed, 10, 10, 10), eb.faults(seed+1, 10, 10, 10)
			}
			g.run(tc.typ)
			if tc.faults {
				ea.d.mu.Lock()
				t.Logf("a's link: %d dropped %d duplicated %d reordered; b's: %d %d %d",
					la.dropped, la.duped, la.reo, lb.dropped, lb.duped, lb.reo)
				ea.d.mu.Unlock()
				ca, cb := g.a.CountersSnapshot(), g.b.CountersSnapshot()
				t.Logf("requester %v", ca.List())
				t.Logf("responder %v", cb.List())
				if la.dropped == 0 || cb.DuplicateReqs == 0 || ca.Retransmits == 0 {
					t.Fatal("the faults did not happen")
				}
			}
			for _, e := range []*env{ea, eb} {
				if c := &e.d.Counters; c.ICRCErrors.Load() != 0 || c.MalformedPackets.Load() != 0 || c.WireSendErrors.Load() != 0 {
					t.Fatalf("counters %v", c.List())
				}
			}
		})
	}
}

// BenchmarkWireSendLatency is a ping-pong of 8-byte SENDs across the wire;
// one op is a round trip.
func BenchmarkWireSendLatency(b *testing.B) { benchPingPong(b, true) }

// BenchmarkSendLatency is the same ping-pong on one device (loopback).
func BenchmarkSendLatency(b *testing.B) { benchPingPong(b, false) }

// BenchmarkSendLatencyDoorbellFlood is the loopback ping-pong while
// another user, with 500 QPs of its own in RTS, rings the device's
// doorbell as fast as it can (issue 13, finding 9).
func BenchmarkSendLatencyDoorbellFlood(b *testing.B) { benchPingPong(b, false, 500) }

func benchPingPong(b *testing.B, wire bool, flood ...int) {
	var ea, eb *env
	var qa, qb *QP
	var acq, bcq *CQ
	if wire {
		ea, eb = newWirePair(b)
		qa, qb, acq, bcq = wireQPs(ea, eb, qp.TypeRC, "", "")
	} else {
		ea = newEnv(b, func(c *Config) { c.Clock = clock.Real{} })
		eb = ea
		qa, qb, acq, bcq = ea.pair(qp.TypeRC)
	}
	if len(flood) > 0 {
		cq := ea.cq(16)
		for i := 0; i < flood[0]; i++ {
			q := ea.qp(qpOpts{scq: cq, rcq: cq, cap: qp.Cap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
			ea.connect(q, q.QPN, "")
		}
		bell, err := ring.Attach(ea.d.Doorbell().Bytes(), ring.KindDoorbell)
		if err != nil {
			b.Fatal(err)
		}
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			for {
				select {
				case <-stop:
					return
				default:
				}
				bell.BumpEvent()
				bell.WakeEventWaiters()
			}
		}()
		b.Cleanup(func() { close(stop); <-done })
	}
	ma, mb := ea.mr(64, qp.AccessLocalWrite), eb.mr(64, qp.AccessLocalWrite)
	send := func(mr *MR) qp.SendWR {
		return qp.SendWR{Opcode: qp.WRSend, SGL: []qp.SGE{{Length: 8, LKey: mr.LKey}}}
	}
	recv := func(q *QP, mr *MR) {
		if _, err := q.PostRecv([]qp.RecvWR{{SGL: []qp.SGE{{Addr: 32, Length: 8, LKey: mr.LKey}}}}); err != nil {
			b.Fatal(err)
		}
	}
	wait := func(cq *CQ) {
		for {
			wcs, err := cq.Poll(4)
			if err != nil {
				b.Fatal(err)
			}
			if len(wcs) == 0 {
				runtime.Gosched()
			}
			for _, wc := range wcs {
				if wc.Status != qp.WCSuccess {
					b.Fatalf("%+v", wc)
				}
				if wc.Opcode == qp.WCRecv {
					return
				}
			}
		}
	}
	sa, sb := send(ma), send(mb)
	recv(qa, ma)
	recv(qb, mb)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := qa.PostSend([]qp.SendWR{sa}); err != nil {
			b.Fatal(err)
		}
		wait(bcq)
		recv(qb, mb)
		if _, err := qb.PostSend([]qp.SendWR{sb}); err != nil {
			b.Fatal(err)
		}
		wait(acq)
		recv(qa, ma)
	}
}

// A connected QP takes packets only from the address it is connected to:
// a third device that names b's QPN is ignored.
func TestWireWrongSourceDropped(t *testing.T) {
	ea, eb := newWirePair(t)
	ec := newWireEnv(t, randomLoopback())
	envs := []*env{ea, eb, ec}
	a, b, acq, bcq := wireQPs(ea, eb, qp.TypeRC, "", "")
	ccq := ec.cq(16)
	c := ec.qp(qpOpts{scq: ccq, rcq: ccq})
	ec.connectX(c, b.QPN, "dgid="+gidText(eb)+" timeout=8 retry_cnt=1")
	eb.postRecv(b, "wr_id=9")
	ec.postSend(c, "opcode=send wr_id=1 send_flags=signaled")
	// c gets no answer: it retries once and gives up.
	if got := waitWCs(t, ccq, 1, 10*time.Second); len(got) != 1 || !strings.Contains(got[0], "status=retry_exc_err") {
		t.Fatalf("c: %q", got)
	}
	wexpect(t, bcq, envs)
	if n := b.CountersSnapshot().PacketsRecv; n != 0 {
		t.Fatalf("b took %d packets from a stranger", n)
	}
	// a still reaches b.
	ea.postSend(a, "opcode=send wr_id=2 send_flags=signaled")
	wexpect(t, acq, envs, sendWC(2, "success", "send", a, 0))
	wexpect(t, bcq, envs, recvWC(9, "success", "recv", b, 0, a, ""))
	ea.healthy(a)
	eb.healthy(b)
	ec.events()
}

// The port MTU follows the interface's, as rxe's does: lo's 65536 allows
// 4096.
func TestWirePortMTU(t *testing.T) {
	e := newWireEnv(t, randomLoopback())
	if p := e.d.Port(); p.MaxMTU != qp.MTU4096 || p.ActiveMTU != qp.MTU4096 {
		t.Fatalf("port %+v", p)
	}
	if m, ok := link.InterfaceMTU(e.d.Config().Addr); !ok || m < 4096+80 {
		t.Fatalf("lo MTU %d %v", m, ok)
	}
}

// debugState describes q's transport state, for a test that is stuck.
func (q *QP) debugState() string {
	d := q.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "qp %d %v req.psn %d comp.psn %d acked %d retryLeft %d rnrLeft %d timer %v fired %v idle %v progress %v needRetry %v waitRNR %v rnrTimer %v rdAtomic %d resp.psn %d queued in %d/%d reading %v queued %v\n",
		q.QPN, q.attr.QPState, q.req.psn, q.comp.psn, q.comp.acked, q.comp.retryLeft, q.comp.rnrLeft, q.comp.retryTimer != nil,
		q.comp.timeoutFired, q.comp.idle, q.comp.progress, q.req.needRetry, q.req.waitRNR, q.comp.rnrTimer != nil,
		q.req.rdAtomic, q.resp.psn, len(q.resp.reqIn), len(q.comp.respIn), q.resp.reading, q.queued.Load())
	fmt.Fprintf(&b, "  sq head %d reqIdx %d fetched %d; engine idle %v\n", q.req.sqHead, q.req.reqIdx, q.req.sqFetched, d.enginesIdle())
	for i := q.req.sqHead; i != q.req.sqFetched; i++ {
		w := &q.req.swq[i&q.req.sqMask()]
		fmt.Fprintf(&b, "  wqe %d wr_id %d %v state %d psn %d..%d sent %d/%d\n", i, w.wr.WRID, w.wr.Opcode, w.state, w.firstPSN, w.lastPSN, w.sent, w.length)
	}
	return b.String()
}

// TestFlowSourcePort: the port Linux 5.17+ rxe sends a connected QP's
// packets from, as captured against the kernel in the qemu harness (rxe QP
// 0x11 talking to rdmafs QP 0x10 sent from 0xC110), the same from either
// end, and from the flow label when one is set.
func TestFlowSourcePort(t *testing.T) {
	if got := link.FlowSourcePort(0, 0x11, 0x10); got != 0xC110 {
		t.Fatalf("link.FlowSourcePort(0, 0x11, 0x10) = %#x, want 0xc110 (rxe on Linux 6.1)", got)
	}
	if link.FlowSourcePort(0, 0x10, 0x11) != link.FlowSourcePort(0, 0x11, 0x10) {
		t.Fatal("not symmetric in the QPNs")
	}
	// A flow label folds its high 6 bits into the low 14.
	if got := link.FlowSourcePort(0x4001, 1, 2); got != 0xC000|(0x0001^0x1) {
		t.Fatalf("flow label 0x4001: %#x", got)
	}
	for _, fl := range []uint32{0, 1, 0xFFFFF, 0x12345} {
		if p := link.FlowSourcePort(fl, 77, 99); p < 0xC000 {
			t.Fatalf("port %#x below 0xC000", p)
		}
	}
}

// TestWirePortMTUFollowsLink: on a 1500-byte link (a veth pair, as an
// Ethernet NIC) max_mtu stays 4096 and active_mtu is 1024, the largest IB
// MTU whose packets fit with their headers, as rxe reports; an explicit
// Config.ActiveMTU still wins.
func TestWirePortMTUFollowsLink(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("needs root (ip link), which CI has")
		}
		t.Skip("needs root")
	}
	name := fmt.Sprintf("rdv%d", os.Getpid()%100000)
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v %s", args, err, out)
		}
	}
	ip("link", "add", name+"a", "type", "veth", "peer", "name", name+"b")
	t.Cleanup(func() { exec.Command("ip", "link", "del", name+"a").Run() })
	ip("link", "set", name+"a", "mtu", "1500", "up")
	ip("link", "set", name+"b", "up")
	addr := netip.AddrFrom4([4]byte{10, 213, byte(os.Getpid() >> 8), byte(os.Getpid())})
	ip("addr", "add", addr.String()+"/32", "dev", name+"a")
	cfg := DefaultConfig()
	cfg.Addr = addr
	d, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if p := d.Port(); p.MaxMTU != qp.MTU4096 || p.ActiveMTU != qp.MTU1024 {
		t.Fatalf("on a 1500-byte link: max_mtu %d active_mtu %d, want 4096 1024", p.MaxMTU.Bytes(), p.ActiveMTU.Bytes())
	}
	cfg.ActiveMTU = qp.MTU256
	d2, err := New(cfg)
	if err == nil {
		defer d2.Close()
		if p := d2.Port(); p.ActiveMTU != qp.MTU256 {
			t.Fatalf("explicit active_mtu 256 became %d", p.ActiveMTU.Bytes())
		}
	}
}

// The packets of one QP turn cross the wire in batches: a 16 KiB WRITE at
// MTU 512 (32 packets, one turn) leaves device a in one or two sendmmsg
// calls, and the counters file says so (datagrams per system call).
func TestWireBatchesPerTurn(t *testing.T) {
	ea, eb := newWirePair(t)
	envs := []*env{ea, eb}
	a, _, acq, _ := wireQPs(ea, eb, qp.TypeUC, "path_mtu=512", "path_mtu=512")
	src, dst := ea.mr(16384, 0), eb.mr(16384, qp.AccessLocalWrite|qp.AccessRemoteWrite)
	fill(src.Mem(), 5)
	c := &ea.d.Counters
	sent0, calls0 := c.WirePacketsSent.Load(), c.WireSendCalls.Load()
	ea.postSend(a, fmt.Sprintf("opcode=rdma_write wr_id=1 send_flags=signaled sge=%d:0:16384 remote_addr=0 rkey=%d", src.LKey, dst.RKey))
	wexpect(t, acq, envs, sendWC(1, "success", "rdma_write", a, 16384))
	sameBytes(t, dst.Mem(), src.Mem())
	sent, calls := c.WirePacketsSent.Load()-sent0, c.WireSendCalls.Load()-calls0
	if sent != 32 || calls > 2 {
		t.Fatalf("%d datagrams in %d sendmmsg calls, want 32 in at most 2", sent, calls)
	}
	rc := &eb.d.Counters
	if r, rcalls := rc.WirePacketsRecv.Load(), rc.WireRecvCalls.Load(); rcalls == 0 || rcalls > r {
		t.Fatalf("device b: %d datagrams in %d recvmmsg calls", r, rcalls)
	}
	names := map[string]bool{}
	for _, x := range c.List() {
		names[x.Name] = true
	}
	for _, n := range []string{"wire_send_calls", "wire_recv_calls", "wire_send_full", "wire_recv_overruns"} {
		if !names[n] {
			t.Errorf("counters lack %s", n)
		}
	}
}
