/* Completion queues, completion channels and the extended CQ.
 *
 * Polling reads CQEs straight from the mapped cq/H/ring: no system call.
 * ibv_req_notify_cq stores the ring header's armed word; when the daemon
 * posts a CQE the word asks for, it writes one line to the CQ's channel
 * FIFO (cq/H/channel). A completion channel is an epoll descriptor over
 * the FIFOs of its CQs, so channel->fd is a real descriptor that poll,
 * epoll and select see become readable, and ibv_get_cq_event reads one
 * line of one ready FIFO: one event. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "rdmafs.h"

struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *context)
{
	struct rf_comp_channel *ch = calloc(1, sizeof(*ch));

	if (!ch) {
		errno = ENOMEM;
		return NULL;
	}
	ch->ch.fd = epoll_create1(EPOLL_CLOEXEC);
	if (ch->ch.fd < 0) {
		int err = errno;
		free(ch);
		errno = err;
		return NULL;
	}
	ch->ch.context = context;
	ch->ch.refcnt = 0;
	pthread_mutex_init(&ch->lock, NULL);
	return &ch->ch;
}

int ibv_destroy_comp_channel(struct ibv_comp_channel *channel)
{
	struct rf_comp_channel *ch = (struct rf_comp_channel *)channel;

	pthread_mutex_lock(&ch->lock);
	if (channel->refcnt) {
		pthread_mutex_unlock(&ch->lock);
		return EBUSY;
	}
	pthread_mutex_unlock(&ch->lock);
	close(channel->fd);
	pthread_mutex_destroy(&ch->lock);
	free(ch);
	return 0;
}

static int map_cq_ring(struct rf_context *ctx, struct rf_cq *cq)
{
	char path[64];
	int err;

	snprintf(path, sizeof(path), "cq/%u/ring", cq->handle);
	if ((err = rf_ring_map(ctx->mount_fd, path, RDMAFS_KIND_CQ, &cq->ring)))
		return err;
	cq->ring.head = rf_load_acq(cq->ring.cons);
	cq->cq.cqe = cq->ring.slot_count;
	return 0;
}

/* The fixed line the daemon writes per event of this CQ. */
static size_t event_line_len(uint32_t handle)
{
	char b[32];

	return snprintf(b, sizeof(b), "event " RDMAFS_KEQ(CQ) "%u\n", handle);
}

static int attach_channel(struct rf_context *ctx, struct rf_cq *cq, struct ibv_comp_channel *channel)
{
	struct rf_comp_channel *ch = (struct rf_comp_channel *)channel;
	struct epoll_event ev = {.events = EPOLLIN};
	char path[64];

	snprintf(path, sizeof(path), "cq/%u/channel", cq->handle);
	cq->fifo_fd = openat(ctx->mount_fd, path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	if (cq->fifo_fd < 0)
		return rf_errno_of_write(errno);
	ev.data.ptr = cq;
	if (epoll_ctl(channel->fd, EPOLL_CTL_ADD, cq->fifo_fd, &ev) < 0) {
		int err = errno;
		close(cq->fifo_fd);
		cq->fifo_fd = -1;
		return err;
	}
	pthread_mutex_lock(&ch->lock);
	channel->refcnt++;
	pthread_mutex_unlock(&ch->lock);
	return 0;
}

static void init_cq_ex_ops(struct rf_cq *cq);

/* cq_new makes a CQ; wc_flags asks for the completion timestamps
 * (IBV_WC_EX_WITH_COMPLETION_TIMESTAMP{,_WALLCLOCK}), which the daemon
 * then writes into each CQE. */
static struct rf_cq *cq_new(struct ibv_context *context, int cqe, void *cq_context,
			    struct ibv_comp_channel *channel, int comp_vector, uint64_t wc_flags)
{
	struct rf_context *ctx = to_rctx(context);
	struct rf_cq *cq;
	char req[128];
	int err;

	if (cqe <= 0 || cqe > ctx->attr.max_cqe || comp_vector < 0 ||
	    comp_vector >= context->num_comp_vectors) {
		errno = EINVAL;
		return NULL;
	}
	cq = calloc(1, sizeof(*cq));
	if (!cq) {
		errno = ENOMEM;
		return NULL;
	}
	cq->fifo_fd = -1;
	int n = snprintf(req, sizeof(req), RDMAFS_KEQ(CQE) "%d", cqe);
	if (wc_flags & (IBV_WC_EX_WITH_COMPLETION_TIMESTAMP | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK)) {
		const char *ts = (wc_flags & IBV_WC_EX_WITH_COMPLETION_TIMESTAMP) ? "completion_timestamp" : "";
		const char *wall = (wc_flags & IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK)
					   ? "completion_timestamp_wallclock" : "";
		snprintf(req + n, sizeof(req) - n, " " RDMAFS_KEQ(WC_FLAGS) "%s%s%s", ts,
			 *ts && *wall ? "," : "", wall);
	}
	if ((err = rf_transact(ctx, "cq", req, &cq->handle)))
		goto fail_free;
	if ((err = map_cq_ring(ctx, cq)))
		goto fail_destroy;
	if (channel && (err = attach_channel(ctx, cq, channel)))
		goto fail_unmap;
	pthread_spin_init(&cq->lock, PTHREAD_PROCESS_PRIVATE);
	cq->cq.context = context;
	cq->cq.channel = channel;
	cq->cq.cq_context = cq_context;
	cq->cq.handle = cq->handle;
	pthread_mutex_init(&cq->cq.mutex, NULL);
	pthread_cond_init(&cq->cq.cond, NULL);
	init_cq_ex_ops(cq);
	rf_track(ctx, RF_CQ, cq->handle, cq);
	return cq;
fail_unmap:
	rf_ring_unmap(&cq->ring);
fail_destroy:
	rf_destroy(ctx, "cq", cq->handle);
fail_free:
	free(cq);
	errno = err;
	return NULL;
}

struct ibv_cq *ibv_create_cq(struct ibv_context *context, int cqe, void *cq_context,
			     struct ibv_comp_channel *channel, int comp_vector)
{
	struct rf_cq *cq = cq_new(context, cqe, cq_context, channel, comp_vector, 0);

	return cq ? ibv_cq_ex_to_cq(&cq->cq) : NULL;
}

/* Work posted before a resize is work the program has seen go: let the
 * engine take what the context's QPs posted to send queues that complete
 * into this CQ (at most 100 ms), so that the daemon's count of waiting
 * completions, which a shrink is checked against, includes theirs. */
static void settle_senders(struct rf_context *ctx, struct ibv_cq *icq)
{
	for (int tries = 0; tries < 2000; tries++) {
		bool busy = false;
		pthread_mutex_lock(&ctx->lock);
		for (struct rf_obj *o = ctx->objs; o && !busy; o = o->next) {
			if (o->kind != RF_QP)
				continue;
			struct rf_qp *q = o->ptr;
			if (q->qpx.qp_base.send_cq == icq && rf_load_acq(q->sq.cons) != rf_load_acq(q->sq.prod))
				busy = true;
		}
		pthread_mutex_unlock(&ctx->lock);
		if (!busy)
			return;
		usleep(50);
	}
}

int ibv_resize_cq(struct ibv_cq *icq, int cqe)
{
	struct rf_cq *cq = to_rcq(icq);
	struct rf_context *ctx = to_rctx(icq->context);
	char path[64], cmd[64];
	int err;

	if (cqe <= 0 || cqe > ctx->attr.max_cqe)
		return EINVAL;
	snprintf(path, sizeof(path), "cq/%u/ctl", cq->handle);
	snprintf(cmd, sizeof(cmd), "resize " RDMAFS_KEQ(CQE) "%d", cqe);
	settle_senders(ctx, icq);
	pthread_spin_lock(&cq->lock);
	if ((err = rf_command(ctx, path, cmd))) {
		pthread_spin_unlock(&cq->lock);
		return err;
	}
	struct rf_ring old = cq->ring;
	err = map_cq_ring(ctx, cq);
	if (err)
		cq->ring = old; /* the daemon moved on; polls will find nothing */
	else
		rf_ring_unmap(&old);
	pthread_spin_unlock(&cq->lock);
	return err;
}

int ibv_destroy_cq(struct ibv_cq *icq)
{
	struct rf_cq *cq = to_rcq(icq);
	struct rf_context *ctx = to_rctx(icq->context);
	int err = rf_destroy(ctx, "cq", cq->handle);

	if (err)
		return err;
	rf_untrack(ctx, RF_CQ, cq->handle);
	if (cq->fifo_fd >= 0) {
		struct rf_comp_channel *ch = (struct rf_comp_channel *)icq->channel;
		epoll_ctl(icq->channel->fd, EPOLL_CTL_DEL, cq->fifo_fd, NULL);
		close(cq->fifo_fd);
		pthread_mutex_lock(&ch->lock);
		icq->channel->refcnt--;
		pthread_mutex_unlock(&ch->lock);
	}
	/* libibverbs' rule: wait until every event handed out is acked. */
	pthread_mutex_lock(&icq->mutex);
	while (icq->comp_events_completed != cq->events_delivered ||
	       icq->async_events_completed != cq->async_delivered)
		pthread_cond_wait(&icq->cond, &icq->mutex);
	pthread_mutex_unlock(&icq->mutex);
	rf_ring_unmap(&cq->ring);
	free(cq);
	return 0;
}

int ibv_get_cq_event(struct ibv_comp_channel *channel, struct ibv_cq **cq_out, void **cq_context)
{
	struct epoll_event ev;
	int nonblock = fcntl(channel->fd, F_GETFL) & O_NONBLOCK;
	char line[32];

	for (;;) {
		int n = epoll_wait(channel->fd, &ev, 1, nonblock ? 0 : -1);
		if (n < 0)
			return -1; /* errno: EINTR as a read() would */
		if (n == 0) {
			errno = EAGAIN;
			return -1;
		}
		struct rf_cq *cq = ev.data.ptr;
		ssize_t r = read(cq->fifo_fd, line, event_line_len(cq->handle));
		if (r <= 0)
			continue; /* another thread took it */
		pthread_mutex_lock(&cq->cq.mutex);
		cq->events_delivered++;
		pthread_mutex_unlock(&cq->cq.mutex);
		*cq_out = ibv_cq_ex_to_cq(&cq->cq);
		*cq_context = cq->cq.cq_context;
		return 0;
	}
}

void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents)
{
	pthread_mutex_lock(&cq->mutex);
	cq->comp_events_completed += nevents;
	pthread_cond_signal(&cq->cond);
	pthread_mutex_unlock(&cq->mutex);
}

int rf_req_notify_cq(struct ibv_cq *icq, int solicited_only)
{
	struct rf_cq *cq = to_rcq(icq);
	uint32_t *armed = cq->ring.armed;

	/* A request for the next completion is never weakened to
	 * solicited-only. */
	if (solicited_only) {
		uint32_t none = RDMAFS_ARM_NONE;
		__atomic_compare_exchange_n(armed, &none, RDMAFS_ARM_SOLICITED, false, __ATOMIC_SEQ_CST,
					    __ATOMIC_SEQ_CST);
	} else {
		__atomic_store_n(armed, RDMAFS_ARM_NEXT, __ATOMIC_SEQ_CST);
	}
	return 0;
}

static void decode_wc(const uint8_t *c, struct ibv_wc *wc)
{
	wc->wr_id = rf_get64(c, RDMAFS_CQE_OFF_WRID);
	wc->status = c[RDMAFS_CQE_OFF_STATUS];
	wc->opcode = c[RDMAFS_CQE_OFF_OPCODE];
	wc->vendor_err = rf_get32(c, RDMAFS_CQE_OFF_VENDOR_ERR);
	wc->byte_len = rf_get32(c, RDMAFS_CQE_OFF_BYTE_LEN);
	wc->wc_flags = rf_get16(c, RDMAFS_CQE_OFF_WC_FLAGS);
	uint32_t imm = rf_get32(c, RDMAFS_CQE_OFF_IMM);
	/* imm_data is in network order in ibv_wc; an invalidated rkey in
	 * host order. */
	if (wc->wc_flags & IBV_WC_WITH_INV)
		wc->invalidated_rkey = imm;
	else
		wc->imm_data = htobe32(imm);
	wc->qp_num = rf_get32(c, RDMAFS_CQE_OFF_QP_NUM);
	wc->src_qp = rf_get32(c, RDMAFS_CQE_OFF_SRC_QP);
	wc->pkey_index = rf_get16(c, RDMAFS_CQE_OFF_P_KEY_INDEX);
	wc->slid = rf_get16(c, RDMAFS_CQE_OFF_SLID);
	wc->sl = c[RDMAFS_CQE_OFF_SL];
	wc->dlid_path_bits = c[RDMAFS_CQE_OFF_DLID_PATH_BITS];
}

/* How many CQEs wait; -1 when the daemon's index is impossible. */
static int64_t cq_pending(struct rf_cq *cq)
{
	uint32_t n = rf_load_acq(cq->ring.prod) - cq->ring.head;

	return n > cq->ring.slot_count ? -1 : (int64_t)n;
}

int rf_poll_cq(struct ibv_cq *icq, int n, struct ibv_wc *wc)
{
	struct rf_cq *cq = to_rcq(icq);
	int got = 0;

	pthread_spin_lock(&cq->lock);
	int64_t pend = cq_pending(cq);
	if (pend < 0) {
		pthread_spin_unlock(&cq->lock);
		errno = EIO;
		return -1;
	}
	while (got < n && got < pend) {
		decode_wc(rf_slot(&cq->ring, cq->ring.head), &wc[got]);
		cq->ring.head++;
		got++;
	}
	if (got)
		rf_store_rel(cq->ring.cons, cq->ring.head);
	pthread_spin_unlock(&cq->lock);
	return got;
}

/* rf_cq_clean drops the completions of QP qpn that wait in the CQ, as
 * mlx5 does when a QP is reset or destroyed: a reset QP's old flush
 * completions must not show up as errors of its next life, nor a destroyed
 * QP's completions after it is gone. keep_recv keeps its receive
 * completions (a QP on an SRQ: those WQEs were the SRQ's). Only [consumer, producer) is
 * ours to rewrite; the kept entries slide towards the producer end and the
 * consumer index moves past the dropped ones. */
void rf_cq_clean(struct ibv_cq *icq, uint32_t qpn, bool keep_recv)
{
	struct rf_cq *cq = to_rcq(icq);

	pthread_spin_lock(&cq->lock);
	uint32_t prod = rf_load_acq(cq->ring.prod), tail = cq->ring.head;
	uint32_t n = prod - tail, kept = 0;
	if (n <= cq->ring.slot_count) {
		for (uint32_t i = n; i-- > 0;) {
			uint8_t *e = rf_slot(&cq->ring, tail + i);
			if (rf_get32(e, RDMAFS_CQE_OFF_QP_NUM) == qpn &&
			    !(keep_recv && (e[RDMAFS_CQE_OFF_OPCODE] & IBV_WC_RECV)))
				continue;
			kept++;
			uint8_t *to = rf_slot(&cq->ring, prod - kept);
			if (to != e)
				memcpy(to, e, RDMAFS_CQE_SIZE);
		}
		cq->ring.head = prod - kept;
		rf_store_rel(cq->ring.cons, cq->ring.head);
	}
	pthread_spin_unlock(&cq->lock);
}

/* The extended CQ: start_poll/next_poll/end_poll walk the ring one CQE at
 * a time under the CQ's lock (held from start_poll to end_poll, as
 * rdma-core's providers do); the read_* functions decode the current one. */
static inline const uint8_t *cur(struct ibv_cq_ex *c)
{
	return to_rcqx(c)->cur;
}

static void load_cur(struct rf_cq *cq)
{
	struct ibv_wc wc;

	memcpy(cq->cur, rf_slot(&cq->ring, cq->ring.head), RDMAFS_CQE_SIZE);
	decode_wc(cq->cur, &wc);
	cq->cq.wr_id = wc.wr_id;
	cq->cq.status = wc.status;
	cq->ring.head++;
}

static int cqx_start_poll(struct ibv_cq_ex *c, struct ibv_poll_cq_attr *attr)
{
	struct rf_cq *cq = to_rcqx(c);

	if (attr->comp_mask)
		return EINVAL;
	pthread_spin_lock(&cq->lock);
	int64_t pend = cq_pending(cq);
	if (pend <= 0) {
		pthread_spin_unlock(&cq->lock);
		return pend < 0 ? EIO : ENOENT;
	}
	load_cur(cq);
	cq->polling = true;
	return 0;
}

static int cqx_next_poll(struct ibv_cq_ex *c)
{
	struct rf_cq *cq = to_rcqx(c);
	int64_t pend = cq_pending(cq);

	if (pend <= 0)
		return pend < 0 ? EIO : ENOENT;
	load_cur(cq);
	return 0;
}

static void cqx_end_poll(struct ibv_cq_ex *c)
{
	struct rf_cq *cq = to_rcqx(c);

	rf_store_rel(cq->ring.cons, cq->ring.head);
	cq->polling = false;
	pthread_spin_unlock(&cq->lock);
}

static enum ibv_wc_opcode cqx_read_opcode(struct ibv_cq_ex *c) { return cur(c)[RDMAFS_CQE_OFF_OPCODE]; }
static uint32_t cqx_read_vendor_err(struct ibv_cq_ex *c) { return rf_get32(cur(c), RDMAFS_CQE_OFF_VENDOR_ERR); }
static uint32_t cqx_read_byte_len(struct ibv_cq_ex *c) { return rf_get32(cur(c), RDMAFS_CQE_OFF_BYTE_LEN); }
static __be32 cqx_read_imm_data(struct ibv_cq_ex *c)
{
	uint32_t imm = rf_get32(cur(c), RDMAFS_CQE_OFF_IMM);

	return (rf_get16(cur(c), RDMAFS_CQE_OFF_WC_FLAGS) & IBV_WC_WITH_INV) ? imm : htobe32(imm);
}
static uint32_t cqx_read_qp_num(struct ibv_cq_ex *c) { return rf_get32(cur(c), RDMAFS_CQE_OFF_QP_NUM); }
static uint32_t cqx_read_src_qp(struct ibv_cq_ex *c) { return rf_get32(cur(c), RDMAFS_CQE_OFF_SRC_QP); }
static unsigned int cqx_read_wc_flags(struct ibv_cq_ex *c) { return rf_get16(cur(c), RDMAFS_CQE_OFF_WC_FLAGS); }
static uint32_t cqx_read_slid(struct ibv_cq_ex *c) { return rf_get16(cur(c), RDMAFS_CQE_OFF_SLID); }
static uint8_t cqx_read_sl(struct ibv_cq_ex *c) { return cur(c)[RDMAFS_CQE_OFF_SL]; }
static uint8_t cqx_read_dlid_path_bits(struct ibv_cq_ex *c) { return cur(c)[RDMAFS_CQE_OFF_DLID_PATH_BITS]; }
/* The device clock (ticks at hca_core_clock kHz) and the wall clock (ns
 * since the epoch) of the completion: written by the daemon for a CQ made
 * with their wc_flags, 0 otherwise. */
static uint64_t cqx_read_completion_ts(struct ibv_cq_ex *c) { return rf_get64(cur(c), RDMAFS_CQE_OFF_COMPLETION_TS); }
static uint64_t cqx_read_completion_wallclock_ns(struct ibv_cq_ex *c)
{
	return rf_get64(cur(c), RDMAFS_CQE_OFF_COMPLETION_WALLCLOCK);
}

static void init_cq_ex_ops(struct rf_cq *cq)
{
	struct ibv_cq_ex *c = &cq->cq;

	c->start_poll = cqx_start_poll;
	c->next_poll = cqx_next_poll;
	c->end_poll = cqx_end_poll;
	c->read_opcode = cqx_read_opcode;
	c->read_vendor_err = cqx_read_vendor_err;
	c->read_byte_len = cqx_read_byte_len;
	c->read_imm_data = cqx_read_imm_data;
	c->read_qp_num = cqx_read_qp_num;
	c->read_src_qp = cqx_read_src_qp;
	c->read_wc_flags = cqx_read_wc_flags;
	c->read_slid = cqx_read_slid;
	c->read_sl = cqx_read_sl;
	c->read_dlid_path_bits = cqx_read_dlid_path_bits;
	c->read_completion_ts = cqx_read_completion_ts;
	c->read_completion_wallclock_ns = cqx_read_completion_wallclock_ns;
}

/* What an extended CQ can report: the fields of ibv_wc and the completion
 * timestamps (device clock and wall clock). Flow tags, VLANs and tag
 * matching are absent by design (EOPNOTSUPP). */
#define RF_CQ_WC_FLAGS (IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM | \
			IBV_WC_EX_WITH_SRC_QP | IBV_WC_EX_WITH_SLID | IBV_WC_EX_WITH_SL | \
			IBV_WC_EX_WITH_DLID_PATH_BITS | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP | \
			IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK)

struct ibv_cq_ex *rf_create_cq_ex(struct ibv_context *context, struct ibv_cq_init_attr_ex *attr)
{
	struct rf_cq *cq;

	if (attr->comp_mask & ~(IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD)) {
		errno = EINVAL;
		return NULL;
	}
	if (attr->wc_flags & ~(uint64_t)RF_CQ_WC_FLAGS) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	if ((attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) &&
	    (attr->flags & ~IBV_CREATE_CQ_ATTR_SINGLE_THREADED)) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	cq = cq_new(context, attr->cqe, attr->cq_context, attr->channel, attr->comp_vector, attr->wc_flags);
	if (!cq)
		return NULL;
	cq->wc_flags_req = attr->wc_flags;
	return &cq->cq;
}
