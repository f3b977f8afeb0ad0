package link

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"rdmafs/roce"
)

func ibOf(t testing.TB, p roce.Packet) []byte {
	t.Helper()
	p.PKey = 0xFFFF
	b, err := p.AppendIB(nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The lengths a run's first packet implies, from its headers alone.
func TestRunSizes(t *testing.T) {
	mids := []int{12 + 256 + 4, 12 + 512 + 4, 12 + 1024 + 4, 12 + 2048 + 4, 12 + 4096 + 4}
	for _, c := range []struct {
		name string
		p    roce.Packet
		want []int
	}{
		{"WRITE_ONLY 8 B", roce.Packet{Opcode: roce.OpWriteOnly, DMALen: 8, Payload: make([]byte, 8)}, []int{12 + 16 + 8 + 4}},
		{"WRITE_ONLY 5 B, padded", roce.Packet{Opcode: roce.OpWriteOnly, DMALen: 5, Payload: make([]byte, 5)}, []int{12 + 16 + 8 + 4}},
		{"WRITE_ONLY_WITH_IMMEDIATE 0 B", roce.Packet{Opcode: roce.OpWriteOnlyImm}, []int{12 + 16 + 4 + 4}},
		{"WRITE_ONLY beyond any MTU", roce.Packet{Opcode: roce.OpWriteOnly, DMALen: 8192, Payload: make([]byte, 8)}, nil},
		{"WRITE_MIDDLE", roce.Packet{Opcode: roce.OpWriteMiddle, Payload: make([]byte, 256)}, mids},
		{"SEND_MIDDLE", roce.Packet{Opcode: roce.OpSendMiddle, Payload: make([]byte, 256)}, mids},
		{"READ_RESPONSE_MIDDLE", roce.Packet{Opcode: roce.OpReadResponseMiddle, Payload: make([]byte, 256)}, mids},
		{"UC WRITE_MIDDLE", roce.Packet{Opcode: roce.TransportUC | roce.OpWriteMiddle, Payload: make([]byte, 256)}, mids},
		{"READ_REQUEST", roce.Packet{Opcode: roce.OpReadRequest, DMALen: 1 << 20}, []int{12 + 16 + 4}},
		{"ACKNOWLEDGE", roce.Packet{Opcode: roce.OpAcknowledge}, []int{12 + 4 + 4}},
		{"FETCH_ADD", roce.Packet{Opcode: roce.OpFetchAdd}, []int{12 + 28 + 4}},
		{"ATOMIC_WRITE", roce.Packet{Opcode: roce.OpAtomicWrite, DMALen: 8, Payload: make([]byte, 8)}, []int{12 + 16 + 8 + 4}},
		{"SEND_ONLY: nothing names its length", roce.Packet{Opcode: roce.OpSendOnly, Payload: make([]byte, 8)}, nil},
		{"WRITE_FIRST: its payload is the MTU, not its RETH", roce.Packet{Opcode: roce.OpWriteFirst, DMALen: 1 << 16, Payload: make([]byte, 256)}, nil},
		{"UD SEND_ONLY", roce.Packet{Opcode: roce.TransportUD | roce.OpSendOnly, QKey: 1, Payload: make([]byte, 8)}, nil},
	} {
		ib := ibOf(t, c.p)
		if got := runSizes(ib, nil); !slices.Equal(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
	for _, b := range [][]byte{nil, {0x0A}, make([]byte, 12), {0xFF, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}} {
		if got := runSizes(b, nil); len(b) < 12+16 && got != nil && roce.Opcode(b[0]) == roce.OpWriteOnly {
			t.Errorf("runSizes(% x) = %v from a truncated RETH", b, got)
		}
	}
}

// setRunID gives the datagram b (as Encode built it; sendUDP numbers them before sealing) the IP ID id, and
// the ICRC that goes with it.
func setRunID(b []byte, id uint16) {
	binary.BigEndian.PutUint16(b[4:6], id)
	n := len(b) - roce.ICRCLen
	binary.LittleEndian.PutUint32(b[n:], roce.ICRC(b[:20], b[20:udpHead], b[udpHead:n]))
}

// encodeRun builds the datagrams of ps as sendUDP hands them to the
// kernel, and the one datagram lo delivers for them (never cut).
func encodeRun(t testing.TB, src, dst [4]byte, ps []roce.Packet) (dgs [][]byte, whole []byte) {
	t.Helper()
	for k, p := range ps {
		b, err := roce.EncapIPv4(append(make([]byte, roce.HeadroomIPv4), ibOf(t, p)...), src, dst, SourcePort(9), 0, 0, ttl)
		if err != nil {
			t.Fatal(err)
		}
		if k > 0 {
			setRunID(b, uint16(k))
		}
		dgs = append(dgs, b)
		if k == 0 {
			whole = append(whole, b[:udpHead]...)
		}
		whole = append(whole, b[udpHead:]...)
	}
	binary.BigEndian.PutUint16(whole[2:4], uint16(len(whole)))
	binary.BigEndian.PutUint16(whole[4:6], 0)
	roce.SetIPv4Checksum(whole[:20])
	binary.BigEndian.PutUint16(whole[24:26], uint16(len(whole)-20))
	return dgs, whole
}

// A run that lo delivers whole comes out of verify as its packets, each
// OK, with the IPv4 and UDP header the kernel would have cut it with; a
// run whose packets the kernel did cut checks as they are.
func TestCoalescedRunSplits(t *testing.T) {
	a := netip.MustParseAddr("127.0.83.1").As4()
	var runs = map[string][]roce.Packet{}
	var w8 []roce.Packet
	for i := range 64 {
		w8 = append(w8, roce.Packet{Opcode: roce.OpWriteOnly, DestQP: 0x12, PSN: uint32(i), DMALen: 8, Payload: bytes.Repeat([]byte{byte(i)}, 8)})
	}
	runs["64 WRITE_ONLY of 8 B"] = w8
	for _, mtu := range pathMTUs {
		var m []roce.Packet
		for i := range min(60000/(mtu+16), maxRunSegs-1) {
			m = append(m, roce.Packet{Opcode: roce.OpWriteMiddle, DestQP: 0x12, PSN: uint32(i), Payload: bytes.Repeat([]byte{byte(i)}, mtu)})
		}
		m = append(m, roce.Packet{Opcode: roce.OpWriteLastImm, DestQP: 0x12, PSN: uint32(len(m)), Payload: []byte("end")})
		runs[fmt.Sprintf("WRITE_MIDDLE×%d at MTU %d, then LAST_WITH_IMMEDIATE", len(m)-1, mtu)] = m
	}
	runs["READ_RESPONSE_MIDDLE, LAST"] = []roce.Packet{
		{Opcode: roce.OpReadResponseMiddle, DestQP: 0x12, PSN: 1, Payload: make([]byte, 1024)},
		{Opcode: roce.OpReadResponseLast, DestQP: 0x12, PSN: 2, Payload: make([]byte, 1000)},
	}
	for name, ps := range runs {
		dgs, whole := encodeRun(t, a, a, ps)
		if !coalescible(dgs[0]) {
			t.Fatalf("%s: the sender would not coalesce it", name)
		}
		w := &WireEndpoint{addr: a, c: &Counters{}}
		out := w.verify([]Datagram{{Raw: whole}})
		if len(out) != len(ps) || w.c.WireCoalescedRecv.Load() != 1 || w.c.WirePacketsRecv.Load() != uint64(len(ps)) {
			t.Fatalf("%s: %d packets out of %d, counters %+v", name, len(out), len(ps), w.c)
		}
		for k, dg := range out {
			want := dgs[k]
			if dg.Status != OK || !dg.Seg || dg.Packet.PSN != ps[k].PSN || !bytes.Equal(dg.Packet.Payload, ps[k].Payload) {
				t.Fatalf("%s: packet %d: %v seg %v psn %d", name, k, dg.Status, dg.Seg, dg.Packet.PSN)
			}
			got := dg.Bytes()
			if !bytes.Equal(got[20:], want[20:]) || binary.BigEndian.Uint16(got[4:6]) != uint16(k) ||
				binary.BigEndian.Uint16(got[2:4]) != uint16(len(want)) {
				t.Fatalf("%s: packet %d is\n% x\nwant\n% x", name, k, got[:udpHead], want[:udpHead])
			}
			// Its header checksum too (ParseIPv4).
			if err := roce.CheckIPv4(got); err != nil {
				t.Fatalf("%s: packet %d: %v", name, k, err)
			}
		}
		// Cut by the kernel (a veth, a NIC): each datagram checks alone.
		w = &WireEndpoint{addr: a, c: &Counters{}}
		var in []Datagram
		for _, b := range dgs {
			b = bytes.Clone(b)
			roce.SetIPv4Checksum(b[:20])
			in = append(in, Datagram{Raw: b})
		}
		for k, dg := range w.verify(in) {
			if dg.Status != OK || dg.Seg || dg.Packet.PSN != ps[k].PSN {
				t.Fatalf("%s, cut: packet %d: %v seg %v", name, k, dg.Status, dg.Seg)
			}
		}
	}
}

// A datagram that only looks coalesced stays one datagram: a WRITE_ONLY
// longer than its RETH says fails its ICRC as a whole (a bad ICRC, not a
// split into packets); a corrupted packet of a run is a bad ICRC of that
// packet alone.
func TestCoalescedRunBad(t *testing.T) {
	a := netip.MustParseAddr("127.0.83.1").As4()
	ps := []roce.Packet{
		{Opcode: roce.OpWriteOnly, DestQP: 0x12, PSN: 1, DMALen: 8, Payload: make([]byte, 8)},
		{Opcode: roce.OpWriteOnly, DestQP: 0x12, PSN: 2, DMALen: 8, Payload: make([]byte, 8)},
		{Opcode: roce.OpWriteOnly, DestQP: 0x12, PSN: 3, DMALen: 8, Payload: make([]byte, 8)},
	}
	_, whole := encodeRun(t, a, a, ps)
	bad := bytes.Clone(whole)
	bad[udpHead+40+30] ^= 1 // the second packet's payload
	w := &WireEndpoint{addr: a, c: &Counters{}}
	out := w.verify([]Datagram{{Raw: bad}})
	if len(out) != 3 || out[0].Status != OK || out[1].Status != BadICRC || out[1].BadQPN != 0x12 || out[2].Status != OK {
		t.Fatalf("statuses %v %v %v", out[0].Status, out[1].Status, out[2].Status)
	}
	bad = bytes.Clone(whole)
	bad[udpHead+30] ^= 1 // the first packet: no size is confirmed
	w = &WireEndpoint{addr: a, c: &Counters{}}
	out = w.verify([]Datagram{{Raw: bad}})
	if len(out) != 1 || out[0].Status != BadICRC || w.c.ICRCErrors.Load() != 1 {
		t.Fatalf("%d datagrams, %v", len(out), out[0].Status)
	}
}

// writeOnlys is n 8 B WRITE ONLY packets of QP 0x11 to QP 0x12 through
// the wire on addr, PSNs 0 to n-1, the payload of each its PSN.
func writeOnlys(addr netip.Addr, n int, done *[]string) []Packet {
	var ps []Packet
	for i := range n {
		ps = append(ps, &tpkt{m: Meta{Route: Wire, SrcQPN: 0x11, DestQPN: 0x12, Src: addr.As4(), Dst: addr.As4()},
			op: roce.OpWriteOnly, psn: uint32(i), payload: bytes.Repeat([]byte{byte(i)}, 8), done: done})
	}
	return ps
}

// Through real sockets on lo: a stream of 8 B WRITEs and a long WRITE's
// MIDDLE packets go as coalesced sends and arrive as their packets, in
// order, each OK; with NoCoalesce every datagram is a send of its own.
func TestWireCoalesces(t *testing.T) {
	for _, no := range []bool{false, true} {
		addr := netip.MustParseAddr("127.0.83.5")
		var cnt Counters
		var mu sync.Mutex
		c, d, _ := newTestChain(t, Options{Lock: &mu, Counters: &cnt, Wire: &WireConfig{Addr: addr, NoCoalesce: no}})
		var done []string
		ps := writeOnlys(addr, 30, &done)
		for i := range 20 {
			op := roce.OpWriteMiddle
			if i == 19 {
				op = roce.OpWriteLast
			}
			ps = append(ps, &tpkt{m: Meta{Route: Wire, SrcQPN: 0x11, DestQPN: 0x12, Src: addr.As4(), Dst: addr.As4()},
				op: op, psn: uint32(30 + i), payload: bytes.Repeat([]byte{byte(i)}, 2048), done: &done})
		}
		d.sendAll(t, c, &mu, ps)
		mu.Lock()
		got := slices.Clone(d.dgs)
		mu.Unlock()
		for i, dg := range got {
			if dg.Status != OK || dg.Packet.PSN != uint32(i) || dg.Packet.DMALen != uint32(len(ps[i].(*tpkt).payload)) && i < 30 {
				t.Fatalf("no-coalesce %v: datagram %d: %v psn %d", no, i, dg.Status, dg.Packet.PSN)
			}
		}
		sends, recv := cnt.WireCoalescedSends.Load(), cnt.WireCoalescedRecv.Load()
		if no && (sends != 0 || recv != 0) || !no && (sends != 2 || recv != 2) || cnt.WirePacketsSent.Load() != 50 {
			t.Fatalf("no-coalesce %v: %d coalesced sends, %d coalesced datagrams received, %d packets sent",
				no, sends, recv, cnt.WirePacketsSent.Load())
		}
		if cnt.WireTxSocketFallbacks.Load() != 0 || cnt.WireSendErrors.Load() != 0 {
			t.Fatalf("fallbacks %d, send errors %d", cnt.WireTxSocketFallbacks.Load(), cnt.WireSendErrors.Load())
		}
		c.Close()
	}
}

// A run whose whole length is also one MIDDLE packet's at a larger MTU
// (three of 272 bytes and one of 224 make 1040, a MIDDLE at MTU 1024) is
// told apart by its ICRCs: it splits, and a real MIDDLE of 1040 does not.
func TestCoalescedRunAmbiguousLength(t *testing.T) {
	a := netip.MustParseAddr("127.0.83.1").As4()
	ps := []roce.Packet{
		{Opcode: roce.OpWriteMiddle, DestQP: 0x12, PSN: 1, Payload: make([]byte, 256)},
		{Opcode: roce.OpWriteMiddle, DestQP: 0x12, PSN: 2, Payload: make([]byte, 256)},
		{Opcode: roce.OpWriteMiddle, DestQP: 0x12, PSN: 3, Payload: make([]byte, 256)},
		{Opcode: roce.OpWriteLast, DestQP: 0x12, PSN: 4, Payload: make([]byte, 208)},
	}
	_, whole := encodeRun(t, a, a, ps)
	if len(whole) != udpHead+12+1024+4 {
		t.Fatalf("the run is %d bytes", len(whole))
	}
	w := &WireEndpoint{addr: a, c: &Counters{}}
	if out := w.verify([]Datagram{{Raw: whole}}); len(out) != 4 || out[3].Status != OK || out[3].Packet.PSN != 4 {
		t.Fatalf("%d packets", len(out))
	}
	one, _ := encodeRun(t, a, a, []roce.Packet{{Opcode: roce.OpWriteMiddle, DestQP: 0x12, PSN: 9, Payload: make([]byte, 1024)}})
	w = &WireEndpoint{addr: a, c: &Counters{}}
	if out := w.verify([]Datagram{{Raw: one[0]}}); len(out) != 1 || out[0].Status != OK || out[0].Seg || out[0].Packet.PSN != 9 {
		t.Fatalf("a MIDDLE of 1040 bytes: %d datagrams, %v", len(out), out[0].Status)
	}
}

// chunkDisp records the size of each delivery and reports busy after the
// first, for a while.
type chunkDisp struct {
	tdisp
	sizes     []int
	busyUntil time.Time
	early     int // deliveries while it said busy
}

func (d *chunkDisp) DeliverDatagrams(dgs []Datagram) func() bool {
	d.sizes = append(d.sizes, len(dgs))
	if time.Now().Before(d.busyUntil) {
		d.early++
	}
	d.tdisp.DeliverDatagrams(dgs)
	if len(d.sizes) == 1 {
		d.busyUntil = time.Now().Add(5 * time.Millisecond)
		return func() bool { return time.Now().Before(d.busyUntil) }
	}
	return nil
}

// A receive call's coalesced runs (here up to 6 of 64 packets) reach the
// device deliverChunk packets at a time, and a busy device is waited for
// between chunks, as between calls: a QP's queue cannot overflow past
// the device's back-off (TestDataIntegrityRandomMix/uc across the wire
// lost UC messages to it once).
func TestWireDeliversInChunks(t *testing.T) {
	addr := netip.MustParseAddr("127.0.83.6")
	var cnt Counters
	var mu sync.Mutex
	d := &chunkDisp{}
	c, err := NewChain(Options{Lock: &mu, Counters: &cnt, Owner: func(uint32) uint32 { return 0 },
		AfterFunc: (&fakeClock{}).AfterFunc, Wire: &WireConfig{Addr: addr}}, d)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var done []string
	ps := writeOnlys(addr, 6*64, &done)
	d.sendAll(t, c, &mu, ps)
	mu.Lock()
	defer mu.Unlock()
	if d.early != 0 || slices.Max(d.sizes) > deliverChunk {
		t.Fatalf("deliveries of %v packets, %d while busy", d.sizes, d.early)
	}
	for i, dg := range d.dgs {
		if dg.Status != OK || dg.Packet.PSN != uint32(i) {
			t.Fatalf("packet %d: %v psn %d", i, dg.Status, dg.Packet.PSN)
		}
	}
	t.Logf("deliveries of %v packets", d.sizes)
}

// With room for two source ports' sockets, a third port's first batch
// closes the one unused the longest; every datagram still leaves from its
// own QP's port, and a batch that needs more ports than there is room
// for gets them all (one over, for that batch).
func TestWireTxSocketsEvicted(t *testing.T) {
	defer func(n int) { maxTxSockets = n }(maxTxSockets)
	maxTxSockets = 2
	addr := netip.MustParseAddr("127.0.83.7")
	var cnt Counters
	var mu sync.Mutex
	c, d, _ := newTestChain(t, Options{Lock: &mu, Counters: &cnt, Wire: &WireConfig{Addr: addr}})
	var done []string
	send := func(qpns ...uint32) {
		var ps []Packet
		for _, n := range qpns {
			ps = append(ps, &tpkt{m: Meta{Route: Wire, SrcQPN: n, DestQPN: 0x12, Src: addr.As4(), Dst: addr.As4()},
				psn: n, payload: []byte("data"), done: &done})
		}
		mu.Lock()
		c.Head.WritePackets(ps)
		mu.Unlock()
	}
	send(1)
	send(2)
	send(3) // evicts 1's
	send(1) // evicts 2's
	send(4, 5, 6)
	d.wait(t, &mu, 7)
	mu.Lock()
	defer mu.Unlock()
	want := []uint32{1, 2, 3, 1, 4, 5, 6}
	for i, dg := range d.dgs {
		if dg.Status != OK || dg.Packet.PSN != want[i] || dg.SrcPort != SourcePort(want[i]) {
			t.Fatalf("datagram %d: %v psn %d from port %#x", i, dg.Status, dg.Packet.PSN, dg.SrcPort)
		}
	}
	if ev := cnt.WireTxSocketEvictions.Load(); ev != 4 || len(c.Wire.txSocks) != 3 || cnt.WireTxSocketFallbacks.Load() != 0 {
		t.Fatalf("%d evictions, %d sockets open, %d fallbacks", ev, len(c.Wire.txSocks), cnt.WireTxSocketFallbacks.Load())
	}
}

// A source port that another socket holds goes through the raw socket,
// from the same port, counted; runs from it go a datagram at a time.
func TestWireTxSocketFallback(t *testing.T) {
	addr := netip.MustParseAddr("127.0.83.8")
	hold, err := net.ListenUDP("udp4", &net.UDPAddr{IP: addr.AsSlice(), Port: int(SourcePort(0x11))})
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Close()
	var cnt Counters
	var mu sync.Mutex
	c, d, _ := newTestChain(t, Options{Lock: &mu, Counters: &cnt, Wire: &WireConfig{Addr: addr}})
	var done []string
	ps := writeOnlys(addr, 10, &done)
	d.sendAll(t, c, &mu, ps)
	mu.Lock()
	defer mu.Unlock()
	for i, dg := range d.dgs {
		if dg.Status != OK || dg.Packet.PSN != uint32(i) || dg.SrcPort != SourcePort(0x11) || dg.Seg {
			t.Fatalf("datagram %d: %v psn %d port %#x seg %v", i, dg.Status, dg.Packet.PSN, dg.SrcPort, dg.Seg)
		}
	}
	if cnt.WireTxSocketFallbacks.Load() != 1 || cnt.WireCoalescedSends.Load() != 0 || cnt.WireSendCalls.Load() != 1 {
		t.Fatalf("%d fallbacks, %d coalesced sends, %d send calls", cnt.WireTxSocketFallbacks.Load(),
			cnt.WireCoalescedSends.Load(), cnt.WireSendCalls.Load())
	}
}
