/* Queue pairs: create, modify, query, destroy through qp/N's files; post
 * straight into the mapped qp/N/sq and qp/N/rq rings.
 *
 * A post checks each WR as libibverbs providers do (EINVAL for a bad WR,
 * ENOMEM for a full queue, *bad_wr the first one not posted), encodes it
 * into the next slot, and publishes the batch with one release store. A
 * doorbell follows only when the engine set NEED_WAKEUP: the device's futex
 * doorbell for sends, a one-byte write to the ring file for receives. The
 * daemon checks every WQE again: nothing here is trusted. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>

#include "rdmafs.h"
#include "rdmafs-text.h" /* the words and rules of qp/, generated */

#define NELEMS(a) (sizeof(a) / sizeof((a)[0]))

/* word reports whether the value at s is w, ended by the end of its token. */
static bool word(const char *s, const char *w)
{
	size_t n = strlen(w);

	return !strncmp(s, w, n) && (s[n] == '\n' || s[n] == 0 || s[n] == ' ' || s[n] == ',');
}

/* The index of the value at s in a table of names, or -1. */
static int name_index(const char *s, const char *const *names, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (names[i] && word(s, names[i]))
			return i;
	return -1;
}

/* An access-flag list as attr prints it: names joined by commas, or a
 * number (0 for none). */
static int access_of(const char *s)
{
	int acc = 0;
	char *end;

	acc = strtol(s, &end, 0);
	if (end != s && (*end == '\n' || *end == 0))
		return acc;
	acc = 0;
	for (;;) {
		for (size_t i = 0; i < NELEMS(rdmafs_access_names); i++)
			if (word(s, rdmafs_access_names[i].name))
				acc |= rdmafs_access_names[i].bit;
		s += strcspn(s, ",\n ");
		if (*s != ',')
			return acc;
		s++;
	}
}

static enum ibv_mtu mtu_of(uint64_t v)
{
	if (v >= 1 && v <= 5)
		return v;
	switch (v) {
	case 256: return IBV_MTU_256;
	case 512: return IBV_MTU_512;
	case 1024: return IBV_MTU_1024;
	case 2048: return IBV_MTU_2048;
	default: return IBV_MTU_4096;
	}
}

static int read_attr(struct rf_context *ctx, uint32_t qpn, char *text, size_t len)
{
	char path[64];

	snprintf(path, sizeof(path), "qp/%u/attr", qpn);
	return rf_read_file(ctx, path, text, len);
}

static uint32_t u32kv(const char *text, const char *key)
{
	uint64_t v = 0;

	rf_kv_u64(text, key, &v);
	return v;
}

/* The qp/new name of a QP type rdmafs implements; NULL for another. */
static const char *type_name(enum ibv_qp_type t)
{
	return (unsigned)t < NELEMS(rdmafs_qp_type_names) ? rdmafs_qp_type_names[t] : NULL;
}

/* An XRC_RECV QP: made with its domain alone, no rings, no PD or CQs. */
static struct ibv_qp *create_xrc_recv(struct ibv_context *context, struct ibv_qp_init_attr_ex *init)
{
	char req[96];
	struct ibv_qp *q;

	if (!(init->comp_mask & IBV_QP_INIT_ATTR_XRCD) || !init->xrcd || init->xrcd->context != context) {
		errno = EINVAL;
		return NULL;
	}
	snprintf(req, sizeof(req), RDMAFS_KEQ(QP_TYPE) "xrc_recv " RDMAFS_KEQ(XRCD) "%u",
		 to_rxrcd(init->xrcd)->handle);
	q = rf_xrc_recv_qp(to_rctx(context), req, init->qp_context);
	if (q)
		memset(&init->cap, 0, sizeof(init->cap));
	return q;
}

struct ibv_qp *rf_create_qp_ex(struct ibv_context *context, struct ibv_qp_init_attr_ex *init)
{
	struct rf_context *ctx = to_rctx(context);
	struct rf_qp *qp;
	char req[512], text[4096], path[64];
	int err;

	if (init->qp_type == IBV_QPT_XRC_RECV &&
	    !(init->comp_mask & ~(IBV_QP_INIT_ATTR_XRCD | IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS)) &&
	    !((init->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) && init->create_flags))
		return create_xrc_recv(context, init);
	/* Creation flags, TSO headers, RSS, source QPNs: absent; a mask
	 * that names them with nothing asked for is fine. */
	if ((init->comp_mask & ~(IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS |
				 IBV_QP_INIT_ATTR_CREATE_FLAGS | IBV_QP_INIT_ATTR_MAX_TSO_HEADER)) ||
	    ((init->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) && init->create_flags) ||
	    ((init->comp_mask & IBV_QP_INIT_ATTR_MAX_TSO_HEADER) && init->max_tso_header)) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	if (!(init->comp_mask & IBV_QP_INIT_ATTR_PD) || !init->pd) {
		errno = EINVAL;
		return NULL;
	}
	if (!type_name(init->qp_type) || init->qp_type == IBV_QPT_XRC_RECV) {
		errno = init->qp_type == IBV_QPT_XRC_RECV ? EINVAL : EOPNOTSUPP;
		return NULL;
	}
	bool xrc = init->qp_type == IBV_QPT_XRC_SEND;
	if ((init->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) && (init->send_ops_flags & ~(uint64_t)RDMAFS_QP_EX_OPS)) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	/* Objects of another context are not this one's to use (their
	 * handles belong to its lease), as a kernel uverbs file refuses. */
	if (!init->send_cq || (!init->recv_cq && !xrc) || init->pd->context != context ||
	    init->send_cq->context != context || (init->recv_cq && init->recv_cq->context != context) ||
	    (init->srq && (xrc || init->srq->context != context))) {
		errno = EINVAL;
		return NULL;
	}
	qp = calloc(1, sizeof(*qp));
	if (!qp) {
		errno = ENOMEM;
		return NULL;
	}
	int n = snprintf(req, sizeof(req),
			 RDMAFS_KEY_PD "=%u " RDMAFS_KEY_QP_TYPE "=%s " RDMAFS_KEY_SEND_CQ "=%u " RDMAFS_KEY_MAX_SEND_WR
			 "=%u " RDMAFS_KEY_MAX_SEND_SGE "=%u " RDMAFS_KEY_MAX_INLINE_DATA "=%u",
			 to_rpd(init->pd)->handle, type_name(init->qp_type), to_rcq(init->send_cq)->handle,
			 init->cap.max_send_wr, init->cap.max_send_sge, init->cap.max_inline_data);
	if (init->recv_cq)
		n += snprintf(req + n, sizeof(req) - n, " " RDMAFS_KEY_RECV_CQ "=%u", to_rcq(init->recv_cq)->handle);
	if (init->srq)
		n += snprintf(req + n, sizeof(req) - n, " " RDMAFS_KEY_SRQ "=%u", to_rsrq(init->srq)->handle);
	else if (!xrc)
		n += snprintf(req + n, sizeof(req) - n, " " RDMAFS_KEY_MAX_RECV_WR "=%u " RDMAFS_KEY_MAX_RECV_SGE "=%u",
			      init->cap.max_recv_wr,
			      init->cap.max_recv_sge);
	if (init->sq_sig_all)
		snprintf(req + n, sizeof(req) - n, " " RDMAFS_KEY_SQ_SIG_ALL "=1");
	if ((err = rf_transact(ctx, "qp", req, &qp->qpn)))
		goto fail_free;
	if ((err = read_attr(ctx, qp->qpn, text, sizeof(text))))
		goto fail_destroy;
	qp->cap.max_send_wr = u32kv(text, RDMAFS_KEY_MAX_SEND_WR);
	qp->cap.max_recv_wr = init->srq || xrc ? 0 : u32kv(text, RDMAFS_KEY_MAX_RECV_WR);
	qp->cap.max_send_sge = u32kv(text, RDMAFS_KEY_MAX_SEND_SGE);
	qp->cap.max_recv_sge = init->srq || xrc ? 0 : u32kv(text, RDMAFS_KEY_MAX_RECV_SGE);
	qp->cap.max_inline_data = u32kv(text, RDMAFS_KEY_MAX_INLINE_DATA);
	snprintf(path, sizeof(path), "qp/%u/sq", qp->qpn);
	if ((err = rf_ring_map(ctx->mount_fd, path, RDMAFS_KIND_SQ, &qp->sq)))
		goto fail_destroy;
	qp->sq.head = rf_load_acq(qp->sq.prod);
	qp->rq.fd = -1;
	if (!init->srq && !xrc) {
		snprintf(path, sizeof(path), "qp/%u/rq", qp->qpn);
		if ((err = rf_ring_map(ctx->mount_fd, path, RDMAFS_KIND_RQ, &qp->rq)))
			goto fail_unmap;
		qp->rq.head = rf_load_acq(qp->rq.prod);
	}
	pthread_spin_init(&qp->sq_lock, PTHREAD_PROCESS_PRIVATE);
	pthread_spin_init(&qp->rq_lock, PTHREAD_PROCESS_PRIVATE);
	qp->sq_sig_all = init->sq_sig_all;

	struct ibv_qp *q = &qp->qpx.qp_base;
	q->context = context;
	q->qp_context = init->qp_context;
	q->pd = init->pd;
	q->send_cq = init->send_cq;
	q->recv_cq = init->recv_cq;
	q->srq = init->srq;
	q->handle = qp->qpn;
	q->qp_num = qp->qpn;
	q->state = IBV_QPS_RESET;
	q->qp_type = init->qp_type;
	pthread_mutex_init(&q->mutex, NULL);
	pthread_cond_init(&q->cond, NULL);
	init->cap = qp->cap;
	rf_qp_ex_init(qp, (init->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) ? init->send_ops_flags : 0);
	rf_track(ctx, RF_QP, qp->qpn, qp);
	return q;
fail_unmap:
	rf_ring_unmap(&qp->sq);
fail_destroy:
	rf_destroy(ctx, "qp", qp->qpn);
fail_free:
	free(qp);
	errno = err;
	return NULL;
}

struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	struct ibv_qp_init_attr_ex ex;
	struct ibv_qp *qp;

	memset(&ex, 0, sizeof(ex));
	memcpy(&ex, attr, sizeof(*attr));
	ex.comp_mask = IBV_QP_INIT_ATTR_PD;
	ex.pd = pd;
	qp = rf_create_qp_ex(pd->context, &ex);
	if (qp)
		attr->cap = ex.cap;
	return qp;
}

struct ibv_qp_ex *ibv_qp_to_qp_ex(struct ibv_qp *qp)
{
	struct rf_qp *q = to_rqp(qp);

	return q->has_ex ? &q->qpx : NULL;
}

/* A NIC has a posted send on the wire microseconds after the doorbell, so
 * a program may post unsignaled datagrams and destroy the QP at once
 * (mckey's sender does: it never polls): on rxe they go out. The engine
 * takes posted WQEs a little later, and destroying discards what it has
 * not taken. So a UD or UC QP that can send waits, a bounded 100 ms, for
 * the engine to retire what was posted (it completes those on sending,
 * the consumer index then reaches what was published); RC's wait for
 * acknowledgements, which destroying rightly cuts short. */
static void drain_sends(struct ibv_qp *qp, struct rf_qp *q)
{
	if (qp->qp_type != IBV_QPT_UD && qp->qp_type != IBV_QPT_UC)
		return;
	if (qp->state != IBV_QPS_RTS && qp->state != IBV_QPS_SQD)
		return;
	pthread_spin_lock(&q->sq_lock);
	uint32_t head = q->sq.head;
	pthread_spin_unlock(&q->sq_lock);
	for (int i = 0; i < 2000 && rf_load_acq(q->sq.cons) != head; i++)
		usleep(50);
}

int ibv_destroy_qp(struct ibv_qp *qp)
{
	struct rf_qp *q = to_rqp(qp);
	struct rf_context *ctx = to_rctx(qp->context);
	int err;

	drain_sends(qp, q);
	if (qp->qp_type == IBV_QPT_XRC_RECV)
		err = rf_close_xrc_recv(ctx, q->qpn); /* other contexts may hold it */
	else
		err = rf_destroy(ctx, "qp", q->qpn);

	if (err)
		return err;
	/* The QP's completions still waiting in its CQs go with it, as mlx5
	 * and mlx4 clean them at destroy (__mlx5_cq_clean): a consumer may
	 * free what a destroyed QP's wr_ids point to and poll the CQ again
	 * (libfabric's RxM closes a connection's endpoint, then flushes the
	 * shared CQ, and reposted a receive on the freed endpoint for a
	 * completion left behind). Done once the daemon's destroy returned,
	 * the QP out of its tables. A receive completion taken from an SRQ
	 * stays: mlx5 would return its WQE to the SRQ, which is not the
	 * library's to do. */
	if (qp->send_cq)
		rf_cq_clean(qp->send_cq, q->qpn, qp->srq != NULL);
	if (qp->recv_cq && qp->recv_cq != qp->send_cq)
		rf_cq_clean(qp->recv_cq, q->qpn, qp->srq != NULL);
	rf_untrack(ctx, RF_QP, q->qpn);
	pthread_mutex_lock(&qp->mutex);
	while (qp->events_completed != q->async_delivered)
		pthread_cond_wait(&qp->cond, &qp->mutex);
	pthread_mutex_unlock(&qp->mutex);
	rf_ring_unmap(&q->sq);
	rf_ring_unmap(&q->rq);
	free(q->wr_sge); /* the ibv_wr_* builder's SGE list */
	free(q);
	return 0;
}

#define ADD(...) (n += snprintf(cmd + n, sizeof(cmd) - n, __VA_ARGS__))

/* The value of a single-key attribute (rdmafs_modify_keys) as the modify
 * command writes it. */
static unsigned int attr_value(const struct ibv_qp_attr *a, unsigned int bit)
{
	switch (bit) {
	case IBV_QP_STATE: return a->qp_state;
	case IBV_QP_CUR_STATE: return a->cur_qp_state;
	case IBV_QP_EN_SQD_ASYNC_NOTIFY: return a->en_sqd_async_notify ? 1 : 0;
	case IBV_QP_ACCESS_FLAGS: return a->qp_access_flags & RDMAFS_QP_ACCESS_FLAGS;
	case IBV_QP_PKEY_INDEX: return a->pkey_index;
	case IBV_QP_PORT: return a->port_num;
	case IBV_QP_QKEY: return a->qkey;
	case IBV_QP_PATH_MTU: return a->path_mtu;
	case IBV_QP_TIMEOUT: return a->timeout;
	case IBV_QP_RETRY_CNT: return a->retry_cnt;
	case IBV_QP_RNR_RETRY: return a->rnr_retry;
	case IBV_QP_RQ_PSN: return a->rq_psn;
	case IBV_QP_MAX_QP_RD_ATOMIC: return a->max_rd_atomic;
	case IBV_QP_MIN_RNR_TIMER: return a->min_rnr_timer;
	case IBV_QP_SQ_PSN: return a->sq_psn;
	case IBV_QP_MAX_DEST_RD_ATOMIC: return a->max_dest_rd_atomic;
	case IBV_QP_PATH_MIG_STATE: return a->path_mig_state;
	case IBV_QP_DEST_QPN: return a->dest_qp_num;
	}
	abort(); /* a bit qp/ learnt that this switch has not: a build-time slip */
}

int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask)
{
	struct rf_qp *q = to_rqp(qp);
	struct rf_context *ctx = to_rctx(qp->context);
	char cmd[1024], path[64], gid[64];
	int n = 0, err;

	if (!mask)
		return EINVAL;
	if (mask & RDMAFS_MODIFY_UNSUPPORTED)
		return EOPNOTSUPP;
	if (mask & ~RDMAFS_MODIFY_MASK)
		return EINVAL;
	ADD("modify");
	for (size_t i = 0; i < NELEMS(rdmafs_modify_keys); i++) {
		unsigned int bit = rdmafs_modify_keys[i].bit;
		struct ibv_ah_attr *ah = &a->ah_attr;

		if (!(mask & bit))
			continue;
		switch (bit) {
		case IBV_QP_AV:
			if (!ah->is_global && (ctx->port.roce || ah->dlid != ctx->port.lid))
				return ctx->port.roce ? EINVAL : EHOSTUNREACH;
			rf_dest_gid(ctx, ah, gid, sizeof(gid));
			ADD(" " RDMAFS_KEY_DGID "=%s " RDMAFS_KEY_SL "=%u", gid, ah->sl);
			if (ah->is_global)
				ADD(" " RDMAFS_KEY_SGID_INDEX "=%u " RDMAFS_KEY_HOP_LIMIT "=%u " RDMAFS_KEY_TRAFFIC_CLASS
				    "=%u " RDMAFS_KEY_FLOW_LABEL "=%u",
				    ah->grh.sgid_index, ah->grh.hop_limit, ah->grh.traffic_class,
				    rf_flow_label(ah->grh.flow_label));
			break;
		case IBV_QP_CAP:
			ADD(" " RDMAFS_KEY_MAX_SEND_WR "=%u " RDMAFS_KEY_MAX_RECV_WR "=%u " RDMAFS_KEY_MAX_SEND_SGE
			    "=%u " RDMAFS_KEY_MAX_RECV_SGE "=%u " RDMAFS_KEY_MAX_INLINE_DATA "=%u",
			    a->cap.max_send_wr, a->cap.max_recv_wr, a->cap.max_send_sge, a->cap.max_recv_sge,
			    a->cap.max_inline_data);
			break;
		default:
			ADD(" %s=%u", rdmafs_modify_keys[i].key, attr_value(a, bit));
		}
	}
	if ((size_t)n >= sizeof(cmd))
		return EINVAL;
	snprintf(path, sizeof(path), "qp/%u/ctl", q->qpn);
	if ((err = rf_command(ctx, path, cmd)))
		return err;
	if (mask & IBV_QP_STATE) {
		qp->state = a->qp_state;
		if (a->qp_state == IBV_QPS_RESET) {
			/* RESET empties the queues: start again at the daemon's indices */
			pthread_spin_lock(&q->sq_lock);
			q->sq.head = rf_load_acq(q->sq.prod);
			pthread_spin_unlock(&q->sq_lock);
			if (qp->send_cq)
				rf_cq_clean(qp->send_cq, q->qpn, false);
			if (qp->recv_cq && qp->recv_cq != qp->send_cq)
				rf_cq_clean(qp->recv_cq, q->qpn, false);
		}
	}
	if (mask & IBV_QP_MAX_QP_RD_ATOMIC)
		q->max_rd_atomic = a->max_rd_atomic;
	return 0;
}

int ibv_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask, struct ibv_qp_init_attr *init)
{
	struct rf_qp *q = to_rqp(qp);
	struct rf_context *ctx = to_rctx(qp->context);
	char text[4096];
	const char *s;
	int err;

	(void)mask; /* everything is reported, as providers do */
	if ((err = read_attr(ctx, q->qpn, text, sizeof(text))))
		return err;
	memset(a, 0, sizeof(*a));
	s = rf_kv(text, RDMAFS_KEY_QP_STATE);
	int st = s ? name_index(s, rdmafs_qp_state_names, NELEMS(rdmafs_qp_state_names)) : -1;
	a->qp_state = st >= 0 ? (enum ibv_qp_state)st : qp->state;
	a->cur_qp_state = a->qp_state;
	qp->state = a->qp_state;
	a->path_mtu = mtu_of(u32kv(text, RDMAFS_KEY_PATH_MTU));
	s = rf_kv(text, RDMAFS_KEY_PATH_MIG_STATE);
	int mig = s ? name_index(s, rdmafs_mig_state_names, NELEMS(rdmafs_mig_state_names)) : -1;
	a->path_mig_state = mig >= 0 ? (enum ibv_mig_state)mig : IBV_MIG_MIGRATED;
	a->qkey = u32kv(text, RDMAFS_KEY_QKEY);
	a->rq_psn = u32kv(text, RDMAFS_KEY_RQ_PSN);
	a->sq_psn = u32kv(text, RDMAFS_KEY_SQ_PSN);
	a->dest_qp_num = u32kv(text, RDMAFS_KEY_DEST_QP_NUM);
	s = rf_kv(text, RDMAFS_KEY_QP_ACCESS_FLAGS);
	a->qp_access_flags = s ? access_of(s) : 0;
	a->cap = q->cap;
	s = rf_kv(text, RDMAFS_KEY_DGID);
	if (s && !rf_parse_gid(s, &a->ah_attr.grh.dgid)) {
		static const uint8_t zero[16];
		a->ah_attr.is_global = memcmp(a->ah_attr.grh.dgid.raw, zero, 16) != 0;
	}
	a->ah_attr.grh.sgid_index = u32kv(text, RDMAFS_KEY_SGID_INDEX);
	a->ah_attr.grh.hop_limit = u32kv(text, RDMAFS_KEY_HOP_LIMIT);
	a->ah_attr.grh.traffic_class = u32kv(text, RDMAFS_KEY_TRAFFIC_CLASS);
	a->ah_attr.grh.flow_label = u32kv(text, RDMAFS_KEY_FLOW_LABEL);
	a->ah_attr.sl = u32kv(text, RDMAFS_KEY_SL);
	a->ah_attr.port_num = u32kv(text, RDMAFS_KEY_PORT_NUM);
	if (!ctx->port.roce && a->ah_attr.is_global &&
	    !memcmp(a->ah_attr.grh.dgid.raw, ctx->port.gid.raw, 16))
		a->ah_attr.dlid = ctx->port.lid;
	a->pkey_index = u32kv(text, RDMAFS_KEY_PKEY_INDEX);
	a->en_sqd_async_notify = u32kv(text, RDMAFS_KEY_EN_SQD_ASYNC_NOTIFY);
	a->sq_draining = 0;
	a->max_rd_atomic = u32kv(text, RDMAFS_KEY_MAX_RD_ATOMIC);
	a->max_dest_rd_atomic = u32kv(text, RDMAFS_KEY_MAX_DEST_RD_ATOMIC);
	a->min_rnr_timer = u32kv(text, RDMAFS_KEY_MIN_RNR_TIMER);
	a->port_num = u32kv(text, RDMAFS_KEY_PORT_NUM);
	a->timeout = u32kv(text, RDMAFS_KEY_TIMEOUT);
	a->retry_cnt = u32kv(text, RDMAFS_KEY_RETRY_CNT);
	a->rnr_retry = u32kv(text, RDMAFS_KEY_RNR_RETRY);
	if (init) {
		memset(init, 0, sizeof(*init));
		init->qp_context = qp->qp_context;
		init->send_cq = qp->send_cq;
		init->recv_cq = qp->recv_cq;
		init->srq = qp->srq;
		init->cap = q->cap;
		init->qp_type = qp->qp_type;
		init->sq_sig_all = q->sq_sig_all;
	}
	return 0;
}

int ibv_query_qp_data_in_order(struct ibv_qp *qp, enum ibv_wr_opcode op, uint32_t flags)
{
	(void)qp, (void)op;
	/* The engine writes a message's bytes in PSN order, one packet after
	 * the other: data is written in order. */
	return flags ? 0 : 1;
}

/* One send WQE into slot s; 0 or an errno for a WR that cannot be posted. */
int rf_encode_send(struct rf_qp *q, uint8_t *s, const struct ibv_send_wr *wr)
{
	uint32_t flags = wr->send_flags & RDMAFS_SEND_FLAGS;
	uint32_t imm = 0, rkey = 0, ah = 0, rqpn = 0, rqkey = 0;
	uint64_t raddr = 0, cadd = 0, swap = 0;
	enum ibv_qp_type t = q->qpx.qp_base.qp_type;
	size_t room = q->sq.slot_size - RDMAFS_SEND_HEADER_SIZE;
	uint8_t *body = s + RDMAFS_SEND_HEADER_SIZE;
	int nsge = 0, ilen = 0;
	uint8_t aw[8];
	bool atomic_write = false;

	/* Which QP types may post which opcode is qp/'s table (OpInfo),
	 * generated into rdmafs-text.h: the daemon applies the same one. */
	if (wr->num_sge < 0 || (unsigned)wr->opcode >= NELEMS(rdmafs_wr_qp_types) ||
	    !(rdmafs_wr_qp_types[wr->opcode] & (1u << t)))
		return EINVAL;
	switch (wr->opcode) {
	case IBV_WR_SEND:
		break;
	case IBV_WR_SEND_WITH_IMM:
		imm = be32toh(wr->imm_data);
		break;
	case IBV_WR_RDMA_WRITE_WITH_IMM:
		imm = be32toh(wr->imm_data);
		/* fall through */
	case IBV_WR_RDMA_WRITE:
		raddr = wr->wr.rdma.remote_addr;
		rkey = wr->wr.rdma.rkey;
		break;
	case IBV_WR_RDMA_READ:
		raddr = wr->wr.rdma.remote_addr;
		rkey = wr->wr.rdma.rkey;
		break;
	case IBV_WR_ATOMIC_CMP_AND_SWP:
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
		raddr = wr->wr.atomic.remote_addr;
		rkey = wr->wr.atomic.rkey;
		cadd = wr->wr.atomic.compare_add;
		swap = wr->wr.atomic.swap;
		break;
	case IBV_WR_ATOMIC_WRITE:
		/* IBA 1.5's ATOMIC WRITE, RC only, to an aligned word named by
		 * wr.rdma (as rxe takes it). ibv_send_wr has no field for its 8
		 * bytes: they are those of its one 8-byte SGE, read now, as
		 * inline data is (the lkey is not used), and travel in the
		 * WQE's compare_add (ring/doc.go). ibv_wr_atomic_write comes
		 * here with its bytes as that SGE. */
		if (wr->num_sge != 1 || wr->sg_list[0].length != 8 ||
		    (wr->wr.rdma.remote_addr & 7))
			return EINVAL;
		raddr = wr->wr.rdma.remote_addr;
		rkey = wr->wr.rdma.rkey;
		memcpy(aw, (const void *)(uintptr_t)wr->sg_list[0].addr, sizeof(aw));
		atomic_write = true;
		flags &= ~IBV_SEND_INLINE;
		break;
	case IBV_WR_SEND_WITH_INV:
		imm = wr->invalidate_rkey;
		break;
	case IBV_WR_LOCAL_INV:
		imm = wr->invalidate_rkey;
		break;
	case IBV_WR_BIND_MW: {
		const struct ibv_mw_bind_info *bi = &wr->bind_mw.bind_info;
		if (!wr->bind_mw.mw)
			return EINVAL;
		imm = to_rmw(wr->bind_mw.mw)->handle;
		rkey = wr->bind_mw.rkey;
		raddr = bi->addr;
		cadd = bi->length;
		swap = (uint64_t)(bi->mr ? bi->mr->lkey : 0) | (uint64_t)(bi->mw_access_flags & RDMAFS_MW_ACCESS_FLAGS) << 32;
		break;
	}
	default:
		return EINVAL;
	}
	if (t == IBV_QPT_UD) {
		if (!wr->wr.ud.ah)
			return EINVAL;
		ah = to_rah(wr->wr.ud.ah)->handle;
		rqpn = wr->wr.ud.remote_qpn;
		rqkey = wr->wr.ud.remote_qkey;
	} else if (t == IBV_QPT_XRC_SEND) {
		rqpn = wr->qp_type.xrc.remote_srqn; /* the WQE's remote_qpn field carries it */
	}
	if (atomic_write) {
		/* no SGEs, no inline data: the bytes are in the header */
	} else if (flags & IBV_SEND_INLINE) {
		size_t total = 0;
		for (int i = 0; i < wr->num_sge; i++)
			total += wr->sg_list[i].length;
		if (total > q->cap.max_inline_data || total > room || total > RDMAFS_MAX_INLINE_LEN)
			return EINVAL;
		for (int i = 0; i < wr->num_sge; i++) {
			memcpy(body + ilen, (void *)(uintptr_t)wr->sg_list[i].addr, wr->sg_list[i].length);
			ilen += wr->sg_list[i].length;
		}
	} else {
		if ((uint32_t)wr->num_sge > q->cap.max_send_sge || (size_t)wr->num_sge * RDMAFS_SGE_SIZE > room)
			return EINVAL;
		for (int i = 0; i < wr->num_sge; i++) {
			uint8_t *e = body + i * RDMAFS_SGE_SIZE;
			rf_put64(e, RDMAFS_SGE_OFF_ADDR, wr->sg_list[i].addr);
			rf_put32(e, RDMAFS_SGE_OFF_LENGTH, wr->sg_list[i].length);
			rf_put32(e, RDMAFS_SGE_OFF_L_KEY, wr->sg_list[i].lkey);
		}
		nsge = wr->num_sge;
	}
	rf_put64(s, RDMAFS_SEND_OFF_WRID, wr->wr_id);
	rf_put32(s, RDMAFS_SEND_OFF_FLAGS, flags);
	s[RDMAFS_SEND_OFF_OPCODE] = wr->opcode;
	s[RDMAFS_SEND_OFF_NUM_SGE] = nsge;
	rf_put16(s, RDMAFS_SEND_OFF_INLINE_LEN, ilen);
	rf_put32(s, RDMAFS_SEND_OFF_IMM, imm);
	rf_put32(s, RDMAFS_SEND_OFF_R_KEY, rkey);
	rf_put64(s, RDMAFS_SEND_OFF_REMOTE_ADDR, raddr);
	rf_put64(s, RDMAFS_SEND_OFF_COMPARE_ADD, cadd);
	if (atomic_write)
		memcpy(s + RDMAFS_SEND_OFF_COMPARE_ADD, aw, sizeof(aw)); /* in memory order */
	rf_put64(s, RDMAFS_SEND_OFF_SWAP, swap);
	rf_put32(s, RDMAFS_SEND_OFF_AH, ah);
	rf_put32(s, RDMAFS_SEND_OFF_REMOTE_QPN, rqpn);
	rf_put32(s, RDMAFS_SEND_OFF_REMOTE_Q_KEY, rqkey);
	rf_put32(s, RDMAFS_SEND_OFF_RESERVED, 0);
	return 0;
}

int rf_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	struct rf_qp *q = to_rqp(qp);
	int err = 0, posted = 0;

	pthread_spin_lock(&q->sq_lock);
	if (qp->state < IBV_QPS_RTS || qp->qp_type == IBV_QPT_XRC_RECV) {
		err = EINVAL;
		goto out;
	}
	int64_t free_slots = rf_prod_free(&q->sq);
	if (free_slots < 0) {
		err = EIO;
		goto out;
	}
	for (; wr; wr = wr->next) {
		if (!free_slots) {
			err = ENOMEM;
			break;
		}
		if ((err = rf_encode_send(q, rf_slot(&q->sq, q->sq.head), wr)))
			break;
		q->sq.head++;
		free_slots--;
		posted++;
	}
out:
	if (posted) {
		rf_prod_publish(&q->sq);
		if (rf_need_wakeup(&q->sq))
			rf_ring_bell(to_rctx(qp->context), &q->sq, qp->qp_num);
	}
	pthread_spin_unlock(&q->sq_lock);
	if (err) {
		*bad = wr;
		errno = err;
	}
	return err;
}

int rf_encode_recv(struct rf_ring *r, const struct ibv_recv_wr *wr, uint32_t max_sge)
{
	uint8_t *s = rf_slot(r, r->head);
	uint8_t *body = s + RDMAFS_RECV_HEADER_SIZE;

	if (wr->num_sge < 0 || (uint32_t)wr->num_sge > max_sge ||
	    (size_t)wr->num_sge * RDMAFS_SGE_SIZE > r->slot_size - RDMAFS_RECV_HEADER_SIZE)
		return EINVAL;
	for (int i = 0; i < wr->num_sge; i++) {
		uint8_t *e = body + i * RDMAFS_SGE_SIZE;
		rf_put64(e, RDMAFS_SGE_OFF_ADDR, wr->sg_list[i].addr);
		rf_put32(e, RDMAFS_SGE_OFF_LENGTH, wr->sg_list[i].length);
		rf_put32(e, RDMAFS_SGE_OFF_L_KEY, wr->sg_list[i].lkey);
	}
	rf_put64(s, RDMAFS_RECV_OFF_WRID, wr->wr_id);
	rf_put32(s, RDMAFS_RECV_OFF_NUM_SGE, wr->num_sge);
	rf_put32(s, RDMAFS_RECV_OFF_RESERVED, 0);
	return 0;
}

/* Receive posts shared by QPs and SRQs: the queue's lock is held. */
static int post_recv_ring(struct rf_ring *r, uint32_t max_sge, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad,
			  bool kick)
{
	int err = 0, posted = 0;
	int64_t free_slots = rf_prod_free(r);

	if (free_slots < 0)
		err = EIO;
	for (; !err && wr; wr = wr->next) {
		if (!free_slots) {
			err = ENOMEM;
			break;
		}
		if ((err = rf_encode_recv(r, wr, max_sge)))
			break;
		r->head++;
		free_slots--;
		posted++;
	}
	if (posted) {
		rf_prod_publish(r);
		if (kick || rf_need_wakeup(r)) {
			static const char b = 1;
			if (write(r->fd, &b, 1) < 0)
				rf_log("receive doorbell: %m");
		}
	}
	if (err) {
		*bad = wr;
		errno = err;
	}
	return err;
}

int rf_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	struct rf_qp *q = to_rqp(qp);
	int err;

	if (qp->srq || qp->state == IBV_QPS_RESET || qp->qp_type == IBV_QPT_XRC_SEND || qp->qp_type == IBV_QPT_XRC_RECV) {
		*bad = wr;
		errno = EINVAL;
		return EINVAL;
	}
	pthread_spin_lock(&q->rq_lock);
	/* In ERR the WRs are flushed at once, by the engine: kick it. */
	err = post_recv_ring(&q->rq, q->cap.max_recv_sge, wr, bad, qp->state == IBV_QPS_ERR);
	pthread_spin_unlock(&q->rq_lock);
	return err;
}

int rf_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	struct rf_srq *s = to_rsrq(srq);
	int err;

	pthread_spin_lock(&s->lock);
	err = post_recv_ring(&s->ring, s->max_sge, wr, bad, false);
	pthread_spin_unlock(&s->lock);
	return err;
}

/* UD multicast: the daemon keeps the groups (attach_mcast/detach_mcast on
 * the QP's ctl) and checks the IBA's rules; the errno is its answer. */
static int mcast_command(struct ibv_qp *qp, const char *cmd, const union ibv_gid *gid, uint16_t lid)
{
	char text[128], path[64], g[INET6_ADDRSTRLEN];

	if (!qp || !gid)
		return EINVAL;
	if (!inet_ntop(AF_INET6, gid->raw, g, sizeof(g)))
		return EINVAL;
	snprintf(text, sizeof(text), "%s " RDMAFS_KEQ(GID) "%s " RDMAFS_KEQ(LID) "%u", cmd, g, lid);
	snprintf(path, sizeof(path), "qp/%u/ctl", to_rqp(qp)->qpn);
	return rf_command(to_rctx(qp->context), path, text);
}

int ibv_attach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
	return mcast_command(qp, "attach_mcast", gid, lid);
}

int ibv_detach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
	return mcast_command(qp, "detach_mcast", gid, lid);
}
