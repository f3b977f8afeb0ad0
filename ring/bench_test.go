package ring

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"testing"

	"rdmafs/qp"
)

// BenchmarkProducerConsumer moves b.N entries from one goroutine to another
// through a memfd ring, each side on its own mapping; ns/op is per entry.
// batch is the most entries the producer publishes at once (1: publish
// every entry, as one post_send of one WR).
func BenchmarkProducerConsumer(b *testing.B) {
	for _, batch := range []uint32{1, 16, 256} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			const slotSize, slots = 64, 256
			reg := newTestRegion(b, Size(slotSize, slots))
			if _, err := Init(reg.Bytes(), KindSQ, slotSize, slots); err != nil {
				b.Fatal(err)
			}
			pm := mapTestRegion(b, reg.Fd(), reg.Size())
			cm := mapTestRegion(b, reg.Fd(), reg.Size())
			pr, _ := Attach(pm.Bytes(), KindSQ)
			cr, _ := Attach(cm.Bytes(), KindSQ)
			n := uint64(b.N)
			done := make(chan error, 1)
			b.ResetTimer()
			go func() {
				c := NewConsumer(cr)
				for seq := uint64(0); seq < n; {
					pending, err := c.Pending()
					if err != nil {
						done <- err
						return
					}
					if pending == 0 {
						runtime.Gosched()
						continue
					}
					for i := range pending {
						if got := binary.LittleEndian.Uint64(c.Peek(i)); got != seq {
							done <- fmt.Errorf("entry %d, want %d", got, seq)
							return
						}
						seq++
					}
					c.Advance(pending)
					c.Publish()
				}
				done <- nil
			}()
			p := NewProducer(pr)
			for seq := uint64(0); seq < n; {
				free, err := p.Free()
				if err != nil {
					b.Fatal(err)
				}
				if free == 0 {
					runtime.Gosched()
					continue
				}
				for range min(uint64(free), uint64(batch), n-seq) {
					binary.LittleEndian.PutUint64(p.Next(), seq)
					p.Advance()
					seq++
				}
				p.Publish()
			}
			if err := <-done; err != nil {
				b.Fatal(err)
			}
		})
	}
}

// BenchmarkEncodeDecodeSendWQE: one client encode and one daemon decode of
// a two-SGE RDMA write, into a reused WR.
func BenchmarkEncodeDecodeSendWQE(b *testing.B) {
	slot := make([]byte, 128)
	in := qp.SendWR{WRID: 1, Opcode: qp.WRRDMAWrite, SendFlags: qp.SendSignaled,
		SGL: sampleSGL(2), RemoteAddr: 0x1000, RKey: 0x22}
	out := qp.SendWR{SGL: make([]qp.SGE, 0, 4)}
	b.ReportAllocs()
	for b.Loop() {
		if err := EncodeSendWQE(slot, &in); err != nil {
			b.Fatal(err)
		}
		if err := DecodeSendWQE(slot, &out); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkBell is a doorbell mark and the take that finds it, the ring's
// share of a wake (device.BenchmarkBellWake adds the QP's look): a client
// marks one QP (MarkBell), the daemon takes the marks (TakeBells), with the
// rest of the bitmap empty, as it is between wakes.
func BenchmarkBell(b *testing.B) {
	reg := newTestRegion(b, Size(MinSlotSize, BellSlots))
	r, err := Init(reg.Bytes(), KindDoorbell, MinSlotSize, BellSlots)
	if err != nil {
		b.Fatal(err)
	}
	n := 0
	fn := func(uint32) { n++ }
	b.Run("mark", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			r.MarkBell(1234)
		}
		r.TakeBells(fn)
	})
	b.Run("mark+take", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			r.MarkBell(1234)
			r.TakeBells(fn)
		}
	})
	b.Run("take-empty", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			r.TakeBells(fn)
		}
	})
}
