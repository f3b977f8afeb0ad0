//go:build race

package verbs

// raceEnabled: the race detector's runtime makes system calls (shadow
// memory mappings) on any thread, which a syscall census must not count.
const raceEnabled = true
