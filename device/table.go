package device

import "syscall"

// Handle tables, and the steps every kind of verbs object takes through
// them, written once here for PD, MR, MW, AH, CQ and SRQ (QPs live in
// Device.qps by QPN and share the owner and admission steps).
//
// A creation checks, in this order: the device is open
// (checkOpenLocked), every object its request names is there and the
// owner's (useLocked; openPDLocked for the PD), then the kind has room
// (admitLocked, quota.go). A verb on an existing object first checks it
// is still the one its handle names (live). A destroy (destroy) checks
// that, then that the object is not in use, and only then takes it out
// of its table and releases what it held. What "in use" means and what
// an object holds are the kind's own (the object interface).

// table is a handle → object map with handles counted from 1 and never
// reused while the device lives, so a stale handle cannot reach a new object.
type table[T any] struct {
	m    map[uint32]*T
	next uint32
}

func (t *table[T]) init() { t.m = map[uint32]*T{}; t.next = 1 }

func (t *table[T]) add(v *T) uint32 {
	h := t.next
	t.next++
	t.m[h] = v
	return h
}

func (t *table[T]) get(h uint32) *T { return t.m[h] }
func (t *table[T]) del(h uint32)    { delete(t.m, h) }
func (t *table[T]) len() int        { return len(t.m) }
func (t *table[T]) each(f func(*T)) {
	for _, v := range t.m {
		f(v)
	}
}

// owned is what admission and lookup need of an object: who created it.
type owned interface{ owner() Owner }

// ownedPtr lets the generic steps call owner on the *T a table holds.
type ownedPtr[T any] interface {
	*T
	owned
}

// object is a kind kept in a table: what its destroy needs of it.
type object interface {
	owned
	// usersLocked is how many objects use this one (it may not be
	// destroyed while any do) and the EBUSY reason's format, given the
	// handle and that count.
	usersLocked() (n int, busy string)
	// releaseLocked gives back what the object holds (its PD's count,
	// keys, memory, rings); it has just left its table.
	releaseLocked()
}

// live is the check every verb on an existing object makes first: x is
// still the object its handle names (ENOENT once destroyed).
func (t *table[T]) live(op, kind string, h uint32, x *T) error {
	if t.m[h] != x {
		return errf(op, syscall.ENOENT, "%s %d does not exist", kind, h)
	}
	return nil
}

// idle refuses, with EBUSY and the kind's reason, what must wait until
// nothing uses x, whose handle is h (a destroy; an MR's rereg).
func idle(op string, h uint32, x object) error {
	if n, busy := x.usersLocked(); n > 0 {
		return errf(op, syscall.EBUSY, busy, h, n)
	}
	return nil
}

// destroy is the destroy verb of every kind kept in a table (ibv_dealloc_pd,
// ibv_destroy_cq, ...), under Device.mu: x must still be the object h
// names and not be in use; then it leaves the table and releases what it
// held. Unlike a QP's it does not check that the device is open: Close
// leaves these tables whole and closing a region twice is harmless.
func destroy[T any, P interface {
	*T
	object
}](d *Device, t *table[T], op, kind string, h uint32, x P) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := t.live(op, kind, h, x); err != nil {
		return err
	}
	if err := idle(op, h, x); err != nil {
		return err
	}
	t.del(h)
	x.releaseLocked()
	d.events.withdraw(kind, h) // a CQ's or SRQ's unread events go with it
	return nil
}

// lookup is the Device's exported lookup of an object by handle.
func lookup[T any](d *Device, t *table[T], h uint32) *T {
	d.mu.Lock()
	defer d.mu.Unlock()
	return t.get(h)
}

// useLocked resolves a handle h that a request of owner names (a
// creation's pd=, send_cq=, srq=): EINVAL when nothing has it, EACCES
// when it is another user's. name is the handle as the reasons call it:
// "pd" gives "pd 3 does not exist", "send_cq: cq" "send_cq: cq 3 ...".
func useLocked[T any, P ownedPtr[T]](t *table[T], op, name string, h uint32, owner Owner) (*T, error) {
	v := t.get(h)
	if v == nil {
		return nil, errf(op, syscall.EINVAL, "%s %d does not exist", name, h)
	}
	if !owner.mayUse(P(v).owner()) {
		return nil, errf(op, syscall.EACCES, "%s %d belongs to another user", name, h)
	}
	return v, nil
}

// openPDLocked is how every creation on a PD begins: the device is open,
// then the PD it names is the owner's.
func (d *Device) openPDLocked(op string, h uint32, owner Owner) (*PD, error) {
	if err := d.checkOpenLocked(op); err != nil {
		return nil, err
	}
	return useLocked(&d.pds, op, "pd", h, owner)
}
