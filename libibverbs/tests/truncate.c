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

#include "pair.h"

static int write_wr(struct side *s, struct ibv_mr *src, struct ibv_mr *dst, size_t n)
{
	struct ibv_wc wc;

	if (post_one(s, IBV_WR_RDMA_WRITE, src->addr, (uint32_t)n, src->lkey, (uintptr_t)dst->addr, dst->rkey, 0, 0))
		return -1;
	return wait_wc(s, &wc);
}

int main(void)
{
	struct side a, b;
	int ndev;

	if (pair_open(&a, &b, 4, &ndev))
		return 1;
	struct ibv_pd *pd = a.pd;
	int acc = PAIR_ACCESS;
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
	int st = write_wr(&b, ms, mf, n);
	char back[16] = {0};
	CHECK(st == IBV_WC_SUCCESS && pread(fd, back, sizeof(back), 4096) == sizeof(back) && back[0] == 7,
	      "a WRITE into the file: status %d, the file holds %d", st, back[0]);
	CHECK(!ftruncate(fd, 0), "ftruncate");
	st = write_wr(&b, ms, mf, n);
	CHECK(st == IBV_WC_REM_ACCESS_ERR, "a WRITE into the truncated file: %s, want remote access error",
	      st < 0 ? "no completion" : ibv_wc_status_str((enum ibv_wc_status)st));
	CHECK(!ibv_dereg_mr(mf) && !ibv_dereg_mr(ms), "ibv_dereg_mr");
	side_close(&b);
	side_close(&a);
	munmap(f, n);
	close(fd);
	free(src);
	printf("truncate: %d failures\n", failures);
	return failures != 0;
}
