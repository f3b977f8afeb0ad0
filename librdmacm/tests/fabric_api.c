/* What libfabric's verbs provider (1.17, prov/verbs) asks of librdmacm
 * that rdmacm-utils do not, against a running daemon on one rdmafs mount
 * (RDMAFS_DEVICE_MOUNT, set by rdmafs exec --mount):
 *
 * 1. rdma_migrate_id of a synchronous id (made without a channel) whose
 *    rdma_resolve_addr left ADDR_RESOLVED in id->event: librdmacm acks
 *    that event itself and returns; the id's later events come on the new
 *    channel. (vrb_create_ep resolves synchronously, then
 *    vrb_ep_enable migrates the id to the EQ's channel; it used to wait
 *    forever for an ack nobody would give.) Migrating a synchronous id to
 *    no channel is EINVAL.
 * 2. rdma_bind_addr to a loopback address that no device answers for
 *    (127.0.0.2 on a local mount; any of 127/8 on an --addr mount)
 *    succeeds with no device, as the kernel's cma_any_addr counts loopback
 *    addresses as wildcards: verbs NULL, rdma_get_local_addr the address
 *    given, and rdma_listen takes connect requests to the device's own
 *    address. (fi_getinfo's probe binds "localhost" and failed on an
 *    --addr mount with EADDRNOTAVAIL, so a libfabric server found no
 *    verbs fabric there.)
 *
 *   fabric_api PORT [ADDR]   ADDR: the mount's address (127.0.0.1)
 */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <rdma/rdma_cma.h>

#include "check.h"

static struct sockaddr_in inet(const char *a, int port)
{
	struct sockaddr_in s = {.sin_family = AF_INET, .sin_port = htons(port)};

	CHECK(inet_pton(AF_INET, a, &s.sin_addr) == 1, "address %s", a);
	return s;
}

static void migrate_sync(const char *addr, int port)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id;
	struct sockaddr_in dst = inet(addr, port);

	CHECK(ch, "channel");
	alarm(10); /* the bug was a hang */
	CHECK(rdma_create_id(NULL, &id, NULL, RDMA_PS_TCP) == 0, "a synchronous id");
	CHECK(rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000) == 0, "resolve_addr");
	CHECK(id->event && id->event->event == RDMA_CM_EVENT_ADDR_RESOLVED,
	      "a synchronous resolve_addr keeps its event in id->event");
	errno = 0;
	CHECK(rdma_migrate_id(id, NULL) == -1 && errno == EINVAL, "migrating a synchronous id to no channel");
	CHECK(rdma_migrate_id(id, ch) == 0, "rdma_migrate_id");
	alarm(0);
	CHECK(id->channel == ch && !id->event, "after migrate: channel %p (want %p), event %p", (void *)id->channel,
	      (void *)ch, (void *)id->event);
	CHECK(rdma_resolve_route(id, 2000) == 0, "resolve_route");
	rdma_ack_cm_event(next(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, id));
	rdma_destroy_id(id);
	rdma_destroy_event_channel(ch);
	printf("fabric_api: a synchronous id migrated after resolve_addr; ROUTE_RESOLVED on the new channel\n");
}

static void loopback_bind(const char *addr, int port)
{
	struct rdma_event_channel *sch = rdma_create_event_channel(), *cch = rdma_create_event_channel();
	struct rdma_cm_id *l, *c, *s;
	struct rdma_cm_event *e;
	struct sockaddr_in lo = inet("127.0.0.2", port), dst = inet(addr, port);
	struct sockaddr_in *got;
	struct ibv_qp_init_attr qa = {.qp_type = IBV_QPT_RC, .sq_sig_all = 1};
	struct rdma_conn_param cp = {.retry_count = 7, .rnr_retry_count = 7};

	CHECK(sch && cch, "channels");
	if (!strcmp(addr, "127.0.0.2"))
		FAIL("ADDR must not be 127.0.0.2, the loopback address bound here");
	CHECK(rdma_create_id(sch, &l, NULL, RDMA_PS_TCP) == 0, "listener");
	CHECK(rdma_bind_addr(l, (struct sockaddr *)&lo) == 0, "bind to 127.0.0.2, which no device answers");
	CHECK(!l->verbs, "a loopback bind attached a device");
	got = (struct sockaddr_in *)rdma_get_local_addr(l);
	CHECK(got->sin_family == AF_INET && got->sin_addr.s_addr == lo.sin_addr.s_addr, "local address after bind");
	CHECK(rdma_listen(l, 4) == 0, "listen");
	got = (struct sockaddr_in *)rdma_get_local_addr(l);
	CHECK(got->sin_addr.s_addr == lo.sin_addr.s_addr && got->sin_port == htons(port),
	      "local address after listen: %s:%u", inet_ntoa(got->sin_addr), ntohs(got->sin_port));

	CHECK(rdma_create_id(cch, &c, NULL, RDMA_PS_TCP) == 0, "client");
	CHECK(rdma_resolve_addr(c, NULL, (struct sockaddr *)&dst, 2000) == 0, "resolve_addr");
	rdma_ack_cm_event(next(cch, RDMA_CM_EVENT_ADDR_RESOLVED, c));
	CHECK(rdma_resolve_route(c, 2000) == 0, "resolve_route");
	rdma_ack_cm_event(next(cch, RDMA_CM_EVENT_ROUTE_RESOLVED, c));
	qa.cap.max_send_wr = qa.cap.max_recv_wr = 4;
	qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
	CHECK(rdma_create_qp(c, NULL, &qa) == 0, "client QP");
	CHECK(rdma_connect(c, &cp) == 0, "connect");
	e = next(sch, RDMA_CM_EVENT_CONNECT_REQUEST, NULL);
	CHECK(e->listen_id == l, "listen_id");
	s = e->id;
	CHECK(s->verbs == c->verbs, "the request's id has the device");
	rdma_ack_cm_event(e);
	CHECK(rdma_create_qp(s, NULL, &qa) == 0, "server QP");
	CHECK(rdma_accept(s, &cp) == 0, "accept");
	rdma_ack_cm_event(next(cch, RDMA_CM_EVENT_ESTABLISHED, c));
	rdma_ack_cm_event(next(sch, RDMA_CM_EVENT_ESTABLISHED, s));
	CHECK(rdma_disconnect(c) == 0, "disconnect");
	rdma_ack_cm_event(next(sch, RDMA_CM_EVENT_DISCONNECTED, s));
	CHECK(rdma_disconnect(s) == 0, "the passive side's disconnect");
	rdma_ack_cm_event(next(cch, RDMA_CM_EVENT_DISCONNECTED, c));
	rdma_destroy_qp(s);
	rdma_destroy_id(s);
	rdma_destroy_qp(c);
	rdma_destroy_id(c);
	rdma_destroy_id(l);
	rdma_destroy_event_channel(sch);
	rdma_destroy_event_channel(cch);
	printf("fabric_api: bound to 127.0.0.2 without a device, a listener there took a connection to %s\n", addr);
}

int main(int argc, char **argv)
{
	int port = argc > 1 ? atoi(argv[1]) : 19500;
	const char *addr = argc > 2 ? argv[2] : "127.0.0.1";

	migrate_sync(addr, port);
	loopback_bind(addr, port + 1);
	printf("fabric_api: ok\n");
	return 0;
}
