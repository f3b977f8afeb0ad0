/* forkmem: fork with registered private memory (libibverbs/mem.c). The
 * child gets the memory as private memory of its own, as the kernel gives
 * a child copies of pinned pages: its stores stay its own, and the
 * parent's MR keeps moving bytes into the parent's pages after the fork.
 * The child can open the device and register memory itself. Shared
 * memory stays shared with the child. */
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"

#define N (1u << 20)

static int all(const char *p, size_t n, char c)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != c)
			return 0;
	return 1;
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
	CHECK(a && b && !tc_connect(a, b->qp_num, &port, &gid, acc, 14, 7) &&
		      !tc_connect(b, a->qp_num, &port, &gid, acc, 14, 7),
	      "connecting two QPs");
	CHECK(ibv_is_fork_initialized() == IBV_FORK_UNNEEDED, "ibv_is_fork_initialized: want IBV_FORK_UNNEEDED");

	char *priv = malloc(N), *src = malloc(N);
	char *shared = mmap(NULL, N, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	memset(priv, 'A', N);
	memset(shared, 'S', N);
	memset(src, 'B', N);
	struct ibv_mr *mp = ibv_reg_mr(pd, priv, N, acc), *ms = ibv_reg_mr(pd, src, N, acc);
	struct ibv_mr *mh = ibv_reg_mr(pd, shared, N, acc);
	CHECK(mp && ms && mh, "ibv_reg_mr");
	if (!mp || !ms || !mh)
		return 1;

	pid_t pid = fork();
	if (pid == 0) {
		/* the child: the parent's bytes as of the fork, its own stores
		 * its own; shared memory shared; a device of its own */
		int bad = !all(priv, N, 'A');
		memset(priv, 'C', N);
		memset(shared, 'T', 4096);
		struct ibv_device **cl = ibv_get_device_list(NULL);
		struct ibv_context *cc = cl && cl[0] ? ibv_open_device(cl[0]) : NULL;
		struct ibv_pd *cpd = cc ? ibv_alloc_pd(cc) : NULL;
		struct ibv_mr *cm = cpd ? ibv_reg_mr(cpd, priv, N, acc) : NULL;
		bad |= !cm || ibv_dereg_mr(cm) || !all(priv, N, 'C');
		_exit(bad);
	}
	int st = 0;
	CHECK(pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0,
	      "the child saw the wrong bytes or could not register (status %#x)", st);
	CHECK(all(priv, N, 'A'), "the child's stores reached the parent's private memory");
	CHECK(all(shared, 4096, 'T'), "the child's stores did not reach the memory both share");

	/* the parent's MR still reaches the parent's pages */
	struct ibv_sge sg = {(uintptr_t)src, N, ms->lkey};
	struct ibv_send_wr w = {.sg_list = &sg, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED},
			   *bad;
	w.wr.rdma.remote_addr = (uintptr_t)priv;
	w.wr.rdma.rkey = mp->rkey;
	struct ibv_wc wc;
	int n = 0;
	CHECK(!ibv_post_send(a, &w, &bad), "ibv_post_send");
	for (int i = 0; i < 10000000 && (n = ibv_poll_cq(cq, 1, &wc)) == 0; i++)
		;
	CHECK(n == 1 && wc.status == IBV_WC_SUCCESS, "the WRITE after fork: %d %s", n,
	      n == 1 ? ibv_wc_status_str(wc.status) : "no completion");
	CHECK(all(priv, N, 'B'), "the WRITE after fork did not reach the parent's memory");
	CHECK(!ibv_dereg_mr(mp) && !ibv_dereg_mr(ms) && !ibv_dereg_mr(mh), "ibv_dereg_mr");
	CHECK(all(priv, N, 'B'), "deregistration changed the bytes");
	ibv_destroy_qp(a);
	ibv_destroy_qp(b);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(c);
	ibv_free_device_list(l);
	free(priv);
	free(src);
	munmap(shared, N);
	printf("forkmem: %d failures\n", failures);
	return failures != 0;
}
