/* threads: the library's locking under concurrent use, as libibverbs
 * promises it. Four threads post RDMA WRITEs to one RC QP at once (each to
 * its own slice of the target, each WR signaled, with its thread and
 * sequence in wr_id), while two threads poll the one CQ; every WR must
 * complete exactly once and successfully, and every slice must hold its
 * last writer's bytes (each poster keeps its WRs in flight within a window,
 * so that they fit the CQ). Meanwhile a fifth thread creates and destroys CQs
 * and registers and deregisters memory on the same context.
 *
 *   threads              (the library found on LD_LIBRARY_PATH) */
#include <errno.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common.h"

enum { POSTERS = 4, PER = 20000, SLICE = 256 };

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_cq *cq;
static struct ibv_qp *a, *b;
static struct ibv_mr *src, *dst;
static char *sbuf, *dbuf;
static unsigned char seen[POSTERS][PER];
static pthread_mutex_t seen_mu = PTHREAD_MUTEX_INITIALIZER;
static int done_polling, completed, bad_status, churns;
/* completions per poster: a poster keeps at most WINDOW WRs uncompleted, so
 * that all of them fit the CQ (a send slot is free again when its WR
 * completes, as in rxe, not when its completion is polled) */
static int done_of[POSTERS];
enum { WINDOW = 256 };

static void *poster(void *arg)
{
	long t = (long)arg;

	for (int i = 0; i < PER; i++) {
		struct ibv_sge sge = {.addr = (uintptr_t)sbuf + t * SLICE, .length = SLICE, .lkey = src->lkey};
		struct ibv_send_wr wr = {.wr_id = (uint64_t)t << 32 | i, .sg_list = &sge, .num_sge = 1,
					 .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED,
					 .wr.rdma = {.remote_addr = (uintptr_t)dbuf + t * SLICE, .rkey = dst->rkey}},
				    *bad;
		int err;
		while (i - __atomic_load_n(&done_of[t], __ATOMIC_ACQUIRE) >= WINDOW)
			sched_yield();
		while ((err = ibv_post_send(a, &wr, &bad)) == ENOMEM)
			sched_yield(); /* the send queue is full: the pollers make room */
		if (err) {
			fprintf(stderr, "post_send: %s\n", strerror(err));
			exit(1);
		}
	}
	return NULL;
}

static void *poller(void *arg)
{
	struct ibv_wc wc[8];

	(void)arg;
	while (!__atomic_load_n(&done_polling, __ATOMIC_ACQUIRE)) {
		int n = ibv_poll_cq(cq, 8, wc);
		if (n < 0) {
			fprintf(stderr, "poll_cq failed\n");
			exit(1);
		}
		pthread_mutex_lock(&seen_mu);
		for (int i = 0; i < n; i++) {
			uint32_t t = wc[i].wr_id >> 32, k = (uint32_t)wc[i].wr_id;
			if (wc[i].status != IBV_WC_SUCCESS || t >= POSTERS || k >= PER)
				bad_status++;
			else {
				seen[t][k]++;
				__atomic_add_fetch(&done_of[t], 1, __ATOMIC_RELEASE);
			}
			completed++;
		}
		if (completed >= POSTERS * PER)
			__atomic_store_n(&done_polling, 1, __ATOMIC_RELEASE);
		pthread_mutex_unlock(&seen_mu);
	}
	return NULL;
}

static void *churner(void *arg)
{
	(void)arg;
	while (!__atomic_load_n(&done_polling, __ATOMIC_ACQUIRE)) {
		/* pages of their own: registering memory that shares pages with
		 * a buffer being written would re-back it mid-write (README) */
		struct ibv_cq *c = ibv_create_cq(ctx, 4, NULL, NULL, 0);
		char *m = mmap(NULL, 3 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		struct ibv_mr *mr = m != MAP_FAILED ? ibv_reg_mr(pd, m + 100, 10000, IBV_ACCESS_LOCAL_WRITE) : NULL;
		CHECK(c && mr, "churn: create_cq/reg_mr: %s", strerror(errno));
		if (mr)
			ibv_dereg_mr(mr);
		if (c)
			ibv_destroy_cq(c);
		if (m != MAP_FAILED)
			munmap(m, 3 * 4096);
		churns++;
	}
	return NULL;
}

int main(void)
{
	struct ibv_port_attr port;
	union ibv_gid gid;
	int num;
	struct ibv_device **list = ibv_get_device_list(&num);

	if (!list || num < 1 || !(ctx = ibv_open_device(list[0])) || ibv_query_port(ctx, 1, &port) ||
	    ibv_query_gid(ctx, 1, 0, &gid)) {
		fprintf(stderr, "no device\n");
		return 1;
	}
	pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 4096, NULL, NULL, 0);
	struct ibv_qp_init_attr qi = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
				      .cap = {.max_send_wr = 256, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1}};
	a = ibv_create_qp(pd, &qi);
	b = ibv_create_qp(pd, &qi);
	sbuf = aligned_alloc(4096, 4096); /* POSTERS * SLICE bytes used */
	dbuf = aligned_alloc(4096, 4096);
	if (!pd || !cq || !a || !b || !sbuf || !dbuf)
		return 1;
	for (int i = 0; i < POSTERS * SLICE; i++)
		sbuf[i] = (char)(i / SLICE + 1);
	memset(dbuf, 0, POSTERS * SLICE);
	src = ibv_reg_mr(pd, sbuf, POSTERS * SLICE, 0);
	dst = ibv_reg_mr(pd, dbuf, POSTERS * SLICE, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!src || !dst || tc_connect(a, b->qp_num, &port, &gid, IBV_ACCESS_REMOTE_WRITE, 14, 7) ||
	    tc_connect(b, a->qp_num, &port, &gid, IBV_ACCESS_REMOTE_WRITE, 14, 7))
		return 1;

	pthread_t p[POSTERS], q[2], c;
	pthread_create(&c, NULL, churner, NULL);
	for (int i = 0; i < 2; i++)
		pthread_create(&q[i], NULL, poller, NULL);
	for (long i = 0; i < POSTERS; i++)
		pthread_create(&p[i], NULL, poster, (void *)i);
	for (int i = 0; i < POSTERS; i++)
		pthread_join(p[i], NULL);
	for (int i = 0; i < 2; i++)
		pthread_join(q[i], NULL);
	pthread_join(c, NULL);

	int dup = 0, lost = 0;
	for (int t = 0; t < POSTERS; t++)
		for (int k = 0; k < PER; k++)
			dup += seen[t][k] > 1, lost += seen[t][k] == 0;
	CHECK(completed == POSTERS * PER && !dup && !lost && !bad_status,
	      "%d completions (want %d), %d doubled, %d lost, %d bad", completed, POSTERS * PER, dup, lost, bad_status);
	CHECK(!memcmp(sbuf, dbuf, POSTERS * SLICE), "a slice does not hold its writer's bytes");

	ibv_destroy_qp(a);
	ibv_destroy_qp(b);
	ibv_dereg_mr(src);
	ibv_dereg_mr(dst);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	free(sbuf);
	free(dbuf);
	if (failures) {
		fprintf(stderr, "threads: %d checks failed\n", failures);
		return 1;
	}
	printf("threads: %d WRs from %d threads, each completed once; %d CQ and MR churns alongside\n", POSTERS * PER,
	       POSTERS, churns);
	return 0;
}
