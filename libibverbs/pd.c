/* Protection domains and address handles. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>

#include "rdmafs.h"

struct ibv_pd *ibv_alloc_pd(struct ibv_context *context)
{
	struct rf_context *ctx = to_rctx(context);
	struct rf_pd *pd = calloc(1, sizeof(*pd));

	if (!pd) {
		errno = ENOMEM;
		return NULL;
	}
	if (rf_transact(ctx, "pd", "", &pd->handle)) {
		int err = errno;
		free(pd);
		errno = err;
		return NULL;
	}
	pd->pd.context = context;
	pd->pd.handle = pd->handle;
	return &pd->pd;
}

int ibv_dealloc_pd(struct ibv_pd *pd)
{
	struct rf_pd *p = to_rpd(pd);
	int err;

	if (p->parent) {
		/* a parent domain owns nothing in the daemon */
		free(p);
		return 0;
	}
	if ((err = rf_destroy(to_rctx(pd->context), "pd", p->handle)))
		return err;
	free(p);
	return 0;
}

/* ibv_import_pd: PD handle of the context's device (made by any context on
 * the same command fd, or by anyone of the caller's uid): a wrapper whose
 * handle is the original's. Its attr file is the owner's alone (0600), so
 * reading it is the daemon's check that the PD exists and is the caller's
 * to use. ibv_dealloc_pd on it destroys the PD, as rdma-core's does;
 * ibv_unimport_pd frees only the wrapper. */
struct ibv_pd *ibv_import_pd(struct ibv_context *context, uint32_t pd_handle)
{
	struct rf_context *ctx = to_rctx(context);
	char path[64], text[256];
	struct rf_pd *pd;
	int err;

	snprintf(path, sizeof(path), "pd/%u/attr", pd_handle);
	if ((err = rf_read_file(ctx, path, text, sizeof(text)))) {
		errno = err;
		return NULL;
	}
	if (!(pd = calloc(1, sizeof(*pd)))) {
		errno = ENOMEM;
		return NULL;
	}
	pd->handle = pd_handle;
	pd->pd.context = context;
	pd->pd.handle = pd_handle;
	return &pd->pd;
}

void ibv_unimport_pd(struct ibv_pd *pd)
{
	free(to_rpd(pd));
}

/* Parent domains and thread domains are library objects. A parent domain
 * is its PD for every verb (same handle); the buffer allocators it may
 * carry are never called, because queue memory is the daemon's, mapped from
 * the mount. A thread domain promises single-threaded use, a hint the
 * library does not need. */
struct ibv_pd *rf_alloc_parent_domain(struct ibv_context *context, struct ibv_parent_domain_init_attr *attr)
{
	struct rf_pd *pd;

	if (!attr || !attr->pd || attr->pd->context != context ||
	    (attr->comp_mask & ~(IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS | IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT)) ||
	    (attr->td && attr->td->context != context) || to_rpd(attr->pd)->parent) {
		errno = EINVAL;
		return NULL;
	}
	pd = calloc(1, sizeof(*pd));
	if (!pd) {
		errno = ENOMEM;
		return NULL;
	}
	pd->pd.context = context;
	pd->handle = to_rpd(attr->pd)->handle;
	pd->pd.handle = pd->handle;
	pd->parent = true;
	return &pd->pd;
}

struct ibv_td *rf_alloc_td(struct ibv_context *context, struct ibv_td_init_attr *attr)
{
	struct ibv_td *td;

	if (!attr || attr->comp_mask) {
		errno = EINVAL;
		return NULL;
	}
	td = calloc(1, sizeof(*td));
	if (!td) {
		errno = ENOMEM;
		return NULL;
	}
	td->context = context;
	return td;
}

int rf_dealloc_td(struct ibv_td *td)
{
	free(td);
	return 0;
}

/* The GID a QP or AH addresses: the GRH's when there is one; without a GRH
 * (an InfiniBand port addressed by LID) the only LID a port reaches is its
 * own, so the destination is this device. */
void rf_dest_gid(struct rf_context *ctx, const struct ibv_ah_attr *ah, char *out, size_t len)
{
	const union ibv_gid *g = ah->is_global ? &ah->grh.dgid : &ctx->port.gid;

	if (!inet_ntop(AF_INET6, g->raw, out, len))
		snprintf(out, len, "::");
}

struct ibv_ah *ibv_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr)
{
	struct rf_context *ctx = to_rctx(pd->context);
	struct rf_ah *ah;
	char gid[64], req[512];

	if (!attr || attr->port_num != 1) {
		errno = EINVAL;
		return NULL;
	}
	if (!attr->is_global && (ctx->port.roce || attr->dlid != ctx->port.lid)) {
		/* RoCE needs a GRH; by LID alone no other port is reachable */
		errno = ctx->port.roce ? EINVAL : EHOSTUNREACH;
		return NULL;
	}
	ah = calloc(1, sizeof(*ah));
	if (!ah) {
		errno = ENOMEM;
		return NULL;
	}
	rf_dest_gid(ctx, attr, gid, sizeof(gid));
	snprintf(req, sizeof(req), RDMAFS_KEQ(PD) "%u " RDMAFS_KEQ(DGID) "%s " RDMAFS_KEQ(SL) "%u",
		 to_rpd(pd)->handle, gid, attr->sl);
	if (attr->is_global)
		snprintf(req + strlen(req), sizeof(req) - strlen(req),
			 " " RDMAFS_KEQ(HOP_LIMIT) "%u " RDMAFS_KEQ(TRAFFIC_CLASS) "%u " RDMAFS_KEQ(FLOW_LABEL) "%u "
			 RDMAFS_KEQ(SGID_INDEX) "%u", attr->grh.hop_limit,
			 attr->grh.traffic_class, rf_flow_label(attr->grh.flow_label), attr->grh.sgid_index);
	if (rf_transact(ctx, "ah", req, &ah->handle)) {
		int err = errno;
		free(ah);
		errno = err;
		return NULL;
	}
	ah->ah.context = pd->context;
	ah->ah.pd = pd;
	ah->ah.handle = ah->handle;
	return &ah->ah;
}

int ibv_destroy_ah(struct ibv_ah *ah)
{
	struct rf_ah *a = to_rah(ah);
	int err = rf_destroy(to_rctx(ah->context), "ah", a->handle);

	if (err)
		return err;
	free(a);
	return 0;
}

int ibv_init_ah_from_wc(struct ibv_context *context, uint8_t port_num, struct ibv_wc *wc,
			struct ibv_grh *grh, struct ibv_ah_attr *ah_attr)
{
	struct rf_context *ctx = to_rctx(context);

	memset(ah_attr, 0, sizeof(*ah_attr));
	ah_attr->dlid = wc->slid;
	ah_attr->sl = wc->sl;
	ah_attr->src_path_bits = wc->dlid_path_bits;
	ah_attr->port_num = port_num;
	if (wc->wc_flags & IBV_WC_GRH && ctx->port.roce && ((const uint8_t *)grh)[0] >> 4 != 6 &&
	    ((const uint8_t *)grh)[20] >> 4 == 4) {
		/* RoCEv2 over IPv4: the slot holds the packet's IPv4 header in
		 * its last 20 bytes (as rxe delivers it) and no IPv6 version
		 * in its first; the sender's GID is ::ffff:SOURCE, as
		 * rdma-core's verbs.c (get_grh_header_version) maps it. */
		const uint8_t *ip = (const uint8_t *)grh + 20;
		ah_attr->is_global = 1;
		memset(&ah_attr->grh.dgid, 0, sizeof(ah_attr->grh.dgid));
		ah_attr->grh.dgid.raw[10] = 0xff;
		ah_attr->grh.dgid.raw[11] = 0xff;
		memcpy(&ah_attr->grh.dgid.raw[12], ip + 12, 4);
		ah_attr->grh.traffic_class = ip[1];
		ah_attr->grh.hop_limit = 0xff;
		ah_attr->grh.sgid_index = 0;
	} else if (wc->wc_flags & IBV_WC_GRH) {
		uint32_t flow = be32toh(grh->version_tclass_flow);
		ah_attr->is_global = 1;
		ah_attr->grh.dgid = grh->sgid;
		ah_attr->grh.flow_label = flow & 0xfffff;
		ah_attr->grh.traffic_class = (flow >> 20) & 0xff;
		ah_attr->grh.hop_limit = 0xff;
		ah_attr->grh.sgid_index = 0;
	} else if (ctx->port.roce) {
		errno = EINVAL; /* RoCE needs the GRH */
		return -1;
	}
	return 0;
}

struct ibv_ah *ibv_create_ah_from_wc(struct ibv_pd *pd, struct ibv_wc *wc, struct ibv_grh *grh,
				     uint8_t port_num)
{
	struct ibv_ah_attr attr;

	if (ibv_init_ah_from_wc(pd->context, port_num, wc, grh, &attr))
		return NULL;
	return ibv_create_ah(pd, &attr);
}
