package link

import (
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// BenchmarkUDPPingPong8 is the floor of the wire's latency on this host:
// an 8-byte UDP ping-pong over lo between two threads blocked in the
// kernel (recvfrom on blocking sockets, as the wire's receive goroutine
// sleeps), with no RoCE, no ICRC, no engine. ns/op is one round trip;
// scripts/bench-wire.sh reports half of it beside SEND 8 B latency.
func BenchmarkUDPPingPong8(b *testing.B) {
	open := func(a [4]byte, port int) int {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			b.Fatal(err)
		}
		if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: a, Port: port}); err != nil {
			b.Skipf("bind %v:%d: %v", a, port, err)
		}
		return fd
	}
	pa, pb := [4]byte{127, 0, 83, 5}, [4]byte{127, 0, 83, 6}
	fa, fb := open(pa, 40835), open(pb, 40836)
	defer unix.Close(fa)
	defer unix.Close(fb)
	toA, toB := &unix.SockaddrInet4{Addr: pa, Port: 40835}, &unix.SockaddrInet4{Addr: pb, Port: 40836}
	done := make(chan struct{})
	go func() {
		// The echo side: one OS thread, blocked in the kernel between
		// datagrams.
		runtime.LockOSThread()
		defer close(done)
		buf := make([]byte, 64)
		for {
			n, _, err := unix.Recvfrom(fb, buf, 0)
			if err != nil || n == 0 {
				return
			}
			unix.Sendto(fb, buf[:n], 0, toA)
		}
	}()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	msg, buf := make([]byte, 8), make([]byte, 64)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := unix.Sendto(fa, msg, 0, toB); err != nil {
			b.Fatal(err)
		}
		if _, _, err := unix.Recvfrom(fa, buf, 0); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	unix.Sendto(fa, nil, 0, toB) // an empty datagram ends the echo
	<-done
}
