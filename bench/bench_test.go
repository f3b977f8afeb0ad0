package bench

import (
	"bytes"
	"strings"
	"testing"

	"rdmafs/device"
	"rdmafs/fsnode"
	"rdmafs/internal/testmount"
)

func benchMount(t testing.TB) string {
	t.Helper()
	dir, _ := testmount.Mount(t, testmount.Device(t, device.DefaultConfig()), fsnode.Options{})
	return dir
}

// The data check is not vacuous: memory spoiled after the run fails it,
// and the bench exits 1.
func TestBenchCheckCatchesBadData(t *testing.T) {
	mnt := benchMount(t)
	for _, op := range []string{"write", "read", "fetch_add"} {
		beforeCheck = func(b *bench, size int) {
			p := b.pairs[0]
			switch op {
			case "write":
				p.mb.Buf[b.buf+size/2]++
			case "read":
				p.ma.Buf[b.buf+size/2]++
			case "fetch_add":
				p.mb.Buf[p.atomicWord]++
			}
		}
		c := Config{Op: op, Mode: "bw", Sizes: []int{64}, Iters: 10, Warmup: -1, RxDepth: 512, QPs: 1, PostList: 1, Mount: mnt}
		if err := c.Complete(); err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		err := Run(&c, &out)
		if err == nil || !strings.Contains(err.Error(), "data check failed") || !strings.Contains(out.String(), "data check: FAILED") {
			t.Errorf("%s: spoiled memory passed: %v\n%s", op, err, &out)
		}
	}
	beforeCheck = nil
}
