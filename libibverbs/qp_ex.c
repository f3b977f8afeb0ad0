/* The ibv_qp_ex work-request builder (ibv_wr_start ... ibv_wr_complete).
 *
 * wr_start takes the send queue's lock until wr_complete or wr_abort, as
 * rdma-core's providers do. Each ibv_wr_<opcode> call starts a WR in a
 * scratch ibv_send_wr; the setters fill it; the next opcode call (or
 * wr_complete) encodes it with the same encoder as ibv_post_send, so the
 * two paths cannot disagree. The first error of a batch is remembered and
 * wr_complete returns it after discarding the whole batch, which is what
 * the API promises: nothing of a failed batch is posted. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "rdmafs.h"

static void flush(struct rf_qp *q)
{
	if (!q->wr_pending)
		return;
	q->wr_pending = false;
	if (q->wr_err)
		return;
	if (rf_prod_free(&q->sq) <= 0) {
		q->wr_err = ENOMEM;
		return;
	}
	q->wr_err = rf_encode_send(q, rf_slot(&q->sq, q->sq.head), &q->wr);
	if (!q->wr_err)
		q->sq.head++;
}

static struct ibv_send_wr *begin(struct ibv_qp_ex *x, enum ibv_wr_opcode op)
{
	struct rf_qp *q = to_rqpx(x);

	flush(q);
	memset(&q->wr, 0, sizeof(q->wr));
	q->wr.wr_id = x->wr_id;
	q->wr.send_flags = x->wr_flags;
	q->wr.opcode = op;
	q->wr_pending = true;
	return &q->wr;
}

static void x_start(struct ibv_qp_ex *x)
{
	struct rf_qp *q = to_rqpx(x);

	pthread_spin_lock(&q->sq_lock);
	q->wr_start_head = q->sq.head;
	q->wr_err = x->qp_base.state < IBV_QPS_RTS ? EINVAL : 0;
	q->wr_pending = false;
}

static int x_complete(struct ibv_qp_ex *x)
{
	struct rf_qp *q = to_rqpx(x);
	int err;

	flush(q);
	err = q->wr_err;
	if (err) {
		q->sq.head = q->wr_start_head;
	} else if (q->sq.head != q->wr_start_head) {
		rf_prod_publish(&q->sq);
		if (rf_need_wakeup(&q->sq))
			rf_ring_bell(to_rctx(x->qp_base.context), &q->sq, x->qp_base.qp_num);
	}
	pthread_spin_unlock(&q->sq_lock);
	return err;
}

static void x_abort(struct ibv_qp_ex *x)
{
	struct rf_qp *q = to_rqpx(x);

	q->wr_pending = false;
	q->sq.head = q->wr_start_head;
	pthread_spin_unlock(&q->sq_lock);
}

static void x_send(struct ibv_qp_ex *x) { begin(x, IBV_WR_SEND); }

static void x_send_imm(struct ibv_qp_ex *x, __be32 imm)
{
	begin(x, IBV_WR_SEND_WITH_IMM)->imm_data = imm;
}

static void x_send_inv(struct ibv_qp_ex *x, uint32_t rkey)
{
	begin(x, IBV_WR_SEND_WITH_INV)->invalidate_rkey = rkey;
}

static void x_rdma_write(struct ibv_qp_ex *x, uint32_t rkey, uint64_t addr)
{
	struct ibv_send_wr *wr = begin(x, IBV_WR_RDMA_WRITE);

	wr->wr.rdma.rkey = rkey;
	wr->wr.rdma.remote_addr = addr;
}

static void x_rdma_write_imm(struct ibv_qp_ex *x, uint32_t rkey, uint64_t addr, __be32 imm)
{
	struct ibv_send_wr *wr = begin(x, IBV_WR_RDMA_WRITE_WITH_IMM);

	wr->wr.rdma.rkey = rkey;
	wr->wr.rdma.remote_addr = addr;
	wr->imm_data = imm;
}

static void x_rdma_read(struct ibv_qp_ex *x, uint32_t rkey, uint64_t addr)
{
	struct ibv_send_wr *wr = begin(x, IBV_WR_RDMA_READ);

	wr->wr.rdma.rkey = rkey;
	wr->wr.rdma.remote_addr = addr;
}

static void x_cmp_swp(struct ibv_qp_ex *x, uint32_t rkey, uint64_t addr, uint64_t compare, uint64_t swap)
{
	struct ibv_send_wr *wr = begin(x, IBV_WR_ATOMIC_CMP_AND_SWP);

	wr->wr.atomic.rkey = rkey;
	wr->wr.atomic.remote_addr = addr;
	wr->wr.atomic.compare_add = compare;
	wr->wr.atomic.swap = swap;
}

static void x_fetch_add(struct ibv_qp_ex *x, uint32_t rkey, uint64_t addr, uint64_t add)
{
	struct ibv_send_wr *wr = begin(x, IBV_WR_ATOMIC_FETCH_AND_ADD);

	wr->wr.atomic.rkey = rkey;
	wr->wr.atomic.remote_addr = addr;
	wr->wr.atomic.compare_add = add;
}

static void x_bind_mw(struct ibv_qp_ex *x, struct ibv_mw *mw, uint32_t rkey, const struct ibv_mw_bind_info *bi)
{
	struct ibv_send_wr *wr = begin(x, IBV_WR_BIND_MW);

	wr->bind_mw.mw = mw;
	wr->bind_mw.rkey = rkey;
	wr->bind_mw.bind_info = *bi;
}

static void x_local_inv(struct ibv_qp_ex *x, uint32_t rkey)
{
	begin(x, IBV_WR_LOCAL_INV)->invalidate_rkey = rkey;
}

static void x_unsupported(struct rf_qp *q)
{
	q->wr_pending = false;
	if (!q->wr_err)
		q->wr_err = EOPNOTSUPP;
}

static void x_send_tso(struct ibv_qp_ex *x, void *hdr, uint16_t hdr_sz, uint16_t mss)
{
	(void)hdr, (void)hdr_sz, (void)mss;
	flush(to_rqpx(x));
	x_unsupported(to_rqpx(x));
}

static void x_set_xrc_srqn(struct ibv_qp_ex *x, uint32_t srqn)
{
	to_rqpx(x)->wr.qp_type.xrc.remote_srqn = srqn;
}

static void x_set_ud_addr(struct ibv_qp_ex *x, struct ibv_ah *ah, uint32_t qpn, uint32_t qkey)
{
	struct rf_qp *q = to_rqpx(x);

	q->wr.wr.ud.ah = ah;
	q->wr.wr.ud.remote_qpn = qpn;
	q->wr.wr.ud.remote_qkey = qkey;
}

static struct ibv_sge *sges(struct rf_qp *q, size_t n)
{
	if (n > q->wr_sge_cap) {
		struct ibv_sge *s = realloc(q->wr_sge, n * sizeof(*s));
		if (!s) {
			q->wr_err = ENOMEM;
			return NULL;
		}
		q->wr_sge = s;
		q->wr_sge_cap = n;
	}
	return q->wr_sge;
}

static void x_set_sge(struct ibv_qp_ex *x, uint32_t lkey, uint64_t addr, uint32_t length)
{
	struct rf_qp *q = to_rqpx(x);
	struct ibv_sge *s = sges(q, 1);

	if (!s)
		return;
	s[0] = (struct ibv_sge){.addr = addr, .length = length, .lkey = lkey};
	q->wr.sg_list = s;
	/* A zero-length SGE is no SGE (zero-byte messages). */
	q->wr.num_sge = length ? 1 : 0;
}

static void x_set_sge_list(struct ibv_qp_ex *x, size_t n, const struct ibv_sge *list)
{
	struct rf_qp *q = to_rqpx(x);
	struct ibv_sge *s = sges(q, n ? n : 1);

	if (!s)
		return;
	memcpy(s, list, n * sizeof(*s));
	q->wr.sg_list = s;
	q->wr.num_sge = n;
}

static void x_set_inline_data(struct ibv_qp_ex *x, void *addr, size_t length)
{
	struct rf_qp *q = to_rqpx(x);
	struct ibv_sge *s = sges(q, 1);

	if (!s)
		return;
	s[0] = (struct ibv_sge){.addr = (uintptr_t)addr, .length = length};
	q->wr.sg_list = s;
	q->wr.num_sge = 1;
	q->wr.send_flags |= IBV_SEND_INLINE;
}

static void x_set_inline_data_list(struct ibv_qp_ex *x, size_t n, const struct ibv_data_buf *list)
{
	struct rf_qp *q = to_rqpx(x);
	struct ibv_sge *s = sges(q, n ? n : 1);

	if (!s)
		return;
	for (size_t i = 0; i < n; i++)
		s[i] = (struct ibv_sge){.addr = (uintptr_t)list[i].addr, .length = list[i].length};
	q->wr.sg_list = s;
	q->wr.num_sge = n;
	q->wr.send_flags |= IBV_SEND_INLINE;
}

/* The 8 bytes are copied at the call, so the caller's buffer need not live
 * until wr_complete; the WR then carries them as one 8-byte SGE, which is
 * how rf_encode_send takes an ATOMIC WRITE from ibv_post_send too. */
static void x_atomic_write(struct ibv_qp_ex *x, uint32_t rkey, uint64_t addr, const void *data)
{
	struct rf_qp *q = to_rqpx(x);
	struct ibv_send_wr *wr = begin(x, IBV_WR_ATOMIC_WRITE);
	struct ibv_sge *s;

	wr->wr.rdma.rkey = rkey;
	wr->wr.rdma.remote_addr = addr;
	s = sges(q, 1);
	if (!s)
		return;
	memcpy(q->wr_atomic, data, sizeof(q->wr_atomic));
	s[0] = (struct ibv_sge){.addr = (uintptr_t)q->wr_atomic, .length = sizeof(q->wr_atomic)};
	wr->sg_list = s;
	wr->num_sge = 1;
}

void rf_qp_ex_init(struct rf_qp *q, uint64_t ops)
{
	struct ibv_qp_ex *x = &q->qpx;

	q->has_ex = ops != 0;
	x->comp_mask = 0;
	x->wr_start = x_start;
	x->wr_complete = x_complete;
	x->wr_abort = x_abort;
	x->wr_send = x_send;
	x->wr_send_imm = x_send_imm;
	x->wr_send_inv = x_send_inv;
	x->wr_rdma_write = x_rdma_write;
	x->wr_rdma_write_imm = x_rdma_write_imm;
	x->wr_rdma_read = x_rdma_read;
	x->wr_atomic_cmp_swp = x_cmp_swp;
	x->wr_atomic_fetch_add = x_fetch_add;
	x->wr_bind_mw = x_bind_mw;
	x->wr_local_inv = x_local_inv;
	x->wr_send_tso = x_send_tso;
	x->wr_set_ud_addr = x_set_ud_addr;
	x->wr_set_xrc_srqn = x_set_xrc_srqn;
	x->wr_set_inline_data = x_set_inline_data;
	x->wr_set_inline_data_list = x_set_inline_data_list;
	x->wr_set_sge = x_set_sge;
	x->wr_set_sge_list = x_set_sge_list;
	x->wr_atomic_write = x_atomic_write;
}
