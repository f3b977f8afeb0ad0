package device

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"
)

// Keys. An lkey or rkey is a capability: whoever knows it and can reach a
// QP of the key's PD can use the memory behind it. So a key must not be
// guessable from anything else a user can see (the object's handle, the
// keys of other objects, the order of registrations).
//
// A key is tag << 8 | key byte. The tag (24 bits) names the key table
// entry; the key byte is the low 8 bits, which a memory window's bind
// sets from the work request (IBA's consumer-owned key part, as ibv_bind_mw
// has it) and which an MR gets at random. rdmavt and rxe use the same
// split, with the upper 24 bits being a plain table index; here the tag is
// the image of an allocation counter under a secret permutation of the
// 24-bit space, keyed per device from crypto/rand, and the table is a map
// from tag to entry. So:
//
//   - tags carry no order: consecutive registrations give unrelated tags,
//     and one user's keys say nothing about another's;
//   - a tag comes back only after 2^24 further allocations (the
//     permutation visits every tag once per cycle of the counter), and a
//     stale key then still needs its random key byte to match: a key that
//     was freed does not name a new object in any realistic lifetime;
//   - an MR's 32 bits are all unpredictable; a window's key byte is its
//     owner's choice, its tag unpredictable.
type keyTable struct {
	m    map[uint32]keyEntry // by tag
	perm tagPerm
	next uint32 // allocation counter, 24 bits
}

// keyEntry is one entry of the key table: an MR or an MW.
type keyEntry struct {
	mr *MR
	mw *MW
}

const tagSpace = 1 << 24

func (t *keyTable) init() {
	t.m = map[uint32]keyEntry{}
	t.perm.init()
	var b [4]byte
	rand.Read(b[:])
	t.next = binary.LittleEndian.Uint32(b[:]) % tagSpace
}

// alloc reserves a fresh tag for e. Tag 0 is never a key (key 0 names
// nothing), and a tag still in use (an object that outlived a whole cycle
// of the counter) is skipped. The caller bounds the table far below 2^24.
func (t *keyTable) alloc(e keyEntry) uint32 {
	for {
		c := t.next
		t.next = (t.next + 1) % tagSpace
		tag := t.perm.apply(c)
		if tag == 0 {
			continue
		}
		if _, used := t.m[tag]; used {
			continue
		}
		t.m[tag] = e
		return tag
	}
}

// lookup returns the entry a key's tag names (the caller compares the
// whole key with the object's).
func (t *keyTable) lookup(key uint32) (keyEntry, bool) {
	e, ok := t.m[key>>8]
	return e, ok
}

func (t *keyTable) free(tag uint32) { delete(t.m, tag) }

// tagPerm is a secret permutation of [0, 2^24): a balanced Feistel
// network on two 12-bit halves whose round function is AES-128 under a
// random key. Ten rounds: small-domain Feistel networks need more rounds
// than the textbook four to resist an observer who sees many outputs.
type tagPerm struct {
	block cipher.Block
}

const tagRounds = 10

func (p *tagPerm) init() {
	var k [16]byte
	rand.Read(k[:])
	b, err := aes.NewCipher(k[:])
	if err != nil {
		panic(err) // a 16-byte key is always valid
	}
	p.block = b
}

func (p *tagPerm) apply(x uint32) uint32 {
	l, r := x>>12&0xFFF, x&0xFFF
	var in, out [16]byte
	for round := 0; round < tagRounds; round++ {
		in[0] = byte(round)
		binary.LittleEndian.PutUint16(in[1:], uint16(r))
		p.block.Encrypt(out[:], in[:])
		f := uint32(binary.LittleEndian.Uint16(out[:])) & 0xFFF
		l, r = r, l^f
	}
	return l<<12 | r
}

// randomKeyByte is an MR's key byte.
func randomKeyByte() uint32 {
	var b [1]byte
	rand.Read(b[:])
	return uint32(b[0])
}
