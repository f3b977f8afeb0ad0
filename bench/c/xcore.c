/* xcore: the cross-core limit of rdmafs's data path (issue #25).
 *
 * What is left of "a WQE posted on one core, executed on another,
 * completed back" when nothing else is done: no validation, no keys, no
 * transport. A producer thread (the program) posts 64-byte send WQEs into
 * a 128-slot ring with ring/'s layout (rdmafs-abi.h: the 256-byte header,
 * free-running u32 producer and consumer indices on cache lines of their
 * own, release stores and acquire loads); a consumer thread (the device)
 * takes each, does its 8-byte store at remote_addr and writes a 64-byte
 * CQE into a CQ ring with the same layout for every 64th (the signalled
 * ones). That is perftest's loop, with the device as a second thread.
 *
 *   xcore bw SECONDS    8-byte WRITE rate: at most 128 WQEs outstanding,
 *                       every 64th signalled, credits from the CQEs
 *   xcore lat SECONDS   one-way time: rdmafs bench --mode lat's ping-pong,
 *                       two WRITEs a round (there A's into B's memory and
 *                       back, polled by one thread), each polled for at its
 *                       target; half a round, median over the rounds
 *
 * It prints one JSON line with the keys rdmafs bench --json uses for the
 * same figures (msg_rate_mpps; t_typical_us, t_min_us, t_avg_us), so that
 * scripts/bench-vs-peers.sh reads both alike. Nothing is pinned, as
 * nothing is for rdmafs bench and its daemon. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ring.h" /* rdmafs-abi.h and the library's index and field accessors */

enum {
	SLOTS = 128, /* perftest's tx depth, and the SQ's size */
	CQ_MOD = 64, /* every 64th WQE signalled */
	CQ_SLOTS = 16,
	WR_WRITE = 0, /* IBV_WR_RDMA_WRITE */
	SEND_SIGNALED = 2, /* IBV_SEND_SIGNALED */
};

_Static_assert(RDMAFS_SEND_HEADER_SIZE == 64, "a send WQE without SGEs is one 64-byte slot");
_Static_assert(RDMAFS_CQE_SIZE == 64, "a CQE is 64 bytes");

struct ring {
	uint8_t *base; /* the header; the slots follow it */
	uint32_t *prod, *cons;
	uint32_t slot_size, mask;
};

static void ring_init(struct ring *r, uint32_t slots, uint32_t slot_size)
{
	size_t len = RDMAFS_HEADER_SIZE + (size_t)slots * slot_size;
	if (posix_memalign((void **)&r->base, 4096, len) != 0) {
		perror("posix_memalign");
		exit(1);
	}
	memset(r->base, 0, len);
	memcpy(r->base + RDMAFS_OFF_MAGIC, &(uint32_t){RDMAFS_MAGIC}, 4);
	memcpy(r->base + RDMAFS_OFF_SLOT_SIZE, &slot_size, 4);
	memcpy(r->base + RDMAFS_OFF_SLOT_COUNT, &slots, 4);
	r->prod = (uint32_t *)(r->base + RDMAFS_OFF_PRODUCER);
	r->cons = (uint32_t *)(r->base + RDMAFS_OFF_CONSUMER);
	r->slot_size = slot_size;
	r->mask = slots - 1;
}

static inline uint8_t *slot(struct ring *r, uint32_t i)
{
	return r->base + RDMAFS_HEADER_SIZE + (size_t)(i & r->mask) * r->slot_size;
}

#if defined(__x86_64__) || defined(__i386__)
#define cpu_pause() __builtin_ia32_pause()
#else
#define cpu_pause() __atomic_signal_fence(__ATOMIC_SEQ_CST)
#endif

/* A wait spins; one that lasts (the other thread is off the CPU, on a
 * machine with more runnable threads than cores) yields it, so that the
 * figure is not a scheduler's time slice. Waits in a quiet run end long
 * before. */
#define cpu_relax(spins)                        \
	do {                                    \
		if (++(spins) % 4096 == 0)      \
			sched_yield();          \
		else                            \
			cpu_pause();            \
	} while (0)


static struct ring sq, cq;
static int stop; /* set by the producer when it is done */

/* The two 8-byte words the WRITEs store into, each on its own line: the
 * "remote" memory of the ping-pong's two sides. */
static _Alignas(64) uint64_t words[16];

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The device: take each WQE, do its store, publish the consumer index,
 * and for a signalled one write a CQE. */
static void *consumer(void *arg)
{
	(void)arg;
	uint32_t head = 0, cqhead = 0, spins = 0;
	for (;;) {
		uint32_t prod = rf_load_acq(sq.prod);
		if (prod == head) {
			if (__atomic_load_n(&stop, __ATOMIC_RELAXED))
				return NULL;
			cpu_relax(spins);
			continue;
		}
		for (; head != prod; head++) {
			uint8_t *w = slot(&sq, head);
			uint64_t *dst = (uint64_t *)(uintptr_t)rf_get64(w, RDMAFS_SEND_OFF_REMOTE_ADDR);
			__atomic_store_n(dst, rf_get64(w, RDMAFS_SEND_OFF_COMPARE_ADD), __ATOMIC_RELEASE);
			if (rf_get32(w, RDMAFS_SEND_OFF_FLAGS) & SEND_SIGNALED) {
				rf_store_rel(sq.cons, head + 1);
				uint8_t *c = slot(&cq, cqhead);
				rf_put64(c, RDMAFS_CQE_OFF_WRID, rf_get64(w, RDMAFS_SEND_OFF_WRID));
				c[RDMAFS_CQE_OFF_STATUS] = 0;
				c[RDMAFS_CQE_OFF_OPCODE] = 1; /* IBV_WC_RDMA_WRITE */
				rf_put32(c, RDMAFS_CQE_OFF_BYTE_LEN, 8);
				rf_store_rel(cq.prod, ++cqhead);
			}
		}
		rf_store_rel(sq.cons, head);
	}
}

/* The program's side: its private indices, as the library keeps them. */
static uint32_t sq_head, sq_cons_seen, cq_head;
static uint64_t posted, completed;

/* post writes one WQE (an 8-byte WRITE of v to dst) and publishes it. The
 * ring's free space comes from the consumer index, read only when the
 * copy in hand says it is full. */
static void post(uint64_t *dst, uint64_t v)
{
	uint32_t spins = 0;
	while (sq_head - sq_cons_seen >= SLOTS) {
		sq_cons_seen = rf_load_acq(sq.cons);
		if (sq_head - sq_cons_seen >= SLOTS)
			cpu_relax(spins);
	}
	uint8_t *w = slot(&sq, sq_head);
	rf_put64(w, RDMAFS_SEND_OFF_WRID, posted);
	rf_put32(w, RDMAFS_SEND_OFF_FLAGS, (posted + 1) % CQ_MOD == 0 ? SEND_SIGNALED : 0);
	w[RDMAFS_SEND_OFF_OPCODE] = WR_WRITE;
	w[RDMAFS_SEND_OFF_NUM_SGE] = 0;
	rf_put64(w, RDMAFS_SEND_OFF_REMOTE_ADDR, (uint64_t)(uintptr_t)dst);
	rf_put64(w, RDMAFS_SEND_OFF_COMPARE_ADD, v);
	rf_store_rel(sq.prod, ++sq_head);
	posted++;
}

/* poll takes the CQEs there are; each completes CQ_MOD WQEs. */
static void poll_cq(void)
{
	uint32_t prod = rf_load_acq(cq.prod);
	for (; cq_head != prod; cq_head++) {
		if (slot(&cq, cq_head)[RDMAFS_CQE_OFF_STATUS] != 0) {
			fprintf(stderr, "xcore: bad CQE\n");
			exit(1);
		}
		completed += CQ_MOD;
	}
	rf_store_rel(cq.cons, cq_head);
}

static void bw(double secs)
{
	uint64_t *dst = &words[0];
	uint64_t t0 = now_ns(), end = t0 + (uint64_t)(secs * 1e9), t1;
	uint32_t spins = 0;
	for (;;) {
		/* perftest's credit: at most tx depth outstanding. */
		while (posted - completed >= SLOTS) {
			poll_cq();
			if (posted - completed >= SLOTS)
				cpu_relax(spins);
		}
		post(dst, posted);
		if ((posted & 1023) == 0 && now_ns() >= end)
			break;
	}
	/* The WQEs still outstanding complete too (the last one may be
	 * unsignalled: its store is what says it is done). */
	while (__atomic_load_n(dst, __ATOMIC_ACQUIRE) != posted - 1)
		cpu_relax(spins);
	t1 = now_ns();
	double s = (double)(t1 - t0) / 1e9;
	printf("{\"op\":\"xcore\",\"mode\":\"bw\",\"size\":8,\"wrs\":%llu,\"seconds\":%.6f,\"msg_rate_mpps\":%.6f}\n",
	       (unsigned long long)posted, s, (double)posted / s / 1e6);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static void lat(double secs)
{
	size_t cap = 1 << 22, n = 0;
	uint64_t *rounds = malloc(cap * sizeof *rounds);
	if (!rounds) {
		perror("malloc");
		exit(1);
	}
	uint64_t *a = &words[0], *b = &words[8];
	uint64_t end = now_ns() + (uint64_t)(secs * 1e9);
	uint32_t spins = 0;
	for (uint64_t i = 1; n < cap; i++) {
		uint64_t t0 = now_ns();
		/* A's WRITE into B's word, polled there; B's back into A's. */
		post(b, i);
		while (__atomic_load_n(b, __ATOMIC_ACQUIRE) != i)
			cpu_relax(spins);
		post(a, i);
		while (__atomic_load_n(a, __ATOMIC_ACQUIRE) != i)
			cpu_relax(spins);
		uint64_t t1 = now_ns();
		rounds[n++] = t1 - t0;
		poll_cq();
		if (t1 >= end)
			break;
	}
	qsort(rounds, n, sizeof *rounds, cmp_u64);
	double sum = 0;
	for (size_t i = 0; i < n; i++)
		sum += (double)rounds[i];
	/* One way: half a round, as rdmafs bench counts a WRITE ping-pong. */
	printf("{\"op\":\"xcore\",\"mode\":\"lat\",\"size\":8,\"iters\":%zu,\"t_min_us\":%.4f,\"t_typical_us\":%.4f,\"t_avg_us\":%.4f,\"t_99_us\":%.4f}\n",
	       n, (double)rounds[0] / 2000, (double)rounds[n / 2] / 2000, sum / (double)n / 2000,
	       (double)rounds[(size_t)((double)n * 0.99)] / 2000);
	free(rounds);
}

int main(int argc, char **argv)
{
	if (argc != 3 || (strcmp(argv[1], "bw") != 0 && strcmp(argv[1], "lat") != 0)) {
		fprintf(stderr, "usage: xcore bw|lat SECONDS\n");
		return 2;
	}
	char *endp;
	errno = 0;
	double secs = strtod(argv[2], &endp);
	if (errno != 0 || *endp != '\0' || !(secs > 0 && secs <= 3600)) {
		fprintf(stderr, "xcore: SECONDS must be a number in (0, 3600]: %s\n", argv[2]);
		return 2;
	}
	ring_init(&sq, SLOTS, RDMAFS_SEND_HEADER_SIZE);
	ring_init(&cq, CQ_SLOTS, RDMAFS_CQE_SIZE);
	pthread_t t;
	int err = pthread_create(&t, NULL, consumer, NULL);
	if (err != 0) {
		fprintf(stderr, "xcore: pthread_create: %s\n", strerror(err));
		return 1;
	}
	if (strcmp(argv[1], "bw") == 0)
		bw(secs);
	else
		lat(secs);
	__atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
	pthread_join(t, NULL);
	return 0;
}
