/* Stream rsockets: sockets over RC QPs, wire-compatible with rdma-core's
 * rsockets (the format is in rsocket.h). Built on this library's own
 * synchronous ids and the verbs of the mount, as librdmacm builds them.
 *
 * A socket's number is the file descriptor of its id's event channel, so
 * it cannot collide with another descriptor of the process (librspreload
 * maps real sockets onto these numbers). A socket polls its completion
 * channel for data and its event channel for the CM's word (a connection
 * finishing, a request arriving, a DREQ).
 *
 * Locking: slock serialises senders, rlock receivers; cq_lock guards the
 * state below it (counters, queues) and the CQ; one waiter at a time
 * blocks on the channels (wait_lock), so a sender waiting for credits
 * does not hold up a receiver that would take the data granting them.
 * Datagram sockets are in rsocket_dgram.c.
 */
#include "rsocket.h"
#include "rsocket_int.h"

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <rdma/rsocket.h>

/* defaults a peer assumes, and /etc/rdma/rsocket's files that change them */
struct rs_config rs_conf = {
	.inline_size = 64, .sqsize = 384, .rqsize = 384,
	.mem = 1 << 17, .wmem = 1 << 17, .iomap_size = 0, .polling_us = 10,
};

static pthread_once_t conf_once = PTHREAD_ONCE_INIT;

static void conf_read(const char *name, unsigned *v)
{
	char p[128];
	FILE *f;
	unsigned x;

	snprintf(p, sizeof(p), "%s/%s", RS_CONF_DIR, name);
	if (!(f = fopen(p, "r")))
		return;
	if (fscanf(f, "%u", &x) == 1)
		*v = x;
	fclose(f);
}

static void conf_load(void)
{
	conf_read("inline_default", &rs_conf.inline_size);
	conf_read("sqsize_default", &rs_conf.sqsize);
	conf_read("rqsize_default", &rs_conf.rqsize);
	conf_read("mem_default", &rs_conf.mem);
	conf_read("wmem_default", &rs_conf.wmem);
	conf_read("iomap_size", &rs_conf.iomap_size);
	conf_read("polling_time", &rs_conf.polling_us);
	if (rs_conf.mem < 1)
		rs_conf.mem = 1;
	if (rs_conf.wmem < RS_SNDLOWAT)
		rs_conf.wmem = RS_SNDLOWAT << 1;
	/* only the sizes the 8-bit encoding carries */
	rs_conf.iomap_size = (unsigned)rs_unscale8(rs_scale8((int)rs_conf.iomap_size & 0xffff));
	if (rs_conf.iomap_size > 0xffff)
		rs_conf.iomap_size = 0;
}

void rs_configure(void)
{
	pthread_once(&conf_once, conf_load);
}

/* --- the socket table: fd -> socket, two levels, read without a lock ----- */

#define TAB_PAGE 1024
#define TAB_PAGES 1024
static _Atomic(struct rsock *) *rs_tab[TAB_PAGES];
static pthread_mutex_t tab_lock = PTHREAD_MUTEX_INITIALIZER;

int rs_tab_set(int fd, struct rsock *rs)
{
	if (fd < 0 || fd >= TAB_PAGE * TAB_PAGES)
		return EMFILE;
	pthread_mutex_lock(&tab_lock);
	if (!rs_tab[fd / TAB_PAGE])
		rs_tab[fd / TAB_PAGE] = calloc(TAB_PAGE, sizeof(*rs_tab[0]));
	_Atomic(struct rsock *) *page = rs_tab[fd / TAB_PAGE];
	pthread_mutex_unlock(&tab_lock);
	if (!page)
		return ENOMEM;
	atomic_store(&page[fd % TAB_PAGE], rs);
	return 0;
}

struct rsock *rs_get(int fd)
{
	if (fd < 0 || fd >= TAB_PAGE * TAB_PAGES)
		return NULL;
	pthread_mutex_lock(&tab_lock);
	_Atomic(struct rsock *) *page = rs_tab[fd / TAB_PAGE];
	pthread_mutex_unlock(&tab_lock);
	return page ? atomic_load(&page[fd % TAB_PAGE]) : NULL;
}

int rs_fail(int err)
{
	errno = err;
	return -1;
}

uint64_t rs_now_us(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000 + (uint64_t)t.tv_nsec / 1000;
}

int rs_set_fl(int fd, bool nonblock)
{
	int fl = fcntl(fd, F_GETFL);

	if (fl < 0)
		return -1;
	fl = nonblock ? fl | O_NONBLOCK : fl & ~O_NONBLOCK;
	return fcntl(fd, F_SETFL, fl);
}

/* page-aligned zeroed memory for registered buffers */
static void *rs_alloc_buf(size_t len)
{
	long pg = sysconf(_SC_PAGESIZE);
	void *p;

	len = (len + (size_t)pg - 1) / (size_t)pg * (size_t)pg;
	if (posix_memalign(&p, (size_t)pg, len))
		return NULL;
	memset(p, 0, len);
	return p;
}

/* --- allocation and buffers --------------------------------------------- */

struct rsock *rs_new(const struct rsock *from, int type)
{
	struct rsock *rs = calloc(1, sizeof(*rs));

	if (!rs)
		return NULL;
	rs->type = type;
	rs->index = -1;
	rs->udp_sock = -1;
	rs->epfd = -1;
	if (from) {
		rs->sbuf_size = from->sbuf_size;
		rs->rbuf_size = from->rbuf_size;
		rs->sq_inline = from->sq_inline;
		rs->sq_size = from->sq_size;
		rs->rq_size = from->rq_size;
		rs->tiomap_size = from->tiomap_size;
		rs->so_opts = from->so_opts;
		rs->tcp_nodelay = from->tcp_nodelay;
	} else {
		rs->sbuf_size = rs_conf.wmem;
		rs->rbuf_size = rs_conf.mem;
		rs->sq_inline = rs_conf.inline_size;
		rs->sq_size = rs_conf.sqsize;
		rs->rq_size = rs_conf.rqsize;
		rs->tiomap_size = (int)rs_conf.iomap_size;
	}
	rs->ctrl_max = RS_CTRL_SLOTS;
	pthread_mutex_init(&rs->slock, NULL);
	pthread_mutex_init(&rs->rlock, NULL);
	pthread_mutex_init(&rs->cq_lock, NULL);
	pthread_mutex_init(&rs->wait_lock, NULL);
	pthread_mutex_init(&rs->map_lock, NULL);
	return rs;
}

static void rs_free_stream(struct rsock *rs)
{
	if (rs->index >= 0)
		rs_tab_set(rs->index, NULL);
	for (int i = 0; i < rs->nmaps; i++)
		if (rs->maps[i].mr)
			ibv_dereg_mr(rs->maps[i].mr);
	free(rs->maps);
	if (rs->smr)
		ibv_dereg_mr(rs->smr);
	if (rs->rmr)
		ibv_dereg_mr(rs->rmr);
	if (rs->tmr)
		ibv_dereg_mr(rs->tmr);
	free(rs->sbuf);
	free(rs->rbuf);
	free(rs->tbuf);
	free(rs->rmsg);
	if (rs->id) {
		/* rdma_destroy_qp destroys the CQ and its channel too, as
		 * librdmacm's does; the CQ waits for its events' acks */
		if (rs->id->recv_cq && rs->unacked)
			ibv_ack_cq_events(rs->id->recv_cq, rs->unacked);
		rs->unacked = 0;
		rdma_destroy_qp(rs->id);
		rdma_destroy_id(rs->id);
	}
}

void rs_free(struct rsock *rs)
{
	if (rs->type == SOCK_DGRAM)
		ds_free(rs);
	else
		rs_free_stream(rs);
	pthread_mutex_destroy(&rs->slock);
	pthread_mutex_destroy(&rs->rlock);
	pthread_mutex_destroy(&rs->cq_lock);
	pthread_mutex_destroy(&rs->wait_lock);
	pthread_mutex_destroy(&rs->map_lock);
	free(rs);
}

static int rs_post_recv(struct rsock *rs)
{
	struct ibv_recv_wr wr = { .wr_id = RS_WR_RECV }, *bad;

	return ibv_post_recv(rs->id->qp, &wr, &bad);
}

/* The CQ, QP and buffers of a connecting or accepted socket. */
static int rs_create_ep(struct rsock *rs)
{
	struct rdma_cm_id *id = rs->id;
	struct ibv_device_attr da;
	struct ibv_qp_init_attr qa;
	int err;
	size_t tlen;

	if (ibv_query_device(id->verbs, &da))
		return errno ? errno : EIO;
	uint32_t max = (uint32_t)da.max_qp_wr < RS_QP_MAX ? (uint32_t)da.max_qp_wr : RS_QP_MAX;
	rs->sq_size = rs->sq_size > max ? (uint16_t)max : rs->sq_size < RS_QP_MIN ? RS_QP_MIN : rs->sq_size;
	rs->rq_size = rs->rq_size > max ? (uint16_t)max : rs->rq_size < RS_QP_MIN ? RS_QP_MIN : rs->rq_size;
	if (rs->rbuf_size < 2 * RS_SNDLOWAT)
		rs->rbuf_size = 2 * RS_SNDLOWAT;
	if (rs->sbuf_size < RS_SNDLOWAT)
		rs->sbuf_size = RS_SNDLOWAT;

	if (!(id->recv_cq_channel = ibv_create_comp_channel(id->verbs)))
		return errno ? errno : ENOMEM;
	id->send_cq_channel = id->recv_cq_channel;
	/* the channel is only ever read after poll says so (rs_wait) */
	rs_set_fl(id->recv_cq_channel->fd, true);
	if (!(id->recv_cq = ibv_create_cq(id->verbs, rs->sq_size + rs->rq_size, id, id->recv_cq_channel, 0)))
		return errno ? errno : ENOMEM;
	id->send_cq = id->recv_cq;

	memset(&qa, 0, sizeof(qa));
	qa.qp_context = rs;
	qa.send_cq = qa.recv_cq = id->recv_cq;
	qa.qp_type = IBV_QPT_RC;
	qa.sq_sig_all = 1;
	qa.cap.max_send_wr = rs->sq_size;
	qa.cap.max_recv_wr = rs->rq_size;
	qa.cap.max_send_sge = 2;
	qa.cap.max_recv_sge = 1;
	qa.cap.max_inline_data = rs->sq_inline;
	if (rdma_create_qp(id, NULL, &qa))
		return errno ? errno : EIO;
	rs->sq_inline = (uint16_t)qa.cap.max_inline_data;

	struct ibv_pd *pd = id->qp->pd;
	/* the send buffer, and after it the slots of control messages too
	 * large to go inline */
	size_t slen = rs->sbuf_size + sizeof(struct rs_wire_sge) * RS_CTRL_SLOTS;
	if (!(rs->sbuf = rs_alloc_buf(slen)) || !(rs->smr = ibv_reg_mr(pd, rs->sbuf, slen, IBV_ACCESS_LOCAL_WRITE)))
		return errno ? errno : ENOMEM;
	tlen = sizeof(struct rs_wire_sge) * RS_SGL_SIZE + sizeof(struct rs_wire_iomap) * (size_t)rs->tiomap_size;
	if (!(rs->tbuf = rs_alloc_buf(tlen)) ||
	    !(rs->tmr = ibv_reg_mr(pd, rs->tbuf, tlen, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)))
		return errno ? errno : ENOMEM;
	rs->tsgl = rs->tbuf;
	rs->tiomap = (struct rs_wire_iomap *)((char *)rs->tbuf + sizeof(struct rs_wire_sge) * RS_SGL_SIZE);
	if (!(rs->rbuf = rs_alloc_buf(rs->rbuf_size)) ||
	    !(rs->rmr = ibv_reg_mr(pd, rs->rbuf, rs->rbuf_size, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)))
		return errno ? errno : ENOMEM;
	if (!(rs->rmsg = calloc((size_t)rs->rq_size + 1, sizeof(*rs->rmsg))))
		return ENOMEM;

	rs->ssgl[0].addr = rs->ssgl[1].addr = (uintptr_t)rs->sbuf;
	rs->ssgl[0].lkey = rs->ssgl[1].lkey = rs->smr->lkey;
	rs->sbuf_avail = rs->sbuf_size;
	/* the first half goes to the peer in the connection data */
	rs->rbuf_free_off = rs->rbuf_size >> 1;
	rs->rbuf_avail = rs->rbuf_size >> 1;
	rs->granted = rs->rbuf_size >> 1;
	rs->sqe_avail = rs->sq_size - rs->ctrl_max;
	rs->rseq_comp = rs->rq_size >> 1;
	for (int i = 0; i < rs->rq_size; i++)
		if ((err = rs_post_recv(rs)))
			return err;
	return 0;
}

static void rs_format_conn(const struct rsock *rs, struct rs_wire_conn *c)
{
	memset(c, 0, sizeof(*c));
	c->version = 1;
	c->flags = RS_CONN_IOMAP | (__BYTE_ORDER == __BIG_ENDIAN ? RS_CONN_NET : 0);
	c->credits = htobe16(rs->rq_size);
	c->iomap_size = (uint8_t)rs_scale8(rs->tiomap_size);
	c->target_sgl.addr = htobe64((uintptr_t)rs->tsgl);
	c->target_sgl.length = htobe32(RS_SGL_SIZE);
	c->target_sgl.key = htobe32(rs->tmr->rkey);
	c->data_buf.addr = htobe64((uintptr_t)rs->rbuf);
	c->data_buf.length = htobe32(rs->rbuf_size >> 1);
	c->data_buf.key = htobe32(rs->rmr->rkey);
}

static void rs_save_conn(struct rsock *rs, const void *pd)
{
	struct rs_wire_conn c;

	memcpy(&c, pd, sizeof(c));
	rs->remote_sgl.addr = be64toh(c.target_sgl.addr);
	rs->remote_sgl.length = be32toh(c.target_sgl.length);
	rs->remote_sgl.key = be32toh(c.target_sgl.key);
	rs->remote_sge = 1;
	rs->swap = !!(c.flags & RS_CONN_NET) != (__BYTE_ORDER == __BIG_ENDIAN);
	if (c.flags & RS_CONN_IOMAP) {
		rs->remote_iomap.addr = rs->remote_sgl.addr + sizeof(struct rs_wire_sge) * rs->remote_sgl.length;
		rs->remote_iomap.length = (uint32_t)rs_unscale8(c.iomap_size);
		rs->remote_iomap.key = rs->remote_sgl.key;
	}
	rs->tsgl[0].addr = be64toh(c.data_buf.addr);
	rs->tsgl[0].length = be32toh(c.data_buf.length);
	rs->tsgl[0].key = be32toh(c.data_buf.key);
	rs->sseq_comp = be16toh(c.credits);
}

/* --- posting ------------------------------------------------------------ */

static int rs_post(struct rsock *rs, struct ibv_sge *sgl, int n, uint64_t wr_id, enum ibv_wr_opcode op,
		   uint32_t imm, int flags, uint64_t raddr, uint32_t rkey)
{
	struct ibv_send_wr wr, *bad;

	memset(&wr, 0, sizeof(wr));
	wr.wr_id = wr_id;
	wr.sg_list = n ? sgl : NULL;
	wr.num_sge = n;
	wr.opcode = op;
	wr.send_flags = flags;
	wr.imm_data = htobe32(imm);
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	return ibv_post_send(rs->id->qp, &wr, &bad);
}

static int rs_post_ctrl(struct rsock *rs, uint32_t imm)
{
	return rs_post(rs, NULL, 0, imm, IBV_WR_RDMA_WRITE_WITH_IMM, imm, 0, 0, 0);
}

/* The bytes [p, p+len) of the send buffer ring after ssgl[0].addr: 1 or 2
 * SGEs, the ring's position moved past them. */
static int rs_stage(struct rsock *rs, uint32_t len)
{
	uint32_t left = (uint32_t)((uintptr_t)rs->sbuf + rs->sbuf_size - rs->ssgl[0].addr);

	if (len < left) {
		rs->ssgl[0].length = len;
		return 1;
	}
	rs->ssgl[0].length = left;
	rs->ssgl[1].length = len - left;
	return len == left ? 1 : 2;
}

static void rs_stage_done(struct rsock *rs, int n, uint32_t len)
{
	uint32_t left = (uint32_t)((uintptr_t)rs->sbuf + rs->sbuf_size - rs->ssgl[0].addr);

	if (n == 2)
		rs->ssgl[0].addr = (uintptr_t)rs->sbuf + rs->ssgl[1].length;
	else if (len < left)
		rs->ssgl[0].addr += len;
	else
		rs->ssgl[0].addr = (uintptr_t)rs->sbuf;
}

/* copy from an iovec cursor */
static void rs_copy_in(void *dst, const struct iovec **iov, size_t *off, size_t len)
{
	while (len) {
		size_t n = (*iov)->iov_len - *off;
		if (n > len)
			n = len;
		memcpy(dst, (char *)(*iov)->iov_base + *off, n);
		dst = (char *)dst + n;
		len -= n;
		*off += n;
		if (*off == (*iov)->iov_len) {
			(*iov)++;
			*off = 0;
		}
	}
}

/* len bytes from the iovec cursor into the send ring, then written
 * (with op DATA: into the peer's current target half, else at raddr). */
static int rs_send_chunk(struct rsock *rs, const struct iovec **iov, size_t *off, uint32_t len, bool data,
			 uint64_t raddr, uint32_t rkey)
{
	int n = rs_stage(rs, len), err;

	rs_copy_in((void *)(uintptr_t)rs->ssgl[0].addr, iov, off, rs->ssgl[0].length);
	if (n == 2)
		rs_copy_in(rs->sbuf, iov, off, rs->ssgl[1].length);
	int flags = len <= rs->sq_inline ? IBV_SEND_INLINE : 0;
	rs->sqe_avail--;
	rs->sbuf_avail -= len;
	if (data) {
		volatile struct rs_wire_sge *t = &rs->tsgl[rs->tsge];
		raddr = t->addr;
		rkey = t->key;
		/* our own copy of the target moves before the write goes out:
		 * the peer may refill this slot as soon as it sees the data */
		t->addr += len;
		t->length -= len;
		if (!t->length)
			rs->tsge = (rs->tsge + 1) % RS_SGL_SIZE;
		rs->sseq_no++;
		err = rs_post(rs, rs->ssgl, n, rs_imm(RS_OP_DATA, len), IBV_WR_RDMA_WRITE_WITH_IMM,
			      rs_imm(RS_OP_DATA, len), flags, raddr, rkey);
	} else {
		err = rs_post(rs, rs->ssgl, n, rs_imm(RS_OP_WRITE, len), IBV_WR_RDMA_WRITE, 0, flags, raddr, rkey);
	}
	rs_stage_done(rs, n, len);
	return err;
}

/* cq_lock held */
static void rs_send_credits(struct rsock *rs)
{
	struct rs_wire_sge sge;
	struct ibv_sge isge;

	rs->ctrl_seq++;
	rs->rseq_comp = (uint16_t)(rs->rseq_no + (rs->rq_size >> 1));
	uint32_t imm = rs_imm(RS_OP_SGL, (uint16_t)(rs->rseq_no + rs->rq_size));
	if (rs->rbuf_avail < (int)(rs->rbuf_size >> 1)) {
		rs_post_ctrl(rs, imm);
		return;
	}
	sge.addr = (uintptr_t)rs->rbuf + (uint32_t)rs->rbuf_free_off;
	sge.key = rs->rmr->rkey;
	sge.length = rs->rbuf_size >> 1;
	if (rs->swap) {
		sge.addr = __builtin_bswap64(sge.addr);
		sge.key = __builtin_bswap32(sge.key);
		sge.length = __builtin_bswap32(sge.length);
	}
	int flags = IBV_SEND_INLINE;
	isge.addr = (uintptr_t)&sge;
	isge.length = sizeof(sge);
	isge.lkey = 0;
	if (rs->sq_inline < sizeof(sge)) {
		/* its own slot: the write may still be reading it later */
		void *slot = rs->sbuf + rs->sbuf_size + sizeof(sge) * (rs->ctrl_seq % RS_CTRL_SLOTS);
		memcpy(slot, &sge, sizeof(sge));
		isge.addr = (uintptr_t)slot;
		isge.lkey = rs->smr->lkey;
		flags = 0;
	}
	rs_post(rs, &isge, 1, imm, IBV_WR_RDMA_WRITE_WITH_IMM, imm, flags,
		rs->remote_sgl.addr + sizeof(struct rs_wire_sge) * (uint32_t)rs->remote_sge, rs->remote_sgl.key);
	rs->rbuf_avail -= (int)(rs->rbuf_size >> 1);
	rs->granted += rs->rbuf_size >> 1;
	rs->rbuf_free_off += (int)(rs->rbuf_size >> 1);
	if (rs->rbuf_free_off >= (int)rs->rbuf_size)
		rs->rbuf_free_off = 0;
	if (++rs->remote_sge >= (int)rs->remote_sgl.length)
		rs->remote_sge = 0;
}

static bool rs_ctrl_avail(const struct rsock *rs)
{
	return rs->ctrl_seq != rs->ctrl_max;
}

static void rs_update_credits(struct rsock *rs)
{
	if ((rs->state & RS_CONNECTED) && rs_ctrl_avail(rs) &&
	    (rs->rbuf_avail >= (int)(rs->rbuf_size >> 1) || (int16_t)(rs->rseq_no - rs->rseq_comp) >= 0))
		rs_send_credits(rs);
}

static void rs_set_error(struct rsock *rs, int err)
{
	if (rs->state & RS_CONNECTED) {
		rs->state = RS_ERROR;
		rs->err = err;
	}
}

/* Drains the CQ; cq_lock held. */
static void rs_poll_cq(struct rsock *rs)
{
	struct ibv_wc wc;
	int rcnt = 0, n;
	uint32_t val;

	while ((n = ibv_poll_cq(rs->id->recv_cq, 1, &wc)) > 0) {
		if (wc.wr_id & RS_WR_RECV) {
			if (wc.status != IBV_WC_SUCCESS)
				continue; /* flushed at disconnect */
			rcnt++;
			if (!(wc.wc_flags & IBV_WC_WITH_IMM)) {
				rs_set_error(rs, EPROTO);
				continue;
			}
			struct rs_rx rx = {
				.rbuf_size = rs->rbuf_size, .queued = rs->queued, .granted = rs->granted,
				.iomap_slots = rs->tiomap_size,
				.rmsg_free = rs->rq_size - ((rs->rtail - rs->rhead + rs->rq_size + 1) % (rs->rq_size + 1)),
			};
			switch (rs_rx_classify(&rx, be32toh(wc.imm_data), &val)) {
			case RS_RX_DATA:
				rs->rmsg[rs->rtail] = val;
				rs->rtail = (rs->rtail + 1) % (rs->rq_size + 1);
				rs->queued += val;
				rs->granted -= val;
				break;
			case RS_RX_CREDITS:
				rs->sseq_comp = (uint16_t)val;
				break;
			case RS_RX_IOMAP:
			case RS_RX_KEEPALIVE:
				break;
			case RS_RX_DISCONNECT:
				rs->state = RS_DISCONNECTED;
				break;
			case RS_RX_SHUTDOWN:
				if (rs->state & RS_WRITABLE)
					rs->state &= ~RS_READABLE;
				else
					rs->state = RS_DISCONNECTED;
				break;
			case RS_RX_BAD:
				rs_log_bad(rs, be32toh(wc.imm_data));
				rs_set_error(rs, ECONNRESET);
				break;
			}
			continue;
		}
		uint32_t m = (uint32_t)wc.wr_id;
		switch (rs_imm_op(m)) {
		case RS_OP_SGL:
		case RS_OP_CTRL:
			rs->ctrl_max++;
			break;
		case RS_OP_IOMAP_SGL:
			rs->sqe_avail++;
			rs->sbuf_avail += sizeof(struct rs_wire_iomap);
			break;
		default:
			rs->sqe_avail++;
			rs->sbuf_avail += rs_imm_data(m);
			break;
		}
		if (wc.status != IBV_WC_SUCCESS)
			rs_set_error(rs, wc.status == IBV_WC_WR_FLUSH_ERR ? ECONNRESET : EIO);
	}
	if (n < 0)
		rs_set_error(rs, EIO);
	if (rs->state & RS_CONNECTED) {
		while (rcnt-- > 0)
			if (rs_post_recv(rs)) {
				rs_set_error(rs, EIO);
				break;
			}
	}
}

/* The CM's word on a connected socket: a DREQ (or the device going)
 * means no more data comes, whatever the peer managed to send. */
void rs_cm_events(struct rsock *rs)
{
	struct rdma_cm_event *e;
	int fl = fcntl(rs->id->channel->fd, F_GETFL);

	if (!(fl & O_NONBLOCK))
		rs_set_fl(rs->id->channel->fd, true);
	while (rdma_get_cm_event(rs->id->channel, &e) == 0) {
		enum rdma_cm_event_type t = e->event;
		rs_log("rsocket %d: %s", rs->index, rdma_event_str(t));
		rdma_ack_cm_event(e);
		if (t == RDMA_CM_EVENT_DISCONNECTED || t == RDMA_CM_EVENT_DEVICE_REMOVAL ||
		    t == RDMA_CM_EVENT_TIMEWAIT_EXIT) {
			if (rs->state & RS_CONNECTED) {
				rs->state = RS_DISCONNECTED;
				rs->peer_gone = true;
			}
		}
	}
	if (!(fl & O_NONBLOCK))
		rs_set_fl(rs->id->channel->fd, false);
}

/* Processes completions until test holds: 0; EWOULDBLOCK (nonblock), or
 * the socket's error. */
int rs_process(struct rsock *rs, bool nonblock, bool (*test)(struct rsock *))
{
	uint64_t start = 0;
	int err = 0;

	pthread_mutex_lock(&rs->cq_lock);
	for (;;) {
		rs_update_credits(rs);
		rs_poll_cq(rs);
		rs_update_credits(rs);
		if (test(rs))
			break;
		if (rs->state & RS_ERROR) {
			err = rs->err ? rs->err : ECONNRESET;
			break;
		}
		if (nonblock) {
			err = EWOULDBLOCK;
			break;
		}
		/* spin a little before sleeping, as rdma-core does */
		if (!start)
			start = rs_now_us();
		if (rs_now_us() - start <= rs_conf.polling_us)
			continue;
		if (!rs->cq_armed) {
			ibv_req_notify_cq(rs->id->recv_cq, 0);
			rs->cq_armed = true;
			continue;
		}
		pthread_mutex_lock(&rs->wait_lock);
		pthread_mutex_unlock(&rs->cq_lock);
		struct pollfd p[2] = {
			{ .fd = rs->id->recv_cq_channel->fd, .events = POLLIN },
			{ .fd = rs->id->channel->fd, .events = POLLIN },
		};
		/* bounded: another thread may take the event we wait for */
		int r = poll(p, 2, 100);
		pthread_mutex_lock(&rs->cq_lock);
		pthread_mutex_unlock(&rs->wait_lock);
		if (r < 0 && errno != EINTR) {
			err = errno;
			break;
		}
		if (r > 0 && (p[1].revents & POLLIN))
			rs_cm_events(rs);
		if (r > 0 && (p[0].revents & POLLIN))
			rs_cq_event(rs);
	}
	pthread_mutex_unlock(&rs->cq_lock);
	return err;
}

/* cq_lock held */
void rs_cq_event(struct rsock *rs)
{
	struct ibv_cq *cq;
	void *ctx;

	if (ibv_get_cq_event(rs->id->recv_cq_channel, &cq, &ctx) == 0) {
		rs->cq_armed = false;
		if (++rs->unacked >= 64) {
			ibv_ack_cq_events(rs->id->recv_cq, rs->unacked);
			rs->unacked = 0;
		}
	}
}

static int rs_get_comp(struct rsock *rs, bool nonblock, bool (*test)(struct rsock *))
{
	return rs_process(rs, nonblock, test);
}

bool rs_can_send(struct rsock *rs)
{
	return rs->sqe_avail > 0 && rs->sbuf_avail >= RS_SNDLOWAT && rs->sseq_no != rs->sseq_comp &&
	       rs->tsgl[rs->tsge].length != 0;
}

static bool rs_conn_can_send(struct rsock *rs)
{
	return rs_can_send(rs) || !(rs->state & RS_WRITABLE);
}

static bool rs_conn_can_send_ctrl(struct rsock *rs)
{
	return rs_ctrl_avail(rs) || !(rs->state & RS_CONNECTED);
}

bool rs_have_rdata(struct rsock *rs)
{
	return rs->rhead != rs->rtail;
}

static bool rs_conn_have_rdata(struct rsock *rs)
{
	return rs_have_rdata(rs) || !(rs->state & RS_READABLE);
}

static bool rs_all_sends_done(struct rsock *rs)
{
	return ((int)rs->ctrl_max - (int)rs->ctrl_seq) + rs->sqe_avail == rs->sq_size ||
	       !(rs->state & RS_CONNECTED);
}

static bool rs_nonblocking(const struct rsock *rs, int flags)
{
	return (rs->fs_flags & O_NONBLOCK) || (flags & MSG_DONTWAIT);
}

/* --- connection management ------------------------------------------------ */

int rsocket(int domain, int type, int protocol)
{
	int t = type & ~(SOCK_CLOEXEC | SOCK_NONBLOCK);
	struct rsock *rs;
	int err;

	if ((domain != AF_INET && domain != AF_INET6) || (t != SOCK_STREAM && t != SOCK_DGRAM) ||
	    (t == SOCK_STREAM && protocol && protocol != IPPROTO_TCP) ||
	    (t == SOCK_DGRAM && protocol && protocol != IPPROTO_UDP))
		return rs_fail(ENOTSUP);
	rs_configure();
	if (!(rs = rs_new(NULL, t)))
		return rs_fail(ENOMEM);
	rs->domain = domain;
	rs->fs_flags = (type & SOCK_NONBLOCK) ? O_NONBLOCK : 0;
	rs->fd_flags = (type & SOCK_CLOEXEC) ? FD_CLOEXEC : 0;
	if (t == SOCK_DGRAM) {
		if ((err = ds_init(rs, domain)))
			goto fail;
	} else {
		if (rdma_create_id(NULL, &rs->id, rs, RDMA_PS_TCP)) {
			err = errno;
			goto fail;
		}
		rs->id->route.addr.src_addr.sa_family = (sa_family_t)domain;
		rs->index = rs->id->channel->fd;
	}
	if ((err = rs_tab_set(rs->index, rs))) {
		rs->index = -1;
		goto fail;
	}
	return rs->index;
fail:
	rs_free(rs);
	return rs_fail(err);
}

int rbind(int s, const struct sockaddr *addr, socklen_t addrlen)
{
	struct rsock *rs = rs_get(s);

	if (!rs)
		return rs_fail(EBADF);
	if (rs->type == SOCK_DGRAM)
		return ds_bind(rs, addr, addrlen);
	if (!addr || addrlen < sizeof(struct sockaddr_in))
		return rs_fail(EINVAL);
	if (rdma_bind_addr(rs->id, (struct sockaddr *)addr))
		return -1;
	rs->state = RS_BOUND;
	return 0;
}

int rlisten(int s, int backlog)
{
	struct rsock *rs = rs_get(s);

	if (!rs || rs->type != SOCK_STREAM)
		return rs_fail(rs ? EOPNOTSUPP : EBADF);
	if (rs->state == RS_LISTENING)
		return 0;
	if (rdma_listen(rs->id, backlog))
		return -1;
	if (rs->fs_flags & O_NONBLOCK)
		rs_set_fl(rs->id->channel->fd, true);
	rs->state = RS_LISTENING;
	return 0;
}

/* Finishes a connect (or accept) as far as the CM lets it without
 * waiting when the socket is non-blocking: 0 (connected), -1 with
 * EINPROGRESS, or -1 with the error. slock held. */
static int rs_do_connect(struct rsock *rs)
{
	struct rdma_conn_param p;
	struct rs_wire_conn c;
	int err = 0;
	int to;
	bool nb = rs->fs_flags & O_NONBLOCK;

	rs_set_fl(rs->id->channel->fd, nb);
	switch (rs->state) {
	case RS_INIT:
	case RS_BOUND:
	resolve_addr:
		to = 2000 << (rs->retries < 4 ? rs->retries : 4);
		rs->retries++;
		if (rdma_resolve_addr(rs->id, NULL, (struct sockaddr *)&rs->dst, to)) {
			err = errno;
			if (err == EAGAIN)
				rs->state = RS_RESOLVING_ADDR;
			break;
		}
		goto resolve_route;
	case RS_RESOLVING_ADDR:
		if ((err = rc_complete(rs->id))) {
			if (err == ETIMEDOUT && rs->retries <= RS_CONN_RETRIES)
				goto resolve_addr;
			break;
		}
	resolve_route:
		rs->retries = 0;
		if (rdma_resolve_route(rs->id, 2000)) {
			err = errno;
			if (err == EAGAIN)
				rs->state = RS_RESOLVING_ROUTE;
			break;
		}
		goto do_connect;
	case RS_RESOLVING_ROUTE:
		if ((err = rc_complete(rs->id)))
			break;
	do_connect:
		if ((err = rs_create_ep(rs)))
			break;
		rs_format_conn(rs, &c);
		memset(&p, 0, sizeof(p));
		p.private_data = &c;
		p.private_data_len = sizeof(c);
		p.flow_control = 1;
		p.retry_count = 7;
		p.rnr_retry_count = 7;
		p.responder_resources = 1;
		p.initiator_depth = 1;
		if (rdma_connect(rs->id, &p)) {
			err = errno;
			if (err == EAGAIN)
				rs->state = RS_CONNECTING;
			break;
		}
		goto connected;
	case RS_CONNECTING:
		if ((err = rc_complete(rs->id)))
			break;
	connected:
		if ((err = rs_conn_check(rs->id->event->param.conn.private_data,
					 rs->id->event->param.conn.private_data_len))) {
			rs_log("rsocket: the peer's connection data is not rsockets' (%d bytes)",
			       rs->id->event->param.conn.private_data_len);
			break;
		}
		rs_save_conn(rs, rs->id->event->param.conn.private_data);
		rs->state = RS_CONNECT_RDWR;
		break;
	case RS_ACCEPTING:
		if ((err = rc_complete(rs->id)))
			break;
		rs->state = RS_CONNECT_RDWR;
		break;
	case RS_CONNECT_ERROR:
	case RS_DISCONNECTED:
	case RS_ERROR:
		return rs_fail(ENOTCONN);
	default:
		if (rs->state & RS_CONNECTED)
			return 0;
		return rs_fail(EINVAL);
	}
	if (!err) {
		/* from here the channel only carries the DREQ; never block on it */
		rs_set_fl(rs->id->channel->fd, true);
		return 0;
	}
	if (err == EAGAIN || err == EWOULDBLOCK)
		return rs_fail(EINPROGRESS);
	rs->state = RS_CONNECT_ERROR;
	rs->err = err;
	return rs_fail(err);
}

/* rs_do_connect for a socket whose connection is still being made:
 * 0 when it is usable, -1 with EAGAIN or its error. */
static int rs_finish_opening(struct rsock *rs)
{
	int ret;

	if (!(rs->state & RS_OPENING))
		return 0;
	pthread_mutex_lock(&rs->slock);
	ret = rs_do_connect(rs);
	pthread_mutex_unlock(&rs->slock);
	if (ret && errno == EINPROGRESS)
		errno = EAGAIN;
	return ret;
}

int rconnect(int s, const struct sockaddr *addr, socklen_t addrlen)
{
	struct rsock *rs = rs_get(s);
	int ret;

	if (!rs)
		return rs_fail(EBADF);
	if (rs->type == SOCK_DGRAM)
		return ds_connect(rs, addr, addrlen);
	if (!addr || addrlen < sizeof(struct sockaddr_in) || addrlen > sizeof(rs->dst))
		return rs_fail(EINVAL);
	pthread_mutex_lock(&rs->slock);
	if (rs->state == RS_INIT || rs->state == RS_BOUND)
		memcpy(&rs->dst, addr, addrlen);
	ret = rs_do_connect(rs);
	pthread_mutex_unlock(&rs->slock);
	return ret;
}

int raccept(int s, struct sockaddr *addr, socklen_t *addrlen)
{
	struct rsock *ls = rs_get(s), *rs = NULL;
	struct rdma_cm_id *id;
	struct rs_wire_conn c;
	struct rdma_conn_param p;
	int err;

	if (!ls || ls->state != RS_LISTENING)
		return rs_fail(ls ? EINVAL : EBADF);
	for (;;) {
		if (rdma_get_request(ls->id, &id))
			return -1;
		const void *pd = id->event->param.conn.private_data;
		int plen = id->event->param.conn.private_data_len;
		if ((err = rs_conn_check(pd, plen))) {
			/* not an rsocket (or a broken one): turn it away and
			 * wait for the next */
			rs_log("rsocket: a connect request without rsockets' data (%d bytes): rejected", plen);
			rdma_reject(id, NULL, 0);
			rdma_destroy_id(id);
			continue;
		}
		break;
	}
	if (!(rs = rs_new(ls, SOCK_STREAM))) {
		err = ENOMEM;
		goto reject;
	}
	rs->id = id;
	id->context = rs;
	rs->domain = ls->domain;
	rs->fs_flags = ls->fs_flags;
	rs->fd_flags = ls->fd_flags;
	rs->index = id->channel->fd;
	if ((err = rs_tab_set(rs->index, rs))) {
		rs->index = -1;
		goto reject;
	}
	if ((err = rs_create_ep(rs)))
		goto reject;
	rs_save_conn(rs, id->event->param.conn.private_data);
	rs_format_conn(rs, &c);
	p = id->event->param.conn;
	p.private_data = &c;
	p.private_data_len = sizeof(c);
	p.rnr_retry_count = 7;
	/* the QP is ready to send once accept returns; ESTABLISHED is read
	 * later, so that accept never waits on the peer */
	rs_set_fl(id->channel->fd, true);
	if (rdma_accept(id, &p) == 0 || errno == EAGAIN) {
		rs->state = RS_CONNECT_RDWR;
	} else {
		err = errno;
		goto reject;
	}
	if (addr && addrlen)
		rgetpeername(rs->index, addr, addrlen);
	return rs->index;
reject:
	rdma_reject(id, NULL, 0);
	if (rs)
		rs_free(rs);
	else
		rdma_destroy_id(id);
	return rs_fail(err);
}

/* --- data ------------------------------------------------------------------ */

static ssize_t rs_recv_stream(struct rsock *rs, void *buf, size_t len, int flags)
{
	size_t left = len;
	int err = 0;

	if (rs_finish_opening(rs))
		return -1;
	pthread_mutex_lock(&rs->rlock);
	do {
		if (!rs_have_rdata(rs)) {
			if ((err = rs_get_comp(rs, rs_nonblocking(rs, flags), rs_conn_have_rdata)))
				break;
		}
		pthread_mutex_lock(&rs->cq_lock);
		int head = rs->rhead;
		uint32_t off = (uint32_t)rs->rbuf_off, consumed = 0;
		while (left && head != rs->rtail) {
			uint32_t take = rs->rmsg[head] < left ? rs->rmsg[head] : (uint32_t)left;
			uint32_t end = rs->rbuf_size - off;
			uint32_t a = take < end ? take : end;
			memcpy(buf, rs->rbuf + off, a);
			if (a < take)
				memcpy((char *)buf + a, rs->rbuf, take - a);
			off = (off + take) % rs->rbuf_size;
			buf = (char *)buf + take;
			left -= take;
			consumed += take;
			if (flags & MSG_PEEK) {
				head = (head + 1) % (rs->rq_size + 1);
				continue;
			}
			if (take == rs->rmsg[head]) {
				rs->rseq_no++;
				head = (head + 1) % (rs->rq_size + 1);
			} else {
				rs->rmsg[head] -= take;
			}
		}
		if (!(flags & MSG_PEEK)) {
			rs->rhead = head;
			rs->rbuf_off = (int)off;
			rs->rbuf_avail += (int)consumed;
			rs->queued -= consumed;
			rs_update_credits(rs);
		}
		pthread_mutex_unlock(&rs->cq_lock);
		if (flags & MSG_PEEK)
			break;
	} while (left && (flags & MSG_WAITALL) && (rs->state & RS_READABLE));
	pthread_mutex_unlock(&rs->rlock);
	if (left == len && len) {
		if (err)
			return rs_fail(err == EWOULDBLOCK ? EAGAIN : err);
		/* no data and none coming: the error, else end of stream */
		if (rs->state & RS_ERROR)
			return rs_fail(rs->err ? rs->err : ECONNRESET);
	}
	return (ssize_t)(len - left);
}

ssize_t rrecv(int s, void *buf, size_t len, int flags)
{
	struct rsock *rs = rs_get(s);

	if (!rs)
		return rs_fail(EBADF);
	if (rs->type == SOCK_DGRAM)
		return ds_recvfrom(rs, buf, len, flags, NULL, NULL);
	return rs_recv_stream(rs, buf, len, flags);
}

ssize_t rrecvfrom(int s, void *buf, size_t len, int flags, struct sockaddr *src, socklen_t *srclen)
{
	struct rsock *rs = rs_get(s);
	ssize_t n;

	if (!rs)
		return rs_fail(EBADF);
	if (rs->type == SOCK_DGRAM)
		return ds_recvfrom(rs, buf, len, flags, src, srclen);
	n = rs_recv_stream(rs, buf, len, flags);
	if (n > 0 && src && srclen)
		rgetpeername(s, src, srclen);
	return n;
}

/* Scatter: fills each vector in turn, waiting only for the first byte. */
static ssize_t rs_recvv(int s, const struct iovec *iov, int iovcnt, int flags)
{
	ssize_t total = 0, n;

	if (iovcnt < 0 || (iovcnt && !iov))
		return rs_fail(EINVAL);
	for (int i = 0; i < iovcnt; i++) {
		if (!iov[i].iov_len)
			continue;
		n = rrecv(s, iov[i].iov_base, iov[i].iov_len, total ? flags | MSG_DONTWAIT : flags);
		if (n < 0)
			return total ? total : n;
		total += n;
		if ((size_t)n < iov[i].iov_len)
			break;
	}
	return total;
}

ssize_t rrecvmsg(int s, struct msghdr *msg, int flags)
{
	struct rsock *rs = rs_get(s);

	if (!rs)
		return rs_fail(EBADF);
	if (!msg || (msg->msg_control && msg->msg_controllen))
		return rs_fail(ENOTSUP);
	if (rs->type == SOCK_DGRAM)
		return ds_recvmsg(rs, msg, flags);
	ssize_t n = rs_recvv(s, msg->msg_iov, (int)msg->msg_iovlen, flags);
	if (n >= 0 && msg->msg_name && msg->msg_namelen)
		rgetpeername(s, msg->msg_name, &msg->msg_namelen);
	msg->msg_flags = 0;
	return n;
}

ssize_t rread(int s, void *buf, size_t count)
{
	return rrecv(s, buf, count, 0);
}

ssize_t rreadv(int s, const struct iovec *iov, int iovcnt)
{
	return rs_recvv(s, iov, iovcnt, 0);
}

static int rs_send_iomaps(struct rsock *rs, int flags);

/* Why a socket cannot send: its error, ECONNRESET when the peer went,
 * EPIPE when we shut writing down. */
static int rs_write_err(const struct rsock *rs)
{
	if ((rs->state & RS_ERROR) && rs->err)
		return rs->err;
	return (rs->state & RS_CONNECTED) ? EPIPE : ECONNRESET;
}

/* Waits (unless non-blocking) until a write can go, and sizes the next
 * chunk: growing chunks, so that small sends go out at once and large
 * ones overlap the copy with the wire; 0 or an errno. slock held; the
 * caller clamps *x to the send buffer's room under cq_lock. */
static int rs_send_room(struct rsock *rs, int flags, size_t left, uint32_t *chunk, uint32_t *x)
{
	int err;

	if (!(rs->state & RS_WRITABLE))
		return rs_write_err(rs);
	if (!rs_can_send(rs)) {
		if ((err = rs_get_comp(rs, rs_nonblocking(rs, flags), rs_conn_can_send)))
			return err;
		if (!(rs->state & RS_WRITABLE))
			return rs_write_err(rs);
	}
	*x = left > *chunk ? *chunk : (uint32_t)left;
	if (left > *chunk && *chunk < RS_MAX_TRANSFER)
		*chunk <<= 1;
	return 0;
}

/* The stream send of every rsend flavour: len bytes from an iovec. */
static ssize_t rs_sendv_stream(struct rsock *rs, const struct iovec *iov, int iovcnt, int flags)
{
	size_t len = 0, left, off = 0;
	uint32_t chunk = RS_OLAP_START, x;
	int err = 0;

	for (int i = 0; i < iovcnt; i++)
		len += iov[i].iov_len;
	if (rs_finish_opening(rs))
		return -1;
	if (!(rs->state & RS_CONNECTED) && !(rs->state & (RS_DISCONNECTED | RS_ERROR)))
		return rs_fail(ENOTCONN);
	left = len;
	pthread_mutex_lock(&rs->slock);
	if (rs->iomap_pending && (err = rs_send_iomaps(rs, flags)))
		goto out;
	while (left) {
		if ((err = rs_send_room(rs, flags, left, &chunk, &x)))
			break;
		pthread_mutex_lock(&rs->cq_lock);
		if (x > (uint32_t)rs->sbuf_avail)
			x = (uint32_t)rs->sbuf_avail;
		if (x > rs->tsgl[rs->tsge].length)
			x = rs->tsgl[rs->tsge].length;
		err = rs_send_chunk(rs, &iov, &off, x, true, 0, 0);
		pthread_mutex_unlock(&rs->cq_lock);
		if (err) {
			rs_set_error(rs, err);
			break;
		}
		left -= x;
	}
out:
	pthread_mutex_unlock(&rs->slock);
	/* (rsockets raise no SIGPIPE) */
	if (left == len && len && err)
		return rs_fail(err == EWOULDBLOCK ? EAGAIN : err);
	return (ssize_t)(len - left);
}

ssize_t rsend(int s, const void *buf, size_t len, int flags)
{
	struct rsock *rs = rs_get(s);
	struct iovec v = { .iov_base = (void *)buf, .iov_len = len };

	if (!rs)
		return rs_fail(EBADF);
	if (rs->type == SOCK_DGRAM)
		return ds_sendv(rs, &v, 1, flags, NULL, 0);
	return rs_sendv_stream(rs, &v, 1, flags);
}

ssize_t rsendto(int s, const void *buf, size_t len, int flags, const struct sockaddr *to, socklen_t tolen)
{
	struct rsock *rs = rs_get(s);
	struct iovec v = { .iov_base = (void *)buf, .iov_len = len };

	if (!rs)
		return rs_fail(EBADF);
	if (rs->type == SOCK_DGRAM)
		return ds_sendv(rs, &v, 1, flags, to, tolen);
	if (to)
		return rs_fail(EISCONN);
	return rs_sendv_stream(rs, &v, 1, flags);
}

ssize_t rsendmsg(int s, const struct msghdr *msg, int flags)
{
	struct rsock *rs = rs_get(s);

	if (!rs)
		return rs_fail(EBADF);
	if (!msg || (msg->msg_control && msg->msg_controllen))
		return rs_fail(ENOTSUP);
	if ((int)msg->msg_iovlen < 0 || (msg->msg_iovlen && !msg->msg_iov))
		return rs_fail(EINVAL);
	if (rs->type == SOCK_DGRAM)
		return ds_sendv(rs, msg->msg_iov, (int)msg->msg_iovlen, flags, msg->msg_name, msg->msg_namelen);
	return rs_sendv_stream(rs, msg->msg_iov, (int)msg->msg_iovlen, flags);
}

ssize_t rwrite(int s, const void *buf, size_t count)
{
	return rsend(s, buf, count, 0);
}

ssize_t rwritev(int s, const struct iovec *iov, int iovcnt)
{
	struct msghdr m = { .msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)iovcnt };

	if (iovcnt < 0)
		return rs_fail(EINVAL);
	return rsendmsg(s, &m, 0);
}

/* --- shutdown and close ------------------------------------------------------ */

int rshutdown(int s, int how)
{
	struct rsock *rs = rs_get(s);
	uint32_t ctrl;
	int err = 0;

	if (!rs)
		return rs_fail(EBADF);
	if (rs->type == SOCK_DGRAM) {
		ds_shutdown(rs);
		return 0;
	}
	if (how != SHUT_RD && how != SHUT_WR && how != SHUT_RDWR)
		return rs_fail(EINVAL);
	if (!(rs->state & RS_CONNECTED)) {
		if (rs->state & (RS_DISCONNECTED | RS_ERROR))
			return 0;
		return rs_fail(ENOTCONN);
	}
	pthread_mutex_lock(&rs->slock);
	if (how == SHUT_RDWR) {
		ctrl = RS_CTRL_DISCONNECT;
		rs->state &= ~(RS_READABLE | RS_WRITABLE);
	} else if (how == SHUT_WR) {
		rs->state &= ~RS_WRITABLE;
		ctrl = (rs->state & RS_READABLE) ? RS_CTRL_SHUTDOWN : RS_CTRL_DISCONNECT;
	} else {
		rs->state &= ~RS_READABLE;
		if (rs->state & RS_WRITABLE)
			goto out;
		ctrl = RS_CTRL_DISCONNECT;
	}
	if (!rs_ctrl_avail(rs) && (err = rs_process(rs, false, rs_conn_can_send_ctrl)))
		goto out;
	pthread_mutex_lock(&rs->cq_lock);
	if ((rs->state & RS_CONNECTED) && rs_ctrl_avail(rs)) {
		rs->ctrl_seq++;
		err = rs_post_ctrl(rs, rs_imm(RS_OP_CTRL, ctrl));
	}
	pthread_mutex_unlock(&rs->cq_lock);
	if (rs->state & RS_CONNECTED)
		rs_process(rs, false, rs_all_sends_done);
out:
	pthread_mutex_unlock(&rs->slock);
	return err ? rs_fail(err) : 0;
}

int rclose(int s)
{
	struct rsock *rs = rs_get(s);

	if (!rs)
		return rs_fail(EBADF);
	if (rs->type == SOCK_STREAM) {
		if (rs->state & RS_CONNECTED)
			rshutdown(s, SHUT_RDWR);
		else if (rs->state & RS_DISCONNECTED)
			/* the writes we made are the peer's: wait for their
			 * completions before the QP goes */
			rs_process(rs, true, rs_all_sends_done);
	} else {
		ds_shutdown(rs);
	}
	rs_free(rs);
	return 0;
}

/* rgetpeername (peer) and rgetsockname */
static int rs_name(int s, struct sockaddr *addr, socklen_t *addrlen, bool peer)
{
	struct rsock *rs = rs_get(s);

	if (!rs)
		return rs_fail(EBADF);
	if (!addr || !addrlen)
		return rs_fail(EFAULT);
	if (rs->type == SOCK_DGRAM)
		return peer ? ds_getpeername(rs, addr, addrlen) : ds_getsockname(rs, addr, addrlen);
	if (peer && !(rs->state & (RS_CONNECTED | RS_DISCONNECTED | RS_ERROR)))
		return rs_fail(ENOTCONN);
	rs_copy_addr(addr, addrlen, peer ? rdma_get_peer_addr(rs->id) : rdma_get_local_addr(rs->id));
	return 0;
}

int rgetpeername(int s, struct sockaddr *addr, socklen_t *addrlen)
{
	return rs_name(s, addr, addrlen, true);
}

int rgetsockname(int s, struct sockaddr *addr, socklen_t *addrlen)
{
	return rs_name(s, addr, addrlen, false);
}

void rs_copy_addr(struct sockaddr *dst, socklen_t *len, const struct sockaddr *src)
{
	socklen_t n = src->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);

	memcpy(dst, src, *len < n ? *len : n);
	*len = n;
}

/* --- iomap ---------------------------------------------------------------- */

/* Sends the queued iomap descriptors; slock held. */
static int rs_send_iomaps(struct rsock *rs, int flags)
{
	int err = 0;

	pthread_mutex_lock(&rs->map_lock);
	for (int i = 0; i < rs->nmaps && !err; i++) {
		struct rs_map *m = &rs->maps[i];
		struct rs_wire_iomap w;
		if (!m->mr || !m->queued)
			continue;
		if (!rs_can_send(rs)) {
			if ((err = rs_get_comp(rs, rs_nonblocking(rs, flags), rs_conn_can_send)))
				break;
			if (!(rs->state & RS_WRITABLE)) {
				err = ECONNRESET;
				break;
			}
		}
		w.offset = (uint64_t)m->offset;
		w.sge.addr = (uintptr_t)m->mr->addr;
		w.sge.length = (uint32_t)m->mr->length;
		w.sge.key = m->mr->rkey;
		if (rs->swap) {
			w.offset = __builtin_bswap64(w.offset);
			w.sge.addr = __builtin_bswap64(w.sge.addr);
			w.sge.length = __builtin_bswap32(w.sge.length);
			w.sge.key = __builtin_bswap32(w.sge.key);
		}
		struct iovec v = { .iov_base = &w, .iov_len = sizeof(w) };
		const struct iovec *vp = &v;
		size_t off = 0;
		pthread_mutex_lock(&rs->cq_lock);
		int n = rs_stage(rs, sizeof(w));
		rs_copy_in((void *)(uintptr_t)rs->ssgl[0].addr, &vp, &off, rs->ssgl[0].length);
		if (n == 2)
			rs_copy_in(rs->sbuf, &vp, &off, rs->ssgl[1].length);
		rs->sqe_avail--;
		rs->sbuf_avail -= (int)sizeof(w);
		rs->sseq_no++;
		uint32_t imm = rs_imm(RS_OP_IOMAP_SGL, m->slot);
		err = rs_post(rs, rs->ssgl, n, imm, IBV_WR_RDMA_WRITE_WITH_IMM, imm,
			      sizeof(w) <= rs->sq_inline ? IBV_SEND_INLINE : 0,
			      rs->remote_iomap.addr + sizeof(w) * (uint32_t)m->slot, rs->remote_iomap.key);
		rs_stage_done(rs, n, sizeof(w));
		pthread_mutex_unlock(&rs->cq_lock);
		m->queued = false;
	}
	rs->iomap_pending = false;
	for (int i = 0; i < rs->nmaps; i++)
		if (rs->maps[i].mr && rs->maps[i].queued)
			rs->iomap_pending = true;
	pthread_mutex_unlock(&rs->map_lock);
	return err;
}

off_t riomap(int s, void *buf, size_t len, int prot, int flags, off_t offset)
{
	struct rsock *rs = rs_get(s);
	struct rs_map *m = NULL;
	int access = IBV_ACCESS_LOCAL_WRITE;

	(void)flags;
	if (!rs)
		return rs_fail(EBADF);
	if (rs->type != SOCK_STREAM || !rs->id->qp || (prot & ~(PROT_WRITE | PROT_NONE)) || !buf || !len)
		return rs_fail(EINVAL);
	pthread_mutex_lock(&rs->map_lock);
	int slot = -1;
	if (prot & PROT_WRITE) {
		/* a slot of the peer's iomap, which the peer sized */
		for (int i = 0; i < (int)rs->remote_iomap.length && slot < 0; i++) {
			bool taken = false;
			for (int j = 0; j < rs->nmaps; j++)
				if (rs->maps[j].mr && rs->maps[j].slot == i)
					taken = true;
			if (!taken)
				slot = i;
		}
		if (slot < 0) {
			pthread_mutex_unlock(&rs->map_lock);
			return rs_fail(ENOMEM);
		}
		access |= IBV_ACCESS_REMOTE_WRITE;
	}
	for (int i = 0; i < rs->nmaps && !m; i++)
		if (!rs->maps[i].mr)
			m = &rs->maps[i];
	if (!m) {
		struct rs_map *n = realloc(rs->maps, sizeof(*n) * (size_t)(rs->nmaps + 1));
		if (!n) {
			pthread_mutex_unlock(&rs->map_lock);
			return rs_fail(ENOMEM);
		}
		rs->maps = n;
		m = &rs->maps[rs->nmaps++];
	}
	memset(m, 0, sizeof(*m));
	if (!(m->mr = ibv_reg_mr(rs->id->qp->pd, buf, len, access))) {
		pthread_mutex_unlock(&rs->map_lock);
		return -1;
	}
	m->offset = offset == -1 ? (off_t)(uintptr_t)buf : offset;
	m->slot = slot;
	m->queued = slot >= 0;
	if (m->queued)
		rs->iomap_pending = true;
	pthread_mutex_unlock(&rs->map_lock);
	return m->offset;
}

int riounmap(int s, void *buf, size_t len)
{
	struct rsock *rs = rs_get(s);
	int err = EINVAL;

	if (!rs)
		return rs_fail(EBADF);
	pthread_mutex_lock(&rs->map_lock);
	for (int i = 0; i < rs->nmaps; i++) {
		struct rs_map *m = &rs->maps[i];
		if (m->mr && m->mr->addr == buf && m->mr->length == len) {
			ibv_dereg_mr(m->mr);
			m->mr = NULL;
			err = 0;
			break;
		}
	}
	pthread_mutex_unlock(&rs->map_lock);
	return err ? rs_fail(err) : 0;
}

/* the peer's iomap entry covering offset, copied out (the peer may
 * rewrite the slot at any time) */
static bool rs_find_iomap(struct rsock *rs, off_t offset, struct rs_wire_iomap *out)
{
	for (int i = 0; i < rs->tiomap_size; i++) {
		struct rs_wire_iomap w;
		memcpy(&w, (const void *)&rs->tiomap[i], sizeof(w));
		if (w.sge.length && (uint64_t)offset >= w.offset && (uint64_t)offset - w.offset < w.sge.length) {
			*out = w;
			return true;
		}
	}
	return false;
}

size_t riowrite(int s, const void *buf, size_t count, off_t offset, int flags)
{
	struct rsock *rs = rs_get(s);
	struct rs_wire_iomap iom;
	bool have = false;
	size_t left = count;
	uint32_t chunk = RS_OLAP_START, x;
	int err = 0;

	if (!rs)
		return (size_t)rs_fail(EBADF);
	if (rs->type != SOCK_STREAM)
		return (size_t)rs_fail(EOPNOTSUPP);
	if (rs_finish_opening(rs))
		return (size_t)-1;
	struct iovec v = { .iov_base = (void *)buf, .iov_len = count };
	const struct iovec *vp = &v;
	size_t voff = 0;
	pthread_mutex_lock(&rs->slock);
	if (rs->iomap_pending && (err = rs_send_iomaps(rs, flags)))
		goto out;
	while (left) {
		if (!have || (uint64_t)offset - iom.offset >= iom.sge.length) {
			if (!(have = rs_find_iomap(rs, offset, &iom))) {
				if (left == count)
					err = EINVAL;
				break;
			}
		}
		if ((err = rs_send_room(rs, flags, left, &chunk, &x)))
			break;
		pthread_mutex_lock(&rs->cq_lock);
		if (x > (uint32_t)rs->sbuf_avail)
			x = (uint32_t)rs->sbuf_avail;
		if (x > iom.sge.length - ((uint64_t)offset - iom.offset))
			x = (uint32_t)(iom.sge.length - ((uint64_t)offset - iom.offset));
		err = rs_send_chunk(rs, &vp, &voff, x, false, iom.sge.addr + ((uint64_t)offset - iom.offset),
				    iom.sge.key);
		pthread_mutex_unlock(&rs->cq_lock);
		if (err) {
			rs_set_error(rs, err);
			break;
		}
		left -= x;
		offset += x;
	}
out:
	pthread_mutex_unlock(&rs->slock);
	if (left == count && count && err)
		return (size_t)rs_fail(err == EWOULDBLOCK ? EAGAIN : err);
	return count - left;
}

int rc_complete(struct rdma_cm_id *id)
{
	return rc_id_complete(to_rid(id), RDMA_CM_EVENT_ESTABLISHED);
}

void rs_log_bad(struct rsock *rs, uint32_t imm)
{
	rs_log("rsocket %d: the peer sent a message rsockets do not allow (op %u, data %u): connection reset",
	       rs->index, rs_imm_op(imm), rs_imm_data(imm));
}

int rs_poll_connect(struct rsock *rs)
{
	int ret;

	pthread_mutex_lock(&rs->slock);
	ret = rs_do_connect(rs);
	pthread_mutex_unlock(&rs->slock);
	return ret;
}
