// Command ud_pingpong is ibv_ud_pingpong on rdmafs: two UD queue pairs of
// one mounted device exchange datagrams through an address handle for the
// port's own GID (loopback). Every receive buffer starts with the 40-byte
// GRH, as on RoCE; each side checks the GRH's source GID, the payload and
// the completion (source QPN, immediate data). It exits non-zero on any
// wrong result.
//
//	go run ./examples/ud_pingpong -mount /mnt/rdma [-size 1024] [-iters 1000]
package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"log"
	"os"
	"runtime"
	"time"

	"rdmafs/verbs"
)

const grhSize = 40

var (
	mount    = flag.String("mount", "", "rdmafs mount point (required)")
	size     = flag.Int("size", 1024, "datagram payload size (8 up to the port MTU)")
	iters    = flag.Int("iters", 1000, "round trips")
	qkey     = flag.Uint("qkey", 0x11111111, "Q_Key of both QPs")
	doorbell = flag.Bool("always-doorbell", false, "ring the doorbell after every post, not only when the engine asks (NEED_WAKEUP)")
	timeout  = flag.Duration("timeout", 30*time.Second, "give up after this long")
)

type side struct {
	name string
	cq   *verbs.CQ
	qp   *verbs.QP
	mr   *verbs.MR // [0, size) send buffer; [size, size+40+size) receive buffer
	ah   *verbs.AH
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
		log.Fatalf("ud_pingpong: %v", err)
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
	if *size > port.ActiveMTU.Bytes() {
		return fmt.Errorf("-size %d exceeds the port MTU %d", *size, port.ActiveMTU.Bytes())
	}
	pd, err := dev.AllocPD()
	if err != nil {
		return err
	}
	newSide := func(name string) (*side, error) {
		s := &side{name: name}
		var err error
		if s.cq, err = dev.CreateCQ(4); err != nil {
			return nil, err
		}
		if s.mr, err = pd.RegMR(2**size+grhSize, verbs.AccessLocalWrite); err != nil {
			return nil, err
		}
		if s.qp, err = pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeUD, SendCQ: s.cq, RecvCQ: s.cq,
			Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
			return nil, err
		}
		// UD: INIT with the Q_Key, RTR, RTS with a send PSN.
		if err := s.qp.Modify(&verbs.QPAttr{QPState: verbs.StateInit, PortNum: 1, QKey: uint32(*qkey)},
			verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrQKey); err != nil {
			return nil, err
		}
		if err := s.qp.Modify(&verbs.QPAttr{QPState: verbs.StateRTR}, verbs.QPAttrState); err != nil {
			return nil, err
		}
		if err := s.qp.Modify(&verbs.QPAttr{QPState: verbs.StateRTS, SQPSN: 0}, verbs.QPAttrState|verbs.QPAttrSQPSN); err != nil {
			return nil, err
		}
		// The address of the peer: the port's own GID, as ibv_create_ah
		// with is_global set.
		s.ah, err = pd.CreateAH(verbs.AHAttr{DGID: port.GID, HopLimit: 1, PortNum: 1})
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
	fmt.Printf("  local address:  QPN %#06x, GID %s\n", client.qp.QPN, verbs.FormatGID(port.GID))
	fmt.Printf("  remote address: QPN %#06x, GID %s\n", server.qp.QPN, verbs.FormatGID(port.GID))
	for _, s := range []*side{client, server} {
		if err := postRecv(s); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	errc := make(chan error, 2)
	start := time.Now()
	go func() { errc <- pingpong(ctx, server, client, port.GID, false) }()
	go func() { errc <- pingpong(ctx, client, server, port.GID, true) }()
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
		if err := s.ah.Destroy(); err != nil {
			return err
		}
		if err := s.mr.Dereg(); err != nil {
			return err
		}
		if err := s.cq.Destroy(); err != nil {
			return err
		}
	}
	if err := pd.Dealloc(); err != nil {
		return err
	}
	fmt.Println("ud_pingpong: all checks passed")
	return nil
}

func postRecv(s *side) error {
	return s.qp.PostRecv(verbs.RecvWR{WRID: 1, SGL: []verbs.SGE{s.mr.SGE(*size, grhSize+*size)}})
}

// pingpong: as rc_pingpong, with datagrams addressed through the AH to
// the peer's QPN and Q_Key, and each carrying its number as imm_data.
func pingpong(ctx context.Context, s, peer *side, gid [16]byte, client bool) error {
	const sendID, recvID = 2, 1
	sends, recvs := 0, 0
	wc := make([]verbs.WC, 2)
	recvBuf := s.mr.Buf[*size:]
	await := func(n, m int) error {
		for sends < n || recvs < m {
			k, err := s.cq.PollCQ(wc)
			if err != nil {
				return err
			}
			if k == 0 {
				if ctx.Err() != nil {
					return fmt.Errorf("%s: timed out after %d sends, %d receives", s.name, sends, recvs)
				}
				// Busy polling, but let the other side's goroutine run.
				runtime.Gosched()
			}
			for _, c := range wc[:k] {
				if c.Status != verbs.WCSuccess {
					return fmt.Errorf("%s: completion of wr %d: %v", s.name, c.WRID, c.Status)
				}
				if c.WRID == sendID {
					sends++
					continue
				}
				if err := checkRecv(&c, recvBuf, peer, gid, recvs); err != nil {
					return fmt.Errorf("%s: datagram %d: %w", s.name, recvs, err)
				}
				recvs++
				if recvs < *iters {
					if err := postRecv(s); err != nil {
						return err
					}
				}
			}
		}
		return nil
	}
	send := func(i int) error {
		fill(s.mr.Buf[:*size], s.name, i)
		return s.qp.PostSend(verbs.SendWR{WRID: sendID, Opcode: verbs.WRSendWithImm, SendFlags: verbs.SendSignaled,
			ImmData: uint32(i), SGL: []verbs.SGE{s.mr.SGE(0, *size)},
			AH: s.ah.Handle, RemoteQPN: peer.qp.QPN, RemoteQKey: uint32(*qkey)})
	}
	for i := range *iters {
		if client {
			if err := send(i); err != nil {
				return err
			}
			if err := await(i+1, i+1); err != nil {
				return err
			}
			continue
		}
		if err := await(i, i+1); err != nil {
			return err
		}
		if err := send(i); err != nil {
			return err
		}
	}
	return await(*iters, *iters)
}

// checkRecv checks a datagram's completion, GRH and payload.
func checkRecv(c *verbs.WC, buf []byte, peer *side, gid [16]byte, i int) error {
	switch {
	case c.Opcode != verbs.WCRecv:
		return fmt.Errorf("opcode %v", c.Opcode)
	case c.ByteLen != uint32(grhSize+*size):
		return fmt.Errorf("byte_len %d, want %d (GRH + payload)", c.ByteLen, grhSize+*size)
	case c.WCFlags&verbs.WCGRH == 0 || c.WCFlags&verbs.WCWithImm == 0:
		return fmt.Errorf("wc_flags %v, want grh,with_imm", c.WCFlags)
	case c.SrcQP != peer.qp.QPN:
		return fmt.Errorf("src_qp %d, want %d", c.SrcQP, peer.qp.QPN)
	case c.ImmData != uint32(i):
		return fmt.Errorf("imm_data %d", c.ImmData)
	case !bytes.Equal(buf[8:24], gid[:]):
		return fmt.Errorf("GRH source GID % x, want % x", buf[8:24], gid[:])
	}
	return check(buf[grhSize:grhSize+*size], peer.name, i)
}

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
			return fmt.Errorf("payload byte %d is %#x, want %#x", j, b[j], byte(i*31+j+int(who[0])))
		}
	}
	return nil
}
