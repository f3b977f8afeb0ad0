package fsnode_test

import (
	"strings"
	"testing"
)

// Issue #26's checks of capabilities, run as uid 65534 on a real mount
// (the daemon reads the writer's CAP_NET_RAW and CAP_NET_BIND_SERVICE).

// nobodyScript runs script as uid 65534 with M set to the mount and mk
// KIND LINE making an object (it prints the name).
func nobodyScript(t *testing.T, m *mnt, script string) (string, string) {
	t.Helper()
	pre := "M=" + m.dir + "\nmk() { { echo \"$2\" >&0; read -r x; echo \"$x\"; } <>\"$M/$1/new\"; }\n"
	out, stderr, _ := bash(65534, pre+script)
	return out, stderr
}

// TestNobodyControlledQKeyEPERM: uid 65534's UD QP cannot take the GSI's
// Q_Key 0x80010000, nor any with the high bit (EPERM, the reason names
// CAP_NET_RAW); an ordinary Q_Key is fine, and root may.
func TestNobodyControlledQKeyEPERM(t *testing.T) {
	m := mount(t)
	out, stderr := nobodyScript(t, m, `
pd=$(mk pd "")
cq=$(mk cq "cqe=16")
q=$(mk qp "pd=$pd qp_type=ud send_cq=$cq recv_cq=$cq max_send_wr=4 max_recv_wr=4")
echo "qp=$q"
for k in 0x80010000 0x80000000 0xffffffff; do
  { echo "modify qp_state=INIT pkey_index=0 port_num=1 qkey=$k" > $M/qp/$q/ctl; } 2>&1 | grep -q "not permitted" || echo "took $k"
  echo "error: $(cat $M/qp/$q/error)"
done
echo "modify qp_state=INIT pkey_index=0 port_num=1 qkey=0x11111111" > $M/qp/$q/ctl && echo "took 0x11111111"
echo "modify qkey=0x80010000" > $M/qp/$q/ctl 2>/dev/null && echo "took it in INIT"
cat $M/qp/$q/state
`)
	if strings.Contains(out, "took 0x8") || strings.Contains(out, "took 0xf") || strings.Contains(out, "took it") {
		t.Fatalf("uid 65534 got a controlled Q_Key:\n%s%s", out, stderr)
	}
	if !strings.Contains(out, "took 0x11111111") {
		t.Fatalf("uid 65534's ordinary Q_Key:\n%s%s", out, stderr)
	}
	if strings.Count(out, "needs CAP_NET_RAW") != 3 {
		t.Fatalf("no reason in the error file:\n%s%s", out, stderr)
	}
	if !strings.Contains(out, "INIT") {
		t.Fatalf("state:\n%s", out)
	}
	// Root (CAP_NET_RAW) may.
	pd := m.create("pd", "")
	cq := m.create("cq", "cqe=16")
	q := m.create("qp", "pd="+pd+" qp_type=ud send_cq="+cq+" recv_cq="+cq+" max_send_wr=4 max_recv_wr=4")
	m.mustWrite("modify qp_state=INIT pkey_index=0 port_num=1 qkey=0x80010000", "qp", q, "ctl")
}

// TestNobodyPort80EACCES: uid 65534 cannot bind CM port 80 (EACCES,
// CAP_NET_BIND_SERVICE named), can bind 1024; root binds 80.
func TestNobodyPort80EACCES(t *testing.T) {
	m := mount(t)
	out, stderr := nobodyScript(t, m, `
ch=$(mk cm/channel "")
id=$(mk cm "ps=tcp channel=$ch")
echo "bind addr=127.0.0.1 port=80" > $M/cm/$id/ctl && echo "bound 80"
echo "error: $(cat $M/cm/$id/error)"
echo "bind addr=127.0.0.1 port=1024" > $M/cm/$id/ctl && echo "bound 1024"
`)
	if strings.Contains(out, "bound 80") || !strings.Contains(stderr, "Permission denied") ||
		!strings.Contains(out, "CAP_NET_BIND_SERVICE") || !strings.Contains(out, "bound 1024") {
		t.Fatalf("uid 65534 on port 80:\n%s%s", out, stderr)
	}
	ch := m.create("cm/channel", "")
	id := m.create("cm", "ps=tcp channel="+ch)
	m.mustWrite("bind addr=127.0.0.1 port=80", "cm", id, "ctl")
}
