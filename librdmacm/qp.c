/* QPs and SRQs made through an id, as librdmacm makes them: on the id's
 * device, with the device's default PD when none is given, with CQs (and
 * completion channels) of the id's own when the attributes name none, and
 * moved to INIT at once (a UD QP on to RTS with RDMA_UDP_QKEY: it needs
 * no peer). */
#include <errno.h>
#include <string.h>

#include "rdmacm.h"

static int fail(int err)
{
	errno = err;
	return -1;
}

static void destroy_cqs(struct rdma_cm_id *id)
{
	if (id->recv_cq) {
		ibv_destroy_cq(id->recv_cq);
		if (id->send_cq == id->recv_cq)
			id->send_cq = NULL;
		id->recv_cq = NULL;
	}
	if (id->recv_cq_channel) {
		ibv_destroy_comp_channel(id->recv_cq_channel);
		if (id->send_cq_channel == id->recv_cq_channel)
			id->send_cq_channel = NULL;
		id->recv_cq_channel = NULL;
	}
	if (id->send_cq) {
		ibv_destroy_cq(id->send_cq);
		id->send_cq = NULL;
	}
	if (id->send_cq_channel) {
		ibv_destroy_comp_channel(id->send_cq_channel);
		id->send_cq_channel = NULL;
	}
}

/* librdmacm's ucma_create_cqs: a CQ with a channel for each direction the
 * attributes leave open. */
static int create_cqs(struct rdma_cm_id *id, uint32_t send_size, uint32_t recv_size)
{
	if (recv_size) {
		id->recv_cq_channel = ibv_create_comp_channel(id->verbs);
		if (!id->recv_cq_channel)
			goto err;
		id->recv_cq = ibv_create_cq(id->verbs, (int)recv_size, id, id->recv_cq_channel, 0);
		if (!id->recv_cq)
			goto err;
	}
	if (send_size) {
		id->send_cq_channel = ibv_create_comp_channel(id->verbs);
		if (!id->send_cq_channel)
			goto err;
		id->send_cq = ibv_create_cq(id->verbs, (int)send_size, id, id->send_cq_channel, 0);
		if (!id->send_cq)
			goto err;
	}
	return 0;
err:
	{
		int err = errno ? errno : ENOMEM;
		destroy_cqs(id);
		return err;
	}
}

static int modify(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask)
{
	int err = ibv_modify_qp(qp, a, mask);

	return err ? (errno = err) : 0;
}

/* INIT (and for UD on to RTS) without the daemon: what rdma_init_qp_attr
 * says for INIT needs no attr. */
static int init_qp(struct rc_id *id, struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	int err;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.pkey_index = 0;
	a.port_num = id->id.port_num ? id->id.port_num : 1;
	if (id->id.qp_type != IBV_QPT_UD) {
		a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
		return modify(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
	}
	a.qkey = RDMA_UDP_QKEY;
	if ((err = modify(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY)))
		return err;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	if ((err = modify(qp, &a, IBV_QP_STATE)))
		return err;
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 0;
	return modify(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
}

int rdma_create_qp_ex(struct rdma_cm_id *cid, struct ibv_qp_init_attr_ex *attr)
{
	struct rc_id *id = to_rid(cid);
	struct ibv_qp *qp;
	bool made_cqs = false;
	int err;

	if (!attr || cid->qp)
		return fail(EINVAL);
	if (!cid->verbs)
		return fail(EINVAL); /* no device yet: bind or resolve first */
	if (!(attr->comp_mask & IBV_QP_INIT_ATTR_PD) || !attr->pd) {
		struct rc_device *d = id->nsubs ? id->subs[0].dev : NULL;
		attr->comp_mask |= IBV_QP_INIT_ATTR_PD;
		attr->pd = cid->pd ? cid->pd : d ? d->pd : NULL;
	}
	if (!attr->pd || attr->pd->context != cid->verbs)
		return fail(EINVAL);
	if ((cid->recv_cq && attr->recv_cq && cid->recv_cq != attr->recv_cq) ||
	    (cid->send_cq && attr->send_cq && cid->send_cq != attr->send_cq))
		return fail(EINVAL);
	if (!attr->send_cq || !attr->recv_cq) {
		uint32_t ss = attr->send_cq || cid->send_cq ? 0 : (attr->cap.max_send_wr ? attr->cap.max_send_wr : 1);
		uint32_t rs = attr->recv_cq || cid->recv_cq ? 0 : (attr->cap.max_recv_wr ? attr->cap.max_recv_wr : 1);
		if ((ss || rs) && (err = create_cqs(cid, ss, rs)))
			return fail(err);
		made_cqs = ss || rs;
		if (!attr->send_cq)
			attr->send_cq = cid->send_cq;
		if (!attr->recv_cq)
			attr->recv_cq = cid->recv_cq;
	}
	if (cid->srq && !attr->srq)
		attr->srq = cid->srq;
	qp = ibv_create_qp_ex(cid->verbs, attr);
	if (!qp) {
		err = errno ? errno : ENOMEM;
		goto err;
	}
	if ((err = init_qp(id, qp))) {
		ibv_destroy_qp(qp);
		goto err;
	}
	cid->pd = qp->pd;
	cid->qp = qp;
	return 0;
err:
	if (made_cqs)
		destroy_cqs(cid);
	return fail(err);
}

int rdma_create_qp(struct rdma_cm_id *cid, struct ibv_pd *pd, struct ibv_qp_init_attr *qp_init_attr)
{
	struct rc_id *id = to_rid(cid);
	struct ibv_qp_init_attr_ex ax;
	int ret;

	if (!qp_init_attr)
		return fail(EINVAL);
	memset(&ax, 0, sizeof(ax));
	memcpy(&ax, qp_init_attr, sizeof(*qp_init_attr));
	ax.comp_mask = IBV_QP_INIT_ATTR_PD;
	ax.pd = pd ? pd : cid->pd ? cid->pd : id->nsubs ? id->subs[0].dev->pd : NULL;
	ret = rdma_create_qp_ex(cid, &ax);
	memcpy(qp_init_attr, &ax, sizeof(*qp_init_attr));
	return ret;
}

void rdma_destroy_qp(struct rdma_cm_id *cid)
{
	if (cid->qp)
		ibv_destroy_qp(cid->qp);
	cid->qp = NULL;
	destroy_cqs(cid);
}

int rdma_create_srq_ex(struct rdma_cm_id *cid, struct ibv_srq_init_attr_ex *attr)
{
	struct rc_id *id = to_rid(cid);
	struct ibv_srq *srq;
	int err;

	if (!attr || !cid->verbs || cid->srq)
		return fail(EINVAL);
	if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE)) {
		attr->comp_mask |= IBV_SRQ_INIT_ATTR_TYPE;
		attr->srq_type = cid->qp_type == IBV_QPT_XRC_RECV ? IBV_SRQT_XRC : IBV_SRQT_BASIC;
	}
	if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) || !attr->pd) {
		attr->comp_mask |= IBV_SRQ_INIT_ATTR_PD;
		attr->pd = cid->pd ? cid->pd : id->nsubs ? id->subs[0].dev->pd : NULL;
	}
	if (!attr->pd)
		return fail(EINVAL);
	if (attr->srq_type == IBV_SRQT_XRC && !(attr->comp_mask & IBV_SRQ_INIT_ATTR_CQ)) {
		if (!cid->recv_cq && (err = create_cqs(cid, 0, attr->attr.max_wr)))
			return fail(err);
		attr->comp_mask |= IBV_SRQ_INIT_ATTR_CQ;
		attr->cq = cid->recv_cq;
	}
	srq = ibv_create_srq_ex(cid->verbs, attr);
	if (!srq)
		return -1;
	cid->pd = attr->pd;
	cid->srq = srq;
	return 0;
}

int rdma_create_srq(struct rdma_cm_id *cid, struct ibv_pd *pd, struct ibv_srq_init_attr *attr)
{
	struct ibv_srq_init_attr_ex ax;
	int ret;

	if (!attr)
		return fail(EINVAL);
	memset(&ax, 0, sizeof(ax));
	memcpy(&ax, attr, sizeof(*attr));
	ax.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD;
	ax.srq_type = cid->qp_type == IBV_QPT_XRC_RECV ? IBV_SRQT_XRC : IBV_SRQT_BASIC;
	ax.pd = pd;
	if (!ax.pd) {
		struct rc_id *id = to_rid(cid);
		ax.pd = cid->pd ? cid->pd : id->nsubs ? id->subs[0].dev->pd : NULL;
	}
	ret = rdma_create_srq_ex(cid, &ax);
	memcpy(attr, &ax, sizeof(*attr));
	return ret;
}

void rdma_destroy_srq(struct rdma_cm_id *cid)
{
	if (cid->srq)
		ibv_destroy_srq(cid->srq);
	cid->srq = NULL;
	destroy_cqs(cid);
}
