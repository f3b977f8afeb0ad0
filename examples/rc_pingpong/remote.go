package main

// Remote mode: rc_pingpong against another host's ibv_rc_pingpong (or this
// program on another rdmafs), over RoCEv2, with rdma-core's out-of-band
// exchange (examples/internal/oob). The ping-pong
// is ibv_rc_pingpong's: rx_depth receives posted, the client sends first,
// and a side sends its next message once its previous send completed and
// a message arrived. Contents are not checked (as without -c); sizes are.

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"flag"
	"fmt"

	"rdmafs/examples/internal/oob"
	"rdmafs/verbs"
)

var (
	serve     = flag.Bool("server", false, "remote mode: wait for an ibv_rc_pingpong client on -port")
	connectTo = flag.String("connect", "", "remote mode: connect to an ibv_rc_pingpong server on this host")
	tcpPort   = flag.Int("port", 18515, "remote mode: TCP port of the out-of-band exchange")
	mtuBytes  = flag.Int("mtu", 1024, "remote mode: path MTU in bytes")
	rxDepth   = flag.Int("rx-depth", 500, "remote mode: receives kept posted")
)

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
	me := oob.Dest{QPN: q.QPN, PSN: binary.LittleEndian.Uint32(rnd[:]) & 0xFFFFFF, GID: port.GID}
	ready := func(peer oob.Dest) error { return connectRemote(q, peer, me, mtu) }
	// INIT at once and the receives up before the exchange, as in the
	// tools (pp_init_ctx): the peer may send as soon as it has our address.
	if err := q.Modify(&verbs.QPAttr{QPState: verbs.StateInit, PKeyIndex: 0, PortNum: 1, QPAccessFlags: 0},
		verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags); err != nil {
		return err
	}
	post := func() error {
		return q.PostRecv(verbs.RecvWR{WRID: oob.RecvID, SGL: []verbs.SGE{mr.SGE(0, *size)}})
	}
	for range *rxDepth {
		if err := post(); err != nil {
			return err
		}
	}
	var peer oob.Dest
	if *serve {
		peer, err = oob.Serve(*tcpPort, me, *timeout, ready)
	} else {
		peer, err = oob.Connect(*connectTo, *tcpPort, me, *timeout, ready)
	}
	if err != nil {
		return err
	}
	fmt.Printf("  local address:  LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n", me.LID, me.QPN, me.PSN, verbs.FormatGID(me.GID))
	fmt.Printf("  remote address: LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n", peer.LID, peer.QPN, peer.PSN, verbs.FormatGID(peer.GID))

	send := func() error {
		return q.PostSend(verbs.SendWR{WRID: oob.SendID, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled,
			SGL: []verbs.SGE{mr.SGE(0, *size)}})
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	return oob.Loop(ctx, cq, *iters, *size, uint32(*size), !*serve, post, send)
}

// connectRemote is pp_connect_ctx: RTR towards the peer (its QPN, PSN and
// GID, hop limit 1), RTS with our PSN. The QP is in INIT already.
func connectRemote(q *verbs.QP, peer, me oob.Dest, mtu verbs.MTU) error {
	rtr := verbs.QPAttr{QPState: verbs.StateRTR, PathMTU: mtu, DestQPNum: peer.QPN, RQPSN: verbs.PSN(peer.PSN),
		MaxDestRdAtomic: 1, MinRNRTimer: 12}
	rtr.AH.DGID, rtr.AH.HopLimit = peer.GID, 1
	if err := q.Modify(&rtr, verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|
		verbs.QPAttrRQPSN|verbs.QPAttrMaxDestRdAtomic|verbs.QPAttrMinRNRTimer); err != nil {
		return err
	}
	rts := verbs.QPAttr{QPState: verbs.StateRTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7, SQPSN: verbs.PSN(me.PSN), MaxRdAtomic: 1}
	return q.Modify(&rts, verbs.QPAttrState|verbs.QPAttrTimeout|verbs.QPAttrRetryCnt|verbs.QPAttrRNRRetry|
		verbs.QPAttrSQPSN|verbs.QPAttrMaxQPRdAtomic)
}
