/* import: ibv_import_device, ibv_import_pd, ibv_import_mr, ibv_import_dm
 * and their unimports across two processes. The parent opens a context
 * and makes a PD, an MR on its buffer and device memory; a forked child
 * gets the context's cmd_fd over a socketpair (SCM_RIGHTS) with the
 * handles, imports the device, the PD and the MR (handles, keys, addr =
 * iova, length and access as the parent's), reads the device memory
 * through its import, and RDMA WRITEs into the parent's MR from a QP of its
 * own context (two QPs of the imported PD, connected to each other) and
 * READs the parent's bytes back through the imported MR's lkey. The parent
 * then finds the child's bytes in its buffer. A PD the child imports and
 * deallocates is gone from the daemon (as rdma-core's ibv_dealloc_pd on an
 * import); unimports leave the parent's objects alive.
 *
 * Then a child that sets its uid to 65534 gets the same fd: the device
 * imports (its files are world-readable), but root's PD, MR and DM are
 * EACCES, and so are their files; the parent's buffer is untouched. And
 * the other way: root imports the cmd_fd of a context of uid 65534; the PD
 * it makes there lives in that lease while the lender holds it and is
 * destroyed when its last copy closes.
 *
 *   import         (run as root, for the second part) */
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pair.h"

#define LEN 8192

struct handles {
	uint32_t pd, pd2, mr, dm;
	uint32_t lkey, rkey;
	uint64_t addr, length;
	unsigned int access;
	char mount[256];
};

static int send_fd(int sock, int fd, const struct handles *h)
{
	char cbuf[CMSG_SPACE(sizeof(int))];
	struct iovec iov = {.iov_base = (void *)h, .iov_len = sizeof(*h)};
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof(cbuf)};
	struct cmsghdr *c;

	memset(cbuf, 0, sizeof(cbuf));
	c = CMSG_FIRSTHDR(&msg);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &fd, sizeof(int));
	return sendmsg(sock, &msg, 0) == (ssize_t)sizeof(*h) ? 0 : -1;
}

static int recv_fd(int sock, struct handles *h)
{
	char cbuf[CMSG_SPACE(sizeof(int))];
	struct iovec iov = {.iov_base = h, .iov_len = sizeof(*h)};
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof(cbuf)};
	struct cmsghdr *c;
	int fd;

	if (recvmsg(sock, &msg, 0) != (ssize_t)sizeof(*h))
		return -1;
	c = CMSG_FIRSTHDR(&msg);
	if (!c || c->cmsg_type != SCM_RIGHTS)
		return -1;
	memcpy(&fd, CMSG_DATA(c), sizeof(int));
	return fd;
}

/* The importing child: 0 when every check held. */
static int importer(int sock)
{
	struct handles h;
	struct side a, b;
	struct ibv_wc wc;
	uint8_t *src = malloc(LEN), *back = malloc(LEN), dmbuf[64];
	int fd = recv_fd(sock, &h);
	char done = 1;

	CHECK(fd >= 0, "no fd received");
	if (fd < 0)
		return 1;
	struct ibv_context *ctx = ibv_import_device(fd);
	CHECK(ctx, "ibv_import_device: %s", strerror(errno));
	if (!ctx)
		return 1;
	CHECK(ctx->cmd_fd == fd, "cmd_fd %d, not the imported %d", ctx->cmd_fd, fd);
	struct ibv_pd *pd = ibv_import_pd(ctx, h.pd);
	CHECK(pd && pd->handle == h.pd && pd->context == ctx, "ibv_import_pd: %s", strerror(errno));
	struct ibv_mr *mr = pd ? ibv_import_mr(pd, h.mr) : NULL;
	CHECK(mr, "ibv_import_mr: %s", strerror(errno));
	if (!pd || !mr)
		return 1;
	CHECK(mr->handle == h.mr && mr->lkey == h.lkey && mr->rkey == h.rkey && (uintptr_t)mr->addr == h.addr &&
		      mr->length == h.length && mr->pd == pd,
	      "imported MR: handle %u lkey %#x rkey %#x addr %p length %zu, want %u %#x %#x %#llx %llu", mr->handle,
	      mr->lkey, mr->rkey, mr->addr, mr->length, h.mr, h.lkey, h.rkey, (unsigned long long)h.addr,
	      (unsigned long long)h.length);
	CHECK(ibv_import_pd(ctx, 999999) == NULL && errno == ENOENT, "a PD that is not there: %s", strerror(errno));
	CHECK(ibv_import_mr(pd, 999999) == NULL && errno == ENOENT, "an MR that is not there: %s", strerror(errno));

	/* device memory: the parent's bytes, through the import */
	struct ibv_dm *dm = ibv_import_dm(ctx, h.dm);
	CHECK(dm && dm->handle == h.dm, "ibv_import_dm: %s", strerror(errno));
	if (dm) {
		CHECK(ibv_memcpy_from_dm(dmbuf, dm, 0, sizeof(dmbuf)) == 0, "memcpy_from_dm");
		for (size_t i = 0; i < sizeof(dmbuf); i++)
			if (dmbuf[i] != (uint8_t)(0xd0 + i % 16)) {
				CHECK(0, "dm byte %zu is %#x", i, dmbuf[i]);
				break;
			}
		ibv_unimport_dm(dm);
	}

	/* a QP of this context writes into the parent's MR and reads it back
	 * through the imported lkey */
	memset(&a, 0, sizeof(a));
	memset(&b, 0, sizeof(b));
	a.ctx = b.ctx = ctx;
	a.pd = b.pd = pd;
	struct ibv_mr *smr = ibv_reg_mr(pd, src, LEN, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *bmr = ibv_reg_mr(pd, back, LEN, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	CHECK(smr && bmr, "ibv_reg_mr in the imported PD: %s", strerror(errno));
	int ok = smr && bmr && side_qp(&a, 4) == 0 && side_qp(&b, 4) == 0 && pair_connect(&a, &b) == 0;
	CHECK(ok, "QPs in the imported PD: %s", strerror(errno));
	if (ok) {
		for (int i = 0; i < LEN; i++)
			src[i] = (uint8_t)(i * 7 + 3);
		CHECK(post_one(&a, IBV_WR_RDMA_WRITE, src, LEN, smr->lkey, (uintptr_t)mr->addr, mr->rkey, 0, 0) == 0,
		      "post WRITE");
		CHECK(wait_wc(&a, &wc) == IBV_WC_SUCCESS, "WRITE into the imported MR: %s",
		      ibv_wc_status_str(wc.status));
		/* from the imported MR (its lkey, on the parent's pages) into ours */
		memset(back, 0, LEN);
		CHECK(post_one(&a, IBV_WR_RDMA_WRITE, mr->addr, LEN, mr->lkey, (uintptr_t)back, bmr->rkey, 0, 0) == 0,
		      "post WRITE from the imported MR");
		CHECK(wait_wc(&a, &wc) == IBV_WC_SUCCESS, "WRITE from the imported MR: %s",
		      ibv_wc_status_str(wc.status));
		CHECK(memcmp(back, src, LEN) == 0, "the imported MR's bytes are not what was written");
	}
	side_close(&a);
	side_close(&b);
	if (smr)
		ibv_dereg_mr(smr);
	if (bmr)
		ibv_dereg_mr(bmr);

	/* destroying an import destroys the object in the daemon */
	struct ibv_pd *pd2 = ibv_import_pd(ctx, h.pd2);
	CHECK(pd2, "ibv_import_pd (second): %s", strerror(errno));
	if (pd2)
		CHECK(ibv_dealloc_pd(pd2) == 0, "ibv_dealloc_pd of an import: %s", strerror(errno));

	ibv_unimport_mr(mr);
	ibv_unimport_pd(pd);
	CHECK(ibv_close_device(ctx) == 0, "ibv_close_device");
	CHECK(fcntl(fd, F_GETFD) < 0 && errno == EBADF, "ibv_close_device left the imported cmd_fd open");
	free(src);
	free(back);
	if (write(sock, &done, 1) != 1)
		return 1;
	return failures != 0;
}

/* The child of another uid: 0 when each use of root's objects failed. */
static int stranger(int sock)
{
	struct handles h;
	int fd = recv_fd(sock, &h);
	char done = 1, p[512];

	CHECK(fd >= 0, "no fd received");
	if (fd < 0)
		return 1;
	if (setgid(65534) || setuid(65534)) {
		fprintf(stderr, "setuid 65534: %s\n", strerror(errno));
		return 1;
	}
	struct ibv_context *ctx = ibv_import_device(fd);
	CHECK(ctx, "ibv_import_device as uid 65534: %s", strerror(errno));
	if (!ctx)
		return 1;
	errno = 0;
	CHECK(ibv_import_pd(ctx, h.pd) == NULL && errno == EACCES, "uid 65534 imported root's PD (%s)",
	      strerror(errno));
	struct ibv_pd *own = ibv_alloc_pd(ctx);
	CHECK(own, "uid 65534's own PD: %s", strerror(errno));
	if (own) {
		errno = 0;
		CHECK(ibv_import_mr(own, h.mr) == NULL && errno == EACCES, "uid 65534 imported root's MR (%s)",
		      strerror(errno));
		CHECK(ibv_dealloc_pd(own) == 0, "uid 65534's own PD dealloc");
	}
	errno = 0;
	CHECK(ibv_import_dm(ctx, h.dm) == NULL && errno == EACCES, "uid 65534 imported root's DM (%s)",
	      strerror(errno));
	/* nor are the files reachable by hand, nor may it destroy them */
	snprintf(p, sizeof(p), "%s/mr/%u/attr", h.mount, h.mr);
	CHECK(open(p, O_RDONLY) < 0 && errno == EACCES, "uid 65534 opened %s (%s)", p, strerror(errno));
	snprintf(p, sizeof(p), "%s/pd/%u", h.mount, h.pd);
	CHECK(rmdir(p) < 0 && errno == EACCES, "uid 65534 removed %s (%s)", p, strerror(errno));
	CHECK(ibv_close_device(ctx) == 0, "ibv_close_device");
	if (write(sock, &done, 1) != 1)
		return 1;
	return failures != 0;
}

/* A context of uid 65534 whose cmd_fd goes to the parent; it closes when
 * the parent says so. */
static int lender(int sock)
{
	struct handles h;
	char go;

	memset(&h, 0, sizeof(h));
	if (setgid(65534) || setuid(65534)) {
		fprintf(stderr, "setuid 65534: %s\n", strerror(errno));
		return 1;
	}
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ctx = list && list[0] ? ibv_open_device(list[0]) : NULL;

	if (list)
		ibv_free_device_list(list);
	CHECK(ctx, "uid 65534's ibv_open_device: %s", strerror(errno));
	if (!ctx)
		return 1;
	CHECK(send_fd(sock, ctx->cmd_fd, &h) == 0, "sendmsg: %s", strerror(errno));
	if (read(sock, &go, 1) != 1)
		return 1;
	CHECK(ibv_close_device(ctx) == 0, "ibv_close_device");
	return failures != 0;
}

/* root imports uid 65534's cmd_fd: what it makes there is leased in that
 * lease (it lives while the lender holds it and goes when the last copy
 * closes), not left behind for ever. */
static void borrow(struct ibv_context *ctx)
{
	int sv[2], st, gone = 0;
	struct handles h;
	char go = 1;
	pid_t pid;

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv))
		return;
	fflush(NULL);
	if ((pid = fork()) == 0) {
		close(sv[0]);
		_exit(lender(sv[1]));
	}
	close(sv[1]);
	int fd = recv_fd(sv[0], &h);
	CHECK(fd >= 0, "no fd from uid 65534");
	struct ibv_context *ic = fd >= 0 ? ibv_import_device(fd) : NULL;
	CHECK(ic, "root's ibv_import_device of uid 65534's fd: %s", strerror(errno));
	struct ibv_pd *pd = ic ? ibv_alloc_pd(ic) : NULL;
	CHECK(pd, "root's PD in the imported context: %s", strerror(errno));
	uint32_t handle = pd ? pd->handle : 0;
	if (pd)
		ibv_unimport_pd(pd); /* the wrapper only: the lease holds the PD */
	if (ic)
		CHECK(ibv_close_device(ic) == 0, "ibv_close_device");
	struct ibv_pd *still = handle ? ibv_import_pd(ctx, handle) : NULL;
	CHECK(still, "the PD went before the lender closed: %s", strerror(errno));
	if (still)
		ibv_unimport_pd(still);
	if (write(sv[0], &go, 1) != 1)
		CHECK(0, "write: %s", strerror(errno));
	waitpid(pid, &st, 0);
	close(sv[0]);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "lender failed (status %#x)", st);
	/* the daemon destroys a released lease's objects just after */
	for (int i = 0; handle && i < 200 && !gone; i++) {
		struct ibv_pd *p = ibv_import_pd(ctx, handle);
		if (p) {
			ibv_unimport_pd(p);
			usleep(10000);
		} else {
			gone = errno == ENOENT;
		}
	}
	CHECK(gone, "root's PD in uid 65534's lease outlived the lease");
}

static int run_child(int (*fn)(int), struct ibv_context *ctx, struct handles *h, pid_t *pid)
{
	int sv[2];
	char done;

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv))
		return -1;
	fflush(NULL);
	*pid = fork();
	if (*pid < 0)
		return -1;
	if (*pid == 0) {
		close(sv[0]);
		/* _exit: the parent's atexit handlers are not the child's, and
		 * LeakSanitizer would see the parent's async thread as running */
		_exit(fn(sv[1]));
	}
	close(sv[1]);
	CHECK(send_fd(sv[0], ctx->cmd_fd, h) == 0, "sendmsg: %s", strerror(errno));
	int got = read(sv[0], &done, 1);
	close(sv[0]);
	int st;
	waitpid(*pid, &st, 0);
	CHECK(got == 1 && WIFEXITED(st) && WEXITSTATUS(st) == 0, "child failed (status %#x)", st);
	return 0;
}

int main(void)
{
	int num;
	struct ibv_device **list = ibv_get_device_list(&num);
	struct handles h;
	pid_t pid;
	uint8_t pat[64];

	if (!list || num < 1) {
		fprintf(stderr, "no device\n");
		return 1;
	}
	struct ibv_context *ctx = ibv_open_device(list[0]);
	struct ibv_pd *pd = ctx ? ibv_alloc_pd(ctx) : NULL;
	struct ibv_pd *pd2 = ctx ? ibv_alloc_pd(ctx) : NULL;
	uint8_t *buf = aligned_alloc(4096, LEN);
	unsigned int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	struct ibv_mr *mr = pd ? ibv_reg_mr(pd, buf, LEN, access) : NULL;
	struct ibv_alloc_dm_attr da = {.length = 4096};
	struct ibv_dm *dm = ctx ? ibv_alloc_dm(ctx, &da) : NULL;

	if (!ctx || !pd || !pd2 || !mr || !dm) {
		fprintf(stderr, "setup: %s\n", strerror(errno));
		return 1;
	}
	ibv_free_device_list(list);
	for (size_t i = 0; i < sizeof(pat); i++)
		pat[i] = (uint8_t)(0xd0 + i % 16);
	CHECK(ibv_memcpy_to_dm(dm, 0, pat, sizeof(pat)) == 0, "memcpy_to_dm");
	memset(buf, 0xee, LEN);
	memset(&h, 0, sizeof(h));
	h.pd = pd->handle;
	h.pd2 = pd2->handle;
	h.mr = mr->handle;
	h.dm = dm->handle;
	h.lkey = mr->lkey;
	h.rkey = mr->rkey;
	h.addr = (uintptr_t)mr->addr;
	h.length = mr->length;
	h.access = access;
	/* the mount: the device's ibdev_path */
	snprintf(h.mount, sizeof(h.mount), "%s", ctx->device->ibdev_path);

	run_child(importer, ctx, &h, &pid);
	for (int i = 0; i < LEN; i++)
		if (buf[i] != (uint8_t)(i * 7 + 3)) {
			CHECK(0, "byte %d of the parent's MR is %#x after the child's WRITE", i, buf[i]);
			break;
		}
	/* the child's ibv_dealloc_pd of its import destroyed pd2 */
	errno = 0;
	CHECK(ibv_import_pd(ctx, h.pd2) == NULL && errno == ENOENT, "pd2 survived the import's dealloc (%s)",
	      strerror(errno));
	/* the unimports left the rest */
	struct ibv_pd *again = ibv_import_pd(ctx, h.pd);
	CHECK(again, "the PD went with its unimport: %s", strerror(errno));
	if (again)
		ibv_unimport_pd(again);

	if (geteuid() == 0) {
		memset(buf, 0xee, LEN);
		run_child(stranger, ctx, &h, &pid);
		for (int i = 0; i < LEN; i++)
			if (buf[i] != 0xee) {
				CHECK(0, "byte %d changed under uid 65534", i);
				break;
			}
		again = ibv_import_pd(ctx, h.pd);
		CHECK(again, "the PD went after uid 65534's attempt: %s", strerror(errno));
		if (again)
			ibv_unimport_pd(again);
		borrow(ctx);
	} else {
		fprintf(stderr, "import: not root, the uid 65534 part is skipped\n");
	}

	CHECK(ibv_free_dm(dm) == 0, "ibv_free_dm");
	CHECK(ibv_dereg_mr(mr) == 0, "ibv_dereg_mr");
	CHECK(ibv_dealloc_pd(pd) == 0, "ibv_dealloc_pd");
	/* pd2's wrapper: its PD is gone, only the wrapper is left */
	ibv_unimport_pd(pd2);
	CHECK(ibv_close_device(ctx) == 0, "ibv_close_device");
	free(buf);
	if (failures)
		fprintf(stderr, "import: %d failures\n", failures);
	else
		printf("import: ok\n");
	return failures != 0;
}
