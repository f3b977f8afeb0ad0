package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"rdmafs/internal/show"
)

// rdmafs show and rdmafs trace: the command lines over internal/show,
// which reads the mount.

const showSynopsis = "show [MOUNT] [pd|mr|cq|srq|qp|ah|mw] [-j|--json] [-w|--watch [-i DURATION]]"

func cmdShow(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("show", showSynopsis, stderr)
	var o show.Options
	var watch bool
	fs.BoolVarP(&o.JSON, "json", "j", false, "print JSON (with --watch: one object a line, every interval)")
	fs.BoolVarP(&watch, "watch", "w", false, "refresh in place every interval, with per-second rates of each QP until Ctrl-C")
	fs.DurationVarP(&o.Interval, "interval", "i", time.Second, "refresh interval of --watch")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := showPositional(&o, fs.Args()); err != nil {
		var ue usageError
		if errors.As(err, &ue) {
			fs.Usage()
		}
		return err
	}
	if o.Interval <= 0 {
		return usageError{fmt.Errorf("--interval %v: must be positive", o.Interval)}
	}
	if !watch {
		v, err := show.Collect(o.Mount, o.Kinds, time.Now())
		if err != nil {
			return err
		}
		return v.Write(stdout, o, false)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	t := time.NewTicker(o.Interval)
	defer t.Stop()
	return show.Watch(ctx, o, stdout, time.Now, t.C)
}

// showPositional takes [MOUNT] [KIND]: one word that is a kind is the
// kind (name a mount called that ./qp); no MOUNT is the machine's one
// rdmafs mount.
func showPositional(o *show.Options, args []string) error {
	switch len(args) {
	case 0:
	case 1:
		if show.IsKind(args[0]) {
			o.Kinds = args[:1]
		} else {
			o.Mount = args[0]
		}
	case 2:
		o.Mount = args[0]
		if !show.IsKind(args[1]) {
			return usageError{fmt.Errorf("unknown kind %q (pd mr mw cq srq ah qp)", args[1])}
		}
		o.Kinds = args[1:]
	default:
		return usageError{errors.New("too many arguments")}
	}
	if o.Kinds == nil {
		o.Kinds = show.Kinds
	}
	m, err := show.ResolveMount(o.Mount)
	o.Mount = m
	return err
}

const traceSynopsis = "trace [MOUNT] QPN [-n COUNT]"

func cmdTrace(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("trace", traceSynopsis, stderr)
	count := fs.IntP("count", "n", 0, "stop after COUNT packets of the QP (default: until Ctrl-C)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var mnt, qpnArg string
	switch fs.NArg() {
	case 1:
		qpnArg = fs.Arg(0)
	case 2:
		mnt, qpnArg = fs.Arg(0), fs.Arg(1)
	default:
		fs.Usage()
		return usageError{errors.New("need [MOUNT] QPN")}
	}
	n, err := strconv.ParseUint(qpnArg, 0, 24)
	if err != nil {
		return usageError{fmt.Errorf("QPN %q: not a number below 2^24", qpnArg)}
	}
	if mnt, err = show.ResolveMount(mnt); err != nil {
		return err
	}
	t, err := show.NewTracer(mnt, uint32(n))
	if err != nil {
		return err
	}
	f, err := show.OpenRaw(filepath.Join(mnt, "capture"))
	if err != nil {
		return err
	}
	defer f.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fmt.Fprintf(stderr, "tracing %s on %s: out = sent by qp %d, in = received; Ctrl-C ends with a summary\n", t.Describe(), mnt, n)
	return t.Run(ctx, f, stdout, *count)
}
