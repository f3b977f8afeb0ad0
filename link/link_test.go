package link

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"rdmafs/roce"
)

// tpkt is a test's packet: a SEND ONLY with a payload of its own, or op
// (a WRITE ONLY's DMA length is its payload's).
type tpkt struct {
	m       Meta
	op      roce.Opcode
	psn     uint32
	payload []byte
	done    *[]string // "sent N" / "lost N" for each Done
	held    bool
}

func (p *tpkt) Meta() Meta { m := p.m; m.PayloadLen = len(p.payload); return m }
func (p *tpkt) Header(rp *roce.Packet) {
	op := p.op
	if op == 0 {
		op = roce.OpSendOnly
	}
	*rp = roce.Packet{Opcode: op, PKey: 0xFFFF, DestQP: p.m.DestQPN, PSN: p.psn, Payload: p.payload,
		VA: 0x1000, RKey: 7, DMALen: uint32(len(p.payload))}
}
func (p *tpkt) Clone() Packet { c := *p; c.payload = append([]byte(nil), p.payload...); return &c }
func (p *tpkt) Hold()         { p.held = true }
func (p *tpkt) Done(sent bool) {
	w := "lost"
	if sent {
		w = "sent"
	}
	*p.done = append(*p.done, w+" "+string(rune('0'+p.psn)))
}

// tdisp records what the chain delivers.
type tdisp struct {
	local []uint32 // PSNs
	dgs   []Datagram
	got   chan struct{}
}

func (d *tdisp) DeliverLocal(p Packet) { d.local = append(d.local, p.(*tpkt).psn) }
func (d *tdisp) DeliverDatagrams(dgs []Datagram) func() bool {
	for _, dg := range dgs {
		dg.Raw = append([]byte(nil), dg.Raw...)
		dg.Packet.Payload = nil
		d.dgs = append(d.dgs, dg)
	}
	if d.got != nil {
		select {
		case d.got <- struct{}{}:
		default:
		}
	}
	return nil
}

// sendAll writes ps to chain c under its lock mu and waits until d has
// received as many datagrams.
func (d *tdisp) sendAll(t *testing.T, c *Chain, mu *sync.Mutex, ps []Packet) {
	t.Helper()
	mu.Lock()
	c.Head.WritePackets(ps)
	mu.Unlock()
	d.wait(t, mu, len(ps))
}

// wait waits until the dispatcher has n datagrams (mu is the chain's lock).
func (d *tdisp) wait(t *testing.T, mu *sync.Mutex, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		got := len(d.dgs)
		mu.Unlock()
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("received %d datagrams of %d", got, n)
		}
		time.Sleep(time.Millisecond)
	}
}

type fakeClock struct {
	mu sync.Mutex
	fs []func()
}

func (c *fakeClock) AfterFunc(_ time.Duration, f func()) {
	c.mu.Lock()
	c.fs = append(c.fs, f)
	c.mu.Unlock()
}

func (c *fakeClock) fire() {
	c.mu.Lock()
	fs := c.fs
	c.fs = nil
	c.mu.Unlock()
	for _, f := range fs {
		f()
	}
}

func newTestChain(t *testing.T, o Options) (*Chain, *tdisp, *fakeClock) {
	t.Helper()
	var mu sync.Mutex
	clk := &fakeClock{}
	if o.Lock == nil {
		o.Lock = &mu
	}
	if o.Counters == nil {
		o.Counters = &Counters{}
	}
	if o.Owner == nil {
		o.Owner = func(uint32) uint32 { return 0 }
	}
	o.AfterFunc = clk.AfterFunc
	d := &tdisp{got: make(chan struct{}, 1)}
	c, err := NewChain(o, d)
	if err != nil {
		if errors.Is(err, syscall.EPERM) && os.Getenv("CI") != "true" {
			t.Skipf("no CAP_NET_RAW: %v", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c, d, clk
}

func pkts(done *[]string, route Route, psns ...uint32) []Packet {
	var ps []Packet
	for _, n := range psns {
		ps = append(ps, &tpkt{m: Meta{Route: route, SrcQPN: 0x11, DestQPN: 0x12}, psn: n, payload: []byte("data"), done: done})
	}
	return ps
}

// Loopback hands back the very packets, in order; NoRoute drops and
// counts; the route counts every packet either way.
func TestLoopbackAndNoRoute(t *testing.T) {
	var cnt Counters
	c, d, _ := newTestChain(t, Options{Counters: &cnt})
	var done []string
	c.Head.WritePackets(pkts(&done, Local, 1, 2, 3))
	c.Head.WritePackets(pkts(&done, NoRoute, 4))
	c.Head.WritePackets(pkts(&done, Wire, 5)) // no wire: no route either
	if len(d.local) != 3 || d.local[0] != 1 || d.local[2] != 3 {
		t.Fatalf("delivered %v", d.local)
	}
	if len(done) != 2 || done[0] != "lost 4" || done[1] != "lost 5" {
		t.Fatalf("done %v", done)
	}
	if cnt.PacketsSent.Load() != 5 || cnt.BytesSent.Load() != 20 || cnt.NoRoute.Load() != 2 {
		t.Fatalf("counters sent %d bytes %d no_route %d", cnt.PacketsSent.Load(), cnt.BytesSent.Load(), cnt.NoRoute.Load())
	}
}

// Each fault does what it says, scoped to its QP, and is counted; a
// change of settings sends the held packet and loses the delayed ones.
func TestFaultInjector(t *testing.T) {
	var cnt Counters
	c, d, clk := newTestChain(t, Options{Counters: &cnt})
	var done []string
	c.Faults.Set(Faults{Drop: 1})
	c.Head.WritePackets(pkts(&done, Local, 1))
	if len(d.local) != 0 || len(done) != 1 || cnt.FaultDrops.Load() != 1 {
		t.Fatalf("drop: delivered %v done %v", d.local, done)
	}
	c.Faults.Set(Faults{Drop: 1, QPN: 99}) // another QP's
	c.Head.WritePackets(pkts(&done, Local, 2))
	if len(d.local) != 1 {
		t.Fatalf("a fault scoped to QP 99 hit QP 0x11's packet: %v", d.local)
	}
	c.Faults.Set(Faults{Dup: 1})
	c.Head.WritePackets(pkts(&done, Local, 3))
	if len(d.local) != 3 || d.local[1] != 3 || d.local[2] != 3 || cnt.FaultDups.Load() != 1 {
		t.Fatalf("dup: %v", d.local)
	}
	c.Faults.Set(Faults{Reorder: 1})
	c.Head.WritePackets(pkts(&done, Local, 4, 5))
	if n := len(d.local); n != 5 || d.local[3] != 5 || d.local[4] != 4 {
		t.Fatalf("reorder: %v", d.local)
	}
	c.Head.WritePackets(pkts(&done, Local, 6)) // held
	c.Faults.Set(Faults{Delay: 1, DelayFor: time.Millisecond})
	if d.local[len(d.local)-1] != 6 {
		t.Fatalf("the held packet was not sent on Set: %v", d.local)
	}
	c.Head.WritePackets(pkts(&done, Local, 7))
	if d.local[len(d.local)-1] == 7 {
		t.Fatal("delay: sent at once")
	}
	clk.fire()
	if d.local[len(d.local)-1] != 7 {
		t.Fatalf("delay: not sent when due: %v", d.local)
	}
	c.Head.WritePackets(pkts(&done, Local, 8))
	c.Faults.Set(Faults{})
	clk.fire()
	if d.local[len(d.local)-1] == 8 || done[len(done)-1] != "lost 8" {
		t.Fatalf("a delayed packet of old settings arrived: %v %v", d.local, done)
	}
	if got := c.Faults.Get(); got.Active() {
		t.Fatalf("still on: %v", got)
	}
}

// A capture sees what is sent, once, as pcap records, filtered by owner.
func TestCaptureOwners(t *testing.T) {
	owners := map[uint32]uint32{0x11: 7, 0x12: 8}
	c, _, _ := newTestChain(t, Options{Owner: func(q uint32) uint32 { return owners[q] }})
	all, seven, nine := c.Capture.Open(0), c.Capture.Open(7), c.Capture.Open(9)
	defer all.Close()
	defer seven.Close()
	defer nine.Close()
	var done []string
	c.Head.WritePackets(pkts(&done, Local, 1, 2))
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	for _, r := range []*CaptureReader{all, seven} {
		r.Next(ctx) // header
		b, err := r.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// Two records of 16 bytes of header each and an IPv6 datagram.
		if want := 2 * (16 + roce.HeadroomIPv6 + roce.BTHLen + 4 + roce.ICRCLen); len(b) != want {
			t.Fatalf("capture: %d bytes, want %d", len(b), want)
		}
	}
	nine.Next(ctx)
	ctx2, cancel2 := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel2()
	if b, err := nine.Next(ctx2); err == nil {
		t.Fatalf("uid 9 saw %d bytes of others' packets", len(b))
	}
	c.Capture.Close()
	all.Close()
	if c.Capture.On() != true {
		t.Fatal("closing one reader turned capture off")
	}
}

// The wire sends to itself on 127.0.83.1: encoded, ICRC computed, received,
// verified and parsed; a forged datagram with a bad ICRC and one that does
// not parse reach the dispatcher as such and are counted.
func TestWireSelf(t *testing.T) {
	addr := netip.MustParseAddr("127.0.83.1")
	var cnt Counters
	var mu sync.Mutex
	c, d, _ := newTestChain(t, Options{Lock: &mu, Counters: &cnt, Wire: &WireConfig{Addr: addr}})
	var done []string
	ps := pkts(&done, Wire, 1)
	ps[0].(*tpkt).m.Src, ps[0].(*tpkt).m.Dst = addr.As4(), addr.As4()
	mu.Lock()
	c.Head.WritePackets(ps)
	mu.Unlock()
	if len(done) != 1 || done[0] != "sent 1" {
		t.Fatalf("done %v", done)
	}
	// Forged: a good datagram with its ICRC broken, and garbage.
	ib, _ := (&roce.Packet{Opcode: 0x04, PKey: 0xFFFF, DestQP: 0x42, PSN: 9}).AppendIB(nil)
	dg, err := roce.BuildIPv4(addr, addr, 0xC123, ib, 0, 0, 64)
	if err != nil {
		t.Fatal(err)
	}
	dg[len(dg)-1] ^= 0xFF
	u, err := net.DialUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 83, 2)}, &net.UDPAddr{IP: addr.AsSlice(), Port: roce.UDPPort})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	u.Write(dg[roce.HeadroomIPv4:]) // the kernel writes ID 0 only with DF; the ICRC fails anyway
	u.Write([]byte{1, 2, 3})
	d.wait(t, &mu, 3)
	mu.Lock()
	defer mu.Unlock()
	g := d.dgs[0]
	if g.Status != OK || g.Packet.PSN != 1 || g.Packet.DestQP != 0x12 || g.SrcPort != SourcePort(0x11) || g.Src != addr.As4() {
		t.Fatalf("first datagram %+v", g)
	}
	if d.dgs[1].Status != BadICRC || d.dgs[1].BadQPN != 0x42 || d.dgs[2].Status != Malformed {
		t.Fatalf("forged: %v %v", d.dgs[1].Status, d.dgs[2].Status)
	}
	if cnt.WirePacketsSent.Load() != 1 || cnt.WirePacketsRecv.Load() != 3 || cnt.ICRCErrors.Load() != 1 || cnt.MalformedPackets.Load() != 1 {
		t.Fatalf("counters sent %d recv %d icrc %d malformed %d", cnt.WirePacketsSent.Load(), cnt.WirePacketsRecv.Load(),
			cnt.ICRCErrors.Load(), cnt.MalformedPackets.Load())
	}
}

// A second wire on the same address fails: the UDP socket reserves it.
func TestWireAddressInUse(t *testing.T) {
	addr := netip.MustParseAddr("127.0.83.3")
	newTestChain(t, Options{Wire: &WireConfig{Addr: addr}})
	var mu sync.Mutex
	_, err := NewChain(Options{Lock: &mu, Counters: &Counters{}, Owner: func(uint32) uint32 { return 0 },
		Wire: &WireConfig{Addr: addr}}, &tdisp{})
	if !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("second wire: %v", err)
	}
}

// A batch goes out in one sendmmsg and comes in with few recvmmsg calls,
// which the counters show; an idle wire makes no system call.
func TestWireBatches(t *testing.T) {
	addr := netip.MustParseAddr("127.0.83.4")
	var cnt Counters
	var mu sync.Mutex
	c, d, _ := newTestChain(t, Options{Lock: &mu, Counters: &cnt, Wire: &WireConfig{Addr: addr}})
	var done []string
	const n = 40
	psns := make([]uint32, n)
	for i := range psns {
		psns[i] = uint32(i)
	}
	ps := pkts(&done, Wire, psns...)
	for _, p := range ps {
		p.(*tpkt).m.Src, p.(*tpkt).m.Dst = addr.As4(), addr.As4()
	}
	// Nobody reads while the lock is held: the socket queues them all.
	d.sendAll(t, c, &mu, ps)
	if s, calls := cnt.WirePacketsSent.Load(), cnt.WireSendCalls.Load(); s != n || calls != 1 {
		t.Fatalf("%d datagrams sent in %d calls, want %d in 1", s, calls, n)
	}
	mu.Lock()
	for i, dg := range d.dgs {
		if dg.Status != OK || dg.Packet.PSN != uint32(i) {
			t.Fatalf("datagram %d: %v psn %d", i, dg.Status, dg.Packet.PSN)
		}
	}
	mu.Unlock()
	calls := cnt.WireRecvCalls.Load()
	if calls >= n/2 {
		t.Errorf("%d datagrams took %d receive calls", n, calls)
	}
	time.Sleep(20 * time.Millisecond)
	if cnt.WireRecvCalls.Load() != calls || cnt.WireRecvErrors.Load() != 0 {
		t.Errorf("an idle wire went on calling: %d calls, %d errors", cnt.WireRecvCalls.Load(), cnt.WireRecvErrors.Load())
	}
	t.Logf("%d datagrams: 1 send call, %d receive calls", n, calls)
}

// A raw socket receives every UDP datagram of the host from socket(2)
// until bind: openRaw discards what came in meanwhile, so a device that
// has just started counts nobody else's traffic as malformed. Other
// traffic floods lo (127.0.83.7 to 127.0.83.8) while sockets open.
func TestOpenRawTakesOnlyItsOwn(t *testing.T) {
	src, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 83, 7)})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst := &net.UDPAddr{IP: net.IPv4(127, 0, 83, 8), Port: 9}
	stop := make(chan struct{})
	flooded := make(chan struct{})
	go func() {
		defer close(flooded)
		msg := make([]byte, 32)
		for {
			select {
			case <-stop:
				return
			default:
			}
			src.WriteToUDP(msg, dst)
		}
	}()
	defer func() { close(stop); <-flooded }()
	a := netip.MustParseAddr("127.0.83.9")
	for i := 0; i < 50; i++ {
		fd, err := openRaw(a)
		if err != nil {
			if errors.Is(err, syscall.EPERM) && os.Getenv("CI") != "true" {
				t.Skipf("no CAP_NET_RAW: %v", err)
			}
			t.Fatal(err)
		}
		var b [64]byte
		n, _, err := unix.Recvfrom(fd, b[:], unix.MSG_DONTWAIT)
		unix.Close(fd)
		if err == nil {
			t.Fatalf("open %d: a datagram of %d bytes that is not for %v: % x", i, n, a, b[:min(n, 20)])
		}
	}
}
