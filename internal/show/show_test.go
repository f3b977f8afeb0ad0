package show

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"rdmafs/device"
	"rdmafs/fsnode"
	"rdmafs/internal/testmount"
)

// chmodUp lets other users run bin (t.TempDir's directories are 0700).
func chmodUp(t *testing.T, bin string) {
	for _, d := range []string{filepath.Dir(filepath.Dir(bin)), filepath.Dir(bin)} {
		if err := os.Chmod(d, 0755); err != nil {
			t.Fatal(err)
		}
	}
}

// tmount is a device mounted in this process, for the commands to read
// as any user would.
type tmount struct {
	t   *testing.T
	dir string
	dev *device.Device
}

// mountDevice mounts a fresh device in a directory other users can reach.
// Without root or FUSE the test skips, except in CI, where it fails.
func mountDevice(t *testing.T) *tmount {
	t.Helper()
	testmount.NeedRoot(t)
	dev := testmount.Device(t, device.Config{})
	dir, _ := testmount.Mount(t, dev, fsnode.Options{})
	return &tmount{t: t, dir: dir, dev: dev}
}

func (m *tmount) path(parts ...string) string {
	return filepath.Join(append([]string{m.dir}, parts...)...)
}

// create runs one transaction on KIND/new and returns the name.
func (m *tmount) create(kind, line string) string {
	m.t.Helper()
	name, err := testmount.Create(m.path(kind, "new"), line)
	if err != nil {
		m.t.Fatalf("%s/new %q: %v (%s)", kind, line, err, name)
	}
	return name
}

func (m *tmount) write(s string, parts ...string) error { return testmount.Write(m.path(parts...), s) }

func (m *tmount) must(s string, parts ...string) {
	m.t.Helper()
	if err := m.write(s, parts...); err != nil {
		b, _ := os.ReadFile(m.path(append(parts[:len(parts)-1:len(parts)-1], "error")...))
		m.t.Fatalf("write %q to %s: %v (%s)", s, strings.Join(parts, "/"), err, b)
	}
}

func (m *tmount) read(parts ...string) string {
	m.t.Helper()
	b, err := os.ReadFile(m.path(parts...))
	if err != nil {
		m.t.Fatal(err)
	}
	return string(b)
}

func (m *tmount) kv(parts ...string) kv { m.t.Helper(); return parseKV([]byte(m.read(parts...))) }

// waitFor polls cond for up to 10 s.
func (m *tmount) waitFor(what string, cond func() bool) {
	m.t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			m.t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// pollN reads cq/H/poll until it has returned n completions.
func (m *tmount) pollN(cq string, n int) []string {
	m.t.Helper()
	var got []string
	m.waitFor(fmt.Sprintf("%d completions on cq %s", n, cq), func() bool {
		for _, l := range strings.Split(m.read("cq", cq, "poll"), "\n") {
			if l != "" {
				got = append(got, l)
			}
		}
		return len(got) >= n
	})
	return got
}

// pair is two RC QPs connected to each other, with memory to move.
type pair struct {
	pd, cqA, cqB   string
	qa, qb         string
	lkeyA, lkeyB   string
	rkeyB          string
	rnrB           int // qb's min_rnr_timer
	sendCap, rqCap int
}

const access = "local_write,remote_write,remote_read"

// newPair makes a pair; qb answers an RNR NAK with min_rnr_timer rnrB
// (0 is the longest wait, 655 ms).
func (m *tmount) newPair(cqeA int, rnrB int) *pair {
	m.t.Helper()
	p := &pair{rnrB: rnrB}
	p.pd = m.create("pd", "")
	p.cqA = m.create("cq", fmt.Sprintf("cqe=%d", cqeA))
	p.cqB = m.create("cq", "cqe=64")
	mrA := m.create("mr", "pd="+p.pd+" length=65536 access="+access)
	mrB := m.create("mr", "pd="+p.pd+" length=65536 access="+access)
	qp := func(cq string) string {
		return m.create("qp", fmt.Sprintf("pd=%s qp_type=rc send_cq=%s recv_cq=%s max_send_wr=16 max_recv_wr=16 max_send_sge=1 max_recv_sge=1", p.pd, cq, cq))
	}
	p.qa, p.qb = qp(p.cqA), qp(p.cqB)
	a, b := m.kv("mr", mrA, "attr"), m.kv("mr", mrB, "attr")
	p.lkeyA, p.lkeyB, p.rkeyB = a["lkey"], b["lkey"], b["rkey"]
	gid := m.kv("port")["gid"]
	conn := func(q, dest string, rnr int) {
		m.must("modify qp_state=INIT pkey_index=0 port_num=1 qp_access_flags="+access, "qp", q, "ctl")
		m.must(fmt.Sprintf("modify qp_state=RTR path_mtu=1024 dest_qp_num=%s rq_psn=100 dgid=%s max_dest_rd_atomic=1 min_rnr_timer=%d", dest, gid, rnr), "qp", q, "ctl")
		m.must("modify qp_state=RTS sq_psn=100 timeout=14 retry_cnt=7 rnr_retry=7 max_rd_atomic=1", "qp", q, "ctl")
	}
	conn(p.qa, p.qb, 12)
	conn(p.qb, p.qa, rnrB)
	return p
}

func (m *tmount) post(p *pair, line string) {
	m.t.Helper()
	m.must(line+"\n", "qp", p.qa, "post_send")
}

// qpFiles is what show summarises of one QP.
type qpFiles struct{ attr, counters, err string }

func (m *tmount) qpFiles() map[string]qpFiles {
	m.t.Helper()
	out := map[string]qpFiles{}
	ents, _ := os.ReadDir(m.path("qp"))
	for _, e := range ents {
		if e.Name() == "new" {
			continue
		}
		out[e.Name()] = qpFiles{m.read("qp", e.Name(), "attr"), m.read("qp", e.Name(), "counters"), m.read("qp", e.Name(), "error")}
	}
	return out
}

// stable runs f (which reads the tree through rdmafs show) until the QP
// files were the same before and after it, and returns them: then what f
// saw must equal them exactly. A QP waiting out an RNR NAK retries every
// 655 ms, so a second try is rare.
func (m *tmount) stable(f func()) map[string]qpFiles {
	m.t.Helper()
	for i := 0; ; i++ {
		before := m.qpFiles()
		f()
		after := m.qpFiles()
		if maps.Equal(before, after) {
			return after
		}
		if i == 10 {
			m.t.Fatal("the QP files never held still around rdmafs show")
		}
	}
}

// table parses the table whose header starts with first from rdmafs
// show's text: one map of header to cell per row. The last column
// (ERROR) takes the rest of the line.
func table(t *testing.T, out, first string) []map[string]string {
	t.Helper()
	for _, block := range strings.Split(out, "\n\n") {
		lines := strings.Split(strings.TrimRight(block, "\n"), "\n")
		if len(lines) == 0 || !strings.HasPrefix(lines[0], first+" ") {
			continue
		}
		header := strings.Fields(lines[0])
		var rows []map[string]string
		for _, l := range lines[1:] {
			f := strings.Fields(l)
			if len(f) < len(header) {
				t.Fatalf("row %q has %d cells, header %d", l, len(f), len(header))
			}
			r := map[string]string{}
			for i, h := range header[:len(header)-1] {
				r[h] = f[i]
			}
			r[header[len(header)-1]] = strings.Join(f[len(header)-1:], " ")
			rows = append(rows, r)
		}
		return rows
	}
	t.Fatalf("no %s table in\n%s", first, out)
	return nil
}

// wantQPRow is the QP table row that a QP's files call for, computed here
// from the files independently of show's own code.
func wantQPRow(name string, f qpFiles) map[string]string {
	a, c := parseKV([]byte(f.attr)), parseKV([]byte(f.counters))
	or := func(k, dflt string) string {
		if v, ok := a[k]; ok && v != "0" && v != "::" {
			return v
		}
		return dflt
	}
	peer, gid := "-", "-"
	if _, ok := a["dest_qp_num"]; ok && (a["dest_qp_num"] != "0" || a["dgid"] != "::") {
		peer, gid = a["dest_qp_num"], a["dgid"]
	}
	rq := "srq"
	if a["srq"] == "0" {
		rq = c["rq_posted"] + "/" + a["max_recv_wr"]
	}
	rnr := c["rnr_naks_recv"]
	if c["rnr_wait"] == "1" {
		rnr += "*"
	}
	e := strings.TrimSpace(f.err)
	if e == "" {
		e = "-"
	}
	return map[string]string{
		"QPN": name, "OWNER": "root", "TYPE": strings.ToUpper(a["qp_type"]), "STATE": a["qp_state"],
		"PEER": peer, "PEER-GID": gid, "PD": a["pd"], "SCQ": a["send_cq"], "RCQ": a["recv_cq"], "SRQ": or("srq", "-"),
		"SQ": c["sq_posted"] + "/" + a["max_send_wr"], "INFLIGHT": c["sq_in_flight"], "RQ": rq,
		"SQ-PSN": c["send_psn"], "RQ-PSN": c["expected_psn"], "RETX": c["retransmits"],
		"NAK-TX": c["seq_naks_sent"] + "/" + c["inv_req_naks_sent"] + "/" + c["rem_access_naks_sent"] + "/" + c["rem_op_naks_sent"],
		"NAK-RX": c["seq_naks_recv"] + "/" + c["inv_req_naks_recv"] + "/" + c["rem_access_naks_recv"] + "/" + c["rem_op_naks_recv"],
		"RNR-TX": c["rnr_naks_sent"], "RNR-WAIT": rnr, "ERROR": e,
	}
}

// runShow is rdmafs show [-j|--json] MOUNT [KIND] without the command
// line's flag parsing (cmd/rdmafs's), from Collect to Write.
func runShow(t *testing.T, args ...string) string {
	t.Helper()
	var o Options
	for _, a := range args {
		switch {
		case a == "-j" || a == "--json":
			o.JSON = true
		case IsKind(a):
			o.Kinds = []string{a}
		default:
			o.Mount = a
		}
	}
	if o.Kinds == nil {
		o.Kinds = Kinds
	}
	v, err := Collect(o.Mount, o.Kinds, time.Now())
	if err != nil {
		t.Fatalf("show %v: %v", args, err)
	}
	var out bytes.Buffer
	if err := v.Write(&out, o, false); err != nil {
		t.Fatalf("show %v: %v", args, err)
	}
	return out.String()
}

// liveDevice is a device with every kind of object and traffic in
// progress: qa has a SEND waiting out an RNR NAK (qb has no receive
// posted) behind a completed WRITE, three receives posted and a failed
// command in its error file; cq B is armed; a second pair's CQ overflowed.
func liveDevice(t *testing.T) (*tmount, *pair, *pair) {
	m := mountDevice(t)
	p := m.newPair(64, 0)
	m.post(p, fmt.Sprintf("opcode=rdma_write wr_id=1 send_flags=signaled sge=%s:0:3000 remote_addr=0 rkey=%s", p.lkeyA, p.rkeyB))
	m.pollN(p.cqA, 1)
	m.post(p, fmt.Sprintf("opcode=rdma_write wr_id=2 send_flags=signaled sge=%s:0:64 remote_addr=64 rkey=%s", p.lkeyA, p.rkeyB))
	m.waitFor("the second WRITE's completion", func() bool { return m.kv("cq", p.cqA, "attr")["pending"] == "1" })
	m.post(p, fmt.Sprintf("opcode=send wr_id=3 send_flags=signaled sge=%s:0:100", p.lkeyA))
	m.waitFor("the RNR NAK", func() bool { return m.kv("qp", p.qa, "counters")["rnr_wait"] == "1" })
	for i := 0; i < 3; i++ {
		m.must(fmt.Sprintf("wr_id=%d sge=%s:%d:64\n", 10+i, p.lkeyA, 4096+64*i), "qp", p.qa, "post_recv")
	}
	m.must("next\n", "cq", p.cqB, "notify")
	if err := m.write("modify qp_state=BOGUS\n", "qp", p.qa, "ctl"); err == nil {
		t.Fatal("a bad modify succeeded")
	}
	// The overflow: two signaled WRITEs into a CQ of one entry.
	o := m.newPair(1, 12)
	for i := 1; i <= 2; i++ {
		m.post(o, fmt.Sprintf("opcode=rdma_write wr_id=%d send_flags=signaled sge=%s:0:8 remote_addr=0 rkey=%s", i, o.lkeyA, o.rkeyB))
	}
	m.waitFor("the CQ overflow", func() bool { return m.kv("cq", o.cqA, "attr")["overflowed"] == "1" })
	m.create("srq", "pd="+p.pd+" max_wr=8 max_sge=1 srq_limit=2")
	m.create("ah", "pd="+p.pd+" dgid="+m.kv("port")["gid"]+" sl=3")
	m.create("mw", "pd="+p.pd)
	return m, p, o
}

// rdmafs show against a device with traffic in flight: every column of
// the QP and CQ tables is what the files they summarise say, and the rows
// show the situation (a QP waiting on RNR with one WR in flight, an armed
// CQ, an overflowed one, the failed command).
func TestShowLiveTraffic(t *testing.T) {
	m, p, o := liveDevice(t)
	var out string
	files := m.stable(func() { out = runShow(t, m.dir) })
	t.Logf("rdmafs show:\n%s", out)
	rows := table(t, out, "QPN")
	if len(rows) != len(files) || len(rows) != 4 {
		t.Fatalf("%d QP rows for %d QPs:\n%s", len(rows), len(files), out)
	}
	byQPN := map[string]map[string]string{}
	for _, r := range rows {
		byQPN[r["QPN"]] = r
		want := wantQPRow(r["QPN"], files[r["QPN"]])
		if !maps.Equal(r, want) {
			t.Errorf("qp %s:\n got %v\nwant %v", r["QPN"], r, want)
		}
	}
	a := byQPN[p.qa]
	// PSNs from 100: the WRITEs took 100-102 and 103, the SEND 104.
	for col, want := range map[string]string{"STATE": "RTS", "SQ": "1/16", "INFLIGHT": "1", "RQ": "3/16", "PEER": p.qb, "SQ-PSN": "105"} {
		if a[col] != want {
			t.Errorf("qp %s %s = %q, want %q", p.qa, col, a[col], want)
		}
	}
	if !strings.HasSuffix(a["RNR-WAIT"], "*") || a["RNR-WAIT"] == "0*" {
		t.Errorf("qp %s RNR-WAIT %q: want a count of RNR NAKs and * (waiting)", p.qa, a["RNR-WAIT"])
	}
	if !strings.Contains(a["ERROR"], "BOGUS") {
		t.Errorf("qp %s ERROR %q", p.qa, a["ERROR"])
	}
	if b := byQPN[p.qb]; b["RNR-TX"] == "0" || b["RQ"] != "0/16" || b["RQ-PSN"] != "104" {
		t.Errorf("qp %s: %v", p.qb, b)
	}
	if s := byQPN[o.qa]["STATE"]; s != "ERR" {
		t.Errorf("qp %s (CQ overflowed) state %s", o.qa, s)
	}

	cqs := table(t, out, "CQ")
	if len(cqs) != 4 {
		t.Fatalf("%d CQ rows", len(cqs))
	}
	for _, r := range cqs {
		at := m.kv("cq", r["CQ"], "attr")
		yes := map[string]string{"0": "no", "1": "yes"}
		want := map[string]string{"CQ": r["CQ"], "OWNER": "root", "CQE": at["cqe"], "PENDING": at["pending"],
			"ARMED": at["armed"], "OVERFLOWED": yes[at["overflowed"]], "OVERFLOWS": at["overflows"], "QPS": "1"}
		if !maps.Equal(r, want) {
			t.Errorf("cq %s:\n got %v\nwant %v", r["CQ"], r, want)
		}
	}
	byCQ := map[string]map[string]string{}
	for _, r := range cqs {
		byCQ[r["CQ"]] = r
	}
	if r := byCQ[p.cqA]; r["PENDING"] != "1" || r["ARMED"] != "none" {
		t.Errorf("cq %s: %v (one completion unpolled)", p.cqA, r)
	}
	if r := byCQ[p.cqB]; r["ARMED"] != "next" {
		t.Errorf("cq %s: %v (armed)", p.cqB, r)
	}
	if r := byCQ[o.cqA]; r["OVERFLOWED"] != "yes" || r["OVERFLOWS"] != "1" || r["CQE"] != "1" {
		t.Errorf("cq %s: %v (overflowed)", o.cqA, r)
	}
	for _, r := range table(t, out, "MR") {
		at := m.kv("mr", r["MR"], "attr")
		hex := func(k string) string { return fmt.Sprintf("0x%x", at.u64(k)) }
		want := map[string]string{"MR": r["MR"], "OWNER": "root", "PD": at["pd"], "LENGTH": at["length"],
			"IOVA": hex("iova"), "LKEY": hex("lkey"), "RKEY": hex("rkey"), "VALID": "yes", "ACCESS": at["access"]}
		if !maps.Equal(r, want) {
			t.Errorf("mr %s:\n got %v\nwant %v", r["MR"], r, want)
		}
	}
	if r, at := table(t, out, "SRQ")[0], m.kv("srq", "1", "attr"); r["MAX_WR"] != at["max_wr"] || r["LIMIT"] != at["srq_limit"] || r["PENDING"] != at["pending"] {
		t.Errorf("srq row %v, attr %v", r, at)
	}
	if r, at := table(t, out, "AH")[0], m.kv("ah", "1", "attr"); r["DGID"] != at["dgid"] || r["SL"] != "3" {
		t.Errorf("ah row %v, attr %v", r, at)
	}
	for first, n := range map[string]int{"PD": 2, "MR": 4, "MW": 1, "SRQ": 1, "AH": 1} {
		if got := len(table(t, out, first)); got != n {
			t.Errorf("%d %s rows, want %d", got, first, n)
		}
	}
	if pd := table(t, out, "PD")[0]; pd["MRS"] != "2" || pd["QPS"] != "2" || pd["SRQS"] != "1" || pd["AHS"] != "1" || pd["MWS"] != "1" {
		t.Errorf("pd row %v", pd)
	}
	// One kind: only its table.
	only := runShow(t, m.dir, "cq")
	if !strings.HasPrefix(only, "CQ ") || strings.Contains(only, "QPN") {
		t.Errorf("show MOUNT cq:\n%s", only)
	}
	// The error file it shows is non-empty for [ -s ].
	if err := exec.Command("bash", "-c", "[ -s "+m.path("qp", p.qa, "error")+" ]").Run(); err != nil {
		t.Errorf("[ -s qp/%s/error ]: %v", p.qa, err)
	}
}

// rdmafs show --json: one object with an array per kind, and each QP's
// fields are its files'.
func TestShowJSON(t *testing.T) {
	m, p, _ := liveDevice(t)
	var out string
	files := m.stable(func() { out = runShow(t, "-j", m.dir) })
	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	for _, k := range append([]string{"mount", "time"}, Kinds...) {
		if _, ok := raw[k]; !ok {
			t.Errorf("no %q in the JSON", k)
		}
	}
	var v struct {
		Mount string
		QP    []map[string]any
		CQ    []map[string]any
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatal(err)
	}
	if v.Mount != m.dir || len(v.QP) != 4 || len(v.CQ) != 4 {
		t.Fatalf("mount %q, %d QPs, %d CQs", v.Mount, len(v.QP), len(v.CQ))
	}
	num := func(x any) string { return fmt.Sprint(x) }
	for _, q := range v.QP {
		name := num(q["qpn"])
		a, c := parseKV([]byte(files[name].attr)), parseKV([]byte(files[name].counters))
		sq, _ := q["sq"].(map[string]any)
		rq, _ := q["rq"].(map[string]any)
		nr, _ := q["naks_recv"].(map[string]any)
		ns, _ := q["naks_sent"].(map[string]any)
		got := map[string]string{"type": num(q["type"]), "state": num(q["state"]), "peer_qpn": num(q["peer_qpn"]),
			"sq_psn": num(q["sq_psn"]), "rq_psn": num(q["rq_psn"]), "sq.depth": num(sq["depth"]), "sq.posted": num(sq["posted"]),
			"sq.in_flight": num(sq["in_flight"]), "rq.posted": num(rq["posted"]), "retransmits": num(q["retransmits"]),
			"naks_recv.rnr": num(nr["rnr"]), "naks_sent.rnr": num(ns["rnr"]), "naks_recv.seq": num(nr["seq"]),
			"error": num(q["error"])}
		want := map[string]string{"type": a["qp_type"], "state": a["qp_state"], "peer_qpn": a["dest_qp_num"],
			"sq_psn": c["send_psn"], "rq_psn": c["expected_psn"], "sq.depth": a["max_send_wr"], "sq.posted": c["sq_posted"],
			"sq.in_flight": c["sq_in_flight"], "rq.posted": c["rq_posted"], "retransmits": c["retransmits"],
			"naks_recv.rnr": c["rnr_naks_recv"], "naks_sent.rnr": c["rnr_naks_sent"], "naks_recv.seq": c["seq_naks_recv"],
			"error": strings.TrimSpace(files[name].err)}
		if !maps.Equal(got, want) {
			t.Errorf("qp %s:\n got %v\nwant %v", name, got, want)
		}
		cs, _ := q["counters"].(map[string]any)
		if len(cs) != len(c) {
			t.Errorf("qp %s: %d counters in the JSON, %d in the file", name, len(cs), len(c))
		}
		for k, x := range c {
			if num(cs[k]) != x {
				t.Errorf("qp %s counters[%s] = %v, file %s", name, k, cs[k], x)
			}
		}
	}
	// One kind: only its array.
	var one map[string]json.RawMessage
	if err := json.Unmarshal([]byte(runShow(t, "--json", m.dir, "qp")), &one); err != nil {
		t.Fatal(err)
	}
	if _, ok := one["cq"]; ok || one["qp"] == nil {
		t.Errorf("show -j MOUNT qp has keys %v", slicesOf(one))
	}
	_ = p
}

func slicesOf(m map[string]json.RawMessage) []string {
	var k []string
	for x := range m {
		k = append(k, x)
	}
	return k
}

// A second user sees only its own objects; root sees both users'.
func TestShowOtherUser(t *testing.T) {
	m := mountDevice(t)
	bin := testmount.Rdmafs(t)
	chmodUp(t, bin)
	p := m.newPair(16, 12)
	const nobody = 65534
	script := fmt.Sprintf(`set -e; M=%s
{ echo "" >&0; read -r pd; } <>$M/pd/new
{ echo "cqe=8" >&0; read -r cq; } <>$M/cq/new
{ echo "pd=$pd qp_type=rc send_cq=$cq recv_cq=$cq max_send_wr=4 max_recv_wr=4" >&0; read -r qp; } <>$M/qp/new
echo "$pd $cq $qp"`, m.dir)
	cmd := exec.Command("bash", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("uid %d creating objects: %v %s", nobody, err, b)
	}
	theirs := strings.Fields(string(b)) // pd cq qp
	show := func(uid uint32) (qps, cqs, pds []string) {
		c := exec.Command(bin, "show", "-j", m.dir)
		if uid != 0 {
			c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
		}
		var stderr bytes.Buffer
		c.Stderr = &stderr
		out, err := c.Output()
		if err != nil {
			t.Fatalf("uid %d: rdmafs show: %v %s", uid, err, stderr.String())
		}
		var v struct {
			QP []struct {
				QPN   uint32
				Owner uint32
			}
			CQ, PD []struct {
				Handle uint32
				Owner  uint32
			}
		}
		if err := json.Unmarshal(out, &v); err != nil {
			t.Fatalf("uid %d: %v\n%s", uid, err, out)
		}
		for _, q := range v.QP {
			if uid != 0 && q.Owner != uid {
				t.Errorf("uid %d sees qp %d of uid %d", uid, q.QPN, q.Owner)
			}
			qps = append(qps, fmt.Sprint(q.QPN))
		}
		for _, c := range v.CQ {
			cqs = append(cqs, fmt.Sprint(c.Handle))
		}
		for _, c := range v.PD {
			pds = append(pds, fmt.Sprint(c.Handle))
		}
		return
	}
	qps, cqs, pds := show(nobody)
	if fmt.Sprint(pds, cqs, qps) != fmt.Sprint(theirs[:1], theirs[1:2], theirs[2:]) {
		t.Errorf("uid %d sees pd %v cq %v qp %v, want only its own %v", nobody, pds, cqs, qps, theirs)
	}
	qps, _, _ = show(0)
	if want := []string{p.qa, p.qb, theirs[2]}; strings.Join(qps, " ") != strings.Join(want, " ") {
		t.Errorf("root sees qps %v, want %v", qps, want)
	}
	// The table for the second user names it as the owner.
	c := exec.Command(bin, "show", m.dir, "qp")
	c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	out, err := c.CombinedOutput()
	rows := table(t, string(out), "QPN")
	if err != nil || len(rows) != 1 || rows[0]["QPN"] != theirs[2] || rows[0]["OWNER"] == "root" {
		t.Errorf("uid %d's table: %v %v\n%s", nobody, err, rows, out)
	}
}

// writerFunc collects the frames rdmafs show --watch writes.
type frames chan []byte

func (f frames) Write(p []byte) (int, error) { f <- bytes.Clone(p); return len(p), nil }

// fakeClock is the clock watch is given.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

func (c *fakeClock) advance(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	return c.now
}

// --watch with an injected clock and ticker: each frame after the first
// has every QP's rates, the counters' change over the clock's time; text
// frames redraw the screen in place.
func TestShowWatch(t *testing.T) {
	m := mountDevice(t)
	p := m.newPair(64, 12)
	for _, jsonMode := range []bool{true, false} {
		clk := &fakeClock{now: time.Unix(1_700_000_000, 0)}
		tick := make(chan time.Time)
		out := make(frames, 4)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		o := Options{Mount: m.dir, Kinds: []string{"qp"}, JSON: jsonMode, Interval: time.Second}
		go func() { done <- Watch(ctx, o, out, clk.Now, tick) }()
		first := <-out
		// Ten 1000-byte WRITEs, all completed, over two seconds of the
		// clock: 5 messages and 5000 bytes a second out of qa, into qb.
		for i := 0; i < 10; i++ {
			m.post(p, fmt.Sprintf("opcode=rdma_write wr_id=%d send_flags=signaled sge=%s:0:1000 remote_addr=0 rkey=%s", i, p.lkeyA, p.rkeyB))
		}
		m.pollN(p.cqA, 10)
		tick <- clk.advance(2 * time.Second)
		second := <-out
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if jsonMode {
			var f1, f2 struct{ QP []qpRow }
			if err := json.Unmarshal(first, &f1); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(second, &f2); err != nil {
				t.Fatal(err)
			}
			if len(f1.QP) != 2 || f1.QP[0].Rates != nil || len(f2.QP) != 2 {
				t.Fatalf("frames: %s\n%s", first, second)
			}
			for i, r := range f2.QP {
				old := f1.QP[i].Counters
				want := qpRates{
					MsgsSent:    float64(r.Counters["send_wqes"]-old["send_wqes"]) / 2,
					MsgsRecv:    float64(r.Counters["recv_wqes"]-old["recv_wqes"]) / 2,
					BytesSent:   float64(r.Counters["bytes_sent"]-old["bytes_sent"]) / 2,
					BytesRecv:   float64(r.Counters["bytes_recv"]-old["bytes_recv"]) / 2,
					Retransmits: float64(r.Counters["retransmits"]-old["retransmits"]) / 2,
				}
				if r.Rates == nil || *r.Rates != want {
					t.Errorf("qp %d rates %+v, want %+v", r.QPN, r.Rates, want)
				}
			}
			if a := f2.QP[0].Rates; a.MsgsSent != 5 || a.BytesSent != 5000 || f2.QP[1].Rates.BytesRecv != 5000 {
				t.Errorf("qa sent %v msg/s %v B/s, qb received %v B/s; want 5, 5000, 5000", a.MsgsSent, a.BytesSent, f2.QP[1].Rates.BytesRecv)
			}
			continue
		}
		for _, f := range [][]byte{first, second} {
			if !bytes.HasPrefix(f, []byte("\x1b[H\x1b[2J"+m.dir)) {
				t.Errorf("a text frame does not redraw the screen: %q", f[:min(40, len(f))])
			}
		}
		strip := func(f []byte) string { _, s, _ := strings.Cut(string(f), "\n\n"); return s }
		r1, r2 := table(t, strip(first), "QPN"), table(t, strip(second), "QPN")
		if r1[0]["TX-B/s"] != "-" || r2[0]["TX-B/s"] != "5000" || r2[0]["TX-MSG/s"] != "5" || r2[1]["RX-B/s"] != "5000" || r2[0]["RETX/s"] != "0" {
			t.Errorf("rate columns: first %v\nsecond %v", r1[0], r2)
		}
	}
}

// The mount is the machine's only fuse.rdmafs in mountinfo, or an error
// naming why not.
func TestFindMount(t *testing.T) {
	line := func(id int, mnt, fstype string) string {
		return fmt.Sprintf("%d 27 0:%d / %s rw,nosuid,nodev,relatime shared:1 - %s rdmafs rw,user_id=0,group_id=0,allow_other\n", id, id, mnt, fstype)
	}
	other := line(20, "/proc", "proc") + line(21, "/mnt/x", "fuse.sshfs")
	if _, err := FindMount(strings.NewReader(other)); err == nil || !strings.Contains(err.Error(), "no rdmafs mount") {
		t.Errorf("none: %v", err)
	}
	got, err := FindMount(strings.NewReader(other + line(30, `/tmp/my\040dev`, "fuse.rdmafs")))
	if err != nil || got != "/tmp/my dev" {
		t.Errorf("one: %q %v", got, err)
	}
	_, err = FindMount(strings.NewReader(line(30, "/a", "fuse.rdmafs") + other + line(31, "/b", "fuse.rdmafs")))
	if err == nil || !strings.Contains(err.Error(), "/a, /b") {
		t.Errorf("two: %v", err)
	}
}

// rdmafs show with XRC objects: the domain handles, an XRC SRQ's type,
// number and CQ, and the two XRC QP types (no receive queue of their own).
func TestShowXRC(t *testing.T) {
	m := mountDevice(t)
	f, err := os.Create(filepath.Join(t.TempDir(), "domain"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// The domain of a file, named by a descriptor of the caller's: this
	// test's, whose thread writes the request.
	shared := m.create("xrcd", fmt.Sprintf("fd=%d create=1", f.Fd()))
	private := m.create("xrcd", "")
	pd := m.create("pd", "")
	cq := m.create("cq", "cqe=8")
	srq := m.create("srq", "pd="+pd+" max_wr=4 max_sge=1 srq_type=xrc xrcd="+shared+" cq="+cq)
	tgt := m.create("qp", "qp_type=xrc_recv xrcd="+shared)
	ini := m.create("qp", "pd="+pd+" qp_type=xrc_send send_cq="+cq+" max_send_wr=4 max_send_sge=1")
	out := runShow(t, m.dir)
	t.Logf("rdmafs show:\n%s", out)
	x := map[string]map[string]string{}
	for _, r := range table(t, out, "XRCD") {
		x[r["XRCD"]] = r
	}
	if x[shared]["SHARED"] != "yes" || x[private]["SHARED"] != "no" || x[shared]["OWNER"] != "root" {
		t.Errorf("xrcd rows %v", x)
	}
	at := m.kv("srq", srq, "attr")
	if r := table(t, out, "SRQ")[0]; r["TYPE"] != "xrc" || r["SRQ_NUM"] != at["srq_num"] || r["CQ"] != cq || at["srq_num"] == "" {
		t.Errorf("srq row %v, attr %v", r, at)
	}
	qps := map[string]map[string]string{}
	for _, r := range table(t, out, "QPN") {
		qps[r["QPN"]] = r
	}
	if r := qps[tgt]; r["TYPE"] != "XRC_RECV" || r["RQ"] != "-" || r["PD"] != "0" {
		t.Errorf("xrc_recv row %v", r)
	}
	if r := qps[ini]; r["TYPE"] != "XRC_SEND" || r["RQ"] != "-" || r["PD"] != pd {
		t.Errorf("xrc_send row %v", r)
	}
}
