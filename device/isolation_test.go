package device

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"rdmafs/qp"
	"rdmafs/roce"
)

// The tests of isolation between the users of one device (issue 13,
// RELIABILITY.md "Isolation between users").

// intruder is another user's QP on the env's first device, with its own
// PD, CQ and buffer, connected to victim as an attacker would connect it:
// dest_qp_num the victim's QPN, sq_psn the PSN the victim expects next
// (what its counters and attr let a reader work out).
type intruder struct {
	q   *QP
	cq  *CQ
	buf *MR
}

const intruderUID Owner = 65534

func (e *env) intruder(victim *QP) *intruder {
	e.t.Helper()
	d := e.d
	pd, err := d.AllocPD(intruderUID)
	if err != nil {
		e.t.Fatal(err)
	}
	cq, err := d.CreateCQ(intruderUID, qp.CreateCQ{CQE: 64})
	if err != nil {
		e.t.Fatal(err)
	}
	buf, err := d.RegMR(intruderUID, qp.CreateMR{PD: pd.Handle, Length: 8192, Access: rwAccess})
	if err != nil {
		e.t.Fatal(err)
	}
	q, err := d.CreateQP(intruderUID, qp.CreateQP{PD: pd.Handle, Type: victim.Type, SendCQ: cq.Handle, RecvCQ: cq.Handle,
		Cap: qp.Cap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		e.t.Fatal(err)
	}
	e.quiesce()
	victim.dev.mu.Lock()
	psn := victim.resp.psn
	victim.dev.mu.Unlock()
	over := fmt.Sprintf("sq_psn=%d", psn)
	if victim.Type == qp.TypeRC {
		// Few and quick retries: the intruder is answered by nobody.
		over += " timeout=8 retry_cnt=1"
	}
	e.connectX(q, victim.QPN, over)
	return &intruder{q: q, cq: cq, buf: buf}
}

// A third QP, another user's, that names a connected QP's QPN with the PSN
// it expects and an rkey of its MR gets nowhere: the victim drops its
// packets before its transport sees them (no PSN advance, no NAK, no ERR),
// counts them, and its real peer's next WRITE lands. A READ by the
// intruder returns nothing either.
func TestForeignQPCannotReachConnectedQP(t *testing.T) {
	for _, typ := range []qp.Type{qp.TypeRC, qp.TypeUC} {
		t.Run(typ.String(), func(t *testing.T) {
			e := newEnv(t)
			a, b, acq, bcq := e.pair(typ)
			src := e.mr(8192, 0)
			dst := e.mr(8192, rwAccess)
			fill(src.Mem(), 3)
			fill(dst.Mem(), 99) // the victim's secret
			secret := append([]byte(nil), dst.Mem()...)
			x := e.intruder(b)
			b.dev.mu.Lock()
			collides := b.peerPortLocked(udpSourcePort(x.q.QPN))
			b.dev.mu.Unlock()
			if (*wireFlag) && collides {
				// Across the wire the sender is known by its UDP source
				// port alone, a 14-bit hash: the intruder's is one the
				// victim takes from its peer.
				t.Skipf("qp %d sends from a port qp %d takes from its peer", x.q.QPN, b.QPN)
			}
			before := e.qpCounters(b)
			fill(x.buf.Mem()[:4096], 200)

			e.postSend(x.q,
				fmt.Sprintf("opcode=rdma_write wr_id=1 send_flags=signaled sge=%d:0:64 remote_addr=0 rkey=%d", x.buf.LKey, dst.RKey),
				fmt.Sprintf("opcode=rdma_write wr_id=2 send_flags=signaled sge=%d:0:3000 remote_addr=1000 rkey=%d", x.buf.LKey, dst.RKey))
			if typ == qp.TypeRC {
				e.postSend(x.q, fmt.Sprintf("opcode=rdma_read wr_id=3 send_flags=signaled sge=%d:4096:4096 remote_addr=0 rkey=%d", x.buf.LKey, dst.RKey))
			}
			e.quiesce()
			sameBytes(t, dst.Mem(), secret)
			after := e.qpCounters(b)
			if after.ForeignDropped == 0 || after.ForeignDropped-before.ForeignDropped != after.ForeignDropped {
				t.Fatalf("victim counted %d foreign packets (before %d)", after.ForeignDropped, before.ForeignDropped)
			}
			if after.PacketsRecv != before.PacketsRecv || after.PacketsSent != before.PacketsSent ||
				after.SeqErrors != before.SeqErrors || after.DuplicateReqs != before.DuplicateReqs {
				t.Fatalf("the intruder reached the victim's transport:\nbefore %+v\nafter  %+v", before, after)
			}
			if n := e.d.Counters.ForeignPacketsDropped.Load(); n < after.ForeignDropped {
				t.Fatalf("device foreign_packets_dropped %d < the victim's %d", n, after.ForeignDropped)
			}
			e.state(b, qp.StateRTS)
			if typ == qp.TypeRC {
				// Nobody answers the intruder: it retries and gives up, and
				// its READ brought back none of the victim's bytes.
				e.clk.Advance(qp.AckTimeout(8))
				e.quiesce()
				e.clk.Advance(qp.AckTimeout(8))
				got := e.poll(x.cq)
				if len(got) == 0 || !strings.Contains(got[0], "status=retry_exc_err") {
					t.Fatalf("intruder completions %q", got)
				}
				for _, v := range x.buf.Mem()[4096:] {
					if v != 0 {
						t.Fatalf("the intruder's READ returned data")
					}
				}
			}

			// The real peer's next WRITE lands where it should.
			e.postSend(a, fmt.Sprintf("opcode=rdma_write wr_id=7 send_flags=signaled sge=%d:0:2000 remote_addr=500 rkey=%d", src.LKey, dst.RKey))
			e.expect(acq, sendWC(7, "success", "rdma_write", a, 2000))
			e.expect(bcq)
			sameBytes(t, dst.Mem()[500:2500], src.Mem()[:2000])
			sameBytes(t, dst.Mem()[:500], secret[:500])
			sameBytes(t, dst.Mem()[2500:], secret[2500:])
			e.healthy(a, b)
			e.quiesce()
		})
	}
}

// A foreign QP cannot answer for the peer either: an ACK that the
// intruder's QP sends to a requester (here built as its responder would
// build it, with the PSN of the requester's outstanding WRITE) does not
// complete that WRITE; the peer's real ACK does.
func TestForeignQPCannotAnswerForPeer(t *testing.T) {
	if *wireFlag {
		t.Skip("a loopback test: the packet is handed to loopback as the intruder's")
	}
	e := newEnv(t)
	a, b, acq, bcq := e.pair(qp.TypeRC)
	src, dst := e.mr(8192, 0), e.mr(8192, rwAccess)
	fill(src.Mem(), 5)
	// b's answers are held: a has a WRITE outstanding.
	l := e.link(func(p *packet) linkAction {
		if p.srcQPN == b.QPN {
			return hold
		}
		return deliver
	})
	e.postSend(a, fmt.Sprintf("opcode=rdma_write wr_id=1 send_flags=signaled sge=%d:0:100 remote_addr=0 rkey=%d", src.LKey, dst.RKey))
	x := e.intruder(a)
	e.quiesce()
	d := x.q.dev
	d.mu.Lock()
	ack := d.engines[0].pool.get()
	ack.Opcode = roce.TransportRC | roce.OpAcknowledge
	ack.setPSN(a.req.psn.Add(^uint32(0)))
	ack.Syndrome = 0x1F
	ack.sgid, ack.dgid = d.cfg.GID, a.attr.AH.DGID
	ack.srcQPN, ack.DestQP = x.q.QPN, a.QPN
	injectLocked(d, ack)
	d.mu.Unlock()
	if got := e.poll(acq); len(got) != 0 {
		t.Fatalf("a completed %q on the intruder's word", got)
	}
	e.release(l, -1)
	e.link(nil)
	e.expect(acq, sendWC(1, "success", "rdma_write", a, 100))
	e.expect(bcq)
	sameBytes(t, dst.Mem()[:100], src.Mem()[:100])
	if e.qpCounters(a).ForeignDropped != 1 {
		t.Fatalf("a did not count the intruder's ACK")
	}
	e.healthy(a, b)
}

// Keys are capabilities: nothing a user sees predicts another object's
// key. Consecutive registrations give keys with no fixed stride (in the
// whole key or in its tag), the tag is not the handle, and two devices
// doing the same registrations hand out different keys.
func TestKeysUnpredictable(t *testing.T) {
	const n = 64
	keysOf := func(e *env) (mrs, mws []uint32, handles []uint32) {
		for i := 0; i < n; i++ {
			mr := e.mr(4096, rwAccess)
			mrs = append(mrs, mr.LKey)
			handles = append(handles, mr.Handle)
			if mr.RKey != mr.LKey {
				t.Fatalf("rkey %#x lkey %#x", mr.RKey, mr.LKey)
			}
			mws = append(mws, e.mw(2).RKey)
		}
		return
	}
	strides := func(ks []uint32, shift uint) int {
		seen := map[uint32]bool{}
		for i := 1; i < len(ks); i++ {
			seen[ks[i]>>shift-ks[i-1]>>shift] = true
		}
		return len(seen)
	}
	e1, e2 := newEnvOn(t, false), newEnvOn(t, false)
	mrs1, mws1, handles := keysOf(e1)
	mrs2, mws2, _ := keysOf(e2)
	all := map[uint32]bool{}
	for _, ks := range [][]uint32{mrs1, mws1} {
		for _, k := range ks {
			if all[k] || k>>8 == 0 {
				t.Fatalf("key %#x repeated or with tag 0", k)
			}
			all[k] = true
		}
		// Random strides: essentially all of the n-1 differ.
		if s, s8 := strides(ks, 0), strides(ks, 8); s < n-4 || s8 < n-4 {
			t.Fatalf("keys %x have only %d distinct strides (%d in their tags)", ks, s, s8)
		}
	}
	sameTag, sameKey := 0, 0
	for i := range mrs1 {
		if mrs1[i]>>8 == handles[i] {
			sameTag++
		}
		if mrs1[i] == mrs2[i] || mws1[i] == mws2[i] {
			sameKey++
		}
	}
	if sameTag > 1 || sameKey > 1 {
		t.Fatalf("%d tags equal their handles, %d keys equal on two devices", sameTag, sameKey)
	}
}

// A key that was freed never names a later object: 5000 registrations
// after a deregistration hand out 5000 new keys, none of them the old
// one, and the old key resolves to nothing (lkey and rkey alike).
func TestStaleKeyNeverResolves(t *testing.T) {
	e := newEnvOn(t, false)
	d := e.d
	cq := e.cq(4)
	q := e.qp(qpOpts{scq: cq, rcq: cq})
	old := e.mr(4096, rwAccess)
	stale := old.LKey
	if err := old.Dereg(); err != nil {
		t.Fatal(err)
	}
	seen := map[uint32]bool{stale: true, stale &^ 0xFF: true}
	for i := 0; i < 5000; i++ {
		mr := e.mr(4096, rwAccess)
		if seen[mr.LKey] || seen[mr.LKey&^0xFF] {
			t.Fatalf("registration %d: key %#x handed out before", i, mr.LKey)
		}
		seen[mr.LKey], seen[mr.LKey&^0xFF] = true, true
		d.mu.Lock()
		_, fl := d.lkeyLocked(e.pd, stale, 0, 1, 0)
		_, fr := d.rkeyLocked(q, stale, 0, 1, qp.AccessRemoteRead)
		d.mu.Unlock()
		if fl != faultKey || fr != faultKey {
			t.Fatalf("stale key %#x resolves: %v %v", stale, fl, fr)
		}
		if i%2 == 0 {
			mr.Dereg()
		}
	}
}

// The tag permutation is one: a long run of the counter gives as many
// distinct tags, all in 24 bits.
func TestTagPermutationIsOneToOne(t *testing.T) {
	var p tagPerm
	p.init()
	const n = 1 << 16
	seen := make(map[uint32]bool, n)
	for c := uint32(0); c < n; c++ {
		tag := p.apply(c * 251)
		if tag >= tagSpace || seen[tag] {
			t.Fatalf("counter %d: tag %#x out of range or repeated", c*251, tag)
		}
		seen[tag] = true
	}
}

// forger sends hand-made RoCEv2 datagrams from a plain UDP socket, as any
// local user can: bound to an address and port of its choice, DF set, so
// that the kernel writes IP ID 0 and the ICRC can be computed beforehand.
type forger struct {
	t    testing.TB
	conn *net.UDPConn
	raw  int // a raw socket instead of conn (newRawForger)
	from net.UDPAddr
}

// newRawForger is a forger that writes whole datagrams through a raw
// socket, from any address and port, as a user with CAP_NET_RAW can.
func newRawForger(t testing.TB, from *net.UDPAddr) *forger {
	t.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_RAW)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return &forger{t: t, raw: fd, from: *from}
}

func newForger(t testing.TB, from *net.UDPAddr) *forger {
	t.Helper()
	conn, err := net.ListenUDP("udp4", from)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	setDF(t, conn)
	return &forger{t: t, conn: conn, from: *from}
}

func (f *forger) send(to *Device, rp roce.Packet) {
	f.t.Helper()
	ib, err := rp.AppendIB(nil)
	if err != nil {
		f.t.Fatal(err)
	}
	src := f.from.AddrPort().Addr()
	dg, err := roce.BuildIPv4(src, to.Config().Addr, uint16(f.from.Port), ib, 0, 0, 64)
	if err != nil {
		f.t.Fatal(err)
	}
	before := to.Counters.WirePacketsRecv.Load()
	if f.conn == nil {
		err = unix.Sendto(f.raw, dg, 0, &unix.SockaddrInet4{Addr: to.Config().Addr.As4()})
	} else {
		_, err = f.conn.WriteToUDP(dg[28:], &net.UDPAddr{IP: to.Config().Addr.AsSlice(), Port: roce.UDPPort})
	}
	if err != nil {
		f.t.Fatal(err)
	}
	// wireSettle counts the devices' own packets only: wait until the
	// receive loop has taken this one (dropped or delivered).
	for deadline := time.Now().Add(5 * time.Second); to.Counters.WirePacketsRecv.Load() == before; {
		if time.Now().After(deadline) {
			f.t.Fatal("the forged datagram never reached the device")
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// On the wire a connected QP takes packets only from its peer's address
// and from the UDP source port its peer sends from (rxe's and rdmafs's:
// derived from the peer's QPN). A forged WRITE from the peer's address but
// another port, with the right PSN and rkey, is dropped and counted and
// changes nothing. The same WRITE from the peer's own port lands: RoCEv2
// has no authentication, and this is what a local user who can send UDP
// from the peer's address can still do (RELIABILITY.md).
func TestWireForeignSourcePortDropped(t *testing.T) {
	ea, eb := newWirePair(t)
	envs := []*env{ea, eb}
	a, b, acq, bcq := wireQPs(ea, eb, qp.TypeRC, "", "")
	dst := eb.mr(8192, rwAccess)
	fill(dst.Mem(), 17)
	secret := append([]byte(nil), dst.Mem()...)
	eb.d.mu.Lock()
	psn := b.resp.psn
	eb.d.mu.Unlock()
	write := roce.Packet{Opcode: roce.Opcode(roce.TransportRC | roce.OpWriteOnly), PKey: 0xFFFF, DestQP: b.QPN, PSN: uint32(psn),
		VA: 0, RKey: dst.RKey, DMALen: 16, Payload: []byte("forged forged!!!")}
	peer := ea.d.Config().Addr
	port := udpSourcePort(a.QPN)

	f := newForger(t, &net.UDPAddr{IP: peer.AsSlice(), Port: int(port ^ 0x155)})
	f.send(eb.d, write)
	wireSettle(t, envs...)
	sameBytes(t, dst.Mem(), secret)
	cb := b.CountersSnapshot()
	if cb.ForeignDropped != 1 || cb.PacketsRecv != 0 || cb.PacketsSent != 0 {
		t.Fatalf("victim counters %+v", cb)
	}
	if n := eb.d.Counters.ForeignPacketsDropped.Load(); n != 1 {
		t.Fatalf("device foreign_packets_dropped %d", n)
	}
	eb.state(b, qp.StateRTS)
	wexpect(t, bcq, envs)

	// a still writes to b.
	src := ea.mr(4096, 0)
	fill(src.Mem(), 3)
	ea.postSend(a, fmt.Sprintf("opcode=rdma_write wr_id=1 send_flags=signaled sge=%d:0:64 remote_addr=100 rkey=%d", src.LKey, dst.RKey))
	wexpect(t, acq, envs, sendWC(1, "success", "rdma_write", a, 64))
	sameBytes(t, dst.Mem()[100:164], src.Mem()[:64])

	// The peer's device holds its QP's source port (it sends from a UDP
	// socket bound to it): nobody else can bind it.
	from := &net.UDPAddr{IP: peer.AsSlice(), Port: int(port)}
	if c, err := net.ListenUDP("udp4", from); err == nil {
		c.Close()
		t.Fatalf("%v could be bound beside the device that sends from it", from)
	} else if !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatal(err)
	}
	// What is left: from the peer's own address and port, written through
	// a raw socket, a forger that knows the PSN and the rkey gets in.
	eb.d.mu.Lock()
	write.PSN = uint32(b.resp.psn)
	eb.d.mu.Unlock()
	f2 := newRawForger(t, from)
	f2.send(eb.d, write)
	wireSettle(t, envs...)
	if string(dst.Mem()[:16]) != "forged forged!!!" {
		t.Fatalf("the forgery from the peer's port did not land: the test no longer shows the limit RELIABILITY.md states")
	}
	ea.events()
	eb.events()
}

// Loosened for peers that choose their source ports otherwise: with
// Config.AnySourcePort the port is not checked (the address still is).
func TestWireAnySourcePort(t *testing.T) {
	ea, eb := newWirePair(t, func(c *Config) { c.AnySourcePort = true })
	envs := []*env{ea, eb}
	a, b, _, _ := wireQPs(ea, eb, qp.TypeRC, "", "")
	dst := eb.mr(4096, rwAccess)
	eb.d.mu.Lock()
	psn := b.resp.psn
	eb.d.mu.Unlock()
	f := newForger(t, &net.UDPAddr{IP: ea.d.Config().Addr.AsSlice(), Port: int(udpSourcePort(a.QPN) ^ 0x155)})
	f.send(eb.d, roce.Packet{Opcode: roce.Opcode(roce.TransportRC | roce.OpWriteOnly), PKey: 0xFFFF, DestQP: b.QPN, PSN: uint32(psn),
		RKey: dst.RKey, DMALen: 4, Payload: []byte("peer")})
	wireSettle(t, envs...)
	if string(dst.Mem()[:4]) != "peer" || b.CountersSnapshot().ForeignDropped != 0 {
		t.Fatalf("any-source-port: %q %+v", dst.Mem()[:4], b.CountersSnapshot())
	}
	ea.events()
	eb.events()
}

// setDF makes the kernel send conn's datagrams with DF (and so IP ID 0),
// as rdmafs and rxe do, so that a test can compute their ICRC beforehand.
func setDF(t testing.TB, conn *net.UDPConn) {
	t.Helper()
	rc, err := conn.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO)
	}); err != nil || serr != nil {
		t.Fatal(err, serr)
	}
}
