package fsnode_test

import (
	"os"
	"strings"
	"syscall"
	"testing"
)

// TestSysView: MOUNT/sys/infiniband is the device as the kernel's
// /sys/class/infiniband/DEV shows it, in the kernel's formats, and its
// counters are live: a SEND between two QPs shows in
// ports/1/counters/port_xmit_packets and hw_counters/packets_sent at the
// next read.
func TestSysView(t *testing.T) {
	m := mount(t)
	read := func(p string) string {
		t.Helper()
		b, err := os.ReadFile(m.path("sys", "infiniband", p))
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		return string(b)
	}
	for p, want := range map[string]string{
		"node_type":                    "1: CA\n",
		"ports/1/state":                "4: ACTIVE\n",
		"ports/1/phys_state":           "5: LinkUp\n",
		"ports/1/link_layer":           "InfiniBand\n",
		"ports/1/rate":                 "100 Gb/sec (4X EDR)\n",
		"ports/1/cap_mask":             "0x00010000\n",
		"ports/1/lid_mask_count":       "0\n",
		"ports/1/pkeys/0":              "0xffff\n",
		"ports/1/gid_attrs/types/0":    "IB/RoCE v1\n",
		"ports/1/gids/3":               "0000:0000:0000:0000:0000:0000:0000:0000\n",
		"ports/1/counters/link_downed": "0\n",
	} {
		if got := read(p); got != want {
			t.Errorf("%s: %q, want %q", p, got, want)
		}
	}
	guid := strings.TrimPrefix(m.attrs("device")["node_guid"], "0x")
	if g := read("node_guid"); g != guid[0:4]+":"+guid[4:8]+":"+guid[8:12]+":"+guid[12:16]+"\n" {
		t.Errorf("node_guid %q for %s", g, guid)
	}
	if g := read("ports/1/gids/0"); !strings.HasPrefix(g, "fe80:0000:0000:0000:") || len(g) != 40 {
		t.Errorf("gids/0: %q", g)
	}
	// an IB GID has no netdev: the read fails as the kernel's
	if _, err := os.ReadFile(m.path("sys", "infiniband", "ports", "1", "gid_attrs", "ndevs", "0")); errnoOf(err) != syscall.EINVAL {
		t.Errorf("ndevs/0 of an IB GID: %v, want EINVAL", err)
	}
	if l, err := os.Readlink(m.path("sys", "infiniband", "device", "driver")); err != nil || !strings.HasSuffix(l, "/rdmafs") {
		t.Errorf("device/driver -> %q (%v)", l, err)
	}
	if ents, err := os.ReadDir(m.path("sys", "infiniband", "device", "net")); err != nil || len(ents) != 1 || ents[0].Name() != "lo" {
		t.Errorf("device/net: %v %v (a local mount answers 127.0.0.1: lo)", ents, err)
	}
	if err := os.WriteFile(m.path("sys", "infiniband", "node_desc"), []byte("x"), 0); err == nil {
		t.Error("node_desc is writable")
	}

	before := read("ports/1/counters/port_xmit_packets")
	s := m.setup()
	m.connect(s)
	m.mustWrite("wr_id=1 sge="+s.lkeyB+":0:64", "qp", s.qb, "post_recv")
	m.mustWrite("opcode=send wr_id=2 send_flags=signaled sge="+s.lkeyA+":0:64", "qp", s.qa, "post_send")
	m.pollUntil(s.cq, 2)
	if after := read("ports/1/counters/port_xmit_packets"); after == before || after == "0\n" {
		t.Errorf("port_xmit_packets %q before a SEND, %q after", before, after)
	}
	if got, want := read("ports/1/hw_counters/packets_sent"), m.attrs("counters")["packets_sent"]+"\n"; got != want {
		t.Errorf("hw_counters/packets_sent %q, counters says %q", got, want)
	}
}
