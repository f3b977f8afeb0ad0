package main

// Remote mode: rc_pingpong against another host's ibv_rc_pingpong (or this
// program on another rdmafs), over RoCEv2. The out-of-band exchange is
// rdma-core's: a TCP connection to port 18515 carrying, each way, the
// 52-byte string "LID:QPN:PSN:GID\0" ("%04x:%06x:%06x:" and the 16 GID
// bytes as 32 hex digits); the client then sends "done\0". The ping-pong
// is ibv_rc_pingpong's: rx_depth receives posted, the client sends first,
// and a side sends its next message once its previous send completed and
// a message arrived. Contents are not checked (as without -c); sizes are.

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"rdmafs/verbs"
)

var (
	serve     = flag.Bool("server", false, "remote mode: wait for an ibv_rc_pingpong client on -port")
	connectTo = flag.String("connect", "", "remote mode: connect to an ibv_rc_pingpong server on this host")
	tcpPort   = flag.Int("port", 18515, "remote mode: TCP port of the out-of-band exchange")
	mtuBytes  = flag.Int("mtu", 1024, "remote mode: path MTU in bytes")
	rxDepth   = flag.Int("rx-depth", 500, "remote mode: receives kept posted")
)

// dest is one side's address as ibv_rc_pingpong exchanges it.
type dest struct {
	lid      uint16
	qpn, psn uint32
	gid      [16]byte
}

const destLen = len("0000:000000:000000:00000000000000000000000000000000") + 1

func (d dest) wire() []byte {
	s := fmt.Sprintf("%04x:%06x:%06x:%s", d.lid, d.qpn, d.psn, hex.EncodeToString(d.gid[:]))
	return append([]byte(s), 0)
}

func parseDest(b []byte) (dest, error) {
	var d dest
	f := strings.Split(strings.TrimRight(string(b), "\x00"), ":")
	if len(f) != 4 || len(f[3]) != 32 {
		return d, fmt.Errorf("malformed peer address %q", b)
	}
	lid, err1 := strconv.ParseUint(f[0], 16, 16)
	qpn, err2 := strconv.ParseUint(f[1], 16, 24)
	psn, err3 := strconv.ParseUint(f[2], 16, 24)
	g, err4 := hex.DecodeString(f[3])
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return d, fmt.Errorf("malformed peer address %q: %v", b, err)
	}
	d.lid, d.qpn, d.psn = uint16(lid), uint32(qpn), uint32(psn)
	copy(d.gid[:], g)
	return d, nil
}

func runRemote() error {
	mtu, ok := map[int]verbs.MTU{256: verbs.MTU256, 512: verbs.MTU512, 1024: verbs.MTU1024,
		2048: verbs.MTU2048, 4096: verbs.MTU4096}[*mtuBytes]
	if !ok {
		return fmt.Errorf("-mtu %d: not 256..4096", *mtuBytes)
	}
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
	cq, err := dev.CreateCQ(*rxDepth + 1)
	if err != nil {
		return err
	}
	mr, err := pd.RegMR(*size, verbs.AccessLocalWrite)
	if err != nil {
		return err
	}
	q, err := pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: uint32(*rxDepth), MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return err
	}
	var rnd [4]byte
	rand.Read(rnd[:])
	me := dest{qpn: q.QPN, psn: binary.LittleEndian.Uint32(rnd[:]) & 0xFFFFFF, gid: port.GID}

	var conn net.Conn
	if *serve {
		ln, err := net.Listen("tcp", fmt.Sprintf(":%d", *tcpPort))
		if err != nil {
			return err
		}
		fmt.Printf("waiting for a client on TCP %d\n", *tcpPort)
		conn, err = ln.Accept()
		ln.Close()
		if err != nil {
			return err
		}
	} else {
		if conn, err = net.DialTimeout("tcp", net.JoinHostPort(*connectTo, strconv.Itoa(*tcpPort)), *timeout); err != nil {
			return err
		}
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(*timeout))
	buf := make([]byte, destLen)
	var peer dest
	if *serve {
		// The server connects its QP before answering, as pp_server_exch_dest.
		if _, err := io.ReadFull(conn, buf); err != nil {
			return fmt.Errorf("reading the client's address: %w", err)
		}
		if peer, err = parseDest(buf); err != nil {
			return err
		}
		if err := connectRemote(q, peer, me, mtu); err != nil {
			return err
		}
		if _, err := conn.Write(me.wire()); err != nil {
			return err
		}
		done := make([]byte, len("done")+1)
		if _, err := io.ReadFull(conn, done); err != nil {
			return fmt.Errorf("reading the client's done: %w", err)
		}
	} else {
		if _, err := conn.Write(me.wire()); err != nil {
			return err
		}
		if _, err := io.ReadFull(conn, buf); err != nil {
			return fmt.Errorf("reading the server's address: %w", err)
		}
		if peer, err = parseDest(buf); err != nil {
			return err
		}
		if err := connectRemote(q, peer, me, mtu); err != nil {
			return err
		}
		if _, err := conn.Write([]byte("done\x00")); err != nil {
			return err
		}
	}
	fmt.Printf("  local address:  LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n", me.lid, me.qpn, me.psn, verbs.FormatGID(me.gid))
	fmt.Printf("  remote address: LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n", peer.lid, peer.qpn, peer.psn, verbs.FormatGID(peer.gid))

	const recvID, sendID = 1, 2
	post := func() error {
		return q.PostRecv(verbs.RecvWR{WRID: recvID, SGL: []verbs.SGE{mr.SGE(0, *size)}})
	}
	for range *rxDepth {
		if err := post(); err != nil {
			return err
		}
	}
	send := func() error {
		return q.PostSend(verbs.SendWR{WRID: sendID, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled,
			SGL: []verbs.SGE{mr.SGE(0, *size)}})
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	start := time.Now()
	pending := recvID
	if !*serve {
		if err := send(); err != nil {
			return err
		}
		pending |= sendID
	}
	rcnt, scnt := 0, 0
	wc := make([]verbs.WC, 16)
	for rcnt < *iters || scnt < *iters {
		n, err := wait(ctx, cq, wc)
		if err != nil {
			return fmt.Errorf("after %d sends and %d receives: %w", scnt, rcnt, err)
		}
		for _, c := range wc[:n] {
			if c.Status != verbs.WCSuccess {
				return fmt.Errorf("completion of wr %d: %v", c.WRID, c.Status)
			}
			switch c.WRID {
			case sendID:
				scnt++
			case recvID:
				if c.ByteLen != uint32(*size) {
					return fmt.Errorf("message %d: %d bytes, want %d", rcnt, c.ByteLen, *size)
				}
				rcnt++
				if err := post(); err != nil {
					return err
				}
			default:
				return fmt.Errorf("unexpected wr_id %d", c.WRID)
			}
			pending &^= int(c.WRID)
			if scnt < *iters && pending == 0 {
				if err := send(); err != nil {
					return err
				}
				pending = recvID | sendID
			}
		}
	}
	elapsed := time.Since(start)
	bytes := int64(*size) * int64(*iters) * 2
	fmt.Printf("%d bytes in %.2f seconds = %.2f Mbit/sec\n", bytes, elapsed.Seconds(), float64(bytes)*8/elapsed.Seconds()/1e6)
	fmt.Printf("%d iters in %.2f seconds = %.2f usec/iter\n", *iters, elapsed.Seconds(), float64(elapsed.Microseconds())/float64(*iters))
	return nil
}

// connectRemote is pp_connect_ctx: INIT, RTR towards the peer (its QPN,
// PSN and GID, hop limit 1), RTS with our PSN.
func connectRemote(q *verbs.QP, peer, me dest, mtu verbs.MTU) error {
	if err := q.Modify(&verbs.QPAttr{QPState: verbs.StateInit, PKeyIndex: 0, PortNum: 1, QPAccessFlags: 0},
		verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags); err != nil {
		return err
	}
	rtr := verbs.QPAttr{QPState: verbs.StateRTR, PathMTU: mtu, DestQPNum: peer.qpn, RQPSN: verbs.PSN(peer.psn),
		MaxDestRdAtomic: 1, MinRNRTimer: 12}
	rtr.AH.DGID, rtr.AH.HopLimit = peer.gid, 1
	if err := q.Modify(&rtr, verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|
		verbs.QPAttrRQPSN|verbs.QPAttrMaxDestRdAtomic|verbs.QPAttrMinRNRTimer); err != nil {
		return err
	}
	rts := verbs.QPAttr{QPState: verbs.StateRTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7, SQPSN: verbs.PSN(me.psn), MaxRdAtomic: 1}
	return q.Modify(&rts, verbs.QPAttrState|verbs.QPAttrTimeout|verbs.QPAttrRetryCnt|verbs.QPAttrRNRRetry|
		verbs.QPAttrSQPSN|verbs.QPAttrMaxQPRdAtomic)
}
