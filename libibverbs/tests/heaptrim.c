/* heaptrim: registrations on a heap that glibc trims and regrows (issue
 * 20, item 3). The malloc heap is kept on brk (M_MMAP_THRESHOLD high) and
 * trimmed eagerly (M_TRIM_THRESHOLD 4 KiB, M_TOP_PAD 0). Each round:
 *
 *   - buffers of several sizes are malloc'd at the top of the heap, one
 *     more lives below them through every round (registered once);
 *   - each is registered and moved by RDMA: the peer WRITEs into it and
 *     READs it back, the program WRITEs from it and READs into it;
 *   - half are deregistered, then all are freed (the other half still
 *     registered: a stale MR, as a registration cache keeps one), and
 *     malloc_trim(0) gives the top of the heap back to the kernel;
 *   - the heap grows again by malloc (the same sizes, mostly at the same
 *     addresses) and by sbrk itself (raw brk memory, registered, given
 *     back with sbrk(-n) and grown again at the same address);
 *   - every registration of the regrown memory must succeed, every byte
 *     moved must be right, and deregistering the stale MRs afterwards must
 *     leave the regrown memory as the program wrote it.
 *
 *   heaptrim [-n rounds]
 * Under AddressSanitizer malloc is ASan's (not brk); the sbrk part still
 * runs. */
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "pair.h"

static struct side a, b;
static uint8_t *peer; /* B's buffer: the other end of every transfer */
static struct ibv_mr *peer_mr;
#define PEER_LEN (4u << 20)

static uint8_t pb(unsigned seed, size_t i) { return (uint8_t)((i * 37 + (i >> 9) + seed * 101 + 3) & 0xff); }

static void fill(uint8_t *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = pb(seed, i);
}

static size_t bad_bytes(const uint8_t *p, size_t n, unsigned seed, size_t *first)
{
	size_t bad = 0;

	for (size_t i = 0; i < n; i++)
		if (p[i] != pb(seed, i) && !bad++)
			*first = i;
	return bad;
}

static unsigned seq = 1;

static int op_wait(struct side *s, const char *what, const char *name)
{
	struct ibv_wc wc;
	int st = wait_wc(s, &wc);

	CHECK(st == IBV_WC_SUCCESS, "%s: %s completed with %s", name, what,
	      st < 0 ? "nothing" : ibv_wc_status_str((enum ibv_wc_status)st));
	return st == IBV_WC_SUCCESS ? 0 : -1;
}

#define EXPECT(p, n, seed, name, what)                                                                 \
	do {                                                                                           \
		size_t first_ = 0, bad_ = bad_bytes((p), (n), (seed), &first_);                         \
		CHECK(!bad_, "%s: %s: %zu of %zu bytes wrong, first at %zu (got %02x want %02x)", (name), \
		      (what), bad_, (size_t)(n), first_, (p)[first_], pb((seed), first_));             \
	} while (0)

/* move: the four transfers on buf (n bytes, mr): B WRITEs into it, B
 * READs it, A WRITEs from it, A READs into it. */
static void move(const char *name, uint8_t *buf, size_t n, struct ibv_mr *mr)
{
	unsigned s1 = seq++, s2 = seq++, s3 = seq++;

	fill(peer, n, s1);
	if (post_one(&b, IBV_WR_RDMA_WRITE, peer, (uint32_t)n, peer_mr->lkey, (uintptr_t)buf, mr->rkey, 0, 0) ||
	    op_wait(&b, "WRITE into it", name))
		return;
	EXPECT(buf, n, s1, name, "peer's WRITE");
	fill(buf, n, s2);
	memset(peer, 0, n);
	if (post_one(&b, IBV_WR_RDMA_READ, peer, (uint32_t)n, peer_mr->lkey, (uintptr_t)buf, mr->rkey, 0, 0) ||
	    op_wait(&b, "READ of it", name))
		return;
	EXPECT(peer, n, s2, name, "peer's READ");
	memset(peer, 0, n);
	if (post_one(&a, IBV_WR_RDMA_WRITE, buf, (uint32_t)n, mr->lkey, (uintptr_t)peer, peer_mr->rkey, 0, 0) ||
	    op_wait(&a, "WRITE from it", name))
		return;
	EXPECT(peer, n, s2, name, "WRITE from it");
	fill(peer, n, s3);
	if (post_one(&a, IBV_WR_RDMA_READ, buf, (uint32_t)n, mr->lkey, (uintptr_t)peer, peer_mr->rkey, 0, 0) ||
	    op_wait(&a, "READ into it", name))
		return;
	EXPECT(buf, n, s3, name, "READ into it");
}

static struct ibv_mr *reg(const char *name, void *p, size_t n)
{
	struct ibv_mr *mr = ibv_reg_mr(a.pd, p, n, PAIR_ACCESS);

	CHECK(mr, "%s: ibv_reg_mr(%p, %zu): %s", name, p, n, strerror(errno));
	return mr;
}

#define NB 5
static const size_t sizes[NB] = {70000, 300000, (1 << 20) + 123, 40960, (2 << 20) + 5};

int main(int argc, char **argv)
{
	int rounds = 30, opt, ndev;

	while ((opt = getopt(argc, argv, "n:")) != -1) {
		if (opt != 'n') {
			fprintf(stderr, "usage: heaptrim [-n rounds]\n");
			return 2;
		}
		rounds = atoi(optarg);
	}
#if !defined(__SANITIZE_ADDRESS__)
	/* glibc's heap on brk, trimmed eagerly (ASan's allocator has no
	 * mallopt: there only the sbrk part below tests the heap) */
	CHECK(mallopt(M_MMAP_THRESHOLD, 64 << 20), "mallopt(M_MMAP_THRESHOLD)");
	CHECK(mallopt(M_TRIM_THRESHOLD, 4096), "mallopt(M_TRIM_THRESHOLD)");
	CHECK(mallopt(M_TOP_PAD, 0), "mallopt(M_TOP_PAD)");
#endif
	if (pair_open(&a, &b, 4, &ndev))
		return 1;
	peer = mmap(NULL, PEER_LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (peer == MAP_FAILED || !(peer_mr = ibv_reg_mr(b.pd, peer, PEER_LEN, PAIR_ACCESS)))
		return 1;

	/* one buffer below everything, registered for the whole run */
	uint8_t *keep = malloc(100000);
	/* and below the test's buffers a free chunk the library's own small
	 * allocations (its records of MRs) come from, so that they do not
	 * sit at the top of the heap and keep glibc from trimming it */
	void *pad = malloc(32 << 10), *fence = malloc(64);
	free(pad);
	struct ibv_mr *keep_mr = reg("kept buffer", keep, 100000);
	if (!keep || !keep_mr)
		return 1;
	uint8_t *first_addr[NB] = {0};
	int same_addr = 0, trimmed = 0, sbrk_same = 0;

	for (int r = 0; r < rounds; r++) {
		uint8_t *buf[NB];
		struct ibv_mr *mr[NB], *stale[NB] = {0};
		char name[64];

		for (int i = 0; i < NB; i++) {
			buf[i] = malloc(sizes[i]);
			if (!buf[i])
				return 1;
			if (!r)
				first_addr[i] = buf[i];
			else if (buf[i] == first_addr[i])
				same_addr++;
		}
		for (int i = 0; i < NB; i++) {
			snprintf(name, sizeof(name), "round %d: heap buffer %d (%zu B at %p)", r, i, sizes[i],
				 (void *)buf[i]);
			mr[i] = reg(name, buf[i], sizes[i]);
			if (mr[i])
				move(name, buf[i], sizes[i], mr[i]);
		}
		move("kept buffer", keep, 100000, keep_mr);
		/* half deregistered, half left registered (stale once freed) */
		for (int i = 0; i < NB; i++) {
			if (!mr[i])
				continue;
			if (i % 2 == r % 2)
				CHECK(!ibv_dereg_mr(mr[i]), "round %d: ibv_dereg_mr %d", r, i);
			else
				stale[i] = mr[i];
		}
		void *top = sbrk(0);
		for (int i = NB - 1; i >= 0; i--)
			free(buf[i]);
		malloc_trim(0);
		if ((uintptr_t)sbrk(0) < (uintptr_t)top)
			trimmed++;

		/* raw brk growth: register, move, give back, grow at the same
		 * address, register again (the first MR still registered) */
		const size_t bn = (1 << 20) + 3 * 4096;
		uint8_t *q = sbrk((intptr_t)bn);
		if (q == (void *)-1)
			return 1;
		snprintf(name, sizeof(name), "round %d: sbrk memory (%p)", r, (void *)q);
		struct ibv_mr *q1 = reg(name, q + 100, bn - 200);
		if (q1)
			move(name, q + 100, bn - 200, q1);
		if (r % 2 && q1) {
			CHECK(!ibv_dereg_mr(q1), "round %d: ibv_dereg_mr(sbrk)", r);
			q1 = NULL;
		}
		if (sbrk(-(intptr_t)bn) == (void *)-1)
			return 1;
		uint8_t *q2 = sbrk((intptr_t)bn);
		if (q2 == q)
			sbrk_same++;
		/* fresh brk memory reads as zeros, whatever was there */
		size_t nz = 0;
		for (size_t i = 0; i < bn; i++)
			nz += q2[i] != 0;
		CHECK(!nz, "round %d: %zu bytes of sbrk memory given back and regrown are not zero", r, nz);
		snprintf(name, sizeof(name), "round %d: sbrk memory regrown (%p)", r, (void *)q2);
		struct ibv_mr *q3 = reg(name, q2 + 64, bn - 64);
		if (q3) {
			move(name, q2 + 64, bn - 64, q3);
			unsigned s = seq++;
			fill(q2, bn, s);
			if (q1) /* the stale MR of the memory given back */
				CHECK(!ibv_dereg_mr(q1), "round %d: ibv_dereg_mr(stale sbrk)", r);
			EXPECT(q2, bn, s, name, "after the stale MR's deregistration");
			move(name, q2 + 64, bn - 64, q3);
			CHECK(!ibv_dereg_mr(q3), "round %d: ibv_dereg_mr(sbrk regrown)", r);
		}
		if (sbrk(-(intptr_t)bn) == (void *)-1)
			return 1;

		/* regrow by malloc: the same sizes, registered again while the
		 * stale MRs are still there; then the stale ones go */
		for (int i = 0; i < NB; i++) {
			buf[i] = malloc(sizes[i]);
			snprintf(name, sizeof(name), "round %d: regrown heap buffer %d (%zu B at %p%s)", r, i, sizes[i],
				 (void *)buf[i], buf[i] == first_addr[i] ? ", as before" : "");
			mr[i] = reg(name, buf[i], sizes[i]);
			if (mr[i])
				move(name, buf[i], sizes[i], mr[i]);
		}
		unsigned s = seq++;
		for (int i = 0; i < NB; i++)
			fill(buf[i], sizes[i], s + (unsigned)i);
		for (int i = 0; i < NB; i++)
			if (stale[i])
				CHECK(!ibv_dereg_mr(stale[i]), "round %d: ibv_dereg_mr(stale %d)", r, i);
		for (int i = 0; i < NB; i++) {
			snprintf(name, sizeof(name), "round %d: regrown heap buffer %d", r, i);
			EXPECT(buf[i], sizes[i], s + (unsigned)i, name, "after the stale MRs' deregistration");
			if (mr[i]) {
				move(name, buf[i], sizes[i], mr[i]);
				CHECK(!ibv_dereg_mr(mr[i]), "round %d: ibv_dereg_mr(regrown %d)", r, i);
			}
		}
		for (int i = NB - 1; i >= 0; i--)
			free(buf[i]);
		malloc_trim(0);
		if (failures > 20)
			break;
	}
	CHECK(!ibv_dereg_mr(keep_mr), "ibv_dereg_mr(kept)");
	free(keep);
	free(fence);
#if !defined(__SANITIZE_ADDRESS__)
	CHECK(trimmed > 0, "malloc_trim never shrank the heap (without registrations it shrinks every round)");
#endif
	/* Whether malloc hands a freed buffer's address out again depends on
	 * what else the heap holds (the library's MR structs among it, as
	 * rdma-core's have), so re-registration at the same address is
	 * counted here and required of the sbrk memory below, whose address
	 * the test controls. */
	CHECK(sbrk_same > 0, "sbrk never regrew at the same address");
	printf("heaptrim: %d rounds, %s: the heap trimmed in %d, %d re-registrations at a buffer's first "
	       "address, sbrk regrown in place %d times; %d failures\n",
	       rounds, ndev > 1 ? "two devices" : "one device", trimmed, same_addr, sbrk_same, failures);
	ibv_dereg_mr(peer_mr);
	munmap(peer, PEER_LEN);
	side_close(&b);
	side_close(&a);
	return failures != 0;
}
