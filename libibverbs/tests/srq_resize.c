/* srq_resize: ibv_modify_srq with IBV_SRQ_MAX_WR. The WRs posted before
 * the resize are taken after it, in order; the new room takes posts; a
 * size that cannot hold what waits, or is below the armed limit, is
 * EINVAL and leaves the SRQ as it was; max_wr and srq_limit go together
 * in one modify; the device reports IBV_DEVICE_SRQ_RESIZE.
 *
 *   srq_resize         (the library found on LD_LIBRARY_PATH) */
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

static struct ibv_cq *cq;

static int poll1(struct ibv_wc *wc)
{
	for (long spins = 0; spins < 50000000; spins++) {
		int n = ibv_poll_cq(cq, 1, wc);
		if (n)
			return n;
	}
	return 0;
}

static int post_recv(struct ibv_srq *srq, uint64_t id, uint8_t *buf, uint32_t lkey)
{
	struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = 64, .lkey = lkey};
	struct ibv_recv_wr wr = {.wr_id = id, .sg_list = &sge, .num_sge = 1}, *bad = NULL;

	return ibv_post_srq_recv(srq, &wr, &bad);
}

int main(void)
{
	int num;
	struct ibv_device **list = ibv_get_device_list(&num);
	struct ibv_context *ctx;
	struct ibv_port_attr port;
	union ibv_gid gid;

	if (!list || num < 1 || !(ctx = ibv_open_device(list[0]))) {
		fprintf(stderr, "no device\n");
		return 1;
	}
	if (ibv_query_port(ctx, 1, &port) || ibv_query_gid(ctx, 1, 0, &gid))
		return 1;
	struct ibv_device_attr da;
	CHECK(ibv_query_device(ctx, &da) == 0 && (da.device_cap_flags & IBV_DEVICE_SRQ_RESIZE),
	      "device_cap_flags %#x lacks SRQ_RESIZE", da.device_cap_flags);

	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 128, NULL, NULL, 0);
	uint8_t *mem = aligned_alloc(4096, 16384);
	struct ibv_mr *mr = pd ? ibv_reg_mr(pd, mem, 16384, IBV_ACCESS_LOCAL_WRITE) : NULL;
	struct ibv_srq_init_attr si = {.attr = {.max_wr = 4, .max_sge = 1}};
	struct ibv_srq *srq = pd ? ibv_create_srq(pd, &si) : NULL;
	if (!pd || !cq || !mr || !srq) {
		fprintf(stderr, "setup failed: %s\n", strerror(errno));
		return 1;
	}
	CHECK(si.attr.max_wr == 4, "created max_wr %u, want 4", si.attr.max_wr);
	struct ibv_qp_init_attr qa = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
				      .cap = {.max_send_wr = 64, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *a = ibv_create_qp(pd, &qa);
	qa.srq = srq;
	qa.cap.max_recv_wr = 0;
	struct ibv_qp *b = ibv_create_qp(pd, &qa);
	if (!a || !b) {
		fprintf(stderr, "create QPs: %s\n", strerror(errno));
		return 1;
	}
	if (tc_connect(a, b->qp_num, &port, &gid, 0, 10, 2) || tc_connect(b, a->qp_num, &port, &gid, 0, 10, 2)) {
		fprintf(stderr, "connect: %s\n", strerror(errno));
		return 1;
	}
	memset(mem, 0, 16384);
	for (int i = 0; i < 4; i++)
		CHECK(post_recv(srq, 100 + i, mem + 64 * i, mr->lkey) == 0, "post %d: %s", i, strerror(errno));
	CHECK(post_recv(srq, 104, mem + 64 * 4, mr->lkey) == ENOMEM, "a fifth post into 4 slots was taken");

	struct ibv_srq_attr at = {.max_wr = 2};
	CHECK(ibv_modify_srq(srq, &at, IBV_SRQ_MAX_WR) == EINVAL, "shrinking below the 4 waiting WRs: not EINVAL");
	at.srq_limit = 3;
	CHECK(ibv_modify_srq(srq, &at, IBV_SRQ_LIMIT) == 0, "arming the limit: %s", strerror(errno));
	at.max_wr = 2;
	CHECK(ibv_modify_srq(srq, &at, IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT) == EINVAL, "limit 3 above max_wr 2: not EINVAL");
	at.max_wr = 0;
	CHECK(ibv_modify_srq(srq, &at, IBV_SRQ_MAX_WR) == EINVAL, "max_wr 0: not EINVAL");
	struct ibv_srq_attr q;
	CHECK(ibv_query_srq(srq, &q) == 0 && q.max_wr == 4 && q.srq_limit == 3, "a failed modify changed the srq: max_wr %u limit %u",
	      q.max_wr, q.srq_limit);

	at.max_wr = 20;
	at.srq_limit = 0;
	CHECK(ibv_modify_srq(srq, &at, IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT) == 0, "resize to 20: %s", strerror(errno));
	CHECK(ibv_query_srq(srq, &q) == 0 && q.max_wr == 32 && q.srq_limit == 0, "after the resize: max_wr %u limit %u",
	      q.max_wr, q.srq_limit);
	for (int i = 4; i < 32; i++)
		CHECK(post_recv(srq, 100 + i, mem + 64 * i, mr->lkey) == 0, "post %d after the resize: %s", i, strerror(errno));
	CHECK(post_recv(srq, 132, mem + 64 * 32, mr->lkey) == ENOMEM, "post 33 into 32 slots was taken");

	/* 32 sends; each lands in the next WR, in posting order. */
	uint8_t *src = mem + 8192;
	struct ibv_mr *smr = ibv_reg_mr(pd, src, 4096, 0);
	CHECK(smr != NULL, "reg src: %s", strerror(errno));
	int sends = 0, recvs = 0;
	for (int i = 0; i < 32 && smr; i++) {
		snprintf((char *)src + 16 * i, 16, "msg%03d", i);
		struct ibv_sge sge = {.addr = (uintptr_t)src + 16 * i, .length = 8, .lkey = smr->lkey};
		struct ibv_send_wr wr = {.wr_id = i, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
					 .send_flags = IBV_SEND_SIGNALED}, *bad;
		CHECK(ibv_post_send(a, &wr, &bad) == 0, "send %d: %s", i, strerror(errno));
	}
	for (int n = 0; n < 64; n++) {
		struct ibv_wc wc;
		if (!poll1(&wc)) {
			CHECK(0, "%d of 64 completions", n);
			break;
		}
		CHECK(wc.status == IBV_WC_SUCCESS, "wr %llu: %s", (unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status));
		if (wc.opcode == IBV_WC_RECV) {
			CHECK(wc.wr_id == (uint64_t)(100 + recvs), "receive %d took wr %llu", recvs, (unsigned long long)wc.wr_id);
			recvs++;
		} else {
			sends++;
		}
	}
	CHECK(sends == 32 && recvs == 32, "%d sends, %d receives", sends, recvs);
	for (int i = 0; i < 32; i++) {
		char want[16];
		snprintf(want, sizeof(want), "msg%03d", i);
		CHECK(!memcmp(mem + 64 * i, want, 7), "WR %d holds %.7s, want %s", i, mem + 64 * i, want);
	}

	/* Shrink back to what waits (none): still usable. */
	at.max_wr = 1;
	CHECK(ibv_modify_srq(srq, &at, IBV_SRQ_MAX_WR) == 0, "shrink to 1: %s", strerror(errno));
	CHECK(ibv_query_srq(srq, &q) == 0 && q.max_wr == 1, "after the shrink: max_wr %u", q.max_wr);
	CHECK(post_recv(srq, 200, mem, mr->lkey) == 0 && post_recv(srq, 201, mem, mr->lkey) == ENOMEM,
	      "one slot after the shrink");

	ibv_destroy_qp(a);
	ibv_destroy_qp(b);
	CHECK(ibv_destroy_srq(srq) == 0, "destroy srq");
	if (smr)
		ibv_dereg_mr(smr);
	ibv_dereg_mr(mr);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	free(mem);
	if (failures) {
		fprintf(stderr, "srq_resize: %d failures\n", failures);
		return 1;
	}
	printf("srq_resize: ok\n");
	return 0;
}
