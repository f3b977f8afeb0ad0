package ring

import (
	"bytes"
	"errors"
	"testing"

	"rdmafs/qp"
)

// The post loops start near the wrap of the free-running indices, so a
// batch crosses it.
const postStart = 0xFFFFFFFE

var errHook = errors.New("hook refused")

func sendWR(id uint64) qp.SendWR {
	return qp.SendWR{WRID: id, Opcode: qp.WRSend, SGL: []qp.SGE{{Addr: 0x1000, Length: 8, LKey: 1}}}
}

// inlineWR asks for its SGL's bytes to be gathered: the SGE's address is
// the byte the test's Gather repeats, its length how often.
func inlineWR(id uint64, b byte, n uint32) qp.SendWR {
	return qp.SendWR{WRID: id, Opcode: qp.WRSend, SendFlags: qp.SendInline, SGL: []qp.SGE{{Addr: uint64(b), Length: n, LKey: 1}}}
}

func testGather(dst []byte, s qp.SGE) ([]byte, error) {
	if s.LKey != 1 {
		return nil, errHook
	}
	for range s.Length {
		dst = append(dst, byte(s.Addr))
	}
	return dst, nil
}

func TestSendPosterPost(t *testing.T) {
	badOpcode := sendWR(2)
	badOpcode.Opcode = 99
	badLKey := inlineWR(2, 'x', 4)
	badLKey.SGL[0].LKey = 7
	ud := func(id uint64, ah uint32) qp.SendWR {
		w := sendWR(id)
		w.AH, w.RemoteQPN = ah, 5
		return w
	}
	for _, tc := range []struct {
		name     string
		typ      qp.Type
		used     uint32 // slots of the 4 the consumer has not freed
		corrupt  bool   // the consumer index is ahead of the producer's
		noGather bool
		wrs      []qp.SendWR
		want     int
		wantErr  func(error) bool
		inline   map[int]string // slot → the inline bytes it must hold
	}{
		{name: "zero WRs", wrs: nil, want: 0},
		{name: "all fit", wrs: []qp.SendWR{sendWR(1), sendWR(2), sendWR(3)}, want: 3},
		{name: "full ring", wrs: []qp.SendWR{sendWR(1), sendWR(2), sendWR(3), sendWR(4), sendWR(5)}, want: 4, wantErr: isErr(ErrFull)},
		{name: "full from the start", used: 4, wrs: []qp.SendWR{sendWR(1)}, want: 0, wantErr: isErr(ErrFull)},
		{name: "full after the room left", used: 2, wrs: []qp.SendWR{sendWR(1), sendWR(2), sendWR(3)}, want: 2, wantErr: isErr(ErrFull)},
		{name: "bad WR in the middle", wrs: []qp.SendWR{sendWR(1), badOpcode, sendWR(3)}, want: 1, wantErr: qpKey("opcode")},
		// rxe checks the WR before the queue: on a full ring a bad WR is
		// reported as bad, not as ENOMEM.
		{name: "bad WR on a full ring", used: 4, wrs: []qp.SendWR{badOpcode}, want: 0, wantErr: qpKey("opcode")},
		{name: "corrupt consumer index", corrupt: true, wrs: []qp.SendWR{sendWR(1)}, want: 0, wantErr: isErr(ErrCorrupt)},
		{name: "gather rewrites", wrs: []qp.SendWR{sendWR(1), inlineWR(2, 'a', 3), inlineWR(3, 'b', 0)}, want: 3,
			inline: map[int]string{1: "aaa", 2: ""}},
		{name: "gather rejects", wrs: []qp.SendWR{inlineWR(1, 'a', 2), badLKey, sendWR(3)}, want: 1, wantErr: isErr(errHook),
			inline: map[int]string{0: "aa"}},
		{name: "inline beyond max_inline_data", wrs: []qp.SendWR{sendWR(1), inlineWR(2, 'a', 33)}, want: 1, wantErr: qpKey("inline_data")},
		{name: "no gather hook: the encoder refuses", noGather: true, wrs: []qp.SendWR{sendWR(1), inlineWR(2, 'a', 3)}, want: 1,
			wantErr: isErr(ErrMalformed)},
		{name: "ud: check_ah rejects", typ: qp.TypeUD, wrs: []qp.SendWR{ud(1, 1), ud(2, 2), ud(3, 1)}, want: 1, wantErr: isErr(errHook)},
		// Validation comes first: a missing AH is qp's "required", not
		// the hook's refusal.
		{name: "ud: validation before check_ah", typ: qp.TypeUD, wrs: []qp.SendWR{ud(1, 0)}, want: 0, wantErr: qpKey("ah")},
		{name: "rc: check_ah not asked", wrs: []qp.SendWR{ud(1, 2)}, want: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, _ := newHeapRing(t, KindSQ, 128, 4)
			r.StoreProducer(postStart)
			r.StoreConsumer(postStart - tc.used)
			if tc.corrupt {
				r.StoreConsumer(postStart + 1)
			}
			typ := tc.typ
			if typ == 0 {
				typ = qp.TypeRC
			}
			s := SendPoster{Type: typ, Caps: qp.SendCaps{MaxSGE: 4, MaxInline: 32}, Gather: testGather,
				CheckAH: func(ah uint32) error {
					if ah != 1 {
						return errHook
					}
					return nil
				}}
			if tc.noGather {
				s.Gather = nil
			}
			n, err := s.Post(NewProducer(r), tc.wrs)
			checkPosted(t, r, n, err, tc.want, tc.wantErr)
			for i := range n {
				var got qp.SendWR
				if err := DecodeSendWQE(r.Slot(postStart+uint32(i)), &got); err != nil {
					t.Fatalf("slot %d: %v", i, err)
				}
				if got.WRID != tc.wrs[i].WRID {
					t.Errorf("slot %d holds wr_id %d, want %d", i, got.WRID, tc.wrs[i].WRID)
				}
				if want, ok := tc.inline[i]; ok && (!bytes.Equal(got.InlineData, []byte(want)) || len(got.SGL) != 0) {
					t.Errorf("slot %d: inline %q and %d SGEs, want %q and none", i, got.InlineData, len(got.SGL), want)
				}
			}
			// The poster rewrites a copy: the caller's WRs keep their SGLs.
			for i, w := range tc.wrs {
				if w.SendFlags&qp.SendInline != 0 && (w.InlineData != nil || len(w.SGL) != 1) {
					t.Errorf("wrs[%d] was changed: %+v", i, w)
				}
			}
		})
	}
}

func TestPostRecv(t *testing.T) {
	wr := func(id uint64, sges int) qp.RecvWR {
		return qp.RecvWR{WRID: id, SGL: make([]qp.SGE, sges)}
	}
	for _, tc := range []struct {
		name    string
		used    uint32
		corrupt bool
		wrs     []qp.RecvWR
		want    int
		wantErr func(error) bool
	}{
		{name: "zero WRs", want: 0},
		{name: "all fit", wrs: []qp.RecvWR{wr(1, 1), wr(2, 0), wr(3, 2)}, want: 3},
		{name: "full ring", wrs: []qp.RecvWR{wr(1, 1), wr(2, 1), wr(3, 1), wr(4, 1), wr(5, 1)}, want: 4, wantErr: isErr(ErrFull)},
		{name: "full after the room left", used: 3, wrs: []qp.RecvWR{wr(1, 1), wr(2, 1)}, want: 1, wantErr: isErr(ErrFull)},
		{name: "bad WR in the middle", wrs: []qp.RecvWR{wr(1, 1), wr(2, 3), wr(3, 1)}, want: 1, wantErr: qpKey("sge")},
		{name: "bad WR on a full ring", used: 4, wrs: []qp.RecvWR{wr(1, 3)}, want: 0, wantErr: qpKey("sge")},
		{name: "corrupt consumer index", corrupt: true, wrs: []qp.RecvWR{wr(1, 1)}, want: 0, wantErr: isErr(ErrCorrupt)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, _ := newHeapRing(t, KindRQ, 64, 4)
			r.StoreProducer(postStart)
			r.StoreConsumer(postStart - tc.used)
			if tc.corrupt {
				r.StoreConsumer(postStart + 1)
			}
			n, err := PostRecv(NewProducer(r), 2, tc.wrs)
			checkPosted(t, r, n, err, tc.want, tc.wantErr)
			for i := range n {
				var got qp.RecvWR
				if err := DecodeRecvWQE(r.Slot(postStart+uint32(i)), &got); err != nil || got.WRID != tc.wrs[i].WRID {
					t.Errorf("slot %d: wr_id %d (%v), want %d", i, got.WRID, err, tc.wrs[i].WRID)
				}
			}
		})
	}
}

// checkPosted checks a post's count and error, and that exactly the
// posted WRs were published.
func checkPosted(t *testing.T, r *Ring, n int, err error, want int, wantErr func(error) bool) {
	t.Helper()
	if n != want {
		t.Errorf("posted %d, want %d", n, want)
	}
	switch {
	case wantErr == nil && err != nil:
		t.Errorf("error %v, want none", err)
	case wantErr != nil && (err == nil || !wantErr(err)):
		t.Errorf("error %v, not the one expected", err)
	}
	if got := r.LoadProducer() - postStart; got != uint32(want) {
		t.Errorf("published %d WRs, want %d", got, want)
	}
}

func isErr(target error) func(error) bool {
	return func(err error) bool { return errors.Is(err, target) }
}

// qpKey matches a validation error naming key.
func qpKey(key string) func(error) bool {
	return func(err error) bool {
		var qe *qp.Error
		return errors.As(err, &qe) && qe.Key == key
	}
}

// TestSendPosterInlineNoAlloc: a poster kept per queue gathers inline data
// into its scratch, so an inline post allocates nothing once warm.
func TestSendPosterInlineNoAlloc(t *testing.T) {
	r, _ := newHeapRing(t, KindSQ, 128, 4)
	s := SendPoster{Type: qp.TypeRC, Caps: qp.SendCaps{MaxSGE: 4, MaxInline: 32}, Gather: testGather}
	p := NewProducer(r)
	wrs := []qp.SendWR{inlineWR(1, 'a', 16)}
	if allocs := testing.AllocsPerRun(100, func() {
		if n, err := s.Post(p, wrs); n != 1 || err != nil {
			panic(err)
		}
		r.StoreConsumer(p.Head()) // the consumer frees the slot
	}); allocs != 0 {
		t.Errorf("inline Post: %v allocations", allocs)
	}
}
