package link

import (
	"net/netip"
	"testing"

	"rdmafs/roce"
)

// FuzzVerify: whatever the socket hands the wire, checking it never
// panics, and a datagram called OK is one the device can take: addressed
// to the wire, its headers parsed, its Raw long enough for the GRH copy.
func FuzzVerify(f *testing.F) {
	addr := netip.MustParseAddr("127.0.83.1")
	ib, _ := (&roce.Packet{Opcode: 0x64, PKey: 0xFFFF, DestQP: 0x12, PSN: 3, QKey: 7, SrcQP: 9,
		Payload: []byte("payload")}).AppendIB(nil)
	good, err := roce.BuildIPv4(addr, addr, SourcePort(9), ib, 0, 0, 64)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	// A run of three 8 B WRITEs as lo delivers it (TestCoalescedRunSplits).
	var ps []roce.Packet
	for i := range 3 {
		ps = append(ps, roce.Packet{Opcode: roce.OpWriteOnly, DestQP: 0x12, PSN: uint32(i), DMALen: 8, Payload: make([]byte, 8)})
	}
	_, whole := encodeRun(f, addr.As4(), addr.As4(), ps)
	f.Add(whole)
	f.Add(good[:len(good)-1])
	f.Add([]byte{0x45})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		w := &WireEndpoint{addr: addr.As4(), c: &Counters{}}
		out := w.verify([]Datagram{{Raw: b}})
		for _, dg := range out {
			if dg.Status == OK && (dg.Dst != addr.As4() || len(dg.Bytes()) < 20+8+roce.BTHLen+roce.ICRCLen ||
				len(dg.IPv4Header()) < 20) {
				t.Fatalf("OK datagram %+v", dg)
			}
		}
		if got := w.c.WirePacketsRecv.Load(); got != uint64(len(out)) || len(out) == 0 || len(out) > 1 && w.c.WireCoalescedRecv.Load() != 1 {
			t.Fatalf("counted %d datagrams for %d", got, len(out))
		}
	})
}
