/* Two RC QPs connected to each other, for the tests that move memory
 * between a "local" side A and a "peer" side B: on one device when the
 * program sees one (both QPs in one context), or across two devices when
 * it sees two (RDMAFS_DEVICE_MOUNT=MOUNT_A:MOUNT_B, two `--addr` mounts:
 * A on the first device, B on the last, so every byte crosses the wire).
 * Header-only, beside common.h. */
#ifndef RDMAFS_TESTS_PAIR_H
#define RDMAFS_TESTS_PAIR_H

#include <errno.h>
#include <sched.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

struct side {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_port_attr port;
	union ibv_gid gid;
	int own_ctx; /* ctx and pd are this side's (closed by side_close) */
};

#define PAIR_ACCESS \
	(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)

static inline int side_qp(struct side *s, int depth)
{
	struct ibv_qp_init_attr qi = {.send_cq = s->cq, .recv_cq = s->cq, .qp_type = IBV_QPT_RC,
				      .cap = {.max_send_wr = (uint32_t)depth, .max_recv_wr = (uint32_t)depth,
					      .max_send_sge = 1, .max_recv_sge = 1}};

	if (!(s->cq = ibv_create_cq(s->ctx, 2 * depth + 2, NULL, NULL, 0)))
		return -1;
	qi.send_cq = qi.recv_cq = s->cq;
	if (!(s->qp = ibv_create_qp(s->pd, &qi)))
		return -1;
	if (ibv_query_port(s->ctx, 1, &s->port) || ibv_query_gid(s->ctx, 1, 0, &s->gid))
		return -1;
	return 0;
}

static inline int side_open(struct side *s, struct ibv_device *dev, int depth)
{
	memset(s, 0, sizeof(*s));
	if (!(s->ctx = ibv_open_device(dev)) || !(s->pd = ibv_alloc_pd(s->ctx)))
		return -1;
	s->own_ctx = 1;
	return side_qp(s, depth);
}

/* pair_connect: each QP towards the other (RC, with READ and atomics
 * allowed, RNR retried for ever). */
static inline int pair_connect(struct side *a, struct side *b)
{
	if (tc_connect(a->qp, b->qp->qp_num, &b->port, &b->gid, PAIR_ACCESS, 14, 7) ||
	    tc_connect(b->qp, a->qp->qp_num, &a->port, &a->gid, PAIR_ACCESS, 14, 7))
		return -1;
	return 0;
}

/* pair_open: A on the first device, B on the last (the same one when there
 * is one: then B is a second QP in A's context and PD). *ndev is how many
 * devices the program sees. */
static inline int pair_open(struct side *a, struct side *b, int depth, int *ndev)
{
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);

	if (!list || n < 1) {
		fprintf(stderr, "no device\n");
		return -1;
	}
	*ndev = n;
	if (side_open(a, list[0], depth))
		goto fail;
	if (n > 1) {
		if (side_open(b, list[n - 1], depth))
			goto fail;
	} else {
		memset(b, 0, sizeof(*b));
		b->ctx = a->ctx;
		b->pd = a->pd;
		if (side_qp(b, depth))
			goto fail;
	}
	ibv_free_device_list(list);
	return pair_connect(a, b);
fail:
	fprintf(stderr, "pair_open: %s\n", strerror(errno));
	ibv_free_device_list(list);
	return -1;
}

static inline void side_close(struct side *s)
{
	if (s->qp)
		ibv_destroy_qp(s->qp);
	if (s->cq)
		ibv_destroy_cq(s->cq);
	if (s->own_ctx) {
		ibv_dealloc_pd(s->pd);
		ibv_close_device(s->ctx);
	}
}

/* wait_wc: the next completion of s's CQ, within about 20 s; its status,
 * or -1 when none came. */
static inline int wait_wc(struct side *s, struct ibv_wc *wc)
{
	for (long spins = 0; spins < 50000000L; spins++) {
		int n = ibv_poll_cq(s->cq, 1, wc);
		if (n < 0)
			return -1;
		if (n == 1)
			return (int)wc->status;
		if (spins > 1000)
			sched_yield();
	}
	fprintf(stderr, "no completion\n");
	return -1;
}

/* post_rw: one signaled WRITE or READ (or atomic) on s's QP. */
static inline int post_one(struct side *s, enum ibv_wr_opcode op, void *laddr, uint32_t len, uint32_t lkey,
			   uint64_t raddr, uint32_t rkey, uint64_t cmp_add, uint64_t swap)
{
	struct ibv_sge sge = {.addr = (uintptr_t)laddr, .length = len, .lkey = lkey};
	struct ibv_send_wr wr = {.sg_list = &sge, .num_sge = 1, .opcode = op, .send_flags = IBV_SEND_SIGNALED};
	struct ibv_send_wr *bad;

	if (op == IBV_WR_ATOMIC_FETCH_AND_ADD || op == IBV_WR_ATOMIC_CMP_AND_SWP) {
		wr.wr.atomic.remote_addr = raddr;
		wr.wr.atomic.rkey = rkey;
		wr.wr.atomic.compare_add = cmp_add;
		wr.wr.atomic.swap = swap;
	} else {
		wr.wr.rdma.remote_addr = raddr;
		wr.wr.rdma.rkey = rkey;
	}
	return ibv_post_send(s->qp, &wr, &bad);
}

static inline int post_recv_one(struct side *s, void *addr, uint32_t len, uint32_t lkey)
{
	struct ibv_sge sge = {.addr = (uintptr_t)addr, .length = len, .lkey = lkey};
	struct ibv_recv_wr wr = {.sg_list = &sge, .num_sge = 1};
	struct ibv_recv_wr *bad;

	return ibv_post_recv(s->qp, &wr, &bad);
}

#endif
