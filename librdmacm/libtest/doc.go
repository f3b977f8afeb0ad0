// Package libtest holds the Go tests of the C library in librdmacm/: they
// build it with make and check it from the outside, as programs see it
// (the export set against the system's librdmacm.so.1, and that Debian's
// rdmacm-utils and perftest load against it).
package libtest
