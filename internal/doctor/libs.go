package doctor

import (
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// The drop-in libraries rdmafs exec puts first on the loader's path.
const (
	IBVLib = "libibverbs.so.1"
	CMLib  = "librdmacm.so.1"
)

// makeFix is the command that builds and installs the drop-in libraries.
func (e *Env) makeFix() string {
	if e.SourceDir != "" {
		return "make -C " + e.SourceDir + " install  (or make -C " + filepath.Join(e.SourceDir, "libibverbs") + " for the source tree's build)"
	}
	return "make install  (in the rdmafs source tree)"
}

// libraries checks the drop-in libraries exec uses, and that each
// exports what the system's copy does: a program linked against the
// system's rdma-core must find every versioned symbol it binds in ours.
func (e *Env) libraries() []Result {
	ibv := Result{Name: IBVLib}
	cm := Result{Name: CMLib}
	if e.LibErr != nil || e.LibDir == "" {
		ibv.Status = Fail
		ibv.Detail = "rdmafs exec has no drop-in library: "
		if e.LibErr != nil {
			ibv.Detail += e.LibErr.Error()
		}
		ibv.Fix = e.makeFix()
		cm.Status, cm.Detail = Skip, "not checked: no libibverbs.so.1 (above)"
		return []Result{ibv, cm}
	}
	ibv = e.library(IBVLib, e.LibDir)
	dir := e.CMLibDir
	if dir == "" {
		dir = e.LibDir
	}
	cm = e.library(CMLib, dir)
	return []Result{ibv, cm}
}

func (e *Env) library(name, dir string) Result {
	r := Result{Name: name}
	p := filepath.Join(dir, name)
	mine, err := exports(p)
	if os.IsNotExist(err) {
		r.Status = Fail
		r.Detail = fmt.Sprintf("%s is missing from %s", name, dir)
		if name == CMLib {
			r.Detail += ": rping, ucmatose and ib_write_bw -R would load the system's librdmacm, which sees no rdmafs device"
		}
		r.Fix = e.makeFix()
		return r
	}
	if err != nil {
		r.Status, r.Detail, r.Fix = Fail, fmt.Sprintf("%s: %v", p, err), e.makeFix()
		return r
	}
	sys := ""
	if e.SystemLib != nil {
		sys = e.SystemLib(name)
	}
	if sys == "" {
		r.Status = Warn
		r.Detail = fmt.Sprintf("%s (%d exports); no system %s, so no packaged program that needs it is installed", p, len(mine), name)
		r.Fix = "apt-get install " + map[string]string{IBVLib: "libibverbs1", CMLib: "librdmacm1"}[name]
		return r
	}
	theirs, err := exports(sys)
	if err != nil {
		r.Status, r.Detail = Warn, fmt.Sprintf("cannot read the system's %s: %v", sys, err)
		return r
	}
	ver, sysName := rdmaCoreVersion(sys)
	missing, extra := diff(theirs, mine)
	switch {
	case len(missing) > 0:
		r.Status = Fail
		r.Detail = fmt.Sprintf("%s lacks %d of the %d exports of the system's %s (rdma-core %s), e.g. %s: programs built against it may not load; it was generated from another rdma-core",
			p, len(missing), len(theirs), sysName, ver, strings.Join(first(missing, 3), " "))
		r.Fix = "rebuild it against this rdma-core: make -C SRC/libibverbs clean; make -C SRC/librdmacm clean; " + e.makeFix()
		if e.SourceDir != "" {
			r.Fix = strings.ReplaceAll(r.Fix, "SRC", e.SourceDir)
		}
	case len(extra) > 0:
		r.Status = Info
		r.Detail = fmt.Sprintf("%s exports all %d symbols of the system's %s (rdma-core %s) and %d more (generated from a newer rdma-core)", p, len(theirs), sysName, ver, len(extra))
	default:
		r.Detail = fmt.Sprintf("%s exports exactly the system's %d symbols (%s, rdma-core %s)", p, len(theirs), sysName, ver)
	}
	return r
}

// exports is a library's export set: NAME@VERSION (@@ for the default
// version) of every defined dynamic symbol.
func exports(path string) (map[string]bool, error) {
	f, err := elf.Open(path)
	if err != nil {
		if pe, ok := err.(*os.PathError); ok {
			return nil, pe
		}
		return nil, err
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil {
		return nil, err
	}
	set := map[string]bool{}
	for _, s := range syms {
		bind := elf.ST_BIND(s.Info)
		if s.Section == elf.SHN_UNDEF || (bind != elf.STB_GLOBAL && bind != elf.STB_WEAK) {
			continue
		}
		key := s.Name
		if s.Version != "" {
			at := "@@"
			if s.HasVersion && s.VersionIndex.IsHidden() {
				at = "@"
			}
			if s.Name == s.Version { // the version node's own symbol
				continue
			}
			key += at + s.Version
		}
		set[key] = true
	}
	return set, nil
}

// diff is what want has and got lacks, and what got has beyond want.
func diff(want, got map[string]bool) (missing, extra []string) {
	for k := range want {
		if !got[k] {
			missing = append(missing, k)
		}
	}
	for k := range got {
		if !want[k] {
			extra = append(extra, k)
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	return missing, extra
}

func first(s []string, n int) []string {
	if len(s) > n {
		return append(s[:n:n], "...")
	}
	return s
}

// rdmaCoreVersion reads the rdma-core release from a library's real file
// name, which it returns too: libibverbs.so.1.14.44.0 is rdma-core 44.0
// (its last two numbers).
func rdmaCoreVersion(lib string) (string, string) {
	real, err := filepath.EvalSymlinks(lib)
	if err != nil {
		return "?", filepath.Base(lib)
	}
	name := filepath.Base(real)
	f := strings.Split(name, ".")
	if len(f) < 6 {
		return "?", name
	}
	return f[len(f)-2] + "." + f[len(f)-1], name
}
