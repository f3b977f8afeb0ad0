/* rdma_rw: a minimal RC RDMA WRITE and READ over libibverbs, written as
 * for any RDMA device; on rdmafs run it with the drop-in library:
 *
 *   make -C examples/c && rdmafs exec -- examples/c/rdma_rw [-d DEVICE] [-s SIZE]
 *
 * Two RC QPs on one device are connected to each other (the LID or the
 * GID of its one port, as ibv_rc_pingpong does); the first WRITEs a
 * pattern into the second's buffer, READs it back into a third buffer and
 * checks every byte. The buffers are ordinary malloc'd memory: the
 * library registers the program's own pages. */
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void die(const char *what)
{
	perror(what);
	exit(1);
}

static struct ibv_qp *make_qp(struct ibv_pd *pd, struct ibv_cq *cq)
{
	struct ibv_qp_init_attr a = {
		.send_cq = cq,
		.recv_cq = cq,
		.qp_type = IBV_QPT_RC,
		.cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1},
	};
	struct ibv_qp *qp = ibv_create_qp(pd, &a);
	struct ibv_qp_attr m = {
		.qp_state = IBV_QPS_INIT,
		.port_num = 1,
		.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ,
	};

	if (!qp)
		die("ibv_create_qp");
	if ((errno = ibv_modify_qp(qp, &m, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)))
		die("modify to INIT");
	return qp;
}

/* connect moves qp to RTR and RTS towards QP number dest on this port. */
static void connect_qp(struct ibv_qp *qp, uint32_t dest, struct ibv_port_attr *port, union ibv_gid *gid)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_RTR,
		.path_mtu = port->active_mtu,
		.dest_qp_num = dest,
		.rq_psn = 0,
		.max_dest_rd_atomic = 1,
		.min_rnr_timer = 12,
		.ah_attr = {.dlid = port->lid, .port_num = 1},
	};

	if (port->link_layer == IBV_LINK_LAYER_ETHERNET) {
		a.ah_attr.is_global = 1;
		a.ah_attr.grh.dgid = *gid;
		a.ah_attr.grh.hop_limit = 1;
	}
	if ((errno = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
						   IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)))
		die("modify to RTR");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = 0;
	a.max_rd_atomic = 1;
	if ((errno = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
						   IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC)))
		die("modify to RTS");
}

static void run(struct ibv_qp *qp, struct ibv_cq *cq, enum ibv_wr_opcode op, struct ibv_mr *local,
		struct ibv_mr *remote, size_t size)
{
	struct ibv_sge sge = {.addr = (uintptr_t)local->addr, .length = size, .lkey = local->lkey};
	struct ibv_send_wr wr = {
		.wr_id = op,
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = op,
		.send_flags = IBV_SEND_SIGNALED,
		.wr.rdma = {.remote_addr = (uintptr_t)remote->addr, .rkey = remote->rkey},
	}, *bad;
	struct ibv_wc wc;
	int n;

	if ((errno = ibv_post_send(qp, &wr, &bad)))
		die("ibv_post_send");
	while ((n = ibv_poll_cq(cq, 1, &wc)) == 0)
		;
	if (n < 0)
		die("ibv_poll_cq");
	if (wc.status != IBV_WC_SUCCESS) {
		fprintf(stderr, "%s completed with %s\n", op == IBV_WR_RDMA_WRITE ? "WRITE" : "READ",
			ibv_wc_status_str(wc.status));
		exit(1);
	}
}

int main(int argc, char **argv)
{
	const char *name = NULL;
	size_t size = 1 << 20;
	int c;

	while ((c = getopt(argc, argv, "d:s:")) != -1) {
		if (c == 'd')
			name = optarg;
		else if (c == 's')
			size = strtoul(optarg, NULL, 0);
		else {
			fprintf(stderr, "usage: %s [-d DEVICE] [-s SIZE]\n", argv[0]);
			return 2;
		}
	}
	int num;
	struct ibv_device **list = ibv_get_device_list(&num), *dev = NULL;
	if (!list)
		die("ibv_get_device_list");
	for (int i = 0; i < num; i++)
		if (!name || !strcmp(ibv_get_device_name(list[i]), name))
			dev = dev ? dev : list[i];
	if (!dev) {
		fprintf(stderr, "no RDMA device%s%s\n", name ? " named " : "", name ? name : "");
		return 1;
	}
	struct ibv_context *ctx = ibv_open_device(dev);
	if (!ctx)
		die("ibv_open_device");
	struct ibv_port_attr port;
	union ibv_gid gid;
	if (ibv_query_port(ctx, 1, &port) || ibv_query_gid(ctx, 1, 0, &gid))
		die("ibv_query_port");
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 8, NULL, NULL, 0);
	if (!pd || !cq)
		die("ibv_alloc_pd/ibv_create_cq");

	char *src = malloc(size), *dst = malloc(size), *back = malloc(size);
	if (!src || !dst || !back)
		die("malloc");
	for (size_t i = 0; i < size; i++)
		src[i] = (char)(i * 7 + 3);
	memset(dst, 0, size);
	memset(back, 0, size);
	int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	struct ibv_mr *msrc = ibv_reg_mr(pd, src, size, acc);
	struct ibv_mr *mdst = ibv_reg_mr(pd, dst, size, acc);
	struct ibv_mr *mback = ibv_reg_mr(pd, back, size, acc);
	if (!msrc || !mdst || !mback)
		die("ibv_reg_mr");

	struct ibv_qp *a = make_qp(pd, cq), *b = make_qp(pd, cq);
	connect_qp(a, b->qp_num, &port, &gid);
	connect_qp(b, a->qp_num, &port, &gid);

	run(a, cq, IBV_WR_RDMA_WRITE, msrc, mdst, size);
	if (memcmp(src, dst, size)) {
		fprintf(stderr, "the WRITE did not land\n");
		return 1;
	}
	run(a, cq, IBV_WR_RDMA_READ, mback, mdst, size);
	if (memcmp(src, back, size)) {
		fprintf(stderr, "the READ brought back other bytes\n");
		return 1;
	}
	printf("%s: %zu bytes written to qp %u and read back through qp %u: ok\n", ibv_get_device_name(dev), size,
	       b->qp_num, a->qp_num);

	if (ibv_destroy_qp(a) || ibv_destroy_qp(b) || ibv_dereg_mr(msrc) || ibv_dereg_mr(mdst) ||
	    ibv_dereg_mr(mback) || ibv_destroy_cq(cq) || ibv_dealloc_pd(pd) || ibv_close_device(ctx))
		die("teardown");
	/* the buffers are the program's again */
	src[0] ^= 1;
	free(src);
	free(dst);
	free(back);
	ibv_free_device_list(list);
	return 0;
}
