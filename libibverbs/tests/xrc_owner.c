/* xrc_owner: who an XRC_RECV QP belongs to. A child process opens the XRC
 * domain of a file (O_CREAT) and makes an XRC_RECV QP in it; the parent
 * opens the same domain through its own descriptor of the file and the QP
 * with ibv_open_qp. The child then exits without destroying anything: the
 * QP outlives its creator, since the parent holds it. The parent connects
 * it to an XRC_SEND QP of its own, makes an XRC SRQ in the domain and
 * sends into it through the QP: the message lands, with the QP's number in
 * the completion. When the parent destroys its handle, the last, the QP is
 * gone from the mount (MOUNT/qp/N). Also: a descriptor number the program
 * does not have open is EBADF, and a domain of a file that has none is not
 * made without O_CREAT.
 *
 *   xrc_owner MOUNT */
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"

static struct ibv_xrcd *open_xrcd(struct ibv_context *ctx, int fd, int oflags)
{
	struct ibv_xrcd_init_attr xa = {.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS,
					.fd = fd, .oflags = oflags};
	return ibv_open_xrcd(ctx, &xa);
}

static struct ibv_qp *xrc_recv_qp(struct ibv_context *ctx, struct ibv_xrcd *x)
{
	struct ibv_qp_init_attr_ex qa = {.qp_type = IBV_QPT_XRC_RECV, .comp_mask = IBV_QP_INIT_ATTR_XRCD, .xrcd = x};
	return ibv_create_qp_ex(ctx, &qa);
}

/* The child: make the QP, tell its number, wait to be told to go, and
 * exit with everything still open (as a program that dies would). */
static int creator(const char *path, int to_parent, int from_parent)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ctx = list && list[0] ? ibv_open_device(list[0]) : NULL;
	int fd = open(path, O_RDONLY);
	struct ibv_xrcd *x = ctx && fd >= 0 ? open_xrcd(ctx, fd, O_CREAT) : NULL;
	struct ibv_qp *q = x ? xrc_recv_qp(ctx, x) : NULL;
	uint32_t qpn = q ? q->qp_num : 0;
	char go;

	if (write(to_parent, &qpn, sizeof(qpn)) != sizeof(qpn) || !q)
		_exit(1);
	if (read(from_parent, &go, 1) != 1)
		_exit(1);
	_exit(0);
}

static int poll1(struct ibv_cq *cq, struct ibv_wc *wc)
{
	for (long spins = 0; spins < 100000000; spins++) {
		int n = ibv_poll_cq(cq, 1, wc);
		if (n)
			return n;
	}
	return 0;
}

int main(int argc, char **argv)
{
	char path[] = "/tmp/xrc_owner.XXXXXX", qpdir[4096];
	int to_parent[2], from_parent[2];
	struct stat st;

	if (argc != 2) {
		fprintf(stderr, "usage: xrc_owner MOUNT\n");
		return 2;
	}
	int fd = mkstemp(path);
	if (fd < 0 || pipe(to_parent) || pipe(from_parent))
		return 1;
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ctx = list && list[0] ? ibv_open_device(list[0]) : NULL;
	if (!ctx) {
		fprintf(stderr, "no device\n");
		return 1;
	}
	struct ibv_device_attr da;
	CHECK(!ibv_query_device(ctx, &da) && (da.device_cap_flags & IBV_DEVICE_XRC), "no IBV_DEVICE_XRC");

	/* The daemon looks descriptors up in the caller: one this process
	 * does not have is EBADF; the file has no domain yet without
	 * O_CREAT. */
	errno = 0;
	CHECK(!open_xrcd(ctx, 987, O_CREAT) && errno == EBADF, "xrcd on a closed fd: errno %d", errno);
	errno = 0;
	CHECK(!open_xrcd(ctx, fd, 0) && errno == EAGAIN, "xrcd without O_CREAT on a new file: errno %d", errno);

	pid_t pid = fork();
	if (pid == 0)
		creator(path, to_parent[1], from_parent[0]);
	uint32_t qpn = 0;
	CHECK(read(to_parent[0], &qpn, sizeof(qpn)) == sizeof(qpn) && qpn, "the child made no XRC_RECV QP");

	/* The same file, another descriptor: the same domain. */
	int fd2 = open(path, O_RDONLY);
	struct ibv_xrcd *x = open_xrcd(ctx, fd2, 0);
	CHECK(x, "xrcd of the child's file: %s", strerror(errno));
	errno = 0;
	CHECK(!open_xrcd(ctx, fd2, O_CREAT | O_EXCL) && errno == EINVAL, "O_EXCL on an existing domain: errno %d",
	      errno);
	struct ibv_qp_open_attr oa = {.comp_mask = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE,
				      .qp_num = qpn, .xrcd = x, .qp_type = IBV_QPT_XRC_RECV};
	struct ibv_qp *tgt = x ? ibv_open_qp(ctx, &oa) : NULL;
	CHECK(tgt && tgt->qp_num == qpn, "ibv_open_qp(%u): %s", qpn, strerror(errno));
	if (!tgt)
		return 1;

	/* The creator goes, holding everything. */
	char go = 1;
	int status;
	CHECK(write(from_parent[1], &go, 1) == 1, "pipe");
	CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0, "child failed");
	snprintf(qpdir, sizeof(qpdir), "%s/qp/%u", argv[1], qpn);
	for (int i = 0; i < 100 && stat(qpdir, &st) == 0; i++)
		usleep(10000); /* give the lease's end time to act, if it (wrongly) would */
	CHECK(stat(qpdir, &st) == 0, "%s is gone with its creator, though this process holds it", qpdir);

	/* It still works: an XRC SRQ of the domain, an XRC_SEND QP of ours. */
	struct ibv_port_attr port;
	union ibv_gid gid;
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *scq = ibv_create_cq(ctx, 16, NULL, NULL, 0), *rcq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	uint8_t *buf = calloc(1, 4096);
	struct ibv_mr *mr = pd ? ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE) : NULL;
	struct ibv_srq_init_attr_ex sa = {.attr = {.max_wr = 8, .max_sge = 1},
					  .comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD |
						       IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ,
					  .srq_type = IBV_SRQT_XRC, .pd = pd, .xrcd = x, .cq = rcq};
	struct ibv_srq *srq = mr ? ibv_create_srq_ex(ctx, &sa) : NULL;
	uint32_t srqn = 0;
	CHECK(srq && !ibv_get_srq_num(srq, &srqn) && srqn, "XRC SRQ: %s", strerror(errno));
	struct ibv_qp_init_attr_ex ia = {.qp_type = IBV_QPT_XRC_SEND, .comp_mask = IBV_QP_INIT_ATTR_PD, .pd = pd,
					 .send_cq = scq, .cap = {.max_send_wr = 4, .max_send_sge = 1}};
	struct ibv_qp *ini = srq ? ibv_create_qp_ex(ctx, &ia) : NULL;
	CHECK(ini, "XRC_SEND QP: %s", strerror(errno));
	if (!ini || ibv_query_port(ctx, 1, &port) || ibv_query_gid(ctx, 1, 0, &gid))
		return 1;

	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qp_access_flags = IBV_ACCESS_REMOTE_WRITE};
	int init = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
	CHECK(!ibv_modify_qp(tgt, &a, init) && !ibv_modify_qp(ini, &a, init), "to INIT");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.rq_psn = 7;
	a.ah_attr.dlid = port.lid;
	a.ah_attr.port_num = 1;
	if (port.link_layer == IBV_LINK_LAYER_ETHERNET) {
		a.ah_attr.is_global = 1;
		a.ah_attr.grh.dgid = gid;
		a.ah_attr.grh.hop_limit = 1;
	}
	a.dest_qp_num = ini->qp_num;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 1;
	int rtr = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
	CHECK(!ibv_modify_qp(tgt, &a, rtr | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER), "target to RTR");
	/* the initiator may not carry the target's attributes (the kernel's table) */
	CHECK(ibv_modify_qp(ini, &a, rtr | IBV_QP_MAX_DEST_RD_ATOMIC) == EINVAL, "XRC_SEND RTR took max_dest_rd_atomic");
	a.dest_qp_num = tgt->qp_num;
	CHECK(!ibv_modify_qp(ini, &a, rtr), "initiator to RTR");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 7;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 1;
	CHECK(!ibv_modify_qp(ini, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
					      IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC),
	      "initiator to RTS");

	struct ibv_sge rs = {.addr = (uintptr_t)buf, .length = 2048, .lkey = mr->lkey};
	struct ibv_recv_wr rw = {.wr_id = 5, .sg_list = &rs, .num_sge = 1}, *rbad;
	CHECK(!ibv_post_srq_recv(srq, &rw, &rbad), "post_srq_recv");
	memcpy(buf + 2048, "outlived", 9);
	struct ibv_sge ss = {.addr = (uintptr_t)buf + 2048, .length = 9, .lkey = mr->lkey};
	struct ibv_send_wr sw = {.wr_id = 6, .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED},
			   *sbad;
	sw.qp_type.xrc.remote_srqn = srqn;
	CHECK(!ibv_post_send(ini, &sw, &sbad), "post_send");
	struct ibv_wc wc = {0};
	CHECK(poll1(scq, &wc) == 1 && wc.status == IBV_WC_SUCCESS && wc.wr_id == 6, "send: status %d", wc.status);
	CHECK(poll1(rcq, &wc) == 1 && wc.status == IBV_WC_SUCCESS && wc.wr_id == 5 && wc.qp_num == qpn &&
		      wc.src_qp == ini->qp_num && wc.byte_len == 9 && !memcmp(buf, "outlived", 9),
	      "recv: status %d wr_id %llu qp_num %u src_qp %u byte_len %u", wc.status, (unsigned long long)wc.wr_id,
	      wc.qp_num, wc.src_qp, wc.byte_len);

	/* The last holder lets go: the QP is destroyed. */
	CHECK(!ibv_destroy_qp(tgt), "destroy the opened qp");
	CHECK(stat(qpdir, &st) != 0, "%s outlived its last holder", qpdir);
	CHECK(!ibv_destroy_qp(ini) && !ibv_destroy_srq(srq) && !ibv_close_xrcd(x), "teardown");
	ibv_dereg_mr(mr);
	ibv_destroy_cq(scq);
	ibv_destroy_cq(rcq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	free(buf);
	close(fd);
	close(fd2);
	unlink(path);
	if (failures)
		return 1;
	printf("xrc_owner: ok\n");
	return 0;
}
