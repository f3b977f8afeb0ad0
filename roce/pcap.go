package roce

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"iter"
	"time"
)

// Link types of the classic pcap format that this package writes and
// decodes.
const (
	LinkTypeEthernet = 1   // Ethernet II frames
	LinkTypeRaw      = 101 // bare IPv4 or IPv6 packets
	LinkTypeLinuxSLL = 113 // Linux "cooked" capture (tcpdump -i any)
)

const (
	pcapMagicMicro = 0xA1B2C3D4
	pcapMagicNano  = 0xA1B23C4D
	pcapSnapLen    = 262144 // also the largest record ReadPcap accepts
	etherTypeIPv4  = 0x0800
	etherTypeIPv6  = 0x86DD
	etherTypeVLAN  = 0x8100
)

// ErrPcap reports a malformed pcap file.
var ErrPcap = errors.New("roce: malformed pcap")

// PcapWriter writes a classic (libpcap 2.4, microsecond) capture file. It
// makes two writes per packet, so give it a buffered writer.
type PcapWriter struct {
	w   io.Writer
	hdr [16]byte
}

// NewPcapWriter writes the file header for linkType (LinkTypeRaw or
// LinkTypeEthernet, typically) and returns the writer.
func NewPcapWriter(w io.Writer, linkType uint32) (*PcapWriter, error) {
	var h [24]byte
	binary.LittleEndian.PutUint32(h[0:4], pcapMagicMicro)
	binary.LittleEndian.PutUint16(h[4:6], 2)
	binary.LittleEndian.PutUint16(h[6:8], 4)
	binary.LittleEndian.PutUint32(h[16:20], pcapSnapLen)
	binary.LittleEndian.PutUint32(h[20:24], linkType)
	if _, err := w.Write(h[:]); err != nil {
		return nil, err
	}
	return &PcapWriter{w: w}, nil
}

// WritePacket writes one record: data (a frame of the file's link type, in
// full) captured at ts.
func (pw *PcapWriter) WritePacket(ts time.Time, data []byte) error {
	if len(data) > pcapSnapLen {
		return fmt.Errorf("%w: %d-byte packet exceeds the snap length", ErrPcap, len(data))
	}
	us := ts.UnixMicro()
	binary.LittleEndian.PutUint32(pw.hdr[0:4], uint32(us/1e6))
	binary.LittleEndian.PutUint32(pw.hdr[4:8], uint32(us%1e6))
	binary.LittleEndian.PutUint32(pw.hdr[8:12], uint32(len(data)))
	binary.LittleEndian.PutUint32(pw.hdr[12:16], uint32(len(data)))
	if _, err := pw.w.Write(pw.hdr[:]); err != nil {
		return err
	}
	_, err := pw.w.Write(data)
	return err
}

// AppendEthernet appends an Ethernet II header to b, for writing IP
// packets into a LinkTypeEthernet file.
func AppendEthernet(b []byte, dst, src [6]byte, etherType uint16) []byte {
	b = append(b, dst[:]...)
	b = append(b, src[:]...)
	return binary.BigEndian.AppendUint16(b, etherType)
}

// PcapRecord is one captured packet.
type PcapRecord struct {
	Time     time.Time
	OrigLen  int    // length on the wire; len(Data) if not truncated
	LinkType uint32 // the file's link type
	Data     []byte // the captured bytes, owned by the record
}

// IP returns the IP packet (IPv4 or IPv6) inside the record, stripping the
// Ethernet (with at most one VLAN tag) or Linux SLL header. ok is false for
// other link types, other protocols or a truncated link header. It may
// return trailing link padding after the IP packet's own length.
func (r *PcapRecord) IP() (pkt []byte, ok bool) {
	d := r.Data
	var et uint16
	switch r.LinkType {
	case LinkTypeRaw:
		if len(d) == 0 {
			return nil, false
		}
		switch d[0] >> 4 {
		case 4, 6:
			return d, true
		}
		return nil, false
	case LinkTypeEthernet:
		if len(d) < 14 {
			return nil, false
		}
		et, d = binary.BigEndian.Uint16(d[12:14]), d[14:]
		if et == etherTypeVLAN {
			if len(d) < 4 {
				return nil, false
			}
			et, d = binary.BigEndian.Uint16(d[2:4]), d[4:]
		}
	case LinkTypeLinuxSLL:
		if len(d) < 16 {
			return nil, false
		}
		et, d = binary.BigEndian.Uint16(d[14:16]), d[16:]
	default:
		return nil, false
	}
	if et != etherTypeIPv4 && et != etherTypeIPv6 {
		return nil, false
	}
	return d, true
}

// PcapReader reads a classic pcap file (either byte order, microsecond or
// nanosecond timestamps).
type PcapReader struct {
	LinkType uint32

	r     io.Reader
	order binary.ByteOrder
	nano  bool
}

// NewPcapReader reads the file header from r.
func NewPcapReader(r io.Reader) (*PcapReader, error) {
	var h [24]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return nil, fmt.Errorf("%w: file header: %v", ErrPcap, err)
	}
	pr := &PcapReader{r: r}
	for _, o := range []binary.ByteOrder{binary.LittleEndian, binary.BigEndian} {
		switch o.Uint32(h[0:4]) {
		case pcapMagicMicro:
			pr.order = o
		case pcapMagicNano:
			pr.order, pr.nano = o, true
		}
		if pr.order != nil {
			break
		}
	}
	if pr.order == nil {
		return nil, fmt.Errorf("%w: magic %#x is not classic pcap (pcapng? convert with tshark -F pcap)", ErrPcap, h[0:4])
	}
	pr.LinkType = pr.order.Uint32(h[20:24]) & 0x0FFFFFFF // upper bits: FCS info
	return pr, nil
}

// Next returns the next record, io.EOF after the last one, or an error
// wrapping ErrPcap for a truncated or malformed record.
func (pr *PcapReader) Next() (PcapRecord, error) {
	var h [16]byte
	if n, err := io.ReadFull(pr.r, h[:]); err != nil {
		if n == 0 && err == io.EOF {
			return PcapRecord{}, io.EOF
		}
		return PcapRecord{}, fmt.Errorf("%w: record header: %v", ErrPcap, err)
	}
	sec, frac := pr.order.Uint32(h[0:4]), pr.order.Uint32(h[4:8])
	incl, orig := pr.order.Uint32(h[8:12]), pr.order.Uint32(h[12:16])
	if incl > pcapSnapLen {
		return PcapRecord{}, fmt.Errorf("%w: %d-byte record", ErrPcap, incl)
	}
	data := make([]byte, incl)
	if _, err := io.ReadFull(pr.r, data); err != nil {
		return PcapRecord{}, fmt.Errorf("%w: record data: %v", ErrPcap, err)
	}
	ns := int64(frac)
	if !pr.nano {
		ns *= 1000
	}
	return PcapRecord{
		Time:     time.Unix(int64(sec), ns),
		OrigLen:  int(orig),
		LinkType: pr.LinkType,
		Data:     data,
	}, nil
}

// All iterates over the remaining records. It stops after the first error,
// which it yields; io.EOF ends it silently.
func (pr *PcapReader) All() iter.Seq2[PcapRecord, error] {
	return func(yield func(PcapRecord, error) bool) {
		for {
			rec, err := pr.Next()
			if err == io.EOF {
				return
			}
			if !yield(rec, err) || err != nil {
				return
			}
		}
	}
}

// ReadPcap iterates over the records of the classic pcap file r. A bad file
// header is yielded as the only (error) element.
func ReadPcap(r io.Reader) iter.Seq2[PcapRecord, error] {
	return func(yield func(PcapRecord, error) bool) {
		pr, err := NewPcapReader(r)
		if err != nil {
			yield(PcapRecord{}, err)
			return
		}
		pr.All()(yield)
	}
}
