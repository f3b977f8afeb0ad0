/* timestamps: the device clock and completion timestamps.
 * ibv_query_device_ex reports hca_core_clock; ibv_query_rt_values_ex
 * reads the raw clock (ticks in tv_nsec, as mlx5), which never goes back
 * and ticks at that rate: the ticks between two readings, as ns, lie
 * between the CLOCK_MONOTONIC intervals that bracket them. A CQ made
 * with IBV_WC_EX_WITH_COMPLETION_TIMESTAMP{,_WALLCLOCK} gives each
 * completion the device clock (between the raw readings around it, never
 * going back) and the wall clock (within TOLERANCE_NS of clock_gettime's
 * CLOCK_REALTIME around it); flags the device cannot honour are
 * EOPNOTSUPP.
 *
 *   timestamps         (the library found on LD_LIBRARY_PATH) */
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common.h"

#define TOLERANCE_NS 1000000ULL /* 1 ms */

static uint64_t now_ns(clockid_t c)
{
	struct timespec ts;

	clock_gettime(c, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static uint64_t raw_clock(struct ibv_context *ctx)
{
	struct ibv_values_ex v = {.comp_mask = IBV_VALUES_MASK_RAW_CLOCK};
	int err = ibv_query_rt_values_ex(ctx, &v);

	CHECK(err == 0 && v.comp_mask == IBV_VALUES_MASK_RAW_CLOCK && v.raw_clock.tv_sec == 0,
	      "query_rt_values_ex: %s, comp_mask %#x, tv_sec %lld", strerror(err), v.comp_mask,
	      (long long)v.raw_clock.tv_sec);
	return (uint64_t)v.raw_clock.tv_nsec;
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
	struct ibv_device_attr_ex dx;
	CHECK(ibv_query_device_ex(ctx, NULL, &dx) == 0 && dx.hca_core_clock > 0 && dx.completion_timestamp_mask,
	      "hca_core_clock %llu kHz, completion_timestamp_mask %#llx", (unsigned long long)dx.hca_core_clock,
	      (unsigned long long)dx.completion_timestamp_mask);
	uint64_t khz = dx.hca_core_clock ? dx.hca_core_clock : 1;

	/* The raw clock: monotonic, at its stated rate. */
	struct ibv_values_ex bad = {.comp_mask = 1u << 5};
	CHECK(ibv_query_rt_values_ex(ctx, &bad) == EINVAL, "an unknown comp_mask bit: not EINVAL");
	uint64_t m0 = now_ns(CLOCK_MONOTONIC), r0 = raw_clock(ctx), m1 = now_ns(CLOCK_MONOTONIC);
	uint64_t prev = r0;
	for (int i = 0; i < 100; i++) {
		uint64_t r = raw_clock(ctx);
		CHECK(r >= prev, "raw clock went back: %llu after %llu", (unsigned long long)r, (unsigned long long)prev);
		prev = r;
	}
	struct timespec nap = {.tv_nsec = 20 * 1000 * 1000};
	nanosleep(&nap, NULL);
	uint64_t m2 = now_ns(CLOCK_MONOTONIC), r1 = raw_clock(ctx), m3 = now_ns(CLOCK_MONOTONIC);
	/* ticks → ns, in two steps to keep the product in 64 bits */
	uint64_t dt = r1 - r0, dns = dt / khz * 1000000ULL + dt % khz * 1000000ULL / khz;
	CHECK(dns + 1 >= m2 - m1 && dns <= m3 - m0 + 1,
	      "%llu ticks at %llu kHz = %llu ns, the monotonic clock says between %llu and %llu", (unsigned long long)dt,
	      (unsigned long long)khz, (unsigned long long)dns, (unsigned long long)(m2 - m1),
	      (unsigned long long)(m3 - m0));

	/* Flags the device cannot honour. */
	struct ibv_cq_init_attr_ex cia = {.cqe = 16, .wc_flags = IBV_WC_EX_WITH_FLOW_TAG};
	errno = 0;
	CHECK(ibv_create_cq_ex(ctx, &cia) == NULL && errno == EOPNOTSUPP, "a flow-tag CQ: %s", strerror(errno));

	cia.wc_flags = IBV_WC_STANDARD_FLAGS | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP |
		       IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK;
	struct ibv_cq_ex *cqx = ibv_create_cq_ex(ctx, &cia);
	struct ibv_cq *plain = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	uint8_t *mem = aligned_alloc(4096, 4096);
	struct ibv_mr *mr = pd ? ibv_reg_mr(pd, mem, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE) : NULL;
	if (!cqx || !plain || !pd || !mr) {
		fprintf(stderr, "setup failed: %s\n", strerror(errno));
		return 1;
	}
	struct ibv_qp_init_attr qa = {.send_cq = ibv_cq_ex_to_cq(cqx), .recv_cq = ibv_cq_ex_to_cq(cqx),
				      .qp_type = IBV_QPT_RC,
				      .cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *a = ibv_create_qp(pd, &qa);
	qa.send_cq = qa.recv_cq = plain;
	struct ibv_qp *b = ibv_create_qp(pd, &qa);
	if (!a || !b || tc_connect(a, b->qp_num, &port, &gid, IBV_ACCESS_REMOTE_WRITE, 10, 2) ||
	    tc_connect(b, a->qp_num, &port, &gid, IBV_ACCESS_REMOTE_WRITE, 10, 2)) {
		fprintf(stderr, "QPs: %s\n", strerror(errno));
		return 1;
	}

	uint64_t last = 0;
	for (int i = 0; i < 5; i++) {
		uint64_t before = raw_clock(ctx), w0 = now_ns(CLOCK_REALTIME);
		struct ibv_sge sge = {.addr = (uintptr_t)mem, .length = 64, .lkey = mr->lkey};
		struct ibv_send_wr wr = {.wr_id = i, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
					 .send_flags = IBV_SEND_SIGNALED,
					 .wr.rdma = {.remote_addr = (uintptr_t)mem + 2048, .rkey = mr->rkey}}, *badwr;
		CHECK(ibv_post_send(a, &wr, &badwr) == 0, "post %d: %s", i, strerror(errno));
		struct ibv_poll_cq_attr pa = {0};
		int ret = ENOENT;
		for (long spins = 0; ret == ENOENT && spins < 50000000; spins++)
			ret = ibv_start_poll(cqx, &pa);
		if (ret) {
			CHECK(0, "completion %d: %s", i, strerror(ret));
			break;
		}
		uint64_t ts = ibv_wc_read_completion_ts(cqx), wall = ibv_wc_read_completion_wallclock_ns(cqx);
		uint64_t id = cqx->wr_id;
		enum ibv_wc_status st = cqx->status;
		ibv_end_poll(cqx);
		uint64_t w1 = now_ns(CLOCK_REALTIME), after = raw_clock(ctx);
		CHECK(id == (uint64_t)i && st == IBV_WC_SUCCESS, "completion %d: wr %llu %s", i, (unsigned long long)id,
		      ibv_wc_status_str(st));
		CHECK(ts >= before && ts <= after, "completion %d at %llu, the raw clock read %llu before and %llu after", i,
		      (unsigned long long)ts, (unsigned long long)before, (unsigned long long)after);
		CHECK(ts >= last, "completion %d at %llu, after one at %llu", i, (unsigned long long)ts,
		      (unsigned long long)last);
		last = ts;
		CHECK(wall + TOLERANCE_NS >= w0 && wall <= w1 + TOLERANCE_NS,
		      "completion %d: wallclock %llu ns, clock_gettime said %llu .. %llu", i, (unsigned long long)wall,
		      (unsigned long long)w0, (unsigned long long)w1);
	}

	ibv_destroy_qp(a);
	ibv_destroy_qp(b);
	ibv_dereg_mr(mr);
	CHECK(ibv_destroy_cq(ibv_cq_ex_to_cq(cqx)) == 0, "destroy cq_ex");
	ibv_destroy_cq(plain);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	free(mem);
	if (failures) {
		fprintf(stderr, "timestamps: %d failures\n", failures);
		return 1;
	}
	printf("timestamps: ok\n");
	return 0;
}
