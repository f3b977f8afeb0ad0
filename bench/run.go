package bench

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"rdmafs/verbs"
)

// ---------------------------------------------------------------- one size

// run measures one size: a warm-up, then the timed phase, then the data
// check, with the counters read around the timed phase only.
func (b *bench) run(size int) (*Result, error) {
	c := b.c
	r := &Result{Op: c.Op, Mode: c.Mode, Bytes: size, QPs: c.QPs, Threads: c.Threads, TxDepth: c.TxDepth, CQMod: c.CQMod,
		PostList: c.PostList, DaemonPID: b.pid, PeerDaemonPID: b.pidB}
	for _, p := range b.pairs {
		b.prepare(p, size)
	}
	if c.Warmup > 0 {
		var err error
		if c.Mode == "bw" {
			_, _, err = b.bw(uint64(c.Warmup), 0, nil)
		} else {
			_, err = b.lat(size, c.Warmup, 0, nil)
		}
		if err != nil {
			return nil, fmt.Errorf("warm-up: %w", err)
		}
	}
	before := b.snapshot()
	var err error
	if c.Mode == "bw" {
		err = b.measureBW(size, r)
	} else {
		err = b.measureLat(size, r)
	}
	if err != nil {
		return nil, err
	}
	after := b.snapshot()
	after.sub(&before, &b.over, r)
	if beforeCheck != nil {
		beforeCheck(b, size)
	}
	r.Check = b.check(size)
	return r, nil
}

// beforeCheck lets tests look at (or spoil) the memory before the
// data check of a size.
var beforeCheck func(b *bench, size int)

// prepare fills in the WR templates of a pair for size.
func (b *bench) prepare(p *benchPair, size int) {
	c := b.c
	for i := range p.wrs {
		w := &p.wrs[i]
		*w = verbs.SendWR{SGL: w.SGL[:1]}
		switch c.Op {
		case "write":
			w.Opcode = verbs.WRRDMAWrite
			w.SGL[0] = p.ma.SGE(0, size)
			w.RemoteAddr, w.RKey = p.mb.Addr(b.buf), p.mb.RKey
		case "read":
			w.Opcode = verbs.WRRDMARead
			w.SGL[0] = p.ma.SGE(b.buf, size)
			w.RemoteAddr, w.RKey = p.mb.Addr(0), p.mb.RKey
		case "send":
			w.Opcode = verbs.WRSend
			w.SGL[0] = p.ma.SGE(0, size)
		case "fetch_add", "cmp_swap":
			w.Opcode = verbs.WRAtomicFetchAndAdd
			if c.Op == "cmp_swap" {
				w.Opcode = verbs.WRAtomicCmpAndSwp
			}
			w.SGL[0] = p.ma.SGE(p.atom, 8)
			w.RemoteAddr, w.RKey = p.mb.Addr(p.atomicWord), p.mb.RKey
			w.CompareAdd = 1
		}
		if size <= c.Inline && (c.Op == "write" || c.Op == "send") {
			w.SendFlags |= verbs.SendInline
		}
	}
	// B's answer in the ping-pongs: from B's send half to A's receive half.
	w := &p.bwr[0]
	*w = verbs.SendWR{SGL: w.SGL[:1]}
	w.SGL[0] = p.mb.SGE(0, size)
	if c.Op == "write" {
		w.Opcode, w.RemoteAddr, w.RKey = verbs.WRRDMAWrite, p.ma.Addr(b.buf), p.ma.RKey
	} else {
		w.Opcode = verbs.WRSend
	}
	if size <= c.Inline {
		w.SendFlags |= verbs.SendInline
	}
	// Receives land in the receive halves, whole: receives posted for
	// one size may take the next size's messages.
	for i := range p.rwrA {
		p.rwrA[i].SGL[0] = p.ma.SGE(b.buf, b.buf)
		p.rwrB[i].SGL[0] = p.mb.SGE(b.buf, b.buf)
	}
	binary.LittleEndian.PutUint64(p.mb.Buf[p.atomicWord:], 0)
	binary.LittleEndian.PutUint64(p.ma.Buf[p.atom:], ^uint64(0))
	p.atomicN = 0
}

// check compares the memory after a size with what the operations must
// have left there.
func (b *bench) check(size int) string {
	for i, p := range b.pairs {
		bad := func(format string, args ...any) string {
			return fmt.Sprintf("qp pair %d (qpn %d→%d): ", i, p.a.QPN, p.b.QPN) + fmt.Sprintf(format, args...)
		}
		if p.errWC != nil {
			return bad("completion %+v", *p.errWC)
		}
		switch b.c.Op {
		case "write", "send":
			if got, want := p.mb.Buf[b.buf:b.buf+size], p.ma.Buf[:size]; !bytes.Equal(got, want) {
				return bad("B's memory differs from A's source at byte %d", firstDiffAt(got, want))
			}
			if b.c.Mode == "lat" {
				if got, want := p.ma.Buf[b.buf:b.buf+size], p.mb.Buf[:size]; !bytes.Equal(got, want) {
					return bad("A's memory differs from B's answer at byte %d", firstDiffAt(got, want))
				}
			}
			if b.c.Op == "send" && p.lastByteLen != uint32(size) {
				return bad("receive completion byte_len %d, want %d", p.lastByteLen, size)
			}
		case "read":
			if got, want := p.ma.Buf[b.buf:b.buf+size], p.mb.Buf[:size]; !bytes.Equal(got, want) {
				return bad("the data read differs from B's memory at byte %d", firstDiffAt(got, want))
			}
		case "fetch_add", "cmp_swap":
			// Every atomic added 1 (or swapped k for k+1) in order.
			word := binary.LittleEndian.Uint64(p.mb.Buf[p.atomicWord:])
			res := binary.LittleEndian.Uint64(p.ma.Buf[p.atom:])
			if word != p.atomicN || res != p.atomicN-1 {
				return bad("after %d atomics the word is %d and the last returned %d (want %d and %d)",
					p.atomicN, word, res, p.atomicN, p.atomicN-1)
			}
		}
	}
	return "ok"
}

func firstDiffAt(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
