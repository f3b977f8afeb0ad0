/* Shared receive queues: srq/H's files, and posts into its mapped ring. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rdmafs.h"

static int srq_query_text(struct rf_context *ctx, uint32_t h, char *text, size_t len)
{
	char path[64];

	snprintf(path, sizeof(path), "srq/%u/attr", h);
	return rf_read_file(ctx, path, text, len);
}

static uint32_t u32kv(const char *text, const char *key)
{
	uint64_t v = 0;

	rf_kv_u64(text, key, &v);
	return v;
}

/* srq_new makes a basic SRQ, or with xrcd an XRC SRQ whose receive
 * completions go to cq. */
static struct ibv_srq *srq_new(struct ibv_pd *pd, void *srq_context, struct ibv_srq_attr *attr,
			       struct ibv_xrcd *xrcd, struct ibv_cq *cq)
{
	struct rf_context *ctx = to_rctx(pd->context);
	struct rf_srq *s;
	char req[192], text[512], path[64];
	int err;

	if (!attr->max_wr) {
		errno = EINVAL;
		return NULL;
	}
	s = calloc(1, sizeof(*s));
	if (!s) {
		errno = ENOMEM;
		return NULL;
	}
	int n = snprintf(req, sizeof(req),
			 RDMAFS_KEQ(PD) "%u " RDMAFS_KEQ(MAX_WR) "%u " RDMAFS_KEQ(MAX_SGE) "%u " RDMAFS_KEQ(SRQ_LIMIT) "%u",
			 to_rpd(pd)->handle, attr->max_wr, attr->max_sge, attr->srq_limit);
	if (xrcd)
		snprintf(req + n, sizeof(req) - n, " " RDMAFS_KEQ(SRQ_TYPE) "xrc " RDMAFS_KEQ(XRCD) "%u " RDMAFS_KEQ(CQ) "%u",
			 to_rxrcd(xrcd)->handle, to_rcq(cq)->handle);
	if ((err = rf_transact(ctx, "srq", req, &s->handle)))
		goto fail_free;
	if ((err = srq_query_text(ctx, s->handle, text, sizeof(text))))
		goto fail_destroy;
	s->max_wr = u32kv(text, RDMAFS_KEY_MAX_WR);
	s->max_sge = u32kv(text, RDMAFS_KEY_MAX_SGE);
	s->srq_num = u32kv(text, RDMAFS_KEY_SRQ_NUM);
	snprintf(path, sizeof(path), "srq/%u/ring", s->handle);
	if ((err = rf_ring_map(ctx->mount_fd, path, RDMAFS_KIND_SRQ, &s->ring)))
		goto fail_destroy;
	s->ring.head = rf_load_acq(s->ring.prod);
	pthread_spin_init(&s->lock, PTHREAD_PROCESS_PRIVATE);
	s->srq.context = pd->context;
	s->srq.srq_context = srq_context;
	s->srq.pd = pd;
	s->srq.handle = s->handle;
	pthread_mutex_init(&s->srq.mutex, NULL);
	pthread_cond_init(&s->srq.cond, NULL);
	attr->max_wr = s->max_wr;
	attr->max_sge = s->max_sge;
	rf_track(ctx, RF_SRQ, s->handle, s);
	return &s->srq;
fail_destroy:
	rf_destroy(ctx, "srq", s->handle);
fail_free:
	free(s);
	errno = err;
	return NULL;
}

struct ibv_srq *ibv_create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *init)
{
	return srq_new(pd, init->srq_context, &init->attr, NULL, NULL);
}

struct ibv_srq *rf_create_srq_ex(struct ibv_context *context, struct ibv_srq_init_attr_ex *init)
{
	const uint32_t known = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ;
	bool xrc = (init->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) && init->srq_type == IBV_SRQT_XRC;

	if (init->comp_mask & ~known) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	if ((init->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) && init->srq_type != IBV_SRQT_BASIC && !xrc) {
		errno = EOPNOTSUPP; /* tag matching: absent */
		return NULL;
	}
	if (!(init->comp_mask & IBV_SRQ_INIT_ATTR_PD) || !init->pd || init->pd->context != context) {
		errno = EINVAL;
		return NULL;
	}
	if (xrc && (!(init->comp_mask & IBV_SRQ_INIT_ATTR_XRCD) || !(init->comp_mask & IBV_SRQ_INIT_ATTR_CQ) ||
		    !init->xrcd || !init->cq || init->xrcd->context != context || init->cq->context != context)) {
		errno = EINVAL;
		return NULL;
	}
	return srq_new(init->pd, init->srq_context, &init->attr, xrc ? init->xrcd : NULL, xrc ? init->cq : NULL);
}

/* ibv_modify_srq. With IBV_SRQ_MAX_WR the daemon moves the WRs that wait
 * to a new ring (srq/H/ring is then a new file), as it does for a CQ
 * resize: we map it in place of the old one, holding the SRQ's lock so
 * that no post lands in the old ring meanwhile. The posted WRs keep their
 * order; the new producer index is the daemon's. */
int ibv_modify_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr, int mask)
{
	struct rf_srq *s = to_rsrq(srq);
	struct rf_context *ctx = to_rctx(srq->context);
	char path[64], cmd[96];
	int n, err;

	if (mask & ~(IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT))
		return EINVAL;
	if (!mask)
		return 0;
	if (mask == IBV_SRQ_LIMIT && attr->srq_limit > s->max_wr)
		return EINVAL;
	if ((mask & IBV_SRQ_MAX_WR) && (!attr->max_wr || attr->max_wr > (uint32_t)ctx->attr.max_srq_wr))
		return EINVAL;
	snprintf(path, sizeof(path), "srq/%u/ctl", s->handle);
	n = snprintf(cmd, sizeof(cmd), "modify");
	if (mask & IBV_SRQ_MAX_WR)
		n += snprintf(cmd + n, sizeof(cmd) - n, " " RDMAFS_KEQ(MAX_WR) "%u", attr->max_wr);
	if (mask & IBV_SRQ_LIMIT)
		snprintf(cmd + n, sizeof(cmd) - n, " " RDMAFS_KEQ(SRQ_LIMIT) "%u", attr->srq_limit);
	if (!(mask & IBV_SRQ_MAX_WR))
		return rf_command(ctx, path, cmd);

	pthread_spin_lock(&s->lock);
	if ((err = rf_command(ctx, path, cmd))) {
		pthread_spin_unlock(&s->lock);
		return err;
	}
	struct rf_ring old = s->ring;
	snprintf(path, sizeof(path), "srq/%u/ring", s->handle);
	err = rf_ring_map(ctx->mount_fd, path, RDMAFS_KIND_SRQ, &s->ring);
	if (err) {
		/* The daemon moved on; posts to the old ring are lost. */
		s->ring = old;
		rf_log("modify_srq: srq %u was resized but its new ring does not map (%d)", s->handle, err);
	} else {
		s->ring.head = rf_load_acq(s->ring.prod);
		s->max_wr = s->ring.slot_count;
		rf_ring_unmap(&old);
	}
	pthread_spin_unlock(&s->lock);
	return err;
}

int ibv_query_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr)
{
	struct rf_srq *s = to_rsrq(srq);
	char text[512];
	int err;

	if ((err = srq_query_text(to_rctx(srq->context), s->handle, text, sizeof(text))))
		return err;
	attr->max_wr = u32kv(text, RDMAFS_KEY_MAX_WR);
	attr->max_sge = u32kv(text, RDMAFS_KEY_MAX_SGE);
	attr->srq_limit = u32kv(text, RDMAFS_KEY_SRQ_LIMIT);
	return 0;
}

int ibv_destroy_srq(struct ibv_srq *srq)
{
	struct rf_srq *s = to_rsrq(srq);
	struct rf_context *ctx = to_rctx(srq->context);
	int err = rf_destroy(ctx, "srq", s->handle);

	if (err)
		return err;
	rf_untrack(ctx, RF_SRQ, s->handle);
	pthread_mutex_lock(&srq->mutex);
	while (srq->events_completed != s->async_delivered)
		pthread_cond_wait(&srq->cond, &srq->mutex);
	pthread_mutex_unlock(&srq->mutex);
	rf_ring_unmap(&s->ring);
	free(s);
	return 0;
}
