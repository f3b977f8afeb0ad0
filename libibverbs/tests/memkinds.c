/* memkinds: ibv_reg_mr on every kind of memory a program has, each the
 * target of an RC RDMA WRITE on one device: the malloc heap (small and
 * large chunks), memalign, anonymous mmap, the stack, .bss and .data, a
 * private file mapping, and huge pages when the machine has some. The
 * WRITE must land in the program's own bytes (read through its pointer),
 * the bytes around it must be unchanged, and after ibv_dereg_mr the memory
 * must still hold the data and take writes. Memory that is already shared
 * (a MAP_SHARED file mapping, SysV shm) is refused with EOPNOTSUPP.
 *
 *   memkinds              (the library found on LD_LIBRARY_PATH) */
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <unistd.h>

#include "common.h"

static char bss_buf[3 * 4096];
static char data_buf[3 * 4096] = {1, 2, 3};

#define FAIL(...)                                  \
	do {                                       \
		fprintf(stderr, "FAIL: " __VA_ARGS__); \
		fputc('\n', stderr);               \
		failures++;                        \
	} while (0)

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_cq *cq;
static struct ibv_qp *qa, *qb;
static struct ibv_mr *src_mr;
static char *src;

static void connect_qp(struct ibv_qp *q, uint32_t dest)
{
	struct ibv_port_attr port;
	union ibv_gid gid;

	if (ibv_query_port(ctx, 1, &port) || ibv_query_gid(ctx, 1, 0, &gid) ||
	    tc_connect(q, dest, &port, &gid, IBV_ACCESS_REMOTE_WRITE, 14, 7))
		exit(1);
}

/* One kind: WRITE len bytes into buf+off (buf of size bytes), check. */
static void try_kind(const char *kind, char *buf, size_t size, size_t off, size_t len)
{
	char *before = malloc(size);
	struct ibv_wc wc;
	struct ibv_send_wr *bad;

	for (size_t i = 0; i < size; i++)
		buf[i] = (char)(i * 13 + 5);
	memcpy(before, buf, size);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf + off, len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!mr) {
		FAIL("%s: ibv_reg_mr: %s", kind, strerror(errno));
		free(before);
		return;
	}
	if (memcmp(before, buf, size))
		FAIL("%s: registration changed the program's bytes", kind);
	for (size_t i = 0; i < len; i++)
		src[i] = (char)(i * 7 + 1);
	struct ibv_sge sge = {.addr = (uintptr_t)src, .length = len, .lkey = src_mr->lkey};
	struct ibv_send_wr wr = {.sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
				 .send_flags = IBV_SEND_SIGNALED,
				 .wr.rdma = {.remote_addr = (uintptr_t)buf + off, .rkey = mr->rkey}};
	if (ibv_post_send(qa, &wr, &bad)) {
		FAIL("%s: post", kind);
		return;
	}
	int n;
	while ((n = ibv_poll_cq(cq, 1, &wc)) == 0)
		;
	if (n < 0 || wc.status != IBV_WC_SUCCESS)
		FAIL("%s: WRITE completed with %s", kind, ibv_wc_status_str(wc.status));
	if (memcmp(buf + off, src, len))
		FAIL("%s: the WRITE is not in the program's bytes", kind);
	if (memcmp(buf, before, off) || memcmp(buf + off + len, before + off + len, size - off - len))
		FAIL("%s: bytes around the MR changed", kind);
	if (ibv_dereg_mr(mr))
		FAIL("%s: ibv_dereg_mr", kind);
	if (memcmp(buf + off, src, len))
		FAIL("%s: deregistration lost the data", kind);
	buf[off] ^= 0x55; /* still the program's, still writable */
	free(before);
	printf("%-22s ok\n", kind);
}

int main(void)
{
	int num;
	struct ibv_device **list = ibv_get_device_list(&num);

	if (!list || num < 1 || !(ctx = ibv_open_device(list[0]))) {
		fprintf(stderr, "no device\n");
		return 1;
	}
	pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	struct ibv_qp_init_attr qi = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
				      .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
	qa = ibv_create_qp(pd, &qi);
	qb = ibv_create_qp(pd, &qi);
	if (!pd || !cq || !qa || !qb)
		return 1;
	connect_qp(qa, qb->qp_num);
	connect_qp(qb, qa->qp_num);
	src = malloc(1 << 21);
	src_mr = ibv_reg_mr(pd, src, 1 << 21, 0);
	if (!src_mr)
		return 1;

	char *small = malloc(100);
	try_kind("malloc 100 B", small, 100, 10, 50);
	free(small);
	char *large = malloc(1 << 20); /* an mmap'd chunk */
	try_kind("malloc 1 MiB", large, 1 << 20, 4000, 300000);
	free(large);
	char *al = memalign(4096, 3 * 4096);
	try_kind("memalign", al, 3 * 4096, 4096, 4096);
	free(al);
	char *an = mmap(NULL, 5 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	try_kind("mmap anonymous", an, 5 * 4096, 100, 4 * 4096);
	munmap(an, 5 * 4096);
	char stack[3 * 4096];
	try_kind("stack", stack, sizeof(stack), 4100, 4000);
	try_kind(".bss", bss_buf, sizeof(bss_buf), 1, 2 * 4096);
	try_kind(".data", data_buf, sizeof(data_buf), 0, 3 * 4096);

	char path[] = "/tmp/memkinds.XXXXXX";
	int fd = mkstemp(path);
	unlink(path);
	if (fd < 0 || ftruncate(fd, 4 * 4096))
		return 1;
	char *fp = mmap(NULL, 4 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
	try_kind("private file mapping", fp, 4 * 4096, 8, 3 * 4096);
	munmap(fp, 4 * 4096);

	char *hp = mmap(NULL, 2 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
	if (hp != MAP_FAILED) {
		try_kind("huge pages", hp, 2 << 20, 4096, 8192);
		munmap(hp, 2 << 20);
	} else {
		printf("%-22s not tried: no huge pages reserved on this machine\n", "huge pages");
	}

	/* Already shared: refused, nothing changes. */
	char *sf = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	errno = 0;
	if (ibv_reg_mr(pd, sf, 4096, IBV_ACCESS_LOCAL_WRITE) || errno != EOPNOTSUPP)
		FAIL("shared file mapping: want EOPNOTSUPP, errno %d", errno);
	else
		printf("%-22s refused (EOPNOTSUPP)\n", "shared file mapping");
	munmap(sf, 4096);
	int id = shmget(IPC_PRIVATE, 4096, IPC_CREAT | 0600);
	char *shm = id >= 0 ? shmat(id, NULL, 0) : (void *)-1;
	if (shm != (void *)-1) {
		errno = 0;
		if (ibv_reg_mr(pd, shm, 4096, IBV_ACCESS_LOCAL_WRITE) || errno != EOPNOTSUPP)
			FAIL("SysV shm: want EOPNOTSUPP, errno %d", errno);
		else
			printf("%-22s refused (EOPNOTSUPP)\n", "SysV shm");
		shmdt(shm);
		shmctl(id, IPC_RMID, NULL);
	}
	close(fd);

	ibv_dereg_mr(src_mr);
	free(src);
	ibv_destroy_qp(qa);
	ibv_destroy_qp(qb);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	if (failures) {
		fprintf(stderr, "memkinds: %d checks failed\n", failures);
		return 1;
	}
	return 0;
}
