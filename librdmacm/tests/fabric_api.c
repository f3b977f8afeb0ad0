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

#define FAIL(...)                                                          \
	do {                                                               \
		fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);        \
		fprintf(stderr, __VA_ARGS__);                              \
		fprintf(stderr, " (errno %d %s)\n", errno, strerror(errno)); \
		exit(1);                                                   \
	} while (0)
#define CHECK(c, ...)                  \
	do {                           \
		if (!(c))              \
			FAIL(__VA_ARGS__); \
	} while (0)

static struct rdma_cm_event *next(struct rdma_event_channel *ch, enum rdma_cm_event_type want,
				  struct rdma_cm_id *id)
{
	struct rdma_cm_event *e;
	struct pollfd p = {.fd = ch->fd, .events = POLLIN};

	CHECK(poll(&p, 1, 5000) == 1, "no event within 5 s (waiting for %s)", rdma_event_str(want));
	CHECK(rdma_get_cm_event(ch, &e) == 0, "rdma_get_cm_event");
	CHECK(e->event == want, "got %s status %d, want %s", rdma_event_str(e->event), e->status,
	      rdma_event_str(want));
	CHECK(!id || e->id == id, "%s for another id", rdma_event_str(want));
	return e;
}

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

int main(int argc, char **argv)
{
	int port = argc > 1 ? atoi(argv[1]) : 19500;
	const char *addr = argc > 2 ? argv[2] : "127.0.0.1";

	migrate_sync(addr, port);
	printf("fabric_api: ok\n");
	return 0;
}
