// Command rc_pingpong is ibv_rc_pingpong on rdmafs: two RC queue pairs of
// one mounted device, connected to each other (loopback), bounce a
// message back and forth; each side checks every message it receives.
// It exits non-zero on any wrong result.
//
//	go run ./examples/rc_pingpong -mount /mnt/rdma [-size 4096] [-iters 1000] [-events]
//
// With -server or -connect HOST it is one side of ibv_rc_pingpong instead,
// speaking rdma-core's TCP exchange (port 18515) to a peer on another host,
// for example the kernel's Soft-RoCE (see remote.go and
// scripts/interop-rxe.sh).
package main

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"runtime"
	"time"

	"rdmafs/verbs"
)

var (
	mount    = flag.String("mount", "", "rdmafs mount point (required)")
	size     = flag.Int("size", 4096, "message size in bytes (at least 8)")
	iters    = flag.Int("iters", 1000, "round trips")
	events   = flag.Bool("events", false, "sleep on CQ events instead of busy polling")
	doorbell = flag.Bool("always-doorbell", false, "ring the doorbell after every post, not only when the engine asks (NEED_WAKEUP)")
	timeout  = flag.Duration("timeout", 30*time.Second, "give up after this long")
)

// side is one end of the ping-pong: a QP with its own CQ and buffer.
type side struct {
	name string
	cq   *verbs.CQ
	qp   *verbs.QP
	mr   *verbs.MR
}

func main() {
	flag.Parse()
	if *mount == "" || *size < 8 || *iters < 1 {
		flag.Usage()
		os.Exit(2)
	}
	run := run
	if *serve || *connectTo != "" {
		run = runRemote
	}
	if err := run(); err != nil {
		log.Fatalf("rc_pingpong: %v", err)
	}
}

func run() error {
	dev, err := verbs.OpenWithOptions(*mount, verbs.Options{AlwaysDoorbell: *doorbell})
	if err != nil {
		return err
	}
	defer dev.Close()
	port, err := dev.QueryPort(1)
	if err != nil {
		return err
	}
	pd, err := dev.AllocPD()
	if err != nil {
		return err
	}
	newSide := func(name string) (*side, error) {
		s := &side{name: name}
		if s.cq, err = dev.CreateCQ(2); err != nil {
			return nil, err
		}
		// The first half of the buffer is sent from, the second half
		// received into.
		if s.mr, err = pd.RegMR(2**size, verbs.AccessLocalWrite); err != nil {
			return nil, err
		}
		s.qp, err = pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: s.cq, RecvCQ: s.cq,
			// One send is outstanding at a time.
			Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
		return s, err
	}
	client, err := newSide("client")
	if err != nil {
		return err
	}
	server, err := newSide("server")
	if err != nil {
		return err
	}
	// pp_connect_ctx: INIT, RTR towards the peer, RTS; with explicit
	// Modify calls, as a libibverbs program writes them.
	for _, c := range []struct {
		q, dest *verbs.QP
		rq, sq  verbs.PSN
	}{{client.qp, server.qp, 200, 100}, {server.qp, client.qp, 100, 200}} {
		if err := connect(c.q, c.dest.QPN, port.GID, c.rq, c.sq); err != nil {
			return err
		}
	}
	fmt.Printf("  local address:  QPN %#06x, PSN %#06x, GID %s\n", client.qp.QPN, 100, verbs.FormatGID(port.GID))
	fmt.Printf("  remote address: QPN %#06x, PSN %#06x, GID %s\n", server.qp.QPN, 200, verbs.FormatGID(port.GID))

	// Each side has its receive posted before anyone sends.
	for _, s := range []*side{client, server} {
		if err := postRecv(s); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	errc := make(chan error, 2)
	start := time.Now()
	go func() { errc <- pingpong(ctx, server, false) }()
	go func() { errc <- pingpong(ctx, client, true) }()
	for range 2 {
		if err := <-errc; err != nil {
			cancel()
			return err
		}
	}
	elapsed := time.Since(start)
	bytes := int64(*size) * int64(*iters) * 2
	fmt.Printf("%d bytes in %.2f seconds = %.2f Mbit/sec\n", bytes, elapsed.Seconds(), float64(bytes)*8/elapsed.Seconds()/1e6)
	fmt.Printf("%d iters in %.2f seconds = %.2f usec/iter\n", *iters, elapsed.Seconds(), float64(elapsed.Microseconds())/float64(*iters))

	for _, s := range []*side{client, server} {
		if err := s.qp.Destroy(); err != nil {
			return err
		}
		if err := s.mr.Dereg(); err != nil {
			return err
		}
		if err := s.cq.Destroy(); err != nil {
			return err
		}
	}
	return pd.Dealloc()
}

func connect(q *verbs.QP, dest uint32, gid [16]byte, rqPSN, sqPSN verbs.PSN) error {
	if err := q.Modify(&verbs.QPAttr{QPState: verbs.StateInit, PKeyIndex: 0, PortNum: 1, QPAccessFlags: 0},
		verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags); err != nil {
		return err
	}
	rtr := verbs.QPAttr{QPState: verbs.StateRTR, PathMTU: verbs.MTU1024, DestQPNum: dest, RQPSN: rqPSN,
		MaxDestRdAtomic: 1, MinRNRTimer: 12}
	rtr.AH.DGID, rtr.AH.HopLimit = gid, 1
	if err := q.Modify(&rtr, verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|
		verbs.QPAttrRQPSN|verbs.QPAttrMaxDestRdAtomic|verbs.QPAttrMinRNRTimer); err != nil {
		return err
	}
	rts := verbs.QPAttr{QPState: verbs.StateRTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7, SQPSN: sqPSN, MaxRdAtomic: 1}
	return q.Modify(&rts, verbs.QPAttrState|verbs.QPAttrTimeout|verbs.QPAttrRetryCnt|verbs.QPAttrRNRRetry|
		verbs.QPAttrSQPSN|verbs.QPAttrMaxQPRdAtomic)
}

// pingpong runs one side: the client sends message i and waits for the
// server's reply i; the server waits for message i and replies. Each side
// checks every message it receives against the sender's pattern, and
// keeps one receive posted.
func pingpong(ctx context.Context, s *side, client bool) error {
	const recvID, sendID = 1, 2
	recvBuf, sendBuf := s.mr.Buf[*size:], s.mr.Buf[:*size]
	peer := "client"
	if client {
		peer = "server"
	}
	sends, recvs := 0, 0
	wc := make([]verbs.WC, 2)
	// await handles completions until n sends and m receives are done.
	await := func(n, m int) error {
		for sends < n || recvs < m {
			k, err := wait(ctx, s.cq, wc)
			if err != nil {
				return err
			}
			for _, c := range wc[:k] {
				if c.Status != verbs.WCSuccess {
					return fmt.Errorf("completion of wr %d: %v", c.WRID, c.Status)
				}
				switch c.WRID {
				case sendID:
					sends++
				case recvID:
					if c.ByteLen != uint32(*size) {
						return fmt.Errorf("message %d: %d bytes, want %d", recvs, c.ByteLen, *size)
					}
					if err := check(recvBuf, peer, recvs); err != nil {
						return fmt.Errorf("message %d: %w", recvs, err)
					}
					recvs++
					if recvs < *iters {
						if err := postRecv(s); err != nil {
							return err
						}
					}
				default:
					return fmt.Errorf("unexpected wr_id %d", c.WRID)
				}
			}
		}
		return nil
	}
	send := func(i int) error {
		fill(sendBuf, s.name, i)
		return s.qp.PostSend(verbs.SendWR{WRID: sendID, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled,
			SGL: []verbs.SGE{s.mr.SGE(0, *size)}})
	}
	for i := range *iters {
		if client {
			if err := send(i); err != nil {
				return fmt.Errorf("%s: %w", s.name, err)
			}
			if err := await(i+1, i+1); err != nil {
				return fmt.Errorf("%s: %w", s.name, err)
			}
			continue
		}
		if err := await(i, i+1); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		if err := send(i); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
	}
	if err := await(*iters, *iters); err != nil {
		return fmt.Errorf("%s: %w", s.name, err)
	}
	return nil
}

// postRecv posts the one receive into the second half of the buffer.
func postRecv(s *side) error {
	return s.qp.PostRecv(verbs.RecvWR{WRID: 1, SGL: []verbs.SGE{s.mr.SGE(*size, *size)}})
}

// wait returns the completions there are, polling, or sleeping on a CQ
// event with -events.
func wait(ctx context.Context, cq *verbs.CQ, wc []verbs.WC) (int, error) {
	for {
		n, err := cq.PollCQ(wc)
		if n > 0 || err != nil {
			return n, err
		}
		if err := ctx.Err(); err != nil {
			return 0, errors.New("timed out waiting for a completion")
		}
		// Busy polling, but let the other side's goroutine run.
		runtime.Gosched()
		if *events {
			if err := cq.ReqNotifyCQ(false); err != nil {
				return 0, err
			}
			// Poll once more after arming: a completion may have
			// arrived in between, and it fires no event.
			if n, err := cq.PollCQ(wc); n > 0 || err != nil {
				return n, err
			}
			if err := cq.GetCQEvent(ctx); err != nil {
				return 0, fmt.Errorf("waiting for a CQ event: %w", err)
			}
		}
	}
}

// fill writes the pattern of message i from who: its number, then bytes
// that depend on both.
func fill(b []byte, who string, i int) {
	binary.LittleEndian.PutUint64(b, uint64(i))
	for j := 8; j < len(b); j++ {
		b[j] = byte(i*31 + j + int(who[0]))
	}
}

func check(b []byte, who string, i int) error {
	if got := binary.LittleEndian.Uint64(b); got != uint64(i) {
		return fmt.Errorf("carries number %d", got)
	}
	for j := 8; j < len(b); j++ {
		if b[j] != byte(i*31+j+int(who[0])) {
			return fmt.Errorf("byte %d is %#x, want %#x", j, b[j], byte(i*31+j+int(who[0])))
		}
	}
	return nil
}
