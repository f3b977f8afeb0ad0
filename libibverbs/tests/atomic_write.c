/* atomic_write: IBV_WR_ATOMIC_WRITE (IBA 1.5) through both ways of posting
 * it. ibv_post_send takes the 8 bytes from the WR's one 8-byte SGE, read
 * when it is posted (changing the buffer afterwards changes nothing);
 * ibv_wr_atomic_write copies them at the call. Each completes as
 * IBV_WC_ATOMIC_WRITE with byte_len 8 and lands as one word, byte for byte;
 * bad WRs are refused at post; an MR without remote write is a remote
 * access error. ibv_query_device_ex reports the kernel's ATOMIC_WRITE cap.
 *
 *   atomic_write         (the library found on LD_LIBRARY_PATH) */
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

/* IB_UVERBS_DEVICE_ATOMIC_WRITE of the kernel's ib_user_verbs.h, which
 * rdma-core 44's headers do not name. */
#define DEVICE_ATOMIC_WRITE (1ULL << 40)


static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_cq *cq;
static struct ibv_port_attr port;
static union ibv_gid gid;

static struct ibv_qp *qp_new(enum ibv_qp_type t, uint64_t ops)
{
	struct ibv_qp_init_attr_ex a = {.send_cq = cq, .recv_cq = cq, .qp_type = t, .pd = pd,
					.comp_mask = IBV_QP_INIT_ATTR_PD,
					.cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1}};
	if (ops) {
		a.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
		a.send_ops_flags = ops;
	}
	return ibv_create_qp_ex(ctx, &a);
}

static void connect_qp(struct ibv_qp *q, uint32_t dest)
{
	int e = tc_connect(q, dest, &port, &gid, IBV_ACCESS_REMOTE_WRITE, 10, 2);

	if (e) {
		fprintf(stderr, "connect: %s\n", strerror(e));
		exit(1);
	}
}

/* ibv_post_send of one ATOMIC WRITE: the bytes of sge, to rkey:addr. */
static int post(struct ibv_qp *q, uint64_t id, struct ibv_sge *sge, int nsge, uint64_t addr, uint32_t rkey)
{
	struct ibv_send_wr wr = {.wr_id = id, .sg_list = sge, .num_sge = nsge, .opcode = IBV_WR_ATOMIC_WRITE,
				 .send_flags = IBV_SEND_SIGNALED,
				 .wr.rdma = {.remote_addr = addr, .rkey = rkey}}, *bad = NULL;
	int e = ibv_post_send(q, &wr, &bad);

	if (e && bad != &wr)
		fprintf(stderr, "post_send: bad_wr not set\n");
	return e;
}

static int poll1(struct ibv_wc *wc)
{
	for (long spins = 0; spins < 50000000; spins++) {
		int n = ibv_poll_cq(cq, 1, wc);
		if (n)
			return n;
	}
	return 0;
}

static void expect_wc(uint64_t id, enum ibv_wc_status st)
{
	struct ibv_wc wc;

	CHECK(poll1(&wc) == 1, "no completion for wr %llu", (unsigned long long)id);
	CHECK(wc.wr_id == id && wc.status == st, "wr %llu: wr_id %llu status %s, want %s", (unsigned long long)id,
	      (unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status), ibv_wc_status_str(st));
	if (st == IBV_WC_SUCCESS)
		CHECK(wc.opcode == IBV_WC_ATOMIC_WRITE && wc.byte_len == 8, "wr %llu: opcode %d byte_len %u",
		      (unsigned long long)id, wc.opcode, wc.byte_len);
}

int main(void)
{
	int num;
	struct ibv_device **list = ibv_get_device_list(&num);

	if (!list || num < 1 || !(ctx = ibv_open_device(list[0]))) {
		fprintf(stderr, "no device\n");
		return 1;
	}
	if (ibv_query_port(ctx, 1, &port) || ibv_query_gid(ctx, 1, 0, &gid))
		return 1;
	struct ibv_device_attr_ex dx;
	CHECK(ibv_query_device_ex(ctx, NULL, &dx) == 0 && (dx.device_cap_flags_ex & DEVICE_ATOMIC_WRITE),
	      "device_cap_flags_ex %#llx lacks ATOMIC_WRITE", (unsigned long long)dx.device_cap_flags_ex);

	pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 32, NULL, NULL, 0);
	uint8_t *local = aligned_alloc(4096, 4096), *remote = aligned_alloc(4096, 4096), *ro = aligned_alloc(4096, 4096);
	memset(remote, 0xee, 4096);
	memset(ro, 0, 4096);
	struct ibv_mr *lmr = ibv_reg_mr(pd, local, 4096, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *rmr = ibv_reg_mr(pd, remote, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	struct ibv_mr *romr = ibv_reg_mr(pd, ro, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
	if (!pd || !cq || !lmr || !rmr || !romr) {
		fprintf(stderr, "setup failed\n");
		return 1;
	}
	struct ibv_qp *a = qp_new(IBV_QPT_RC, IBV_QP_EX_WITH_ATOMIC_WRITE | IBV_QP_EX_WITH_RDMA_WRITE);
	struct ibv_qp *b = qp_new(IBV_QPT_RC, 0);
	struct ibv_qp *ua = qp_new(IBV_QPT_UC, 0), *ub = qp_new(IBV_QPT_UC, 0);
	CHECK(a && b && ua && ub, "create QPs: %s", strerror(errno));
	if (!a || !b || !ua || !ub)
		return 1;
	connect_qp(a, b->qp_num);
	connect_qp(b, a->qp_num);
	connect_qp(ua, ub->qp_num);
	connect_qp(ub, ua->qp_num);

	/* ibv_post_send: the SGE's bytes, read at post. */
	static const uint8_t v1[8] = {1, 2, 3, 4, 5, 6, 7, 8};
	memcpy(local, v1, 8);
	struct ibv_sge sge = {.addr = (uintptr_t)local, .length = 8, .lkey = lmr->lkey};
	CHECK(post(a, 1, &sge, 1, (uintptr_t)remote + 64, rmr->rkey) == 0, "post_send: %s", strerror(errno));
	memset(local, 0x55, 8); /* after the post: not what is written */
	expect_wc(1, IBV_WC_SUCCESS);
	CHECK(!memcmp(remote + 64, v1, 8), "post_send: word %02x %02x ... %02x", remote[64], remote[65], remote[71]);
	CHECK(remote[63] == 0xee && remote[72] == 0xee, "post_send touched the bytes around the word");

	/* Refused at post: no SGE, a short one, two, a misaligned target, UC. */
	struct ibv_sge two[2] = {sge, sge}, short_sge = {.addr = (uintptr_t)local, .length = 4, .lkey = lmr->lkey};
	CHECK(post(a, 2, NULL, 0, (uintptr_t)remote, rmr->rkey) == EINVAL, "no sge: not EINVAL");
	CHECK(post(a, 2, &short_sge, 1, (uintptr_t)remote, rmr->rkey) == EINVAL, "4-byte sge: not EINVAL");
	CHECK(post(a, 2, two, 2, (uintptr_t)remote, rmr->rkey) == EINVAL, "two sges: not EINVAL");
	CHECK(post(a, 2, &sge, 1, (uintptr_t)remote + 4, rmr->rkey) == EINVAL, "misaligned: not EINVAL");
	CHECK(post(ua, 2, &sge, 1, (uintptr_t)remote, rmr->rkey) == EINVAL, "UC: not EINVAL");

	/* ibv_wr_atomic_write: copied at the call; two in one batch, and an
	 * RDMA WRITE between them. */
	struct ibv_qp_ex *x = ibv_qp_to_qp_ex(a);
	uint8_t v2[8] = {0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88}, v3[8] = {9, 9, 9, 9, 9, 9, 9, 9};
	uint8_t want2[8];
	memcpy(want2, v2, 8);
	memset(local, 0xab, 16);
	CHECK(x != NULL, "ibv_qp_to_qp_ex");
	ibv_wr_start(x);
	x->wr_id = 3;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_atomic_write(x, rmr->rkey, (uintptr_t)remote + 128, v2);
	memset(v2, 0, 8); /* after the call: not what is written */
	x->wr_id = 4;
	x->wr_flags = 0;
	ibv_wr_rdma_write(x, rmr->rkey, (uintptr_t)remote + 256);
	ibv_wr_set_sge(x, lmr->lkey, (uintptr_t)local, 16);
	x->wr_id = 5;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_atomic_write(x, rmr->rkey, (uintptr_t)remote + 136, v3);
	CHECK(ibv_wr_complete(x) == 0, "wr_complete: %s", strerror(errno));
	expect_wc(3, IBV_WC_SUCCESS);
	expect_wc(5, IBV_WC_SUCCESS);
	CHECK(!memcmp(remote + 128, want2, 8), "wr_atomic_write: first word %02x ... %02x", remote[128], remote[135]);
	CHECK(!memcmp(remote + 136, v3, 8), "wr_atomic_write: second word %02x", remote[136]);
	CHECK(remote[256] == 0xab && remote[271] == 0xab, "the RDMA WRITE between them");

	/* A misaligned target fails the batch, and nothing of it is posted. */
	ibv_wr_start(x);
	x->wr_id = 6;
	ibv_wr_atomic_write(x, rmr->rkey, (uintptr_t)remote + 130, v3);
	CHECK(ibv_wr_complete(x) == EINVAL, "misaligned wr_atomic_write: not EINVAL");

	/* The target MR has no remote write: a remote access error. */
	CHECK(post(a, 7, &sge, 1, (uintptr_t)ro, romr->rkey) == 0, "post_send: %s", strerror(errno));
	expect_wc(7, IBV_WC_REM_ACCESS_ERR);
	for (int i = 0; i < 4096; i++)
		if (ro[i]) {
			CHECK(0, "a refused ATOMIC WRITE changed memory at %d", i);
			break;
		}

	ibv_destroy_qp(a);
	ibv_destroy_qp(b);
	ibv_destroy_qp(ua);
	ibv_destroy_qp(ub);
	ibv_dereg_mr(lmr);
	ibv_dereg_mr(rmr);
	ibv_dereg_mr(romr);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	free(local);
	free(remote);
	free(ro);
	if (failures) {
		fprintf(stderr, "atomic_write: %d failures\n", failures);
		return 1;
	}
	printf("atomic_write: post_send and wr_atomic_write pass\n");
	return 0;
}
