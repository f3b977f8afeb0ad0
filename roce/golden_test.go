package roce

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"testing"
)

// The captures in testdata/ come from the rxe-peer interop runs
// (shared/interop/rxe-peer/pcaps): Linux 6.1 Soft-RoCE talking to itself
// and to the Python peer rc-peer.py, captured by tshark on the bridge.

// roceDatagram is one UDP/4791 IPv4 datagram of a capture.
type roceDatagram struct {
	frame int    // 1-based frame number, as tshark counts
	ip    []byte // the IPv4 datagram, trimmed to its total length
}

// readRoCE returns the RoCEv2 datagrams of a capture and the number of
// frames in it.
func readRoCE(t testing.TB, name string) ([]roceDatagram, int) {
	t.Helper()
	f, err := os.Open("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []roceDatagram
	n := 0
	for rec, err := range ReadPcap(f) {
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		n++
		if rec.OrigLen != len(rec.Data) {
			t.Fatalf("%s #%d: truncated capture (%d of %d bytes)", name, n, len(rec.Data), rec.OrigLen)
		}
		ip, ok := rec.IP()
		if !ok || len(ip) < 28 || ip[0]>>4 != 4 || ip[9] != 17 || binary.BigEndian.Uint16(ip[22:24]) != UDPPort {
			continue
		}
		out = append(out, roceDatagram{n, ip[:binary.BigEndian.Uint16(ip[2:4])]})
	}
	return out, n
}

type goldenWant struct {
	frames, roce int
	retrans      int // request packets sent again (PSN not past the highest)
	ops          map[Opcode]int
	srcs         map[string]int // packets per IPv4 source
}

var goldenFiles = map[string]goldenWant{
	"rc-pingpong-guest-vs-python-20x4096.pcap": {
		frames: 213, roce: 200,
		ops:  map[Opcode]int{RCSendFirst: 40, RCSendMiddle: 80, RCSendLast: 40, RCAcknowledge: 40},
		srcs: map[string]int{"10.77.0.1": 100, "10.77.0.2": 100},
	},
	"rc-pingpong-rxe-vs-rxe-20x4096.pcap": {
		frames: 220, roce: 208, retrans: 4,
		ops:  map[Opcode]int{RCSendFirst: 41, RCSendMiddle: 82, RCSendLast: 41, RCAcknowledge: 44},
		srcs: map[string]int{"10.77.0.2": 104, "10.77.0.3": 104},
	},
	"ud-pingpong-rxe-vs-rxe-first60.pcap": {
		frames: 60, roce: 49,
		ops:  map[Opcode]int{UDSendOnly: 49},
		srcs: map[string]int{"10.77.0.2": 24, "10.77.0.3": 25},
	},
}

// TestGoldenCaptures decodes every RoCEv2 packet of the captures: the ICRC
// verifies, the IB part parses and re-marshals to the same bytes, and
// BuildIPv4 rebuilds the whole datagram (all senders use DF, no options;
// rxe's UDP checksum is 0, the Python peer's is an unfinished offload sum,
// which is the one difference allowed).
func TestGoldenCaptures(t *testing.T) {
	for name, want := range goldenFiles {
		t.Run(name, func(t *testing.T) {
			dgs, frames := readRoCE(t, name)
			if frames != want.frames || len(dgs) != want.roce {
				t.Fatalf("%d frames, %d RoCEv2; want %d, %d", frames, len(dgs), want.frames, want.roce)
			}
			ops := map[Opcode]int{}
			srcs := map[string]int{}
			// RC consistency per direction: request PSNs go up by one
			// (or back, for a retransmission); every ACK names the PSN of
			// a SEND_LAST the peer sent and its MSN never decreases.
			lastReq := map[netip.Addr]uint32{}
			lastMSN := map[netip.Addr]uint32{}
			lastPSNs := map[netip.Addr]map[uint32]bool{}
			retrans := 0
			for _, dg := range dgs {
				where := fmt.Sprintf("frame %d", dg.frame)
				if err := CheckIPv4(dg.ip); err != nil {
					t.Fatalf("%s: CheckIPv4: %v", where, err)
				}
				var d Datagram
				if err := ParseIPv4(dg.ip, &d); err != nil {
					t.Fatalf("%s: ParseIPv4: %v", where, err)
				}
				var p Packet
				if err := ParseIB(d.IB, &p); err != nil {
					t.Fatalf("%s: ParseIB: %v", where, err)
				}
				ops[p.Opcode]++
				srcs[d.Src().String()]++
				checkGoldenPacket(t, where, &p, len(d.IB))
				src, dst := d.Src(), d.Dst()
				switch p.Opcode {
				case RCSendFirst, RCSendMiddle, RCSendLast:
					prev, ok := lastReq[src]
					switch diff := int32((p.PSN - prev) << 8); {
					case !ok || diff == 1<<8:
						lastReq[src] = p.PSN
					case diff > 0:
						t.Errorf("%s: request PSN %#x jumps from %#x", where, p.PSN, prev)
					default:
						retrans++
					}
					if p.Opcode == RCSendLast {
						if lastPSNs[src] == nil {
							lastPSNs[src] = map[uint32]bool{}
						}
						lastPSNs[src][p.PSN] = true
					}
				case RCAcknowledge:
					if !lastPSNs[dst][p.PSN] || p.MSN < lastMSN[src] {
						t.Errorf("%s: ACK PSN %#x MSN %d matches no SEND_LAST of %v (last MSN %d)", where, p.PSN, p.MSN, dst, lastMSN[src])
					}
					lastMSN[src] = p.MSN
				}

				ib, err := p.AppendIB(nil)
				if err != nil {
					t.Fatalf("%s: AppendIB: %v", where, err)
				}
				if !bytes.Equal(ib, d.IB) {
					t.Fatalf("%s: re-marshalled IB part differs\n got %x\nwant %x", where, head(ib), head(d.IB))
				}
				h := make([]byte, MaxHeaderLen)
				n, err := p.MarshalBTHAndExt(h)
				if hl, _ := HeaderLen(p.Opcode); err != nil || n != hl || !bytes.Equal(h[:n], d.IB[:n]) {
					t.Fatalf("%s: MarshalBTHAndExt = %d, %v: %x", where, n, err, h[:n])
				}

				ip := d.IP
				full, err := BuildIPv4(d.Src(), d.Dst(), d.SrcPort(), ib,
					binary.BigEndian.Uint16(ip[4:6]), ip[1], ip[8])
				if err != nil {
					t.Fatalf("%s: BuildIPv4: %v", where, err)
				}
				wantFull := bytes.Clone(dg.ip)
				wantFull[26], wantFull[27] = 0, 0 // UDP checksum
				if !bytes.Equal(full, wantFull) {
					t.Fatalf("%s: BuildIPv4 differs\n got %x\nwant %x", where, head(full), head(wantFull))
				}
			}
			if retrans != want.retrans {
				t.Errorf("%d retransmitted requests, want %d", retrans, want.retrans)
			}
			if fmt.Sprint(ops) != fmt.Sprint(want.ops) {
				t.Errorf("opcodes %v, want %v", ops, want.ops)
			}
			if fmt.Sprint(srcs) != fmt.Sprint(want.srcs) {
				t.Errorf("sources %v, want %v", srcs, want.srcs)
			}
		})
	}
}

// checkGoldenPacket checks what every packet of the captures has in common:
// rxe's BTH (P_Key 0xFFFF, M=0, no FECN/BECN), AckReq on the last packet of
// an RC message (never on UD), 1024-byte path MTU segments of 4096-byte RC messages, rxe's
// unlimited-credit ACKs and ibv_ud_pingpong's Q_Key.
func checkGoldenPacket(t *testing.T, where string, p *Packet, ibLen int) {
	t.Helper()
	if p.PKey != 0xFFFF || p.MigReq || p.FECN || p.BECN || p.TVer != 0 {
		t.Errorf("%s: unexpected BTH %+v", where, *p)
	}
	if int(p.PadCnt) != padLen(len(p.Payload)) || p.IBLen() != ibLen {
		t.Errorf("%s: pad %d with %d-byte payload, IBLen %d of %d", where, p.PadCnt, len(p.Payload), p.IBLen(), ibLen)
	}
	switch p.Opcode {
	case RCSendFirst, RCSendMiddle, RCSendLast:
		if len(p.Payload) != 1024 {
			t.Errorf("%s: %v with %d bytes, want 1024", where, p.Opcode, len(p.Payload))
		}
		if p.AckReq != (p.Opcode == RCSendLast) {
			t.Errorf("%s: %v AckReq %v", where, p.Opcode, p.AckReq)
		}
	case RCAcknowledge:
		if p.Syndrome != 0x1F || p.MSN == 0 || p.MSN > 21 || len(p.Payload) != 0 {
			t.Errorf("%s: ACK syndrome %#x MSN %d payload %d", where, p.Syndrome, p.MSN, len(p.Payload))
		}
	case UDSendOnly:
		// rxe sets AckReq only on RC (VERBS.md §5.1), and both guests'
		// first QP is QPN 17.
		if p.QKey != 0x11111111 || p.SrcQP != 0x11 || p.DestQP != 0x11 || p.AckReq || len(p.Payload) != 1024 {
			t.Errorf("%s: UD QKey %#x SrcQP %#x DestQP %#x AckReq %v payload %d", where, p.QKey, p.SrcQP, p.DestQP, p.AckReq, len(p.Payload))
		}
	}
}

// TestGoldenCorruption flips each byte of one packet of every opcode in
// the captures. CheckIPv4 must reject every flip except in the two fields
// RoCEv2 leaves unprotected: the UDP checksum (masked by the ICRC; rxe
// sends 0) and BTH byte 4 (FECN/BECN, which switches may set).
func TestGoldenCorruption(t *testing.T) {
	for name := range goldenFiles {
		dgs, _ := readRoCE(t, name)
		done := map[byte]bool{}
		for _, dg := range dgs {
			ib := dg.ip[28:]
			if done[ib[0]] {
				continue
			}
			done[ib[0]] = true
			for i := range dg.ip {
				c := bytes.Clone(dg.ip)
				c[i] ^= 0x5A
				err := CheckIPv4(c)
				unprotected := i == 26 || i == 27 || i == 28+4
				if unprotected != (err == nil) {
					t.Errorf("%s frame %d byte %d flipped: CheckIPv4 = %v", name, dg.frame, i, err)
				}
			}
		}
	}
}

// TestGoldenGIDs: the captures' addresses map to the GIDs that the
// ibv_*_pingpong handshake exchanges (GID index 1 = ::ffff:10.77.0.x).
func TestGoldenGIDs(t *testing.T) {
	dgs, _ := readRoCE(t, "rc-pingpong-rxe-vs-rxe-20x4096.pcap")
	var d Datagram
	if err := ParseIPv4(dgs[0].ip, &d); err != nil {
		t.Fatal(err)
	}
	gid := GIDFromIPv4(d.Src())
	want := [16]byte{10: 0xFF, 11: 0xFF, 12: 10, 13: 77, 14: 0, 15: 3}
	if gid != want && gid != [16]byte{10: 0xFF, 11: 0xFF, 12: 10, 13: 77, 14: 0, 15: 2} {
		t.Fatalf("GID %x", gid)
	}
	if IPFromGID(gid) != d.Src() {
		t.Fatalf("IPFromGID(%x) = %v, want %v", gid, IPFromGID(gid), d.Src())
	}
}

// head shortens a packet for an error message.
func head(b []byte) []byte {
	if len(b) > 64 {
		return b[:64]
	}
	return b
}
