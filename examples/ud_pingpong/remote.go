package main

// Remote mode: ud_pingpong against another host's ibv_ud_pingpong over
// RoCEv2, with rdma-core's out-of-band exchange (examples/internal/oob).
// As ibv_ud_pingpong: Q_Key 0x11111111, an address handle for the peer's
// GID (hop limit 1), receive buffers of size+40 (the GRH comes first), the
// client sends first, and a side sends its next datagram once its previous
// send completed and a datagram arrived. Sizes are checked, contents not.

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
	serve     = flag.Bool("server", false, "remote mode: wait for an ibv_ud_pingpong client on -port")
	connectTo = flag.String("connect", "", "remote mode: connect to an ibv_ud_pingpong server on this host")
	tcpPort   = flag.Int("port", 18515, "remote mode: TCP port of the out-of-band exchange")
	rxDepth   = flag.Int("rx-depth", 500, "remote mode: receives kept posted")
)

func runRemote() error {
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
	cq, err := dev.CreateCQ(*rxDepth + 1)
	if err != nil {
		return err
	}
	mr, err := pd.RegMR(*size+grhSize, verbs.AccessLocalWrite)
	if err != nil {
		return err
	}
	q, err := pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeUD, SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: uint32(*rxDepth), MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return err
	}
	var rnd [4]byte
	rand.Read(rnd[:])
	me := oob.Dest{QPN: q.QPN, PSN: binary.LittleEndian.Uint32(rnd[:]) & 0xFFFFFF, GID: port.GID}
	if err := q.Modify(&verbs.QPAttr{QPState: verbs.StateInit, PortNum: 1, QKey: uint32(*qkey)},
		verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrQKey); err != nil {
		return err
	}
	if err := q.Modify(&verbs.QPAttr{QPState: verbs.StateRTR}, verbs.QPAttrState); err != nil {
		return err
	}
	if err := q.Modify(&verbs.QPAttr{QPState: verbs.StateRTS, SQPSN: verbs.PSN(me.PSN)}, verbs.QPAttrState|verbs.QPAttrSQPSN); err != nil {
		return err
	}
	var ah *verbs.AH
	ready := func(peer oob.Dest) (err error) {
		ah, err = pd.CreateAH(verbs.AHAttr{DGID: peer.GID, HopLimit: 1, PortNum: 1})
		return err
	}
	// Receives go up before the exchange, as in the tools: the peer may
	// send as soon as it has our address.
	post := func() error {
		return q.PostRecv(verbs.RecvWR{WRID: oob.RecvID, SGL: []verbs.SGE{mr.SGE(0, *size+grhSize)}})
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
			SGL: []verbs.SGE{mr.SGE(grhSize, *size)}, AH: ah.Handle, RemoteQPN: peer.QPN, RemoteQKey: uint32(*qkey)})
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	return oob.Loop(ctx, cq, *iters, *size, uint32(*size+grhSize), !*serve, post, send)
}
