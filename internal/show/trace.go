package show

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"rdmafs/qp"
	"rdmafs/roce"
)

// rdmafs trace: one QP's packets as they happen, decoded one a line, from
// MOUNT/capture (the device's pcap stream, loopback packets included), and
// a summary when it ends (Ctrl-C, --count, or the device going away).
//
// Which packets are the QP's: one it received names it as the destination
// QP and goes to the port's address; one it sent comes from the port's
// address and from the QP's UDP source port (rxe's per-QP port,
// roce.QPSourcePort), and names the QP's peer as the destination (RC, UC)
// or the QP as the source in its DETH (UD).

// RawFile reads a file with plain read(2) calls, and Close closes it at
// once: an os.File's Close waits for a read blocked in the daemon (the
// capture blocks until a packet comes), which Ctrl-C must not. A read
// after Close is EOF (the command exits right after anyway).
type RawFile struct {
	fd     int
	closed atomic.Bool
}

func OpenRaw(path string) (*RawFile, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return &RawFile{fd: fd}, nil
}

func (f *RawFile) Read(p []byte) (int, error) {
	for !f.closed.Load() {
		n, err := unix.Read(f.fd, p)
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return 0, err
		case n == 0 && len(p) > 0:
			return 0, io.EOF
		}
		return n, nil
	}
	return 0, io.EOF
}

func (f *RawFile) Close() error {
	if f.closed.Swap(true) {
		return nil
	}
	return unix.Close(f.fd)
}

// Tracer follows one QP in a capture.
type Tracer struct {
	mnt   string
	qpn   uint32
	addr  netip.Addr // the port's address (its GID)
	typ   string     // rc, uc, ud; "" when attr is unknown
	peer  uint32     // RC, UC: dest_qp_num
	mtu   int        // path MTU, for READ lengths in PSNs
	known bool       // attr was read
	// lastAttr is when attr was last read (to follow a new peer after a
	// reset, at most once a second).
	lastAttr time.Time
	now      func() time.Time

	start       time.Time
	drops0      uint64 // capture_drops at the start
	out, in     dirStats
	self        int // packets of a QP connected to itself (counted both ways)
	nakSent     map[string]int
	nakRecv     map[string]int
	nakSentKeys []string
	nakRecvKeys []string
}

// dirStats counts one direction.
type dirStats struct {
	packets, bytes, retransmits int
	maxPSN                      qp.PSN // highest request PSN seen
	seen                        bool
}

func NewTracer(mnt string, qpn uint32) (*Tracer, error) {
	t := &Tracer{mnt: mnt, qpn: qpn, now: time.Now, nakSent: map[string]int{}, nakRecv: map[string]int{}}
	port, err := os.ReadFile(filepath.Join(mnt, "port"))
	if err != nil {
		return nil, err
	}
	p, err := qp.ParsePortAttr(string(port))
	if err != nil {
		return nil, fmt.Errorf("%s/port: %w", mnt, err)
	}
	t.addr = netip.AddrFrom16(p.GID).Unmap()
	switch err := t.readAttr(); {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("qp %d does not exist on %s", qpn, mnt)
	case errors.Is(err, fs.ErrPermission):
		return nil, fmt.Errorf("qp %d belongs to another user: its packets are not in your capture", qpn)
	case err != nil:
		return nil, err
	}
	if c, err := os.ReadFile(filepath.Join(mnt, "counters")); err == nil {
		t.drops0 = parseKV(c).u64("capture_drops")
	}
	return t, nil
}

func (t *Tracer) readAttr() error {
	t.lastAttr = t.now()
	b, err := os.ReadFile(filepath.Join(t.mnt, "qp", strconv.FormatUint(uint64(t.qpn), 10), "attr"))
	if err != nil {
		return err
	}
	f, _, err := qp.ParseAttrFile(string(b))
	if err != nil {
		return fmt.Errorf("qp %d's attr: %w", t.qpn, err)
	}
	t.typ, t.peer, t.known = f.Type.String(), f.Attr.DestQPNum, true
	t.mtu = 0
	if f.Attr.PathMTU.Valid() {
		t.mtu = f.Attr.PathMTU.Bytes()
	}
	return nil
}

func (t *Tracer) Describe() string {
	s := fmt.Sprintf("qp %d (%s", t.qpn, strings.ToUpper(t.typ))
	if t.typ != "ud" && t.peer != 0 {
		s += fmt.Sprintf(", peer qp %d", t.peer)
	}
	return s + ")"
}

// run reads the pcap stream r until ctx ends, max packets of the QP were
// shown (0: no limit) or the stream ends; then it prints the summary.
func (t *Tracer) Run(ctx context.Context, r io.Reader, w io.Writer, max int) error {
	t.start = t.now()
	// The reader sends the records, then closes recs with readErr set.
	recs := make(chan roce.PcapRecord, 256)
	var readErr error
	done := make(chan struct{})
	defer close(done)
	go func() {
		defer close(recs)
		pr, err := roce.NewPcapReader(bufio.NewReaderSize(r, 256<<10))
		if err != nil {
			readErr = err
			return
		}
		for {
			rec, err := pr.Next()
			if err != nil {
				readErr = err
				return
			}
			select {
			case recs <- rec:
			case <-done:
				return
			}
		}
	}()
	bw := bufio.NewWriter(w)
	defer bw.Flush()
	shown := 0
	var end error
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case rec, ok := <-recs:
			if !ok {
				if !errors.Is(readErr, io.EOF) {
					end = readErr
				}
				break loop
			}
			line, ok := t.packet(rec)
			if !ok {
				continue
			}
			bw.WriteString(line)
			bw.WriteByte('\n')
			if len(recs) == 0 {
				bw.Flush() // as they happen
			}
			if shown++; max > 0 && shown >= max {
				break loop
			}
		}
	}
	t.summary(bw)
	return end
}

// datagram is a captured RoCEv2 datagram's addressing and IB part.
type datagram struct {
	src, dst netip.Addr
	sport    uint16
	ib       []byte // BTH through pad
	icrcOK   bool
}

// splitDatagram takes an IPv4 or IPv6 RoCEv2 datagram apart.
func splitDatagram(b []byte) (datagram, bool) {
	if len(b) == 0 {
		return datagram{}, false
	}
	switch b[0] >> 4 {
	case 4:
		var d roce.Datagram
		if roce.ParseIPv4(b, &d) != nil {
			return datagram{}, false
		}
		return datagram{src: d.Src(), dst: d.Dst(), sport: d.SrcPort(), ib: d.IB, icrcOK: roce.CheckIPv4(b) == nil}, true
	case 6:
		const hdr = 40 + 8
		if len(b) < hdr+roce.BTHLen+roce.ICRCLen || b[6] != 17 {
			return datagram{}, false
		}
		end := 40 + int(binary.BigEndian.Uint16(b[4:6]))
		if end > len(b) || end < hdr+roce.BTHLen+roce.ICRCLen || binary.BigEndian.Uint16(b[42:44]) != roce.UDPPort {
			return datagram{}, false
		}
		return datagram{src: netip.AddrFrom16([16]byte(b[8:24])), dst: netip.AddrFrom16([16]byte(b[24:40])),
			sport: binary.BigEndian.Uint16(b[40:42]), ib: b[hdr : end-roce.ICRCLen], icrcOK: roce.CheckIPv6(b[:end]) == nil}, true
	}
	return datagram{}, false
}

// isRequest reports whether op is a requester's packet (not a response).
func isRequest(op roce.Opcode) bool {
	switch op.Op() {
	case roce.OpReadResponseFirst, roce.OpReadResponseMiddle, roce.OpReadResponseLast, roce.OpReadResponseOnly,
		roce.OpAcknowledge, roce.OpAtomicAcknowledge:
		return false
	}
	return true
}

// packet decodes one record: the line to print and whether it is the
// QP's.
func (t *Tracer) packet(rec roce.PcapRecord) (string, bool) {
	ip, ok := rec.IP()
	if !ok {
		return "", false
	}
	d, ok := splitDatagram(ip)
	if !ok {
		return "", false
	}
	var p roce.Packet
	if roce.ParseIB(d.ib, &p) != nil {
		return "", false
	}
	hdrs, _ := p.Opcode.Headers()
	in := p.DestQP == t.qpn && d.dst.Unmap() == t.addr
	out := d.src.Unmap() == t.addr && d.sport == roce.QPSourcePort(t.qpn) && t.sentBy(&p, hdrs)
	if !in && !out {
		return "", false
	}
	dir, st, nak := "in", &t.in, t.nakRecv
	keys := &t.nakRecvKeys
	switch {
	case in && out:
		dir = "self"
		t.self++
		fallthrough
	case out:
		if dir != "self" {
			dir = "out"
		}
		st, nak, keys = &t.out, t.nakSent, &t.nakSentKeys
	}
	st.packets++
	st.bytes += len(p.Payload)
	if in && out {
		t.in.packets++
	}

	var b strings.Builder
	fmt.Fprintf(&b, "%s %-4s %-28s psn %-8d len %-5d", rec.Time.Format("15:04:05.000000"), dir, p.Opcode, p.PSN, len(p.Payload))
	psn := qp.PSN(p.PSN)
	if p.Opcode.Transport() == roce.TransportRC && isRequest(p.Opcode) {
		last := psn
		if p.Opcode.Op() == roce.OpReadRequest && t.mtu > 0 && p.DMALen > 0 {
			last = psn.Add(uint32((int(p.DMALen)+t.mtu-1)/t.mtu) - 1)
		}
		if st.seen && !st.maxPSN.Before(psn) {
			st.retransmits++
			b.WriteString(" RETRANSMIT")
		} else {
			st.maxPSN, st.seen = last, true
		}
		if st.maxPSN.Before(last) {
			st.maxPSN = last
		}
	}
	if hdrs&roce.HdrDETH != 0 {
		fmt.Fprintf(&b, " qkey 0x%x src_qp %d", p.QKey, p.SrcQP)
		if out {
			fmt.Fprintf(&b, " dest_qp %d", p.DestQP)
		}
	}
	if hdrs&roce.HdrRETH != 0 {
		fmt.Fprintf(&b, " va 0x%x rkey 0x%x dmalen %d", p.VA, p.RKey, p.DMALen)
	}
	if hdrs&roce.HdrAtomicETH != 0 {
		fmt.Fprintf(&b, " va 0x%x rkey 0x%x", p.VA, p.RKey)
		if p.Opcode.Op() == roce.OpCompareSwap {
			fmt.Fprintf(&b, " compare 0x%x swap 0x%x", p.Compare, p.SwapAdd)
		} else {
			fmt.Fprintf(&b, " add 0x%x", p.SwapAdd)
		}
	}
	if hdrs&roce.HdrAETH != 0 {
		fmt.Fprintf(&b, " msn %d %s", p.MSN, syndromeText(p.Syndrome))
		if k := nakKind(p.Syndrome); k != "" {
			if nak[k] == 0 {
				*keys = append(*keys, k)
			}
			nak[k]++
		}
	}
	if hdrs&roce.HdrAtomicAckETH != 0 {
		fmt.Fprintf(&b, " orig 0x%x", p.OrigData)
	}
	if hdrs&roce.HdrImmDt != 0 {
		fmt.Fprintf(&b, " imm 0x%x", p.Imm)
	}
	if hdrs&roce.HdrIETH != 0 {
		fmt.Fprintf(&b, " inv_rkey 0x%x", p.InvRKey)
	}
	if hdrs&roce.HdrFETH != 0 {
		fmt.Fprintf(&b, " flush_type %d level %d", p.FlushType, p.FlushLevel)
	}
	if p.AckReq {
		b.WriteString(" ackreq")
	}
	if p.SE {
		b.WriteString(" se")
	}
	if !d.icrcOK {
		b.WriteString(" BAD-ICRC")
	}
	return strings.TrimRight(b.String(), " "), true
}

// sentBy reports whether p, from the QP's address and port, is the QP's:
// to its peer (RC, UC), from it in the DETH (UD). When the peer does not
// match, attr is read again (at most once a second): the QP may have been
// reset and connected to another.
func (t *Tracer) sentBy(p *roce.Packet, hdrs roce.Headers) bool {
	if hdrs&roce.HdrDETH != 0 {
		return p.SrcQP == t.qpn
	}
	if !t.known || p.DestQP == t.peer {
		return true
	}
	if t.now().Sub(t.lastAttr) >= time.Second {
		t.readAttr()
	}
	return p.DestQP == t.peer
}

// nakKind names the NAK an AETH syndrome is, or "" for an ACK.
func nakKind(s uint8) string {
	switch s & qp.AETHTypeMask {
	case qp.AETHAck:
		return ""
	case qp.AETHRNRNak:
		return "rnr"
	}
	switch s {
	case qp.AETHNakPSNSeq:
		return "psn_seq_err"
	case qp.AETHNakInvReq:
		return "inv_req"
	case qp.AETHNakRemAccess:
		return "rem_access_err"
	case qp.AETHNakRemOp:
		return "rem_op_err"
	case 0x64:
		return "inv_rd_req"
	}
	return fmt.Sprintf("syndrome_0x%02x", s)
}

// syndromeText explains an AETH syndrome: ACK with its credits, RNR NAK
// with its timer, NAK with its reason.
func syndromeText(s uint8) string {
	code := s & qp.AETHValueMask
	switch s & qp.AETHTypeMask {
	case qp.AETHAck:
		if c := qp.CreditCount(code); c == qp.CreditUnlimited {
			return "ACK credits unlimited"
		} else {
			return fmt.Sprintf("ACK credits %d", c)
		}
	case qp.AETHRNRNak:
		return fmt.Sprintf("RNR-NAK timer %d (%v)", code, qp.RNRDelay(code))
	}
	return "NAK " + nakKind(s)
}

// summary prints what the trace saw.
func (t *Tracer) summary(w io.Writer) {
	fmt.Fprintf(w, "--- qp %d: %.1f s ---\n", t.qpn, t.now().Sub(t.start).Seconds())
	for _, d := range []struct {
		name string
		s    *dirStats
	}{{"out", &t.out}, {"in", &t.in}} {
		fmt.Fprintf(w, "%-4s %d packets, %d payload bytes, %d retransmitted\n", d.name+":", d.s.packets, d.s.bytes, d.s.retransmits)
	}
	naks := func(name string, m map[string]int, keys []string) {
		n := 0
		var parts []string
		for _, k := range keys {
			n += m[k]
			parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
		}
		if n == 0 {
			fmt.Fprintf(w, "NAKs %s: 0\n", name)
			return
		}
		fmt.Fprintf(w, "NAKs %s: %d (%s)\n", name, n, strings.Join(parts, ", "))
	}
	naks("sent", t.nakSent, t.nakSentKeys)
	naks("received", t.nakRecv, t.nakRecvKeys)
	if t.self > 0 {
		fmt.Fprintf(w, "%d packets to itself (counted both ways)\n", t.self)
	}
	if c, err := os.ReadFile(filepath.Join(t.mnt, "counters")); err == nil {
		if d := parseKV(c).u64("capture_drops") - t.drops0; d > 0 && d < 1<<63 {
			fmt.Fprintf(w, "the device dropped %d captured packets meanwhile (a slow capture reader, maybe this one): some may be missing\n", d)
		}
	}
}
