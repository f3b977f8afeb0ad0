package cm_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"rdmafs/clock"
	"rdmafs/cm"
	"rdmafs/device"
	"rdmafs/qp"
)

// nextEvent waits for one event of ch.
func nextEvent(t *testing.T, ch *cm.Channel) cm.Event {
	t.Helper()
	done := make(chan struct{})
	timer := time.AfterFunc(5*time.Second, func() { close(done) })
	defer timer.Stop()
	e, ok := ch.Next(done)
	if !ok {
		t.Fatal("no event within 5 s")
	}
	return e
}

func do(t *testing.T, id *cm.ID, cmd string) {
	t.Helper()
	if err := id.Do(cmd); err != nil {
		t.Fatalf("%s: %v", cmd, err)
	}
}

// TestAttachLoopback: the agent on a real device (a local mount's, no
// address) connects 127.0.0.1 to itself through QP1 and the device's
// loopback, and the capture shows the MADs, which tshark decodes as CM.
func TestAttachLoopback(t *testing.T) {
	dev, err := device.New(device.Config{Clock: clock.Real{}})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	capr := dev.OpenCapture()
	defer capr.Close()
	a := cm.Attach(dev, cm.Config{})
	defer a.Close()
	var made *cm.ID
	a.SetNewIDHook(func(id *cm.ID) { made = id })
	ch, _ := a.NewChannel(0)
	l, _ := a.Create(0, ch, cm.PSTCP, qp.TypeRC)
	do(t, l, "bind addr=127.0.0.1 port=7471")
	do(t, l, "listen")
	c, _ := a.Create(0, ch, cm.PSTCP, qp.TypeRC)
	do(t, c, "resolve_addr dst=127.0.0.1 port=7471")
	do(t, c, "resolve_route")
	for _, want := range []string{cm.EvAddrResolved, cm.EvRouteResolved} {
		if e := nextEvent(t, ch); e.Name != want {
			t.Fatal(e.Line())
		}
	}
	do(t, c, "connect qp_num=20 psn=1")
	if e := nextEvent(t, ch); e.Name != cm.EvConnectRequest || made == nil || e.ID != made.Num {
		t.Fatal(e.Line())
	}
	do(t, made, "accept qp_num=21 psn=2")
	if e := nextEvent(t, ch); e.Name != cm.EvConnectResponse || e.ID != c.Num {
		t.Fatal(e.Line())
	}
	do(t, c, "establish")
	if e := nextEvent(t, ch); e.Name != cm.EvEstablished || e.ID != made.Num {
		t.Fatal(e.Line())
	}
	var pcap bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	// REQ, REP, RTU: IPv6 (the local GID), UDP, BTH, DETH, the MAD, ICRC.
	for pcap.Len() < 24+3*(16+40+8+12+8+256+4) {
		b, err := capr.Next(ctx)
		if err != nil {
			t.Fatalf("capture: %v (%d bytes)", err, pcap.Len())
		}
		pcap.Write(b)
	}
	if _, err := exec.LookPath("tshark"); err != nil {
		t.Log("no tshark: the capture is not decoded")
		return
	}
	f := filepath.Join(t.TempDir(), "cm.pcap")
	os.WriteFile(f, pcap.Bytes(), 0o644)
	out, err := exec.Command("tshark", "-r", f, "-V").CombinedOutput()
	if err != nil {
		t.Fatalf("tshark: %v\n%s", err, out)
	}
	s := string(out)
	for _, w := range []string{"ConnectRequest", "ConnectReply", "ReadyToUse"} {
		if !strings.Contains(s, w) {
			t.Errorf("tshark does not show %s", w)
		}
	}
	if t.Failed() || os.Getenv("CM_TSHARK_DUMP") != "" {
		t.Log(s)
	}
}

// TestAttachLossyLoopback: with the device's fault injector losing and
// duplicating MADs, the CM's retries and duplicate handling still set up
// and tear down a connection (fake clock: the retries' seconds pass at
// once).
func TestAttachLossyLoopback(t *testing.T) {
	clk := clock.NewFake()
	dev, err := device.New(device.Config{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	if err := dev.SetFaults(device.Faults{Drop: 0.3, Dup: 0.2, Seed: 7}); err != nil {
		t.Fatal(err)
	}
	a := cm.Attach(dev, cm.Config{Clock: clk})
	defer a.Close()
	var made *cm.ID
	a.SetNewIDHook(func(id *cm.ID) { made = id })
	ch, _ := a.NewChannel(0)
	l, _ := a.Create(0, ch, cm.PSTCP, qp.TypeRC)
	do(t, l, "listen")
	port := strings.TrimPrefix(attrLine(l, "src_port"), "src_port=")
	c, _ := a.Create(0, ch, cm.PSTCP, qp.TypeRC)
	do(t, c, "resolve_addr dst=127.0.0.1 port="+port)
	do(t, c, "resolve_route")
	nextEvent(t, ch)
	nextEvent(t, ch)
	do(t, c, "connect qp_num=20")
	// await steps the clock until an event comes (the GSI goroutine
	// delivers asynchronously: give it a moment at each step).
	await := func(name string) cm.Event {
		t.Helper()
		for range 400 {
			done := make(chan struct{})
			timer := time.AfterFunc(5*time.Millisecond, func() { close(done) })
			e, ok := ch.Next(done)
			timer.Stop()
			if ok {
				if e.Name != name {
					t.Fatalf("%s, want %s", e.Line(), name)
				}
				return e
			}
			clk.Advance(time.Second)
		}
		t.Fatalf("no %s", name)
		return cm.Event{}
	}
	await(cm.EvConnectRequest)
	do(t, made, "accept qp_num=21")
	await(cm.EvConnectResponse)
	do(t, c, "establish")
	await(cm.EvEstablished)
	do(t, c, "disconnect")
	await(cm.EvDisconnected)
	do(t, made, "disconnect")
	await(cm.EvDisconnected)
	if dev.Counters.FaultDrops.Load() == 0 {
		t.Log("no MAD was lost (the seed's luck)")
	}
	t.Logf("faults: %d drops, %d dups; %s", dev.Counters.FaultDrops.Load(), dev.Counters.FaultDups.Load(),
		strings.Join(strings.Fields(a.CountersText())[18:24], " "))
}

func attrLine(id *cm.ID, key string) string {
	for _, l := range strings.Split(id.Attr(), "\n") {
		if strings.HasPrefix(l, key+"=") {
			return l
		}
	}
	return ""
}
