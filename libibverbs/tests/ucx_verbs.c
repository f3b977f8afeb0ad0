/* ucx_verbs: what UCX's verbs transports (rc_verbs, ud_verbs) ask of the
 * library and the device that other programs did not, each checked on the
 * first device:
 *
 *  - the device is "accessible" as UCX decides it: "/dev/infiniband/" +
 *    dev_name is a character device this process may read and write
 *    (checked where /dev/infiniband exists; without it UCX finds no IB
 *    device at all, ours or the kernel's);
 *  - an address vector with a 32-bit flow label (UCX passes ~0 for path 0
 *    on RoCE and lets the stack keep the low 20 bits) is taken by
 *    ibv_create_ah and by ibv_modify_qp to RTR, and ibv_query_qp returns
 *    the 20 bits kept;
 *  - RC sends that mix inline data and SGEs in the same SQ slots, past the
 *    ring's wrap (UCX's short and bcopy messages), all complete and land.
 *
 *   ucx_verbs            (the library found on LD_LIBRARY_PATH) */
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_cq *cq;
static struct ibv_port_attr port;
static union ibv_gid gid;

static void check_accessible(struct ibv_device *dev)
{
	char path[128];
	struct stat st;

	if (stat("/dev/infiniband", &st) != 0) {
		printf("ucx_verbs: no /dev/infiniband here; dev_name %s not checked\n", dev->dev_name);
		return;
	}
	snprintf(path, sizeof(path), "/dev/infiniband/%s", dev->dev_name);
	CHECK(stat(path, &st) == 0 && S_ISCHR(st.st_mode), "%s is not a character device", path);
	CHECK(access(path, R_OK | W_OK) == 0, "%s: no read and write access: %s", path, strerror(errno));
}

static struct ibv_qp *rc_qp(void)
{
	struct ibv_qp_init_attr a = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
				     .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1,
					     .max_recv_sge = 1, .max_inline_data = 64}};
	struct ibv_qp *q = ibv_create_qp(pd, &a);

	if (!q) {
		fprintf(stderr, "create_qp: %s\n", strerror(errno));
		exit(1);
	}
	return q;
}

/* To RTS towards dest through a GRH whose flow label has all 32 bits set,
 * as UCX's uct_ib_iface_fill_ah_attr_from_gid_lid makes it on RoCE. */
static void connect_global(struct ibv_qp *q, uint32_t dest)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1,
				.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE};
	struct ibv_qp_init_attr ia;
	int e;

	if ((e = ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))) {
		fprintf(stderr, "INIT: %s\n", strerror(e));
		exit(1);
	}
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = dest;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 1;
	a.ah_attr.port_num = 1;
	a.ah_attr.dlid = port.lid;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = gid;
	a.ah_attr.grh.hop_limit = 255;
	a.ah_attr.grh.flow_label = ~0u;
	e = ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
					 IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
	CHECK(e == 0, "RTR with flow_label 0xffffffff: %s", strerror(e));
	if (e)
		exit(1);
	memset(&a, 0, sizeof(a));
	CHECK(ibv_query_qp(q, &a, IBV_QP_AV, &ia) == 0 && a.ah_attr.grh.flow_label == 0xfffff,
	      "query_qp: flow_label %#x, want 0xfffff", a.ah_attr.grh.flow_label);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 1;
	if ((e = ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
					  IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC))) {
		fprintf(stderr, "RTS: %s\n", strerror(e));
		exit(1);
	}
}

static void check_ah(void)
{
	struct ibv_ah_attr a = {.port_num = 1, .dlid = 0xc000, .is_global = 1,
				.grh = {.dgid = gid, .hop_limit = 255, .flow_label = ~0u}};
	struct ibv_ah *ah = ibv_create_ah(pd, &a);

	CHECK(ah != NULL, "create_ah with flow_label 0xffffffff: %s", strerror(errno));
	if (ah)
		CHECK(ibv_destroy_ah(ah) == 0, "destroy_ah");
}

/* 16 RDMA WRITEs on a 4-slot SQ, every third inline: each slot holds both
 * kinds in turn. Each must complete successfully and land. */
static void mixed_sends(struct ibv_qp *a, struct ibv_mr *src, struct ibv_mr *dst)
{
	char *s = src->addr, *d = dst->addr;

	for (uint64_t i = 1; i <= 16; i++) {
		struct ibv_sge sge = {.addr = (uintptr_t)s, .length = 9, .lkey = src->lkey};
		struct ibv_send_wr wr = {.wr_id = i, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
					 .send_flags = IBV_SEND_SIGNALED,
					 .wr.rdma = {.remote_addr = (uintptr_t)d, .rkey = dst->rkey}}, *bad;
		struct ibv_wc wc;
		int n = 0;

		snprintf(s, 16, "%s%04u", i % 3 ? "sge-" : "inl-", (unsigned)i);
		if (i % 3 == 0)
			wr.send_flags |= IBV_SEND_INLINE;
		memset(d, 0, 16);
		if (ibv_post_send(a, &wr, &bad)) {
			CHECK(0, "post %u: %s", (unsigned)i, strerror(errno));
			return;
		}
		for (int tries = 0; n == 0 && tries < 10000000; tries++)
			n = ibv_poll_cq(cq, 1, &wc);
		CHECK(n == 1 && wc.status == IBV_WC_SUCCESS && wc.wr_id == i, "write %u (%s): %s", (unsigned)i,
		      i % 3 ? "sge" : "inline", n == 1 ? ibv_wc_status_str(wc.status) : "no completion");
		if (n != 1 || wc.status != IBV_WC_SUCCESS)
			return;
		CHECK(memcmp(d, s, 9) == 0, "write %u left '%.9s', want '%.9s'", (unsigned)i, d, s);
	}
}

int main(void)
{
	int num;
	struct ibv_device **list = ibv_get_device_list(&num);

	if (!list || num < 1 || !(ctx = ibv_open_device(list[0]))) {
		fprintf(stderr, "no device\n");
		return 1;
	}
	check_accessible(list[0]);
	if (ibv_query_port(ctx, 1, &port) || ibv_query_gid(ctx, 1, 0, &gid))
		return 1;
	pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 32, NULL, NULL, 0);
	char *sbuf = aligned_alloc(4096, 4096), *dbuf = aligned_alloc(4096, 4096);
	struct ibv_mr *src = pd && sbuf ? ibv_reg_mr(pd, sbuf, 4096, IBV_ACCESS_LOCAL_WRITE) : NULL;
	struct ibv_mr *dst = pd && dbuf ? ibv_reg_mr(pd, dbuf, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE) : NULL;
	if (!cq || !src || !dst) {
		fprintf(stderr, "setup failed: %s\n", strerror(errno));
		return 1;
	}
	check_ah();
	struct ibv_qp *a = rc_qp(), *b = rc_qp();
	connect_global(a, b->qp_num);
	connect_global(b, a->qp_num);
	mixed_sends(a, src, dst);

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
		fprintf(stderr, "ucx_verbs: %d failures\n", failures);
		return 1;
	}
	printf("ucx_verbs: ok on an %s port\n", port.link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet (RoCE)" : "InfiniBand");
	return 0;
}
