package fsnode

import (
	"context"
	"os"
	"strconv"
	"strings"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// Capabilities of the process behind a request, for the checks the
// kernel makes with capable(): CAP_NET_RAW for a controlled Q_Key (the
// high bit, QP1's 0x80010000 among them), CAP_NET_BIND_SERVICE for a CM
// port below 1024.
const (
	capNetBindService = 10
	capNetRaw         = 13
)

// callerHasCap reports whether the caller of a FUSE request holds
// capability c. Root holds them all (the daemon gives uid 0 everything,
// as the mount's owner). Another uid has what the effective set of the
// calling thread says, read from /proc/PID/status (FUSE passes the
// thread's id, which /proc resolves): a binary with file capabilities
// keeps them. A pid that is gone, or 0 (a request from outside the
// daemon's pid namespace), has none: the check fails closed.
func callerHasCap(ctx context.Context, c uint) bool {
	fc, ok := fuse.FromContext(ctx)
	if !ok {
		return false
	}
	if fc.Uid == 0 {
		return true
	}
	if fc.Pid == 0 {
		return false
	}
	eff, ok := capEff(fc.Pid, fc.Uid)
	return ok && eff&(1<<c) != 0
}

// capEff reads the effective capabilities of pid, if its real uid is
// still uid (a pid reused by another user's process does not lend its
// capabilities).
func capEff(pid, uid uint32) (uint64, bool) {
	b, err := os.ReadFile("/proc/" + strconv.FormatUint(uint64(pid), 10) + "/status")
	if err != nil {
		return 0, false
	}
	var eff uint64
	var haveEff, uidOK bool
	for _, l := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(l, ":")
		f := strings.Fields(v)
		switch {
		case k == "Uid" && len(f) > 0:
			uidOK = f[0] == strconv.FormatUint(uint64(uid), 10) || (len(f) > 1 && f[1] == strconv.FormatUint(uint64(uid), 10))
		case k == "CapEff" && len(f) > 0:
			eff, err = strconv.ParseUint(f[0], 16, 64)
			haveEff = err == nil
		}
	}
	return eff, haveEff && uidOK
}
