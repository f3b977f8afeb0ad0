package device

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"rdmafs/clock"
	"rdmafs/link"
	"rdmafs/qp"
)

// env is one device with a fake clock and one PD. With -device.wire the
// device has an address of its own and every packet between its QPs goes
// through the RoCEv2 wire to that address (selfWire).
type env struct {
	t    testing.TB
	d    *Device
	clk  *settledClock
	pd   *PD
	wire bool // packets go through the wire to the device's own address
	// apart keeps connected QPs on the engines they were on before RTR
	// (-device.apart; modifyQP), so that their packets go through the
	// inboxes.
	apart bool
}

// settledClock is the env's fake clock: Advance first lets the device
// settle (env.quiesce), so that a timer armed by a packet still on its way
// (an RNR NAK handed to another engine's inbox, a datagram in the wire) is
// armed before time moves past it, as it would be on a real clock.
type settledClock struct {
	*clock.Fake
	e *env
}

func (c *settledClock) Advance(d time.Duration) {
	if c.e != nil {
		c.e.quiesce()
	}
	c.Fake.Advance(d)
}

// gidOf is the GID of the device a QPN lives on: the env's one device.
func (e *env) gidOf(qpn uint32) [16]byte { return e.d.Port().GID }

// setFaults installs f on the env's device.
func (e *env) setFaults(f Faults) {
	e.t.Helper()
	if err := e.d.SetFaults(f); err != nil {
		e.t.Fatal(err)
	}
}

// newEnv makes an env, through the wire if -device.wire says so; the
// direct path between the device's QPs unless -device.packets says no.
func newEnv(t testing.TB, mod ...func(*Config)) *env {
	t.Helper()
	return newEnvOn(t, *wireFlag, mod...)
}

// newEnvOn is newEnv with the packets through the wire or not, whatever
// -device.wire says.
func newEnvOn(t testing.TB, wire bool, mod ...func(*Config)) *env {
	t.Helper()
	goroutineLeakCheck(t)
	return buildEnv(t, wire, mod...)
}

// buildEnv is newEnvOn without the goroutine leak check (a fuzz target's
// coordinator has goroutines of the fuzzing engine's own).
func buildEnv(t testing.TB, wire bool, mod ...func(*Config)) *env {
	t.Helper()
	clk := clock.NewFake()
	cfg := Config{Clock: clk, PacketLoopback: *packetsFlag, Engines: *enginesFlag}
	for _, m := range mod {
		m(&cfg)
	}
	wire = wire && !cfg.Addr.IsValid()
	d, err := newOnLoopback(cfg, wire)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	e := &env{t: t, d: d, wire: wire, apart: *apartFlag}
	e.clk = &settledClock{Fake: clk, e: e}
	if wire {
		d.mu.Lock()
		d.link = selfWire{d, d.link}
		d.mu.Unlock()
	}
	e.pd, err = d.AllocPD(0)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// newOnLoopback makes a device, on a random 127/8 address when wire is
// set.
func newOnLoopback(cfg Config, wire bool) (*Device, error) {
	if wire {
		cfg.Addr = randomLoopback()
	}
	d, err := New(cfg)
	for try := 0; wire && errors.Is(err, syscall.EADDRINUSE) && try < 20; try++ {
		cfg.Addr = randomLoopback()
		d, err = New(cfg)
	}
	return d, err
}

// selfWire stands in front of a device's link in the -device.wire mode:
// the packets between the device's own QPs go on the wire to its own
// address instead of loopback, through its fault injector, capture,
// raw socket, the kernel and the ICRC check, and come back as datagrams.
type selfWire struct {
	d    *Device
	next link.Endpoint
}

func (s selfWire) WritePackets(pkts []link.Packet) {
	for _, lp := range pkts {
		wireToSelf(s.d, lp.(*packet))
	}
	s.next.WritePackets(pkts)
}

func (s selfWire) Attach(d link.Dispatcher) { s.next.Attach(d) }
func (s selfWire) Close()                   { s.next.Close() }

// wireToSelf routes a packet for the device's own GID to its address on
// the wire, if the device has one. A multicast datagram keeps its route:
// an IPv4 group's goes on the wire as IP multicast anyway, and another
// group's is the device's alone (sent to its unicast address it would
// lose the group's GID).
func wireToSelf(d *Device, p *packet) {
	if p.route == link.Local && d.hasWire && p.DestQP != MulticastQPN {
		p.route, p.hop = link.Wire, d.wireAddr
	}
}

// quiesce is Device.Quiesce that, when the packets go through the wire,
// also waits for the datagrams in flight: every datagram the wire sent
// (to the device's own address: nothing else is on it) is then delivered
// (packets_recv) or was dropped on receipt.
func (e *env) quiesce() {
	e.d.Quiesce()
	if !e.wire {
		return
	}
	// Read under Device.mu, which a delivery holds from counting the
	// packet until its QP is scheduled.
	c := &e.d.Counters
	count := func() [3]uint64 {
		e.d.mu.Lock()
		defer e.d.mu.Unlock()
		// Multicast to a group that is not an IPv4 one stays on the
		// device (loopback) even here.
		return [3]uint64{c.WirePacketsSent.Load() + c.McastLoopback.Load(), c.PacketsRecv.Load(), c.ICRCErrors.Load() + c.MalformedPackets.Load()}
	}
	for {
		n := count()
		e.d.Quiesce()
		if n[0] == n[1]+n[2] && count() == n {
			return
		}
		runtime.Gosched()
	}
}

// -device.wire runs every single-device test with the packets between its
// QPs sent through the RoCEv2 wire to the device's own address (a random
// 127/8 address, raw sockets, ICRC), not loopback: the whole behavioural
// suite across the wire.
var wireFlag = flag.Bool("device.wire", false, "send the packets between a device's QPs through the RoCEv2 wire to its own address (needs CAP_NET_RAW)")

// -device.packets runs every single-device test with the packets between
// its QPs going through the link chain, as when a capture is open, not
// the direct path (loopback.go): the behavioural suite on both.
var enginesFlag = flag.Int("device.engines", 1, "engines per device (Config.Engines) for the tests that do not pick their own")

var apartFlag = flag.Bool("device.apart", false, "with -device.engines > 1, leave connected QPs on different engines (their packets go through the inboxes)")

var packetsFlag = flag.Bool("device.packets", false, "send packets between a device's own QPs through the link chain, not the direct path")

// goroutineLeakCheck fails the test if it leaves goroutines behind
// (wireguard-go's check).
func goroutineLeakCheck(t testing.TB) {
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(2 * time.Second)
		for runtime.NumGoroutine() > before {
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<16)
				n := runtime.Stack(buf, true)
				t.Errorf("goroutines leaked: %d before, %d after\n%s", before, runtime.NumGoroutine(), buf[:n])
				return
			}
			time.Sleep(time.Millisecond)
		}
	})
}

func (e *env) mr(n uint64, acc qp.Access) *MR {
	e.t.Helper()
	mr, err := e.d.RegMR(0, qp.CreateMR{PD: e.pd.Handle, Length: n, Access: acc})
	if err != nil {
		e.t.Fatal(err)
	}
	return mr
}

// foreignMR registers an MR of n bytes in a PD of its own: memory the
// env's QPs must never reach.
func (e *env) foreignMR(n uint64, acc qp.Access) *MR {
	e.t.Helper()
	pd, err := e.d.AllocPD(0)
	if err != nil {
		e.t.Fatal(err)
	}
	mr, err := e.d.RegMR(0, qp.CreateMR{PD: pd.Handle, Length: n, Access: acc})
	if err != nil {
		e.t.Fatal(err)
	}
	return mr
}

func (e *env) cq(n uint32) *CQ {
	e.t.Helper()
	cq, err := e.d.CreateCQ(0, qp.CreateCQ{CQE: n})
	if err != nil {
		e.t.Fatal(err)
	}
	return cq
}

type qpOpts struct {
	typ      qp.Type
	scq, rcq *CQ
	srq      *SRQ
	cap      qp.Cap
	sigAll   bool
}

func (e *env) qp(o qpOpts) *QP {
	e.t.Helper()
	if o.typ == 0 {
		o.typ = qp.TypeRC
	}
	if o.cap == (qp.Cap{}) {
		o.cap = qp.Cap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInlineData: 64}
	}
	req := qp.CreateQP{PD: e.pd.Handle, Type: o.typ, SendCQ: o.scq.Handle, RecvCQ: o.rcq.Handle,
		Cap: o.cap, SQSigAll: o.sigAll}
	if o.srq != nil {
		req.SRQ = o.srq.Handle
	}
	q, err := e.d.CreateQP(0, req)
	if err != nil {
		e.t.Fatal(err)
	}
	return q
}

// modify applies a text modify, failing the test on error.
func (e *env) modify(q *QP, text string) {
	e.t.Helper()
	if err := e.tryModify(q, text); err != nil {
		e.t.Fatalf("modify %q: %v", text, err)
	}
}

func (e *env) tryModify(q *QP, text string) error {
	a, m, err := qp.ParseModify(text)
	if err != nil {
		e.t.Fatalf("parse %q: %v", text, err)
	}
	return e.modifyQP(q, &a, m)
}

// modifyQP is QP.Modify, in apart mode with the QP kept where it was: a
// move to RTR puts a QP on its local peer's engine (colocateLocked), and
// apart mode moves it back (moveLocked), so that the pair stays on two
// engines and its packets go through the inboxes. Every modify of the
// tests that may connect a QP goes through here.
func (e *env) modifyQP(q *QP, a *qp.Attr, m qp.AttrMask) error {
	if !e.apart {
		return q.Modify(a, m)
	}
	home := q.eng()
	err := q.Modify(a, m)
	e.d.mu.Lock()
	if !q.destroyed {
		q.moveLocked(home)
	}
	e.d.mu.Unlock()
	return err
}

const allAccess = "local_write,remote_write,remote_read,remote_atomic"

// connect walks q to RTS addressed at dest (RC/UC) or just to RTS (UD).
func (e *env) connect(q *QP, destQPN uint32, extra string) {
	e.t.Helper()
	gid := GIDString(e.gidOf(destQPN))
	switch q.Type {
	case qp.TypeUD:
		e.modify(q, "qp_state=INIT pkey_index=0 port_num=1 qkey=0x11111111")
		e.modify(q, "qp_state=RTR")
		e.modify(q, "qp_state=RTS sq_psn=100")
	case qp.TypeUC:
		e.modify(q, "qp_state=INIT pkey_index=0 port_num=1 qp_access_flags="+allAccess)
		e.modify(q, "qp_state=RTR path_mtu=1024 rq_psn=500 dest_qp_num="+itoa(destQPN)+" dgid="+gid)
		e.modify(q, "qp_state=RTS sq_psn=500")
	default:
		e.modify(q, "qp_state=INIT pkey_index=0 port_num=1 qp_access_flags="+allAccess)
		e.modify(q, "qp_state=RTR path_mtu=1024 rq_psn=500 max_dest_rd_atomic=4 min_rnr_timer=12 dest_qp_num="+itoa(destQPN)+" dgid="+gid)
		e.modify(q, "qp_state=RTS sq_psn=500 timeout=14 retry_cnt=7 rnr_retry=7 max_rd_atomic=4 "+extra)
	}
}

// pair makes two connected QPs of type t, each with its own CQ.
func (e *env) pair(t qp.Type) (a, b *QP, acq, bcq *CQ) {
	acq, bcq = e.cq(256), e.cq(256)
	a = e.qp(qpOpts{typ: t, scq: acq, rcq: acq})
	b = e.qp(qpOpts{typ: t, scq: bcq, rcq: bcq})
	e.connect(a, b.QPN, "")
	e.connect(b, a.QPN, "")
	return
}

func itoa(n uint32) string { return fmt.Sprint(n) }

// postSend posts the WRs in one call, as one ibv_post_send of a list: the
// engine sees them all at once (a test that counts what went out before
// a NAK came back depends on it).
func (e *env) postSend(q *QP, lines ...string) {
	e.t.Helper()
	var wrs []qp.SendWR
	for _, l := range lines {
		wr, err := qp.ParseSendWR(l)
		if err != nil {
			e.t.Fatalf("parse %q: %v", l, err)
		}
		wrs = append(wrs, wr)
	}
	if n, err := q.PostSend(wrs); err != nil {
		e.t.Fatalf("post_send %q: %v", lines[n], err)
	}
}

func (e *env) postRecv(q *QP, lines ...string) {
	e.t.Helper()
	for _, l := range lines {
		wr, err := qp.ParseRecvWR(l)
		if err != nil {
			e.t.Fatalf("parse %q: %v", l, err)
		}
		if _, err := q.PostRecv([]qp.RecvWR{wr}); err != nil {
			e.t.Fatalf("post_recv %q: %v", l, err)
		}
	}
}

// poll waits for the engine to settle and returns every completion as text.
func (e *env) poll(cq *CQ) []string {
	e.t.Helper()
	e.quiesce()
	wcs, err := cq.Poll(1 << 20)
	if err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for i := range wcs {
		out = append(out, qp.FormatWC(&wcs[i]))
	}
	return out
}

// expect checks completions line by line (exact text).
func (e *env) expect(cq *CQ, want ...string) {
	e.t.Helper()
	got := e.poll(cq)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		e.t.Fatalf("completions on cq %d:\n got: %s\nwant: %s", cq.Handle, strings.Join(got, "\n      "), strings.Join(want, "\n      "))
	}
}

func (e *env) state(q *QP, want qp.State) {
	e.t.Helper()
	e.quiesce()
	if got := q.State(); got != want {
		e.t.Fatalf("qp %d state %v, want %v", q.QPN, got, want)
	}
}

func (e *env) events() []string {
	var out []string
	for pendingEvents(e.d) > 0 {
		evs, _ := e.d.ReadEvents(context.Background())
		for _, ev := range evs {
			out = append(out, ev.String())
		}
	}
	return out
}

func fill(b []byte, seed byte) {
	for i := range b {
		b[i] = seed + byte(i*7)
	}
}

func sameBytes(t testing.TB, got, want []byte) {
	t.Helper()
	if !bytes.Equal(got, want) {
		i := 0
		for i < len(got) && i < len(want) && got[i] == want[i] {
			i++
		}
		t.Fatalf("data differs at byte %d of %d/%d", i, len(got), len(want))
	}
}

// Stage keys of connectX: which modify of the RESET→INIT→RTR→RTS walk a
// key belongs to.
var connectStage = map[string]int{
	"pkey_index": 0, "port_num": 0, "qp_access_flags": 0, "qkey": 0,
	"path_mtu": 1, "rq_psn": 1, "max_dest_rd_atomic": 1, "min_rnr_timer": 1, "dest_qp_num": 1, "dgid": 1,
	"sq_psn": 2, "timeout": 2, "retry_cnt": 2, "rnr_retry": 2, "max_rd_atomic": 2,
}

// connectX is connect with attributes overridden: over is "key=value ..."
// where each key replaces the default of its stage (or adds it); a value
// of "-" removes the key.
func (e *env) connectX(q *QP, destQPN uint32, over string) {
	e.t.Helper()
	gid := GIDString(e.gidOf(destQPN))
	var stages [3][][2]string
	add := func(st int, k, v string) { stages[st] = append(stages[st], [2]string{k, v}) }
	switch q.Type {
	case qp.TypeUD:
		add(0, "pkey_index", "0")
		add(0, "port_num", "1")
		add(0, "qkey", "0x11111111")
		add(2, "sq_psn", "100")
	case qp.TypeUC:
		add(0, "pkey_index", "0")
		add(0, "port_num", "1")
		add(0, "qp_access_flags", allAccess)
		add(1, "path_mtu", "1024")
		add(1, "rq_psn", "500")
		add(1, "dest_qp_num", itoa(destQPN))
		add(1, "dgid", gid)
		add(2, "sq_psn", "500")
	default:
		add(0, "pkey_index", "0")
		add(0, "port_num", "1")
		add(0, "qp_access_flags", allAccess)
		add(1, "path_mtu", "1024")
		add(1, "rq_psn", "500")
		add(1, "max_dest_rd_atomic", "4")
		add(1, "min_rnr_timer", "12")
		add(1, "dest_qp_num", itoa(destQPN))
		add(1, "dgid", gid)
		add(2, "sq_psn", "500")
		add(2, "timeout", "14")
		add(2, "retry_cnt", "7")
		add(2, "rnr_retry", "7")
		add(2, "max_rd_atomic", "4")
	}
	for _, tok := range strings.Fields(over) {
		k, v, _ := strings.Cut(tok, "=")
		st, ok := connectStage[k]
		if !ok {
			e.t.Fatalf("connectX: unknown key %q", k)
		}
		found := false
		for i := range stages[st] {
			if stages[st][i][0] == k {
				stages[st][i][1] = v
				found = true
			}
		}
		if !found {
			add(st, k, v)
		}
	}
	names := []string{"INIT", "RTR", "RTS"}
	for i, st := range stages {
		line := "qp_state=" + names[i]
		for _, kv := range st {
			if kv[1] != "-" {
				line += " " + kv[0] + "=" + kv[1]
			}
		}
		e.modify(q, line)
	}
}

// pairX is pair with connectX overrides for each side.
func (e *env) pairX(t qp.Type, overA, overB string) (a, b *QP, acq, bcq *CQ) {
	e.t.Helper()
	acq, bcq = e.cq(256), e.cq(256)
	a = e.qp(qpOpts{typ: t, scq: acq, rcq: acq})
	b = e.qp(qpOpts{typ: t, scq: bcq, rcq: bcq})
	e.connectX(a, b.QPN, overA)
	e.connectX(b, a.QPN, overB)
	return
}

// expectEvents checks the async events raised since the last call.
func (e *env) expectEvents(want ...string) {
	e.t.Helper()
	e.quiesce()
	got := e.events()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		e.t.Fatalf("events:\n got: %s\nwant: %s", strings.Join(got, "\n      "), strings.Join(want, "\n      "))
	}
}

// sendWC and recvWC format expected completions.
func sendWC(wrid uint64, status, opcode string, q *QP, n int) string {
	return fmt.Sprintf("wr_id=%d status=%s opcode=%s qp_num=%d byte_len=%d", wrid, status, opcode, q.QPN, n)
}

func recvWC(wrid uint64, status, opcode string, q *QP, n int, src *QP, extra string) string {
	s := fmt.Sprintf("wr_id=%d status=%s opcode=%s qp_num=%d byte_len=%d", wrid, status, opcode, q.QPN, n)
	switch {
	case status != "success":
		s += " src_qp=0"
	case src != nil:
		s += fmt.Sprintf(" src_qp=%d", src.QPN)
	}
	if extra != "" {
		s += " " + extra
	}
	return s
}

// flushed lists wr_flush_err completions for wrids with opcode.
func flushed(q *QP, opcode string, wrids ...uint64) []string {
	var out []string
	for _, id := range wrids {
		if opcode == "recv" {
			out = append(out, recvWC(id, "wr_flush_err", "recv", q, 0, nil, ""))
		} else {
			out = append(out, sendWC(id, "wr_flush_err", opcode, q, 0))
		}
	}
	return out
}

// cat joins expectation lists.
func cat(parts ...any) []string {
	var out []string
	for _, p := range parts {
		switch v := p.(type) {
		case string:
			out = append(out, v)
		case []string:
			out = append(out, v...)
		}
	}
	return out
}

// trySend posts one text WR and returns the error.
func (e *env) trySend(q *QP, line string) error {
	e.t.Helper()
	wr, err := qp.ParseSendWR(line)
	if err != nil {
		e.t.Fatalf("parse %q: %v", line, err)
	}
	_, err = q.PostSend([]qp.SendWR{wr})
	return err
}

func (e *env) qpCounters(q *QP) QPCounters { e.quiesce(); return q.CountersSnapshot() }

func (e *env) healthy(qps ...*QP) {
	e.t.Helper()
	for _, q := range qps {
		e.state(q, qp.StateRTS)
	}
	e.expectEvents()
}

func (e *env) mw(typ uint8) *MW {
	e.t.Helper()
	mw, err := e.d.AllocMW(0, qp.CreateMW{PD: e.pd.Handle, Type: typ})
	if err != nil {
		e.t.Fatal(err)
	}
	return mw
}

func (e *env) ah(gid [16]byte) *AH {
	e.t.Helper()
	ah, err := e.d.CreateAH(0, qp.CreateAH{PD: e.pd.Handle, AH: qp.AH{DGID: gid, PortNum: 1}})
	if err != nil {
		e.t.Fatal(err)
	}
	return ah
}

func (e *env) srq(maxWR, limit uint32) *SRQ {
	e.t.Helper()
	s, err := e.d.CreateSRQ(0, qp.CreateSRQ{PD: e.pd.Handle, MaxWR: maxWR, MaxSGE: 2, SRQLimit: limit})
	if err != nil {
		e.t.Fatal(err)
	}
	return s
}

func (e *env) postSRQ(s *SRQ, lines ...string) {
	e.t.Helper()
	for _, l := range lines {
		wr, err := qp.ParseRecvWR(l)
		if err != nil {
			e.t.Fatal(err)
		}
		if _, err := s.PostRecv([]qp.RecvWR{wr}); err != nil {
			e.t.Fatalf("post_srq_recv %q: %v", l, err)
		}
	}
}
