package examples

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"rdmafs/device"
	"rdmafs/fsnode"
	"rdmafs/internal/testmount"
)

// mountOnAddr serves a device with a RoCEv2 address on a fresh mount
// point; it tries other 127/8 addresses while one is taken.
func mountOnAddr(t *testing.T) string {
	t.Helper()
	var dev *device.Device
	var err error
	for try := 0; try < 20; try++ {
		cfg := device.DefaultConfig()
		cfg.Addr = netip.AddrFrom4([4]byte{127, byte(rand.IntN(250) + 1), byte(rand.IntN(250) + 1), byte(rand.IntN(250) + 1)})
		if dev, err = device.New(cfg); err == nil {
			break
		}
	}
	if err != nil {
		if os.Getenv("CI") == "true" || os.Geteuid() == 0 {
			t.Fatal(err)
		}
		t.Skipf("no RoCEv2 device here: %v", err)
	}
	t.Cleanup(func() { dev.Close() })
	dir, _ := testmount.Mount(t, dev, fsnode.Options{})
	return dir
}

func freeTCPPort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// The remote modes of the ping-pong examples (the TCP exchange of
// ibv_rc_pingpong / ibv_ud_pingpong) between two mounts whose devices talk
// RoCEv2 over two loopback addresses: the server on one, the client on the
// other, as against the real tools on another host.
func TestExamplesRemoteTwoMounts(t *testing.T) {
	ma, mb := mountOnAddr(t), mountOnAddr(t)
	bin := t.TempDir()
	for _, c := range []struct {
		name string
		args []string
	}{
		{"rc_pingpong", []string{"-iters", "200", "-size", "4096", "-mtu", "1024"}},
		{"rc_pingpong", []string{"-iters", "100", "-size", "65536", "-mtu", "4096"}},
		{"ud_pingpong", []string{"-iters", "200", "-size", "1024"}},
	} {
		t.Run(c.name+strings.Join(c.args, ""), func(t *testing.T) {
			exe := filepath.Join(bin, c.name)
			if _, err := os.Stat(exe); err != nil {
				build := exec.Command("go", "build", "-o", exe, "rdmafs/examples/"+c.name)
				if out, err := build.CombinedOutput(); err != nil {
					t.Fatalf("build: %v\n%s", err, out)
				}
			}
			port := strconv.Itoa(freeTCPPort(t))
			var sout, cout bytes.Buffer
			server := exec.Command(exe, append([]string{"-mount", ma, "-timeout", "60s", "-server", "-port", port}, c.args...)...)
			server.Stdout, server.Stderr = &sout, &sout
			if err := server.Start(); err != nil {
				t.Fatal(err)
			}
			client := exec.Command(exe, append([]string{"-mount", mb, "-timeout", "60s", "-connect", "127.0.0.1", "-port", port}, c.args...)...)
			client.Stdout, client.Stderr = &cout, &cout
			cerr := client.Run()
			done := make(chan error, 1)
			go func() { done <- server.Wait() }()
			var serr error
			select {
			case serr = <-done:
			case <-time.After(90 * time.Second):
				server.Process.Kill()
				serr = fmt.Errorf("server did not finish")
				<-done
			}
			if cerr != nil || serr != nil {
				t.Fatalf("client: %v\n%s\nserver: %v\n%s", cerr, cout.String(), serr, sout.String())
			}
			want := c.args[1] + " iters in"
			for _, out := range []string{cout.String(), sout.String()} {
				if !strings.Contains(out, want) || !strings.Contains(out, "GID ::ffff:127.") {
					t.Fatalf("want %q and IPv4-mapped GIDs in:\n%s", want, out)
				}
			}
			if testing.Verbose() {
				t.Logf("client:\n%s\nserver:\n%s", cout.String(), sout.String())
			}
		})
	}
}
