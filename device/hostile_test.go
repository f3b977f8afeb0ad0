package device

import (
	"encoding/binary"
	"fmt"
	"testing"

	"rdmafs/qp"
	"rdmafs/ring"
)

// TestHostileSendRing: a client may write any bytes into its send ring.
// Each class of hostile WQE completes with the verbs error, moves only that
// QP to ERR (its other WQEs flush), touches no memory it was not given, and
// leaves every other QP — its peer and an unrelated pair — working.
func TestHostileSendRing(t *testing.T) {
	type setup struct {
		e        *env
		src, dst *MR
		other    *MR // an MR of another PD
		gone     *MR // deregistered
		inval    *MR // invalidated
	}
	cases := []struct {
		name   string
		wr     func(s *setup) qp.SendWR
		mangle func(slot []byte)
		status string
		opcode string
	}{
		{"opcode out of range", func(s *setup) qp.SendWR {
			return qp.SendWR{Opcode: qp.WRSend, SGL: []qp.SGE{{Length: 8, LKey: s.src.LKey}}}
		}, func(b []byte) { b[ring.SendOffOpcode] = 0xEE }, "loc_qp_op_err", "send"},
		{"num_sge beyond the slot", func(s *setup) qp.SendWR {
			return qp.SendWR{Opcode: qp.WRSend}
		}, func(b []byte) { b[ring.SendOffNumSGE] = 200 }, "loc_qp_op_err", "send"},
		{"inline_len beyond the slot", func(s *setup) qp.SendWR {
			return qp.SendWR{Opcode: qp.WRSend, SendFlags: qp.SendInline, InlineData: []byte("x")}
		}, func(b []byte) { binary.LittleEndian.PutUint16(b[ring.SendOffInlineLen:], 0xFFFF) }, "loc_qp_op_err", "send"},
		{"unknown send flag", func(s *setup) qp.SendWR {
			return qp.SendWR{Opcode: qp.WRRDMAWrite, SGL: []qp.SGE{{Length: 8, LKey: s.src.LKey}}, RKey: s.dst.RKey}
		}, func(b []byte) {
			f := binary.LittleEndian.Uint32(b[ring.SendOffFlags:])
			binary.LittleEndian.PutUint32(b[ring.SendOffFlags:], f|0x80000000)
		}, "loc_qp_op_err", "rdma_write"},
		{"address + length overflows 64 bits", func(s *setup) qp.SendWR {
			return qp.SendWR{Opcode: qp.WRSend, SGL: []qp.SGE{{Addr: ^uint64(0) - 3, Length: 64, LKey: s.src.LKey}}}
		}, nil, "loc_prot_err", "send"},
		{"range past the MR end", func(s *setup) qp.SendWR {
			return qp.SendWR{Opcode: qp.WRSend, SGL: []qp.SGE{{Addr: 4000, Length: 200, LKey: s.src.LKey}}}
		}, nil, "loc_prot_err", "send"},
		{"lkey of another PD", func(s *setup) qp.SendWR {
			return qp.SendWR{Opcode: qp.WRSend, SGL: []qp.SGE{{Length: 8, LKey: s.other.LKey}}}
		}, nil, "loc_prot_err", "send"},
		{"lkey of a deregistered MR", func(s *setup) qp.SendWR {
			return qp.SendWR{Opcode: qp.WRSend, SGL: []qp.SGE{{Length: 8, LKey: s.gone.LKey}}}
		}, nil, "loc_prot_err", "send"},
		{"lkey of an invalidated MR", func(s *setup) qp.SendWR {
			return qp.SendWR{Opcode: qp.WRSend, SGL: []qp.SGE{{Length: 8, LKey: s.inval.LKey}}}
		}, nil, "loc_prot_err", "send"},
		{"message over 2^31 bytes", func(s *setup) qp.SendWR {
			return qp.SendWR{Opcode: qp.WRSend, SGL: []qp.SGE{{Length: 1 << 31, LKey: s.src.LKey}, {Length: 1 << 31, LKey: s.src.LKey}}}
		}, nil, "loc_len_err", "send"},
		{"rkey of another PD", func(s *setup) qp.SendWR {
			return qp.SendWR{Opcode: qp.WRRDMAWrite, SGL: []qp.SGE{{Length: 8, LKey: s.src.LKey}}, RKey: s.other.RKey}
		}, nil, "rem_access_err", "rdma_write"},
		{"remote address + length overflows 64 bits", func(s *setup) qp.SendWR {
			return qp.SendWR{Opcode: qp.WRRDMAWrite, SGL: []qp.SGE{{Length: 64, LKey: s.src.LKey}}, RemoteAddr: ^uint64(0) - 8, RKey: s.dst.RKey}
		}, nil, "rem_access_err", "rdma_write"},
		{"rkey of a deregistered MR", func(s *setup) qp.SendWR {
			return qp.SendWR{Opcode: qp.WRRDMARead, SGL: []qp.SGE{{Length: 8, LKey: s.src.LKey}}, RKey: s.gone.RKey}
		}, nil, "rem_access_err", "rdma_read"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			s := &setup{e: e, src: e.mr(4096, qp.AccessLocalWrite), dst: e.mr(4096, rwAccess)}
			s.other = e.foreignMR(4096, rwAccess)
			s.gone = e.mr(4096, rwAccess)
			s.gone.Dereg()
			s.inval = e.mr(4096, rwAccess)
			a, b, acq, _ := e.pair(qp.TypeRC)
			x, y, xcq, ycq := e.pair(qp.TypeRC)
			e.postSend(a, fmt.Sprintf("opcode=rdma_write wr_id=1 send_flags=signaled sge=%d:0:8 remote_addr=0 rkey=%d", s.src.LKey, s.dst.RKey))
			e.postSend(a, fmt.Sprintf("opcode=local_inv wr_id=2 send_flags=signaled invalidate_rkey=%d", s.inval.RKey))
			e.expect(acq, sendWC(1, "success", "rdma_write", a, 8), sendWC(2, "success", "local_inv", a, 0))
			before := append([]byte(nil), s.other.Mem()...)

			wr := c.wr(s)
			wr.WRID, wr.SendFlags = 77, wr.SendFlags|qp.SendSignaled
			p := ring.NewProducer(a.sq)
			slot := p.Next()
			if err := ring.EncodeSendWQE(slot, &wr); err != nil {
				t.Fatal(err)
			}
			if c.mangle != nil {
				c.mangle(slot)
			}
			p.Advance()
			next := qp.SendWR{WRID: 78, Opcode: qp.WRSend, SendFlags: qp.SendSignaled}
			ring.EncodeSendWQE(p.Next(), &next)
			p.Advance()
			p.Publish()
			a.Kick()
			e.expect(acq, fmt.Sprintf("wr_id=77 status=%s opcode=%s qp_num=%d byte_len=0", c.status, c.opcode, a.QPN),
				flushed(a, "send", 78)[0])
			e.state(a, qp.StateErr)
			sameBytes(t, s.other.Mem(), before)
			if c.status != "rem_access_err" {
				e.state(b, qp.StateRTS) // a local error never reaches the peer
			}
			// An unrelated pair is unharmed.
			e.postRecv(y, fmt.Sprintf("wr_id=5 sge=%d:0:64", s.dst.LKey))
			e.postSend(x, fmt.Sprintf("opcode=send wr_id=6 send_flags=signaled sge=%d:0:16", s.src.LKey))
			e.expect(xcq, sendWC(6, "success", "send", x, 16))
			e.expect(ycq, recvWC(5, "success", "recv", y, 16, x, ""))
		})
	}
}

// A producer index that jumps by more than the ring holds ends that QP
// (qp_fatal) and nobody else.
func TestHostileProducerJump(t *testing.T) {
	e := newEnv(t)
	a, _, _, _ := e.pair(qp.TypeRC)
	x, y, xcq, ycq := e.pair(qp.TypeRC)
	buf := e.mr(4096, rwAccess)
	e.events()
	a.sq.StoreProducer(a.sq.LoadProducer() + a.sq.SlotCount() + 5)
	a.Kick()
	e.state(a, qp.StateErr)
	e.expectEvents(fmt.Sprintf("event=qp_fatal qp=%d", a.QPN))
	e.postRecv(y, fmt.Sprintf("wr_id=5 sge=%d:0:64", buf.LKey))
	e.postSend(x, fmt.Sprintf("opcode=send wr_id=6 send_flags=signaled sge=%d:0:16", buf.LKey))
	e.expect(xcq, sendWC(6, "success", "send", x, 16))
	e.expect(ycq, recvWC(5, "success", "recv", y, 16, x, ""))
}
