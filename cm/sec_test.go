package cm

import (
	"fmt"
	"net/netip"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"rdmafs/device"
	"rdmafs/qp"
	"rdmafs/roce"
)

// Issue #26's attacks on the CM, each written as the attacker runs it.

// TestListenSquatterRefused: uid 65534 binds root's port with reuseaddr
// before root's reuseaddr server binds it; once root listens, the
// squatter's listen is EADDRINUSE, and root's client connects to root's
// server (private data and all), the squatter hearing nothing.
func TestListenSquatterRefused(t *testing.T) {
	w := newWorld(t)
	ss, cs := w.wireSide("10.0.0.2"), w.wireSide("10.0.0.1")
	evil, err := ss.a.NewChannel(65534)
	if err != nil {
		t.Fatal(err)
	}
	rootCh, _ := ss.a.NewChannel(0)
	sq, _ := ss.a.Create(65534, evil, PSTCP, qp.TypeRC)
	ss.do(sq, "set_option reuseaddr=1")
	ss.do(sq, "bind addr=10.0.0.2 port=7000")
	srv, _ := ss.a.Create(0, rootCh, PSTCP, qp.TypeRC)
	ss.do(srv, "set_option reuseaddr=1")
	ss.do(srv, "bind addr=0.0.0.0 port=7000")
	ss.do(srv, "listen")
	if err := sq.DoAs("listen", Caps{}); device.Errno(err) != syscall.EADDRINUSE {
		t.Fatalf("the squatter's listen: %v, want EADDRINUSE", err)
	}
	// A second squatter cannot bind beside the listener either.
	sq2, _ := ss.a.Create(65534, evil, PSTCP, qp.TypeRC)
	ss.do(sq2, "set_option reuseaddr=1")
	if err := sq2.DoAs("bind addr=10.0.0.2 port=7000", Caps{}); device.Errno(err) != syscall.EADDRINUSE {
		t.Fatalf("bind beside a listener: %v", err)
	}
	// Two wildcard listeners of root's own, 0.0.0.0 and :: (not afonly),
	// overlap too.
	l6, _ := ss.a.Create(0, rootCh, PSTCP, qp.TypeRC)
	ss.do(l6, "set_option reuseaddr=1")
	if err := l6.Do("bind addr=:: port=7000"); err == nil {
		if err := l6.Do("listen"); device.Errno(err) != syscall.EADDRINUSE {
			t.Fatalf(":: beside 0.0.0.0: %v", err)
		}
	}

	c := cs.dial(PSTCP, "10.0.0.2", 7000)
	cs.do(c, "connect qp_num=77 private_data=c0ffee")
	w.net.flush()
	evs := ss.events()
	if len(evs) != 0 {
		t.Fatalf("the squatter's channel got %s", names(evs))
	}
	if evil.Pending() != 0 {
		t.Fatalf("the squatter's channel holds %d events", evil.Pending())
	}
	e, ok := rootCh.Next(closedDone())
	if !ok || e.Name != EvConnectRequest || kv(e, "listen_id") != fmt.Sprint(srv.Num) || !strings.HasPrefix(kv(e, "private_data"), "c0ffee") {
		t.Fatalf("root's server got %q", e.Line())
	}
	made := ss.a.Lookup(e.ID)
	ss.do(made, "accept qp_num=88 psn=1")
	w.net.flush()
	evs = cs.expect(fmt.Sprintf("connect_response:%d:0", c.Num))
	if kv(evs[0], "qp_num") != "88" {
		t.Fatalf("root's client got qp_num %s, not root's server's", kv(evs[0], "qp_num"))
	}
	cs.do(c, "establish")
	w.net.flush()
	if made.State() != StateEstablished {
		t.Fatalf("root's server id is %s", made.State())
	}
}

func closedDone() chan struct{} {
	d := make(chan struct{})
	close(d)
	return d
}

// TestPrivilegedPortNeedsCap: port 80 is EACCES without
// CAP_NET_BIND_SERVICE (uid 65534's writes), 1024 is not; with the
// capability (root) 80 binds.
func TestPrivilegedPortNeedsCap(t *testing.T) {
	w := newWorld(t)
	s := w.localSide()
	id := s.newID(PSTCP)
	if err := id.DoAs("bind addr=127.0.0.1 port=80", Caps{}); device.Errno(err) != syscall.EACCES {
		t.Fatalf("port 80 without the capability: %v", err)
	}
	if err := id.DoAs("bind addr=127.0.0.1 port=1024", Caps{}); err != nil {
		t.Fatalf("port 1024: %v", err)
	}
	id2 := s.newID(PSTCP)
	if err := id2.DoAs("bind addr=127.0.0.1 port=80", Caps{NetBindService: true}); err != nil {
		t.Fatalf("port 80 with the capability: %v", err)
	}
}

// TestCMUserShare: under --user-share 10 a uid's CM ids and channels
// stop at 10% of the device's 4096 (409), listeners included.
func TestCMUserShare(t *testing.T) {
	dev, err := device.New(device.Config{UserShare: 10})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	a := Attach(dev, Config{})
	defer a.Close()
	var chans []*Channel
	for {
		c, err := a.NewChannel(65534)
		if err != nil {
			if device.Errno(err) != syscall.ENOMEM {
				t.Fatal(err)
			}
			break
		}
		chans = append(chans, c)
	}
	if len(chans) != 409 {
		t.Fatalf("uid 65534 got %d channels, want 409", len(chans))
	}
	n := 0
	for {
		id, err := a.Create(65534, chans[0], PSTCP, qp.TypeRC)
		if err != nil {
			if device.Errno(err) != syscall.ENOMEM {
				t.Fatal(err)
			}
			break
		}
		if n%2 == 0 {
			if err := id.DoAs("listen", Caps{}); err != nil {
				t.Fatal(err)
			}
		}
		n++
	}
	if n != 409 {
		t.Fatalf("uid 65534 got %d ids (half of them listeners), want 409", n)
	}
	// Root is not held by the user's share.
	rc, _ := a.NewChannel(0)
	if _, err := a.Create(0, rc, PSTCP, qp.TypeRC); err != nil {
		t.Fatal(err)
	}
}

// floodREQ is a REQ as a forger sends it: a fresh comm ID, and the
// longest packet life time and CM response timeout the fields hold (the
// old code waited 2.3 h a try for them).
func floodREQ(i int, dst string, port uint16) [MADSize]byte {
	var hdr [CMAHdrLen]byte
	PutCMAHdr(hdr[:], CMAHdr{Src: netip.MustParseAddrPort("10.0.0.66:1"), Dst: netip.AddrPortFrom(netip.MustParseAddr(dst), port)})
	m := &REQ{LocalCommID: uint32(i + 1), ServiceID: ServiceID(PSTCP, port), LocalCAGUID: 66, LocalQPN: uint32(100 + i),
		RemoteCMResponseTimeout: 31, LocalCMResponseTimeout: 31, MaxCMRetries: 15, PathMTU: 3,
		Primary: Path{LocalACKTimeout: 31, HopLimit: 64}}
	copy(m.PrivateData[:], hdr[:])
	return Encode(uint64(i), m)
}

// acceptAll is a server that accepts every connect request on ch and
// destroys the ids whose connection failed; it returns how many it
// accepted.
func acceptAll(t *testing.T, a *Agent, ch *Channel) int {
	n := 0
	for ch.Pending() > 0 {
		e, _ := ch.Next(closedDone())
		id := a.Lookup(e.ID)
		if id == nil {
			continue
		}
		switch e.Name {
		case EvConnectRequest:
			if err := id.Do(fmt.Sprintf("accept qp_num=%d psn=1", 1000+e.ID)); err != nil {
				t.Fatal(err)
			}
			n++
		case EvUnreachable, EvRejected, EvDisconnected, EvTimewaitExit:
			id.Destroy()
		}
	}
	return n
}

// TestREQFloodLeavesRootConnecting: 5,000 forged REQs from one remote port
// (a UDP socket's) with the longest timeouts, at root's server that
// accepts everything: the port holds at most three quarters of the
// listener's backlog, root's client still connects, and once the REPs'
// bounded retries end (fake clock) the ids are back at their baseline.
func TestREQFloodLeavesRootConnecting(t *testing.T) {
	w := newWorld(t)
	ss, cs := w.wireSide("10.0.0.2"), w.wireSide("10.0.0.1")
	rootCh, _ := ss.a.NewChannel(0)
	srv, _ := ss.a.Create(0, rootCh, PSTCP, qp.TypeRC)
	ss.do(srv, "bind addr=0.0.0.0 port=7000")
	ss.do(srv, "listen")
	baseline := counter(ss.a, "ids")
	forger := roce.GIDFromIPv4(netip.MustParseAddr("10.0.0.66"))
	accepted := 0
	for i := range 5000 {
		mad := floodREQ(i, "10.0.0.2", 7000)
		ss.a.HandleMAD(forger, mad[:])
		if i%100 == 99 {
			accepted += acceptAll(t, ss.a, rootCh)
			w.net.q = nil // the REPs go to the forged port: nobody answers
		}
	}
	if accepted != 768 || counter(ss.a, "rejected_source") != "4232" || attrOf(srv, "pending") != "768" {
		t.Fatalf("accepted %d, pending %s\n%s", accepted, attrOf(srv, "pending"), ss.a.CountersText())
	}
	t.Logf("flood: %d of 5000 accepted, ids %s (baseline %s)", accepted, counter(ss.a, "ids"), baseline)

	// Root's client, from another port, still connects.
	croot, _ := cs.a.NewChannel(0)
	c, _ := cs.a.Create(0, croot, PSTCP, qp.TypeRC)
	cs.do(c, "resolve_addr dst=10.0.0.2 port=7000")
	cs.do(c, "resolve_route")
	cs.do(c, "connect qp_num=5")
	w.net.flush()
	if acceptAll(t, ss.a, rootCh) != 1 {
		t.Fatal("root's connect request did not reach root's server")
	}
	w.net.flush()
	cs.do(c, "establish")
	w.net.flush()
	if c.State() != StateEstablished {
		t.Fatalf("root's client is %s", c.State())
	}
	// And root can still make ids.
	if _, err := ss.a.Create(0, rootCh, PSTCP, qp.TypeRC); err != nil {
		t.Fatal(err)
	}

	// The REPs retry 16 times, each try at most 25.2 s whatever the REQ
	// asked: within 7 minutes every flooded id is unreachable, and the
	// server's destroys bring the ids back.
	w.clk.Advance(7 * time.Minute)
	w.net.q = nil
	acceptAll(t, ss.a, rootCh)
	if got, want := counter(ss.a, "ids"), fmt.Sprint(mustAtoi(baseline)+2); got != want {
		t.Fatalf("ids %s after the flood, want %s (baseline %s + root's connection + root's new id)\n%s", got, want, baseline, ss.a.CountersText())
	}
	if attrOf(srv, "pending") != "0" {
		t.Fatalf("pending %s", attrOf(srv, "pending"))
	}
}

func mustAtoi(s string) int {
	var n int
	fmt.Sscan(s, &n)
	return n
}

// TestPeerTimeoutsBounded: whatever a REQ asks, the passive side's REP
// wait is at most 25.2 s a try and its timewait at most 8.4 s.
func TestPeerTimeoutsBounded(t *testing.T) {
	id := &ID{route: Route{PacketLifeTime: 30}, peerCMTimeout: 31}
	if got := id.requestTimeout(); got != 2*4096*time.Millisecond+16384*time.Millisecond {
		t.Fatalf("request timeout %v", got)
	}
	if got := id.timewait(); got != 8192*time.Millisecond {
		t.Fatalf("timewait %v", got)
	}
	// rdma_cm's own values are untouched: 4.6 s and 0.5 s (packet life time 16).
	id = &ID{route: Route{PacketLifeTime: roceLifeTime}, peerCMTimeout: cmResponseTimeout}
	if got := id.requestTimeout(); got != 4608*time.Millisecond {
		t.Fatalf("request timeout %v", got)
	}
	if got := id.timewait(); got != 512*time.Millisecond {
		t.Fatalf("timewait %v", got)
	}
}

// TestFullChannelsBounded: uid 65534's 1,024 channels, none read, each
// offered 4,096 connect-request-sized events: together they hold at most
// MaxQueuedBytesPerUser (before: 4,096 events each, about 1.7 GiB), the
// rest dropped and counted per channel; root's channel is not held by it.
func TestFullChannelsBounded(t *testing.T) {
	w := newWorld(t)
	s := w.localSide()
	before := heapNow()
	var chans []*Channel
	for range 1024 {
		c, err := s.a.NewChannel(65534)
		if err != nil {
			t.Fatal(err)
		}
		chans = append(chans, c)
	}
	ev := Event{Name: EvConnectRequest, ID: 1, KV: []string{"listen_id=1", "private_data=" + strings.Repeat("ab", 56)}}
	var dropped uint64
	for _, c := range chans {
		for range 4096 {
			c.push(ev)
		}
		dropped += c.Dropped()
	}
	queued := chans[0].queued.Load()
	after := heapNow()
	t.Logf("1,024 channels x 4,096 events: %d bytes queued, %d events dropped, heap +%.1f MiB",
		queued, dropped, float64(after-min(after, before))/(1<<20))
	if queued > MaxQueuedBytesPerUser || dropped == 0 || after > before+3*MaxQueuedBytesPerUser {
		t.Fatalf("queued %d bytes, dropped %d, heap %d -> %d", queued, dropped, before, after)
	}
	root, _ := s.a.NewChannel(0)
	if !root.push(ev) {
		t.Fatal("root's channel is full of uid 65534's events")
	}
	// Reading gives the share back.
	for chans[0].Pending() > 0 {
		chans[0].Next(closedDone())
	}
	if !chans[len(chans)-1].push(ev) {
		t.Fatal("no room after a channel was read")
	}
}

func heapNow() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}
