package qp

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
)

// textSendNums are the plain numeric send-WR keys with their width and
// field.
var textSendNums = []struct {
	textNumCase
	get func(w *SendWR) uint64
}{
	{textNumCase{"wr_id", ^uint64(0)}, func(w *SendWR) uint64 { return w.WRID }},
	{textNumCase{"imm_data", 0xffffffff}, func(w *SendWR) uint64 { return uint64(w.ImmData) }},
	{textNumCase{"invalidate_rkey", 0xffffffff}, func(w *SendWR) uint64 { return uint64(w.InvalidateRKey) }},
	{textNumCase{"remote_addr", ^uint64(0)}, func(w *SendWR) uint64 { return w.RemoteAddr }},
	{textNumCase{"rkey", 0xffffffff}, func(w *SendWR) uint64 { return uint64(w.RKey) }},
	{textNumCase{"compare_add", ^uint64(0)}, func(w *SendWR) uint64 { return w.CompareAdd }},
	{textNumCase{"swap", ^uint64(0)}, func(w *SendWR) uint64 { return w.Swap }},
	{textNumCase{"ah", 0xffffffff}, func(w *SendWR) uint64 { return uint64(w.AH) }},
	{textNumCase{"remote_qpn", 0xffffff}, func(w *SendWR) uint64 { return uint64(w.RemoteQPN) }},
	{textNumCase{"remote_qkey", 0xffffffff}, func(w *SendWR) uint64 { return uint64(w.RemoteQKey) }},
	{textNumCase{"mw", 0xffffffff}, func(w *SendWR) uint64 { return uint64(w.MW) }},
	{textNumCase{"bind_lkey", 0xffffffff}, func(w *SendWR) uint64 { return uint64(w.BindLKey) }},
	{textNumCase{"bind_addr", ^uint64(0)}, func(w *SendWR) uint64 { return w.BindAddr }},
	{textNumCase{"bind_length", ^uint64(0)}, func(w *SendWR) uint64 { return w.BindLength }},
}

func TestParseSendWRNumbers(t *testing.T) {
	for _, c := range textSendNums {
		good, bad := textNumValues(c.max)
		for v, want := range good {
			in := "opcode=send " + c.key + "=" + v
			w, err := ParseSendWR(in)
			if err != nil {
				t.Errorf("%q: %v", in, err)
				continue
			}
			if got := c.get(&w); got != want {
				t.Errorf("%q: got %d, want %d", in, got, want)
			}
		}
		for v, msg := range bad {
			in := "opcode=send " + c.key + "=" + v
			_, err := ParseSendWR(in)
			wantTextErr(t, in, err, c.key, msg)
		}
		in := c.key + "= opcode=send"
		_, err := ParseSendWR(in)
		wantTextErr(t, in, err, c.key, "empty value")
		in = "opcode=send " + c.key + "=1 " + c.key + "=1"
		_, err = ParseSendWR(in)
		wantTextErr(t, in, err, c.key, "repeated key")
	}
}

func TestParseSendWROpcodes(t *testing.T) {
	for _, o := range WROpcodes() {
		for _, v := range []string{o.String(), strings.ToUpper(o.String())} {
			w, err := ParseSendWR("opcode=" + v)
			if err != nil || w.Opcode != o {
				t.Errorf("opcode=%s: got %v, %v", v, w.Opcode, err)
			}
		}
	}
	if w, err := ParseSendWR("opcode=0x8"); err != nil || w.Opcode != WRBindMW {
		t.Errorf("opcode=0x8: got %v, %v", w.Opcode, err)
	}
	if w, err := ParseSendWR("opcode=15"); err != nil || w.Opcode != WRAtomicWrite {
		t.Errorf("opcode=15: got %v, %v", w.Opcode, err)
	}
	bad := []struct{ in, key, msg string }{
		{"", "opcode", "missing required key"},
		{"wr_id=1 sge=1:2:3", "opcode", "missing required key"},
		{"opcode=write", "opcode", `unknown opcode "write"`},
		{"opcode=lso", "opcode", "unknown opcode"},
		{"opcode=10", "opcode", "unknown opcode 10"},
		{"opcode=0xe", "opcode", "unknown opcode 0xe"}, // IBV_WR_FLUSH
		{"opcode=16", "opcode", "out of range: 16 > 15"},
		{"opcode=flush", "opcode", `unknown opcode "flush"`},
		{"opcode=-1", "opcode", "out of range: -1 < 0"},
		{"opcode=send opcode=send", "opcode", "repeated key"},
		{"opcode=", "opcode", "empty value"},
		{"opcode=send bogus=1", "bogus", "unknown key"},
		{"opcode=send remote_qp=1", "remote_qp", "unknown key"},
		{"opcode=send wr_id", "wr_id", "not a key=value token"},
		{"opcode=send =1", "=1", "empty key"},
	}
	for _, c := range bad {
		_, err := ParseSendWR(c.in)
		wantTextErr(t, c.in, err, c.key, c.msg)
	}
}

func TestParseSGE(t *testing.T) {
	w, err := ParseSendWR("opcode=send sge=0x1234:0x7f0000001000:64 sge=1:18446744073709551615:4294967295 sge=0:0:0")
	want := []SGE{{LKey: 0x1234, Addr: 0x7f0000001000, Length: 64}, {LKey: 1, Addr: ^uint64(0), Length: 0xffffffff}, {}}
	if err != nil || !reflect.DeepEqual(w.SGL, want) {
		t.Errorf("got %+v, %v; want %+v", w.SGL, err, want)
	}
	r, err := ParseRecvWR("sge=1:2:3 wr_id=9 sge=4:5:6")
	if err != nil || r.WRID != 9 || !reflect.DeepEqual(r.SGL, []SGE{{LKey: 1, Addr: 2, Length: 3}, {LKey: 4, Addr: 5, Length: 6}}) {
		t.Errorf("recv: got %+v, %v", r, err)
	}
	bad := []struct{ in, msg string }{
		{"sge=1:2", "want LKEY:ADDR:LENGTH"},
		{"sge=1:2:3:4", "want LKEY:ADDR:LENGTH"},
		{"sge=1", "want LKEY:ADDR:LENGTH"},
		{"sge=::", "LKEY not a number"},
		{"sge=1::3", "ADDR not a number"},
		{"sge=1:2:", "LENGTH not a number"},
		{"sge=4294967296:0:0", "LKEY out of range: 4294967296 > 4294967295"},
		{"sge=0:18446744073709551616:0", "ADDR out of range"},
		{"sge=0:0:0x100000000", "LENGTH out of range"},
		{"sge=x:0:0", `LKEY not a number: "x"`},
		{"sge=-1:0:0", "LKEY out of range: -1 < 0"},
		{"sge=1,2,3", "want LKEY:ADDR:LENGTH"},
		{"sge=", "empty value"},
	}
	for _, c := range bad {
		_, err := ParseSendWR("opcode=send " + c.in)
		wantTextErr(t, c.in, err, "sge", c.msg)
		_, err = ParseRecvWR(c.in)
		wantTextErr(t, c.in, err, "sge", c.msg)
	}
}

func TestParseSendFlagsAndInline(t *testing.T) {
	good := []struct {
		in    string
		flags SendFlags
		data  []byte
	}{
		{"opcode=send send_flags=signaled", SendSignaled, nil},
		{"opcode=send send_flags=fence,SIGNALED,solicited,inline", sendFlagsKnown, nil},
		{"opcode=send send_flags=0", 0, nil},
		{"opcode=send send_flags=0x2,fence", SendSignaled | SendFence, nil},
		{"opcode=send send_flags=0x10", 0x10, nil}, // unknown bits are ValidateSendWR's to refuse
		{"opcode=send inline_data=00ff10", SendInline, []byte{0, 0xff, 0x10}},
		{"opcode=send inline_data=ABcd send_flags=signaled", SendInline | SendSignaled, []byte{0xab, 0xcd}},
		{"opcode=send send_flags=inline inline_data=41", SendInline, []byte{'A'}},
		{"opcode=send inline_data=" + strings.Repeat("5a", textMaxInline), SendInline, bytes.Repeat([]byte{0x5a}, textMaxInline)},
	}
	for _, c := range good {
		w, err := ParseSendWR(c.in)
		if err != nil || w.SendFlags != c.flags || !bytes.Equal(w.InlineData, c.data) {
			t.Errorf("%.60q: got flags %v data %x, %v", c.in, w.SendFlags, w.InlineData, err)
		}
	}
	bad := []struct{ in, key, msg string }{
		{"send_flags=signalled", "send_flags", `unknown flag "signalled"`},
		{"send_flags=signaled,", "send_flags", "empty flag"},
		{"send_flags=0x100000000", "send_flags", "out of range"},
		{"send_flags=signaled send_flags=fence", "send_flags", "repeated key"},
		{"inline_data=abc", "inline_data", "odd number of hex digits"},
		{"inline_data=zz", "inline_data", `not hex: "zz"`},
		{"inline_data=0x41", "inline_data", "not hex"},
		{"inline_data=41 inline_data=42", "inline_data", "repeated key"},
		{"inline_data=41 sge=1:2:3", "inline_data", "inline_data and sge exclude each other"},
		{"sge=1:2:3 inline_data=41", "inline_data", "inline_data and sge exclude each other"},
		{"inline_data=" + strings.Repeat("00", textMaxInline+1), "inline_data", "too long: 65537 bytes > 65536"},
		{"bind_access=remote", "bind_access", "unknown flag"},
	}
	for _, c := range bad {
		in := "opcode=send " + c.in
		_, err := ParseSendWR(in)
		wantTextErr(t, in, err, c.key, c.msg)
	}
	w, err := ParseSendWR("opcode=bind_mw bind_access=remote_write,zero_based")
	if err != nil || w.BindAccess != AccessRemoteWrite|AccessZeroBased {
		t.Errorf("bind_access: %v, %v", w.BindAccess, err)
	}
}

func TestParseRecvWRKeys(t *testing.T) {
	for _, in := range []string{"", "wr_id=0", " \twr_id=18446744073709551615\n"} {
		if _, err := ParseRecvWR(in); err != nil {
			t.Errorf("%q: %v", in, err)
		}
	}
	bad := []struct{ in, key, msg string }{
		{"wr_id=1 wr_id=2", "wr_id", "repeated key"},
		{"wr_id=x", "wr_id", "not a number"},
		{"wr_id=18446744073709551616", "wr_id", "out of range"},
		{"wr_id=-5", "wr_id", "out of range: -5 < 0"},
		{"opcode=recv", "opcode", "unknown key"},
		{"wr_id=1 sge", "sge", "not a key=value token"},
	}
	for _, c := range bad {
		_, err := ParseRecvWR(c.in)
		wantTextErr(t, c.in, err, c.key, c.msg)
	}
}

// textSendSamples has one WR of every opcode with every field it uses set,
// plus a few odd combinations.
func textSendSamples() []SendWR {
	sgl := []SGE{{LKey: 0x100, Addr: 0x7f0000001000, Length: 64}, {LKey: 0x101, Addr: 8, Length: 0}}
	return []SendWR{
		{Opcode: WRRDMAWrite, WRID: 1, SGL: sgl, RemoteAddr: 0x2000, RKey: 0x77, SendFlags: SendSignaled},
		{Opcode: WRRDMAWriteWithImm, WRID: 2, SGL: sgl[:1], RemoteAddr: 0x2000, RKey: 0x77, ImmData: 0xdeadbeef},
		{Opcode: WRSend, WRID: 3, SGL: sgl, SendFlags: SendSignaled | SendSolicited | SendFence},
		{Opcode: WRSend, WRID: 33, InlineData: []byte("hello"), SendFlags: SendInline | SendSignaled},
		{Opcode: WRSend, WRID: 34, SendFlags: SendInline},               // zero-length inline send
		{Opcode: WRSend, WRID: 35, SGL: sgl[:1], SendFlags: SendInline}, // libibverbs-style inline from sge
		{Opcode: WRSend, WRID: 36, SGL: sgl[:1], AH: 3, RemoteQPN: 0xffffff, RemoteQKey: 0x11111111},
		{Opcode: WRSendWithImm, WRID: 4, ImmData: 0},
		{Opcode: WRRDMARead, WRID: 5, SGL: sgl[:1], RemoteAddr: ^uint64(0), RKey: 0xffffffff},
		{Opcode: WRAtomicCmpAndSwp, WRID: 6, SGL: []SGE{{LKey: 1, Addr: 8, Length: 8}}, RemoteAddr: 0x3000, RKey: 9, CompareAdd: 1, Swap: ^uint64(0)},
		{Opcode: WRAtomicFetchAndAdd, WRID: 7, SGL: []SGE{{LKey: 1, Addr: 8, Length: 8}}, RemoteAddr: 0x3000, RKey: 9, CompareAdd: 5},
		{Opcode: WRLocalInv, WRID: 8, InvalidateRKey: 0x1234},
		{Opcode: WRBindMW, WRID: 9, MW: 2, RKey: 0x5501, BindLKey: 0x100, BindAddr: 0x1000, BindLength: 1 << 40, BindAccess: AccessRemoteRead | AccessZeroBased, SendFlags: SendSignaled},
		{Opcode: WRSendWithInv, WRID: ^uint64(0), SGL: sgl, InvalidateRKey: 0xffffffff, SendFlags: 0x30},
		{Opcode: WRAtomicWrite, WRID: 10, RemoteAddr: 0x3008, RKey: 9, CompareAdd: 0x1122334455667788, SendFlags: SendSignaled | SendFence},
		{Opcode: WRSend}, // every field zero
	}
}

func TestSendWRRoundTrip(t *testing.T) {
	seen := map[WROpcode]bool{}
	for _, w := range textSendSamples() {
		seen[w.Opcode] = true
		line := FormatSendWR(&w)
		if strings.ContainsAny(line, "\n\r\t") || strings.Contains(line, "  ") {
			t.Errorf("%v: not one clean line: %q", w.Opcode, line)
		}
		got, err := ParseSendWR(line)
		if err != nil {
			t.Errorf("%q: %v", line, err)
			continue
		}
		if !reflect.DeepEqual(got, w) {
			t.Errorf("%q: round trip\n got %+v\nwant %+v", line, got, w)
		}
	}
	for _, o := range WROpcodes() {
		if !seen[o] {
			t.Errorf("no round-trip sample for %v", o)
		}
	}
}

func TestFormatSendWR(t *testing.T) {
	cases := []struct {
		w    SendWR
		want string
	}{
		{SendWR{Opcode: WRSend, WRID: 7, SGL: []SGE{{LKey: 1, Addr: 4096, Length: 64}}, SendFlags: SendSignaled},
			"opcode=send wr_id=7 send_flags=signaled sge=1:4096:64"},
		{SendWR{Opcode: WRRDMAWrite, WRID: 1},
			"opcode=rdma_write wr_id=1 remote_addr=0 rkey=0"},
		{SendWR{Opcode: WRSendWithImm, ImmData: 5, AH: 2, RemoteQPN: 9, RemoteQKey: 0x11},
			"opcode=send_with_imm wr_id=0 imm_data=5 ah=2 remote_qpn=9 remote_qkey=17"},
		{SendWR{Opcode: WRSend, InlineData: []byte{0xab, 1}, SendFlags: SendInline | SendSolicited},
			"opcode=send wr_id=0 send_flags=solicited inline_data=ab01"},
		{SendWR{Opcode: WRAtomicCmpAndSwp, RemoteAddr: 8, RKey: 2, CompareAdd: 1, Swap: 2},
			"opcode=atomic_cmp_and_swp wr_id=0 remote_addr=8 rkey=2 compare_add=1 swap=2"},
		{SendWR{Opcode: WRBindMW, MW: 1, RKey: 2, BindLKey: 3, BindAddr: 4, BindLength: 5, BindAccess: AccessRemoteWrite},
			"opcode=bind_mw wr_id=0 rkey=2 mw=1 bind_lkey=3 bind_addr=4 bind_length=5 bind_access=remote_write"},
		{SendWR{Opcode: WRLocalInv, InvalidateRKey: 3}, "opcode=local_inv wr_id=0 invalidate_rkey=3"},
		{SendWR{Opcode: WRAtomicWrite, WRID: 4, RemoteAddr: 16, RKey: 2, CompareAdd: 0xabcd},
			"opcode=atomic_write wr_id=4 remote_addr=16 rkey=2 compare_add=43981"},
		{SendWR{Opcode: WRAtomicWrite}, "opcode=atomic_write wr_id=0 remote_addr=0 rkey=0 compare_add=0"},
	}
	for _, c := range cases {
		if got := FormatSendWR(&c.w); got != c.want {
			t.Errorf("FormatSendWR = %q, want %q", got, c.want)
		}
	}
}

func TestRecvWRRoundTrip(t *testing.T) {
	for _, w := range []RecvWR{
		{},
		{WRID: 1},
		{WRID: ^uint64(0), SGL: []SGE{{LKey: 1, Addr: 2, Length: 3}}},
		{WRID: 5, SGL: []SGE{{LKey: 0xffffffff, Addr: ^uint64(0), Length: 0xffffffff}, {}, {LKey: 7, Addr: 0x1000, Length: 4096}}},
	} {
		line := FormatRecvWR(&w)
		got, err := ParseRecvWR(line)
		if err != nil || !reflect.DeepEqual(got, w) {
			t.Errorf("%q: got %+v, %v; want %+v", line, got, err, w)
		}
	}
	if got := FormatRecvWR(&RecvWR{WRID: 3, SGL: []SGE{{LKey: 1, Addr: 2, Length: 3}}}); got != "wr_id=3 sge=1:2:3" {
		t.Errorf("FormatRecvWR = %q", got)
	}
}

func TestFormatWC(t *testing.T) {
	cases := []struct {
		wc   WC
		want string
	}{
		{WC{WRID: 7, Status: WCSuccess, Opcode: WCRDMAWrite, QPNum: 17, ByteLen: 64},
			"wr_id=7 status=success opcode=rdma_write qp_num=17 byte_len=64"},
		{WC{WRID: 1, Status: WCSuccess, Opcode: WCRecv, QPNum: 18, ByteLen: 5, SrcQP: 17, WCFlags: WCWithImm, ImmData: 9},
			"wr_id=1 status=success opcode=recv qp_num=18 byte_len=5 imm_data=9 src_qp=17 wc_flags=with_imm"},
		{WC{WRID: 1, Opcode: WCRecv, QPNum: 18, SrcQP: 0, WCFlags: WCWithInv | WCGRH, ImmData: 0x55},
			"wr_id=1 status=success opcode=recv qp_num=18 byte_len=0 invalidate_rkey=85 src_qp=0 wc_flags=grh,with_inv"},
		{WC{WRID: 2, Status: WCWRFlushErr, Opcode: WCRecvRDMAWithImm, QPNum: 3, VendorErr: 4, PKeyIndex: 5, SLID: 6, SL: 7, DLIDPathBits: 8},
			"wr_id=2 status=wr_flush_err opcode=recv_rdma_with_imm qp_num=3 byte_len=0 src_qp=0 vendor_err=4 pkey_index=5 slid=6 sl=7 dlid_path_bits=8"},
		{WC{Status: WCRNRRetryExcErr, Opcode: WCSend, QPNum: 1, ImmData: 99},
			"wr_id=0 status=rnr_retry_exc_err opcode=send qp_num=1 byte_len=0"},
	}
	for _, c := range cases {
		if got := FormatWC(&c.wc); got != c.want {
			t.Errorf("FormatWC = %q, want %q", got, c.want)
		}
	}
}

func TestWCRoundTrip(t *testing.T) {
	var samples []WC
	for st := WCStatus(0); st < numWCStatus; st++ {
		samples = append(samples, WC{WRID: uint64(st) << 40, Status: st, Opcode: WCRDMARead, QPNum: 0xffffff, ByteLen: 0xffffffff})
	}
	for op := range wcOpcodeNames {
		samples = append(samples, WC{WRID: 3, Opcode: op, QPNum: 2, ByteLen: 100})
	}
	samples = append(samples,
		WC{WRID: 1, Opcode: WCRecv, QPNum: 18, SrcQP: 0xffffff, WCFlags: WCWithImm | WCGRH, ImmData: 0xffffffff},
		WC{WRID: 1, Opcode: WCRecv, QPNum: 18, WCFlags: WCWithInv, ImmData: 0x1234},
		WC{WRID: 1, Opcode: WCRecv, QPNum: 18, WCFlags: WCWithInv | WCWithImm, ImmData: 7},
		WC{WRID: 1, Opcode: WCSend, QPNum: 18, SrcQP: 4}, // src_qp on a send: printed anyway
		WC{WRID: 1, Opcode: WCRecvRDMAWithImm, WCFlags: 0x84, VendorErr: 0xffffffff, PKeyIndex: 0xffff, SLID: 0xffff, SL: 15, DLIDPathBits: 0xff},
	)
	for _, wc := range samples {
		line := FormatWC(&wc)
		got, err := ParseWC(line)
		if err != nil || got != wc {
			t.Errorf("%q: got %+v, %v; want %+v", line, got, err, wc)
		}
	}
}

func TestParseWC(t *testing.T) {
	const base = "wr_id=1 status=success opcode=recv qp_num=2 byte_len=3 "
	good := []struct {
		in   string
		want WC
	}{
		{base, WC{WRID: 1, Opcode: WCRecv, QPNum: 2, ByteLen: 3}},
		{"byte_len=3 qp_num=2 opcode=RECV status=SUCCESS wr_id=1", WC{WRID: 1, Opcode: WCRecv, QPNum: 2, ByteLen: 3}},
		{base + "imm_data=5", WC{WRID: 1, Opcode: WCRecv, QPNum: 2, ByteLen: 3, ImmData: 5, WCFlags: WCWithImm}},
		{base + "invalidate_rkey=0x10", WC{WRID: 1, Opcode: WCRecv, QPNum: 2, ByteLen: 3, ImmData: 16, WCFlags: WCWithInv}},
		{base + "imm_data=4 invalidate_rkey=4", WC{WRID: 1, Opcode: WCRecv, QPNum: 2, ByteLen: 3, ImmData: 4, WCFlags: WCWithInv | WCWithImm}},
		{base + "wc_flags=grh", WC{WRID: 1, Opcode: WCRecv, QPNum: 2, ByteLen: 3, WCFlags: WCGRH}},
		{"wr_id=1 status=5 opcode=0x81 qp_num=2 byte_len=3", WC{WRID: 1, Status: WCWRFlushErr, Opcode: WCRecvRDMAWithImm, QPNum: 2, ByteLen: 3}},
	}
	for _, c := range good {
		got, err := ParseWC(c.in)
		if err != nil || got != c.want {
			t.Errorf("%q: got %+v, %v; want %+v", c.in, got, err, c.want)
		}
	}
	bad := []struct{ in, key, msg string }{
		{"", "wr_id", "missing required key"},
		{"wr_id=1 status=success opcode=recv qp_num=2", "byte_len", "missing required key"},
		{base + "status=success", "status", "repeated key"},
		{base + "imm_data=1 imm_data=1", "imm_data", "repeated key"},
		{base + "imm_data=1 invalidate_rkey=2", "invalidate_rkey", "must be equal"},
		{"wr_id=1 status=ok opcode=recv qp_num=2 byte_len=3", "status", `unknown status "ok"`},
		{"wr_id=1 status=22 opcode=recv qp_num=2 byte_len=3", "status", "out of range: 22 > 21"},
		{"wr_id=1 status=success opcode=receive qp_num=2 byte_len=3", "opcode", "unknown opcode"},
		{"wr_id=1 status=success opcode=7 qp_num=2 byte_len=3", "opcode", "unknown opcode"},
		{"wr_id=1 status=success opcode=256 qp_num=2 byte_len=3", "opcode", "out of range"},
		{"wr_id=1 status=success opcode=recv qp_num=0x1000000 byte_len=3", "qp_num", "out of range"},
		{base + "src_qp=16777216", "src_qp", "out of range"},
		{base + "sl=16", "sl", "out of range: 16 > 15"},
		{base + "slid=65536", "slid", "out of range"},
		{base + "dlid_path_bits=256", "dlid_path_bits", "out of range"},
		{base + "pkey_index=x", "pkey_index", "not a number"},
		{base + "vendor_err=4294967296", "vendor_err", "out of range"},
		{base + "wc_flags=with_imms", "wc_flags", "unknown flag"},
		{base + "port_num=1", "port_num", "unknown key"},
		{base + "x", "x", "not a key=value token"},
	}
	for _, c := range bad {
		_, err := ParseWC(c.in)
		wantTextErr(t, c.in, err, c.key, c.msg)
	}
}
