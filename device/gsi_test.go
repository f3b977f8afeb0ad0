package device

import (
	"errors"
	"net/netip"
	"os"
	"syscall"
	"testing"
	"time"

	"rdmafs/clock"
	"rdmafs/roce"
)

func gsiCounter(d *Device, name string) uint64 {
	for _, c := range d.GSICounters() {
		if c.Name == name {
			return c.Value
		}
	}
	return ^uint64(0)
}

func recvMAD(t *testing.T, ch chan GSIMessage) GSIMessage {
	t.Helper()
	select {
	case m := <-ch:
		return m
	case <-time.After(5 * time.Second):
		t.Fatal("no MAD arrived")
	}
	return GSIMessage{}
}

func TestGSILoopback(t *testing.T) {
	goroutineLeakCheck(t)
	d, err := New(Config{Clock: clock.NewFake()})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	var mad [MADBytes]byte
	mad[0], mad[1], mad[255] = 1, 7, 0xEE
	if err := d.SendMAD(d.Port().GID, mad); err != nil {
		t.Fatal(err)
	}
	if got := gsiCounter(d, "gsi_dropped_no_handler"); got != 1 {
		t.Fatalf("MAD before SetGSI: gsi_dropped_no_handler=%d", got)
	}
	ch := make(chan GSIMessage, 4)
	d.SetGSI(func(m GSIMessage) { ch <- m })
	if err := d.SendMAD(d.Port().GID, mad); err != nil {
		t.Fatal(err)
	}
	m := recvMAD(t, ch)
	if m.MAD != mad || m.SGID != d.Port().GID || m.SrcQPN != GSIQPN || !m.Local || m.PKey != GSIPKey {
		t.Fatalf("got %+v", m)
	}
}

// TestGSIReceiveRules: only a UD SEND ONLY of exactly 256 bytes with the
// GSI's Q_Key reaches the handler; the rest are counted.
func TestGSIReceiveRules(t *testing.T) {
	goroutineLeakCheck(t)
	d, err := New(Config{Clock: clock.NewFake()})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ch := make(chan GSIMessage, gsiQueueLen+10)
	block := make(chan struct{})
	d.SetGSI(func(m GSIMessage) { <-block; ch <- m })
	inject := func(opcode roce.Opcode, qkey uint32, n int) {
		d.mu.Lock()
		p := d.engines[0].pool.get()
		p.Opcode, p.QKey, p.DestQP, p.SrcQP = opcode, qkey, GSIQPN, 5
		p.buf = append(p.buf[:0], make([]byte, n)...)
		p.Payload = p.buf
		d.receiveLocked(p, nil)
		d.mu.Unlock()
	}
	inject(roce.TransportUD|roce.OpSendOnly, GSIQKey, 255)
	inject(roce.TransportUD|roce.OpSendOnly, GSIQKey, 257)
	inject(roce.TransportUD|roce.OpSendOnly, 0x1234, 256)
	inject(roce.TransportRC|roce.OpSendOnly, GSIQKey, 256)
	inject(roce.TransportUD|roce.OpSendOnlyImm, GSIQKey, 256)
	for name, want := range map[string]uint64{"gsi_dropped_size": 2, "gsi_dropped_qkey": 1, "gsi_dropped_opcode": 2, "gsi_recv": 0} {
		if got := gsiCounter(d, name); got != want {
			t.Errorf("%s=%d want %d", name, got, want)
		}
	}
	// A handler that does not keep up: the queue holds gsiQueueLen (and
	// the one the handler holds), the rest are dropped and counted.
	for range gsiQueueLen + 10 {
		inject(roce.TransportUD|roce.OpSendOnly, GSIQKey, 256)
	}
	if full := gsiCounter(d, "gsi_dropped_full"); full < 9 || full > 10 {
		t.Errorf("gsi_dropped_full=%d want 9 or 10", full)
	}
	close(block)
	want := gsiCounter(d, "gsi_recv")
	for range want {
		recvMAD(t, ch)
	}
}

// wireGSIDevice is a device on 127.0.81.x (the address this work's wire
// tests use), trying the next one on a collision.
func wireGSIDevice(t *testing.T, last byte) *Device {
	t.Helper()
	var err error
	for try := byte(0); try < 20; try++ {
		var d *Device
		d, err = New(Config{Clock: clock.Real{}, Addr: netip.AddrFrom4([4]byte{127, 0, 81, last + 20*try})})
		if err == nil {
			t.Cleanup(func() { d.Close() })
			return d
		}
		if !errors.Is(err, syscall.EADDRINUSE) {
			break
		}
	}
	if errors.Is(err, syscall.EPERM) && os.Getenv("CI") != "true" {
		t.Skipf("no CAP_NET_RAW: %v", err)
	}
	t.Fatal(err)
	return nil
}

// TestGSIWire: a MAD crosses the wire from QP1 to QP1 as RoCEv2 (ICRC
// checked by the receiver), and the fault injector acts on it.
func TestGSIWire(t *testing.T) {
	goroutineLeakCheck(t)
	a, b := wireGSIDevice(t, 1), wireGSIDevice(t, 2)
	ch := make(chan GSIMessage, 4)
	b.SetGSI(func(m GSIMessage) { ch <- m })
	var mad [MADBytes]byte
	mad[0], mad[100] = 1, 0x42
	if err := a.SendMAD(b.Port().GID, mad); err != nil {
		t.Fatal(err)
	}
	m := recvMAD(t, ch)
	if m.MAD != mad || m.SGID != a.Port().GID || m.SrcAddr != a.Config().Addr || m.Local || m.SrcQPN != GSIQPN {
		t.Fatalf("got %+v", m)
	}
	if m.SGID != roce.GIDFromIPv4(a.Config().Addr) {
		t.Fatal("SGID is not the IPv4-mapped address")
	}
	if err := a.SetFaults(Faults{Drop: 1}); err != nil {
		t.Fatal(err)
	}
	a.SendMAD(b.Port().GID, mad)
	if a.Counters.FaultDrops.Load() != 1 {
		t.Fatal("fault injector did not see the MAD")
	}
	a.SetFaults(Faults{})
	a.Close()
	if err := a.SendMAD(b.Port().GID, mad); err == nil {
		t.Fatal("SendMAD on a closed device succeeded")
	}
}
