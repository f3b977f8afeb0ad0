/* The library against a running daemon, one process playing both ends on
 * one rdmafs mount (RDMAFS_DEVICE_MOUNT, set by rdmafs exec --mount):
 * what rdmacm-utils do not look at. Private data at each message's limit
 * arrives intact (REQ 56, REP 196, REJ 148, SIDR_REQ 180) and one byte
 * more is EINVAL; a rejected request reports REJECTED status 28 with the
 * REJ's data; an empty non-blocking channel is EAGAIN and its fd polls
 * readable when an event comes; ports; rdma_create_srq and a QP on it;
 * rdma_destroy_id waits for the id's unacked events; rdma_migrate_id
 * moves the records already on the old channel; UD's ESTABLISHED
 * names the peer's QPN and RDMA_UDP_QKEY; rdma_get_devices; an id bound to
 * a device (bind, ADDR_RESOLVED, a connect request) has the device's PD;
 * a bind to port 0 has its ephemeral port at once, as the kernel's: a
 * wildcard one (rdma_get_src_port and rdma_get_local_addr before
 * rdma_listen, qperf's server), kept by listen and reached by a client,
 * and by resolve_addr; two such binds get two ports.
 *
 *   cm_api PORT      (uses PORT and PORT+1)
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#include "check.h"

static void fill(uint8_t *b, size_t n, uint8_t seed)
{
	for (size_t i = 0; i < n; i++)
		b[i] = (uint8_t)(seed + i * 7);
}

static struct sockaddr_in loopback(int port)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	return a;
}

/* A client id on ch with its route resolved to 127.0.0.1:port. */
static struct rdma_cm_id *resolved(struct rdma_event_channel *ch, int port, enum rdma_port_space ps)
{
	struct rdma_cm_id *id;
	struct sockaddr_in dst = loopback(port);

	CHECK(rdma_create_id(ch, &id, NULL, ps) == 0, "create_id");
	CHECK(rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000) == 0, "resolve_addr");
	rdma_ack_cm_event(next(ch, RDMA_CM_EVENT_ADDR_RESOLVED, id));
	CHECK(id->verbs, "no verbs context after ADDR_RESOLVED");
	/* and the device's PD, as librdmacm gives every id bound to a device
	 * (pyverbs makes its AHs, MRs and external QPs on it) */
	CHECK(id->pd && id->pd->context == id->verbs, "no PD of the id's device after ADDR_RESOLVED");
	CHECK(rdma_get_dst_port(id) == htons(port), "dst port %u", ntohs(rdma_get_dst_port(id)));
	CHECK(rdma_resolve_route(id, 2000) == 0, "resolve_route");
	rdma_ack_cm_event(next(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, id));
	CHECK(id->route.num_paths == 1 && id->route.path_rec, "no path record");
	return id;
}

static void qp_for(struct rdma_cm_id *id, enum ibv_qp_type t, struct ibv_srq *srq)
{
	struct ibv_qp_init_attr a = {.qp_type = t, .srq = srq, .sq_sig_all = 1};

	a.cap.max_send_wr = a.cap.max_recv_wr = 4;
	a.cap.max_send_sge = a.cap.max_recv_sge = 1;
	CHECK(rdma_create_qp(id, NULL, &a) == 0, "rdma_create_qp");
	CHECK(id->qp && id->send_cq && id->recv_cq && id->pd, "rdma_create_qp left the id without QP, CQs or PD");
}

struct destroyer {
	struct rdma_cm_id *id;
	volatile int done;
};

static void *destroy_thread(void *arg)
{
	struct destroyer *d = arg;

	rdma_destroy_id(d->id);
	d->done = 1;
	return NULL;
}

static void rc_tests(int port)
{
	struct rdma_event_channel *sch = rdma_create_event_channel(), *cch = rdma_create_event_channel();
	struct rdma_cm_id *l, *c, *s;
	struct rdma_cm_event *e;
	struct sockaddr_in sa = loopback(port);
	uint8_t pd[256];
	struct rdma_conn_param cp = {.responder_resources = 1, .initiator_depth = 1, .retry_count = 7,
				     .rnr_retry_count = 7};

	CHECK(sch && cch, "channels");
	CHECK(rdma_create_id(sch, &l, NULL, RDMA_PS_TCP) == 0, "listener");
	CHECK(rdma_bind_addr(l, (struct sockaddr *)&sa) == 0, "bind");
	CHECK(rdma_get_src_port(l) == htons(port), "bound port %u", ntohs(rdma_get_src_port(l)));
	CHECK(l->verbs && l->pd && l->pd->context == l->verbs, "no verbs context or PD after a bind to 127.0.0.1");
	CHECK(rdma_listen(l, 4) == 0, "listen");

	/* an empty non-blocking channel */
	CHECK(fcntl(sch->fd, F_SETFL, fcntl(sch->fd, F_GETFL) | O_NONBLOCK) == 0, "O_NONBLOCK");
	errno = 0;
	CHECK(rdma_get_cm_event(sch, &e) == -1 && errno == EAGAIN, "empty non-blocking channel");

	/* 1. rejected, with the REJ's 148 bytes */
	c = resolved(cch, port, RDMA_PS_TCP);
	qp_for(c, IBV_QPT_RC, NULL);
	fill(pd, 57, 1);
	cp.private_data = pd;
	cp.private_data_len = 57;
	errno = 0;
	CHECK(rdma_connect(c, &cp) == -1 && errno == EINVAL, "57 bytes of REQ private data accepted");
	cp.private_data_len = 56;
	CHECK(rdma_connect(c, &cp) == 0, "connect");
	e = next(sch, RDMA_CM_EVENT_CONNECT_REQUEST, NULL);
	CHECK(e->listen_id == l && e->id != l, "listen_id");
	CHECK(e->param.conn.private_data_len >= 56 && !memcmp(e->param.conn.private_data, pd, 56),
	      "REQ private data (%u bytes)", e->param.conn.private_data_len);
	CHECK(e->param.conn.responder_resources == 1 && e->param.conn.initiator_depth == 1, "REQ depths");
	s = e->id;
	CHECK(s->verbs == c->verbs && s->ps == RDMA_PS_TCP, "the request's id");
	CHECK(s->pd && s->pd->context == s->verbs, "the request's id has no PD");
	rdma_ack_cm_event(e);
	fill(pd, 149, 2);
	errno = 0;
	CHECK(rdma_reject(s, pd, 149) == -1 && errno == EINVAL, "149 bytes of REJ private data accepted");
	CHECK(rdma_reject(s, pd, 148) == 0, "reject");
	e = next(cch, RDMA_CM_EVENT_REJECTED, c);
	CHECK(e->status == 28, "REJECTED status %d, want 28 (consumer)", e->status);
	CHECK(e->param.conn.private_data_len >= 148 && !memcmp(e->param.conn.private_data, pd, 148),
	      "REJ private data (%u bytes)", e->param.conn.private_data_len);
	rdma_ack_cm_event(e);
	rdma_destroy_id(s);
	rdma_destroy_qp(c);
	rdma_destroy_id(c);
	printf("cm_api: reject with 148 bytes: REJECTED status 28, data intact; 57 and 149 bytes EINVAL\n");

	/* 2. accepted on an SRQ, with the REP's 196 bytes */
	c = resolved(cch, port, RDMA_PS_TCP);
	qp_for(c, IBV_QPT_RC, NULL);
	fill(pd, 56, 3);
	cp.private_data = pd;
	cp.private_data_len = 56;
	CHECK(rdma_connect(c, &cp) == 0, "connect");
	e = next(sch, RDMA_CM_EVENT_CONNECT_REQUEST, NULL);
	s = e->id;
	rdma_ack_cm_event(e);
	struct ibv_srq_init_attr sia = {.attr = {.max_wr = 8, .max_sge = 1}};
	CHECK(rdma_create_srq(s, NULL, &sia) == 0 && s->srq, "rdma_create_srq");
	qp_for(s, IBV_QPT_RC, s->srq);
	CHECK(s->qp->srq == s->srq, "the QP is not on the SRQ");
	errno = 0;
	CHECK(rdma_notify(s, IBV_EVENT_QP_FATAL) == -1 && errno == EINVAL, "notify of an event that is not COMM_EST");
	fill(pd, 197, 4);
	cp.private_data_len = 197;
	errno = 0;
	CHECK(rdma_accept(s, &cp) == -1 && errno == EINVAL, "197 bytes of REP private data accepted");
	cp.private_data_len = 196;
	CHECK(rdma_accept(s, &cp) == 0, "accept");
	e = next(cch, RDMA_CM_EVENT_ESTABLISHED, c);
	CHECK(e->param.conn.private_data_len >= 196 && !memcmp(e->param.conn.private_data, pd, 196),
	      "REP private data (%u bytes)", e->param.conn.private_data_len);
	rdma_ack_cm_event(e);
	rdma_ack_cm_event(next(sch, RDMA_CM_EVENT_ESTABLISHED, s));
	CHECK(rdma_get_src_port(s) == htons(port) && rdma_get_dst_port(s) == rdma_get_src_port(c),
	      "ports: server %u->%u, client %u", ntohs(rdma_get_src_port(s)), ntohs(rdma_get_dst_port(s)),
	      ntohs(rdma_get_src_port(c)));
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qi;
	CHECK(ibv_query_qp(c->qp, &qa, IBV_QP_STATE, &qi) == 0 && qa.qp_state == IBV_QPS_RTS, "client QP not in RTS");
	CHECK(ibv_query_qp(s->qp, &qa, IBV_QP_STATE, &qi) == 0 && qa.qp_state == IBV_QPS_RTS, "server QP not in RTS");
	printf("cm_api: accept on an SRQ with 196 bytes: ESTABLISHED both sides, data intact, QPs in RTS\n");

	/* 3. disconnect; the server's channel polls readable; destroy waits
	 * for the acks */
	CHECK(rdma_disconnect(c) == 0, "disconnect");
	CHECK(ibv_query_qp(c->qp, &qa, IBV_QP_STATE, &qi) == 0 && qa.qp_state == IBV_QPS_ERR,
	      "disconnect left the QP in %d", qa.qp_state);
	/* the DREP waits for the passive side's rdma_disconnect, as the kernel's */
	e = next(sch, RDMA_CM_EVENT_DISCONNECTED, s);
	CHECK(rdma_disconnect(s) == 0, "the passive side's disconnect");
	/* c's DISCONNECTED is on cch's FIFO, then another id's ADDR_RESOLVED;
	 * migrating c takes its record along (ucma_move_events) and leaves
	 * the other's on cch (ucmatose -m lost it when the peer's DREQ came
	 * before its migrate) */
	struct pollfd cp_fd = {.fd = cch->fd, .events = POLLIN};
	CHECK(poll(&cp_fd, 1, 5000) == 1, "no DISCONNECTED on the client's channel within 5 s");
	struct rdma_cm_id *other;
	struct sockaddr_in da = loopback(port);
	CHECK(rdma_create_id(cch, &other, NULL, RDMA_PS_TCP) == 0, "another id on the client's channel");
	CHECK(rdma_resolve_addr(other, NULL, (struct sockaddr *)&da, 2000) == 0, "resolve_addr");
	usleep(100 * 1000);
	struct rdma_event_channel *cch2 = rdma_create_event_channel();
	CHECK(cch2 && rdma_migrate_id(c, cch2) == 0 && c->channel == cch2, "rdma_migrate_id");
	rdma_ack_cm_event(next(cch2, RDMA_CM_EVENT_DISCONNECTED, c));
	rdma_ack_cm_event(next(cch, RDMA_CM_EVENT_ADDR_RESOLVED, other));
	CHECK(fcntl(cch2->fd, F_SETFL, fcntl(cch2->fd, F_GETFL) | O_NONBLOCK) == 0, "O_NONBLOCK");
	errno = 0;
	CHECK(rdma_get_cm_event(cch2, &e) == -1 && errno == EAGAIN, "a second event on the new channel");
	rdma_destroy_id(other);
	printf("cm_api: rdma_migrate_id took the DISCONNECTED queued on the old channel, left another id's there\n");
	rdma_destroy_qp(s);
	rdma_destroy_srq(s);
	struct destroyer d = {.id = s};
	pthread_t t;
	CHECK(pthread_create(&t, NULL, destroy_thread, &d) == 0, "thread");
	usleep(200 * 1000);
	CHECK(!d.done, "rdma_destroy_id returned with an event not acked");
	rdma_ack_cm_event(e);
	pthread_join(t, NULL);
	CHECK(d.done, "destroy");
	rdma_destroy_qp(c);
	rdma_destroy_id(c);
	rdma_destroy_id(l);
	rdma_destroy_event_channel(sch);
	rdma_destroy_event_channel(cch);
	rdma_destroy_event_channel(cch2);
	printf("cm_api: DISCONNECTED both sides, QP in ERR; rdma_destroy_id waited for the ack\n");
}

static void ud_tests(int port)
{
	struct rdma_event_channel *sch = rdma_create_event_channel(), *cch = rdma_create_event_channel();
	struct rdma_cm_id *l, *c, *s;
	struct rdma_cm_event *e;
	struct sockaddr_in sa = loopback(port);
	uint8_t pd[256];
	struct rdma_conn_param cp = {0};

	CHECK(rdma_create_id(sch, &l, NULL, RDMA_PS_UDP) == 0 && l->qp_type == IBV_QPT_UD, "UDP listener");
	CHECK(rdma_bind_addr(l, (struct sockaddr *)&sa) == 0, "bind");
	CHECK(rdma_listen(l, 4) == 0, "listen");
	c = resolved(cch, port, RDMA_PS_UDP);
	qp_for(c, IBV_QPT_UD, NULL);
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qi;
	CHECK(ibv_query_qp(c->qp, &qa, IBV_QP_STATE | IBV_QP_QKEY, &qi) == 0 && qa.qp_state == IBV_QPS_RTS &&
		      qa.qkey == RDMA_UDP_QKEY,
	      "UD QP: state %d qkey %#x", qa.qp_state, qa.qkey);
	fill(pd, 181, 5);
	cp.private_data = pd;
	cp.private_data_len = 181;
	errno = 0;
	CHECK(rdma_connect(c, &cp) == -1 && errno == EINVAL, "181 bytes of SIDR_REQ private data accepted");
	cp.private_data_len = 180;
	CHECK(rdma_connect(c, &cp) == 0, "UD connect");
	e = next(sch, RDMA_CM_EVENT_CONNECT_REQUEST, NULL);
	CHECK(e->param.ud.private_data_len >= 180 && !memcmp(e->param.ud.private_data, pd, 180),
	      "SIDR_REQ private data (%u bytes)", e->param.ud.private_data_len);
	s = e->id;
	rdma_ack_cm_event(e);
	qp_for(s, IBV_QPT_UD, NULL);
	CHECK(rdma_accept(s, NULL) == 0, "UD accept");
	e = next(cch, RDMA_CM_EVENT_ESTABLISHED, c);
	CHECK(e->param.ud.qp_num == s->qp->qp_num, "UD peer QPN %u, want %u", e->param.ud.qp_num, s->qp->qp_num);
	CHECK(e->param.ud.qkey == RDMA_UDP_QKEY, "UD qkey %#x", e->param.ud.qkey);
	CHECK(e->param.ud.ah_attr.is_global && e->param.ud.ah_attr.port_num == 1, "UD AH attributes");
	struct ibv_ah *ah = ibv_create_ah(c->pd, &e->param.ud.ah_attr);
	CHECK(ah, "ibv_create_ah from ESTABLISHED's ah_attr");
	ibv_destroy_ah(ah);
	rdma_ack_cm_event(e);
	rdma_destroy_qp(s);
	rdma_destroy_id(s);
	rdma_destroy_qp(c);
	rdma_destroy_id(c);
	rdma_destroy_id(l);
	rdma_destroy_event_channel(sch);
	rdma_destroy_event_channel(cch);
	printf("cm_api: UD with 180 bytes: ESTABLISHED with the peer's QPN and qkey %#x, an AH from it\n", RDMA_UDP_QKEY);
}

static int in_range(__be16 p)
{
	return ntohs(p) >= 32768 && ntohs(p) <= 60999;
}

/* rdma_bind_addr to port 0: the port is chosen by the bind. */
static void ephemeral_tests(void)
{
	struct rdma_event_channel *sch = rdma_create_event_channel(), *cch = rdma_create_event_channel();
	struct rdma_cm_id *l, *l2, *c, *b;
	struct rdma_cm_event *e;
	struct sockaddr_in any = {.sin_family = AF_INET};
	__be16 port;

	CHECK(sch && cch, "channels");
	CHECK(rdma_create_id(sch, &l, NULL, RDMA_PS_TCP) == 0, "listener");
	CHECK(rdma_bind_addr(l, (struct sockaddr *)&any) == 0, "bind 0.0.0.0:0");
	port = rdma_get_src_port(l);
	CHECK(in_range(port), "after a bind to 0.0.0.0:0 the port is %u, want 32768-60999", ntohs(port));
	struct sockaddr_in *la = (struct sockaddr_in *)rdma_get_local_addr(l);
	CHECK(la->sin_family == AF_INET && la->sin_port == port && la->sin_addr.s_addr == INADDR_ANY,
	      "rdma_get_local_addr after bind: family %d port %u", la->sin_family, ntohs(la->sin_port));
	CHECK(!l->verbs, "a wildcard bind has a device");
	CHECK(rdma_create_id(sch, &l2, NULL, RDMA_PS_TCP) == 0, "second id");
	CHECK(rdma_bind_addr(l2, (struct sockaddr *)&any) == 0, "second bind 0.0.0.0:0");
	CHECK(in_range(rdma_get_src_port(l2)) && rdma_get_src_port(l2) != port, "two wildcard binds: ports %u and %u",
	      ntohs(port), ntohs(rdma_get_src_port(l2)));
	/* the port is taken: an explicit bind to it fails as the kernel's */
	struct sockaddr_in same = loopback(ntohs(port));
	CHECK(rdma_create_id(sch, &b, NULL, RDMA_PS_TCP) == 0, "third id");
	errno = 0;
	CHECK(rdma_bind_addr(b, (struct sockaddr *)&same) == -1 && errno == EADDRINUSE,
	      "a bind to 127.0.0.1 on the wildcard's port: errno %d, want EADDRINUSE", errno);
	rdma_destroy_id(b);
	rdma_destroy_id(l2);
	CHECK(rdma_listen(l, 4) == 0, "listen");
	CHECK(rdma_get_src_port(l) == port, "listen moved the port from %u to %u", ntohs(port),
	      ntohs(rdma_get_src_port(l)));
	c = resolved(cch, ntohs(port), RDMA_PS_TCP);
	qp_for(c, IBV_QPT_RC, NULL);
	struct rdma_conn_param cp = {.retry_count = 7, .rnr_retry_count = 7};
	CHECK(rdma_connect(c, &cp) == 0, "connect");
	e = next(sch, RDMA_CM_EVENT_CONNECT_REQUEST, NULL);
	CHECK(e->listen_id == l, "listen_id");
	CHECK(rdma_reject(e->id, NULL, 0) == 0, "reject");
	struct rdma_cm_id *s = e->id;
	rdma_ack_cm_event(e);
	rdma_ack_cm_event(next(cch, RDMA_CM_EVENT_REJECTED, c));
	rdma_destroy_id(s);
	rdma_destroy_qp(c);
	rdma_destroy_id(c);
	rdma_destroy_id(l);

	/* a client's wildcard bind to port 0, then resolve_addr: the port
	 * stays, the id is on the device */
	struct rdma_cm_id *l3;
	struct sockaddr_in lo0 = loopback(0);
	CHECK(rdma_create_id(sch, &l3, NULL, RDMA_PS_TCP) == 0 && rdma_bind_addr(l3, (struct sockaddr *)&lo0) == 0,
	      "bind 127.0.0.1:0");
	CHECK(in_range(rdma_get_src_port(l3)), "after a bind to 127.0.0.1:0 the port is %u", ntohs(rdma_get_src_port(l3)));
	CHECK(rdma_listen(l3, 1) == 0, "listen");
	CHECK(rdma_create_id(cch, &c, NULL, RDMA_PS_TCP) == 0 && rdma_bind_addr(c, (struct sockaddr *)&any) == 0,
	      "client bind 0.0.0.0:0");
	port = rdma_get_src_port(c);
	CHECK(in_range(port), "client port %u", ntohs(port));
	struct sockaddr_in dst = loopback(ntohs(rdma_get_src_port(l3)));
	CHECK(rdma_resolve_addr(c, NULL, (struct sockaddr *)&dst, 2000) == 0, "resolve_addr");
	rdma_ack_cm_event(next(cch, RDMA_CM_EVENT_ADDR_RESOLVED, c));
	CHECK(c->verbs && c->pd, "no device after resolve_addr");
	CHECK(rdma_get_src_port(c) == port, "resolve_addr moved the port from %u to %u", ntohs(port),
	      ntohs(rdma_get_src_port(c)));
	rdma_destroy_id(c);
	rdma_destroy_id(l3);
	rdma_destroy_event_channel(sch);
	rdma_destroy_event_channel(cch);
	printf("cm_api: bind to port 0 (0.0.0.0, 127.0.0.1): the ephemeral port at bind, kept by listen and resolve_addr\n");
}

int main(int argc, char **argv)
{
	int port = argc > 1 ? atoi(argv[1]) : 19400, n = 0;
	struct ibv_context **devs = rdma_get_devices(&n);

	CHECK(devs && n == 1 && devs[0] && !devs[1], "rdma_get_devices: %d devices (want the one mount)", n);
	rdma_free_devices(devs);
	rc_tests(port);
	ud_tests(port + 1);
	ephemeral_tests();
	printf("cm_api: ok\n");
	return 0;
}
