// Package oob is the out-of-band exchange of rdma-core's ibv_rc_pingpong
// and ibv_ud_pingpong, so the examples pair with the real tools on another
// host: a TCP connection (port 18515 by default) carrying, each way, the
// 52-byte string "LID:QPN:PSN:GID\0" ("%04x:%06x:%06x:" and the 16 GID bytes
// as 32 hex digits); the client sends its address first and "done\0" last;
// the server reads the client's address, gets ready (connect) and answers.
package oob

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// Dest is one side's address.
type Dest struct {
	LID      uint16
	QPN, PSN uint32
	GID      [16]byte
}

const destLen = len("0000:000000:000000:00000000000000000000000000000000") + 1

// Wire is the address as the tools send it.
func (d Dest) Wire() []byte {
	s := fmt.Sprintf("%04x:%06x:%06x:%s", d.LID, d.QPN, d.PSN, hex.EncodeToString(d.GID[:]))
	return append([]byte(s), 0)
}

// Parse reads a peer's address.
func Parse(b []byte) (Dest, error) {
	var d Dest
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
	d.LID, d.QPN, d.PSN = uint16(lid), uint32(qpn), uint32(psn)
	copy(d.GID[:], g)
	return d, nil
}

// Serve waits for one client on port, reads its address, calls ready with
// it (the server connects its QP there, as pp_server_exch_dest), sends me
// and waits for the client's "done".
func Serve(port int, me Dest, timeout time.Duration, ready func(peer Dest) error) (Dest, error) {
	ln, err := net.Listen("tcp", fmt.Sprintf(":%d", port))
	if err != nil {
		return Dest{}, err
	}
	fmt.Printf("waiting for a client on TCP %d\n", port)
	conn, err := ln.Accept()
	ln.Close()
	if err != nil {
		return Dest{}, err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(timeout))
	buf := make([]byte, destLen)
	if _, err := io.ReadFull(conn, buf); err != nil {
		return Dest{}, fmt.Errorf("reading the client's address: %w", err)
	}
	peer, err := Parse(buf)
	if err != nil {
		return peer, err
	}
	if err := ready(peer); err != nil {
		return peer, err
	}
	if _, err := conn.Write(me.Wire()); err != nil {
		return peer, err
	}
	done := make([]byte, len("done")+1)
	if _, err := io.ReadFull(conn, done); err != nil {
		return peer, fmt.Errorf("reading the client's done: %w", err)
	}
	return peer, nil
}

// Connect sends me to the server at host:port, reads its address, calls
// ready with it and sends "done".
func Connect(host string, port int, me Dest, timeout time.Duration, ready func(peer Dest) error) (Dest, error) {
	var conn net.Conn
	var err error
	deadline := time.Now().Add(timeout)
	for {
		// The server may not listen yet (the tools retry too).
		conn, err = net.DialTimeout("tcp", net.JoinHostPort(host, strconv.Itoa(port)), time.Second)
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		return Dest{}, err
	}
	defer conn.Close()
	conn.SetDeadline(deadline)
	if _, err := conn.Write(me.Wire()); err != nil {
		return Dest{}, err
	}
	buf := make([]byte, destLen)
	if _, err := io.ReadFull(conn, buf); err != nil {
		return Dest{}, fmt.Errorf("reading the server's address: %w", err)
	}
	peer, err := Parse(buf)
	if err != nil {
		return peer, err
	}
	if err := ready(peer); err != nil {
		return peer, err
	}
	_, err = conn.Write([]byte("done\x00"))
	return peer, err
}
