// Command lockcheck runs the lock analyzer (package lockcheck) over the
// packages named on its command line, as go vet would:
//
//	go run ./internal/lockcheck/cmd/lockcheck -test=false ./device/...
//
// It exits non-zero when a guarded field is touched without its lock.
package main

import (
	"golang.org/x/tools/go/analysis/singlechecker"

	"rdmafs/internal/lockcheck"
)

func main() { singlechecker.Main(lockcheck.Analyzer) }
