package qp

import (
	"errors"
	"strings"
	"testing"
)

func TestValidateSendWR(t *testing.T) {
	caps := SendCaps{MaxSGE: 2, MaxInline: 64, MaxRdAtomic: 1}
	sge := func(n uint32) SGE { return SGE{Addr: 0x1000, Length: n, LKey: 1} }
	cases := []struct {
		name string
		typ  Type
		wr   SendWR
		caps *SendCaps
		key  string // "" = legal
		msg  string
	}{
		{"send no sge", TypeRC, SendWR{Opcode: WRSend}, nil, "", ""},
		{"send max sge", TypeRC, SendWR{Opcode: WRSend, SGL: []SGE{sge(1), sge(2)}}, nil, "", ""},
		{"send max+1 sge", TypeRC, SendWR{Opcode: WRSend, SGL: []SGE{sge(1), sge(2), sge(3)}}, nil,
			"sge", "3 sges exceed max_send_sge 2"},
		{"unknown opcode", TypeRC, SendWR{Opcode: 10}, nil, "opcode", "unknown opcode 10"},
		{"unknown opcode 255", TypeRC, SendWR{Opcode: 255}, nil, "opcode", "unknown"},
		{"read on uc", TypeUC, SendWR{Opcode: WRRDMARead}, nil, "opcode", "rdma_read is not allowed on a uc qp"},
		{"write on ud", TypeUD, SendWR{Opcode: WRRDMAWrite, AH: 1}, nil, "opcode", "not allowed on a ud qp"},
		{"send_with_inv on uc", TypeUC, SendWR{Opcode: WRSendWithInv}, nil, "opcode", "not allowed"},
		{"bind_mw on ud", TypeUD, SendWR{Opcode: WRBindMW, AH: 1}, nil, "opcode", "not allowed"},
		{"bad type", 1, SendWR{Opcode: WRSend}, nil, "opcode", "not allowed"},
		{"all known flags", TypeRC, SendWR{Opcode: WRSend, SendFlags: SendFence | SendSignaled | SendSolicited}, nil, "", ""},
		{"unknown flag", TypeRC, SendWR{Opcode: WRSend, SendFlags: SendSignaled | 16}, nil, "send_flags", "0x10"},
		{"driver flag", TypeRC, SendWR{Opcode: WRSend, SendFlags: 1 << 26}, nil, "send_flags", "0x4000000"},
		{"ud send", TypeUD, SendWR{Opcode: WRSend, AH: 3, RemoteQPN: 5, RemoteQKey: 7}, nil, "", ""},
		{"ud send_with_imm", TypeUD, SendWR{Opcode: WRSendWithImm, AH: 3, ImmData: 9}, nil, "", ""},
		{"ud no ah", TypeUD, SendWR{Opcode: WRSend}, nil, "ah", "required"},
		{"rc ignores ah", TypeRC, SendWR{Opcode: WRSend, AH: 0}, nil, "", ""},
		// Inline.
		{"inline sgl max", TypeRC, SendWR{Opcode: WRSend, SendFlags: SendInline, SGL: []SGE{sge(32), sge(32)}}, nil, "", ""},
		{"inline sgl max+1", TypeRC, SendWR{Opcode: WRSend, SendFlags: SendInline, SGL: []SGE{sge(32), sge(33)}}, nil,
			"inline_data", "65 bytes exceed max_inline_data 64"},
		{"inline data max", TypeUC, SendWR{Opcode: WRRDMAWrite, SendFlags: SendInline, InlineData: make([]byte, 64)}, nil, "", ""},
		{"inline data max+1", TypeRC, SendWR{Opcode: WRRDMAWriteWithImm, SendFlags: SendInline, InlineData: make([]byte, 65)}, nil,
			"inline_data", "65 bytes"},
		{"inline data empty", TypeUD, SendWR{Opcode: WRSend, AH: 1, SendFlags: SendInline, InlineData: []byte{}}, nil, "", ""},
		{"inline data ignores sge limit", TypeRC, SendWR{Opcode: WRSend, SendFlags: SendInline, InlineData: make([]byte, 10)},
			&SendCaps{MaxSGE: 0, MaxInline: 10}, "", ""},
		{"inline data without flag", TypeRC, SendWR{Opcode: WRSend, InlineData: []byte{1}}, nil, "inline_data", "send_flags=inline"},
		{"empty inline data without flag", TypeRC, SendWR{Opcode: WRSend, InlineData: []byte{}, SGL: []SGE{sge(1)}}, nil, "", ""},
		{"empty inline data and sge", TypeRC, SendWR{Opcode: WRSend, SendFlags: SendInline, InlineData: []byte{}, SGL: []SGE{sge(1)}}, nil,
			"inline_data", "together"},
		{"inline data and sge", TypeRC, SendWR{Opcode: WRSend, SendFlags: SendInline, InlineData: []byte{1}, SGL: []SGE{sge(1)}}, nil,
			"inline_data", "together"},
		{"inline read", TypeRC, SendWR{Opcode: WRRDMARead, SendFlags: SendInline, SGL: []SGE{sge(8)}}, nil, "send_flags", "rdma_read"},
		{"inline atomic", TypeRC, SendWR{Opcode: WRAtomicFetchAndAdd, SendFlags: SendInline, SGL: []SGE{sge(8)}}, nil, "send_flags", "inline"},
		{"inline local_inv", TypeRC, SendWR{Opcode: WRLocalInv, SendFlags: SendInline}, nil, "send_flags", "local_inv"},
		{"inline no max", TypeRC, SendWR{Opcode: WRSend, SendFlags: SendInline, SGL: []SGE{sge(1)}}, &SendCaps{MaxSGE: 1},
			"inline_data", "1 bytes exceed max_inline_data 0"},
		// Total length.
		{"total 2^31", TypeRC, SendWR{Opcode: WRRDMAWrite, SGL: []SGE{sge(1 << 30), sge(1 << 30)}}, nil, "", ""},
		{"total 2^31+1", TypeRC, SendWR{Opcode: WRRDMAWrite, SGL: []SGE{sge(1 << 31), sge(1)}}, nil,
			"sge", "total length 2147483649 exceeds 2147483648"},
		{"total no uint32 wrap", TypeRC, SendWR{Opcode: WRSend, SGL: []SGE{sge(0xFFFFFFFF), sge(1)}}, nil, "sge", "total length 4294967296"},
		// Read and atomics.
		{"read", TypeRC, SendWR{Opcode: WRRDMARead, SGL: []SGE{sge(100), sge(0)}, RemoteAddr: 3}, nil, "", ""},
		{"read no rd_atomic", TypeRC, SendWR{Opcode: WRRDMARead}, &SendCaps{MaxSGE: 1}, "opcode", "max_rd_atomic"},
		{"atomic", TypeRC, SendWR{Opcode: WRAtomicCmpAndSwp, SGL: []SGE{sge(8)}, RemoteAddr: 0x1008}, nil, "", ""},
		{"atomic no rd_atomic", TypeRC, SendWR{Opcode: WRAtomicFetchAndAdd, SGL: []SGE{sge(8)}}, &SendCaps{MaxSGE: 1}, "opcode", "max_rd_atomic"},
		{"atomic misaligned", TypeRC, SendWR{Opcode: WRAtomicFetchAndAdd, SGL: []SGE{sge(8)}, RemoteAddr: 0x1004}, nil,
			"remote_addr", "0x1004 is not 8-byte aligned"},
		{"atomic no sge", TypeRC, SendWR{Opcode: WRAtomicCmpAndSwp}, nil, "sge", "exactly one sge of length 8"},
		{"atomic two sges", TypeRC, SendWR{Opcode: WRAtomicCmpAndSwp, SGL: []SGE{sge(4), sge(4)}}, nil, "sge", "exactly one"},
		{"atomic length 16", TypeRC, SendWR{Opcode: WRAtomicCmpAndSwp, SGL: []SGE{sge(16)}}, nil, "sge", "length 8"},
		{"atomic length 4", TypeRC, SendWR{Opcode: WRAtomicFetchAndAdd, SGL: []SGE{sge(4)}}, nil, "sge", "length 8"},
		// ATOMIC WRITE: RC only, 8 bytes in compare_add, aligned target.
		{"atomic_write", TypeRC, SendWR{Opcode: WRAtomicWrite, CompareAdd: 0x1122, RemoteAddr: 0x1008, RKey: 3}, nil, "", ""},
		{"atomic_write zero data", TypeRC, SendWR{Opcode: WRAtomicWrite}, nil, "", ""},
		{"atomic_write on uc", TypeUC, SendWR{Opcode: WRAtomicWrite}, nil, "opcode", "atomic_write is not allowed on a uc qp"},
		{"atomic_write on ud", TypeUD, SendWR{Opcode: WRAtomicWrite, AH: 1}, nil, "opcode", "not allowed on a ud qp"},
		{"atomic_write no rd_atomic", TypeRC, SendWR{Opcode: WRAtomicWrite}, &SendCaps{MaxSGE: 1}, "opcode", "max_rd_atomic"},
		{"atomic_write misaligned", TypeRC, SendWR{Opcode: WRAtomicWrite, RemoteAddr: 0x1001}, nil,
			"remote_addr", "0x1001 is not 8-byte aligned"},
		{"atomic_write misaligned by 4", TypeRC, SendWR{Opcode: WRAtomicWrite, RemoteAddr: 0x100c}, nil, "remote_addr", "aligned"},
		{"atomic_write sge", TypeRC, SendWR{Opcode: WRAtomicWrite, SGL: []SGE{sge(8)}}, nil, "sge", "compare_add, not in 1 sges"},
		{"atomic_write inline", TypeRC, SendWR{Opcode: WRAtomicWrite, SendFlags: SendInline, InlineData: make([]byte, 8)}, nil,
			"send_flags", "inline is only for send and rdma_write"},
		{"atomic_write fenced", TypeRC, SendWR{Opcode: WRAtomicWrite, SendFlags: SendFence | SendSignaled}, nil, "", ""},
		// Local ops.
		{"local_inv", TypeUC, SendWR{Opcode: WRLocalInv, InvalidateRKey: 0x1234}, nil, "", ""},
		{"bind_mw", TypeRC, SendWR{Opcode: WRBindMW, MW: 1, RKey: 2, BindLKey: 3, BindLength: 4096}, nil, "", ""},
		{"bind_mw sge", TypeRC, SendWR{Opcode: WRBindMW, SGL: []SGE{sge(0)}}, nil, "sge", "bind_mw takes no sges"},
		{"bind_mw imm", TypeUC, SendWR{Opcode: WRBindMW, ImmData: 1}, nil, "imm_data", "bind_mw"},
		{"bind_mw inline", TypeRC, SendWR{Opcode: WRBindMW, SendFlags: SendInline}, nil, "send_flags", "inline"},
		{"send_with_inv", TypeRC, SendWR{Opcode: WRSendWithInv, InvalidateRKey: 5, SGL: []SGE{sge(10)}}, nil, "", ""},
	}
	for _, c := range cases {
		cp := caps
		if c.caps != nil {
			cp = *c.caps
		}
		err := ValidateSendWR(c.typ, &c.wr, cp)
		checkErr(t, c.name, err, c.key, c.msg)
	}
}

func TestValidateRecvWR(t *testing.T) {
	cases := []struct {
		name string
		wr   RecvWR
		max  uint32
		key  string
		msg  string
	}{
		{"empty", RecvWR{}, 0, "", ""},
		{"max", RecvWR{SGL: []SGE{{Length: 1}, {Length: 2}}}, 2, "", ""},
		{"max+1", RecvWR{SGL: []SGE{{}, {}, {}}}, 2, "sge", "3 sges exceed max_recv_sge 2"},
		{"one over zero", RecvWR{SGL: []SGE{{}}}, 0, "sge", "1 sges exceed max_recv_sge 0"},
		{"total 2^31", RecvWR{SGL: []SGE{{Length: 1 << 31}}}, 4, "", ""},
		{"total 2^31+1", RecvWR{SGL: []SGE{{Length: 1 << 31}, {Length: 1}}}, 4, "sge", "total length 2147483649"},
		{"no uint32 wrap", RecvWR{SGL: []SGE{{Length: 0xFFFFFFFF}, {Length: 1}}}, 4, "sge", "total length 4294967296"},
	}
	for _, c := range cases {
		checkErr(t, c.name, ValidateRecvWR(&c.wr, c.max), c.key, c.msg)
	}
}

func checkErr(t *testing.T, name string, err error, key, msg string) {
	t.Helper()
	if key == "" {
		if err != nil {
			t.Errorf("%s: unexpected %v", name, err)
		}
		return
	}
	var e *Error
	if !errors.As(err, &e) {
		t.Errorf("%s: got %v, want *Error key %s", name, err, key)
		return
	}
	if e.Key != key || !strings.Contains(e.Msg, msg) {
		t.Errorf("%s: got key=%q msg=%q, want key=%q msg containing %q", name, e.Key, e.Msg, key, msg)
	}
	if errors.Is(err, ErrUnsupported) {
		t.Errorf("%s: post errors are EINVAL, not unsupported", name)
	}
}
