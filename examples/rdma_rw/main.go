// Command rdma_rw moves data with one-sided operations between two RC
// queue pairs of one mounted rdmafs (loopback): it RDMA WRITEs a buffer
// into the server's memory, READs it back into a second buffer, signals
// the server with WRITE_WITH_IMM, counts with atomic FETCH_AND_ADD, and
// checks every byte and value. It exits non-zero on any wrong result.
//
//	go run ./examples/rdma_rw -mount /mnt/rdma [-size 1048576] [-chunk 65536]
package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"os"
	"runtime"
	"time"

	"rdmafs/verbs"
)

var (
	mount    = flag.String("mount", "", "rdmafs mount point (required)")
	size     = flag.Int("size", 1<<20, "bytes to write and read back")
	chunk    = flag.Int("chunk", 64<<10, "bytes per work request")
	doorbell = flag.Bool("always-doorbell", false, "ring the doorbell after every post, not only when the engine asks (NEED_WAKEUP)")
	timeout  = flag.Duration("timeout", 30*time.Second, "give up after this long")
)

func main() {
	flag.Parse()
	if *mount == "" || *size < 1 || *chunk < 1 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(); err != nil {
		log.Fatalf("rdma_rw: %v", err)
	}
	fmt.Println("rdma_rw: all checks passed")
}

func run() error {
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	dev, err := verbs.OpenWithOptions(*mount, verbs.Options{AlwaysDoorbell: *doorbell})
	if err != nil {
		return err
	}
	defer dev.Close()
	port, err := dev.QueryPort(1)
	if err != nil {
		return err
	}
	attr, err := dev.QueryDevice()
	if err != nil {
		return err
	}
	pd, err := dev.AllocPD()
	if err != nil {
		return err
	}
	cq, err := dev.CreateCQ(64)
	if err != nil {
		return err
	}
	// The client's memory: the source, then the buffer READs land in, then
	// an 8-byte word for atomic results. The server's memory is remote
	// writable, readable and atomic, at an iova of our choosing.
	local, err := pd.RegMR(2**size+8, verbs.AccessLocalWrite)
	if err != nil {
		return err
	}
	remote, err := pd.RegMRIOVA(*size+8, 0x4000_0000,
		verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead|verbs.AccessRemoteAtomic)
	if err != nil {
		return err
	}
	init := verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: 32, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}
	client, err := pd.CreateQP(init)
	if err != nil {
		return err
	}
	server, err := pd.CreateQP(init)
	if err != nil {
		return err
	}
	rd := uint8(min(attr.MaxQPInitRdAtom, 16))
	if err := client.Connect(verbs.ConnectAttr{DestQPN: server.QPN, DGID: port.GID, PathMTU: verbs.MTU4096, MaxRdAtomic: rd}); err != nil {
		return err
	}
	if err := server.Connect(verbs.ConnectAttr{DestQPN: client.QPN, DGID: port.GID, PathMTU: verbs.MTU4096, MaxRdAtomic: rd}); err != nil {
		return err
	}

	src := local.Buf[:*size]
	readBack := local.Buf[*size : 2**size]
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	for i := range src {
		src[i] = byte(r.Uint32())
	}

	// WRITE the source into the server, chunk by chunk, keeping the send
	// queue full; READ it back the same way.
	start := time.Now()
	if err := stream(ctx, client, cq, verbs.WRRDMAWrite, local, 0, remote, 0); err != nil {
		return err
	}
	wrote := time.Since(start)
	if !bytes.Equal(remote.Buf[:*size], src) {
		return fmt.Errorf("RDMA WRITE: the server's memory differs from the source at byte %d", firstDiff(remote.Buf, src))
	}
	start = time.Now()
	if err := stream(ctx, client, cq, verbs.WRRDMARead, local, *size, remote, 0); err != nil {
		return err
	}
	read := time.Since(start)
	if !bytes.Equal(readBack, src) {
		return fmt.Errorf("RDMA READ: the data read back differs at byte %d", firstDiff(readBack, src))
	}
	fmt.Printf("RDMA WRITE %d bytes in %v (%.0f MB/s), READ back in %v (%.0f MB/s): identical\n",
		*size, wrote, float64(*size)/wrote.Seconds()/1e6, read, float64(*size)/read.Seconds()/1e6)

	// WRITE_WITH_IMM: the data lands and the server learns of it through a
	// receive completion carrying the immediate value.
	if err := server.PostRecv(verbs.RecvWR{WRID: 500}); err != nil {
		return err
	}
	copy(local.Buf[:5], "done!")
	if err := client.PostSend(verbs.SendWR{WRID: 501, Opcode: verbs.WRRDMAWriteWithImm, SendFlags: verbs.SendSignaled,
		ImmData: 0xC0FFEE, SGL: []verbs.SGE{local.SGE(0, 5)}, RemoteAddr: remote.Addr(0), RKey: remote.RKey}); err != nil {
		return err
	}
	wcs, err := collect(ctx, cq, 2)
	if err != nil {
		return err
	}
	for _, wc := range wcs {
		switch {
		case wc.Status != verbs.WCSuccess:
			return fmt.Errorf("write_with_imm: wr %d: %v", wc.WRID, wc.Status)
		case wc.WRID == 500 && (wc.Opcode != verbs.WCRecvRDMAWithImm || wc.ImmData != 0xC0FFEE || wc.WCFlags&verbs.WCWithImm == 0):
			return fmt.Errorf("write_with_imm: server completion %+v", wc)
		}
	}
	if string(remote.Buf[:5]) != "done!" {
		return fmt.Errorf("write_with_imm: server memory %q", remote.Buf[:5])
	}
	fmt.Printf("RDMA WRITE_WITH_IMM: server got imm_data %#x and the data\n", uint32(0xC0FFEE))

	// Atomics on the word after the data: 10 FETCH_AND_ADDs, then a
	// COMPARE_AND_SWAP that must see their sum.
	word := remote.Addr(*size)
	binary.LittleEndian.PutUint64(remote.Buf[*size:], 1000)
	res := local.SGE(2**size, 8)
	for i := range 10 {
		if err := client.PostSend(verbs.SendWR{WRID: uint64(600 + i), Opcode: verbs.WRAtomicFetchAndAdd, SendFlags: verbs.SendSignaled,
			SGL: []verbs.SGE{res}, RemoteAddr: word, RKey: remote.RKey, CompareAdd: uint64(i + 1)}); err != nil {
			return err
		}
		if _, err := collect(ctx, cq, 1); err != nil {
			return err
		}
		if got, want := binary.LittleEndian.Uint64(local.Buf[2**size:]), uint64(1000+i*(i+1)/2); got != want {
			return fmt.Errorf("fetch_and_add %d returned %d, want %d", i, got, want)
		}
	}
	if err := client.PostSend(verbs.SendWR{WRID: 700, Opcode: verbs.WRAtomicCmpAndSwp, SendFlags: verbs.SendSignaled,
		SGL: []verbs.SGE{res}, RemoteAddr: word, RKey: remote.RKey, CompareAdd: 1055, Swap: 1}); err != nil {
		return err
	}
	if _, err := collect(ctx, cq, 1); err != nil {
		return err
	}
	if old, now := binary.LittleEndian.Uint64(local.Buf[2**size:]), binary.LittleEndian.Uint64(remote.Buf[*size:]); old != 1055 || now != 1 {
		return fmt.Errorf("compare_and_swap: old %d (want 1055), now %d (want 1)", old, now)
	}
	fmt.Println("atomics: 10 fetch_and_add and a compare_and_swap agree")

	// A WRITE with a wrong rkey fails with a remote access error.
	if err := client.PostSend(verbs.SendWR{WRID: 800, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
		SGL: []verbs.SGE{local.SGE(0, 8)}, RemoteAddr: remote.Addr(0), RKey: remote.RKey ^ 0x100}); err != nil {
		return err
	}
	if wcs, err = collect(ctx, cq, 1); err != nil {
		return err
	}
	if len(wcs) != 1 || wcs[0].Status != verbs.WCRemAccessErr {
		return fmt.Errorf("write with a bad rkey: %+v, want rem_access_err", wcs)
	}
	fmt.Println("bad rkey: rem_access_err, as it should be")

	for _, q := range []*verbs.QP{client, server} {
		if err := q.Destroy(); err != nil {
			return err
		}
	}
	for _, m := range []*verbs.MR{local, remote} {
		if err := m.Dereg(); err != nil {
			return err
		}
	}
	if err := cq.Destroy(); err != nil {
		return err
	}
	return pd.Dealloc()
}

// stream moves *size bytes between local (at loff) and remote (at roff)
// with op, *chunk bytes a WR, keeping up to the send queue's depth in
// flight, signalling every WR.
func stream(ctx context.Context, q *verbs.QP, cq *verbs.CQ, op verbs.WROpcode, local *verbs.MR, loff int, remote *verbs.MR, roff int) error {
	depth := int(min(q.Cap.MaxSendWR, uint32(cq.CQE())))
	wc := make([]verbs.WC, depth)
	posted, done, inflight := 0, 0, 0
	var id uint64
	for done < *size {
		var batch []verbs.SendWR
		for posted < *size && inflight+len(batch) < depth {
			n := min(*chunk, *size-posted)
			id++
			batch = append(batch, verbs.SendWR{WRID: id<<32 | uint64(n), Opcode: op, SendFlags: verbs.SendSignaled,
				SGL: []verbs.SGE{local.SGE(loff+posted, n)}, RemoteAddr: remote.Addr(roff + posted), RKey: remote.RKey})
			posted += n
		}
		if len(batch) > 0 {
			if err := q.PostSend(batch...); err != nil {
				return fmt.Errorf("%v: %w", op, err)
			}
			inflight += len(batch)
		}
		k, err := poll(ctx, cq, wc)
		if err != nil {
			return err
		}
		for _, c := range wc[:k] {
			if c.Status != verbs.WCSuccess {
				return fmt.Errorf("%v: wr %d: %v", op, c.WRID>>32, c.Status)
			}
			done += int(uint32(c.WRID))
			inflight--
		}
	}
	return nil
}

// poll returns at least one completion, or fails when ctx ends.
func poll(ctx context.Context, cq *verbs.CQ, wc []verbs.WC) (int, error) {
	for {
		n, err := cq.PollCQ(wc)
		if n > 0 || err != nil {
			return n, err
		}
		if ctx.Err() != nil {
			return 0, fmt.Errorf("timed out waiting for a completion")
		}
		runtime.Gosched()
	}
}

// collect returns exactly n completions.
func collect(ctx context.Context, cq *verbs.CQ, n int) ([]verbs.WC, error) {
	out := make([]verbs.WC, 0, n)
	wc := make([]verbs.WC, n)
	for len(out) < n {
		k, err := poll(ctx, cq, wc[:n-len(out)])
		if err != nil {
			return out, err
		}
		out = append(out, wc[:k]...)
	}
	return out, nil
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
