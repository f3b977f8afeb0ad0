package cm_test

import (
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"rdmafs/clock"
	"rdmafs/cm"
	"rdmafs/device"
	"rdmafs/qp"
	"rdmafs/roce"
)

// floodDevice is a device on a random 127.96.0.0/11 address (a wire:
// MADs come as UDP datagrams) whose timers run on clk.
func floodDevice(t *testing.T, clk clock.Clock) *device.Device {
	t.Helper()
	var err error
	for try := 0; try < 20; try++ {
		a := netip.AddrFrom4([4]byte{127, byte(96 + rand.IntN(32)), byte(rand.IntN(256)), byte(1 + rand.IntN(254))})
		var dev *device.Device
		dev, err = device.New(device.Config{Addr: a, Clock: clk})
		if err == nil {
			t.Cleanup(func() { dev.Close() })
			return dev
		}
		if !errors.Is(err, syscall.EADDRINUSE) {
			break
		}
	}
	if errors.Is(err, syscall.EPERM) && os.Getenv("CI") != "true" {
		t.Skipf("no CAP_NET_RAW: %v", err)
	}
	t.Fatal(err)
	return nil
}

// forgedREQ is a REQ for dst:port with a fresh comm ID and the longest
// timeouts the fields hold.
func forgedREQ(i int, src, dst netip.AddrPort) [cm.MADSize]byte {
	var hdr [cm.CMAHdrLen]byte
	cm.PutCMAHdr(hdr[:], cm.CMAHdr{Src: src, Dst: dst})
	m := &cm.REQ{LocalCommID: uint32(i + 1), ServiceID: cm.ServiceID(cm.PSTCP, dst.Port()), LocalCAGUID: 0x66,
		LocalQPN: uint32(100 + i), RemoteCMResponseTimeout: 31, LocalCMResponseTimeout: 31, MaxCMRetries: 15,
		PathMTU: 3, Primary: cm.Path{LocalACKTimeout: 31, HopLimit: 64}}
	copy(m.PrivateData[:], hdr[:])
	return cm.Encode(uint64(i), m)
}

// server accepts every connect request on ch and destroys the ids whose
// connection failed, until stop is closed.
func server(a *cm.Agent, ch *cm.Channel, stop chan struct{}) chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			e, ok := ch.Next(stop)
			if !ok {
				return
			}
			id := a.Lookup(e.ID)
			if id == nil {
				continue
			}
			switch e.Name {
			case cm.EvConnectRequest:
				id.Do(fmt.Sprintf("accept qp_num=%d psn=1", 1000+e.ID))
			case cm.EvUnreachable, cm.EvRejected:
				id.Destroy()
			}
		}
	}()
	return done
}

func cmCounter(a *cm.Agent, dev *device.Device, k string) int {
	for _, l := range strings.Split(a.CountersText(), "\n") {
		if key, v, _ := strings.Cut(l, "="); key == k {
			var n int
			fmt.Sscan(v, &n)
			return n
		}
	}
	for _, c := range dev.GSICounters() {
		if c.Name == k {
			return int(c.Value)
		}
	}
	return -1
}

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(end) {
			t.Fatalf("%s: not within 10 s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestREQFloodFromUDPAndUDQP is issue #26's flood on a real device: root's
// server accepts everything; 5,000 REQs come from a plain UDP socket (any
// user can send them: RoCEv2 authenticates nothing), then 5,000 more from a
// UD QP of uid 65534, which cannot reach QP1 (its Q_Key cannot be the
// GSI's: a remote_qkey with the high bit means its own), nor could it from
// this device with the GSI's Q_Key (locally only the agent speaks for
// QP1). Root still connects, and once the REPs' bounded retries are over
// the ids are back at their baseline.
func TestREQFloodFromUDPAndUDQP(t *testing.T) {
	clk := clock.NewFake()
	dev := floodDevice(t, clk)
	a := cm.Attach(dev, cm.Config{})
	defer a.Close()
	addr := dev.Config().Addr
	ch, _ := a.NewChannel(0)
	srv, _ := a.Create(0, ch, cm.PSTCP, qp.TypeRC)
	do(t, srv, fmt.Sprintf("bind addr=%s port=7000", addr))
	do(t, srv, "listen")
	stop := make(chan struct{})
	done := server(a, ch, stop)
	defer func() { close(stop); <-done }()
	baseline := cmCounter(a, dev, "ids")

	// 5,000 REQs from a UDP socket, as RoCEv2 UD SENDs to QP1.
	from := netip.AddrFrom4([4]byte{127, 0, 4, 66})
	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: from.AsSlice(), Port: 0})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// DF, as RoCEv2 sends it: the ICRC covers the IP flags.
	rc, err := conn.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	rc.Control(func(fd uintptr) {
		unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO)
	})
	sport := uint16(conn.LocalAddr().(*net.UDPAddr).Port)
	to := &net.UDPAddr{IP: addr.AsSlice(), Port: roce.UDPPort}
	for i := range 5000 {
		mad := forgedREQ(i, netip.AddrPortFrom(from, 1), netip.AddrPortFrom(addr, 7000))
		p := roce.Packet{Opcode: roce.Opcode(roce.TransportUD | roce.OpSendOnly), PKey: 0xFFFF, DestQP: device.GSIQPN,
			PSN: uint32(i), QKey: device.GSIQKey, SrcQP: 1, Payload: mad[:]}
		ib, err := p.AppendIB(nil)
		if err != nil {
			t.Fatal(err)
		}
		dg, err := roce.BuildIPv4(from, addr, sport, ib, 0, 0, 64)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.WriteToUDP(dg[28:], to); err != nil {
			t.Fatal(err)
		}
		if i%200 == 199 {
			// Let the agent keep up, as a paced sender would; what a
			// burst beyond QP1's queue loses is counted, not kept.
			time.Sleep(2 * time.Millisecond)
		}
	}
	defer func() {
		if t.Failed() {
			t.Logf("counters:\n%s%v", a.CountersText(), dev.Counters.List())
		}
	}()
	waitFor(t, "the UDP flood handled", func() bool {
		return cmCounter(a, dev, "req_recv")+cmCounter(a, dev, "gsi_dropped_full") >= 5000
	})
	peak := cmCounter(a, dev, "ids")
	t.Logf("UDP flood: req_recv=%d gsi_dropped_full=%d rejected_source=%d ids=%d (baseline %d)",
		cmCounter(a, dev, "req_recv"), cmCounter(a, dev, "gsi_dropped_full"), cmCounter(a, dev, "rejected_source"), peak, baseline)
	if peak > baseline+768 {
		t.Fatalf("one UDP port holds %d ids: more than 3/4 of the backlog", peak-baseline)
	}

	// 5,000 more from uid 65534's UD QP, the GSI's Q_Key as remote_qkey.
	const nobody = device.Owner(65534)
	pd, _ := dev.AllocPD(nobody)
	cq, err := dev.CreateCQ(nobody, mustParse(t, qp.ParseCreateCQ, "cqe=4096"))
	if err != nil {
		t.Fatal(err)
	}
	mkQP := func(qkey uint32) *device.QP {
		q, err := dev.CreateQP(nobody, mustParse(t, qp.ParseCreateQP, fmt.Sprintf(
			"pd=%d qp_type=ud send_cq=%d recv_cq=%d max_send_wr=1024 max_recv_wr=1 max_inline_data=256", pd.Handle, cq.Handle, cq.Handle)))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range []string{fmt.Sprintf("qp_state=INIT pkey_index=0 port_num=1 qkey=%d", qkey), "qp_state=RTR", "qp_state=RTS sq_psn=0"} {
			at, mask, err := qp.ParseModify(m)
			if err != nil {
				t.Fatal(err)
			}
			if err := q.Modify(&at, mask); err != nil {
				t.Fatal(err)
			}
		}
		return q
	}
	ah, err := dev.CreateAH(nobody, mustParse(t, qp.ParseCreateAH, fmt.Sprintf("pd=%d dgid=%s", pd.Handle, device.GIDString(dev.Port().GID))))
	if err != nil {
		t.Fatal(err)
	}
	post := func(q *device.QP, n int) {
		for i := 0; i < n; {
			mad := forgedREQ(10000+i, netip.AddrPortFrom(addr, 1), netip.AddrPortFrom(addr, 7000))
			wr, err := qp.ParseSendWR(fmt.Sprintf("wr_id=%d opcode=send ah=%d remote_qpn=1 remote_qkey=0x%08x inline_data=%s",
				i, ah.Handle, uint32(device.GSIQKey), hex.EncodeToString(mad[:])))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := q.PostSend([]qp.SendWR{wr}); err != nil {
				time.Sleep(time.Millisecond) // the send queue is full
				continue
			}
			i++
		}
	}
	qkeyDrops, srcDrops := cmCounter(a, dev, "gsi_dropped_qkey"), cmCounter(a, dev, "gsi_dropped_source")
	reqs := cmCounter(a, dev, "req_recv")
	post(mkQP(0x11111111), 5000) // what fsnode lets uid 65534 have
	waitFor(t, "the UD flood dropped", func() bool { return cmCounter(a, dev, "gsi_dropped_qkey") >= qkeyDrops+5000 })
	// A QP with the GSI's own Q_Key (only CAP_NET_RAW gets one) is no
	// agent either.
	post(mkQP(device.GSIQKey), 100)
	waitFor(t, "the privileged UD QP dropped", func() bool { return cmCounter(a, dev, "gsi_dropped_source") >= srcDrops+100 })
	if got := cmCounter(a, dev, "req_recv"); got != reqs {
		t.Fatalf("the UD QP's REQs reached the CM: req_recv %d -> %d", reqs, got)
	}

	// Root connects to its server through the flood's aftermath.
	c, _ := a.Create(0, ch, cm.PSTCP, qp.TypeRC)
	do(t, c, fmt.Sprintf("resolve_addr dst=%s port=7000", addr))
	do(t, c, "resolve_route")
	waitFor(t, "root's route", func() bool { return c.State() == cm.StateRouteResolved })
	do(t, c, "connect qp_num=5 psn=1")
	waitFor(t, "root's connect_response", func() bool { return c.State() == cm.StateRepRcvd })
	do(t, c, "establish")

	// The flooded ids' REPs retry at most 16 x 25.2 s: 7 minutes later
	// (fake clock) they are unreachable and the server destroyed them.
	for range 42 {
		clk.Advance(10 * time.Second)
		time.Sleep(time.Millisecond)
	}
	want := baseline + 2 // root's connection: its id and the server's
	waitFor(t, "ids back at the baseline", func() bool { return cmCounter(a, dev, "ids") == want })
	t.Logf("after the flood: ids=%d (baseline %d + root's connection), timeouts=%d", cmCounter(a, dev, "ids"), baseline, cmCounter(a, dev, "timeouts"))
}

func mustParse[T any](t *testing.T, f func(string) (T, error), s string) T {
	t.Helper()
	v, err := f(s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
