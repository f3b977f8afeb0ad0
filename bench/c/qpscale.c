/* qpscale: the aggregate 8-byte RDMA WRITE rate of one client thread that
 * posts round-robin over N connected RC QPs of one device (issue #25's
 * "scaling with QPs"), through the drop-in libibverbs
 * (scripts/bench-qps.sh; BENCHMARKS.md). A benchmark, not a test: it
 * checks every completion's status but asserts no time.
 *
 *   qpscale N [SECONDS]    N QPs, connected in pairs (one QP: to itself),
 *                          every one of them posting, for SECONDS (1)
 *                          after a quarter of that as a warm-up
 *
 * N QPs in N/2 pairs rather than N senders with N receivers: every QP
 * counted is active, and 2 x 4,096 QPs would take more file descriptors
 * (each ring is a memfd) than this host's limit of 20,000.
 *
 * Each sender's WRITEs are signalled one in SIG (as perftest moderates its
 * CQ), so a completion frees SIG slots of that sender's SQ; the thread
 * polls the shared CQ only when the next QP in turn has no room. It prints
 * one line: N, WRs, seconds, Mpps. */
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../libibverbs/tests/common.h"

/* common.h brings ctest's failure count, which a benchmark does not use */
static int *unused_failures __attribute__((unused)) = &failures;

enum {
	DEPTH = 64, /* SQ slots per sender */
	SIG = 16,   /* one signalled WRITE in SIG */
};

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

struct sender {
	struct ibv_qp *qp;
	uint32_t posted, done; /* WRs posted, and retired (SIG per completion) */
};

static struct sender *s;
static uint32_t nqp;
static struct ibv_cq *cq;

/* reap polls the CQ once; each completion retires SIG WRs of its QP. The
 * QP is found by its wr_id, which is its index. */
static int reap(void)
{
	struct ibv_wc wc[64];
	int n = ibv_poll_cq(cq, 64, wc);

	if (n < 0) {
		fprintf(stderr, "ibv_poll_cq failed\n");
		return -1;
	}
	for (int i = 0; i < n; i++) {
		if (wc[i].status != IBV_WC_SUCCESS || wc[i].wr_id >= nqp) {
			fprintf(stderr, "completion %s for wr_id %llu\n", ibv_wc_status_str(wc[i].status),
				(unsigned long long)wc[i].wr_id);
			return -1;
		}
		s[wc[i].wr_id].done += SIG;
	}
	return n;
}

/* run posts round-robin for secs seconds; the WRs posted, or -1. */
static long long run(struct ibv_mr *src, struct ibv_mr *dst, double secs)
{
	struct ibv_sge sge = {.addr = (uintptr_t)src->addr, .length = 8, .lkey = src->lkey};
	struct ibv_send_wr w = {.sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE}, *bad;
	long long total = 0;
	double end = now() + secs;

	for (uint32_t i = 0;; i = i + 1 == nqp ? 0 : i + 1) {
		struct sender *x = &s[i];

		/* Look at the clock once per round of the QPs, at most every
		 * 4096 posts: it costs more than a post. */
		if ((total & 4095) == 0 && now() > end)
			break;
		while (x->posted - x->done >= DEPTH)
			if (reap() < 0)
				return -1;
		w.wr_id = i;
		w.send_flags = x->posted % SIG == SIG - 1 ? IBV_SEND_SIGNALED : 0;
		w.wr.rdma.remote_addr = (uintptr_t)dst->addr + 8 * (uint64_t)i;
		w.wr.rdma.rkey = dst->rkey;
		if (ibv_post_send(x->qp, &w, &bad)) {
			fprintf(stderr, "ibv_post_send failed on QP %u\n", i);
			return -1;
		}
		x->posted++;
		total++;
	}
	/* Drain: every signalled WR completes before the next run. */
	for (uint32_t i = 0; i < nqp; i++)
		while (s[i].done + SIG <= s[i].posted)
			if (reap() < 0)
				return -1;
	return total;
}

int main(int argc, char **argv)
{
	if (argc < 2 || atoi(argv[1]) < 1 || (atoi(argv[1]) > 1 && atoi(argv[1]) % 2)) {
		fprintf(stderr, "usage: qpscale N [SECONDS] (N 1 or even)\n");
		return 2;
	}
	nqp = atoi(argv[1]);
	double secs = argc > 2 ? atof(argv[2]) : 1;
	int nd;
	struct ibv_device **dl = ibv_get_device_list(&nd);
	if (!dl || nd < 1) {
		fprintf(stderr, "no RDMA device\n");
		return 1;
	}
	struct ibv_context *ctx = ibv_open_device(dl[0]);
	struct ibv_pd *pd = ctx ? ibv_alloc_pd(ctx) : NULL;
	struct ibv_port_attr port;
	union ibv_gid gid;
	if (!pd || ibv_query_port(ctx, 1, &port) || ibv_query_gid(ctx, 1, 0, &gid)) {
		fprintf(stderr, "open, alloc_pd or query_port failed\n");
		return 1;
	}
	/* At most DEPTH/SIG completions outstanding per sender. */
	cq = ibv_create_cq(ctx, nqp * (DEPTH / SIG), NULL, NULL, 0);
	static char srcbuf[64];
	char *dstbuf = calloc(nqp, 8);
	int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
	struct ibv_mr *src = ibv_reg_mr(pd, srcbuf, sizeof(srcbuf), IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *dst = dstbuf ? ibv_reg_mr(pd, dstbuf, (size_t)nqp * 8, acc) : NULL;
	s = calloc(nqp, sizeof(*s));
	if (!cq || !src || !dst || !s) {
		fprintf(stderr, "create_cq, reg_mr or calloc failed\n");
		return 1;
	}
	struct ibv_qp_init_attr sa = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
				      .cap = {.max_send_wr = DEPTH, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1}};
	for (uint32_t i = 0; i < nqp; i++)
		if (!(s[i].qp = ibv_create_qp(pd, &sa))) {
			fprintf(stderr, "QP %u: create failed\n", i);
			return 1;
		}
	for (uint32_t i = 0; i < nqp; i++) {
		struct ibv_qp *peer = nqp == 1 ? s[i].qp : s[i ^ 1].qp;
		if (tc_connect(s[i].qp, peer->qp_num, &port, &gid, acc, 14, 7)) {
			fprintf(stderr, "QP %u: connect failed\n", i);
			return 1;
		}
	}
	if (run(src, dst, secs / 4) < 0) /* warm-up */
		return 1;
	double t0 = now();
	long long n = run(src, dst, secs);
	double t = now() - t0;
	if (n < 0)
		return 1;
	printf("qps %u wrs %lld seconds %.3f mpps %.3f\n", nqp, n, t, n / t / 1e6);
	return 0;
}
