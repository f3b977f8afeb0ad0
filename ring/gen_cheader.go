//go:build ignore

// gen_cheader writes libibverbs/rdmafs-abi.h, the C header of this
// package's ABI (see ring/internal/cgen). Run by go generate:
//
//	go generate ./ring
package main

import (
	"flag"
	"fmt"
	"os"

	"rdmafs/ring/internal/cgen"
)

func main() {
	out := flag.String("o", "../libibverbs/rdmafs-abi.h", "header to write")
	flag.Parse()
	h, err := cgen.Generate(".", "rdmafs/ring")
	if err == nil {
		err = os.WriteFile(*out, h, 0o644)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "gen_cheader: %v\n", err)
		os.Exit(1)
	}
}
