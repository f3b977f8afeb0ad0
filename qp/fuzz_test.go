package qp

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// The text parsers face whatever a user (or a buggy program) writes to a
// file of the tree. The fuzz targets check that no input panics, that every
// rejection is a short one-line *Error, and that whatever is accepted comes
// back unchanged through its Format.

// fuzzCheckErr fails unless err is an *Error fit for an object's one-line
// `error` file.
func fuzzCheckErr(t *testing.T, err error) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v is %T, want *Error", err, err)
	}
	msg := err.Error()
	if len(msg) > 512 || strings.ContainsAny(msg, "\n\r\x00") {
		t.Fatalf("error is not a short single line: %q", msg)
	}
}

// fuzzSeedLines are lines every parser is seeded with: grammar edge cases
// shared by all.
var fuzzSeedLines = []string{
	"", " ", "\t\n", "a", "=", "a=", "=1", "a=b=c", "k=1 k=1", "\x00=\x00", "\xff\xfe=1",
	"sge=1:2:3", "sge=::", "sge=0x1:0x2:0x3 sge=4:5:6", "wr_id=0x", "wr_id=-1", "wr_id=18446744073709551616",
	"pd=1", "pd=0", "pd=4294967295", "dgid=1.2.3.4", "dgid=fe80::1%eth0",
}

// fuzzNumSeeds turns the numeric test cases into seed lines.
func fuzzNumSeeds(f *testing.F, prefix string, cases []textNumCase) {
	for _, c := range cases {
		good, bad := textNumValues(c.max)
		for v := range good {
			f.Add(prefix + c.key + "=" + v)
		}
		for v := range bad {
			f.Add(prefix + c.key + "=" + v)
		}
	}
}

func FuzzParseModify(f *testing.F) {
	for _, s := range fuzzSeedLines {
		f.Add(s)
	}
	var nums []textNumCase
	for _, c := range textAttrNums {
		nums = append(nums, c.textNumCase)
	}
	fuzzNumSeeds(f, "", nums)
	a := textAttrSample()
	for _, typ := range []Type{TypeRC, TypeUC, TypeUD} {
		f.Add(FormatAttr(&a, typ))
		f.Add(FormatAttr(&Attr{}, typ))
	}
	for _, s := range []string{
		"qp_state=RTR path_mtu=1024 dest_qp_num=17 rq_psn=0x123456 dgid=10.0.0.1 sl=3",
		"qp_state=rts cur_qp_state=7", "path_mtu=4097", "path_mig_state=armed", "alt_path=1", "rate_limit=1",
		"qp_access_flags=local_write,,remote_read", "qp_access_flags=0x400", "en_sqd_async_notify=1",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, _, err := ParseModify(s)
		if err != nil {
			fuzzCheckErr(t, err)
			return
		}
		for _, typ := range []Type{TypeRC, TypeUC, TypeUD} {
			text := FormatAttr(&a, typ)
			lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
			for _, line := range lines {
				if _, _, err := ParseModify(line); err != nil {
					t.Fatalf("%v: printed line %q rejected: %v", typ, line, err)
				}
			}
			b, _, err := ParseModify(text)
			if err != nil {
				t.Fatalf("%v: printed attrs rejected: %v\n%s", typ, err, text)
			}
			if again := FormatAttr(&b, typ); again != text {
				t.Fatalf("%v: attrs changed through text:\n%s\nthen\n%s", typ, text, again)
			}
			if want := textAttrPrinted(a, typ); !reflect.DeepEqual(b, want) {
				t.Fatalf("%v: round trip\n got %+v\nwant %+v", typ, b, want)
			}
		}
	})
}

func FuzzParseSendWR(f *testing.F) {
	for _, s := range fuzzSeedLines {
		f.Add(s)
		f.Add("opcode=send " + s)
	}
	var nums []textNumCase
	for _, c := range textSendNums {
		nums = append(nums, c.textNumCase)
	}
	fuzzNumSeeds(f, "opcode=rdma_write ", nums)
	for _, w := range textSendSamples() {
		f.Add(FormatSendWR(&w))
	}
	for _, s := range []string{
		"opcode=send inline_data=00ff", "opcode=send inline_data=abc", "opcode=send inline_data=41 sge=1:2:3",
		"opcode=send send_flags=fence,signaled,solicited,inline,0x100", "opcode=bind_mw bind_access=zero_based",
		"opcode=10", "opcode=0x9", "opcode=SEND_WITH_INV",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		w, err := ParseSendWR(s)
		if err != nil {
			fuzzCheckErr(t, err)
			return
		}
		line := FormatSendWR(&w)
		if strings.ContainsAny(line, "\n\r") {
			t.Fatalf("FormatSendWR printed more than a line: %q", line)
		}
		w2, err := ParseSendWR(line)
		if err != nil {
			t.Fatalf("printed WR %q rejected: %v", line, err)
		}
		if !reflect.DeepEqual(w, w2) {
			t.Fatalf("%q: round trip\n got %+v\nwant %+v", line, w2, w)
		}
	})
}

func FuzzParseRecvWR(f *testing.F) {
	for _, s := range fuzzSeedLines {
		f.Add(s)
	}
	f.Add("wr_id=5 sge=1:0x1000:4096 sge=2:0:0")
	f.Add("wr_id=18446744073709551615 sge=4294967295:18446744073709551615:4294967295")
	f.Fuzz(func(t *testing.T, s string) {
		w, err := ParseRecvWR(s)
		if err != nil {
			fuzzCheckErr(t, err)
			return
		}
		line := FormatRecvWR(&w)
		w2, err := ParseRecvWR(line)
		if err != nil || !reflect.DeepEqual(w, w2) {
			t.Fatalf("%q: round trip got %+v, %v; want %+v", line, w2, err, w)
		}
	})
}

func FuzzParseWC(f *testing.F) {
	for _, s := range fuzzSeedLines {
		f.Add(s)
	}
	const base = "wr_id=1 status=success opcode=recv qp_num=2 byte_len=3 "
	for _, s := range []string{
		base, base + "imm_data=5", base + "invalidate_rkey=5", base + "imm_data=5 invalidate_rkey=5",
		base + "imm_data=5 invalidate_rkey=6", base + "wc_flags=grh,with_imm,0x4", base + "src_qp=16777215",
		base + "vendor_err=1 pkey_index=2 slid=3 sl=4 dlid_path_bits=5",
		"wr_id=7 status=wr_flush_err opcode=0x81 qp_num=17 byte_len=64",
		"wr_id=7 status=22 opcode=7 qp_num=17 byte_len=64",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		wc, err := ParseWC(s)
		if err != nil {
			fuzzCheckErr(t, err)
			return
		}
		line := FormatWC(&wc)
		wc2, err := ParseWC(line)
		if err != nil || wc2 != wc {
			t.Fatalf("%q: round trip got %+v, %v; want %+v", line, wc2, err, wc)
		}
	})
}

// FuzzFormatWC goes the other way: any completion the engine could make
// (known status and opcode) prints to a line that parses back. ImmData is
// printed only with its flags, so it is compared only then.
func FuzzFormatWC(f *testing.F) {
	f.Add(uint64(7), uint8(0), uint8(1), uint32(0), uint32(64), uint32(0), uint32(17), uint32(0), uint32(0), uint16(0), uint16(0), uint8(0), uint8(0))
	f.Add(^uint64(0), uint8(5), uint8(128), ^uint32(0), ^uint32(0), ^uint32(0), uint32(0xffffff), uint32(0xffffff), uint32(11), ^uint16(0), ^uint16(0), uint8(15), ^uint8(0))
	f.Fuzz(func(t *testing.T, wrid uint64, status, opcode uint8, vendorErr, byteLen, imm, qpn, srcQP, flags uint32, pkey, slid uint16, sl, dlidBits uint8) {
		wc := WC{WRID: wrid, Status: WCStatus(status), Opcode: WCOpcode(opcode), VendorErr: vendorErr,
			ByteLen: byteLen, ImmData: imm, QPNum: qpn, SrcQP: srcQP, WCFlags: WCFlags(flags),
			PKeyIndex: pkey, SLID: slid, SL: sl, DLIDPathBits: dlidBits}
		line := FormatWC(&wc)
		_, known := wcOpcodeNames[wc.Opcode]
		if !known || wc.Status >= numWCStatus || qpn > PSNMask || srcQP > PSNMask || sl > 15 {
			return // not a completion the device makes; printing must still not panic
		}
		got, err := ParseWC(line)
		if err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		if wc.WCFlags&(WCWithImm|WCWithInv) == 0 {
			wc.ImmData = 0
		}
		if got != wc {
			t.Fatalf("%q: got %+v, want %+v", line, got, wc)
		}
	})
}

// fuzzCreate runs one create parser: no panic, errors fit for `error`.
func fuzzCreate[T any](f *testing.F, parse func(string) (T, error), check func(t *testing.T, c T), seeds ...string) {
	for _, s := range fuzzSeedLines {
		f.Add(s)
	}
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := parse(s)
		if err != nil {
			fuzzCheckErr(t, err)
			return
		}
		check(t, c)
	})
}

func FuzzParseCreateQP(f *testing.F) {
	fuzzCreate(f, ParseCreateQP, func(t *testing.T, c CreateQP) {
		switch {
		case !c.Type.Valid():
			t.Fatalf("accepted an unknown type: %+v", c)
		case c.Type == TypeXRCRecv:
			if c.XRCD == 0 || c.PD != 0 || c.SendCQ != 0 || c.RecvCQ != 0 || c.SRQ != 0 {
				t.Fatalf("accepted a bad xrc_recv request: %+v", c)
			}
		case c.PD == 0 || c.SendCQ == 0 || c.RecvCQ == 0 && c.Type != TypeXRCSend || c.XRCD != 0 || c.Open != 0:
			t.Fatalf("accepted an incomplete request: %+v", c)
		}
	},
		"pd=1 qp_type=rc send_cq=1 recv_cq=1",
		"qp_type=xrc_recv xrcd=2", "qp_type=xrc_recv xrcd=2 open=17", "pd=1 qp_type=xrc_send send_cq=1",
		"pd=1 qp_type=ud send_cq=1 recv_cq=2 srq=3 max_send_wr=16 max_recv_wr=32 max_send_sge=2 max_recv_sge=3 max_inline_data=64 sq_sig_all=1",
		"pd=1 qp_type=xrc_send send_cq=1 recv_cq=1", "pd=1 qp_type=rc send_cq=1 recv_cq=1 srq=0")
}

func FuzzParseCreatePD(f *testing.F) {
	for _, s := range fuzzSeedLines {
		f.Add(s)
	}
	// pd/new takes no keys: only a blank line is accepted.
	f.Fuzz(func(t *testing.T, s string) {
		_, err := ParseCreatePD(s)
		if err != nil {
			fuzzCheckErr(t, err)
		} else if len(strings.Fields(s)) != 0 {
			t.Fatalf("accepted %q", s)
		}
	})
}

func FuzzParseCreateMR(f *testing.F) {
	fuzzCreate(f, ParseCreateMR, func(t *testing.T, c CreateMR) {
		if c.PD == 0 || c.Length == 0 || (!c.HasIOVA && c.IOVA != 0) {
			t.Fatalf("accepted a bad request: %+v", c)
		}
	}, "pd=1 length=4096 iova=0 access=local_write,remote_write", "pd=1 length=0")
}

func FuzzParseCreateMW(f *testing.F) {
	fuzzCreate(f, ParseCreateMW, func(t *testing.T, c CreateMW) {
		if c.PD == 0 || (c.Type != 1 && c.Type != 2) {
			t.Fatalf("accepted a bad request: %+v", c)
		}
	}, "pd=1", "pd=1 type=2", "pd=1 type=3")
}

func FuzzParseCreateCQ(f *testing.F) {
	fuzzCreate(f, ParseCreateCQ, func(t *testing.T, c CreateCQ) {
		if c.CQE == 0 {
			t.Fatalf("accepted a bad request: %+v", c)
		}
	}, "cqe=16 comp_vector=0", "cqe=0")
}

func FuzzParseCreateSRQ(f *testing.F) {
	fuzzCreate(f, ParseCreateSRQ, func(t *testing.T, c CreateSRQ) {
		if c.PD == 0 || c.XRC != (c.XRCD != 0) || c.XRC != (c.CQ != 0) {
			t.Fatalf("accepted a bad request: %+v", c)
		}
	}, "pd=1 max_wr=16 max_sge=1 srq_limit=4", "pd=1 max_wr=4 max_sge=1 srq_type=xrc xrcd=1 cq=2")
}

func FuzzParseOpenXRCD(f *testing.F) {
	fuzzCreate(f, ParseOpenXRCD, func(t *testing.T, c OpenXRCD) {
		if !c.HasFD && (c.Create || c.Excl || c.FD != 0) || c.FD < 0 {
			t.Fatalf("accepted a bad request: %+v", c)
		}
	}, "", "fd=3 create=1", "fd=3 create=1 excl=1", "excl=1")
}

func FuzzParseCreateAH(f *testing.F) {
	fuzzCreate(f, ParseCreateAH, func(t *testing.T, c CreateAH) {
		if c.PD == 0 || c.AH.SL > 15 || c.AH.FlowLabel > 0xfffff {
			t.Fatalf("accepted a bad request: %+v", c)
		}
		if g, err := ParseGID(FormatGID(c.AH.DGID)); err != nil || g != c.AH.DGID {
			t.Fatalf("dgid %x does not round-trip: %v", c.AH.DGID, err)
		}
	}, "pd=1 dgid=::ffff:10.0.0.2 sl=15 sgid_index=1 hop_limit=64 traffic_class=0xff flow_label=0xfffff dlid=0xffff static_rate=3 port_num=1")
}
