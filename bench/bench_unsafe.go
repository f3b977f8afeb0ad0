package bench

import (
	"sync/atomic"
	"unsafe"
)

// loadByte reads mem[off] with an atomic load of the aligned word around
// it: the device writes it from another process.
func loadByte(mem []byte, off int) byte {
	w := (*uint32)(unsafe.Pointer(&mem[off&^3]))
	return byte(atomic.LoadUint32(w) >> (8 * (off & 3)))
}
