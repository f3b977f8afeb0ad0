/* The synchronous endpoint calls (rdma_create_ep, rdma_get_request,
 * rdma_destroy_ep), made of the asynchronous ones as librdmacm makes them:
 * an id without a channel gets its own, and every call that waits for an
 * event reads it there (rc_id_complete). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "rdmacm.h"

static int fail(int err)
{
	errno = err;
	return -1;
}

int rdma_create_ep(struct rdma_cm_id **out, struct rdma_addrinfo *res, struct ibv_pd *pd,
		   struct ibv_qp_init_attr *qp_init_attr)
{
	struct rdma_cm_id *cid;
	struct rc_id *id;
	int err;

	if (!out || !res)
		return fail(EINVAL);
	if (rdma_create_id(NULL, &cid, NULL, res->ai_port_space))
		return -1;
	id = to_rid(cid);
	cid->qp_type = res->ai_qp_type == IBV_QPT_UD ? IBV_QPT_UD : IBV_QPT_RC;
	if (res->ai_flags & RAI_PASSIVE) {
		if (res->ai_src_addr && rdma_bind_addr(cid, res->ai_src_addr))
			goto err;
		if (pd)
			cid->pd = pd;
		if (qp_init_attr) {
			id->qp_init_attr = malloc(sizeof(*qp_init_attr));
			if (!id->qp_init_attr) {
				errno = ENOMEM;
				goto err;
			}
			*id->qp_init_attr = *qp_init_attr;
			id->qp_init_attr->qp_type = cid->qp_type;
		}
		*out = cid;
		return 0;
	}
	if (rdma_resolve_addr(cid, res->ai_src_len ? res->ai_src_addr : NULL, res->ai_dst_addr, 2000))
		goto err;
	if (rdma_resolve_route(cid, 2000))
		goto err;
	if (qp_init_attr) {
		qp_init_attr->qp_type = cid->qp_type;
		if (rdma_create_qp(cid, pd, qp_init_attr))
			goto err;
	}
	*out = cid;
	return 0;
err:
	err = errno;
	rdma_destroy_id(cid);
	return fail(err);
}

void rdma_destroy_ep(struct rdma_cm_id *cid)
{
	if (cid->qp)
		rdma_destroy_qp(cid);
	if (cid->srq)
		rdma_destroy_srq(cid);
	rdma_destroy_id(cid);
}

int rdma_get_request(struct rdma_cm_id *listen, struct rdma_cm_id **out)
{
	struct rc_id *l = to_rid(listen);
	struct rdma_cm_event *e;
	int err;

	if (!out || !l->sync)
		return fail(EINVAL);
	if (listen->event) {
		rdma_ack_cm_event(listen->event);
		listen->event = NULL;
	}
	if (rdma_get_cm_event(listen->channel, &e))
		return -1;
	if (e->status) {
		err = e->status < 0 ? -e->status : e->status;
		goto err;
	}
	if (e->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
		err = EINVAL;
		goto err;
	}
	struct rdma_cm_id *cid = e->id;
	/* the request's id is synchronous too: its events on a channel of its own */
	if (rdma_migrate_id(cid, NULL)) {
		err = errno;
		rdma_reject(cid, NULL, 0);
		rdma_destroy_id(cid);
		goto err;
	}
	if (l->qp_init_attr) {
		struct ibv_qp_init_attr a = *l->qp_init_attr;
		if (rdma_create_qp(cid, listen->pd, &a)) {
			err = errno;
			rdma_reject(cid, NULL, 0);
			rdma_ack_cm_event(e);
			rdma_destroy_id(cid);
			errno = err;
			return -1;
		}
	}
	cid->event = e;
	*out = cid;
	return 0;
err:
	rdma_ack_cm_event(e);
	return fail(err);
}
