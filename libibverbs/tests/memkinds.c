/* memkinds: every kind of memory a program has, registered with
 * ibv_reg_mr and used as target and source of every operation (issue 20,
 * items 4, 5, 6, 7), on one device or across two (RDMAFS_DEVICE_MOUNT=A:B:
 * the kind's memory on the first, the peer on the last).
 *
 * Kinds: the malloc heap (small, brk and mmap'd chunks), memalign, private
 * anonymous mmap, the stack, .bss, .data, a private file mapping; MAP_SHARED
 * anonymous, memfd, SysV shm, a /dev/shm file (shm_open), a file in /tmp
 * mapped shared; hugetlbfs 2 MiB pages, private and shared MAP_HUGETLB and
 * a MFD_HUGETLB memfd. For each, in its middle (the bytes around it must not
 * change):
 *   - the registration leaves the program's bytes as they were;
 *   - the peer WRITEs into it and READs it; the program WRITEs from it and
 *     READs into it; SEND from it and RECV into it; fetch-and-add and
 *     compare-and-swap on it, and into it (the fetched value's buffer);
 *   - shared kinds: a second process (forked after the registration, which
 *     maps the object anew where it can: memfd, shm, the files) sees what
 *     the device wrote, and the device sees what that process wrote;
 *   - the same memory registered at once in a second context of the same
 *     device (a second ibv_open_device) and, with two devices, in the
 *     other device's context, each MR moving the same bytes;
 *   - after ibv_dereg_mr the program's memory holds the data and takes
 *     writes.
 * And registration is checked against the mapping as the kernel does it:
 * PROT_NONE and unmapped memory give EFAULT; read-only memory with
 * LOCAL_WRITE or REMOTE_WRITE gives EFAULT, with REMOTE_READ or no access
 * registers (and a READ of it works); IBV_ACCESS_RELAXED_ORDERING is
 * accepted.
 *
 *   memkinds        (MEMKINDS_NEED_HUGE=1: no huge pages is a failure) */
#include <fcntl.h>
#include <pthread.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pair.h"

#ifndef MFD_HUGETLB
#define MFD_HUGETLB 4U
#endif

static char bss_buf[3 * 4096];
static char data_buf[3 * 4096] = {1, 2, 3};

static struct side a, b, a2, b2; /* a2: a second context of A's device, b2: its peer QP on B */
static int ndev;
static uint8_t *peer; /* B's memory, the other end */
static struct ibv_mr *peer_mr;
static uint8_t *aplain; /* plain memory on A, for B's transfers from the kind */
static struct ibv_mr *aplain_mr;
#define PEER_LEN (4u << 20)

static unsigned seq = 1;
static uint8_t pb(unsigned s, size_t i) { return (uint8_t)((i * 13 + (i >> 10) * 3 + s * 71 + 5) & 0xff); }
static void fill(void *p, size_t n, unsigned s)
{
	for (size_t i = 0; i < n; i++)
		((uint8_t *)p)[i] = pb(s, i);
}
static int same(const void *p, size_t n, unsigned s)
{
	for (size_t i = 0; i < n; i++)
		if (((const uint8_t *)p)[i] != pb(s, i))
			return 0;
	return 1;
}

static int done(struct side *s, const char *kind, const char *what)
{
	struct ibv_wc wc;
	int st = wait_wc(s, &wc);

	CHECK(st == IBV_WC_SUCCESS, "%s: %s completed with %s", kind, what,
	      st < 0 ? "nothing" : ibv_wc_status_str((enum ibv_wc_status)st));
	return st == IBV_WC_SUCCESS;
}

static int post_send_op(struct side *s, void *p, uint32_t n, uint32_t lkey)
{
	struct ibv_sge sge = {.addr = (uintptr_t)p, .length = n, .lkey = lkey};
	struct ibv_send_wr wr = {.sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED};
	struct ibv_send_wr *bad;

	return ibv_post_send(s->qp, &wr, &bad);
}

/* opener: how a second process gets the kind's memory: 0 from fork's copy of
 * the mapping, else a function that maps the object anew. */
typedef uint8_t *(*opener)(size_t size);
static int memfd_fd = -1, shm_id = -1;
static char shm_name[64], file_path[64];
static uint8_t *open_fd(int fd, size_t size)
{
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	return p == MAP_FAILED ? NULL : p;
}
static uint8_t *open_memfd(size_t size) { return open_fd(memfd_fd, size); }
static uint8_t *open_sysv(size_t size)
{
	(void)size;
	void *p = shmat(shm_id, NULL, 0);
	return p == (void *)-1 ? NULL : p;
}
static uint8_t *open_devshm(size_t size)
{
	int fd = shm_open(shm_name, O_RDWR, 0);
	return fd < 0 ? NULL : open_fd(fd, size);
}
static uint8_t *open_file(size_t size)
{
	int fd = open(file_path, O_RDWR);
	return fd < 0 ? NULL : open_fd(fd, size);
}

/* The kind's memory buf (size bytes; the test uses [off, off+len)). */
static void try_kind(const char *kind, uint8_t *buf, size_t size, size_t off, size_t len, int shared, opener reopen)
{
	uint8_t *before = malloc(size);
	uint8_t *m = buf + off;
	unsigned s;
	int ok = failures;

	if (len > PEER_LEN)
		len = PEER_LEN;
	fill(buf, size, seq++);
	memcpy(before, buf, size);
	struct ibv_mr *mr = ibv_reg_mr(a.pd, m, len, PAIR_ACCESS);
	if (!mr) {
		CHECK(0, "%s: ibv_reg_mr: %s", kind, strerror(errno));
		free(before);
		return;
	}
	CHECK(!memcmp(before, buf, size), "%s: the registration changed the program's bytes", kind);
	const uint32_t n = (uint32_t)len;

	/* the peer WRITEs into it, then READs it */
	fill(peer, n, s = seq++);
	if (!post_one(&b, IBV_WR_RDMA_WRITE, peer, n, peer_mr->lkey, (uintptr_t)m, mr->rkey, 0, 0) &&
	    done(&b, kind, "WRITE into it"))
		CHECK(same(m, n, s), "%s: the peer's WRITE is not in the program's bytes", kind);
	CHECK(!memcmp(buf, before, off) && !memcmp(m + n, before + off + n, size - off - n),
	      "%s: bytes around the MR changed", kind);
	memset(peer, 0, n);
	if (!post_one(&b, IBV_WR_RDMA_READ, peer, n, peer_mr->lkey, (uintptr_t)m, mr->rkey, 0, 0) &&
	    done(&b, kind, "READ of it"))
		CHECK(same(peer, n, s), "%s: the peer's READ did not get the program's bytes", kind);
	/* the program WRITEs from it and READs into it */
	fill(m, n, s = seq++);
	memset(peer, 0, n);
	if (!post_one(&a, IBV_WR_RDMA_WRITE, m, n, mr->lkey, (uintptr_t)peer, peer_mr->rkey, 0, 0) &&
	    done(&a, kind, "WRITE from it"))
		CHECK(same(peer, n, s), "%s: a WRITE from it did not carry the program's bytes", kind);
	fill(peer, n, s = seq++);
	if (!post_one(&a, IBV_WR_RDMA_READ, m, n, mr->lkey, (uintptr_t)peer, peer_mr->rkey, 0, 0) &&
	    done(&a, kind, "READ into it"))
		CHECK(same(m, n, s), "%s: a READ into it is not in the program's bytes", kind);
	/* SEND from it, RECV into it */
	fill(m, n, s = seq++);
	memset(peer, 0, n);
	if (!post_recv_one(&b, peer, n, peer_mr->lkey) && !post_send_op(&a, m, n, mr->lkey) &&
	    done(&a, kind, "SEND from it") && done(&b, kind, "RECV of its SEND"))
		CHECK(same(peer, n, s), "%s: a SEND from it did not carry the program's bytes", kind);
	fill(peer, n, s = seq++);
	if (!post_recv_one(&a, m, n, mr->lkey) && !post_send_op(&b, peer, n, peer_mr->lkey) &&
	    done(&b, kind, "SEND into it") && done(&a, kind, "RECV into it"))
		CHECK(same(m, n, s), "%s: a RECV into it is not in the program's bytes", kind);
	/* atomics on it (the peer's) and into it (the program's, on the peer) */
	if (n >= 16) {
		volatile uint64_t *t = (volatile uint64_t *)(((uintptr_t)m + 7) & ~(uintptr_t)7);
		uint64_t *res = (uint64_t *)peer;
		*t = 100;
		if (!post_one(&b, IBV_WR_ATOMIC_FETCH_AND_ADD, res, 8, peer_mr->lkey, (uintptr_t)t, mr->rkey, 5, 0) &&
		    done(&b, kind, "fetch-and-add on it"))
			CHECK(*res == 100 && *t == 105, "%s: fetch-and-add on it: fetched %llu, now %llu", kind,
			      (unsigned long long)*res, (unsigned long long)*t);
		if (!post_one(&b, IBV_WR_ATOMIC_CMP_AND_SWP, res, 8, peer_mr->lkey, (uintptr_t)t, mr->rkey, 105, 777) &&
		    done(&b, kind, "compare-and-swap on it"))
			CHECK(*res == 105 && *t == 777, "%s: compare-and-swap on it: fetched %llu, now %llu", kind,
			      (unsigned long long)*res, (unsigned long long)*t);
		uint64_t *on_peer = (uint64_t *)(peer + 64);
		*on_peer = 40;
		*t = 0;
		if (!post_one(&a, IBV_WR_ATOMIC_FETCH_AND_ADD, (void *)t, 8, mr->lkey, (uintptr_t)on_peer,
			      peer_mr->rkey, 2, 0) &&
		    done(&a, kind, "fetch-and-add into it"))
			CHECK(*t == 40 && *on_peer == 42, "%s: fetch-and-add into it: fetched %llu, peer now %llu", kind,
			      (unsigned long long)*t, (unsigned long long)*on_peer);
		if (!post_one(&a, IBV_WR_ATOMIC_CMP_AND_SWP, (void *)t, 8, mr->lkey, (uintptr_t)on_peer, peer_mr->rkey,
			      42, 9) &&
		    done(&a, kind, "compare-and-swap into it"))
			CHECK(*t == 42 && *on_peer == 9, "%s: compare-and-swap into it: fetched %llu, peer now %llu",
			      kind, (unsigned long long)*t, (unsigned long long)*on_peer);
	}
	/* a second process sharing it */
	if (shared) {
		fill(peer, n, s = seq++);
		if (!post_one(&b, IBV_WR_RDMA_WRITE, peer, n, peer_mr->lkey, (uintptr_t)m, mr->rkey, 0, 0))
			done(&b, kind, "WRITE into it");
		unsigned s2 = seq++;
		fflush(NULL);
		pid_t pid = fork();
		if (pid == 0) {
			uint8_t *cb = reopen ? reopen(size) : buf;
			if (!cb)
				_exit(3);
			if (!same(cb + off, n, s))
				_exit(4);
			fill(cb + off, n, s2);
			_exit(0);
		}
		int wst = 0;
		waitpid(pid, &wst, 0);
		CHECK(WIFEXITED(wst) && WEXITSTATUS(wst) == 0, "%s: the second process (%s): %s", kind,
		      reopen ? "mapping it anew" : "fork's mapping",
		      !WIFEXITED(wst)		 ? "died"
		      : WEXITSTATUS(wst) == 3 ? "could not map it"
		      : WEXITSTATUS(wst) == 4 ? "does not see the device's WRITE"
					      : "failed");
		if (WIFEXITED(wst) && WEXITSTATUS(wst) == 0) {
			CHECK(same(m, n, s2), "%s: the program does not see the second process's stores", kind);
			memset(peer, 0, n);
			if (!post_one(&a, IBV_WR_RDMA_WRITE, m, n, mr->lkey, (uintptr_t)peer, peer_mr->rkey, 0, 0) &&
			    done(&a, kind, "WRITE from it"))
				CHECK(same(peer, n, s2), "%s: the device does not see the second process's stores", kind);
		}
	}
	/* the same memory in a second context of the device, and on the other
	 * device */
	struct ibv_mr *mr2 = ibv_reg_mr(a2.pd, m, len, PAIR_ACCESS);
	CHECK(mr2, "%s: ibv_reg_mr in a second context of the device: %s", kind, strerror(errno));
	if (mr2) {
		fill(peer, n, s = seq++);
		if (!post_one(&b2, IBV_WR_RDMA_WRITE, peer, n, peer_mr->lkey, (uintptr_t)m, mr2->rkey, 0, 0) &&
		    done(&b2, kind, "WRITE through the second context's MR"))
			CHECK(same(m, n, s), "%s: a WRITE through the second context's MR is not in the program's bytes",
			      kind);
		memset(peer, 0, n);
		if (!post_one(&b, IBV_WR_RDMA_READ, peer, n, peer_mr->lkey, (uintptr_t)m, mr->rkey, 0, 0) &&
		    done(&b, kind, "READ through the first MR"))
			CHECK(same(peer, n, s), "%s: the first MR does not see the second's WRITE", kind);
		CHECK(!ibv_dereg_mr(mr2), "%s: ibv_dereg_mr (second context)", kind);
	}
	if (ndev > 1) {
		struct ibv_mr *mrb = ibv_reg_mr(b.pd, m, len, PAIR_ACCESS);
		CHECK(mrb, "%s: ibv_reg_mr on the other device: %s", kind, strerror(errno));
		if (mrb) {
			fill(m, n, s = seq++);
			memset(aplain, 0, n);
			if (!post_one(&b, IBV_WR_RDMA_WRITE, m, n, mrb->lkey, (uintptr_t)aplain, aplain_mr->rkey, 0, 0) &&
			    done(&b, kind, "WRITE from it on the other device"))
				CHECK(same(aplain, n, s), "%s: the other device's MR did not carry the program's bytes", kind);
			CHECK(!ibv_dereg_mr(mrb), "%s: ibv_dereg_mr (other device)", kind);
		}
	}
	/* deregistered: still the program's */
	fill(peer, n, s = seq++);
	if (!post_one(&b, IBV_WR_RDMA_WRITE, peer, n, peer_mr->lkey, (uintptr_t)m, mr->rkey, 0, 0))
		done(&b, kind, "WRITE into it");
	CHECK(!ibv_dereg_mr(mr), "%s: ibv_dereg_mr", kind);
	CHECK(same(m, n, s), "%s: the deregistration lost the data", kind);
	m[0] ^= 0x55;
	m[n - 1] ^= 0x55;
	free(before);
	printf("%-28s %s\n", kind, failures == ok ? "ok" : "FAILED");
}

/* reg_errno: errno of ibv_reg_mr(p, n, access) (0 when it registered) */
static int reg_errno(void *p, size_t n, unsigned access, struct ibv_mr **out)
{
	errno = 0;
	struct ibv_mr *mr = ibv_reg_mr(a.pd, p, n, (int)access);
	if (out)
		*out = mr;
	else if (mr)
		ibv_dereg_mr(mr);
	return mr ? 0 : errno ? errno : -1;
}

static void checks_against_the_mapping(void)
{
	const size_t pg = 4096;
	uint8_t *p = mmap(NULL, 4 * pg, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	int e;

	e = reg_errno(p + pg, 2 * pg, IBV_ACCESS_LOCAL_WRITE, NULL);
	CHECK(e == EFAULT, "PROT_NONE memory, LOCAL_WRITE: want EFAULT, got %s", e ? strerror(e) : "registered");
	e = reg_errno(p + pg, 2 * pg, 0, NULL);
	CHECK(e == EFAULT, "PROT_NONE memory, no access: want EFAULT, got %s", e ? strerror(e) : "registered");
	/* half readable, half PROT_NONE */
	mprotect(p, 2 * pg, PROT_READ | PROT_WRITE);
	e = reg_errno(p + 100, 2 * pg, IBV_ACCESS_LOCAL_WRITE, NULL);
	CHECK(e == EFAULT, "memory partly PROT_NONE: want EFAULT, got %s", e ? strerror(e) : "registered");
	munmap(p, 4 * pg);
	e = reg_errno(p + pg, pg, IBV_ACCESS_LOCAL_WRITE, NULL);
	CHECK(e == EFAULT, "unmapped memory: want EFAULT, got %s", e ? strerror(e) : "registered");
	e = reg_errno(p + pg, pg, 0, NULL);
	CHECK(e == EFAULT, "unmapped memory, no access: want EFAULT, got %s", e ? strerror(e) : "registered");

	/* read-only */
	uint8_t *ro = mmap(NULL, 3 * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	unsigned s = seq++;
	fill(ro, 3 * pg, s);
	mprotect(ro, 3 * pg, PROT_READ);
	e = reg_errno(ro + 10, pg, IBV_ACCESS_LOCAL_WRITE, NULL);
	CHECK(e == EFAULT, "read-only memory, LOCAL_WRITE: want EFAULT, got %s", e ? strerror(e) : "registered");
	e = reg_errno(ro + 10, pg, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, NULL);
	CHECK(e == EFAULT, "read-only memory, LOCAL_WRITE|REMOTE_WRITE: want EFAULT, got %s",
	      e ? strerror(e) : "registered");
	e = reg_errno(ro + 10, pg, 0, NULL);
	CHECK(!e, "read-only memory, no access: %s", strerror(e));
	struct ibv_mr *mr;
	e = reg_errno(ro + 10, 2 * pg, IBV_ACCESS_REMOTE_READ, &mr);
	CHECK(!e, "read-only memory, REMOTE_READ: %s", strerror(e));
	if (mr) {
		memset(peer, 0, 2 * pg);
		if (!post_one(&b, IBV_WR_RDMA_READ, peer, 2 * pg, peer_mr->lkey, (uintptr_t)ro + 10, mr->rkey, 0, 0) &&
		    done(&b, "read-only memory", "READ of it")) {
			uint8_t *want = malloc(3 * pg);
			fill(want, 3 * pg, s);
			CHECK(!memcmp(peer, want + 10, 2 * pg), "read-only memory: a READ did not get its bytes");
			free(want);
		}
		/* a WRITE through the read-only MR is refused (REMOTE_WRITE not granted) */
		fill(peer, 16, seq++);
		if (!post_one(&b, IBV_WR_RDMA_WRITE, peer, 16, peer_mr->lkey, (uintptr_t)ro + 10, mr->rkey, 0, 0)) {
			struct ibv_wc wc;
			int st = wait_wc(&b, &wc);
			CHECK(st == IBV_WC_REM_ACCESS_ERR, "read-only memory: a WRITE through its REMOTE_READ MR: %s",
			      st < 0 ? "nothing" : ibv_wc_status_str((enum ibv_wc_status)st));
			/* the QP is in error now: connect a fresh pair */
			ibv_destroy_qp(b.qp);
			ibv_destroy_cq(b.cq);
			ibv_destroy_qp(a.qp);
			ibv_destroy_cq(a.cq);
			if (side_qp(&a, 4) || side_qp(&b, 4) || pair_connect(&a, &b)) {
				fprintf(stderr, "reconnecting: %s\n", strerror(errno));
				exit(1);
			}
		}
		uint8_t *want = malloc(3 * pg);
		fill(want, 3 * pg, s);
		CHECK(!memcmp(ro, want, 3 * pg), "read-only memory changed");
		free(want);
		ibv_dereg_mr(mr);
	}
	munmap(ro, 3 * pg);

	/* a read-only shared file mapping, REMOTE_READ */
	char path[] = "/tmp/memkinds-ro.XXXXXX";
	int fd = mkstemp(path);
	if (fd >= 0 && !ftruncate(fd, 2 * pg)) {
		uint8_t *fro = mmap(NULL, 2 * pg, PROT_READ, MAP_SHARED, fd, 0);
		e = reg_errno(fro, 2 * pg, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE, NULL);
		CHECK(e == EFAULT, "read-only shared file mapping, REMOTE_WRITE: want EFAULT, got %s",
		      e ? strerror(e) : "registered");
		e = reg_errno(fro, 2 * pg, IBV_ACCESS_REMOTE_READ, NULL);
		CHECK(!e, "read-only shared file mapping, REMOTE_READ: %s", strerror(e));
		munmap(fro, 2 * pg);
	}
	if (fd >= 0)
		close(fd);
	unlink(path);

	/* optional access flags are accepted */
	uint8_t *r = malloc(20000);
	e = reg_errno(r + 3, 16000, PAIR_ACCESS | IBV_ACCESS_RELAXED_ORDERING, &mr);
	CHECK(!e, "IBV_ACCESS_RELAXED_ORDERING: %s", strerror(e));
	if (mr) {
		fill(peer, 16000, s = seq++);
		if (!post_one(&b, IBV_WR_RDMA_WRITE, peer, 16000, peer_mr->lkey, (uintptr_t)r + 3, mr->rkey, 0, 0) &&
		    done(&b, "relaxed ordering", "WRITE"))
			CHECK(same(r + 3, 16000, s), "IBV_ACCESS_RELAXED_ORDERING: the WRITE is not in the bytes");
		ibv_dereg_mr(mr);
	}
	free(r);
	printf("%-28s %s\n", "checks against the mapping", "done");
}

/* A buffer in the registering function's own frame: its page is the page
 * the library's frames run on while they change its backing (and give it
 * back at ibv_dereg_mr). */
static __attribute__((noinline)) void own_frame(void)
{
	uint8_t local[256] __attribute__((aligned(64)));

	memset(local, 0x5a, sizeof(local));
	try_kind("stack, the registering frame's own page", local, sizeof(local), 0, sizeof(local), 0, NULL);
}

static void *own_frame_thread(void *arg)
{
	(void)arg;
	own_frame();
	return NULL;
}

int main(void)
{
	int n;
	struct ibv_device **list;

	if (pair_open(&a, &b, 4, &ndev))
		return 1;
	list = ibv_get_device_list(&n);
	if (!list || side_open(&a2, list[0], 4))
		return 1;
	memset(&b2, 0, sizeof(b2));
	b2.ctx = b.ctx;
	b2.pd = b.pd;
	if (side_qp(&b2, 4) || pair_connect(&a2, &b2))
		return 1;
	ibv_free_device_list(list);
	peer = mmap(NULL, PEER_LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	aplain = mmap(NULL, PEER_LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (peer == MAP_FAILED || aplain == MAP_FAILED || !(peer_mr = ibv_reg_mr(b.pd, peer, PEER_LEN, PAIR_ACCESS)) ||
	    !(aplain_mr = ibv_reg_mr(a.pd, aplain, PEER_LEN, PAIR_ACCESS)))
		return 1;
	printf("memkinds: %s\n", ndev > 1 ? "across two devices" : "on one device");
	const size_t pg = 4096;

	/* private memory */
	uint8_t *small = malloc(100);
	try_kind("malloc 100 B", small, 100, 10, 50, 0, NULL);
	free(small);
	uint8_t *heap = malloc(100000); /* brk heap */
	try_kind("malloc 100 KB (brk heap)", heap, 100000, 1000, 90000, 0, NULL);
	free(heap);
	uint8_t *large = malloc(1 << 20); /* an mmap'd chunk */
	try_kind("malloc 1 MiB (mmap chunk)", large, 1 << 20, 4000, 300000, 0, NULL);
	free(large);
	uint8_t *al = memalign(pg, 3 * pg);
	try_kind("memalign", al, 3 * pg, pg, pg, 0, NULL);
	free(al);
	uint8_t *an = mmap(NULL, 5 * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	try_kind("private anonymous mmap", an, 5 * pg, 100, 4 * pg - 200, 0, NULL);
	munmap(an, 5 * pg);
	uint8_t stack[3 * 4096];
	try_kind("stack", stack, sizeof(stack), 4100, 4000, 0, NULL);
	own_frame();
	pthread_t th;
	if (pthread_create(&th, NULL, own_frame_thread, NULL) == 0)
		pthread_join(th, NULL);
	try_kind(".bss", (uint8_t *)bss_buf, sizeof(bss_buf), 8, 2 * pg, 0, NULL);
	try_kind(".data", (uint8_t *)data_buf, sizeof(data_buf), 0, 3 * pg, 0, NULL);
	char path[] = "/tmp/memkinds.XXXXXX";
	int fd = mkstemp(path);
	unlink(path);
	if (fd < 0 || ftruncate(fd, 4 * pg))
		return 1;
	uint8_t *fp = mmap(NULL, 4 * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
	try_kind("private file mapping", fp, 4 * pg, 8, 3 * pg, 0, NULL);
	munmap(fp, 4 * pg);
	close(fd);

	/* shared memory */
	uint8_t *sa = mmap(NULL, 4 * pg, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	try_kind("MAP_SHARED anonymous", sa, 4 * pg, 24, 3 * pg, 1, NULL);
	munmap(sa, 4 * pg);
	memfd_fd = memfd_create("memkinds", 0);
	if (memfd_fd >= 0 && !ftruncate(memfd_fd, 4 * pg)) {
		uint8_t *mf = open_fd(memfd_fd, 4 * pg);
		try_kind("memfd", mf, 4 * pg, 40, 3 * pg + 7, 1, open_memfd);
		munmap(mf, 4 * pg);
	} else {
		CHECK(0, "memfd_create: %s", strerror(errno));
	}
	if (memfd_fd >= 0)
		close(memfd_fd);
	shm_id = shmget(IPC_PRIVATE, 4 * pg, IPC_CREAT | 0600);
	uint8_t *sv = shm_id >= 0 ? shmat(shm_id, NULL, 0) : (void *)-1;
	if (sv != (void *)-1) {
		try_kind("SysV shm", sv, 4 * pg, 16, 3 * pg, 1, open_sysv);
		shmdt(sv);
	} else {
		CHECK(0, "SysV shm: %s", strerror(errno));
	}
	if (shm_id >= 0)
		shmctl(shm_id, IPC_RMID, NULL);
	snprintf(shm_name, sizeof(shm_name), "/memkinds.%d", (int)getpid());
	fd = shm_open(shm_name, O_RDWR | O_CREAT | O_EXCL, 0600);
	if (fd >= 0 && !ftruncate(fd, 4 * pg)) {
		uint8_t *ds = open_fd(fd, 4 * pg);
		try_kind("/dev/shm file", ds, 4 * pg, 0, 4 * pg, 1, open_devshm);
		munmap(ds, 4 * pg);
	} else {
		CHECK(0, "shm_open: %s", strerror(errno));
	}
	if (fd >= 0)
		close(fd);
	shm_unlink(shm_name);
	snprintf(file_path, sizeof(file_path), "/tmp/memkinds-shared.%d", (int)getpid());
	fd = open(file_path, O_RDWR | O_CREAT | O_EXCL, 0600);
	if (fd >= 0 && !ftruncate(fd, 4 * pg)) {
		uint8_t *sf = open_fd(fd, 4 * pg);
		try_kind("file in /tmp, MAP_SHARED", sf, 4 * pg, 4000, 2 * pg, 1, open_file);
		munmap(sf, 4 * pg);
	} else {
		CHECK(0, "%s: %s", file_path, strerror(errno));
	}
	if (fd >= 0)
		close(fd);
	unlink(file_path);

	/* huge pages (2 MiB) */
	const size_t hp = 2 << 20;
	int need_huge = getenv("MEMKINDS_NEED_HUGE") && *getenv("MEMKINDS_NEED_HUGE") == '1';
	uint8_t *h = mmap(NULL, hp, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
	if (h != MAP_FAILED) {
		try_kind("MAP_HUGETLB private", h, hp, 4096 + 8, hp - 3 * 4096, 0, NULL);
		munmap(h, hp);
		h = mmap(NULL, hp, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
		if (h != MAP_FAILED) {
			try_kind("MAP_HUGETLB shared", h, hp, 0, hp, 1, NULL);
			munmap(h, hp);
		} else {
			CHECK(!need_huge, "MAP_SHARED|MAP_HUGETLB: %s", strerror(errno));
		}
		memfd_fd = memfd_create("memkinds-huge", MFD_HUGETLB);
		if (memfd_fd >= 0 && !ftruncate(memfd_fd, (off_t)hp) && (h = open_fd(memfd_fd, hp))) {
			try_kind("memfd MFD_HUGETLB", h, hp, 64, hp - 128, 1, open_memfd);
			munmap(h, hp);
		} else {
			CHECK(!need_huge, "memfd MFD_HUGETLB: %s", strerror(errno));
		}
		if (memfd_fd >= 0)
			close(memfd_fd);
	} else {
		CHECK(!need_huge, "MAP_HUGETLB: %s (huge pages were reserved for this run)", strerror(errno));
		printf("%-28s not tried: no huge pages reserved on this machine\n", "huge pages");
	}

	checks_against_the_mapping();

	ibv_dereg_mr(peer_mr);
	ibv_dereg_mr(aplain_mr);
	side_close(&b2);
	side_close(&a2);
	side_close(&b);
	side_close(&a);
	if (failures) {
		fprintf(stderr, "memkinds: %d checks failed\n", failures);
		return 1;
	}
	printf("memkinds: all passed\n");
	return 0;
}
