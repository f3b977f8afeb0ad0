// Command gen generates the export set of rdmafs's libibverbs.so.1: the
// linker version script and the stubs of every export the implementation
// does not define, so that the library exports exactly what the system's
// libibverbs does (the same names, versions, default and hidden versions,
// functions and data), and a program linked BIND_NOW against the real one
// loads against ours.
//
//	gen exports [-objdump PROG] [-lib NAME] LIB
//	    print LIB's export set (objdump -T) in the form of exports.txt
//	gen stubs [-lib NAME] -exports FILE -defined FILE -protos FILE -map OUT -stubs OUT [-table OUT]
//	    -lib      the library: libibverbs (the default) or librdmacm (profile.go)
//	    -exports  the system library's objdump -T output, or exports.txt
//	    -defined  nm --defined-only of the implementation objects
//	    -protos   gcc -aux-info output of a file that includes <infiniband/verbs.h>
//	              (librdmacm: <rdma/rdma_cma.h>, <rdma/rdma_verbs.h>, <rdma/rsocket.h>)
//	    -map      the version script to write
//	    -stubs    the C source of the stubs to write
//	    -table    the stub list for ctest/stubs_test.c to write
//
// libibverbs/Makefile runs both at build time, so the outputs never drift
// from the implementation; nothing generated is checked in except
// exports.txt, the export set of Debian's rdma-core 44.0 for machines
// without the library (a test keeps it equal to the installed one).
//
// An export counts as implemented when an implementation object defines
// its name (for the default version) or binds NAME@VERSION itself with
// .symver (nm shows the versioned name); everything else is stubbed. How
// each stub fails is decided from its prototype and the exceptions in
// conventions.go.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintf(os.Stderr, "libibverbs/gen: %v\n", err)
		os.Exit(1)
	}
}

const usage = `usage:
  gen exports [-objdump PROG] [-lib NAME] LIB
  gen stubs [-lib NAME] -exports FILE -defined FILE -protos FILE -map OUT -stubs OUT [-table OUT]
`

func run(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("no command\n%s", usage)
	}
	switch args[0] {
	case "exports":
		return cmdExports(args[1:], stdout, stderr)
	case "stubs":
		return cmdStubs(args[1:], stderr)
	}
	return fmt.Errorf("unknown command %q\n%s", args[0], usage)
}

func cmdExports(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("exports", flag.ContinueOnError)
	fs.SetOutput(stderr)
	objdump := fs.String("objdump", envOr("OBJDUMP", "objdump"), "objdump program")
	libName := fs.String("lib", "libibverbs", "the library: libibverbs or librdmacm (for the header)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return fmt.Errorf("exports: want one library\n%s", usage)
	}
	lib := fs.Arg(0)
	set, err := Objdump(*objdump, lib)
	if err != nil {
		return err
	}
	real, err := filepath.EvalSymlinks(lib)
	if err != nil {
		real = lib
	}
	if *libName != "libibverbs" {
		return set.Format(stdout, exportsCommentFor(*libName, filepath.Base(real)))
	}
	return set.Format(stdout, ExportsComment(filepath.Base(real)))
}

// exportsCommentFor is the header of another library's exports.txt.
func exportsCommentFor(name, lib string) string {
	return `The export set of ` + lib + `, the input of libibverbs/gen -lib ` + name + ` on
machines without the library. Regenerate with
  go run ./libibverbs/gen exports -lib ` + name + ` /usr/lib/x86_64-linux-gnu/` + name + `.so.1 > ` + name + `/exports.txt
(` + name + `/libtest fails while it differs from the installed library).`
}

// ExportsComment is the header of exports.txt.
func ExportsComment(lib string) string {
	return `The export set of ` + lib + `, the input of libibverbs/gen on
machines without the library. Regenerate with
  go run ./libibverbs/gen exports /usr/lib/x86_64-linux-gnu/libibverbs.so.1 > libibverbs/exports.txt
(libibverbs/gen's tests fail while it differs from the installed library).`
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func cmdStubs(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("stubs", flag.ContinueOnError)
	fs.SetOutput(stderr)
	exportsF := fs.String("exports", "", "objdump -T of the system library, or exports.txt")
	definedF := fs.String("defined", "", "nm --defined-only of the implementation objects")
	protosF := fs.String("protos", "", "gcc -aux-info of a file including <infiniband/verbs.h>")
	mapF := fs.String("map", "", "version script to write")
	stubsF := fs.String("stubs", "", "stubs.c to write")
	tableF := fs.String("table", "", "stub table for the C tests to write")
	source := fs.String("source", "", "name of the export set's origin, for the banners (default: the -exports file)")
	libName := fs.String("lib", "libibverbs", "the library: libibverbs or librdmacm")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *exportsF == "" || *definedF == "" || *protosF == "" || *mapF == "" || *stubsF == "" || fs.NArg() != 0 {
		return fmt.Errorf("stubs: -exports, -defined, -protos, -map and -stubs are required\n%s", usage)
	}
	if *source == "" {
		*source = filepath.Base(*exportsF)
	}
	prof, ok := Profiles[*libName]
	if !ok {
		return fmt.Errorf("stubs: unknown -lib %q (libibverbs or librdmacm)", *libName)
	}
	ef, err := os.Open(*exportsF)
	if err != nil {
		return err
	}
	defer ef.Close()
	set, err := ReadExportSet(ef)
	if err != nil {
		return fmt.Errorf("%s: %w", *exportsF, err)
	}
	df, err := os.Open(*definedF)
	if err != nil {
		return err
	}
	defer df.Close()
	def, err := ReadDefined(df)
	if err != nil {
		return fmt.Errorf("%s: %w", *definedF, err)
	}
	pf, err := os.Open(*protosF)
	if err != nil {
		return err
	}
	defer pf.Close()
	protos, err := ReadProtos(pf, prof.HeaderDir)
	if err != nil {
		return fmt.Errorf("%s: %w", *protosF, err)
	}
	if len(protos) == 0 {
		return fmt.Errorf("%s: no prototypes from <%s*.h>: is it gcc -aux-info output?", *protosF, strings.TrimPrefix(prof.HeaderDir, "/"))
	}
	plan, err := MakeProfilePlan(prof, set, *source, def, protos)
	if err != nil {
		return err
	}
	outs := []struct {
		path string
		data []byte
	}{{*mapF, plan.Map()}, {*stubsF, plan.StubsC()}}
	if *tableF != "" {
		outs = append(outs, struct {
			path string
			data []byte
		}{*tableF, plan.Table()})
	}
	for _, o := range outs {
		if err := writeFile(o.path, o.data); err != nil {
			return err
		}
	}
	fmt.Fprintf(stderr, "libibverbs/gen: %d exports in %d version nodes: %d implemented, %d stubbed (%d of them hidden versions)\n",
		len(set.Symbols), len(set.Nodes), len(plan.Implemented), len(plan.Stubs), countHiddenStubs(plan.Stubs))
	return nil
}

func countHiddenStubs(st []Stub) int {
	n := 0
	for _, s := range st {
		if s.Sym.Hidden {
			n++
		}
	}
	return n
}

// writeFile replaces path whole, so an interrupted build never leaves half
// a file for make to trust.
func writeFile(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
