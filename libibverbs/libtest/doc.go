// Package libtest holds the Go tests of the C library in libibverbs/: they
// build it with make and check it from the outside, as programs see it.
// (They cannot live beside the C sources: the go command refuses a
// package directory with C files in it unless it uses cgo.)
package libtest
