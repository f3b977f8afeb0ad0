// Command rdmafs mounts a virtual RDMA device as a FUSE filesystem and
// drives it: mount, umount, new (a transaction on a */new file), bench,
// exec (a libibverbs program on rdmafs's libibverbs.so.1), show (the
// objects at a glance) and trace (a QP's packets), whose command lines are
// show.go's over internal/show, and doctor (whether the machine can run
// rdmafs, doctor.go).
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/pflag"
)

const usage = `rdmafs — a virtual RDMA device you mount as a filesystem

Usage:
  rdmafs mount [flags] MOUNTPOINT   mount a device; returns when it is ready and
                                    keeps serving in the background
  rdmafs mount --foreground ...     stay attached; SIGINT/SIGTERM unmount cleanly
  rdmafs umount MOUNTPOINT          tear the device down, even with live mappings
  rdmafs new MOUNTPOINT KIND k=v... create an object (KIND: pd mr mw cq srq ah qp cm cm/channel)
                                    and print its name
  rdmafs bench [flags] MOUNTPOINT   perftest-style loopback benchmark (--op, --mode bw|lat);
                                    --peer MOUNT2: between two devices over RoCEv2
  rdmafs exec [--mount M] -- PROGRAM [ARGS...]
                                    run an unmodified libibverbs program (ibv_*, ib_*_bw,
                                    pyverbs) on rdmafs's libibverbs.so.1; --mount M: only
                                    that device
  rdmafs libdir                     print the directory of that libibverbs.so.1
  rdmafs show [MOUNT] [KIND] [-j] [-w]
                                    the device at a glance: a table per kind (pd mr mw cq
                                    srq ah qp) of the objects you can see (root: all);
                                    -j JSON, -w refresh in place with per-second QP rates;
                                    MOUNT defaults to the machine's one rdmafs mount
  rdmafs trace [MOUNT] QPN [-n N]   a QP's packets as they happen, decoded one a line, from
                                    MOUNT/capture; Ctrl-C (or N packets) ends it with a summary
  rdmafs doctor                     check that this machine can run rdmafs: one line a
                                    check, with the command that fixes what fails
  rdmafs help [COMMAND]             this text, or a command's flags; --man 8|5: the
                                    manual pages, --completion: the bash completion

Every verb is a file: see MOUNTPOINT/README once mounted, or README.md.
Requirements: root (FUSE passthrough needs CAP_SYS_ADMIN), Linux >= 6.9,
/dev/fuse: rdmafs doctor checks them.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "mount":
		err = cmdMount(args[1:], stdout, stderr)
	case "umount", "unmount":
		err = cmdUmount(args[1:], stdout, stderr)
	case "new":
		err = cmdNew(args[1:], stdout, stderr)
	case "bench":
		err = cmdBench(args[1:], stdout, stderr)
	case "exec":
		err = cmdExec(args[1:], stderr)
	case "libdir":
		err = cmdLibdir(args[1:], stdout, stderr)
	case "show":
		err = cmdShow(args[1:], stdout, stderr)
	case "trace":
		err = cmdTrace(args[1:], stdout, stderr)
	case "doctor":
		err = cmdDoctor(args[1:], stdout, stderr)
	case "help", "-h", "--help":
		if ok, code := helpGen(args[1:], stdout); ok {
			return code
		}
		if len(args) > 1 {
			return run([]string{args[1], "--help"}, stdout, stderr)
		}
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "rdmafs: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	if errors.Is(err, pflag.ErrHelp) {
		return 0
	}
	var ue usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(stderr, "rdmafs %s: %v\n", args[0], err)
		return 2
	}
	var ec exitCode
	if errors.As(err, &ec) {
		fmt.Fprintf(stderr, "rdmafs %s: %v\n", args[0], err)
		return ec.code
	}
	if err != nil {
		fmt.Fprintf(stderr, "rdmafs %s: %v\n", args[0], err)
		return 1
	}
	return 0
}

type usageError struct{ error }

func newFlags(name, synopsis string, stderr io.Writer) *pflag.FlagSet {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SetOutput(stderr)
	if flagSetHook != nil {
		flagSetHook(name, fs)
	}
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: rdmafs %s\n\nFlags:\n%s", synopsis, fs.FlagUsages())
	}
	return fs
}

// cmdNew runs one transaction on MOUNT/KIND/new and prints the new name.
func cmdNew(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("new", "new MOUNTPOINT KIND key=value...", stderr)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() < 2 {
		fs.Usage()
		return usageError{errors.New("need MOUNTPOINT and KIND")}
	}
	mnt, kind := fs.Arg(0), fs.Arg(1)
	switch kind {
	case "pd", "mr", "mw", "cq", "srq", "ah", "qp", "cm", "cm/channel":
	default:
		return usageError{fmt.Errorf("unknown kind %q (pd mr mw cq srq ah qp cm cm/channel)", kind)}
	}
	f, err := os.OpenFile(mnt+"/"+kind+"/new", os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	line := strings.Join(fs.Args()[2:], " ") + "\n"
	_, werr := f.Write([]byte(line))
	buf := make([]byte, 4096)
	n, _ := f.Read(buf)
	resp := strings.TrimSpace(string(buf[:n]))
	if werr != nil {
		if reason, ok := strings.CutPrefix(resp, "error: "); ok {
			return fmt.Errorf("%s: %s", errnoText(werr), reason)
		}
		return werr
	}
	fmt.Fprintln(stdout, resp)
	return nil
}

func errnoText(err error) string {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}
