package cm

import (
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
)

// What the kernel's rdma_cm (Linux 6.1, on rxe in the harness of
// scripts/interop-rxe.sh) sends and expects, from its captures.

// kernelMAD is a MAD captured from the kernel, trailing zeros cut.
func kernelMAD(t *testing.T, h string) []byte {
	t.Helper()
	b, err := hex.DecodeString(h)
	if err != nil || len(b) > MADSize {
		t.Fatal(err, len(b))
	}
	return append(b, make([]byte, MADSize-len(b))...)
}

// The REQ of the kernel's rping client (10.77.0.2, port 0xdaeb) to rdmafs'
// rping server (10.77.0.1:7174).
const kernelREQ = "010702030000000000000002dc05cffb0010000000000000fbcf05dc000000000000000001061c06505400fffe77000200000000000000000000110100000001000000a0f6f024a7ffff37f0ffffffff00000000000000000000ffff0a4d000200000000000000000000ffff0a4d0001a9e7b0000040009800000000000000000000000000000000000000000000000000000000000000000000000000000000000000000040daeb0000000000000000000000000a4d00020000000000000000000000000a4d0001"

func TestKernelREQDecodes(t *testing.T) {
	b := kernelMAD(t, kernelREQ)
	h, m, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	r := m.(*REQ)
	// The kernel's TID: its MAD agent's high 32 bits, the comm ID low.
	if h.TID != 0x00000002dc05cffb || r.LocalCommID != 0xfbcf05dc {
		t.Fatalf("tid %#x comm %#x", h.TID, r.LocalCommID)
	}
	for _, c := range []struct {
		name      string
		got, want uint64
	}{
		{"service_id", r.ServiceID, 0x0000000001061c06},
		{"qpn", uint64(r.LocalQPN), 0x11},
		{"responder_resources", uint64(r.ResponderResources), 1},
		{"initiator_depth", uint64(r.InitiatorDepth), 1},
		{"remote_cm_timeout", uint64(r.RemoteCMResponseTimeout), 20},
		{"psn", uint64(r.StartingPSN), 0xf6f024},
		{"local_cm_timeout", uint64(r.LocalCMResponseTimeout), 20},
		{"retry", uint64(r.RetryCount), 7},
		{"pkey", uint64(r.PKey), 0xffff},
		{"mtu", uint64(r.PathMTU), 3},
		{"rnr", uint64(r.RNRRetryCount), 7},
		{"max_cm_retries", uint64(r.MaxCMRetries), 15},
		{"slid", uint64(r.Primary.LocalLID), 0xffff},
		{"dlid", uint64(r.Primary.RemoteLID), 0xffff},
		{"flow_label", uint64(r.Primary.FlowLabel), uint64(RoCEFlowLabel(0xdaeb, 0x1c06))},
		{"hop_limit", uint64(r.Primary.HopLimit), 64},
		{"local_ack_timeout", uint64(r.Primary.LocalACKTimeout), 19},
	} {
		if c.got != c.want {
			t.Errorf("%s = %#x, want %#x", c.name, c.got, c.want)
		}
	}
	if RoCEFlowLabel(0xdaeb, 0x1c06) != 0xa9e7b {
		t.Errorf("RoCEFlowLabel(0xdaeb, 0x1c06) = %#x, the kernel's is 0xa9e7b", RoCEFlowLabel(0xdaeb, 0x1c06))
	}
	hdr, err := ParseCMAHdr(r.PrivateData[:], uint16(r.ServiceID))
	if err != nil || hdr.Src.String() != "10.77.0.2:56043" || hdr.Dst.String() != "10.77.0.1:7174" {
		t.Fatalf("cma header %+v %v", hdr, err)
	}
	// What we encode of it is what the kernel sent.
	if got := Encode(h.TID, r); !strings.EqualFold(hex.EncodeToString(got[:]), hex.EncodeToString(b)) {
		t.Fatalf("re-encoded:\n%x\nwant\n%x", got, b)
	}
}

// TestRoCEFlowLabel: a RoCEv2 route has the kernel's flow label, made of
// the two ports, and the REQ carries it; the passive side's path has the
// REQ's. A local mount's (IB link layer) path has none, as the kernel's.
func TestRoCEFlowLabel(t *testing.T) {
	w := newWorld(t)
	ss, cs := w.wireSide("10.0.0.2"), w.wireSide("10.0.0.1")
	ss.listen(PSTCP, 7174, "")
	c := cs.dial(PSTCP, "10.0.0.2", 7174)
	var sport uint16
	fmt.Sscan(attrOf(c, "src_port"), &sport)
	want := fmt.Sprint(RoCEFlowLabel(sport, 7174))
	if attrOf(c, "flow_label") != want || want == "0" {
		t.Fatalf("flow_label %s, want %s", attrOf(c, "flow_label"), want)
	}
	w.net.take()
	cs.do(c, "connect qp_num=100 psn=5")
	w.net.flush()
	pk := w.net.take()
	if len(pk) == 0 || pk[0].attr() != "req" {
		t.Fatalf("wire %v", pk)
	}
	_, m, err := Decode(pk[0].mad[:])
	if err != nil || fmt.Sprint(m.(*REQ).Primary.FlowLabel) != want {
		t.Fatalf("REQ flow label: %v %v", m, err)
	}
	ss.events()
	if srv := ss.lastMade(); attrOf(srv, "flow_label") != want {
		t.Fatalf("passive flow_label %s, want %s", attrOf(srv, "flow_label"), want)
	}

	l := w.localSide()
	l.listen(PSTCP, 7174, "")
	lc := l.dial(PSTCP, "127.0.0.1", 7174)
	if attrOf(lc, "flow_label") != "0" {
		t.Fatalf("local flow_label %s", attrOf(lc, "flow_label"))
	}
}

// The REP of the kernel's ib_write_bw -R server (rxe, QPN 0x11) to
// rdmafs' REQ (comm ID 0x5cacce59). Its starting PSN is the PSN the
// kernel's QP receives at: rxe NAKed rdmafs' first SEND with a PSN
// sequence error naming exactly this PSN while rdmafs still sent at its
// own REQ's. So the library moves a QP to RTR with rq_psn = its own
// starting PSN (attr psn) and to RTS with sq_psn = the peer's
// (remote_psn), as the kernel's cm.c (ib_send_cm_req and ib_send_cm_rep
// set rq_psn from their own message).
const kernelREP = "01070203000000006e63154d68f17bc2001300000000000093ddf7eb5cacce590000000000001100000000003a018f00000078e0505400fffe770002"

func TestKernelREPGolden(t *testing.T) {
	b := kernelMAD(t, kernelREP)
	h, m, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	r := m.(*REP)
	want := REP{LocalCommID: 0x93ddf7eb, RemoteCommID: 0x5cacce59, LocalQPN: 0x11, StartingPSN: 0x3a018f,
		TargetACKDelay: 15, RNRRetryCount: 7, LocalCAGUID: 0x505400fffe770002}
	if *r != want {
		t.Fatalf("decoded %+v\nwant %+v", *r, want)
	}
	// Our encoding of the same REP is the kernel's, byte for byte.
	if got := Encode(h.TID, &want); hex.EncodeToString(got[:]) != hex.EncodeToString(b) {
		t.Fatalf("encoded:\n%x\nwant\n%x", got, b)
	}
}

// TestAcceptREPMatchesKernel: an accept as librdmacm sends it for
// rdma_accept(id, NULL) (flow_control 0, rnr_retry_count 7) makes a REP
// with the kernel's fixed fields: target ACK delay 15 (rxe's), no flow
// control, RNR retry 7, our PSN and QPN.
func TestAcceptREPMatchesKernel(t *testing.T) {
	w := newWorld(t)
	ss, cs := w.wireSide("10.0.0.2"), w.wireSide("10.0.0.1")
	ss.listen(PSTCP, 7174, "")
	c := cs.dial(PSTCP, "10.0.0.2", 7174)
	cs.do(c, "connect qp_num=16 psn=100")
	w.net.flush()
	ss.events()
	srv := ss.lastMade()
	w.net.take()
	ss.do(srv, "accept qp_num=17 psn=200 responder_resources=0 initiator_depth=0 flow_control=0 rnr_retry_count=7 srq=0")
	w.net.flush()
	pk := w.net.take()
	if len(pk) != 1 || pk[0].attr() != "rep" {
		t.Fatalf("wire %v", pk)
	}
	_, m, _ := Decode(pk[0].mad[:])
	r := m.(*REP)
	if r.TargetACKDelay != 15 || r.FlowControl || r.RNRRetryCount != 7 || r.StartingPSN != 200 || r.LocalQPN != 17 ||
		r.LocalQKey != 0 || r.FailoverAccepted != 0 {
		t.Fatalf("REP %+v", *r)
	}
	// The active side's attr: its own PSN (its QP's rq_psn) and the
	// REP's (its sq_psn).
	if attrOf(c, "psn") != "100" || attrOf(c, "remote_psn") != "200" {
		t.Fatalf("client attr:\n%s", c.Attr())
	}
}

// The kernel's udaddy: its SIDR_REQ (client 10.77.0.2 to rdmafs'
// 10.77.0.1:7174) and its SIDR_REP (server QPN 0x11, qkey 0x01234567)
// decode as such and re-encode byte for byte.
const (
	kernelSIDRReq = "0107020300000000000000028a7d78790017000000000000" +
		"79787d8affff00000000000001111c0600409f120000000000000000000000000a4d00020000000000000000000000000a4d0001"
	kernelSIDRRep = "01070203000000001126c7f2a2dccfb40018000000000000" +
		"3882b1b200000000000011000000000001111c0601234567"
)

func TestKernelSIDRGolden(t *testing.T) {
	b := kernelMAD(t, kernelSIDRReq)
	h, m, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	q := m.(*SIDRReq)
	if q.RequestID != 0x79787d8a || q.PKey != 0xffff || q.ServiceID != ServiceID(PSUDP, 7174) {
		t.Fatalf("SIDR_REQ %+v", q)
	}
	hdr, err := ParseCMAHdr(q.PrivateData[:], 7174)
	if err != nil || hdr.Src.String() != "10.77.0.2:40722" || hdr.Dst.String() != "10.77.0.1:7174" {
		t.Fatalf("cma header %+v %v", hdr, err)
	}
	if got := Encode(h.TID, q); hex.EncodeToString(got[:]) != hex.EncodeToString(b) {
		t.Fatalf("SIDR_REQ re-encoded:\n%x\nwant\n%x", got, b)
	}
	b = kernelMAD(t, kernelSIDRRep)
	h, m, err = Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	want := SIDRRep{RequestID: 0x3882b1b2, Status: SIDRSuccess, QPN: 0x11, ServiceID: ServiceID(PSUDP, 7174), QKey: udpQKey}
	if *m.(*SIDRRep) != want {
		t.Fatalf("SIDR_REP %+v", m)
	}
	if got := Encode(h.TID, &want); hex.EncodeToString(got[:]) != hex.EncodeToString(b) {
		t.Fatalf("SIDR_REP encoded:\n%x\nwant\n%x", got, b)
	}
}
