package roce_test

import (
	"fmt"
	"net/netip"

	"rdmafs/roce"
)

// Build the ACK rc-peer.py sends for a complete message, wrap it into the
// datagram a RoCEv2 sender puts on the wire (rc-peer.py computes the same
// ICRC for it), then take it apart again.
func Example() {
	ack := roce.Packet{
		Opcode:   roce.RCAcknowledge,
		PKey:     0xFFFF,
		DestQP:   0x11,
		PSN:      0x6a18b5,
		Syndrome: 0x1F, // ACK, unlimited credit
		MSN:      1,
	}
	ib, err := ack.AppendIB(nil)
	if err != nil {
		panic(err)
	}
	src, dst := netip.MustParseAddr("10.77.0.1"), netip.MustParseAddr("10.77.0.2")
	dg, err := roce.BuildIPv4(src, dst, roce.UDPPort, ib, 0, 0, 64)
	if err != nil {
		panic(err)
	}
	fmt.Printf("IB part % x\n", ib)
	fmt.Printf("ICRC    % x\n", dg[len(dg)-4:])

	var d roce.Datagram
	if err := roce.ParseIPv4(dg, &d); err != nil {
		panic(err)
	}
	var p roce.Packet
	if err := roce.ParseIB(d.IB, &p); err != nil {
		panic(err)
	}
	fmt.Println(d.Src(), "->", d.Dst(), p.Opcode, roce.CheckIPv4(dg) == nil)
	fmt.Printf("syndrome %#x MSN %d PSN %#x\n", p.Syndrome, p.MSN, p.PSN)
	// Output:
	// IB part 11 00 ff ff 00 00 00 11 00 6a 18 b5 1f 00 00 01
	// ICRC    1d bc 06 b9
	// 10.77.0.1 -> 10.77.0.2 RC_ACKNOWLEDGE true
	// syndrome 0x1f MSN 1 PSN 0x6a18b5
}
