/* Memory windows: mw/new, and binding with a BIND_MW work request (type 1
 * through ibv_bind_mw, type 2 through ibv_post_send or ibv_wr_bind_mw). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rdmafs.h"

struct ibv_mw *rf_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type)
{
	struct rf_context *ctx = to_rctx(pd->context);
	struct rf_mw *mw;
	char req[64], path[64], text[512];
	uint64_t rkey = 0;
	int err;

	if (type != IBV_MW_TYPE_1 && type != IBV_MW_TYPE_2) {
		errno = EINVAL;
		return NULL;
	}
	mw = calloc(1, sizeof(*mw));
	if (!mw) {
		errno = ENOMEM;
		return NULL;
	}
	snprintf(req, sizeof(req), RDMAFS_KEQ(PD) "%u " RDMAFS_KEQ(TYPE) "%d", to_rpd(pd)->handle, type);
	if ((err = rf_transact(ctx, "mw", req, &mw->handle))) {
		free(mw);
		errno = err;
		return NULL;
	}
	snprintf(path, sizeof(path), "mw/%u/attr", mw->handle);
	if ((err = rf_read_file(ctx, path, text, sizeof(text))) || rf_kv_u64(text, RDMAFS_KEY_RKEY, &rkey)) {
		rf_destroy(ctx, "mw", mw->handle);
		free(mw);
		errno = err ? err : EIO;
		return NULL;
	}
	mw->mw.context = pd->context;
	mw->mw.pd = pd;
	mw->mw.rkey = rkey;
	mw->mw.handle = mw->handle;
	mw->mw.type = type;
	return &mw->mw;
}

int rf_dealloc_mw(struct ibv_mw *mw)
{
	struct rf_mw *m = to_rmw(mw);
	int err = rf_destroy(to_rctx(mw->context), "mw", m->handle);

	if (err)
		return err;
	free(m);
	return 0;
}

int rf_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mw_bind *bind)
{
	struct ibv_send_wr wr, *bad;
	int err;

	if (mw->type != IBV_MW_TYPE_1)
		return EINVAL;
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = bind->wr_id;
	wr.opcode = IBV_WR_BIND_MW;
	wr.send_flags = bind->send_flags;
	wr.bind_mw.mw = mw;
	wr.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
	wr.bind_mw.bind_info = bind->bind_info;
	if ((err = rf_post_send(qp, &wr, &bad)))
		return err;
	mw->rkey = wr.bind_mw.rkey;
	return 0;
}
