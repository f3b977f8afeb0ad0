package sysview

import (
	"net"
	"net/netip"
	"syscall"
	"testing"

	"rdmafs/device"
)

func roceSource(ifs []net.Interface, addrs map[string][]net.Addr) Source {
	return Source{
		Attr: func() device.DeviceAttr { return device.DeviceAttr{NodeGUID: 0x0002c903000abcde, FwVer: "rdmafs 0.1"} },
		Port: func() device.PortAttr {
			return device.PortAttr{State: "ACTIVE", GID: netip.MustParseAddr("::ffff:127.0.21.1").As16()}
		},
		Counters: func() []device.Counter {
			return []device.Counter{{Name: "bytes_sent", Value: 400}, {Name: "packets_sent", Value: 7}}
		},
		Addr:           netip.MustParseAddr("127.0.21.1"),
		Interfaces:     func() ([]net.Interface, error) { return ifs, nil },
		InterfaceAddrs: func(i net.Interface) ([]net.Addr, error) { return addrs[i.Name], nil },
	}
}

func read(t *testing.T, n *Node, p string) (string, error) {
	t.Helper()
	f := n.Find(p)
	if f == nil || f.Read == nil {
		t.Fatalf("%s: no such file", p)
	}
	return f.Read()
}

// TestRoCEFormats: an --addr mount's port, in the kernel's formats.
func TestRoCEFormats(t *testing.T) {
	lo := net.Interface{Name: "lo", Flags: net.FlagLoopback | net.FlagUp}
	tap := net.Interface{Name: "tap9", Flags: net.FlagUp}
	ipn := func(s string) *net.IPNet {
		_, n, _ := net.ParseCIDR(s)
		ip, _, _ := net.ParseCIDR(s)
		n.IP = ip
		return n
	}
	addrs := map[string][]net.Addr{"lo": {ipn("127.0.0.1/8")}, "tap9": {ipn("127.0.21.1/32")}}
	tr := Tree(roceSource([]net.Interface{lo, tap}, addrs))
	for p, want := range map[string]string{
		"node_guid":                          "0002:c903:000a:bcde\n",
		"ports/1/link_layer":                 "Ethernet\n",
		"ports/1/lid":                        "0x0\n",
		"ports/1/sm_lid":                     "0x0\n",
		"ports/1/cap_mask":                   "0x04010000\n",
		"ports/1/gids/0":                     "0000:0000:0000:0000:0000:ffff:7f00:1501\n",
		"ports/1/gid_attrs/types/0":          "RoCE v2\n",
		"ports/1/gid_attrs/ndevs/0":          "tap9\n",
		"ports/1/counters/port_xmit_data":    "100\n",
		"ports/1/counters/port_xmit_packets": "7\n",
		"ports/1/hw_counters/packets_sent":   "7\n",
	} {
		if got, err := read(t, tr, p); err != nil || got != want {
			t.Errorf("%s: %q (%v), want %q", p, got, err, want)
		}
	}
	if _, err := read(t, tr, "ports/1/gid_attrs/types/1"); err != syscall.EINVAL {
		t.Errorf("types/1 of an unused entry: %v, want EINVAL", err)
	}
	// The interface with the address itself, not lo, whose 127/8 covers it.
	if got := tr.Find("device/net").List(); len(got) != 1 || got[0] != "tap9" {
		t.Errorf("device/net: %v, want [tap9]", got)
	}
	// Without it, lo.
	tr = Tree(roceSource([]net.Interface{lo}, addrs))
	if got := tr.Find("device/net").List(); len(got) != 1 || got[0] != "lo" {
		t.Errorf("device/net without tap9: %v, want [lo]", got)
	}
}

// TestLIDMatchesLibrary: the LID the library computes for a GUID
// (libibverbs/device.c), and none on RoCE.
func TestLIDMatchesLibrary(t *testing.T) {
	var ib [16]byte
	ib[0], ib[1] = 0xfe, 0x80
	g := uint64(0x8ed994223096a470)
	if got, want := LID(ib, g), uint16(0x3f97); got != want { // ibv_devinfo's port_lid 16279
		t.Errorf("LID %#x, want %#x", got, want)
	}
	if LID(netip.MustParseAddr("::ffff:10.0.0.1").As16(), g) != 0 {
		t.Error("a RoCE port has a LID")
	}
}
