package main

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"rdmafs/internal/testmount"
)

// mountDaemon mounts a background rdmafs daemon (bin mount ARGS... DIR) in
// a temporary directory and unmounts it when the test ends. The daemon is
// a separate process, so the bench's own FUSE calls never wait on this
// one.
func mountDaemon(t *testing.T, bin string, args ...string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(t.TempDir(), "daemon.log")
	args = append(append([]string{"mount", "--log", log}, args...), dir)
	if out, err := exec.Command(bin, args...).CombinedOutput(); err != nil {
		t.Fatalf("rdmafs %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command(bin, "umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v\n%s", dir, err, out)
		}
	})
	return dir
}

// randomLoopbackPair returns two distinct addresses in 127/8, away from
// 127.0.0.0/16, so parallel runs and the scripts' fixed addresses (127.0.77.x,
// 127.0.78.x) do not collide.
func randomLoopbackPair() (string, string) {
	x, y := 1+rand.IntN(254), rand.IntN(256)
	z := 1 + rand.IntN(253)
	return fmt.Sprintf("127.%d.%d.%d", x, y, z), fmt.Sprintf("127.%d.%d.%d", x, y, z+1)
}

// Two daemons on two loopback addresses, the bench's requesters on one and
// their partners on the other: the traffic crosses the kernel's UDP stack
// as RoCEv2. The numbers must parse and be nonzero and the data check must
// pass (no timing bounds: the machine is shared); a mount without --addr
// is refused with a reason.
func TestBenchPeerOverWire(t *testing.T) {
	testmount.NeedRoot(t)
	bin := testmount.Rdmafs(t)
	addrA, addrB := randomLoopbackPair()
	a := mountDaemon(t, bin, "--addr", addrA)
	b := mountDaemon(t, bin, "--addr", addrB, "--mtu", "2048")
	for _, tc := range []struct{ op, mode, size string }{
		{"write", "bw", "65536"},
		{"read", "bw", "65536"},
		{"send", "lat", "8"},
	} {
		t.Run(tc.op+"_"+tc.mode, func(t *testing.T) {
			args := []string{"bench", "--peer", b, "--op", tc.op, "--mode", tc.mode, "-s", tc.size,
				"--iters", "200", "--warmup", "20", "--json", a}
			out, err := exec.Command(bin, args...).Output()
			if err != nil {
				t.Fatalf("rdmafs %s: %v\n%s", strings.Join(args, " "), err, out)
			}
			rs := parseJSONResults(t, string(out))
			if len(rs) != 1 {
				t.Fatalf("%d results, want 1:\n%s", len(rs), out)
			}
			r := rs[0]
			if r.Op != tc.op || r.Mode != tc.mode || r.Iterations != 200 || r.Check != "ok" {
				t.Errorf("result %+v", r)
			}
			if tc.mode == "bw" && (r.BWAvg <= 0 || r.MsgRate <= 0 || r.BWPeak < r.BWAvg) {
				t.Errorf("bw numbers: %+v", r)
			}
			if tc.mode == "lat" && !(r.TMin > 0 && r.TMin <= r.TTypical && r.TTypical <= r.TMax) {
				t.Errorf("latency numbers: %+v", r)
			}
			// It went over the wire, not through a loopback shortcut.
			if r.WirePackets == 0 || r.PeerDaemonPID == 0 {
				t.Errorf("no wire packets or no peer daemon: %+v", r)
			}
		})
	}
	// The table says where the partners were, and the path MTU is the
	// smaller of the two ports' (b mounted with 2048).
	out, err := exec.Command(bin, "bench", "--peer", b, "--iters", "50", "--warmup", "5", "-s", "4096", a).Output()
	if err != nil {
		t.Fatalf("table: %v\n%s", err, out)
	}
	for _, w := range []string{"Transport type : rdmafs RoCEv2", "Peer mount     : " + b, "Mtu             : 2048[B]", "data check: ok"} {
		if !strings.Contains(string(out), w) {
			t.Errorf("the table lacks %q:\n%s", w, out)
		}
	}

	plain := mountDaemon(t, bin)
	for _, args := range [][]string{{"--peer", plain, a}, {"--peer", a, plain}} {
		out, err := exec.Command(bin, append([]string{"bench", "--iters", "10"}, args...)...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "mount it with --addr") || !strings.Contains(string(out), plain) {
			t.Errorf("bench %v with a mount without --addr: err %v, output:\n%s", args, err, out)
		}
	}
}
