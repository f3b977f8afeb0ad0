/* hostile: a program that misuses the verbs and scribbles on what it maps,
 * run against an rdmafs mount through the drop-in library. Every misuse
 * must get libibverbs' error (an errno from the verb, or an error
 * completion), never a crash; and after the scribbling a well-behaved
 * pair of QPs of another context still moves data. Exit 0 when all hold.
 *
 *   hostile MOUNT        (the library found on LD_LIBRARY_PATH) */
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

static const char *mount;

struct side {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *a, *b;
	struct ibv_mr *mr;
	char *buf;
	struct ibv_port_attr port;
	union ibv_gid gid;
};

static struct ibv_qp *qp_new(struct side *s, uint32_t inline_max)
{
	struct ibv_qp_init_attr a = {
		.send_cq = s->cq,
		.recv_cq = s->cq,
		.qp_type = IBV_QPT_RC,
		.cap = {.max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 2, .max_recv_sge = 2,
			.max_inline_data = inline_max},
	};
	return ibv_create_qp(s->pd, &a);
}

static int to_rts(struct side *s, struct ibv_qp *q, uint32_t dest)
{
	return tc_connect(q, dest, &s->port, &s->gid, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ, 8, 1);
}

static void side_open(struct side *s, struct ibv_device *dev)
{
	memset(s, 0, sizeof(*s));
	s->ctx = ibv_open_device(dev);
	if (!s->ctx) {
		perror("ibv_open_device");
		exit(1);
	}
	if (ibv_query_port(s->ctx, 1, &s->port) || ibv_query_gid(s->ctx, 1, 0, &s->gid))
		exit(1);
	s->pd = ibv_alloc_pd(s->ctx);
	s->cq = ibv_create_cq(s->ctx, 64, NULL, NULL, 0);
	s->buf = aligned_alloc(4096, 8192);
	if (!s->pd || !s->cq || !s->buf)
		exit(1);
	memset(s->buf, 0, 8192);
	s->mr = ibv_reg_mr(s->pd, s->buf, 8192,
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
	s->a = qp_new(s, 64);
	s->b = qp_new(s, 64);
	if (!s->mr || !s->a || !s->b) {
		perror("setup");
		exit(1);
	}
}

/* One completion, waiting up to 5 s; returns its status or -1. */
static int wait_wc(struct ibv_cq *cq, struct ibv_wc *wc)
{
	struct timespec t0, t;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		int n = ibv_poll_cq(cq, 1, wc);
		if (n < 0)
			return -2;
		if (n == 1)
			return wc->status;
		clock_gettime(CLOCK_MONOTONIC, &t);
		if (t.tv_sec - t0.tv_sec > 5)
			return -1;
		usleep(100);
	}
}

static int write_wr(struct ibv_qp *q, uint64_t id, uint32_t lkey, void *addr, uint32_t len, uint64_t raddr,
		    uint32_t rkey, int flags)
{
	struct ibv_sge sge = {.addr = (uintptr_t)addr, .length = len, .lkey = lkey};
	struct ibv_send_wr wr = {.wr_id = id, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
				 .send_flags = IBV_SEND_SIGNALED | flags,
				 .wr.rdma = {.remote_addr = raddr, .rkey = rkey}}, *bad = NULL;
	int err = ibv_post_send(q, &wr, &bad);
	if (err && bad != &wr)
		return -1; /* bad_wr must name the refused WR */
	return err;
}

/* A fresh connected pair in a context of its own moves data: the daemon
 * still serves everyone else. */
static void healthy(struct ibv_device *dev, const char *after)
{
	struct side s;
	struct ibv_wc wc;

	side_open(&s, dev);
	CHECK(!to_rts(&s, s.a, s.b->qp_num) && !to_rts(&s, s.b, s.a->qp_num), "connect after %s", after);
	strcpy(s.buf, "still served");
	CHECK(!write_wr(s.a, 1, s.mr->lkey, s.buf, 13, (uintptr_t)s.buf + 4096, s.mr->rkey, 0), "post after %s",
	      after);
	CHECK(wait_wc(s.cq, &wc) == IBV_WC_SUCCESS, "write after %s: %s", after, ibv_wc_status_str(wc.status));
	CHECK(!strcmp(s.buf + 4096, "still served"), "data after %s", after);
	ibv_destroy_qp(s.a);
	ibv_destroy_qp(s.b);
	ibv_dereg_mr(s.mr);
	ibv_destroy_cq(s.cq);
	ibv_dealloc_pd(s.pd);
	ibv_close_device(s.ctx);
	free(s.buf);
}

/* Map a ring file of qp/N or cq/H writable, as the library does. */
static void *map_file(const char *rel, size_t *len)
{
	char p[4096];
	struct stat st;

	snprintf(p, sizeof(p), "%s/%s", mount, rel);
	int fd = open(p, O_RDWR);
	if (fd < 0 || fstat(fd, &st) < 0)
		return NULL;
	void *m = mmap(NULL, st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	*len = st.st_size;
	return m == MAP_FAILED ? NULL : m;
}

int main(int argc, char **argv)
{
	struct ibv_device **list;
	struct side s, o;
	struct ibv_wc wc;
	char rel[64];
	int n;

	if (argc != 2) {
		fprintf(stderr, "usage: %s MOUNT\n", argv[0]);
		return 2;
	}
	mount = argv[1];
	list = ibv_get_device_list(&n);
	if (!list || n < 1) {
		fprintf(stderr, "no device\n");
		return 1;
	}
	side_open(&s, list[0]);
	side_open(&o, list[0]);

	/* Posting to a QP in RESET, receiving in RESET. */
	CHECK(write_wr(s.a, 1, s.mr->lkey, s.buf, 8, 0, 0, 0) == EINVAL, "post_send in RESET");
	struct ibv_sge rs = {.addr = (uintptr_t)s.buf, .length = 8, .lkey = s.mr->lkey};
	struct ibv_recv_wr rwr = {.wr_id = 1, .sg_list = &rs, .num_sge = 1}, *rbad;
	CHECK(ibv_post_recv(s.a, &rwr, &rbad) == EINVAL, "post_recv in RESET");

	/* Illegal transitions and attributes are refused, nothing changes. */
	struct ibv_qp_attr bad_attr = {.qp_state = IBV_QPS_RTS};
	CHECK(ibv_modify_qp(s.a, &bad_attr, IBV_QP_STATE) == EINVAL, "RESET -> RTS");
	CHECK(ibv_modify_qp(s.a, &bad_attr, 0) == EINVAL, "empty mask");
	CHECK(ibv_modify_qp(s.a, &bad_attr, 1 << 30) == EINVAL, "unknown mask bit");

	CHECK(!to_rts(&s, s.a, s.b->qp_num) && !to_rts(&s, s.b, s.a->qp_num), "connect");

	/* Overlong inline data, too many SGEs, a NULL AH-less opcode. */
	char big[256] = {0};
	CHECK(write_wr(s.a, 2, 0, big, sizeof(big), (uintptr_t)s.buf + 4096, s.mr->rkey, IBV_SEND_INLINE) == EINVAL,
	      "256 inline bytes over max_inline_data 64");
	struct ibv_sge many[8];
	for (int i = 0; i < 8; i++)
		many[i] = (struct ibv_sge){.addr = (uintptr_t)s.buf, .length = 1, .lkey = s.mr->lkey};
	struct ibv_send_wr mw = {.wr_id = 3, .sg_list = many, .num_sge = 8, .opcode = IBV_WR_SEND}, *sbad;
	CHECK(ibv_post_send(s.a, &mw, &sbad) == EINVAL && sbad == &mw, "8 SGEs over max_send_sge");
	mw.num_sge = 1;
	mw.opcode = (enum ibv_wr_opcode)77;
	CHECK(ibv_post_send(s.a, &mw, &sbad) == EINVAL, "unknown opcode");

	/* Bad keys: error completions, the QP goes to ERR. */
	CHECK(!write_wr(s.a, 4, 0xdead00, s.buf, 8, (uintptr_t)s.buf + 4096, s.mr->rkey, 0), "post, bad lkey");
	CHECK(wait_wc(s.cq, &wc) == IBV_WC_LOC_PROT_ERR, "bad lkey: %s", ibv_wc_status_str(wc.status));
	while (ibv_poll_cq(s.cq, 1, &wc) > 0)
		;

	/* Fresh QPs for the remote-key case. */
	ibv_destroy_qp(s.a);
	ibv_destroy_qp(s.b);
	s.a = qp_new(&s, 64);
	s.b = qp_new(&s, 64);
	CHECK(s.a && s.b && !to_rts(&s, s.a, s.b->qp_num) && !to_rts(&s, s.b, s.a->qp_num), "reconnect");
	CHECK(!write_wr(s.a, 5, s.mr->lkey, s.buf, 8, (uintptr_t)s.buf + 4096, s.mr->rkey ^ 0x5a5a00, 0),
	      "post, bad rkey");
	CHECK(wait_wc(s.cq, &wc) == IBV_WC_REM_ACCESS_ERR, "bad rkey: %s", ibv_wc_status_str(wc.status));
	while (ibv_poll_cq(s.cq, 1, &wc) > 0)
		;

	/* Another context's MR (another PD) as a local key. */
	ibv_destroy_qp(s.a);
	ibv_destroy_qp(s.b);
	s.a = qp_new(&s, 64);
	s.b = qp_new(&s, 64);
	CHECK(s.a && s.b && !to_rts(&s, s.a, s.b->qp_num) && !to_rts(&s, s.b, s.a->qp_num), "reconnect");
	CHECK(!write_wr(s.a, 6, o.mr->lkey, o.buf, 8, (uintptr_t)s.buf + 4096, s.mr->rkey, 0), "post, foreign lkey");
	CHECK(wait_wc(s.cq, &wc) == IBV_WC_LOC_PROT_ERR, "foreign lkey: %s", ibv_wc_status_str(wc.status));

	/* A CQ of another context is not this context's to use. */
	struct ibv_qp_init_attr fa = {.send_cq = o.cq, .recv_cq = o.cq, .qp_type = IBV_QPT_RC,
				      .cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1}};
	errno = 0;
	CHECK(ibv_create_qp(s.pd, &fa) == NULL && errno == EINVAL, "QP on another context's CQ (errno %d)", errno);

	/* Objects destroyed under the program (rmdir by someone else): the
	 * verbs fail with an errno. */
	struct ibv_qp *victim = qp_new(&s, 0);
	snprintf(rel, sizeof(rel), "%s/qp/%u", mount, victim->qp_num);
	CHECK(rmdir(rel) == 0, "rmdir %s: %s", rel, strerror(errno));
	struct ibv_qp_attr init = {.qp_state = IBV_QPS_INIT, .port_num = 1};
	CHECK(ibv_modify_qp(victim, &init, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) != 0,
	      "modify of a destroyed QP");
	struct ibv_qp_init_attr qia;
	struct ibv_qp_attr qa;
	CHECK(ibv_query_qp(victim, &qa, IBV_QP_STATE, &qia) != 0, "query of a destroyed QP");

	/* Scribbling: garbage over o's send ring (slots and a producer jump)
	 * and over its CQ's indices. */
	size_t len;
	snprintf(rel, sizeof(rel), "qp/%u/sq", o.a->qp_num);
	uint8_t *sq = map_file(rel, &len);
	CHECK(sq != NULL, "map %s", rel);
	if (sq) {
		srand(7);
		for (size_t i = 256; i < len; i++)
			sq[i] = rand();
		__atomic_store_n((uint32_t *)(sq + 64), 0x7fffffff, __ATOMIC_RELEASE);
		munmap(sq, len);
	}
	CHECK(!to_rts(&o, o.a, o.b->qp_num), "connect the scribbled QP");
	write_wr(o.a, 1, o.mr->lkey, o.buf, 8, (uintptr_t)o.buf, o.mr->rkey, 0); /* rings the doorbell */
	snprintf(rel, sizeof(rel), "cq/%u/ring", o.cq->handle);
	uint8_t *cq = map_file(rel, &len);
	if (cq) {
		for (int i = 0; i < 256; i++)
			if (i < 64 || i >= 192) /* leave the daemon's producer line, scribble the rest */
				cq[i] ^= 0xff;
		munmap(cq, len);
	}
	/* Garbage into control files. */
	snprintf(rel, sizeof(rel), "%s/qp/%u/ctl", mount, o.b->qp_num);
	int fd = open(rel, O_WRONLY);
	CHECK(fd >= 0, "open %s", rel);
	if (fd >= 0) {
		CHECK(write(fd, "modify qp_state=\xff\xfe", 19) < 0 && errno == EINVAL, "garbage modify");
		close(fd);
	}
	usleep(100000);
	healthy(list[0], "scribbling");

	ibv_close_device(o.ctx);
	ibv_close_device(s.ctx);
	ibv_free_device_list(list);
	if (failures) {
		fprintf(stderr, "hostile: %d checks failed\n", failures);
		return 1;
	}
	printf("hostile: every misuse got its error; the daemon kept serving\n");
	return 0;
}
