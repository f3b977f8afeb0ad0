/* The mapped rings of ring/'s ABI (ring/doc.go is the manual): a 256-byte
 * header, then slot_count slots. Indices are free-running u32s stored with
 * single aligned 32-bit atomic stores; the slots are plain memory. The
 * geometry is copied at map time and never read again from the header,
 * which the daemon's side could rewrite. */
#ifndef RDMAFS_RING_H
#define RDMAFS_RING_H

#include <stdint.h>
#include <stddef.h>

#include "rdmafs-abi.h"

struct rf_ring {
	uint8_t *base;
	size_t maplen;
	int fd; /* the ring file; a write() to it is the queue's doorbell */
	uint32_t slot_size, slot_count, mask;
	uint8_t *data;
	uint32_t *prod, *cons, *flags, *event, *armed;
	uint32_t head; /* private index of the side we own */
};

/* rf_ring_map opens and maps a ring file and checks its header; 0 or an
 * errno. */
int rf_ring_map(int dirfd, const char *path, uint32_t kind, struct rf_ring *r);
void rf_ring_unmap(struct rf_ring *r);

static inline uint32_t rf_load_acq(const uint32_t *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
static inline void rf_store_rel(uint32_t *p, uint32_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }

static inline uint8_t *rf_slot(struct rf_ring *r, uint32_t idx)
{
	return r->data + (size_t)(idx & r->mask) * r->slot_size;
}

/* Free slots for a producer; -1 if the consumer index is impossible. */
static inline int64_t rf_prod_free(struct rf_ring *r)
{
	uint32_t used = r->head - rf_load_acq(r->cons);
	if (used > r->slot_count)
		return -1;
	return r->slot_count - used;
}

static inline void rf_prod_publish(struct rf_ring *r)
{
	rf_store_rel(r->prod, r->head);
}

/* A producer after publishing: does the consumer want a doorbell? The
 * seq_cst fence pairs with the daemon's between setting NEED_WAKEUP and
 * re-reading the producer index (ring/doc.go, memory ordering 4). */
static inline int rf_need_wakeup(struct rf_ring *r)
{
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	return __atomic_load_n(r->flags, __ATOMIC_RELAXED) & RDMAFS_FLAG_NEED_WAKEUP;
}

static inline uint32_t rf_get32(const uint8_t *p, size_t off)
{
	uint32_t v;
	__builtin_memcpy(&v, p + off, 4);
	return v; /* the ABI is little-endian, as is every host we build for */
}
static inline uint64_t rf_get64(const uint8_t *p, size_t off)
{
	uint64_t v;
	__builtin_memcpy(&v, p + off, 8);
	return v;
}
static inline uint16_t rf_get16(const uint8_t *p, size_t off)
{
	uint16_t v;
	__builtin_memcpy(&v, p + off, 2);
	return v;
}
static inline void rf_put32(uint8_t *p, size_t off, uint32_t v) { __builtin_memcpy(p + off, &v, 4); }
static inline void rf_put64(uint8_t *p, size_t off, uint64_t v) { __builtin_memcpy(p + off, &v, 8); }
static inline void rf_put16(uint8_t *p, size_t off, uint16_t v) { __builtin_memcpy(p + off, &v, 2); }

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the rdmafs ring ABI is little-endian; this library assumes a little-endian host"
#endif

#endif
