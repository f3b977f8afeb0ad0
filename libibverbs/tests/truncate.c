/* truncate: a registered file that the program truncates under the device.
 * The daemon never maps a file that can shrink (a SIGBUS there would stop
 * it for every user): it reaches such memory through the program's
 * address space, so a WRITE into the truncated pages completes with the
 * remote access error a NIC's fault gives, and the device goes on. */
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common.h"

static int write_wr(struct ibv_qp *q, struct ibv_cq *cq, struct ibv_mr *s, struct ibv_mr *d, size_t n)
{
	struct ibv_sge sg = {(uintptr_t)s->addr, (uint32_t)n, s->lkey};
	struct ibv_send_wr w = {.sg_list = &sg, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED},
			   *bad;
	struct ibv_wc wc;
	int k = 0;

	w.wr.rdma.remote_addr = (uintptr_t)d->addr;
	w.wr.rdma.rkey = d->rkey;
	if (ibv_post_send(q, &w, &bad))
		return -1;
	for (long i = 0; i < 100000000 && (k = ibv_poll_cq(cq, 1, &wc)) == 0; i++)
		;
	return k == 1 ? (int)wc.status : -1;
}

int main(void)
{
	struct ibv_device **l = ibv_get_device_list(NULL);
	struct ibv_context *c = l && l[0] ? ibv_open_device(l[0]) : NULL;
	if (!c) {
		perror("ibv_open_device");
		return 1;
	}
	struct ibv_pd *pd = ibv_alloc_pd(c);
	struct ibv_cq *cq = ibv_create_cq(c, 16, NULL, NULL, 0);
	struct ibv_port_attr port;
	union ibv_gid gid;
	ibv_query_port(c, 1, &port);
	ibv_query_gid(c, 1, 0, &gid);
	struct ibv_qp_init_attr ia = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
				      .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *a = ibv_create_qp(pd, &ia), *b = ibv_create_qp(pd, &ia);
	int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	/* one try: the failed WRITE moves the requester to the error state */
	if (!a || !b || tc_connect(a, b->qp_num, &port, &gid, acc, 14, 1) || tc_connect(b, a->qp_num, &port, &gid, acc, 14, 1)) {
		perror("connecting two QPs");
		return 1;
	}
	const size_t n = 1 << 20;
	char path[] = "/tmp/rdmafs-truncate-XXXXXX";
	int fd = mkstemp(path);
	if (fd < 0 || unlink(path) || ftruncate(fd, (off_t)n))
		return 1;
	char *f = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0), *src = malloc(n);
	if (f == MAP_FAILED || !src)
		return 1;
	memset(src, 7, n);
	struct ibv_mr *ms = ibv_reg_mr(pd, src, n, acc), *mf = ibv_reg_mr(pd, f, n, acc);
	CHECK(ms && mf, "ibv_reg_mr of a malloc buffer and of a shared file mapping");
	if (!ms || !mf)
		return 1;
	int st = write_wr(a, cq, ms, mf, n);
	char back[16] = {0};
	CHECK(st == IBV_WC_SUCCESS && pread(fd, back, sizeof(back), 4096) == sizeof(back) && back[0] == 7,
	      "a WRITE into the file: status %d, the file holds %d", st, back[0]);
	CHECK(!ftruncate(fd, 0), "ftruncate");
	st = write_wr(a, cq, ms, mf, n);
	CHECK(st == IBV_WC_REM_ACCESS_ERR, "a WRITE into the truncated file: %s, want remote access error",
	      st < 0 ? "no completion" : ibv_wc_status_str((enum ibv_wc_status)st));
	CHECK(!ibv_dereg_mr(mf) && !ibv_dereg_mr(ms), "ibv_dereg_mr");
	ibv_destroy_qp(a);
	ibv_destroy_qp(b);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(c);
	ibv_free_device_list(l);
	munmap(f, n);
	close(fd);
	free(src);
	printf("truncate: %d failures\n", failures);
	return failures != 0;
}
