/* moved: registered private memory that the program moves with mremap, as
 * realloc moves a large buffer. The moved pages keep their bytes when the
 * stale MR over the old address is deregistered, a registration of the
 * new address reaches the same pages, and deregistering everything leaves
 * the bytes as they were. */
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "common.h"

#define N (4u << 20)

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
	int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	char *p = mmap(NULL, N, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return 1;
	memset(p, 'a', N);
	struct ibv_mr *old = ibv_reg_mr(pd, p, N, acc);
	CHECK(old, "ibv_reg_mr");
	/* realloc's move: to a larger size, elsewhere */
	char *q = mremap(p, N, 2 * N, MREMAP_MAYMOVE);
	CHECK(q != MAP_FAILED, "mremap");
	if (!old || q == MAP_FAILED)
		return 1;
	CHECK(all(q, N, 'a'), "mremap lost the bytes");
	memset(q, 'b', N);
	struct ibv_mr *moved = ibv_reg_mr(pd, q, 2 * N, acc);
	CHECK(moved, "ibv_reg_mr of the moved buffer");
	CHECK(!ibv_dereg_mr(old), "ibv_dereg_mr of the stale MR");
	CHECK(all(q, N, 'b'), "deregistering the stale MR lost the moved buffer's bytes");
	memset(q, 'c', N);
	if (moved)
		CHECK(!ibv_dereg_mr(moved), "ibv_dereg_mr of the moved buffer's MR");
	CHECK(all(q, N, 'c'), "deregistering the moved buffer's MR lost its bytes");
	munmap(q, 2 * N);
	ibv_dealloc_pd(pd);
	ibv_close_device(c);
	ibv_free_device_list(l);
	printf("moved: %d failures\n", failures);
	return failures != 0;
}
