package verbs

import (
	"bytes"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestRegMRMem: the program's own memory registers as the C library's
// does: shared memory as it is, any memory on demand, private memory
// without on_demand refused with a reason (EOPNOTSUPP), read-only memory
// for writing refused (EFAULT); and an RDMA WRITE between a shared
// mapping and a Go heap buffer moves the bytes both ways.
func TestRegMRMem(t *testing.T) {
	e := mount(t, testOpts)
	p := e.rcPair(QPTypeRC, 16, QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}, 64)
	const n = 3*4096 + 100
	shared, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
	e.must(err)
	defer unix.Munmap(shared)
	ro, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
	e.must(err)
	defer unix.Munmap(ro)
	heap := make([]byte, n)

	if _, err := p.pd.RegMRMem(heap, allAccess); !isErrno(err, syscall.EOPNOTSUPP) {
		t.Fatalf("private memory without on_demand: %v, want EOPNOTSUPP", err)
	}
	if _, err := p.pd.RegMRMem(ro, AccessLocalWrite); !isErrno(err, syscall.EFAULT) {
		t.Fatalf("read-only memory for writing: %v, want EFAULT", err)
	}
	ms, err := p.pd.RegMRMem(shared, allAccess)
	e.must(err)
	mh, err := p.pd.RegMRMem(heap, allAccess|AccessOnDemand)
	e.must(err)
	if ms.IOVA != uint64(uintptr(unsafe.Pointer(&shared[0]))) || &ms.Buf[0] != &shared[0] {
		t.Fatalf("iova %#x, want the buffer's address", ms.IOVA)
	}
	write := func(from, to *MR, fill byte) {
		t.Helper()
		for i := range from.Buf {
			from.Buf[i] = fill + byte(i)
		}
		wr := SendWR{WRID: 1, Opcode: WRRDMAWrite, SendFlags: SendSignaled, SGL: []SGE{from.SGE(0, n)},
			RemoteAddr: to.Addr(0), RKey: to.RKey}
		e.must(postRetry(p.a, wr))
		if wc := pollN(t, p.cq, 1)[0]; wc.Status != WCSuccess {
			t.Fatalf("write: %v", wc.Status)
		}
		if !bytes.Equal(to.Buf, from.Buf) {
			t.Fatalf("the bytes did not arrive")
		}
	}
	write(ms, mh, 1)
	write(mh, ms, 9)
	e.must(mh.Dereg())
	e.must(ms.Dereg())
}
