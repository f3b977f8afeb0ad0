package fsnode_test

import (
	"fmt"
	"strings"
	"testing"
)

// TestMcastAcrossUsers: on a real mount, UD QPs of root and of uid 65534
// join a group with attach_mcast on their ctl files; a send from root's
// QP to the group (remote_qpn 0xFFFFFF) reaches both, each reading its own
// completion; after detach_mcast the nobody QP gets no more; bad commands
// fail with EINVAL and the reason in the error file; the device file
// shows the multicast limits.
func TestMcastAcrossUsers(t *testing.T) {
	m := mount(t)
	const grp = "ff0e::1:22"
	const ud = "qp_type=ud max_send_wr=8 max_recv_wr=8 max_inline_data=64"
	toRTS := func(q string) {
		m.mustWrite("modify qp_state=INIT pkey_index=0 port_num=1 qkey=0x11111111", "qp", q, "ctl")
		m.mustWrite("modify qp_state=RTR", "qp", q, "ctl")
		m.mustWrite("modify qp_state=RTS sq_psn=1", "qp", q, "ctl")
	}
	dev := m.attrs("device")
	for _, k := range []string{"max_mcast_grp", "max_mcast_qp_attach", "max_total_mcast_qp_attach"} {
		if dev[k] == "" || dev[k] == "0" {
			t.Fatalf("device %s=%q", k, dev[k])
		}
	}
	pd := m.create("pd", "")
	cq := m.create("cq", "cqe=16")
	rcq := m.create("cq", "cqe=16")
	a := m.create("qp", fmt.Sprintf("pd=%s %s send_cq=%s recv_cq=%s", pd, ud, cq, cq))
	b := m.create("qp", fmt.Sprintf("pd=%s %s send_cq=%s recv_cq=%s", pd, ud, rcq, rcq))
	toRTS(a)
	toRTS(b)
	mr := m.create("mr", "pd="+pd+" length=4096 access=local_write")
	lkey := m.attrs("mr", mr, "attr")["lkey"]

	// Bad commands: EINVAL, with the reason.
	for _, c := range []struct{ cmd, reason string }{
		{"attach_mcast gid=fe80::1 lid=0xc001", "not a multicast GID"},
		{"attach_mcast lid=0xc001", "gid"},
		{"detach_mcast gid=" + grp + " lid=0xc001", "not attached"},
		{"attach_mcast gid=" + grp + " lid=0xc001 color=red", "unknown key"},
	} {
		if err := m.write(c.cmd, "qp", b, "ctl"); errnoOf(err) != 22 {
			t.Fatalf("%q: %v, want EINVAL", c.cmd, err)
		}
		if e := m.lastError("qp", b, "ctl"); !strings.Contains(e, c.reason) {
			t.Fatalf("%q: error %q, want %q in it", c.cmd, e, c.reason)
		}
	}
	m.mustWrite("attach_mcast gid="+grp+" lid=0xc001", "qp", b, "ctl")
	if g := m.attrs("qp", b, "attr")["mcast_groups"]; g != grp {
		t.Fatalf("attr mcast_groups=%q, want %s", g, grp)
	}

	// uid 65534's QP joins the same group.
	out, stderr := nobodyScript(t, m, `
pd=$(mk pd "")
cq=$(mk cq "cqe=16")
q=$(mk qp "pd=$pd qp_type=ud send_cq=$cq recv_cq=$cq max_send_wr=4 max_recv_wr=4")
mr=$(mk mr "pd=$pd length=4096 access=local_write")
lkey=$(sed -n 's/^lkey=//p' $M/mr/$mr/attr)
echo "modify qp_state=INIT pkey_index=0 port_num=1 qkey=0x11111111" > $M/qp/$q/ctl
echo "modify qp_state=RTR" > $M/qp/$q/ctl
echo "modify qp_state=RTS sq_psn=1" > $M/qp/$q/ctl
echo "wr_id=7 sge=$lkey:0:1024" > $M/qp/$q/post_recv
echo "wr_id=8 sge=$lkey:1024:1024" > $M/qp/$q/post_recv
echo "attach_mcast gid=`+grp+` lid=0xc001" > $M/qp/$q/ctl && echo attached
echo "nq=$q ncq=$cq nmr=$mr"
`)
	if !strings.Contains(out, "attached") {
		t.Fatalf("nobody's attach:\n%s%s", out, stderr)
	}
	var nq, ncq, nmr string
	fmt.Sscanf(out[strings.Index(out, "nq="):], "nq=%s ncq=%s nmr=%s", &nq, &ncq, &nmr)

	m.mustWrite("wr_id=1 sge="+lkey+":0:1024", "qp", b, "post_recv")
	m.mustWrite("wr_id=2 sge="+lkey+":1024:1024", "qp", b, "post_recv")
	ah := m.create("ah", "pd="+pd+" dgid="+grp)
	send := func(wr string) {
		m.mustWrite(fmt.Sprintf("opcode=send wr_id=%s send_flags=signaled,inline inline_data=6d756c7469 ah=%s remote_qpn=16777215 remote_qkey=0x11111111", wr, ah), "qp", a, "post_send")
	}
	send("100")
	if wc := m.pollUntil(cq, 1); !strings.Contains(wc[0], "status=success") {
		t.Fatalf("send: %q", wc)
	}
	if wc := m.pollUntil(rcq, 1); !strings.Contains(wc[0], "wr_id=1 status=success opcode=recv") || !strings.Contains(wc[0], "byte_len=45") {
		t.Fatalf("root's member: %q", wc)
	}
	out, stderr = nobodyScript(t, m, `
for i in $(seq 500); do w=$(cat $M/cq/`+ncq+`/poll); [ -n "$w" ] && break; sleep 0.01; done
echo "wc: $w"
dd if=$M/mr/`+nmr+`/mem bs=1 skip=40 count=5 2>/dev/null; echo
echo "detach_mcast gid=`+grp+` lid=0xc001" > $M/qp/`+nq+`/ctl && echo detached
`)
	if !strings.Contains(out, "wr_id=7 status=success opcode=recv") || !strings.Contains(out, "multi") || !strings.Contains(out, "detached") {
		t.Fatalf("nobody's member:\n%s%s", out, stderr)
	}
	send("101")
	m.pollUntil(cq, 1)
	m.pollUntil(rcq, 1)
	out, _ = nobodyScript(t, m, "sleep 0.2; echo \"wc: $(cat $M/cq/"+ncq+"/poll)\"")
	if strings.TrimSpace(out) != "wc:" {
		t.Fatalf("nobody's QP got a datagram after detach_mcast: %q", out)
	}
	if c := m.attrs("counters"); c["multicast_packets_sent"] != "2" || c["multicast_delivered"] != "3" {
		t.Fatalf("counters: sent %s delivered %s", c["multicast_packets_sent"], c["multicast_delivered"])
	}
}
