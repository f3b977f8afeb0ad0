/* mrrace: no byte the device moves is lost to a registration of a
 * neighbouring buffer (issue 20, item 1). One malloc holds two buffers
 * that share a page:
 *
 *   base = malloc(2*S + 64); d1 = base + 16; d2 = d1 + S
 *   mr1 = ibv_reg_mr(d1, S); post an RDMA WRITE (or READ) of S bytes
 *   whose target is d1; ibv_reg_mr(d2, S) while it is in flight; wait;
 *   every byte of d1 must be the data moved, every byte of d2 its own.
 *
 * WRITE: side B writes from its buffer into d1 (mr1's rkey). READ: side A
 * reads B's buffer into d1 (mr1's lkey). One device: two QPs of one
 * context; two devices (RDMAFS_DEVICE_MOUNT=A:B): d1 and d2 on the first,
 * the data from the last. With -t a third thread stores a counter into
 * the page d1 and d2 share (d2's part of it) while ibv_reg_mr(d2) runs;
 * every slot must hold the last value the thread stored in it.
 *
 *   mrrace [-s MiB] [-n iterations] [-r] [-t]
 *     -r   RDMA READ instead of WRITE
 *     -t   the storing thread as well
 * Exit 0 when no byte was lost; otherwise the first bad iterations are
 * printed (how many bytes, the first, got and want). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "pair.h"

static uint64_t now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* The data of iteration it in a buffer tagged tag: 8-byte words (every
 * buffer here is 8-aligned and a multiple of 8 long), word k distinct in
 * every byte from its neighbours and from the other tags' and iterations'. */
static inline uint64_t pat(uint64_t it, uint64_t tag, size_t k)
{
	return ((uint64_t)k * 0x0101010101010101ull + 1) ^ (it * 0x9e3779b97f4a7c15ull) ^ (tag * 0x5851f42d4c957f2dull);
}

static inline uint8_t pat_byte(uint64_t it, uint64_t tag, size_t i)
{
	uint64_t w = pat(it, tag, i / 8);
	uint8_t b[8];

	memcpy(b, &w, 8);
	return b[i % 8];
}

static void fill(uint8_t *p, size_t n, uint64_t it, uint64_t tag)
{
	uint64_t *w = (uint64_t *)p;

	for (size_t k = 0; k < n / 8; k++)
		w[k] = pat(it, tag, k);
}

/* bad bytes of p[from, n) against pattern (it, tag) (from a multiple of
 * 8); *first the first bad offset */
static size_t check(const uint8_t *p, size_t from, size_t n, uint64_t it, uint64_t tag, size_t *first)
{
	const uint64_t *w = (const uint64_t *)p;
	size_t bad = 0;

	for (size_t k = from / 8; k < n / 8; k++) {
		if (w[k] == pat(it, tag, k))
			continue;
		for (size_t i = 8 * k; i < 8 * k + 8; i++)
			if (p[i] != pat_byte(it, tag, i)) {
				if (!bad)
					*first = i;
				bad++;
			}
	}
	return bad;
}

/* the storing thread: slots in d2's part of the shared page, written in
 * rounds, slot by slot, pace_ns apart, until stop; last[] is what it
 * stored last in each (kept in its own memory). */
struct storer {
	volatile uint64_t *slot;
	uint64_t last[512];
	int nslots;
	uint64_t pace_ns;
	atomic_int go, stop;
	uint64_t stores;
};

static void *store_loop(void *arg)
{
	struct storer *st = arg;
	uint64_t c = 0;

	while (!atomic_load(&st->go))
		;
	for (;;) {
		for (int j = 0; j < st->nslots; j++) {
			c++;
			uint64_t v = 0x5700000000000000ull | c;
			st->slot[j] = v;
			st->last[j] = v;
			uint64_t t0 = now_ns();
			while (now_ns() - t0 < st->pace_ns)
				;
			if (atomic_load(&st->stop)) {
				st->stores = c;
				return NULL;
			}
		}
	}
}

int main(int argc, char **argv)
{
	size_t mib = 4;
	int iters = 200, use_read = 0, threaded = 0, private_slots = 0, opt, ndev;

	while ((opt = getopt(argc, argv, "s:n:rtp")) != -1) {
		switch (opt) {
		case 's': mib = strtoul(optarg, NULL, 0); break;
		case 'n': iters = atoi(optarg); break;
		case 'r': use_read = 1; break;
		case 't': threaded = 1; break;
		case 'p': threaded = private_slots = 1; break;
		default:
			fprintf(stderr, "usage: mrrace [-s MiB] [-n iterations] [-r] [-t | -p]\n");
			return 2;
		}
	}
	const size_t S = mib << 20;
	struct side a, b;

	if (pair_open(&a, &b, 4, &ndev))
		return 1;
	uint8_t *base = malloc(2 * S + 64);
	uint8_t *src = malloc(S);
	if (!base || !src)
		return 1;
	uint8_t *d1 = base + 16, *d2 = d1 + S;
	struct ibv_mr *smr = ibv_reg_mr(b.pd, src, S, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
	if (!smr) {
		perror("ibv_reg_mr(src)");
		return 1;
	}
	const size_t pg = (size_t)sysconf(_SC_PAGESIZE);
	uintptr_t shared_end = ((uintptr_t)d2 + pg) & ~(uintptr_t)(pg - 1);
	/* -t: the slots are in the page d1 and d2 share (already registered
	 * with d1); -p: in d2's next page, private until ibv_reg_mr(d2)
	 * re-backs it, so the stores race the first copy of that page */
	struct storer st = {.slot = (volatile uint64_t *)(private_slots ? shared_end
									 : (((uintptr_t)d2 + 7) & ~(uintptr_t)7))};
	st.nslots = private_slots ? (int)(pg / 8) : (int)((shared_end - (uintptr_t)st.slot) / 8);
	if (st.nslots > 512)
		st.nslots = 512;
	uint64_t reg_ns_sum = 0;
	int bad_iters = 0, reported = 0;
	uint64_t t_start = now_ns();

	printf("mrrace: %s of %zu MiB into d1 = malloc+16, ibv_reg_mr(d1+S) in flight, %d iterations, %s%s\n",
	       use_read ? "READ" : "WRITE", mib, iters, ndev > 1 ? "across two devices" : "on one device",
	       private_slots ? ", a thread storing into d2's first private page"
	       : threaded    ? ", a thread storing into the shared page"
			     : "");
	for (int it = 0; it < iters; it++) {
		pthread_t th;
		fill(src, S, (uint64_t)it, 1);
		fill(d1, S, (uint64_t)it, 2); /* not what arrives */
		fill(d2, S, (uint64_t)it, 3);
		struct ibv_mr *mr1 = ibv_reg_mr(a.pd, d1, S, PAIR_ACCESS);
		if (!mr1) {
			CHECK(0, "iter %d: ibv_reg_mr(d1): %s", it, strerror(errno));
			break;
		}
		if (threaded) {
			/* a slot the thread does not reach this time keeps the
			 * pattern just filled in */
			for (int j = 0; j < st.nslots; j++)
				st.last[j] = st.slot[j];
			atomic_store(&st.go, 0);
			atomic_store(&st.stop, 0);
			/* a round of the slots takes about twice a registration */
			st.pace_ns = it ? 2 * reg_ns_sum / (uint64_t)it / (uint64_t)st.nslots : 2000;
			if (pthread_create(&th, NULL, store_loop, &st))
				return 1;
		}
		int err = use_read ? post_one(&a, IBV_WR_RDMA_READ, d1, (uint32_t)S, mr1->lkey, (uintptr_t)src,
					      smr->rkey, 0, 0)
				   : post_one(&b, IBV_WR_RDMA_WRITE, src, (uint32_t)S, smr->lkey, (uintptr_t)d1,
					      mr1->rkey, 0, 0);
		if (err) {
			CHECK(0, "iter %d: post: %s", it, strerror(err));
			break;
		}
		/* vary where in the transfer the registration falls */
		uint64_t t0 = now_ns();
		while (now_ns() - t0 < (uint64_t)(it % 5) * 50000)
			;
		if (threaded)
			atomic_store(&st.go, 1);
		t0 = now_ns();
		struct ibv_mr *mr2 = ibv_reg_mr(a.pd, d2, S, PAIR_ACCESS);
		reg_ns_sum += now_ns() - t0;
		if (threaded) {
			atomic_store(&st.stop, 1);
			pthread_join(th, NULL);
		}
		CHECK(mr2, "iter %d: ibv_reg_mr(d2) in flight: %s", it, strerror(errno));
		struct ibv_wc wc;
		int status = wait_wc(use_read ? &a : &b, &wc);
		CHECK(status == IBV_WC_SUCCESS, "iter %d: %s completed with %s", it, use_read ? "READ" : "WRITE",
		      status < 0 ? "nothing" : ibv_wc_status_str((enum ibv_wc_status)status));
		if (status < 0)
			return 1;
		/* the thread's stores first: they are in d2's head */
		int lost_stores = 0, first_lost = -1;
		if (threaded)
			for (int j = 0; j < st.nslots; j++)
				if (st.slot[j] != st.last[j]) {
					if (first_lost < 0)
						first_lost = j;
					lost_stores++;
				}
		size_t f1 = 0, f2 = 0;
		size_t bad1 = check(d1, 0, S, (uint64_t)it, 1, &f1);
		size_t bad2 = 0;
		if (threaded) { /* the slots hold the thread's values; the rest of d2 its pattern */
			size_t head = (uintptr_t)(st.slot + st.nslots) - (uintptr_t)d2;
			bad2 = check(d2, head, S, (uint64_t)it, 3, &f2);
		} else {
			bad2 = check(d2, 0, S, (uint64_t)it, 3, &f2);
		}
		if (bad1 || bad2 || lost_stores) {
			bad_iters++;
			if (reported++ < 10) {
				if (bad1)
					fprintf(stderr, "iter %d: d1: %zu bad bytes, first at %zu (got %02x want %02x)\n", it,
						bad1, f1, d1[f1], pat_byte((uint64_t)it, 1, f1));
				if (bad2)
					fprintf(stderr, "iter %d: d2: %zu bad bytes, first at %zu (got %02x want %02x)\n", it,
						bad2, f2, d2[f2], pat_byte((uint64_t)it, 3, f2));
				if (lost_stores)
					fprintf(stderr,
						"iter %d: %d of the thread's %d slots lost their last store, first slot %d "
						"(got %#llx want %#llx)\n",
						it, lost_stores, st.nslots, first_lost,
						(unsigned long long)st.slot[first_lost],
						(unsigned long long)st.last[first_lost]);
			}
		}
		if (mr2)
			CHECK(!ibv_dereg_mr(mr2), "iter %d: ibv_dereg_mr(mr2)", it);
		CHECK(!ibv_dereg_mr(mr1), "iter %d: ibv_dereg_mr(mr1)", it);
		if (failures > 20)
			break;
	}
	CHECK(bad_iters == 0, "%d of %d iterations lost bytes", bad_iters, iters);
	printf("mrrace: %s %zu MiB %s%s: %d iterations in %.1f s, %d of them lost bytes, mean ibv_reg_mr(d2) %.0f us\n",
	       use_read ? "READ" : "WRITE", mib, ndev > 1 ? "two devices" : "one device", threaded ? " +thread" : "",
	       iters, (double)(now_ns() - t_start) / 1e9, bad_iters, (double)reg_ns_sum / iters / 1000.0);
	ibv_dereg_mr(smr);
	free(src);
	free(base);
	side_close(&b);
	side_close(&a);
	return failures != 0;
}
