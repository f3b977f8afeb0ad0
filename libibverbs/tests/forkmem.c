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

#include "pair.h"

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
	struct side a, b;
	int ndev;

	if (pair_open(&a, &b, 4, &ndev))
		return 1;
	struct ibv_pd *pd = a.pd;
	int acc = PAIR_ACCESS;
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
	struct ibv_wc wc;
	CHECK(!post_one(&b, IBV_WR_RDMA_WRITE, src, N, ms->lkey, (uintptr_t)priv, mp->rkey, 0, 0), "ibv_post_send");
	int st2 = wait_wc(&b, &wc);
	CHECK(st2 == IBV_WC_SUCCESS, "the WRITE after fork: %s",
	      st2 < 0 ? "no completion" : ibv_wc_status_str((enum ibv_wc_status)st2));
	CHECK(all(priv, N, 'B'), "the WRITE after fork did not reach the parent's memory");
	CHECK(!ibv_dereg_mr(mp) && !ibv_dereg_mr(ms) && !ibv_dereg_mr(mh), "ibv_dereg_mr");
	CHECK(all(priv, N, 'B'), "deregistration changed the bytes");
	side_close(&b);
	side_close(&a);
	free(priv);
	free(src);
	munmap(shared, N);
	printf("forkmem: %d failures\n", failures);
	return failures != 0;
}
