package device

import (
	"errors"
	"syscall"

	"rdmafs/qp"
	"rdmafs/ring"
)

// A program's own memory (mr/new addr=A) is mapped from the program's
// mappings by ring.MapProcess; an on-demand MR (access=on_demand) reaches
// it through ring.ProcMem. See ring/procmem.go for both, and DESIGN.md §6
// for the contract: the device sees the program's memory as a NIC does.

// memErr turns ring's reason into the verb's error.
func memErr(op string, err error) error {
	var me *ring.MemError
	if errors.As(err, &me) {
		return errf(op, me.Errno, "%s", me.Msg)
	}
	return errf(op, syscall.EFAULT, "%v", err)
}

// procBacking maps the caller's memory for an MR of length bytes at addr
// with access acc.
func procBacking(op string, pid int, addr, length uint64, acc qp.Access) (*mrBacking, error) {
	pm, err := ring.MapProcess(pid, addr, length, acc.Writable())
	if errors.Is(err, ring.ErrMayShrink) {
		// A file the program can truncate: reached through its address
		// space, as an on-demand MR is (checked as mapped memory is).
		return odpBacking(op, pid)
	}
	if err != nil {
		return nil, memErr(op, err)
	}
	return &mrBacking{proc: pm, mem: pm.Mem, refs: 1}, nil
}

// odpBacking opens the caller's address space for an on-demand MR.
func odpBacking(op string, pid int) (*mrBacking, error) {
	o, err := ring.OpenProcMem(pid)
	if err != nil {
		return nil, memErr(op, err)
	}
	return &mrBacking{odp: o, refs: 1}, nil
}
