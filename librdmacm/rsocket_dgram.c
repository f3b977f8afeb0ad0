/* Datagram rsockets over UD, as rdma-core's speak them.
 *
 * A datagram rsocket is a real UDP socket (its number, and how a peer
 * first reaches it) plus one UD QP per local address it sends from, bound
 * in the UDP port space to the UDP socket's address. Every UD message
 * starts with a header naming its sender's socket address (struct ds_hdr,
 * 8 bytes for IPv4, 24 for IPv6). A peer whose QP we do not know yet is
 * sent to over UDP: struct ds_udp_hdr (our QPN and address) then the data;
 * its answer to a UDP DATA is a UDP CTRL with its own QPN, after which
 * both sides have an address handle and talk over UD.
 *
 * rdma-core runs a service thread that reads the UDP sockets and forwards
 * what arrives through the receiver's own QP; here the socket's own calls
 * (send, receive, poll) read its UDP socket, and a datagram that came by
 * UDP is queued locally: the peer cannot tell the difference.
 */
#include "rsocket_int.h"

#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#define DS_UDP_TAG 0x55555555u
#define DS_HDR4 8
#define DS_HDR6 24
#define DS_UDP_HDR4 16
#define DS_UDP_HDR6 28
#define DS_GRH 40

struct ds_hdr {
	uint8_t version; /* 4 or 6 */
	uint8_t length;  /* DS_HDR4, DS_HDR6 */
	uint16_t port;   /* network order */
	union {
		uint32_t ipv4;
		struct {
			uint32_t flowinfo;
			uint8_t addr[16];
		} ipv6;
	} addr;
};

struct ds_udp_hdr {
	uint32_t tag; /* DS_UDP_TAG, big-endian */
	uint8_t version, op, length, reserved;
	uint32_t qpn; /* big-endian, 24 bits */
	union {
		uint32_t ipv4;
		uint8_t ipv6[16];
	} addr;
};

struct ds_qp {
	struct rdma_cm_id *id;
	struct ds_hdr hdr; /* our address, as our messages carry it */
	uint8_t *rbuf;     /* rq_size slots of RS_SNDLOWAT, then the GRH */
	struct ibv_mr *rmr, *smr;
	bool armed;
	unsigned unacked;
	struct ds_qp *next;
};

struct ds_dest {
	struct sockaddr_storage addr;
	struct ds_qp *qp;
	struct ibv_ah *ah;
	uint32_t qpn;
	struct ds_dest *next;
};

/* a received datagram: in a QP's receive slot, or (by UDP) a copy */
struct ds_msg {
	struct ds_qp *qp;
	uint32_t off, len;
	uint8_t *copy;
	struct sockaddr_storage src;
};

struct ds_sock {
	struct ds_qp *qps;
	struct ds_dest *dests, *conn;
	uint8_t *sbuf; /* sq_size slots of RS_SNDLOWAT */
	int *free_slots, nfree;
	struct ds_msg *msgs; /* a ring of rq_size + 1 */
	int head, tail;
};

static socklen_t sa_len(const struct sockaddr_storage *a)
{
	return a->ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
}

static bool same_addr(const struct sockaddr_storage *a, const struct sockaddr *b)
{
	if (a->ss_family != b->sa_family)
		return false;
	if (b->sa_family == AF_INET) {
		const struct sockaddr_in *x = (const void *)a, *y = (const void *)b;
		return x->sin_port == y->sin_port && x->sin_addr.s_addr == y->sin_addr.s_addr;
	}
	const struct sockaddr_in6 *x = (const void *)a, *y = (const void *)b;
	return x->sin6_port == y->sin6_port && !memcmp(&x->sin6_addr, &y->sin6_addr, 16);
}

static void fmt_hdr(struct ds_hdr *h, const struct sockaddr_storage *a)
{
	memset(h, 0, sizeof(*h));
	if (a->ss_family == AF_INET) {
		const struct sockaddr_in *s = (const void *)a;
		h->version = 4;
		h->length = DS_HDR4;
		h->port = s->sin_port;
		h->addr.ipv4 = s->sin_addr.s_addr;
	} else {
		const struct sockaddr_in6 *s = (const void *)a;
		h->version = 6;
		h->length = DS_HDR6;
		h->port = s->sin6_port;
		h->addr.ipv6.flowinfo = s->sin6_flowinfo;
		memcpy(h->addr.ipv6.addr, &s->sin6_addr, 16);
	}
}

static void hdr_addr(const struct ds_hdr *h, struct sockaddr_storage *a)
{
	memset(a, 0, sizeof(*a));
	if (h->version == 4) {
		struct sockaddr_in *s = (void *)a;
		s->sin_family = AF_INET;
		s->sin_port = h->port;
		s->sin_addr.s_addr = h->addr.ipv4;
	} else {
		struct sockaddr_in6 *s = (void *)a;
		s->sin6_family = AF_INET6;
		s->sin6_port = h->port;
		s->sin6_flowinfo = h->addr.ipv6.flowinfo;
		memcpy(&s->sin6_addr, h->addr.ipv6.addr, 16);
	}
}

int ds_init(struct rsock *rs, int domain)
{
	if ((rs->udp_sock = socket(domain, SOCK_DGRAM | SOCK_CLOEXEC, 0)) < 0)
		return errno;
	if ((rs->epfd = epoll_create1(EPOLL_CLOEXEC)) < 0)
		return errno;
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = NULL };
	if (epoll_ctl(rs->epfd, EPOLL_CTL_ADD, rs->udp_sock, &ev))
		return errno;
	rs->index = rs->udp_sock;
	return 0;
}

/* the buffers, on the first bind, connect or send */
static int ds_init_ep(struct rsock *rs)
{
	struct ds_sock *ds;

	if (rs->ds)
		return 0;
	if (rs->rq_size > rs->rbuf_size / RS_SNDLOWAT)
		rs->rq_size = (uint16_t)(rs->rbuf_size / RS_SNDLOWAT);
	if (rs->sq_size > rs->sbuf_size / RS_SNDLOWAT)
		rs->sq_size = (uint16_t)(rs->sbuf_size / RS_SNDLOWAT);
	if (rs->rq_size < 2)
		rs->rq_size = 2;
	if (rs->sq_size < 2)
		rs->sq_size = 2;
	rs->rbuf_size = rs->rq_size * RS_SNDLOWAT;
	rs->sbuf_size = rs->sq_size * RS_SNDLOWAT;
	if (!(ds = calloc(1, sizeof(*ds))))
		return ENOMEM;
	ds->sbuf = calloc(rs->sq_size, RS_SNDLOWAT);
	ds->free_slots = calloc(rs->sq_size, sizeof(int));
	ds->msgs = calloc((size_t)rs->rq_size + 1, sizeof(*ds->msgs));
	if (!ds->sbuf || !ds->free_slots || !ds->msgs) {
		free(ds->sbuf);
		free(ds->free_slots);
		free(ds->msgs);
		free(ds);
		return ENOMEM;
	}
	for (int i = 0; i < rs->sq_size; i++)
		ds->free_slots[ds->nfree++] = i;
	rs->ds = ds;
	rs->state = RS_READABLE | RS_WRITABLE;
	return 0;
}

static int ds_post_recv(struct rsock *rs, struct ds_qp *q, uint32_t off)
{
	struct ibv_sge sge[2] = {
		{ .addr = (uintptr_t)q->rbuf + rs->rbuf_size, .length = DS_GRH, .lkey = q->rmr->lkey },
		{ .addr = (uintptr_t)q->rbuf + off, .length = RS_SNDLOWAT, .lkey = q->rmr->lkey },
	};
	struct ibv_recv_wr wr = { .wr_id = RS_WR_RECV | off, .sg_list = sge, .num_sge = 2 }, *bad;

	return ibv_post_recv(q->id->qp, &wr, &bad);
}

static void ds_free_qp(struct rsock *rs, struct ds_qp *q)
{
	if (q->id) {
		if (q->id->recv_cq && q->unacked)
			ibv_ack_cq_events(q->id->recv_cq, q->unacked);
		if (q->id->recv_cq_channel)
			epoll_ctl(rs->epfd, EPOLL_CTL_DEL, q->id->recv_cq_channel->fd, NULL);
		if (q->rmr)
			ibv_dereg_mr(q->rmr);
		if (q->smr)
			ibv_dereg_mr(q->smr);
		rdma_destroy_qp(q->id);
		rdma_destroy_id(q->id);
	}
	free(q->rbuf);
	free(q);
}

/* a UD QP bound to src (the UDP socket's address on that interface) */
static int ds_create_qp(struct rsock *rs, const struct sockaddr_storage *src, struct ds_qp **out)
{
	struct ds_qp *q = calloc(1, sizeof(*q));
	struct ibv_qp_init_attr qa;
	int err = 0;

	if (!q)
		return ENOMEM;
	if (rdma_create_id(NULL, &q->id, q, RDMA_PS_UDP) || rdma_bind_addr(q->id, (struct sockaddr *)src)) {
		err = errno;
		goto fail;
	}
	if (!q->id->verbs) {
		/* an address no RDMA device answers for (the kernel's
		 * source address for dst, when the socket is not bound) */
		err = EADDRNOTAVAIL;
		goto fail;
	}
	fmt_hdr(&q->hdr, src);
	if (!(q->id->recv_cq_channel = ibv_create_comp_channel(q->id->verbs)) ||
	    !(q->id->recv_cq = ibv_create_cq(q->id->verbs, rs->sq_size + rs->rq_size, q, q->id->recv_cq_channel, 0))) {
		err = errno ? errno : ENOMEM;
		goto fail;
	}
	q->id->send_cq_channel = q->id->recv_cq_channel;
	q->id->send_cq = q->id->recv_cq;
	rs_set_fl(q->id->recv_cq_channel->fd, true);
	memset(&qa, 0, sizeof(qa));
	qa.qp_context = q;
	qa.send_cq = qa.recv_cq = q->id->recv_cq;
	qa.qp_type = IBV_QPT_UD;
	qa.sq_sig_all = 1;
	qa.cap.max_send_wr = rs->sq_size;
	qa.cap.max_recv_wr = rs->rq_size;
	qa.cap.max_send_sge = 1;
	qa.cap.max_recv_sge = 2;
	qa.cap.max_inline_data = rs->sq_inline;
	if (rdma_create_qp(q->id, NULL, &qa)) {
		err = errno;
		goto fail;
	}
	rs->sq_inline = (uint16_t)qa.cap.max_inline_data;
	if (!(q->rbuf = calloc(1, rs->rbuf_size + DS_GRH)) ||
	    !(q->rmr = ibv_reg_mr(q->id->qp->pd, q->rbuf, rs->rbuf_size + DS_GRH, IBV_ACCESS_LOCAL_WRITE)) ||
	    !(q->smr = ibv_reg_mr(q->id->qp->pd, rs->ds->sbuf, rs->sbuf_size, IBV_ACCESS_LOCAL_WRITE))) {
		err = errno ? errno : ENOMEM;
		goto fail;
	}
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = q };
	if (epoll_ctl(rs->epfd, EPOLL_CTL_ADD, q->id->recv_cq_channel->fd, &ev)) {
		err = errno;
		goto fail;
	}
	for (int i = 0; i < rs->rq_size; i++)
		if ((err = ds_post_recv(rs, q, (uint32_t)i * RS_SNDLOWAT)))
			goto fail;
	q->next = rs->ds->qps;
	rs->ds->qps = q;
	*out = q;
	return 0;
fail:
	ds_free_qp(rs, q);
	return err ? err : EIO;
}

/* the address we send to dst from: the UDP socket's, with the interface's
 * address if it is bound to any (or loopback) */
static int ds_src_addr(struct rsock *rs, const struct sockaddr *dst, socklen_t dlen, struct sockaddr_storage *src)
{
	socklen_t len = sizeof(*src);

	if (getsockname(rs->udp_sock, (struct sockaddr *)src, &len))
		return errno;
	bool any = src->ss_family == AF_INET
			   ? (((struct sockaddr_in *)src)->sin_addr.s_addr == htonl(INADDR_ANY) ||
			      ((struct sockaddr_in *)src)->sin_addr.s_addr == htonl(INADDR_LOOPBACK))
			   : (IN6_IS_ADDR_UNSPECIFIED(&((struct sockaddr_in6 *)src)->sin6_addr) ||
			      IN6_IS_ADDR_LOOPBACK(&((struct sockaddr_in6 *)src)->sin6_addr));
	if (!any)
		return 0;
	uint16_t port = ((struct sockaddr_in *)src)->sin_port;
	int s = socket(dst->sa_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (s < 0)
		return errno;
	len = sizeof(*src);
	int err = connect(s, dst, dlen) || getsockname(s, (struct sockaddr *)src, &len) ? errno : 0;
	close(s);
	((struct sockaddr_in *)src)->sin_port = port; /* sin6_port is at the same place */
	return err;
}

static int ds_get_dest(struct rsock *rs, const struct sockaddr *addr, socklen_t len, struct ds_dest **out)
{
	struct sockaddr_storage src;
	struct ds_qp *q;
	struct ds_dest *d;
	int err;

	if (len > sizeof(d->addr) || (addr->sa_family != AF_INET && addr->sa_family != AF_INET6))
		return EINVAL;
	for (d = rs->ds->dests; d; d = d->next)
		if (same_addr(&d->addr, addr)) {
			*out = d;
			return 0;
		}
	/* a UDP socket not yet bound gets its port now, as sendto would */
	struct sockaddr_storage me;
	socklen_t ml = sizeof(me);
	if (getsockname(rs->udp_sock, (struct sockaddr *)&me, &ml) == 0 && ((struct sockaddr_in *)&me)->sin_port == 0) {
		memset(&me, 0, sizeof(me));
		me.ss_family = addr->sa_family;
		if (bind(rs->udp_sock, (struct sockaddr *)&me, sa_len(&me)))
			return errno;
	}
	if ((err = ds_src_addr(rs, addr, len, &src)))
		return err;
	for (q = rs->ds->qps; q; q = q->next)
		if (same_addr(&src, rdma_get_local_addr(q->id)))
			break;
	if (!q && (err = ds_create_qp(rs, &src, &q)))
		return err;
	if (!(d = calloc(1, sizeof(*d))))
		return ENOMEM;
	memcpy(&d->addr, addr, len);
	d->qp = q;
	d->next = rs->ds->dests;
	rs->ds->dests = d;
	*out = d;
	return 0;
}

/* an address handle to d's peer QP qpn, resolved as the CM resolves it */
static void ds_create_ah(struct rsock *rs, struct ds_dest *d, uint32_t qpn)
{
	struct rdma_cm_id *id;
	struct sockaddr_storage src;
	struct ibv_ah_attr a;

	if (d->ah) {
		ibv_destroy_ah(d->ah);
		d->ah = NULL;
	}
	if (rdma_create_id(NULL, &id, NULL, RDMA_PS_UDP))
		return;
	memcpy(&src, rdma_get_local_addr(d->qp->id), sa_len(&d->addr));
	((struct sockaddr_in *)&src)->sin_port = 0;
	if (rdma_resolve_addr(id, (struct sockaddr *)&src, (struct sockaddr *)&d->addr, 2000) ||
	    rdma_resolve_route(id, 2000) || !id->route.num_paths)
		goto out;
	struct ibv_sa_path_rec *p = id->route.path_rec;
	memset(&a, 0, sizeof(a));
	/* with a GRH always: an IB port reaches another only by its GID
	 * here, and RoCE needs one anyway */
	union ibv_gid g;
	a.is_global = 1;
	a.grh.dgid = p->dgid;
	a.grh.flow_label = be32toh(p->flow_label);
	a.grh.hop_limit = p->hop_limit > 1 ? p->hop_limit : 64;
	a.grh.traffic_class = p->traffic_class;
	for (int i = 0; i < 16; i++)
		if (!ibv_query_gid(d->qp->id->verbs, d->qp->id->port_num, i, &g) && !memcmp(&g, &p->sgid, sizeof(g))) {
			a.grh.sgid_index = (uint8_t)i;
			break;
		}
	a.dlid = be16toh(p->dlid);
	a.sl = p->sl;
	a.port_num = d->qp->id->port_num;
	d->qpn = qpn;
	d->ah = ibv_create_ah(d->qp->id->pd, &a);
	if (!d->ah)
		rs_log("rsocket %d: no address handle for the peer's QP %u: %s", rs->index, qpn, strerror(errno));
out:
	rdma_destroy_id(id);
}

static ssize_t ds_send_udp(struct rsock *rs, struct ds_dest *d, const struct iovec *iov, int iovcnt, uint8_t op)
{
	struct ds_udp_hdr h = { 0 };
	struct iovec v[9];
	struct msghdr m = { 0 };

	if (iovcnt > 8)
		return rs_fail(ENOTSUP);
	h.tag = htobe32(DS_UDP_TAG);
	h.version = d->qp->hdr.version;
	h.op = op;
	h.qpn = htobe32(d->qp->id->qp->qp_num & 0xffffff);
	if (h.version == 4) {
		h.length = DS_UDP_HDR4;
		h.addr.ipv4 = d->qp->hdr.addr.ipv4;
	} else {
		h.length = DS_UDP_HDR6;
		memcpy(h.addr.ipv6, d->qp->hdr.addr.ipv6.addr, 16);
	}
	v[0].iov_base = &h;
	v[0].iov_len = h.length;
	for (int i = 0; i < iovcnt; i++)
		v[i + 1] = iov[i];
	m.msg_name = &d->addr;
	m.msg_namelen = sa_len(&d->addr);
	m.msg_iov = v;
	m.msg_iovlen = (size_t)iovcnt + 1;
	ssize_t n = sendmsg(rs->udp_sock, &m, MSG_DONTWAIT);
	return n > 0 ? n - h.length : n;
}

/* Reads what the UDP socket holds: DATA is answered with our QPN and
 * queued, CTRL tells a peer's QPN. */
static void ds_udp_input(struct rsock *rs)
{
	static __thread uint8_t buf[RS_SNDLOWAT + DS_UDP_HDR6];
	struct ds_sock *ds = rs->ds;

	for (;;) {
		struct sockaddr_storage from;
		socklen_t fl = sizeof(from);
		ssize_t n = recvfrom(rs->udp_sock, buf, sizeof(buf), MSG_DONTWAIT, (struct sockaddr *)&from, &fl);
		if (n < 0)
			return;
		struct ds_udp_hdr h;
		if (n < DS_UDP_HDR4)
			continue;
		memcpy(&h, buf, n < (ssize_t)sizeof(h) ? (size_t)n : sizeof(h));
		if (be32toh(h.tag) != DS_UDP_TAG ||
		    !((h.version == 4 && from.ss_family == AF_INET && h.length == DS_UDP_HDR4) ||
		      (h.version == 6 && from.ss_family == AF_INET6 && h.length == DS_UDP_HDR6)) ||
		    n < h.length || (h.op != RS_OP_DATA && h.op != RS_OP_CTRL))
			continue; /* not rsockets' */
		struct ds_dest *d;
		if (ds_get_dest(rs, (struct sockaddr *)&from, fl, &d))
			continue;
		uint32_t qpn = be32toh(h.qpn) & 0xffffff;
		if (h.op == RS_OP_DATA)
			ds_send_udp(rs, d, NULL, 0, RS_OP_CTRL);
		if (!d->ah || d->qpn != qpn)
			ds_create_ah(rs, d, qpn);
		if (h.op != RS_OP_DATA)
			continue;
		int next = (ds->tail + 1) % (rs->rq_size + 1);
		if (next == ds->head)
			continue; /* no room: dropped, as a full UDP socket would */
		struct ds_msg *m = &ds->msgs[ds->tail];
		memset(m, 0, sizeof(*m));
		m->len = (uint32_t)(n - h.length);
		if (!(m->copy = malloc(m->len ? m->len : 1)))
			continue;
		memcpy(m->copy, buf + h.length, m->len);
		m->src = from;
		ds->tail = next;
	}
}

static void ds_poll_cqs(struct rsock *rs)
{
	struct ds_sock *ds = rs->ds;
	struct ibv_wc wc;

	for (struct ds_qp *q = ds->qps; q; q = q->next) {
		while (ibv_poll_cq(q->id->recv_cq, 1, &wc) == 1) {
			if (!(wc.wr_id & RS_WR_RECV)) {
				ds->free_slots[ds->nfree++] = (int)(uint32_t)wc.wr_id;
				continue;
			}
			uint32_t off = (uint32_t)wc.wr_id;
			const struct ds_hdr *h = (const void *)(q->rbuf + off);
			int next = (ds->tail + 1) % (rs->rq_size + 1);
			bool ok = wc.status == IBV_WC_SUCCESS && wc.byte_len >= DS_GRH + DS_HDR4 &&
				  ((h->version == 4 && h->length == DS_HDR4) || (h->version == 6 && h->length == DS_HDR6)) &&
				  wc.byte_len - DS_GRH >= h->length;
			if (!ok || next == ds->head) {
				if (wc.status != IBV_WC_WR_FLUSH_ERR)
					ds_post_recv(rs, q, off);
				continue;
			}
			struct ds_msg *m = &ds->msgs[ds->tail];
			memset(m, 0, sizeof(*m));
			m->qp = q;
			m->off = off;
			m->len = wc.byte_len - DS_GRH;
			ds->tail = next;
		}
	}
}

static void ds_arm(struct rsock *rs)
{
	for (struct ds_qp *q = rs->ds ? rs->ds->qps : NULL; q; q = q->next)
		if (!q->armed) {
			ibv_req_notify_cq(q->id->recv_cq, 0);
			q->armed = true;
		}
}

void ds_poll_woken(struct rsock *rs)
{
	struct ibv_cq *cq;
	void *ctx;

	pthread_mutex_lock(&rs->cq_lock);
	for (struct ds_qp *q = rs->ds ? rs->ds->qps : NULL; q; q = q->next)
		while (ibv_get_cq_event(q->id->recv_cq_channel, &cq, &ctx) == 0) {
			q->armed = false;
			if (++q->unacked >= 64) {
				ibv_ack_cq_events(q->id->recv_cq, q->unacked);
				q->unacked = 0;
			}
		}
	pthread_mutex_unlock(&rs->cq_lock);
}

static void ds_progress(struct rsock *rs)
{
	pthread_mutex_lock(&rs->cq_lock);
	if (rs->ds) {
		ds_udp_input(rs);
		ds_poll_cqs(rs);
	}
	pthread_mutex_unlock(&rs->cq_lock);
}

/* waits until test holds: 0, or EWOULDBLOCK */
static int ds_wait(struct rsock *rs, bool nonblock, bool (*test)(struct rsock *))
{
	for (;;) {
		ds_progress(rs);
		if (test(rs))
			return 0;
		if (nonblock)
			return EWOULDBLOCK;
		pthread_mutex_lock(&rs->cq_lock);
		ds_arm(rs);
		pthread_mutex_unlock(&rs->cq_lock);
		ds_progress(rs);
		if (test(rs))
			return 0;
		struct pollfd p = { .fd = rs->epfd, .events = POLLIN };
		poll(&p, 1, 100);
		ds_poll_woken(rs);
	}
}

static bool ds_have_msg(struct rsock *rs)
{
	return rs->ds && rs->ds->head != rs->ds->tail;
}

static bool ds_can_send(struct rsock *rs)
{
	return rs->ds && rs->ds->nfree > 0;
}

void ds_free(struct rsock *rs)
{
	struct ds_sock *ds = rs->ds;

	if (rs->index >= 0)
		rs_tab_set(rs->index, NULL);
	if (ds) {
		while (ds->head != ds->tail) {
			free(ds->msgs[ds->head].copy);
			ds->head = (ds->head + 1) % (rs->rq_size + 1);
		}
		for (struct ds_dest *d = ds->dests, *n; d; d = n) {
			n = d->next;
			if (d->ah)
				ibv_destroy_ah(d->ah);
			free(d);
		}
		for (struct ds_qp *q = ds->qps, *n; q; q = n) {
			n = q->next;
			ds_free_qp(rs, q);
		}
		free(ds->sbuf);
		free(ds->free_slots);
		free(ds->msgs);
		free(ds);
	}
	if (rs->udp_sock >= 0)
		close(rs->udp_sock);
	if (rs->epfd >= 0)
		close(rs->epfd);
}

int ds_bind(struct rsock *rs, const struct sockaddr *addr, socklen_t len)
{
	int err;

	if ((err = ds_init_ep(rs)))
		return rs_fail(err);
	return bind(rs->udp_sock, addr, len);
}

int ds_connect(struct rsock *rs, const struct sockaddr *addr, socklen_t len)
{
	int err;

	if ((err = ds_init_ep(rs)))
		return rs_fail(err);
	if (connect(rs->udp_sock, addr, len))
		return -1;
	pthread_mutex_lock(&rs->cq_lock);
	err = ds_get_dest(rs, addr, len, &rs->ds->conn);
	pthread_mutex_unlock(&rs->cq_lock);
	return err ? rs_fail(err) : 0;
}

ssize_t ds_sendv(struct rsock *rs, const struct iovec *iov, int iovcnt, int flags, const struct sockaddr *to,
		 socklen_t tolen)
{
	struct ds_dest *d;
	size_t len = 0;
	int err;

	if ((err = ds_init_ep(rs)))
		return rs_fail(err);
	if (!(rs->state & RS_WRITABLE))
		return rs_fail(EPIPE);
	for (int i = 0; i < iovcnt; i++)
		len += iov[i].iov_len;
	ds_progress(rs);
	pthread_mutex_lock(&rs->slock);
	pthread_mutex_lock(&rs->cq_lock);
	if (to)
		err = ds_get_dest(rs, to, tolen, &d);
	else if (!(d = rs->ds->conn))
		err = EDESTADDRREQ;
	pthread_mutex_unlock(&rs->cq_lock);
	if (err) {
		pthread_mutex_unlock(&rs->slock);
		return rs_fail(err);
	}
	if (len + d->qp->hdr.length > RS_SNDLOWAT) {
		pthread_mutex_unlock(&rs->slock);
		return rs_fail(EMSGSIZE);
	}
	if (!d->ah) {
		/* the peer's QP is not known yet: by UDP, and it will say */
		ssize_t n = ds_send_udp(rs, d, iov, iovcnt, RS_OP_DATA);
		pthread_mutex_unlock(&rs->slock);
		return n;
	}
	if ((err = ds_wait(rs, (rs->fs_flags & O_NONBLOCK) || (flags & MSG_DONTWAIT), ds_can_send))) {
		pthread_mutex_unlock(&rs->slock);
		return rs_fail(err == EWOULDBLOCK ? EAGAIN : err);
	}
	pthread_mutex_lock(&rs->cq_lock);
	int slot = rs->ds->free_slots[--rs->ds->nfree];
	uint8_t *p = rs->ds->sbuf + (size_t)slot * RS_SNDLOWAT;
	memcpy(p, &d->qp->hdr, d->qp->hdr.length);
	size_t off = d->qp->hdr.length;
	for (int i = 0; i < iovcnt; i++) {
		memcpy(p + off, iov[i].iov_base, iov[i].iov_len);
		off += iov[i].iov_len;
	}
	struct ibv_sge sge = { .addr = (uintptr_t)p, .length = (uint32_t)off, .lkey = d->qp->smr->lkey };
	struct ibv_send_wr wr = { 0 }, *bad;
	wr.wr_id = (uint64_t)slot;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_SEND;
	wr.send_flags = off <= rs->sq_inline ? IBV_SEND_INLINE : 0;
	wr.wr.ud.ah = d->ah;
	wr.wr.ud.remote_qpn = d->qpn;
	wr.wr.ud.remote_qkey = RDMA_UDP_QKEY;
	err = ibv_post_send(d->qp->id->qp, &wr, &bad);
	if (err)
		rs->ds->free_slots[rs->ds->nfree++] = slot;
	pthread_mutex_unlock(&rs->cq_lock);
	pthread_mutex_unlock(&rs->slock);
	return err ? rs_fail(err) : (ssize_t)len;
}

ssize_t ds_recvfrom(struct rsock *rs, void *buf, size_t len, int flags, struct sockaddr *src, socklen_t *srclen)
{
	int err;

	if ((err = ds_init_ep(rs)))
		return rs_fail(err);
	if (!(rs->state & RS_READABLE))
		return rs_fail(EINVAL);
	pthread_mutex_lock(&rs->rlock);
	if ((err = ds_wait(rs, (rs->fs_flags & O_NONBLOCK) || (flags & MSG_DONTWAIT), ds_have_msg))) {
		pthread_mutex_unlock(&rs->rlock);
		return rs_fail(err == EWOULDBLOCK ? EAGAIN : err);
	}
	pthread_mutex_lock(&rs->cq_lock);
	struct ds_sock *ds = rs->ds;
	struct ds_msg *m = &ds->msgs[ds->head];
	struct sockaddr_storage from;
	const uint8_t *data;
	uint32_t n;
	if (m->copy) {
		data = m->copy;
		n = m->len;
		from = m->src;
	} else {
		const struct ds_hdr *h = (const void *)(m->qp->rbuf + m->off);
		hdr_addr(h, &from);
		data = m->qp->rbuf + m->off + h->length;
		n = m->len - h->length;
	}
	if (len > n)
		len = n;
	memcpy(buf, data, len);
	if (src && srclen)
		rs_copy_addr(src, srclen, (struct sockaddr *)&from);
	if (!(flags & MSG_PEEK)) {
		if (m->copy)
			free(m->copy);
		else
			ds_post_recv(rs, m->qp, m->off);
		m->copy = NULL;
		ds->head = (ds->head + 1) % (rs->rq_size + 1);
	}
	pthread_mutex_unlock(&rs->cq_lock);
	pthread_mutex_unlock(&rs->rlock);
	return (ssize_t)len;
}

ssize_t ds_recvmsg(struct rsock *rs, struct msghdr *msg, int flags)
{
	if (msg->msg_iovlen < 1 || !msg->msg_iov)
		return rs_fail(EINVAL);
	socklen_t nl = msg->msg_namelen;
	ssize_t n = ds_recvfrom(rs, msg->msg_iov[0].iov_base, msg->msg_iov[0].iov_len, flags, msg->msg_name,
				msg->msg_name ? &nl : NULL);
	if (n >= 0 && msg->msg_name)
		msg->msg_namelen = nl;
	msg->msg_flags = 0;
	return n;
}

static bool ds_sends_done(struct rsock *rs)
{
	return !rs->ds || rs->ds->nfree == rs->sq_size;
}

/* No more sending or receiving; the datagrams posted still go out (a QP
 * destroyed under them would drop them), for a second at most. */
void ds_shutdown(struct rsock *rs)
{
	uint64_t start = rs_now_us();

	rs->state &= ~(RS_READABLE | RS_WRITABLE);
	while (!ds_sends_done(rs) && rs_now_us() - start < 1000000)
		if (ds_wait(rs, true, ds_sends_done))
			usleep(1000);
}

int ds_getpeername(struct rsock *rs, struct sockaddr *addr, socklen_t *len)
{
	if (!rs->ds || !rs->ds->conn)
		return rs_fail(ENOTCONN);
	rs_copy_addr(addr, len, (struct sockaddr *)&rs->ds->conn->addr);
	return 0;
}

int ds_getsockname(struct rsock *rs, struct sockaddr *addr, socklen_t *len)
{
	return getsockname(rs->udp_sock, addr, len);
}

short ds_poll_one(struct rsock *rs, short events)
{
	short rev = 0;

	if (ds_init_ep(rs))
		return POLLERR;
	ds_progress(rs);
	if ((events & POLLIN) && ds_have_msg(rs))
		rev |= POLLIN;
	if ((events & POLLOUT) && ds_can_send(rs))
		rev |= POLLOUT;
	return rev;
}

int ds_poll_fds(struct rsock *rs, struct pollfd *out)
{
	pthread_mutex_lock(&rs->cq_lock);
	if (rs->ds)
		ds_arm(rs);
	pthread_mutex_unlock(&rs->cq_lock);
	out[0].fd = rs->epfd;
	out[0].events = POLLIN;
	return 1;
}
