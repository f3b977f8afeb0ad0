package cm

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"rdmafs/device"
	"rdmafs/qp"
)

func pad(hexs string, n int) string { return hexs + strings.Repeat("00", n-len(hexs)/2) }

// connect runs connect/accept/establish between c (on cs) and a listener
// on ss; it returns the server's new id.
func connectPair(t *testing.T, w *world, cs, ss *side, c *ID) *ID {
	t.Helper()
	cs.do(c, "connect qp_num=100 psn=5")
	w.net.flush()
	evs := ss.events()
	if len(evs) != 1 || evs[0].Name != EvConnectRequest {
		t.Fatalf("server events %q", names(evs))
	}
	srv := ss.lastMade()
	ss.do(srv, "accept qp_num=200 psn=7")
	w.net.flush()
	cs.expect(fmt.Sprintf("connect_response:%d:0", c.Num))
	cs.do(c, "establish")
	w.net.flush()
	ss.expect(fmt.Sprintf("established:%d:0", srv.Num))
	return srv
}

func TestConnectAcceptEstablishDisconnect(t *testing.T) {
	w := newWorld(t)
	ss, cs := w.wireSide("10.0.0.2"), w.wireSide("10.0.0.1")
	l := ss.listen(PSTCP, 7471, "backlog=8")
	c := cs.dial(PSTCP, "10.0.0.2", 7471)
	if attrOf(c, "hop_limit") != "64" || attrOf(c, "dgid") != "::ffff:10.0.0.2" || attrOf(c, "path_mtu") != "1024" ||
		attrOf(c, "packet_life_time") != "16" || attrOf(c, "src_addr") != "10.0.0.1" {
		t.Fatalf("route attr:\n%s", c.Attr())
	}
	cs.do(c, "connect qp_num=100 psn=5 private_data=abcd responder_resources=4 initiator_depth=2 rnr_retry_count=6")
	// No MRA with the REQ: the kernel's rdma_cm delays it (sends one
	// only for a retry of the REQ).
	if got := w.net.flush(); strings.Join(got, " ") != "req" {
		t.Fatalf("wire: %v", got)
	}
	evs := ss.events()
	srv := ss.lastMade()
	if names(evs) != fmt.Sprintf("connect_request:%d:0", srv.Num) {
		t.Fatalf("server events %q", names(evs))
	}
	e := evs[0]
	for k, want := range map[string]string{
		"listen_id": fmt.Sprint(l.Num), "private_data": pad("abcd", 56), "qp_num": "100",
		"responder_resources": "2", "initiator_depth": "4", "rnr_retry_count": "6",
		"src_addr": "10.0.0.2", "src_port": "7471", "dst_addr": "10.0.0.1", "dst_port": attrOf(c, "src_port"),
	} {
		if got := kv(e, k); got != want {
			t.Errorf("connect_request %s=%q want %q", k, got, want)
		}
	}
	if attrOf(srv, "state") != "req_rcvd" || attrOf(srv, "remote_psn") != "5" || attrOf(srv, "listen_id") != fmt.Sprint(l.Num) ||
		attrOf(srv, "dgid") != "::ffff:10.0.0.1" {
		t.Fatalf("server id attr:\n%s", srv.Attr())
	}
	if !strings.Contains(ss.a.ListenersText(0), "pending=1") {
		t.Fatalf("listeners: %s", ss.a.ListenersText(0))
	}
	ss.do(srv, "accept qp_num=200 psn=7 private_data=ef")
	if got := w.net.flush(); strings.Join(got, " ") != "rep" {
		t.Fatalf("wire: %v", got)
	}
	evs = cs.expect(fmt.Sprintf("connect_response:%d:0", c.Num))
	if kv(evs[0], "qp_num") != "200" || kv(evs[0], "private_data") != pad("ef", 196) {
		t.Fatalf("connect_response %v", evs[0].KV)
	}
	if attrOf(c, "remote_qp_num") != "200" || attrOf(c, "remote_psn") != "7" || attrOf(c, "state") != "rep_rcvd" {
		t.Fatalf("client attr:\n%s", c.Attr())
	}
	cs.do(c, "establish")
	w.net.flush()
	ss.expect(fmt.Sprintf("established:%d:0", srv.Num))
	cs.expect("")
	if c.State() != StateEstablished || srv.State() != StateEstablished {
		t.Fatal(c.State(), srv.State())
	}
	// The client disconnects: the server hears of it, answers with its
	// own disconnect, and both wait out the timewait.
	cs.do(c, "disconnect")
	w.net.flush()
	ss.expect(fmt.Sprintf("disconnected:%d:0", srv.Num))
	cs.expect("")
	ss.do(srv, "disconnect")
	w.net.flush()
	cs.expect(fmt.Sprintf("disconnected:%d:0", c.Num))
	if c.State() != StateTimewait || srv.State() != StateTimewait {
		t.Fatal(c.State(), srv.State())
	}
	cs.do(c, "disconnect") // again: nothing, no error (rping does this)
	w.clk.Advance(3 * time.Second)
	cs.expect(fmt.Sprintf("timewait_exit:%d:0", c.Num))
	ss.expect(fmt.Sprintf("timewait_exit:%d:0", srv.Num))
	if c.State() != StateClosed || srv.State() != StateClosed {
		t.Fatal(c.State(), srv.State())
	}
	for _, k := range []string{"req_sent", "rep_recv", "rtu_sent", "dreq_sent", "drep_recv"} {
		if counter(cs.a, k) != "1" {
			t.Errorf("client %s=%s", k, counter(cs.a, k))
		}
	}
}

// TestServerDisconnects: the passive side may disconnect first too.
func TestServerDisconnects(t *testing.T) {
	w := newWorld(t)
	ss, cs := w.wireSide("10.0.0.2"), w.wireSide("10.0.0.1")
	ss.listen(PSTCP, 1, "")
	c := cs.dial(PSTCP, "10.0.0.2", 1)
	srv := connectPair(t, w, cs, ss, c)
	ss.do(srv, "disconnect")
	w.net.flush()
	cs.expect(fmt.Sprintf("disconnected:%d:0", c.Num))
	cs.do(c, "disconnect")
	w.net.flush()
	ss.expect(fmt.Sprintf("disconnected:%d:0", srv.Num))
	w.clk.Advance(3 * time.Second)
	cs.expect(fmt.Sprintf("timewait_exit:%d:0", c.Num))
	ss.expect(fmt.Sprintf("timewait_exit:%d:0", srv.Num))
}

// TestLocalLoopback: one local mount, 127.0.0.1 to itself.
func TestLocalLoopback(t *testing.T) {
	w := newWorld(t)
	s := w.localSide()
	s.listen(PSTCP, 7471, "")
	c := s.dial(PSTCP, "127.0.0.1", 7471)
	if attrOf(c, "hop_limit") != "1" || attrOf(c, "dgid") != "fe80::1" || attrOf(c, "path_mtu") != "4096" {
		t.Fatalf("attr:\n%s", c.Attr())
	}
	connectPair(t, w, s, s, c)
	// Unreachable from a local mount: an address it does not answer for.
	u := s.newID(PSTCP)
	s.do(u, "resolve_addr dst=10.1.2.3 port=1")
	s.expect(fmt.Sprintf("addr_error:%d:-113", u.Num))
	if u.State() != StateAddrBound {
		t.Fatal(u.State())
	}
}

func TestRejectWithPrivateData(t *testing.T) {
	w := newWorld(t)
	ss, cs := w.wireSide("10.0.0.2"), w.wireSide("10.0.0.1")
	ss.listen(PSTCP, 9, "")
	c := cs.dial(PSTCP, "10.0.0.2", 9)
	cs.do(c, "connect qp_num=1")
	w.net.flush()
	ss.events()
	srv := ss.lastMade()
	if err := srv.Do("reject private_data=" + strings.Repeat("ab", 149)); device.Errno(err) != syscall.EINVAL {
		t.Fatalf("149 bytes of private data: %v", err)
	}
	ss.do(srv, "reject private_data=0102")
	w.net.flush()
	evs := cs.expect(fmt.Sprintf("rejected:%d:28", c.Num))
	if kv(evs[0], "private_data") != pad("0102", 148) {
		t.Fatal(evs[0].KV)
	}
	if c.State() != StateClosed || srv.State() != StateClosed {
		t.Fatal(c.State(), srv.State())
	}
	if !strings.Contains(ss.a.ListenersText(0), "pending=0") {
		t.Fatal(ss.a.ListenersText(0))
	}
}

func TestNoListener(t *testing.T) {
	w := newWorld(t)
	ss, cs := w.wireSide("10.0.0.2"), w.wireSide("10.0.0.1")
	ss.listen(PSTCP, 5, "")
	c := cs.dial(PSTCP, "10.0.0.2", 6)
	cs.do(c, "connect qp_num=1")
	w.net.flush()
	cs.expect(fmt.Sprintf("rejected:%d:8", c.Num))
	if counter(ss.a, "rejected_no_listener") != "1" || counter(ss.a, "ids") != "1" {
		t.Fatal(ss.a.CountersText())
	}
	// A listener bound to another address of the port does not take it.
	ss2 := w.wireSide("10.0.0.3", func(c *Config) {
		c.Addrs = append(c.Addrs, netip.MustParseAddr("10.0.0.4"))
	})
	l := ss2.newID(PSTCP)
	ss2.do(l, "bind addr=10.0.0.4 port=5")
	ss2.do(l, "listen")
	c2 := cs.dial(PSTCP, "10.0.0.3", 5)
	cs.do(c2, "connect qp_num=1")
	w.net.flush()
	cs.expect(fmt.Sprintf("rejected:%d:8", c2.Num))
}

func TestBacklogFull(t *testing.T) {
	w := newWorld(t)
	ss, cs := w.wireSide("10.0.0.2"), w.wireSide("10.0.0.1")
	ss.listen(PSTCP, 5, "backlog=2")
	var cl []*ID
	for range 3 {
		c := cs.dial(PSTCP, "10.0.0.2", 5)
		cs.do(c, "connect qp_num=1")
		cl = append(cl, c)
	}
	w.net.flush()
	cs.expect(fmt.Sprintf("rejected:%d:3", cl[2].Num))
	if got := len(ss.events()); got != 2 {
		t.Fatalf("%d connect requests", got)
	}
	if counter(ss.a, "rejected_backlog") != "1" {
		t.Fatal(ss.a.CountersText())
	}
	// Answering one makes room for the next.
	ss.do(ss.lastMade(), "reject")
	c := cs.dial(PSTCP, "10.0.0.2", 5)
	cs.do(c, "connect qp_num=1")
	w.net.flush()
	if got := names(ss.events()); !strings.HasPrefix(got, "connect_request") {
		t.Fatal(got)
	}
}

// TestLostREPThenRetry: the REP is lost, the passive side sends it again
// after the CM's timeout; then the RTU is lost, and the REP's retry makes
// the active side send it again.
func TestLostREPThenRetry(t *testing.T) {
	w := newWorld(t)
	ss, cs := w.wireSide("10.0.0.2"), w.wireSide("10.0.0.1")
	ss.listen(PSTCP, 5, "")
	c := cs.dial(PSTCP, "10.0.0.2", 5)
	cs.do(c, "connect qp_num=1")
	w.net.flush()
	ss.events()
	srv := ss.lastMade()
	lose := map[string]int{"rep": 1, "rtu": 1}
	w.net.drop = func(p memPkt) bool {
		if lose[p.attr()] > 0 {
			lose[p.attr()]--
			return true
		}
		return false
	}
	ss.do(srv, "accept qp_num=2")
	w.net.flush()
	cs.expect("")
	w.clk.Advance(srv.requestTimeout())
	w.net.flush()
	cs.expect(fmt.Sprintf("connect_response:%d:0", c.Num))
	cs.do(c, "establish")
	w.net.flush() // the RTU is lost
	ss.expect("")
	w.clk.Advance(srv.requestTimeout())
	if got := strings.Join(w.net.flush(), " "); got != "rep rtu" {
		t.Fatalf("wire after the REP's retry: %s", got)
	}
	ss.expect(fmt.Sprintf("established:%d:0", srv.Num))
	if counter(ss.a, "retries") != "2" || counter(cs.a, "dropped_duplicate") != "1" {
		t.Fatalf("server retries=%s client dropped_duplicate=%s", counter(ss.a, "retries"), counter(cs.a, "dropped_duplicate"))
	}
}

// TestPeerVanished: nobody answers the REQ; after the CM's retries the
// id is unreachable (-ETIMEDOUT). Likewise a DREQ that nobody answers.
func TestPeerVanished(t *testing.T) {
	w := newWorld(t)
	cs := w.wireSide("10.0.0.1")
	c := cs.dial(PSTCP, "10.0.0.9", 5)
	cs.do(c, "connect qp_num=1")
	per := c.requestTimeout()
	if per != 4608*time.Millisecond {
		t.Fatalf("REQ timeout %v", per)
	}
	for i := 0; i < maxCMRetries; i++ {
		w.clk.Advance(per)
		cs.expect("")
	}
	w.clk.Advance(per)
	cs.expect(fmt.Sprintf("unreachable:%d:-110", c.Num))
	if c.State() != StateClosed || counter(cs.a, "req_sent") != "16" || counter(cs.a, "timeouts") != "1" {
		t.Fatal(c.State(), cs.a.CountersText())
	}

	ss := w.wireSide("10.0.0.2")
	ss.listen(PSTCP, 5, "")
	c = cs.dial(PSTCP, "10.0.0.2", 5)
	srv := connectPair(t, w, cs, ss, c)
	delete(w.net.agents, ss.a.cfg.GID) // the server host is gone
	cs.do(c, "disconnect")
	w.clk.Advance(time.Duration(maxCMRetries+1) * c.requestTimeout())
	cs.expect(fmt.Sprintf("disconnected:%d:-110", c.Num))
	w.clk.Advance(3 * time.Second)
	cs.expect(fmt.Sprintf("timewait_exit:%d:0", c.Num))
	_ = srv
}

// TestMRAHoldsRequester: a request the application has not answered
// gets an MRA when the requester retries it (not before: the kernel's
// IB_CM_MRA_FLAG_DELAY), and the MRA makes the requester wait the service
// timeout, not retry.
func TestMRAHoldsRequester(t *testing.T) {
	w := newWorld(t)
	ss, cs := w.wireSide("10.0.0.2"), w.wireSide("10.0.0.1")
	ss.listen(PSTCP, 5, "")
	c := cs.dial(PSTCP, "10.0.0.2", 5)
	cs.do(c, "connect qp_num=1")
	if got := strings.Join(w.net.flush(), " "); got != "req" {
		t.Fatalf("connect: %s", got)
	}
	// The REQ's timeout (2 x 4.096 us x 2^18 + 4.096 us x 2^20, 6.4 s).
	w.clk.Advance(7 * time.Second)
	if got := strings.Join(w.net.flush(), " "); got != "req mra" {
		t.Fatalf("the REQ's retry: %s", got)
	}
	w.clk.Advance(30 * time.Second)
	if got := w.net.flush(); len(got) != 0 {
		t.Fatalf("requester retried during the MRA's wait: %v", got)
	}
	w.clk.Advance(40 * time.Second)
	// Its retry finds the request still unanswered: the MRA again.
	if got := strings.Join(w.net.flush(), " "); got != "req mra" {
		t.Fatalf("after the service timeout: %s", got)
	}
	if counter(ss.a, "dropped_duplicate") != "2" || counter(ss.a, "ids") != "2" || counter(ss.a, "mra_sent") != "2" {
		t.Fatal(ss.a.CountersText())
	}
}

// TestDuplicateAndOutOfOrder replays and reorders MADs of a connection.
func TestDuplicateAndOutOfOrder(t *testing.T) {
	w := newWorld(t)
	ss, cs := w.wireSide("10.0.0.2"), w.wireSide("10.0.0.1")
	ss.listen(PSTCP, 5, "")
	c := cs.dial(PSTCP, "10.0.0.2", 5)
	w.net.take()
	cs.do(c, "connect qp_num=1")
	req := w.net.take()[0]
	w.net.flush()
	ss.events()
	srv := ss.lastMade()
	inject := func(p memPkt) { ss.a.HandleMAD(p.from, p.mad[:]) }
	// The same REQ again: no second id, an MRA (the first).
	inject(req)
	if counter(ss.a, "ids") != "2" || counter(ss.a, "dropped_duplicate") != "1" || counter(ss.a, "mra_sent") != "1" {
		t.Fatal(ss.a.CountersText())
	}
	// An RTU before any REP: dropped.
	rtu := Encode(1, &RTU{LocalCommID: c.localComm, RemoteCommID: srv.localComm})
	ss.a.HandleMAD(cs.a.cfg.GID, rtu[:])
	if srv.State() != StateReqRcvd || counter(ss.a, "dropped_state") != "1" {
		t.Fatal(srv.State(), ss.a.CountersText())
	}
	ss.do(srv, "accept qp_num=2")
	rep := w.net.take()
	w.net.flush()
	// The REP twice: one connect_response.
	cs.a.HandleMAD(rep[len(rep)-1].from, rep[len(rep)-1].mad[:])
	cs.expect(fmt.Sprintf("connect_response:%d:0", c.Num))
	// A REP for a comm ID nobody has: dropped and counted.
	bogus := Encode(1, &REP{LocalCommID: 77, RemoteCommID: 0xDEAD})
	cs.a.HandleMAD(ss.a.cfg.GID, bogus[:])
	if counter(cs.a, "dropped_unknown") != "1" {
		t.Fatal(cs.a.CountersText())
	}
	cs.do(c, "establish")
	w.net.flush()
	ss.expect(fmt.Sprintf("established:%d:0", srv.Num))
	// A DREQ for an unknown connection gets a DREP, nothing else.
	w.net.take()
	dreq := Encode(5, &DREQ{LocalCommID: 1, RemoteCommID: 0xBAD})
	ss.a.HandleMAD(cs.a.cfg.GID, dreq[:])
	if l := w.net.take(); len(l) != 1 || l[0].attr() != "drep" {
		t.Fatalf("answer to an unknown DREQ: %v", l)
	}
	w.net.q = nil
	// A DREQ of this connection that names another QP is dropped.
	wrongQP := Encode(6, &DREQ{LocalCommID: c.localComm, RemoteCommID: srv.localComm, RemoteQPN: 999})
	ss.a.HandleMAD(cs.a.cfg.GID, wrongQP[:])
	if srv.State() != StateEstablished || counter(ss.a, "dropped_unknown") != "2" {
		t.Fatal(srv.State(), ss.a.CountersText())
	}
	// Malformed MADs are counted.
	short := make([]byte, 100)
	ss.a.HandleMAD(cs.a.cfg.GID, short)
	bad := Encode(1, &RTU{})
	bad[2] = 1
	ss.a.HandleMAD(cs.a.cfg.GID, bad[:])
	if counter(ss.a, "dropped_malformed") != "2" {
		t.Fatal(ss.a.CountersText())
	}
	// Disconnect; the DREP is lost, the DREQ retried, answered from
	// timewait.
	w.net.drop = func(p memPkt) bool { return p.attr() == "drep" && w.net.drop != nil }
	cs.do(c, "disconnect")
	w.net.flush()
	ss.do(srv, "disconnect")
	w.net.flush()
	w.net.drop = nil
	cs.expect("")
	// A stale REQ (the old connection's) while it is in timewait is
	// rejected.
	ss.a.HandleMAD(req.from, req.mad[:])
	if counter(ss.a, "rejected_stale") != "1" {
		t.Fatal(ss.a.CountersText())
	}
	w.net.flush()
	// The DREQ's retry comes after the server's timewait: the server
	// answers it without the connection, and the client is done.
	w.clk.Advance(c.requestTimeout())
	w.net.flush()
	cs.expect(fmt.Sprintf("disconnected:%d:0", c.Num))
}

// TestREQFlood: many REQs with fresh comm IDs to one listener; the
// backlog and the id limit hold, the rest are rejected and counted.
func TestREQFlood(t *testing.T) {
	w := newWorld(t)
	ss := w.wireSide("10.0.0.2", func(c *Config) { c.MaxIDs = 300 })
	ss.listen(PSTCP, 5, "")
	var hdr [CMAHdrLen]byte
	PutCMAHdr(hdr[:], CMAHdr{Src: netip.MustParseAddrPort("10.0.0.66:1"), Dst: netip.MustParseAddrPort("10.0.0.2:5")})
	for i := range 5000 {
		m := &REQ{LocalCommID: uint32(i + 1), ServiceID: ServiceID(PSTCP, 5), LocalCAGUID: 66, LocalQPN: 1}
		copy(m.PrivateData[:], hdr[:])
		b := Encode(uint64(i), m)
		ss.a.HandleMAD([16]byte{15: 66}, b[:])
	}
	// The listener's owner (uid 1000) has its share of the 300 ids: 75.
	if counter(ss.a, "ids") != "75" || counter(ss.a, "rejected_no_resources") != "4926" || len(ss.ch.q) != 74 {
		t.Fatal(ss.a.CountersText())
	}
	w.net.q = nil
}

func TestSIDR(t *testing.T) {
	w := newWorld(t)
	ss, cs := w.wireSide("10.0.0.2"), w.wireSide("10.0.0.1")
	ss.listen(PSUDP, 7174, "")
	c := cs.dial(PSUDP, "10.0.0.2", 7174)
	if err := c.Do("connect private_data=" + strings.Repeat("00", 181)); err == nil {
		t.Fatal("181 bytes of SIDR private data accepted")
	}
	cs.do(c, "connect private_data=1234")
	w.net.flush()
	evs := ss.events()
	srv := ss.lastMade()
	if names(evs) != fmt.Sprintf("connect_request:%d:0", srv.Num) || kv(evs[0], "private_data") != pad("1234", 180) ||
		kv(evs[0], "qp_num") != "" {
		t.Fatalf("%q %v", names(evs), evs[0].KV)
	}
	ss.do(srv, "accept qp_num=333 private_data=99")
	w.net.flush()
	evs = cs.expect(fmt.Sprintf("established:%d:0", c.Num))
	if kv(evs[0], "qp_num") != "333" || kv(evs[0], "qkey") != fmt.Sprint(udpQKey) || kv(evs[0], "private_data") != pad("99", 136) {
		t.Fatal(evs[0].KV)
	}
	ss.expect("")
	if srv.State() != StateEstablished || attrOf(c, "remote_qp_num") != "333" {
		t.Fatal(srv.State(), c.Attr())
	}
	// Rejected, and no listener: unreachable with the SIDR status.
	c2 := cs.dial(PSUDP, "10.0.0.2", 7174)
	cs.do(c2, "connect")
	w.net.flush()
	ss.events()
	ss.do(ss.lastMade(), "reject")
	w.net.flush()
	cs.expect(fmt.Sprintf("unreachable:%d:%d", c2.Num, SIDRReject))
	c3 := cs.dial(PSUDP, "10.0.0.2", 1)
	cs.do(c3, "connect")
	w.net.flush()
	cs.expect(fmt.Sprintf("unreachable:%d:%d", c3.Num, SIDRUnsupported))
	// Nobody answers: the SIDR_REQ is retried, then unreachable.
	c4 := cs.dial(PSUDP, "10.0.0.99", 1)
	cs.do(c4, "connect")
	w.clk.Advance(time.Duration(maxCMRetries+1) * ibTime(cmResponseTimeout))
	cs.expect(fmt.Sprintf("unreachable:%d:-110", c4.Num))
}

// TestDestroyInEveryState: destroying an id tells the peer what the
// kernel's CM would.
func TestDestroyInEveryState(t *testing.T) {
	w := newWorld(t)
	ss, cs := w.wireSide("10.0.0.2"), w.wireSide("10.0.0.1")
	l := ss.listen(PSTCP, 5, "")

	// req_sent: REJ (timeout) → the passive id is rejected.
	c := cs.dial(PSTCP, "10.0.0.2", 5)
	cs.do(c, "connect qp_num=1")
	w.net.flush()
	ss.events()
	srv := ss.lastMade()
	c.Destroy()
	w.net.flush()
	ss.expect(fmt.Sprintf("rejected:%d:%d", srv.Num, RejTimeout))
	cs.expect("")

	// req_rcvd: REJ (consumer) → the active id is rejected.
	c = cs.dial(PSTCP, "10.0.0.2", 5)
	cs.do(c, "connect qp_num=1")
	w.net.flush()
	ss.events()
	ss.lastMade().Destroy()
	w.net.flush()
	cs.expect(fmt.Sprintf("rejected:%d:28", c.Num))

	// rep_sent: REJ → the active id (rep_rcvd) is rejected.
	c = cs.dial(PSTCP, "10.0.0.2", 5)
	cs.do(c, "connect qp_num=1")
	w.net.flush()
	ss.events()
	srv = ss.lastMade()
	ss.do(srv, "accept qp_num=2")
	w.net.flush()
	cs.expect(fmt.Sprintf("connect_response:%d:0", c.Num))
	srv.Destroy()
	w.net.flush()
	cs.expect(fmt.Sprintf("rejected:%d:28", c.Num))

	// rep_rcvd: REJ → the passive id (rep_sent) is rejected.
	c = cs.dial(PSTCP, "10.0.0.2", 5)
	cs.do(c, "connect qp_num=1")
	w.net.flush()
	ss.events()
	srv = ss.lastMade()
	ss.do(srv, "accept qp_num=2")
	w.net.flush()
	cs.events()
	c.Destroy()
	w.net.flush()
	ss.expect(fmt.Sprintf("rejected:%d:28", srv.Num))

	// established: DREQ → the peer is disconnected; the destroyed id
	// answers the peer's DREP from its timewait.
	c = cs.dial(PSTCP, "10.0.0.2", 5)
	srv = connectPair(t, w, cs, ss, c)
	c.Destroy()
	w.net.flush()
	ss.expect(fmt.Sprintf("disconnected:%d:0", srv.Num))
	ss.do(srv, "disconnect")
	w.net.flush()
	if counter(cs.a, "timewait_ids") != "1" || counter(cs.a, "drep_recv") != "1" {
		t.Fatal(cs.a.CountersText())
	}
	w.clk.Advance(3 * time.Second)
	ss.expect(fmt.Sprintf("timewait_exit:%d:0", srv.Num))
	cs.expect("")
	if counter(cs.a, "timewait_ids") != "0" {
		t.Fatal(cs.a.CountersText())
	}

	// dreq_rcvd: DREP.
	c = cs.dial(PSTCP, "10.0.0.2", 5)
	srv = connectPair(t, w, cs, ss, c)
	cs.do(c, "disconnect")
	w.net.flush()
	ss.events()
	srv.Destroy()
	w.net.flush()
	cs.expect(fmt.Sprintf("disconnected:%d:0", c.Num))

	// listen: the listener goes, new requests find none.
	l.Destroy()
	c = cs.dial(PSTCP, "10.0.0.2", 5)
	cs.do(c, "connect qp_num=1")
	w.net.flush()
	cs.expect(fmt.Sprintf("rejected:%d:8", c.Num))
	if ss.a.ListenersText(0) != "" {
		t.Fatal(ss.a.ListenersText(0))
	}
	// Every id destroyed twice is fine; port 5 is free again.
	l.Destroy()
	l2 := ss.newID(PSTCP)
	ss.do(l2, "bind addr=0.0.0.0 port=5")
}

func TestCommandErrors(t *testing.T) {
	w := newWorld(t)
	s := w.localSide()
	id := s.newID(PSTCP)
	for _, c := range []struct {
		cmd   string
		errno syscall.Errno
	}{
		{"", syscall.EINVAL},
		{"frobnicate", syscall.EINVAL},
		{"bind addr=10.9.9.9", syscall.EADDRNOTAVAIL},
		{"bind port=5", syscall.EINVAL},
		{"bind addr=127.0.0.1 port=70000", syscall.EINVAL},
		{"bind addr=127.0.0.1 bogus=1", syscall.EINVAL},
		{"resolve_route", syscall.EINVAL},
		{"connect qp_num=1", syscall.EINVAL},
		{"establish", syscall.EINVAL},
		{"accept qp_num=1", syscall.EINVAL},
		{"disconnect", syscall.ENOTCONN},
		{"notify", syscall.EINVAL},
		{"set_option tos=300", syscall.EINVAL},
		{"migrate channel=99", syscall.ENOENT},
		{"resolve_addr dst=nothere", syscall.EINVAL},
	} {
		before := id.Attr()
		err := id.Do(c.cmd)
		if device.Errno(err) != c.errno {
			t.Errorf("%q: %v, want %v", c.cmd, err, c.errno)
		}
		if id.Attr() != before {
			t.Errorf("%q changed the id", c.cmd)
		}
	}
	s.do(id, "bind addr=127.0.0.1 port=5")
	other := s.newID(PSTCP)
	if err := other.Do("bind addr=0.0.0.0 port=5"); device.Errno(err) != syscall.EADDRINUSE {
		t.Fatalf("overlapping bind: %v", err)
	}
	udp := s.newID(PSUDP)
	s.do(udp, "bind addr=0.0.0.0 port=5") // another port space
	eph := s.newID(PSTCP)
	s.do(eph, "bind addr=127.0.0.1")
	if p := attrOf(eph, "src_port"); p < "32768" || p > "60999" {
		t.Fatalf("ephemeral port %s", p)
	}
	if err := s.a.DestroyChannel(s.ch); device.Errno(err) != syscall.EBUSY {
		t.Fatalf("destroy a used channel: %v", err)
	}
	ch2, _ := s.a.NewChannel(1000)
	s.do(id, fmt.Sprintf("migrate channel=%d", ch2.Num))
	if s.a.ChannelIDs(ch2) != 1 {
		t.Fatal("migrate")
	}
}

// TestMigrateCounts: attr's events_queued counts what is queued for an id
// to read (a listener's connect requests on the listener), and
// migrated_after keeps that count at a migrate; the library reads the old
// channel until it has seen that many of the id's records.
func TestMigrateCounts(t *testing.T) {
	w := newWorld(t)
	s := w.localSide()
	l := s.listen(PSTCP, 7472, "")
	c := s.dial(PSTCP, "127.0.0.1", 7472) // addr_resolved, route_resolved
	s.do(c, "connect qp_num=1")
	w.net.flush()
	s.expect(fmt.Sprintf("connect_request:%d:0", s.lastMade().Num))
	for _, x := range []struct {
		id   *ID
		want string
	}{{c, "2"}, {l, "1"}, {s.lastMade(), "0"}} {
		if got := attrOf(x.id, "events_queued"); got != x.want {
			t.Fatalf("id %d: events_queued=%s, want %s", x.id.Num, got, x.want)
		}
	}
	ch2, _ := s.a.NewChannel(1000)
	s.do(l, fmt.Sprintf("migrate channel=%d", ch2.Num))
	if attrOf(l, "migrated_after") != "1" || attrOf(c, "migrated_after") != "0" {
		t.Fatalf("after migrate:\n%s", l.Attr())
	}
}

func TestIDLimits(t *testing.T) {
	w := newWorld(t)
	s := w.localSide(func(c *Config) { c.MaxIDs = 10; c.UserShare = 50 })
	for range 5 {
		s.newID(PSTCP)
	}
	if _, err := s.a.Create(1000, s.ch, PSTCP, qp.TypeRC); device.Errno(err) != syscall.ENOMEM {
		t.Fatalf("past the user's share: %v", err)
	}
	root, _ := s.a.NewChannel(0)
	for range 5 {
		if _, err := s.a.Create(0, root, PSTCP, qp.TypeRC); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.a.Create(0, root, PSTCP, qp.TypeRC); device.Errno(err) != syscall.ENOMEM {
		t.Fatalf("past the device's limit: %v", err)
	}
}

func TestRecord(t *testing.T) {
	e := Event{Name: EvConnectRequest, ID: 3, Status: 0, KV: []string{"listen_id=1", "private_data=" + strings.Repeat("ab", 196)}}
	r := e.Record()
	if len(r) != RecordSize || r[RecordSize-1] != '\n' || r[RecordSize-2] != ' ' {
		t.Fatal("record shape")
	}
	m, err := ParseRecord(r[:])
	if err != nil || m["event"] != "connect_request" || m["id"] != "3" || m["listen_id"] != "1" {
		t.Fatal(m, err)
	}
}

// FuzzHandleMAD: whatever arrives on QP1, the agent neither panics nor
// leaves more than its bounds.
func FuzzHandleMAD(f *testing.F) {
	var hdr [CMAHdrLen]byte
	PutCMAHdr(hdr[:], CMAHdr{Src: netip.MustParseAddrPort("10.0.0.1:1"), Dst: netip.MustParseAddrPort("10.0.0.2:5")})
	req := &REQ{LocalCommID: 1, ServiceID: ServiceID(PSTCP, 5), LocalQPN: 1}
	copy(req.PrivateData[:], hdr[:])
	sreq := &SIDRReq{RequestID: 1, ServiceID: ServiceID(PSUDP, 5)}
	copy(sreq.PrivateData[:], hdr[:])
	for _, m := range []Msg{req, sreq, &REP{}, &RTU{}, &DREQ{}, &REJ{}, &MRA{}, &DREP{}, &SIDRRep{}} {
		b := Encode(1, m)
		f.Add(b[:])
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		w := newWorld(t)
		s := w.wireSide("10.0.0.2", func(c *Config) { c.MaxIDs = 8 })
		s.listen(PSTCP, 5, "")
		s.listen(PSUDP, 5, "")
		for range 3 {
			s.a.HandleMAD([16]byte{15: 1}, b)
		}
		w.clk.Advance(time.Hour)
		if len(s.a.ids) > 8 {
			t.Fatal("ids beyond the bound")
		}
	})
}

func TestWildcardListeners(t *testing.T) {
	for _, c := range []struct {
		any    string
		afonly bool
		dst    string
		takes  bool
	}{
		{"0.0.0.0", false, "10.0.0.1", true},
		{"0.0.0.0", false, "fd00::1", false},
		{"::", false, "fd00::1", true},
		{"::", false, "10.0.0.1", true},
		{"::", true, "10.0.0.1", false},
	} {
		if got := wildcardTakes(netip.MustParseAddr(c.any), c.afonly, netip.MustParseAddr(c.dst)); got != c.takes {
			t.Errorf("%s afonly=%v for %s: %v", c.any, c.afonly, c.dst, got)
		}
	}
	w := newWorld(t)
	s := w.localSide(func(c *Config) { c.MaxChannels = 8 })
	// uid 1000 has one channel (the side's) of its share of 2.
	if _, err := s.a.NewChannel(1000); err != nil {
		t.Fatal(err)
	}
	if _, err := s.a.NewChannel(1000); device.Errno(err) != syscall.ENOMEM {
		t.Fatalf("channel past the user's share: %v", err)
	}
}

// FuzzIDCommand: whatever a user writes to cm/I/ctl, in whatever state,
// is a command or an error; nothing panics and the tables stay bounded.
func FuzzIDCommand(f *testing.F) {
	for _, s := range []string{
		"bind addr=10.0.0.2 port=5", "resolve_addr dst=10.0.0.2 port=5", "resolve_route",
		"listen backlog=4", "connect qp_num=17 psn=1 private_data=00ff", "accept qp_num=18 psn=2",
		"reject private_data=zz", "disconnect", "establish", "notify", "set_option tos=999",
		"migrate channel=7", "bind addr=::1 port=65536", "connect", "",
	} {
		f.Add(s, "resolve_route")
	}
	f.Fuzz(func(t *testing.T, first, second string) {
		w := newWorld(t)
		s := w.wireSide("10.0.0.2", func(c *Config) { c.MaxIDs = 8 })
		l := s.listen(PSTCP, 5, "")
		id := s.newID(PSTCP)
		for _, cmd := range []string{first, second, first} {
			id.Do(cmd)
			l.Do(cmd)
		}
		w.clk.Advance(time.Hour)
		if len(s.a.ids) > 8 {
			t.Fatal("ids beyond the bound")
		}
	})
}

// TestBindPortZero: a bind to port 0 takes its ephemeral port at the bind,
// as the kernel's rdma_bind_addr (cma_alloc_port) does, on a wildcard and
// on a specific address: attr shows it before listen, listen keeps it, a
// request to it reaches the listener, and a second bind gets another one.
// qperf's server reads the port right after the bind and sends it to its
// client before it listens.
func TestBindPortZero(t *testing.T) {
	w := newWorld(t)
	s := w.localSide()
	seen := map[string]bool{}
	for _, addr := range []string{"0.0.0.0", "::", "127.0.0.1", "0.0.0.0"} {
		l := s.newID(PSTCP)
		s.do(l, "bind addr="+addr+" port=0")
		p := attrOf(l, "src_port")
		if n, err := strconv.Atoi(p); err != nil || n < ephemeralLow || n > ephemeralHigh {
			t.Fatalf("bind %s port=0: src_port=%q before listen, want %d-%d", addr, p, ephemeralLow, ephemeralHigh)
		}
		if seen[p] {
			t.Fatalf("bind %s port=0: port %s again", addr, p)
		}
		seen[p] = true
		if addr != "::" {
			if err := s.newID(PSTCP).Do("bind addr=127.0.0.1 port=" + p); device.Errno(err) != syscall.EADDRINUSE {
				t.Fatalf("a bind to %s's port %s: %v, want EADDRINUSE", addr, p, err)
			}
		}
		s.do(l, "listen")
		if got := attrOf(l, "src_port"); got != p {
			t.Fatalf("listen moved the port from %s to %s", p, got)
		}
		if addr == "::" {
			continue
		}
		port, _ := strconv.Atoi(p)
		c := s.dial(PSTCP, "127.0.0.1", port)
		s.do(c, "connect qp_num=1")
		w.net.flush()
		s.expect(fmt.Sprintf("connect_request:%d:0", s.lastMade().Num))
	}
}

// rdma_resolve_addr to a multicast group resolves (before
// rdma_join_multicast) to the group's MGID: ::ffff:a.b.c.d on the wire,
// the IPoIB mapping with rdma_cm's signature on a local mount; an IPv6
// group to its own address (the route's dgid).
func TestResolveMulticast(t *testing.T) {
	w := newWorld(t)
	for _, c := range []struct {
		s         *side
		dst, dgid string
	}{
		{w.localSide(), "224.1.2.3", "ff12:401b:ffff:1::1:203"},
		{w.wireSide("10.0.0.5"), "224.1.2.3", "::ffff:224.1.2.3"},
		{w.localSide(), "ff0e::77", "ff0e::77"},
	} {
		id := c.s.newID(PSUDP)
		c.s.do(id, "resolve_addr dst="+c.dst)
		c.s.expect(fmt.Sprintf("addr_resolved:%d:0", id.Num))
		c.s.do(id, "resolve_route")
		c.s.expect(fmt.Sprintf("route_resolved:%d:0", id.Num))
		if got := attrOf(id, "dgid"); got != c.dgid {
			t.Fatalf("%s: dgid %s, want %s", c.dst, got, c.dgid)
		}
	}
}
