package device

import (
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"rdmafs/qp"
	"rdmafs/ring"
)

// FuzzEngineSendRing writes a client's arbitrary bytes into the send ring
// of a connected RC or UC pair on one device (the direct path and the
// packets behind it), optionally steering the keys to real MRs so that the
// inputs get past the key checks into the execution, and the engine runs
// them. Whatever the bytes, the device must not panic, a WR must complete
// at most once, an MR of another PD must stay untouched, the pair must be
// destroyable, and an unrelated pair must still move data.
//
// The input: one byte of flags (bit 0 UC, bit 1 receive WQEs posted on the
// peer, bit 2 the SGEs' lkeys and the rkey set to the pair's MRs, bit 3
// the rkey set to the other PD's MR instead, bit 4 the peer's first
// receive slot written from the input too, its SGEs' lkeys steered when
// bit 2 is set), then the slots' bytes.
func FuzzEngineSendRing(f *testing.F) {
	const b128 = 128 // the slots of the harness's QPs (4 SGEs, 64 bytes inline)
	base := buildEnv(f, false)
	src := base.mr(1<<16, qp.AccessLocalWrite)
	dst := base.mr(1<<16, rwAccess)
	other := base.foreignMR(4096, rwAccess)
	var x, y *QP
	var xcq, ycq *CQ

	for _, s := range []struct {
		flags byte
		wr    qp.SendWR
	}{
		{6, qp.SendWR{Opcode: qp.WRRDMAWrite, SGL: []qp.SGE{{Addr: 0, Length: 64}}, RemoteAddr: 128}},
		{6, qp.SendWR{Opcode: qp.WRSend, SGL: []qp.SGE{{Addr: 0, Length: 100}}, SendFlags: qp.SendSignaled}},
		{7, qp.SendWR{Opcode: qp.WRRDMAWriteWithImm, SGL: []qp.SGE{{Addr: 8, Length: 9000}}, RemoteAddr: 1}},
		{6, qp.SendWR{Opcode: qp.WRAtomicFetchAndAdd, SGL: []qp.SGE{{Addr: 16, Length: 8}}, RemoteAddr: 64, CompareAdd: 3}},
		{6, qp.SendWR{Opcode: qp.WRRDMARead, SGL: []qp.SGE{{Addr: 0, Length: 70000}}, RemoteAddr: 0}},
		{14, qp.SendWR{Opcode: qp.WRRDMAWrite, SGL: []qp.SGE{{Length: 8}}}},
		{6, qp.SendWR{Opcode: qp.WRSendWithInv, SGL: []qp.SGE{{Length: 8}}, InvalidateRKey: 1}},
		{0, qp.SendWR{Opcode: qp.WROpcode(0xEE)}},
		{22, qp.SendWR{Opcode: qp.WRSend, SGL: []qp.SGE{{Length: 40}}, SendFlags: qp.SendSignaled}},
	} {
		slot := make([]byte, b128)
		if err := ring.EncodeSendWQE(slot, &s.wr); err != nil {
			slot[ring.SendOffOpcode] = byte(s.wr.Opcode)
		}
		in := []byte{s.flags}
		if s.flags&16 != 0 {
			rslot := make([]byte, b128)
			rwr := qp.RecvWR{SGL: []qp.SGE{{Addr: 100, Length: 64}}}
			if err := ring.EncodeRecvWQE(rslot, &rwr); err != nil {
				f.Fatal(err)
			}
			in = append(in, rslot...)
		}
		f.Add(append(in, slot...))
	}

	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 2 {
			return
		}
		// A hang is a failure too: the fuzzing engine has no deadline of
		// its own per input.
		in := append([]byte(nil), data...)
		watchdog := time.AfterFunc(10*time.Second, func() { panic(fmt.Sprintf("input %x: no result in 10 s", in)) })
		defer watchdog.Stop()
		e := *base
		e.t = t
		if x == nil {
			x, y, xcq, ycq = e.pair(qp.TypeRC)
		}
		flags, data := data[0], data[1:]
		typ := qp.TypeRC
		if flags&1 != 0 {
			typ = qp.TypeUC
		}
		a, b, acq, bcq := e.pair(typ)
		if flags&16 != 0 {
			// A receive WQE as hostile as the sends (its wr_id fixed, to
			// tell its completion from the others).
			rp := ring.NewProducer(b.rq)
			slot := rp.Next()
			k := copy(slot, data)
			data = data[k:]
			clear(slot[k:])
			binary.LittleEndian.PutUint64(slot[ring.RecvOffWRID:], 800)
			if flags&4 != 0 {
				for i := ring.RecvHeaderSize; i+ring.SGESize <= len(slot); i += ring.SGESize {
					binary.LittleEndian.PutUint32(slot[i+ring.SGEOffLKey:], dst.LKey)
				}
			}
			rp.Advance()
			rp.Publish()
		}
		if flags&2 != 0 {
			e.postRecv(b, fmt.Sprintf("wr_id=900 sge=%d:0:4096", dst.LKey), fmt.Sprintf("wr_id=901 sge=%d:8192:200", dst.LKey))
		}
		p := ring.NewProducer(a.sq)
		posted := 0
		for len(data) > 0 && posted < 4 {
			slot := p.Next()
			k := copy(slot, data)
			data = data[k:]
			clear(slot[k:])
			// Distinct wr_ids, so that a second completion of one shows.
			binary.LittleEndian.PutUint64(slot[ring.SendOffWRID:], uint64(1000+posted))
			if flags&4 != 0 {
				for i := ring.SendHeaderSize; i+ring.SGESize <= len(slot); i += ring.SGESize {
					binary.LittleEndian.PutUint32(slot[i+ring.SGEOffLKey:], src.LKey)
				}
				rkey := dst.RKey
				if flags&8 != 0 {
					rkey = other.RKey
				}
				binary.LittleEndian.PutUint32(slot[ring.SendOffRKey:], rkey)
			}
			p.Advance()
			posted++
		}
		p.Publish()
		a.Kick()
		e.quiesce()

		seen := map[uint64]bool{}
		for _, cq := range []*CQ{acq, bcq} {
			wcs, err := cq.Poll(1 << 10)
			if err != nil {
				t.Fatal(err)
			}
			for _, wc := range wcs {
				if cq == acq {
					if seen[wc.WRID] {
						t.Fatalf("wr_id %d completed twice", wc.WRID)
					}
					seen[wc.WRID] = true
				}
			}
			if cq == acq && len(wcs) > posted {
				t.Fatalf("%d send completions for %d WQEs", len(wcs), posted)
			}
		}
		for i, v := range other.Mem() {
			if v != 0 {
				t.Fatalf("byte %d of another PD's MR is %d", i, v)
			}
		}
		for _, o := range []interface{ Destroy() error }{a, b, acq, bcq} {
			if err := o.Destroy(); err != nil {
				t.Fatalf("destroy: %v", err)
			}
		}
		// An unrelated pair still works.
		e.postRecv(y, fmt.Sprintf("wr_id=5 sge=%d:16384:64", dst.LKey))
		e.postSend(x, fmt.Sprintf("opcode=send wr_id=6 send_flags=signaled sge=%d:0:16", src.LKey))
		e.expect(xcq, sendWC(6, "success", "send", x, 16))
		e.expect(ycq, recvWC(5, "success", "recv", y, 16, x, ""))
	})
}
