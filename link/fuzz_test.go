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
	f.Add(good[:len(good)-1])
	f.Add([]byte{0x45})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		w := &WireEndpoint{addr: addr.As4(), c: &Counters{}}
		dgs := []Datagram{{Raw: b}}
		w.verify(dgs)
		dg := dgs[0]
		if dg.Status == OK && (dg.Dst != addr.As4() || len(dg.Raw) < 20+8+roce.BTHLen+roce.ICRCLen) {
			t.Fatalf("OK datagram %+v", dg)
		}
		if got := w.c.WirePacketsRecv.Load(); got != 1 {
			t.Fatalf("counted %d datagrams", got)
		}
	})
}
