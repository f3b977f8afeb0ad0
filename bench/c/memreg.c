/* memreg: what registering the program's memory costs and how fast the
 * device moves it, beside memcpy of the same sizes in the same run
 * (scripts/bench-mem.sh; BENCHMARKS.md). A benchmark, not a test: it
 * checks the bytes it moves but asserts no time.
 *
 *   memreg reg [MAXSIZE]   ibv_reg_mr+ibv_dereg_mr by size, for private,
 *                          shared and on-demand memory, and memcpy
 *   memreg bw [SIZE]       RDMA WRITE and READ of SIZE (64 KiB) between two
 *                          RC QPs of one device, from and into private,
 *                          shared and on-demand memory, and memcpy */
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "../../libibverbs/tests/common.h"

/* common.h brings ctest's failure count, which a benchmark does not use */
static int *unused_failures __attribute__((unused)) = &failures;

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

static int cmpd(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

enum kind { PRIVATE, SHARED, ODP };
static const char *kname[] = {"private", "shared", "odp"};

static char *alloc(enum kind k, size_t n)
{
	char *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_ANONYMOUS | (k == SHARED ? MAP_SHARED : MAP_PRIVATE), -1, 0);
	if (p == MAP_FAILED) {
		perror("mmap");
		exit(1);
	}
	memset(p, 1, n);
	return p;
}

static int access_of(enum kind k)
{
	return IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
	       (k == ODP ? IBV_ACCESS_ON_DEMAND : 0);
}

static int reg_bench(struct ibv_pd *pd, size_t max)
{
	printf("%-10s %12s %12s %12s %12s\n", "size", "private_us", "shared_us", "odp_us", "memcpy_us");
	for (size_t n = 4096; n <= max; n = n < (256u << 20) ? n * 16 : n * 4) {
		int reps = n >= (64u << 20) ? 3 : n >= (1u << 20) ? 9 : 51;
		double med[4];
		for (int k = 0; k <= ODP; k++) {
			char *p = alloc(k, n);
			double t[64];
			for (int r = 0; r < reps; r++) {
				double t0 = now();
				struct ibv_mr *mr = ibv_reg_mr(pd, p, n, access_of(k));
				if (!mr || ibv_dereg_mr(mr)) {
					perror("reg/dereg");
					return 1;
				}
				t[r] = now() - t0;
			}
			qsort(t, reps, sizeof(double), cmpd);
			med[k] = t[reps / 2] * 1e6;
			munmap(p, n);
		}
		char *a = alloc(PRIVATE, n), *b = alloc(PRIVATE, n);
		double t[64];
		for (int r = 0; r < reps; r++) {
			double t0 = now();
			memcpy(b, a, n);
			__asm__ volatile("" ::: "memory");
			t[r] = now() - t0;
		}
		qsort(t, reps, sizeof(double), cmpd);
		med[3] = t[reps / 2] * 1e6;
		munmap(a, n);
		munmap(b, n);
		printf("%-10zu %12.1f %12.1f %12.1f %12.1f\n", n, med[0], med[1], med[2], med[3]);
	}
	return 0;
}

/* GB/s of SIZE-byte operations op from src into dst for about secs. */
static double move(struct ibv_qp *q, struct ibv_cq *cq, enum ibv_wr_opcode op, struct ibv_mr *local,
		   struct ibv_mr *remote, size_t size, double secs)
{
	const int depth = 16;
	long done = 0, posted = 0;
	double t0 = now(), t1;
	for (;;) {
		while (posted - done < depth) {
			struct ibv_sge sg = {(uintptr_t)local->addr, (uint32_t)size, local->lkey};
			struct ibv_send_wr w = {.sg_list = &sg, .num_sge = 1, .opcode = op, .send_flags = IBV_SEND_SIGNALED}, *bad;
			w.wr.rdma.remote_addr = (uintptr_t)remote->addr;
			w.wr.rdma.rkey = remote->rkey;
			if (ibv_post_send(q, &w, &bad))
				return -1;
			posted++;
		}
		struct ibv_wc wc[16];
		int n = ibv_poll_cq(cq, 16, wc);
		for (int i = 0; i < n; i++)
			if (wc[i].status)
				return -1;
		done += n;
		if ((t1 = now()) - t0 > secs && posted == done)
			break;
	}
	return done * (double)size / (t1 - t0) / 1e9;
}

static int bw_bench(struct ibv_context *c, struct ibv_pd *pd, size_t size)
{
	struct ibv_cq *cq = ibv_create_cq(c, 64, NULL, NULL, 0);
	struct ibv_port_attr port;
	union ibv_gid gid;
	ibv_query_port(c, 1, &port);
	ibv_query_gid(c, 1, 0, &gid);
	struct ibv_qp_init_attr ia = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
				      .cap = {.max_send_wr = 32, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *a = ibv_create_qp(pd, &ia), *b = ibv_create_qp(pd, &ia);
	int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	if (!cq || !a || !b || tc_connect(a, b->qp_num, &port, &gid, acc, 14, 7) ||
	    tc_connect(b, a->qp_num, &port, &gid, acc, 14, 7)) {
		perror("setup");
		return 1;
	}
	char *x = alloc(PRIVATE, size), *y = alloc(PRIVATE, size);
	double t0 = now();
	long reps = 0;
	while (now() - t0 < 0.5) {
		memcpy(y, x, size);
		__asm__ volatile("" ::: "memory");
		reps++;
	}
	double mc = reps * (double)size / (now() - t0) / 1e9;
	printf("%-8s %10s %10s %10s %10s\n", "memory", "write_GBs", "read_GBs", "memcpy_GBs", "ratio_w/r");
	for (int k = 0; k <= ODP; k++) {
		char *src = alloc(k, size), *dst = alloc(k, size);
		memset(src, 0x5a + k, size);
		struct ibv_mr *ms = ibv_reg_mr(pd, src, size, access_of(k)), *md = ibv_reg_mr(pd, dst, size, access_of(k));
		if (!ms || !md) {
			perror("reg");
			return 1;
		}
		double w = move(a, cq, IBV_WR_RDMA_WRITE, ms, md, size, 0.5);
		for (size_t i = 0; i < size; i++)
			if (dst[i] != (char)(0x5a + k)) {
				fprintf(stderr, "%s: WRITE byte %zu wrong\n", kname[k], i);
				return 1;
			}
		memset(src, 0, size);
		double r = move(a, cq, IBV_WR_RDMA_READ, ms, md, size, 0.5);
		for (size_t i = 0; i < size; i++)
			if (src[i] != (char)(0x5a + k)) {
				fprintf(stderr, "%s: READ byte %zu wrong\n", kname[k], i);
				return 1;
			}
		if (w < 0 || r < 0) {
			fprintf(stderr, "%s: a work request failed\n", kname[k]);
			return 1;
		}
		printf("%-8s %10.2f %10.2f %10.2f %5.2f/%4.2f\n", kname[k], w, r, mc, w / mc, r / mc);
		ibv_dereg_mr(ms);
		ibv_dereg_mr(md);
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct ibv_device **l = ibv_get_device_list(NULL);
	struct ibv_context *c = l && l[0] ? ibv_open_device(l[0]) : NULL;
	struct ibv_pd *pd = c ? ibv_alloc_pd(c) : NULL;
	if (!pd || argc < 2) {
		fprintf(stderr, "usage: memreg reg [MAXSIZE] | bw [SIZE] (on an rdmafs device)\n");
		return 2;
	}
	if (!strcmp(argv[1], "reg"))
		return reg_bench(pd, argc > 2 ? strtoull(argv[2], NULL, 0) : (1ul << 30));
	return bw_bench(c, pd, argc > 2 ? strtoull(argv[2], NULL, 0) : 65536);
}
