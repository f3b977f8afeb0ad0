package roce

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"testing"
	"time"
)

func TestPcapRoundTripRaw(t *testing.T) {
	var buf bytes.Buffer
	w, err := NewPcapWriter(&buf, LinkTypeRaw)
	if err != nil {
		t.Fatal(err)
	}
	ts := time.Date(2026, 11, 29, 19, 30, 0, 123456000, time.UTC)
	var want [][]byte
	for i := range 5 {
		d := testDatagram(t, bytes.Repeat([]byte{byte(i)}, i*3))
		want = append(want, d)
		if err := w.WritePacket(ts.Add(time.Duration(i)*time.Millisecond), d); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.WritePacket(ts, make([]byte, pcapSnapLen+1)); !errors.Is(err, ErrPcap) {
		t.Errorf("oversized packet: %v", err)
	}
	if binary.LittleEndian.Uint32(buf.Bytes()[0:4]) != pcapMagicMicro {
		t.Fatal("magic")
	}
	i := 0
	for rec, err := range ReadPcap(bytes.NewReader(buf.Bytes())) {
		if err != nil {
			t.Fatal(err)
		}
		if rec.LinkType != LinkTypeRaw || !rec.Time.Equal(ts.Add(time.Duration(i)*time.Millisecond)) ||
			rec.OrigLen != len(want[i]) || !bytes.Equal(rec.Data, want[i]) {
			t.Fatalf("record %d: %+v", i, rec)
		}
		ip, ok := rec.IP()
		if !ok || CheckIPv4(ip) != nil {
			t.Fatalf("record %d: IP %v", i, ok)
		}
		i++
	}
	if i != len(want) {
		t.Fatalf("%d records, want %d", i, len(want))
	}
}

// TestPcapRoundTripEthernet rewrites a golden capture through the writer
// and AppendEthernet: the result must equal the original byte for byte
// (apart from the file header fields the writer fixes).
func TestPcapRoundTripEthernet(t *testing.T) {
	orig, err := os.ReadFile("testdata/ud-pingpong-rxe-vs-rxe-first60.pcap")
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	w, err := NewPcapWriter(&buf, LinkTypeEthernet)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for rec, err := range ReadPcap(bytes.NewReader(orig)) {
		if err != nil {
			t.Fatal(err)
		}
		d := rec.Data
		if ip, ok := rec.IP(); ok && CheckIPv4(ip) == nil {
			d = AppendEthernet(nil, [6]byte(d[0:6]), [6]byte(d[6:12]), binary.BigEndian.Uint16(d[12:14]))
			d = append(d, ip...)
			n++
		}
		if err := w.WritePacket(rec.Time, d); err != nil {
			t.Fatal(err)
		}
	}
	if n != 49 {
		t.Errorf("%d RoCE frames", n)
	}
	got := buf.Bytes()
	if !bytes.Equal(got[24:], orig[24:]) {
		t.Fatal("records differ from the original capture")
	}
	if !bytes.Equal(got[:4], orig[:4]) || !bytes.Equal(got[20:24], orig[20:24]) {
		t.Errorf("file header %x, original %x", got[:24], orig[:24])
	}
}

// pcapFile builds a pcap file by hand: byte order, magic, link type and
// records of (seconds, fraction, data).
func pcapFile(order binary.AppendByteOrder, magic, link uint32, recs ...[]byte) []byte {
	b := order.AppendUint32(nil, magic)
	b = order.AppendUint16(b, 2)
	b = order.AppendUint16(b, 4)
	b = append(b, make([]byte, 8)...)
	b = order.AppendUint32(b, 65535)
	b = order.AppendUint32(b, link)
	for i, r := range recs {
		b = order.AppendUint32(b, 1000+uint32(i))
		b = order.AppendUint32(b, 999)
		b = order.AppendUint32(b, uint32(len(r)))
		b = order.AppendUint32(b, uint32(len(r)+7))
		b = append(b, r...)
	}
	return b
}

func TestPcapFormats(t *testing.T) {
	ip := testDatagram(t, []byte("xyz"))
	sll := append([]byte{0, 4, 0, 1, 0, 6, 1, 2, 3, 4, 5, 6, 0, 0, 0x08, 0x00}, ip...)
	eth := AppendEthernet(nil, [6]byte{1}, [6]byte{2}, 0x0800)
	vlan := append(AppendEthernet(nil, [6]byte{1}, [6]byte{2}, 0x8100), 0, 5, 0x08, 0x00)
	arp := AppendEthernet(nil, [6]byte{1}, [6]byte{2}, 0x0806)
	cases := []struct {
		name string
		file []byte
		nano bool
		ipOK []bool
	}{
		{"SLL big-endian", pcapFile(binary.BigEndian, pcapMagicMicro, LinkTypeLinuxSLL, sll, sll[:15]), false, []bool{true, false}},
		{"Ethernet nanoseconds", pcapFile(binary.LittleEndian, pcapMagicNano, LinkTypeEthernet|0x10000000, append(eth, ip...), append(vlan, ip...), append(arp, ip...), eth[:13]), true, []bool{true, true, false, false}},
		{"raw", pcapFile(binary.BigEndian, pcapMagicNano, LinkTypeRaw, ip, []byte{0x55}, nil), true, []bool{true, false, false}},
		{"unknown link type", pcapFile(binary.LittleEndian, pcapMagicMicro, 147, ip), false, []bool{false}},
	}
	for _, c := range cases {
		var got []bool
		for rec, err := range ReadPcap(bytes.NewReader(c.file)) {
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			frac := int64(999)
			if !c.nano {
				frac *= 1000
			}
			if rec.Time.UnixNano()%1e9 != frac || rec.OrigLen != len(rec.Data)+7 {
				t.Errorf("%s: time %v origlen %d", c.name, rec.Time, rec.OrigLen)
			}
			p, ok := rec.IP()
			got = append(got, ok)
			if ok && CheckIPv4(p) != nil {
				t.Errorf("%s: record %d: %v", c.name, len(got), CheckIPv4(p))
			}
		}
		if len(got) != len(c.ipOK) {
			t.Fatalf("%s: %d records", c.name, len(got))
		}
		for i := range got {
			if got[i] != c.ipOK[i] {
				t.Errorf("%s: record %d IP ok = %v", c.name, i, got[i])
			}
		}
	}
}

func TestPcapErrors(t *testing.T) {
	ip := testDatagram(t, nil)
	good := pcapFile(binary.LittleEndian, pcapMagicMicro, LinkTypeRaw, ip, ip)
	huge := pcapFile(binary.LittleEndian, pcapMagicMicro, LinkTypeRaw, ip)
	binary.LittleEndian.PutUint32(huge[24+8:], pcapSnapLen+1)
	cases := []struct {
		name string
		file []byte
		recs int // good records before the error
	}{
		{"empty", nil, 0},
		{"short header", good[:23], 0},
		{"pcapng", append([]byte{0x0A, 0x0D, 0x0D, 0x0A}, good[4:]...), 0},
		{"truncated record header", good[:24+16+len(ip)+5], 1},
		{"truncated record data", good[:len(good)-1], 1},
		{"huge record", huge, 0},
	}
	for _, c := range cases {
		n := 0
		var last error
		for _, err := range ReadPcap(bytes.NewReader(c.file)) {
			if err != nil {
				last = err
				break
			}
			n++
		}
		if n != c.recs || !errors.Is(last, ErrPcap) {
			t.Errorf("%s: %d records, error %v", c.name, n, last)
		}
	}
	// A clean end is io.EOF from Next, and nothing from the iterator.
	pr, err := NewPcapReader(bytes.NewReader(good[:24]))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pr.Next(); err != io.EOF {
		t.Errorf("Next at end: %v", err)
	}
	// Breaking out of the loop early is fine.
	for range ReadPcap(bytes.NewReader(good)) {
		break
	}
}

type failWriter struct{ n int }

func (f *failWriter) Write(p []byte) (int, error) {
	if f.n == 0 {
		return 0, io.ErrShortWrite
	}
	f.n--
	return len(p), nil
}

func TestPcapWriterErrors(t *testing.T) {
	if _, err := NewPcapWriter(&failWriter{0}, LinkTypeRaw); err == nil {
		t.Error("header write error lost")
	}
	for n := 1; n <= 2; n++ {
		w, err := NewPcapWriter(&failWriter{n}, LinkTypeRaw)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.WritePacket(time.Now(), []byte{0x45}); err == nil {
			t.Errorf("write error %d lost", n)
		}
	}
}
