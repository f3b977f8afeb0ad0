package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"rdmafs/fsnode"
	"rdmafs/internal/doctor"
)

const doctorHelp = `Usage: rdmafs doctor

Check whether this machine can run rdmafs, one line per check: ok, or what
is wrong and the command that fixes it. The checks: the kernel version and
FUSE passthrough (the probe mount makes: an empty FUSE mount registering a
backing file), /dev/fuse and the privileges a mount needs, the drop-in
libibverbs.so.1 and librdmacm.so.1 rdmafs exec would use and their export
sets against the system's rdma-core, the Debian packages of the programs
exec runs, 2 MiB hugepages, the rdmafs mounts there are (and whether each
answers), and kernel RDMA devices (rxe, siw) that programs would take
instead of rdmafs's.

Exit status: 0 when no check failed (warnings are programs that will not
run, not rdmafs), 1 when one did. rdmafs mount runs the checks a mount
needs when it fails, and names the ones that failed.
`

// doctorEnv is the doctor's view of this process: the libraries exec
// would use, found by exec's own rule.
func doctorEnv() *doctor.Env {
	dir, err := libDir()
	cmDir := ""
	if err == nil {
		cmDir = cmLibDir(dir, defaultSourceRoot())
	}
	return doctor.Default(dir, err, cmDir, defaultSourceRoot(), fsnode.ProbePassthrough)
}

func cmdDoctor(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("doctor", "doctor", stderr)
	fs.Usage = func() { fmt.Fprintf(stderr, "%s\nFlags:\n%s", doctorHelp, fs.FlagUsages()) }
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		fs.Usage()
		return usageError{errors.New("takes no arguments")}
	}
	if !doctor.Print(stdout, doctor.Run(doctorEnv())) {
		return exitCode{1, errors.New("some checks failed (above)")}
	}
	return nil
}

// mountFailed adds to a failed mount's error the checks of rdmafs doctor
// that a mount needs and that fail here, so that the user learns which
// requirement is missing and how to fix it without running the doctor.
func mountFailed(err error) error {
	if err == nil {
		return nil
	}
	bad := doctor.RunMount(doctorEnv())
	if len(bad) == 0 {
		return err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%v\nrdmafs doctor: %d check(s) a mount needs failed:", err, len(bad))
	for _, r := range bad {
		fmt.Fprintf(&b, "\n%s", r)
	}
	return errors.New(b.String())
}
