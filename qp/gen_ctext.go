//go:build ignore

// gen_ctext writes libibverbs/rdmafs-text.h, the words of this package's
// text protocol that the C library matches (see qp/internal/ctext). Run by
// go generate:
//
//	go generate ./qp
package main

import (
	"flag"
	"fmt"
	"os"

	"rdmafs/qp/internal/ctext"
)

func main() {
	out := flag.String("o", "../libibverbs/rdmafs-text.h", "header to write")
	flag.Parse()
	if err := os.WriteFile(*out, ctext.Generate(), 0o644); err != nil {
		fmt.Fprintf(os.Stderr, "gen_ctext: %v\n", err)
		os.Exit(1)
	}
}
