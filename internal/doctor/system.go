package doctor

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"rdmafs/internal/execview"
)

// Packages are the Debian packages rdmafs exec's programs come from: the
// system libraries whose export sets the drop-ins reproduce (and whose
// providers perftest and pyverbs load), and the programs the README and
// the scripts run. scripts/setup.sh installs them with the build's
// packages (a test keeps this list inside that one).
var Packages = []string{"libibverbs1", "librdmacm1", "ibverbs-utils", "rdmacm-utils", "perftest"}

func (e *Env) packages() Result {
	r := Result{Name: "packages"}
	if e.Dpkg == nil {
		r.Status, r.Detail = Skip, "not checked"
		return r
	}
	var missing, have []string
	for _, p := range Packages {
		v, ok := e.Dpkg(p)
		if !ok {
			r.Status = Skip
			r.Detail = "not a Debian system (no dpkg-query): install rdma-core's libraries and tools (" + strings.Join(Packages, " ") + " in Debian's names) with your package manager"
			return r
		}
		if v == "" {
			missing = append(missing, p)
		} else {
			have = append(have, p+" "+v)
		}
	}
	if len(missing) > 0 {
		r.Status = Warn
		r.Detail = "missing " + strings.Join(missing, " ") + ": rdmafs exec has none of their programs (ibv_devinfo, ibv_rc_pingpong, rping, ib_write_bw) to run"
		r.Fix = "apt-get install " + strings.Join(missing, " ")
		return r
	}
	r.Detail = strings.Join(have, ", ")
	return r
}

// hugepageDir is where the kernel keeps the 2 MiB pool.
const hugepageDir = "/sys/kernel/mm/hugepages/hugepages-2048kB"

func (e *Env) hugepages() Result {
	r := Result{Name: "hugepages"}
	b, err := os.ReadFile(e.path(hugepageDir + "/nr_hugepages"))
	if err != nil {
		r.Status = Warn
		r.Detail = "no 2 MiB hugepage pool (" + hugepageDir + "): programs cannot register MAP_HUGETLB buffers"
		r.Fix = "boot a kernel with CONFIG_HUGETLBFS=y"
		return r
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	free := -1
	if b, err := os.ReadFile(e.path(hugepageDir + "/free_hugepages")); err == nil {
		free, _ = strconv.Atoi(strings.TrimSpace(string(b)))
	}
	if n == 0 {
		r.Status = Warn
		r.Detail = "no 2 MiB hugepages reserved: programs that register MAP_HUGETLB buffers (rdma-core's test_huge_page_traffic, libibverbs/tests/memkinds) cannot allocate them"
		r.Fix = "echo 64 > " + hugepageDir + "/nr_hugepages  (128 MiB; or vm.nr_hugepages=64 in /etc/sysctl.d/)"
		return r
	}
	r.Detail = fmt.Sprintf("%d 2 MiB hugepages reserved", n)
	if free >= 0 {
		r.Detail += fmt.Sprintf(", %d free", free)
	}
	return r
}

// Mount is one rdmafs mount of /proc/self/mountinfo.
type Mount struct {
	Dir string
	Err error // the mount does not answer (its daemon is gone or hung)
}

// statTimeout bounds the look at each mount: a hung daemon would block a
// stat of its tree forever.
const statTimeout = 2 * time.Second

// Mounts lists the rdmafs mounts (fuse.rdmafs) of mountinfo and checks
// that each answers.
func (e *Env) Mounts() ([]Mount, error) {
	b, err := os.ReadFile(e.path("/proc/self/mountinfo"))
	if err != nil {
		return nil, err
	}
	var ms []Mount
	for _, line := range strings.Split(string(b), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 5 || len(g) < 1 || g[0] != "fuse.rdmafs" {
			continue
		}
		dir := execview.Unescape(f[4])
		ms = append(ms, Mount{Dir: dir, Err: statBounded(filepath.Join(e.Root, dir, "device"))})
	}
	return ms, nil
}

func statBounded(p string) error {
	done := make(chan error, 1)
	go func() { _, err := os.Stat(p); done <- err }()
	select {
	case err := <-done:
		return err
	case <-time.After(statTimeout):
		return errors.New("no answer in 2 s (the daemon is hung)")
	}
}

func (e *Env) mounts() Result {
	r := Result{Name: "mounts"}
	ms, err := e.Mounts()
	if err != nil {
		r.Status, r.Detail = Skip, fmt.Sprintf("cannot read mountinfo: %v", err)
		return r
	}
	var live, dead []string
	for _, m := range ms {
		if m.Err != nil {
			dead = append(dead, m.Dir)
			if r.Detail != "" {
				r.Detail += "; "
			}
			r.Detail += fmt.Sprintf("%s does not answer (%v)", m.Dir, unwrap(m.Err))
		} else {
			live = append(live, m.Dir)
		}
	}
	if len(dead) > 0 {
		r.Status = Warn
		r.Detail += ": programs under rdmafs exec see it as a device and fail on it"
		var fix []string
		for _, d := range dead {
			fix = append(fix, "rdmafs umount "+d)
		}
		r.Fix = strings.Join(fix, "; ")
		return r
	}
	if len(live) == 0 {
		r.Status, r.Detail = Info, "no rdmafs mount yet (rdmafs mount DIR makes one)"
		return r
	}
	r.Status = Info
	r.Detail = fmt.Sprintf("%d mounted: %s (rdmafs exec shows programs each as rdmafs0, rdmafs1, ...)", len(live), strings.Join(live, " "))
	return r
}

func (e *Env) rdmaDevices() Result {
	r := Result{Name: "rdma devices"}
	ents, err := os.ReadDir(e.path("/sys/class/infiniband"))
	if err != nil || len(ents) == 0 {
		r.Detail = "no kernel RDMA device (none to confuse programs)"
		return r
	}
	var soft, hard []string
	for _, d := range ents {
		n := d.Name()
		// rxe and siw devices are the only ones with a parent netdev
		// file and no bus device; their usual names say it too.
		_, perr := os.Stat(e.path("/sys/class/infiniband/" + n + "/parent"))
		if strings.HasPrefix(n, "rxe") || strings.HasPrefix(n, "siw") || perr == nil {
			soft = append(soft, n)
		} else {
			hard = append(hard, n)
		}
	}
	if len(soft) > 0 {
		r.Status = Warn
		r.Detail = fmt.Sprintf("software RDMA device %s: a program run without rdmafs exec uses it instead of rdmafs, programs that read /sys/class/infiniband (UCX, libfabric) see it beside rdmafs's devices, and rxe holds UDP 4791, which mount --addr needs", strings.Join(soft, " "))
		var fix []string
		for _, n := range soft {
			fix = append(fix, "rdma link delete "+n)
		}
		r.Fix = strings.Join(fix, "; ")
		return r
	}
	r.Status = Info
	r.Detail = fmt.Sprintf("hardware RDMA device %s: programs run without rdmafs exec use it; under exec they see only rdmafs's devices", strings.Join(hard, " "))
	return r
}
