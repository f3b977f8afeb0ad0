/* destroy_clean: ibv_destroy_qp takes the QP's completions that still wait
 * in its CQs with it, as mlx5 and mlx4 do (__mlx5_cq_clean at destroy), and
 * leaves the other QPs' completions there. libfabric's RxM relies on it: it
 * closes a connection's endpoint, frees what the endpoint's wr_ids point
 * to, then drains the shared CQ; a completion left behind crashed Open
 * MPI's mtl ofi in MPI_Finalize (TESTING.md, "MPI on rdmafs").
 *
 *   destroy_clean      (the library found on LD_LIBRARY_PATH) */
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pair.h"

static int fail(const char *what)
{
	fprintf(stderr, "destroy_clean: %s\n", what);
	return 1;
}

int main(void)
{
	struct side a, b;
	struct ibv_wc wc;
	int ndev;
	static uint8_t buf[4096];

	if (pair_open(&a, &b, 16, &ndev))
		return fail("pair_open");
	struct ibv_mr *mr = ibv_reg_mr(a.pd, buf, sizeof(buf), PAIR_ACCESS);
	struct ibv_mr *mrb = mr;
	if (b.pd != a.pd)
		mrb = ibv_reg_mr(b.pd, buf, sizeof(buf), PAIR_ACCESS);
	if (!mr || !mrb)
		return fail("ibv_reg_mr");

	/* B: two receives completed, nothing polled; A: their sends polled. */
	for (int i = 0; i < 2; i++) {
		if (post_recv_one(&b, buf + 2048 + 64 * i, 64, mrb->lkey))
			return fail("post_recv");
		if (post_one(&a, IBV_WR_SEND, buf + 64 * i, 64, mr->lkey, 0, 0, 0, 0))
			return fail("post_send");
		if (wait_wc(&a, &wc) != IBV_WC_SUCCESS || wc.opcode != IBV_WC_SEND)
			return fail("send completion");
	}
	/* A third send, its completion left unpolled in A's CQ, and one
	 * receive of B's polled, so both CQs hold a completion of a live QP
	 * and of the QP destroyed next. */
	if (post_one(&a, IBV_WR_SEND, buf, 64, mr->lkey, 0, 0, 0, 0))
		return fail("post_send 3");
	if (post_recv_one(&b, buf + 2048 + 128, 64, mrb->lkey))
		return fail("post_recv 3");
	usleep(200000); /* the third send's completion reaches A's CQ */
	if (wait_wc(&b, &wc) != IBV_WC_SUCCESS || !(wc.opcode & IBV_WC_RECV) || wc.qp_num != b.qp->qp_num)
		return fail("first receive completion");

	if (ibv_destroy_qp(b.qp))
		return fail("ibv_destroy_qp");
	b.qp = NULL;
	int n = ibv_poll_cq(b.cq, 1, &wc);
	CHECK(n == 0, "the destroyed QP's completion was polled after destroy (n=%d qp_num=%u status=%d)", n,
	      n > 0 ? wc.qp_num : 0, n > 0 ? (int)wc.status : 0);
	/* A's QP is alive: its completion stays. */
	n = ibv_poll_cq(a.cq, 1, &wc);
	CHECK(n == 1 && wc.status == IBV_WC_SUCCESS && wc.qp_num == a.qp->qp_num, "a live QP's completion was dropped");
	if (mrb != mr)
		ibv_dereg_mr(mrb);
	ibv_dereg_mr(mr);
	side_close(&b);
	side_close(&a);
	if (failures)
		return 1;
	printf("destroy_clean: ok (%d device%s)\n", ndev, ndev > 1 ? "s" : "");
	return 0;
}
