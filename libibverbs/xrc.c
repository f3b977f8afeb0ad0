/* XRC: domains (xrcd/H), the SRQ number, and opening an XRC_RECV QP that
 * another context made. The XRC SRQs and QPs themselves are made in srq.c
 * and qp.c. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rdmafs.h"

/* ibv_open_xrcd. A shared domain is named by the program's own descriptor
 * of a file: the daemon looks the descriptor up in this process (the FUSE
 * request carries our pid), so it sees the file the kernel would. */
struct ibv_xrcd *rf_open_xrcd(struct ibv_context *context, struct ibv_xrcd_init_attr *attr)
{
	struct rf_context *ctx = to_rctx(context);
	struct rf_xrcd *x;
	char req[96] = "";
	int err;

	if (attr->comp_mask & ~(uint32_t)(IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS)) {
		errno = EINVAL;
		return NULL;
	}
	int fd = (attr->comp_mask & IBV_XRCD_INIT_ATTR_FD) ? attr->fd : -1;
	int oflags = (attr->comp_mask & IBV_XRCD_INIT_ATTR_OFLAGS) ? attr->oflags : 0;
	if (oflags & ~(O_CREAT | O_EXCL)) {
		errno = EINVAL;
		return NULL;
	}
	if (fd >= 0)
		snprintf(req, sizeof(req), RDMAFS_KEQ(FD) "%d%s%s", fd,
			 (oflags & O_CREAT) ? " " RDMAFS_KEQ(CREATE) "1" : "",
			 (oflags & O_EXCL) ? " " RDMAFS_KEQ(EXCL) "1" : "");
	else if (fd != -1) {
		errno = EBADF;
		return NULL;
	}
	x = calloc(1, sizeof(*x));
	if (!x) {
		errno = ENOMEM;
		return NULL;
	}
	if ((err = rf_transact(ctx, "xrcd", req, &x->handle))) {
		free(x);
		/* "no domain for this file yet": the kernel's EAGAIN, which the
		 * daemon's write cannot carry (device/xrc.go) */
		errno = err == ENOENT && fd >= 0 ? EAGAIN : err;
		return NULL;
	}
	x->xrcd.context = context;
	return &x->xrcd;
}

int rf_close_xrcd(struct ibv_xrcd *xrcd)
{
	struct rf_xrcd *x = to_rxrcd(xrcd);
	int err = rf_destroy(to_rctx(xrcd->context), "xrcd", x->handle);

	if (err)
		return err;
	free(x);
	return 0;
}

int rf_get_srq_num(struct ibv_srq *srq, uint32_t *num)
{
	struct rf_srq *s = to_rsrq(srq);

	if (!s->srq_num)
		return EINVAL; /* not an XRC SRQ */
	*num = s->srq_num;
	return 0;
}

/* ibv_open_qp: another hold on an XRC_RECV QP of the domain xrcd is on.
 * The daemon answers with its number and this context's lease holds it
 * from then on; ibv_destroy_qp lets go (qp.c). */
struct ibv_qp *rf_open_qp(struct ibv_context *context, struct ibv_qp_open_attr *attr)
{
	uint32_t need = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE;
	char req[96];

	if ((attr->comp_mask & need) != need || (attr->comp_mask & ~(need | IBV_QP_OPEN_ATTR_CONTEXT)) ||
	    !attr->xrcd || attr->xrcd->context != context) {
		errno = EINVAL;
		return NULL;
	}
	if (attr->qp_type != IBV_QPT_XRC_RECV) {
		errno = EINVAL;
		return NULL;
	}
	snprintf(req, sizeof(req), RDMAFS_KEQ(QP_TYPE) "xrc_recv " RDMAFS_KEQ(XRCD) "%u "
		 RDMAFS_KEQ(OPEN) "%u", to_rxrcd(attr->xrcd)->handle, attr->qp_num);
	return rf_xrc_recv_qp(to_rctx(context), req,
			      (attr->comp_mask & IBV_QP_OPEN_ATTR_CONTEXT) ? attr->qp_context : NULL);
}

/* rf_xrc_recv_qp makes or opens an XRC_RECV QP by the qp/new request req
 * and fills its library side: no rings, no PD or CQs (an XRC SRQ's serve
 * each message). Its state is read back, since an opened one may be past
 * RESET. */
struct ibv_qp *rf_xrc_recv_qp(struct rf_context *ctx, const char *req, void *qp_context)
{
	struct rf_qp *qp = calloc(1, sizeof(*qp));
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr init;
	uint32_t qpn;
	int err;

	if (!qp) {
		errno = ENOMEM;
		return NULL;
	}
	if ((err = rf_transact(ctx, "qp", req, &qpn))) {
		free(qp);
		errno = err;
		return NULL;
	}
	struct ibv_qp *q = &qp->qpx.qp_base;

	qp->qpn = qpn;
	qp->sq.fd = -1;
	qp->rq.fd = -1;
	pthread_spin_init(&qp->sq_lock, PTHREAD_PROCESS_PRIVATE);
	pthread_spin_init(&qp->rq_lock, PTHREAD_PROCESS_PRIVATE);
	q->context = &ctx->vctx.context;
	q->qp_context = qp_context;
	q->handle = qpn;
	q->qp_num = qpn;
	q->state = IBV_QPS_RESET;
	q->qp_type = IBV_QPT_XRC_RECV;
	pthread_mutex_init(&q->mutex, NULL);
	pthread_cond_init(&q->cond, NULL);
	if (!ibv_query_qp(q, &a, IBV_QP_STATE, &init))
		q->state = a.qp_state;
	rf_track(ctx, RF_QP, qpn, qp);
	return q;
}

/* rf_close_xrc_recv lets go of an XRC_RECV QP: through the lease, which
 * destroys it when no other context holds it; without a lease (a
 * persistent context), it is destroyed outright. */
int rf_close_xrc_recv(struct rf_context *ctx, uint32_t qpn)
{
	char line[64];
	int n;

	if (ctx->lease_fd < 0)
		return rf_destroy(ctx, "qp", qpn);
	n = snprintf(line, sizeof(line), "close qp %u\n", qpn);
	if (write(ctx->lease_fd, line, n) != n) {
		int err = rf_errno_of_write(errno ? errno : EIO);
		rf_log("lease close qp %u: %s", qpn, strerror(err));
		errno = err;
		return err;
	}
	return 0;
}
