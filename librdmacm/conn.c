/* Connections: connect, accept, reject, disconnect, notify, establish,
 * and the QP work the kernel leaves to librdmacm: rdma_init_qp_attr
 * answers from the daemon's attr snapshot (cm/I/attr) as the kernel's
 * INIT_QP_ATTR does, and the QP moves INIT → RTR → RTS on the active side
 * when the REP came (before `establish` sends the RTU), on the passive
 * side inside rdma_accept (before `accept` sends the REP), and to ERR on
 * reject, error and disconnect. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "rdmacm.h"
#include "rdmafs-text.h" /* qp/'s transition table, generated (libibverbs/) */

static int fail(int err)
{
	errno = err;
	return -1;
}

uint32_t rc_new_psn(void)
{
	uint32_t v = 0;

	if (getrandom(&v, sizeof(v), 0) != sizeof(v))
		v = (uint32_t)random();
	return v & 0xffffff;
}

/* The mask of a modify from cur to next of a QP of type t: IBV_QP_STATE
 * and the attributes qp/'s transition table requires, which
 * rdma_init_qp_attr fills in. */
static int required(enum ibv_qp_type t, enum ibv_qp_state cur, enum ibv_qp_state next)
{
	if ((unsigned)t >= sizeof(rdmafs_modify_required) / sizeof(rdmafs_modify_required[0]))
		return IBV_QP_STATE;
	return IBV_QP_STATE | (int)rdmafs_modify_required[t][cur][next];
}

static int clamp(int v, int max)
{
	return v < 0 ? 0 : v > max ? max : v;
}

int rdma_init_qp_attr(struct rdma_cm_id *cid, struct ibv_qp_attr *qa, int *mask)
{
	struct rc_id *id = to_rid(cid);
	struct rc_attr a;
	struct rc_sub *s;
	int err;
	bool ud = cid->qp_type == IBV_QPT_UD;

	if (!qa || !mask)
		return fail(EINVAL);
	if ((err = rc_id_sub(id, &s)))
		return fail(err);
	if (qa->qp_state == IBV_QPS_INIT) {
		qa->pkey_index = 0;
		qa->port_num = cid->port_num ? cid->port_num : 1;
		if (ud)
			qa->qkey = RDMA_UDP_QKEY;
		else
			qa->qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
		*mask = required(ud ? IBV_QPT_UD : IBV_QPT_RC, IBV_QPS_RESET, IBV_QPS_INIT);
		return 0;
	}
	if ((err = rc_read_attr(s->dev, s->handle, &a)))
		return fail(err);
	rc_id_fill(id, &a, true);
	if (ud) {
		if (qa->qp_state == IBV_QPS_RTS) {
			qa->sq_psn = 0;
			*mask = required(IBV_QPT_UD, IBV_QPS_RTR, IBV_QPS_RTS);
		} else if (qa->qp_state == IBV_QPS_RTR) {
			*mask = required(IBV_QPT_UD, IBV_QPS_INIT, IBV_QPS_RTR);
		} else {
			return fail(EINVAL);
		}
		return 0;
	}
	struct ibv_device_attr *da = &s->dev->attr;
	switch (qa->qp_state) {
	case IBV_QPS_RTR: {
		const struct ibv_sa_path_rec *p = &id->path;
		if (a.remote_qp_num < 0 || !a.has_gids)
			return fail(EINVAL); /* no REQ or REP yet */
		memset(&qa->ah_attr, 0, sizeof(qa->ah_attr));
		qa->ah_attr.dlid = be16toh(p->dlid);
		qa->ah_attr.sl = p->sl;
		qa->ah_attr.port_num = cid->port_num ? cid->port_num : 1;
		qa->ah_attr.is_global = 1;
		qa->ah_attr.grh.dgid = p->dgid;
		qa->ah_attr.grh.sgid_index = 0;
		qa->ah_attr.grh.hop_limit = p->hop_limit;
		qa->ah_attr.grh.traffic_class = p->traffic_class;
		qa->ah_attr.grh.flow_label = be32toh(p->flow_label);
		qa->path_mtu = p->mtu;
		qa->dest_qp_num = (uint32_t)a.remote_qp_num;
		/* The starting PSN of one's own REQ or REP is the PSN one receives
		 * at, the peer's is the one one sends at (kernel cm.c: rq_psn from
		 * its own REQ/REP, sq_psn from the peer's). */
		qa->rq_psn = a.psn >= 0 ? (uint32_t)a.psn : id->psn;
		qa->max_dest_rd_atomic = (uint8_t)clamp(a.responder_resources >= 0 ? a.responder_resources
									: id->responder_resources,
							da->max_qp_rd_atom);
		/* 0 is 655.36 ms, what the kernel's CM gives every RC QP
		 * (cm_init_qp_rtr_attr): a peer's SEND that finds no receive
		 * posted waits that long per RNR retry, not 0.64 ms, so the
		 * peer's rnr_retry_count (5 in pyverbs) covers seconds. */
		qa->min_rnr_timer = 0;
		*mask = required(IBV_QPT_RC, IBV_QPS_INIT, IBV_QPS_RTR);
		return 0;
	}
	case IBV_QPS_RTS: {
		long t = a.local_ack_timeout >= 0 ? a.local_ack_timeout
			 : id->ack_timeout >= 0 ? id->ack_timeout : 14;
		qa->timeout = (uint8_t)t;
		qa->retry_cnt = (uint8_t)(a.retry_count >= 0 ? clamp(a.retry_count, 7) : 7);
		qa->rnr_retry = (uint8_t)(a.rnr_retry_count >= 0 ? clamp(a.rnr_retry_count, 7) : 7);
		qa->sq_psn = a.remote_psn >= 0 ? (uint32_t)a.remote_psn : 0;
		qa->max_rd_atomic = (uint8_t)clamp(a.initiator_depth >= 0 ? a.initiator_depth : id->initiator_depth,
						   da->max_qp_init_rd_atom);
		*mask = required(IBV_QPT_RC, IBV_QPS_RTR, IBV_QPS_RTS);
		return 0;
	}
	case IBV_QPS_ERR:
	case IBV_QPS_RESET:
		*mask = IBV_QP_STATE;
		return 0;
	default:
		return fail(EINVAL);
	}
}

/* Moves id's QP to state with rdma_init_qp_attr's answer; resp_res and
 * init_depth (when >= 0) override the read-atomic depths, as librdmacm's
 * ucma_modify_qp_rtr/rts do. 0 or errno. */
int rc_qp_to(struct rc_id *id, enum ibv_qp_state state, int resp_res, int init_depth)
{
	struct ibv_qp_attr qa;
	int mask, err;

	memset(&qa, 0, sizeof(qa));
	qa.qp_state = state;
	if (rdma_init_qp_attr(&id->id, &qa, &mask))
		return errno;
	if (state == IBV_QPS_RTR && resp_res >= 0)
		qa.max_dest_rd_atomic = (uint8_t)resp_res;
	if (state == IBV_QPS_RTS && init_depth >= 0)
		qa.max_rd_atomic = (uint8_t)init_depth;
	if ((err = ibv_modify_qp(id->id.qp, &qa, mask))) {
		rc_log("cm: modify QP %u to state %d: %s", id->id.qp->qp_num, state, strerror(err));
		return errno = err;
	}
	return 0;
}

int rc_qp_err(struct rc_id *id)
{
	struct ibv_qp_attr qa = {.qp_state = IBV_QPS_ERR};

	if (!id->id.qp)
		return 0;
	return ibv_modify_qp(id->id.qp, &qa, IBV_QP_STATE);
}

int rc_conn_resp(struct rc_id *id, const struct rc_record *r)
{
	struct rc_sub *s = NULL;
	int err;

	/* The depths are the attr's, which the REP set from this side's view
	 * (the peer's initiator depth is our responder resources, and the
	 * other way round), as librdmacm takes the kernel's with RDMA_MAX_*;
	 * the record says the same. */
	(void)r;
	if ((err = rc_id_sub(id, &s)) || (err = rc_qp_to(id, IBV_QPS_RTR, -1, -1)) ||
	    (err = rc_qp_to(id, IBV_QPS_RTS, -1, -1)) || (err = rc_ctl(s->dev, s->handle, "establish"))) {
		rc_qp_err(id);
		if (s)
			rc_ctl(s->dev, s->handle, "reject");
		return err;
	}
	return 0;
}

/* The private data's words for a command, "" if none. */
static int private_words(const void *pd, uint8_t len, size_t max, char *out, size_t outlen)
{
	if (!len || !pd) {
		*out = 0;
		return 0;
	}
	if (len > max || outlen < 2 * (size_t)len + 16)
		return EINVAL;
	strcpy(out, " " RDMAFS_KEQ(PRIVATE_DATA));
	rc_hex(pd, len, out + strlen(out));
	return 0;
}

/* librdmacm's ucma_valid_param: a TCP id needs a QP or conn_param, and
 * the depths fit the device unless they ask for its maximum. */
static int valid_param(struct rc_id *id, const struct rdma_conn_param *p, struct ibv_device_attr *da)
{
	if (id->id.ps != RDMA_PS_TCP)
		return 0;
	if (!id->id.qp && !p)
		return EINVAL;
	if (!p)
		return 0;
	if (p->responder_resources != RDMA_MAX_RESP_RES && p->responder_resources > da->max_qp_rd_atom)
		return EINVAL;
	if (p->initiator_depth != RDMA_MAX_INIT_DEPTH && p->initiator_depth > da->max_qp_init_rd_atom)
		return EINVAL;
	return 0;
}

/* The depths to ask for: the program's, or for RDMA_MAX_* (and no
 * conn_param) the device's maximum at connect and, at accept, the
 * request's asked depths no deeper than the device's (cma.c). */
static void depths(struct rc_id *id, const struct rdma_conn_param *p, struct ibv_device_attr *da, bool accept)
{
	int mr = da->max_qp_rd_atom, mi = da->max_qp_init_rd_atom;

	if (p && p->responder_resources != RDMA_MAX_RESP_RES)
		id->responder_resources = p->responder_resources;
	else
		id->responder_resources = (uint8_t)(accept && id->responder_resources < mr ? id->responder_resources : mr);
	if (p && p->initiator_depth != RDMA_MAX_INIT_DEPTH)
		id->initiator_depth = p->initiator_depth;
	else
		id->initiator_depth = (uint8_t)(accept && id->initiator_depth < mi ? id->initiator_depth : mi);
}

int rdma_connect(struct rdma_cm_id *cid, struct rdma_conn_param *p)
{
	struct rc_id *id = to_rid(cid);
	char pdw[600];
	struct rc_sub *s;
	int err;
	bool ud = cid->qp_type == IBV_QPT_UD;

	if ((err = rc_id_sub(id, &s)))
		return fail(err);
	if ((err = valid_param(id, p, &s->dev->attr)))
		return fail(err);
	if ((err = private_words(p ? p->private_data : NULL, p ? p->private_data_len : 0,
				 ud ? RC_SIDR_REQ_PRIVATE : RC_REQ_PRIVATE, pdw, sizeof(pdw))))
		return fail(err);
	depths(id, p, &s->dev->attr, false);
	if (ud) {
		err = rc_ctl(s->dev, s->handle, "connect " RDMAFS_KEQ(QP_NUM) "%u " RDMAFS_KEQ(PSN) "%u%s",
			     cid->qp ? cid->qp->qp_num : (p ? p->qp_num : 0), id->psn, pdw);
	} else {
		uint32_t qpn = cid->qp ? cid->qp->qp_num : p->qp_num;
		int srq = cid->qp ? cid->qp->srq != NULL : (p ? p->srq : 0);
		err = rc_ctl(s->dev, s->handle,
			     "connect " RDMAFS_KEQ(QP_NUM) "%u " RDMAFS_KEQ(PSN) "%u%s "
			     RDMAFS_KEQ(RESPONDER_RESOURCES) "%u " RDMAFS_KEQ(INITIATOR_DEPTH) "%u "
			     RDMAFS_KEQ(FLOW_CONTROL) "%u " RDMAFS_KEQ(RETRY_COUNT) "%u "
			     RDMAFS_KEQ(RNR_RETRY_COUNT) "%u " RDMAFS_KEQ(SRQ) "%d",
			     qpn, id->psn, pdw, id->responder_resources, id->initiator_depth,
			     p ? !!p->flow_control : 0, p ? (p->retry_count > 7 ? 7 : p->retry_count) : 7,
			     p ? (p->rnr_retry_count > 7 ? 7 : p->rnr_retry_count) : 7, srq);
	}
	if (err)
		return fail(err);
	if ((err = rc_id_complete(id, RDMA_CM_EVENT_ESTABLISHED)))
		return fail(err);
	return 0;
}

int rdma_accept(struct rdma_cm_id *cid, struct rdma_conn_param *p)
{
	struct rc_id *id = to_rid(cid);
	char pdw[600];
	struct rc_sub *s;
	int err;
	bool ud = cid->qp_type == IBV_QPT_UD;

	if ((err = rc_id_sub(id, &s)))
		return fail(err);
	if ((err = valid_param(id, p, &s->dev->attr)))
		return fail(err);
	if ((err = private_words(p ? p->private_data : NULL, p ? p->private_data_len : 0,
				 ud ? RC_SIDR_REP_PRIVATE : RC_REP_PRIVATE, pdw, sizeof(pdw))))
		return fail(err);
	depths(id, p, &s->dev->attr, true);
	if (ud) {
		uint32_t qpn = cid->qp ? cid->qp->qp_num : (p ? p->qp_num : 0);
		err = rc_ctl(s->dev, s->handle,
			     "accept " RDMAFS_KEQ(QP_NUM) "%u " RDMAFS_KEQ(PSN) "%u%s " RDMAFS_KEQ(QKEY) "%u", qpn,
			     id->psn, pdw, RDMA_UDP_QKEY);
		return err ? fail(err) : 0;
	}
	if (cid->qp) {
		if ((err = rc_qp_to(id, IBV_QPS_RTR, id->responder_resources, -1)) ||
		    (err = rc_qp_to(id, IBV_QPS_RTS, -1, id->initiator_depth))) {
			rc_qp_err(id);
			return fail(err);
		}
	}
	uint32_t qpn = cid->qp ? cid->qp->qp_num : p->qp_num;
	int srq = cid->qp ? cid->qp->srq != NULL : (p ? p->srq : 0);
	err = rc_ctl(s->dev, s->handle,
		     "accept " RDMAFS_KEQ(QP_NUM) "%u " RDMAFS_KEQ(PSN) "%u%s "
		     RDMAFS_KEQ(RESPONDER_RESOURCES) "%u " RDMAFS_KEQ(INITIATOR_DEPTH) "%u "
		     RDMAFS_KEQ(FLOW_CONTROL) "%u " RDMAFS_KEQ(RNR_RETRY_COUNT) "%u " RDMAFS_KEQ(SRQ) "%d",
		     qpn, id->psn, pdw, id->responder_resources, id->initiator_depth, p ? !!p->flow_control : 0,
		     p ? (p->rnr_retry_count > 7 ? 7 : p->rnr_retry_count) : 7, srq);
	if (err) {
		rc_qp_err(id);
		return fail(err);
	}
	if ((err = rc_id_complete(id, RDMA_CM_EVENT_ESTABLISHED)))
		return fail(err);
	return 0;
}

int rdma_reject(struct rdma_cm_id *cid, const void *private_data, uint8_t len)
{
	struct rc_id *id = to_rid(cid);
	char pdw[600];
	struct rc_sub *s;
	int err;

	if ((err = rc_id_sub(id, &s)))
		return fail(err);
	if ((err = private_words(private_data, len, RC_REJ_PRIVATE, pdw, sizeof(pdw))))
		return fail(err);
	rc_qp_err(id);
	if ((err = rc_ctl(s->dev, s->handle, "reject%s", pdw)))
		return fail(err);
	return 0;
}

int rdma_disconnect(struct rdma_cm_id *cid)
{
	struct rc_id *id = to_rid(cid);
	struct rc_sub *s;
	int err;

	if ((err = rc_id_sub(id, &s)))
		return fail(err);
	if ((err = rc_qp_err(id)))
		return fail(err);
	if ((err = rc_ctl(s->dev, s->handle, "disconnect")))
		return fail(err);
	if ((err = rc_id_complete(id, RDMA_CM_EVENT_DISCONNECTED)))
		return fail(err);
	return 0;
}

int rdma_notify(struct rdma_cm_id *cid, enum ibv_event_type event)
{
	struct rc_id *id = to_rid(cid);
	struct rc_sub *s;
	int err;

	if ((err = rc_id_sub(id, &s)))
		return fail(err);
	if (event != IBV_EVENT_COMM_EST)
		return fail(EINVAL);
	if ((err = rc_ctl(s->dev, s->handle, "notify")))
		return fail(err);
	return 0;
}

int rdma_establish(struct rdma_cm_id *cid)
{
	struct rc_id *id = to_rid(cid);
	struct rc_sub *s;
	int err;

	if (cid->qp)
		return fail(EINVAL); /* librdmacm moves its own QPs */
	if ((err = rc_id_sub(id, &s)))
		return fail(err);
	/* as librdmacm: the RTU goes out and no event follows */
	if ((err = rc_ctl(s->dev, s->handle, "establish")))
		return fail(err);
	return 0;
}
