package cm

import (
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"rdmafs/clock"
	"rdmafs/qp"
	"rdmafs/roce"
)

// memNet joins agents by GID. MADs wait in a queue until flush delivers
// them, outside every agent's lock, so a test sees each exchange step by
// step and can lose, duplicate or reorder MADs on purpose.
type memNet struct {
	mu     sync.Mutex
	q      []memPkt
	agents map[[16]byte]*Agent
	// drop, when set, loses the MADs it returns true for.
	drop func(p memPkt) bool
	log  []memPkt // everything sent
}

type memPkt struct {
	from, to [16]byte
	mad      [MADSize]byte
}

func (p memPkt) attr() string { return AttrName(be.Uint16(p.mad[16:])) }

type memPort struct {
	n   *memNet
	gid [16]byte
}

func (p *memPort) SendMAD(dgid [16]byte, mad [MADSize]byte) error {
	p.n.mu.Lock()
	defer p.n.mu.Unlock()
	pk := memPkt{from: p.gid, to: dgid, mad: mad}
	p.n.log = append(p.n.log, pk)
	p.n.q = append(p.n.q, pk)
	return nil
}

// flush delivers until no MAD is queued; it returns the attributes
// delivered, in order.
func (n *memNet) flush() []string {
	var seen []string
	for {
		n.mu.Lock()
		if len(n.q) == 0 {
			n.mu.Unlock()
			return seen
		}
		p := n.q[0]
		n.q = n.q[1:]
		drop := n.drop
		a := n.agents[p.to]
		n.mu.Unlock()
		if a == nil || (drop != nil && drop(p)) {
			seen = append(seen, p.attr()+"(lost)")
			continue
		}
		seen = append(seen, p.attr())
		a.HandleMAD(p.from, p.mad[:])
	}
}

// sent returns the logged MADs of one attribute and clears the log.
func (n *memNet) take() []memPkt {
	n.mu.Lock()
	defer n.mu.Unlock()
	l := n.log
	n.log = nil
	return l
}

// side is one agent with a channel and the ids connect requests made.
type side struct {
	t    *testing.T
	a    *Agent
	ch   *Channel
	mu   sync.Mutex
	made []*ID
	addr netip.Addr
}

type world struct {
	t   *testing.T
	clk *clock.Fake
	net *memNet
}

func newWorld(t *testing.T) *world {
	return &world{t: t, clk: clock.NewFake(), net: &memNet{agents: map[[16]byte]*Agent{}}}
}

// wireSide is an agent of a device with address addr (reaching others
// over the wire).
func (w *world) wireSide(addr string, mod ...func(*Config)) *side {
	x := netip.MustParseAddr(addr)
	gid := roce.GIDFromIPv4(x)
	cfg := Config{Clock: w.clk, GID: gid, NodeGUID: uint64(x.As4()[3]) << 8, Addrs: []netip.Addr{x}, Wire: true, ActiveMTU: qp.MTU1024}
	return w.add(cfg, x, mod...)
}

// localSide is a local mount's agent (127.0.0.1 and ::1, no wire).
func (w *world) localSide(mod ...func(*Config)) *side {
	gid := [16]byte{0xfe, 0x80, 15: 1}
	cfg := Config{Clock: w.clk, GID: gid, NodeGUID: 0x1234, Addrs: []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.IPv6Loopback()}, ActiveMTU: qp.MTU4096}
	return w.add(cfg, netip.MustParseAddr("127.0.0.1"), mod...)
}

func (w *world) add(cfg Config, x netip.Addr, mod ...func(*Config)) *side {
	s := &side{t: w.t, addr: x}
	cfg.NewID = func(id *ID) { s.mu.Lock(); s.made = append(s.made, id); s.mu.Unlock() }
	for _, m := range mod {
		m(&cfg)
	}
	s.a = New(cfg, &memPort{n: w.net, gid: cfg.GID})
	w.net.agents[cfg.GID] = s.a
	var err error
	if s.ch, err = s.a.NewChannel(1000); err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(s.a.Close)
	return s
}

func (s *side) newID(ps PortSpace) *ID {
	s.t.Helper()
	t := qp.TypeRC
	if ps == PSUDP {
		t = qp.TypeUD
	}
	id, err := s.a.Create(1000, s.ch, ps, t)
	if err != nil {
		s.t.Fatal(err)
	}
	return id
}

func (s *side) do(id *ID, cmd string) {
	s.t.Helper()
	if err := id.Do(cmd); err != nil {
		s.t.Fatalf("%s: %v", cmd, err)
	}
}

// lastMade is the id the latest connect request made.
func (s *side) lastMade() *ID {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.made) == 0 {
		s.t.Fatal("no connect request made an id")
	}
	return s.made[len(s.made)-1]
}

// events takes every queued event of the side's channel.
func (s *side) events() []Event {
	done := make(chan struct{})
	close(done)
	var evs []Event
	for s.ch.Pending() > 0 {
		e, ok := s.ch.Next(done)
		if !ok {
			break
		}
		evs = append(evs, e)
	}
	return evs
}

// names is "name:id:status" of each event.
func names(evs []Event) string {
	var b []string
	for _, e := range evs {
		b = append(b, fmt.Sprintf("%s:%d:%d", e.Name, e.ID, e.Status))
	}
	return strings.Join(b, " ")
}

func kv(e Event, k string) string {
	for _, x := range e.KV {
		if key, v, _ := strings.Cut(x, "="); key == k {
			return v
		}
	}
	return ""
}

// expect checks the side's next events.
func (s *side) expect(want string) []Event {
	s.t.Helper()
	evs := s.events()
	if got := names(evs); got != want {
		s.t.Fatalf("events:\n got %q\nwant %q", got, want)
	}
	return evs
}

func attrOf(id *ID, k string) string {
	for _, l := range strings.Split(id.Attr(), "\n") {
		if key, v, _ := strings.Cut(l, "="); key == k {
			return v
		}
	}
	return ""
}

func counter(a *Agent, k string) string {
	for _, l := range strings.Split(a.CountersText(), "\n") {
		if key, v, _ := strings.Cut(l, "="); key == k {
			return v
		}
	}
	return "?"
}

// listen makes a listener of ps on port.
func (s *side) listen(ps PortSpace, port int, extra string) *ID {
	l := s.newID(ps)
	s.do(l, fmt.Sprintf("bind addr=0.0.0.0 port=%d", port))
	s.do(l, "listen "+extra)
	return l
}

// dial makes an id resolved to dst:port, ready to connect.
func (s *side) dial(ps PortSpace, dst string, port int) *ID {
	c := s.newID(ps)
	s.do(c, fmt.Sprintf("resolve_addr dst=%s port=%d", dst, port))
	s.do(c, "resolve_route")
	evs := s.expect(fmt.Sprintf("addr_resolved:%d:0 route_resolved:%d:0", c.Num, c.Num))
	_ = evs
	return c
}

var _ = time.Second
