// Package sysview is the kernel's sysfs view of an rdmafs device: the files
// a kernel RDMA device shows under /sys/class/infiniband/DEV/, in the
// kernel's formats (drivers/infiniband/core/sysfs.c), computed from the
// device when read, so counters and state are current. The mount serves it
// as MOUNT/sys/infiniband/ (package fsnode) and `rdmafs exec` binds it at
// /sys/class/infiniband/DEV in the program's mount namespace, for programs
// that look for a device the way the kernel shows one before they call
// libibverbs (libibumad's ibstat, ibstatus, UCX, Open MPI, rdma-core's
// tests).
//
// The port's link layer, LID and GID types are what the drop-in
// libibverbs reports for the same mount (libibverbs/device.c): Ethernet
// with a RoCE v2 GID when the GID is IPv4-mapped (an --addr mount),
// otherwise InfiniBand with a LID made from the node GUID. The package
// knows nothing of FUSE: it is a tree of Nodes whose files are functions.
package sysview

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"sort"
	"strings"
	"syscall"

	"rdmafs/device"
)

// Driver is the name device/driver links to: never a vendor's.
const Driver = "rdmafs"

// GIDTableLen is the port's GID table length, as the library reports it
// (RF_GID_TABLE): entry 0 is the port's GID, the others read as zero.
const GIDTableLen = 16

// Source is what the view is computed from, each read.
type Source struct {
	Attr     func() device.DeviceAttr
	Port     func() device.PortAttr
	Counters func() []device.Counter
	// Addr is the mount's --addr, or invalid on a local mount.
	Addr netip.Addr
	// Interfaces lists the machine's network interfaces (nil:
	// net.Interfaces), for device/net and gid_attrs/ndevs.
	Interfaces func() ([]net.Interface, error)
	// InterfaceAddrs is an interface's addresses (nil: ifc.Addrs).
	InterfaceAddrs func(net.Interface) ([]net.Addr, error)
}

// Node is a file, a directory or a symlink of the view.
type Node struct {
	Name string
	// A directory has Children (fixed) or List (names of empty
	// directories, computed when read: device/net).
	Dir      bool
	Children []*Node
	List     func() []string
	// A file's content; an error is the read's errno (a kernel
	// attribute that fails its show).
	Read func() (string, error)
	// A symlink's target.
	Link string
}

func file(name string, read func() string) *Node {
	return &Node{Name: name, Read: func() (string, error) { return read(), nil }}
}

func errFile(name string, read func() (string, error)) *Node {
	return &Node{Name: name, Read: read}
}

func dir(name string, children ...*Node) *Node {
	return &Node{Name: name, Dir: true, Children: children}
}

// Find is the node at a slash-separated path below n ("" is n).
func (n *Node) Find(path string) *Node {
	if path == "" {
		return n
	}
	first, rest, _ := strings.Cut(path, "/")
	for _, c := range n.Children {
		if c.Name == first {
			return c.Find(rest)
		}
	}
	return nil
}

// RoCE says whether a port GID is a RoCE one (IPv4-mapped), as the
// library decides the link layer.
func RoCE(gid [16]byte) bool {
	return netip.AddrFrom16(gid).Is4In6()
}

// LID is the port's LID: 0 on RoCE, else the library's unicast LID from
// the node GUID (1..0xbfff, stable per mount).
func LID(gid [16]byte, nodeGUID uint64) uint16 {
	if RoCE(gid) {
		return 0
	}
	g := nodeGUID
	return 1 + uint16((g^(g>>16)^(g>>32))%0xbffe)
}

// The port's fixed properties, as the library's ibv_query_port reports
// them: 4X at EDR speed, CM supported (and IP-based GIDs on RoCE).
const (
	activeWidth      = 4 // 4X
	capCMSup         = 1 << 16
	capIPBasedGIDs   = 1 << 26
	portStateActive  = 4
	portStateDown    = 1
	physLinkUp       = 5
	physDisabled     = 3
	abiNodeTypeCA    = 1
	hwCountersMillis = 10
)

// guid4 is a GUID as the kernel prints node_guid: four groups of four hex
// digits.
func guid4(g uint64) string {
	return fmt.Sprintf("%04x:%04x:%04x:%04x", uint16(g>>48), uint16(g>>32), uint16(g>>16), uint16(g))
}

// gid8 is a GID as the kernel's %pI6: eight groups of four hex digits.
func gid8(g [16]byte) string {
	var b strings.Builder
	for i := 0; i < 16; i += 2 {
		if i > 0 {
			b.WriteByte(':')
		}
		fmt.Fprintf(&b, "%02x%02x", g[i], g[i+1])
	}
	return b.String()
}

// Tree is the directory /sys/class/infiniband/DEV/ of the device.
func Tree(s Source) *Node {
	if s.Interfaces == nil {
		s.Interfaces = net.Interfaces
	}
	if s.InterfaceAddrs == nil {
		s.InterfaceAddrs = func(i net.Interface) ([]net.Addr, error) { return i.Addrs() }
	}
	attr := s.Attr
	line := func(v string) string { return v + "\n" }
	return dir("",
		file("node_type", func() string { return line(fmt.Sprintf("%d: CA", abiNodeTypeCA)) }),
		file("node_guid", func() string { return line(guid4(attr().NodeGUID)) }),
		file("sys_image_guid", func() string { return line(guid4(attr().SysImageGUID)) }),
		file("node_desc", func() string { return line(nodeDesc()) }),
		file("fw_ver", func() string { return line(attr().FwVer) }),
		file("hca_type", func() string { return line("rdmafs") }),
		file("hw_rev", func() string { return line(fmt.Sprintf("0x%x", attr().HwVer)) }),
		file("board_id", func() string { return line(fmt.Sprintf("RDMAFS_%06x", attr().VendorPartID)) }),
		dir("ports", portDir(s)),
		dir("device",
			&Node{Name: "driver", Link: ".driver/" + Driver},
			dir(".driver", dir(Driver)),
			file("vendor", func() string { return line(fmt.Sprintf("0x%04x", attr().VendorID&0xffff)) }),
			file("device", func() string { return line(fmt.Sprintf("0x%04x", attr().VendorPartID&0xffff)) }),
			&Node{Name: "net", Dir: true, List: func() []string { return netdevs(s) }},
		),
	)
}

// nodeDesc is the kernel's default node description: the host name and
// the driver's name (rdma-ndd's format, "HOST DEV", without a device name
// the daemon does not know).
func nodeDesc() string {
	h, err := osHostname()
	if err != nil || h == "" {
		return Driver
	}
	if i := strings.IndexByte(h, '.'); i > 0 {
		h = h[:i]
	}
	d := h + " " + Driver
	if len(d) > 64 {
		d = d[:64]
	}
	return d
}

func portDir(s Source) *Node {
	port := s.Port
	roce := func() bool { return RoCE(port().GID) }
	state := func() (int, string) {
		if port().State == "ACTIVE" {
			return portStateActive, "ACTIVE"
		}
		return portStateDown, "DOWN"
	}
	lid := func() uint16 { return LID(port().GID, s.Attr().NodeGUID) }
	var gids, types, ndevs, pkeys []*Node
	for i := 0; i < GIDTableLen; i++ {
		i := i
		gids = append(gids, file(fmt.Sprint(i), func() string {
			var g [16]byte
			if i == 0 {
				g = port().GID
			}
			return gid8(g) + "\n"
		}))
		// An entry not in use has no attributes (the kernel fails the
		// read with EINVAL); an IB GID has no netdev.
		types = append(types, errFile(fmt.Sprint(i), func() (string, error) {
			if i != 0 {
				return "", syscall.EINVAL
			}
			if roce() {
				return "RoCE v2\n", nil
			}
			return "IB/RoCE v1\n", nil
		}))
		ndevs = append(ndevs, errFile(fmt.Sprint(i), func() (string, error) {
			if i != 0 || !roce() {
				return "", syscall.EINVAL
			}
			names := netdevs(s)
			if len(names) == 0 {
				return "", syscall.EINVAL
			}
			return names[0] + "\n", nil
		}))
	}
	pkeys = append(pkeys, file("0", func() string { return "0xffff\n" }))
	p := dir("1",
		file("state", func() string { n, name := state(); return fmt.Sprintf("%d: %s\n", n, name) }),
		file("phys_state", func() string {
			if n, _ := state(); n == portStateActive {
				return fmt.Sprintf("%d: LinkUp\n", physLinkUp)
			}
			return fmt.Sprintf("%d: Disabled\n", physDisabled)
		}),
		file("link_layer", func() string {
			if roce() {
				return "Ethernet\n"
			}
			return "InfiniBand\n"
		}),
		file("lid", func() string { return fmt.Sprintf("0x%x\n", lid()) }),
		file("sm_lid", func() string { return fmt.Sprintf("0x%x\n", lid()) }),
		file("sm_sl", func() string { return "0\n" }),
		file("lid_mask_count", func() string { return "0\n" }),
		// EDR: 25 Gb/s a lane, 4X.
		file("rate", func() string { return fmt.Sprintf("%d Gb/sec (%dX EDR)\n", 25*activeWidth, activeWidth) }),
		file("cap_mask", func() string {
			c := uint32(capCMSup)
			if roce() {
				c |= capIPBasedGIDs
			}
			return fmt.Sprintf("0x%08x\n", c)
		}),
		&Node{Name: "gids", Dir: true, Children: gids},
		dir("gid_attrs", &Node{Name: "types", Dir: true, Children: types}, &Node{Name: "ndevs", Dir: true, Children: ndevs}),
		&Node{Name: "pkeys", Dir: true, Children: pkeys},
		counterDir(s),
		hwCounterDir(s),
	)
	// sm_lid on RoCE is 0, as the library's
	p.Find("sm_lid").Read = func() (string, error) {
		if roce() {
			return "0x0\n", nil
		}
		return fmt.Sprintf("0x%x\n", lid()), nil
	}
	return p
}

// counters is the device's counters by name.
func counters(s Source) map[string]uint64 {
	m := map[string]uint64{}
	for _, c := range s.Counters() {
		m[c.Name] = c.Value
	}
	return m
}

// counterDir is ports/1/counters: the PMA port counters (extended, 64
// bits), from the device's: data in units of 4 octets as the IB spec
// counts them, packets, and the errors the device has an equivalent of.
func counterDir(s Source) *Node {
	pma := []struct {
		name string
		val  func(m map[string]uint64) uint64
	}{
		{"symbol_error", nil},
		{"link_error_recovery", nil},
		{"link_downed", nil},
		{"port_rcv_errors", func(m map[string]uint64) uint64 { return m["icrc_errors"] + m["malformed_packets"] }},
		{"port_rcv_remote_physical_errors", nil},
		{"port_rcv_switch_relay_errors", func(m map[string]uint64) uint64 { return m["no_route"] }},
		{"port_xmit_discards", func(m map[string]uint64) uint64 { return m["wire_send_errors"] }},
		{"port_xmit_constraint_errors", nil},
		{"port_rcv_constraint_errors", nil},
		{"local_link_integrity_errors", nil},
		{"excessive_buffer_overrun_errors", nil},
		{"VL15_dropped", nil},
		{"port_xmit_data", func(m map[string]uint64) uint64 { return m["bytes_sent"] / 4 }},
		{"port_rcv_data", func(m map[string]uint64) uint64 { return m["bytes_recv"] / 4 }},
		{"port_xmit_packets", func(m map[string]uint64) uint64 { return m["packets_sent"] }},
		{"port_rcv_packets", func(m map[string]uint64) uint64 { return m["packets_recv"] }},
		{"unicast_xmit_packets", func(m map[string]uint64) uint64 { return less(m["packets_sent"], m["multicast_packets_sent"]) }},
		{"unicast_rcv_packets", func(m map[string]uint64) uint64 { return less(m["packets_recv"], m["multicast_packets_recv"]) }},
		{"multicast_xmit_packets", func(m map[string]uint64) uint64 { return m["multicast_packets_sent"] }},
		{"multicast_rcv_packets", func(m map[string]uint64) uint64 { return m["multicast_packets_recv"] }},
		{"port_xmit_wait", nil},
	}
	d := &Node{Name: "counters", Dir: true}
	for _, c := range pma {
		c := c
		d.Children = append(d.Children, file(c.name, func() string {
			if c.val == nil {
				return "0\n"
			}
			return fmt.Sprintf("%d\n", c.val(counters(s)))
		}))
	}
	return d
}

// less is a - b, 0 rather than a wrap when counters read at slightly
// different moments have b ahead.
func less(a, b uint64) uint64 {
	if b > a {
		return 0
	}
	return a - b
}

// hwCounterDir is ports/1/hw_counters: each of the device's own counters
// under its own name (a driver's hw_counters are its own), and lifespan.
func hwCounterDir(s Source) *Node {
	d := &Node{Name: "hw_counters", Dir: true}
	for _, c := range s.Counters() {
		name := c.Name
		d.Children = append(d.Children, file(name, func() string { return fmt.Sprintf("%d\n", counters(s)[name]) }))
	}
	d.Children = append(d.Children, file("lifespan", func() string { return fmt.Sprintf("%d\n", hwCountersMillis) }))
	return d
}

// netdevs names the interface that carries the mount's address, as the
// kernel's RoCE device sits on one: those that have it as an address of
// their own, or else the loopback interface when the address is in its
// network (127.0.0.0/8). A local mount (no --addr) answers for
// 127.0.0.1, lo's. None found: no names.
func netdevs(s Source) []string {
	ifs, err := s.Interfaces()
	if err != nil {
		return nil
	}
	want := s.Addr.Unmap()
	if !want.IsValid() {
		want = netip.MustParseAddr("127.0.0.1")
	}
	var exact, covering []string
	for _, ifc := range ifs {
		addrs, err := s.InterfaceAddrs(ifc)
		if err != nil {
			continue
		}
		for _, x := range addrs {
			n, ok := x.(*net.IPNet)
			if !ok {
				continue
			}
			ip, ok := netip.AddrFromSlice(n.IP)
			if !ok {
				continue
			}
			ones, _ := n.Mask.Size()
			pfx, err := ip.Unmap().Prefix(ones)
			switch {
			case ip.Unmap() == want:
				exact = append(exact, ifc.Name)
			case err == nil && pfx.Contains(want) && ifc.Flags&net.FlagLoopback != 0:
				covering = append(covering, ifc.Name)
			}
		}
	}
	if len(exact) > 0 {
		return dedup(exact)
	}
	return dedup(covering)
}

func dedup(l []string) []string {
	seen := map[string]bool{}
	out := l[:0]
	for _, x := range l {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}

// Sorted is a directory's entry names in listing order.
func (n *Node) Sorted() []string {
	var names []string
	if n.List != nil {
		names = n.List()
	}
	for _, c := range n.Children {
		names = append(names, c.Name)
	}
	sort.Strings(names)
	return names
}

// osHostname is os.Hostname (a test may replace it).
var osHostname = os.Hostname
