package oob

import (
	"context"
	"fmt"
	"syscall"
	"time"

	"rdmafs/verbs"
)

// Idle is what a polling loop does after a poll that found nothing: every
// yieldEvery-th time it gives the CPU up (sched_yield), so that on a host
// with fewer cores than spinners the device (the rdmafs daemon, a kernel
// peer's softirq) gets to run; a loop that never yields starves it and
// its ACKs come back milliseconds late. Call it with a counter of the
// empty polls in a row.
func Idle(empty *int) {
	const yieldEvery = 64
	if *empty++; *empty%yieldEvery == 0 {
		syscall.Syscall(syscall.SYS_SCHED_YIELD, 0, 0, 0)
	}
}

// Work request IDs of the ping-pong loop.
const (
	RecvID = 1
	SendID = 2
)

// Loop is the ping-pong of ibv_rc_pingpong and ibv_ud_pingpong: with the
// receives already posted, the client sends first, and a side sends its
// next message once its previous send completed and a message arrived;
// every receive is replaced at once. It ends after iters of each and
// prints the tools' summary. recvLen is the byte_len every receive must
// report (the message, plus 40 for UD's GRH).
func Loop(ctx context.Context, cq *verbs.CQ, iters, size int, recvLen uint32, client bool,
	postRecv, send func() error) error {
	start := time.Now()
	pending := RecvID
	if client {
		if err := send(); err != nil {
			return err
		}
		pending |= SendID
	}
	rcnt, scnt, empty := 0, 0, 0
	wc := make([]verbs.WC, 16)
	for rcnt < iters || scnt < iters {
		n, err := cq.PollCQ(wc)
		if err != nil {
			return err
		}
		if n == 0 {
			if ctx.Err() != nil {
				return fmt.Errorf("timed out after %d sends and %d receives", scnt, rcnt)
			}
			Idle(&empty)
			continue
		}
		empty = 0
		for _, c := range wc[:n] {
			if c.Status != verbs.WCSuccess {
				return fmt.Errorf("completion of wr %d: %v", c.WRID, c.Status)
			}
			switch c.WRID {
			case SendID:
				scnt++
			case RecvID:
				if c.ByteLen != recvLen {
					return fmt.Errorf("message %d: %d bytes, want %d", rcnt, c.ByteLen, recvLen)
				}
				rcnt++
				if err := postRecv(); err != nil {
					return err
				}
			default:
				return fmt.Errorf("unexpected wr_id %d", c.WRID)
			}
			pending &^= int(c.WRID)
			if scnt < iters && pending == 0 {
				if err := send(); err != nil {
					return err
				}
				pending = RecvID | SendID
			}
		}
	}
	elapsed := time.Since(start)
	bytes := int64(size) * int64(iters) * 2
	fmt.Printf("%d bytes in %.2f seconds = %.2f Mbit/sec\n", bytes, elapsed.Seconds(), float64(bytes)*8/elapsed.Seconds()/1e6)
	fmt.Printf("%d iters in %.2f seconds = %.2f usec/iter\n", iters, elapsed.Seconds(), float64(elapsed.Microseconds())/float64(iters))
	return nil
}
