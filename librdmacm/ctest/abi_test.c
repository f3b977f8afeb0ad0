/* What the library answers without a device: rdma_event_str as the system
 * librdmacm (dlopen'd beside ours) for every event number and then some;
 * rdma_getaddrinfo's port spaces, QP types, RAI_PASSIVE and
 * RAI_NUMERICHOST; an event channel that is a real descriptor and fails
 * with EAGAIN when O_NONBLOCK and empty; ids before they have a device
 * (ports 0, options kept, bind and resolve failing as the kernel fails
 * them when no device answers); rdma_get_devices with none.
 * RDMAFS_DEVICE_MOUNT names no mount, so the machine's mounts stay out.
 */
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#include "../../libibverbs/ctest/check.h"

static void test_event_str(void)
{
	const char *sys = RDMAFS_SYSTEM_LIB;
	void *lib = *sys ? dlopen(sys, RTLD_NOW | RTLD_LOCAL) : NULL;
	const char *(*theirs)(enum rdma_cm_event_type) = lib ? (const char *(*)(enum rdma_cm_event_type))dlsym(lib, "rdma_event_str") : NULL;

	CHECK(!strcmp(rdma_event_str(RDMA_CM_EVENT_ESTABLISHED), "RDMA_CM_EVENT_ESTABLISHED"), "ESTABLISHED");
	CHECK(!strcmp(rdma_event_str(RDMA_CM_EVENT_TIMEWAIT_EXIT), "RDMA_CM_EVENT_TIMEWAIT_EXIT"), "TIMEWAIT_EXIT");
	CHECK(!strcmp(rdma_event_str((enum rdma_cm_event_type)99), "UNKNOWN EVENT"), "99");
	if (!theirs) {
		printf("abi_test: no system librdmacm (%s): event names against the table only\n", *sys ? dlerror() : "none");
		return;
	}
	CHECK(theirs != rdma_event_str, "dlopen gave our own library");
	for (int e = -2; e < 40; e++)
		CHECK(!strcmp(rdma_event_str((enum rdma_cm_event_type)e), theirs((enum rdma_cm_event_type)e)),
		      "event %d: ours %s, system %s", e, rdma_event_str((enum rdma_cm_event_type)e),
		      theirs((enum rdma_cm_event_type)e));
}

static void test_getaddrinfo(void)
{
	struct rdma_addrinfo hints, *res = NULL;
	int ret;

	memset(&hints, 0, sizeof(hints));
	hints.ai_flags = RAI_NUMERICHOST;
	hints.ai_port_space = RDMA_PS_TCP;
	ret = rdma_getaddrinfo("127.0.82.9", "7471", &hints, &res);
	CHECK(ret == 0 && res, "numeric TCP: %d", ret);
	if (res) {
		struct sockaddr_in *d = (struct sockaddr_in *)res->ai_dst_addr;
		CHECK(res->ai_port_space == RDMA_PS_TCP && res->ai_qp_type == IBV_QPT_RC, "TCP is RC");
		CHECK(res->ai_family == AF_INET && d && d->sin_family == AF_INET && ntohs(d->sin_port) == 7471 &&
			      d->sin_addr.s_addr == inet_addr("127.0.82.9"),
		      "destination");
		CHECK(res->ai_dst_len == sizeof(struct sockaddr_in) && !res->ai_src_addr && !res->ai_next,
		      "only a destination");
		rdma_freeaddrinfo(res);
	}

	memset(&hints, 0, sizeof(hints));
	hints.ai_flags = RAI_PASSIVE;
	hints.ai_port_space = RDMA_PS_UDP;
	res = NULL;
	ret = rdma_getaddrinfo(NULL, "7472", &hints, &res);
	CHECK(ret == 0 && res, "passive UDP: %d", ret);
	if (res) {
		CHECK(res->ai_port_space == RDMA_PS_UDP && res->ai_qp_type == IBV_QPT_UD, "UDP is UD");
		CHECK(res->ai_src_addr && !res->ai_dst_addr && (res->ai_flags & RAI_PASSIVE), "passive is a source");
		rdma_freeaddrinfo(res);
	}

	memset(&hints, 0, sizeof(hints));
	hints.ai_qp_type = IBV_QPT_UD;
	res = NULL;
	ret = rdma_getaddrinfo("::1", "9", &hints, &res);
	CHECK(ret == 0 && res && res->ai_family == AF_INET6 && res->ai_port_space == RDMA_PS_UDP,
	      "a UD QP type picks UDP: %d", ret);
	rdma_freeaddrinfo(res);

	memset(&hints, 0, sizeof(hints));
	hints.ai_flags = RAI_NUMERICHOST;
	res = NULL;
	ret = rdma_getaddrinfo("not.numeric.example", "1", &hints, &res);
	CHECK(ret != 0 && !res, "RAI_NUMERICHOST took a name");

	errno = 0;
	CHECK(rdma_getaddrinfo(NULL, NULL, NULL, &res) == -1 && errno == EINVAL, "nothing at all");
	rdma_freeaddrinfo(NULL);
}

static void test_channel(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_event *ev;
	struct rdma_cm_id *id;
	struct pollfd p;

	CHECK(ch && ch->fd >= 0, "channel");
	if (!ch)
		return;
	p.fd = ch->fd;
	p.events = POLLIN;
	CHECK(poll(&p, 1, 0) == 0, "an empty channel polls readable");
	CHECK(fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK) == 0, "O_NONBLOCK");
	errno = 0;
	CHECK(rdma_get_cm_event(ch, &ev) == -1 && errno == EAGAIN, "empty non-blocking channel: errno %d", errno);

	CHECK(rdma_create_id(ch, &id, (void *)0x1234, RDMA_PS_TCP) == 0, "create_id");
	CHECK(id->channel == ch && id->context == (void *)0x1234 && id->ps == RDMA_PS_TCP && id->qp_type == IBV_QPT_RC,
	      "id fields");
	CHECK(!id->verbs && !id->qp && rdma_get_src_port(id) == 0 && rdma_get_dst_port(id) == 0, "no device yet");
	uint8_t tos = 32;
	CHECK(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, sizeof(tos)) == 0, "TOS kept");
	errno = 0;
	CHECK(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, 4) == -1 && errno == EINVAL, "TOS size");
	int one = 1;
	CHECK(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &one, sizeof(one)) == 0, "REUSEADDR");
	CHECK(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, &one, sizeof(one)) == 0, "AFONLY");
	uint8_t t = 14;
	CHECK(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &t, sizeof(t)) == 0, "ACK_TIMEOUT");

	struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(7000)};
	sin.sin_addr.s_addr = inet_addr("192.0.2.250");
	errno = 0;
	CHECK(rdma_bind_addr(id, (struct sockaddr *)&sin) == -1 && errno == EADDRNOTAVAIL,
	      "bind to an address no device answers: errno %d", errno);
	/* but a loopback one is a wildcard, as the kernel's cma_any_addr
	 * has it: bound, with no device */
	struct rdma_cm_id *lid;
	struct sockaddr_in lsin = {.sin_family = AF_INET, .sin_port = htons(7001)};
	lsin.sin_addr.s_addr = inet_addr("127.0.82.250");
	CHECK(rdma_create_id(ch, &lid, NULL, RDMA_PS_TCP) == 0, "create_id");
	CHECK(rdma_bind_addr(lid, (struct sockaddr *)&lsin) == 0 && !lid->verbs && rdma_get_src_port(lid) == htons(7001),
	      "bind to a loopback address no device answers: errno %d", errno);
	CHECK(rdma_destroy_id(lid) == 0, "destroy_id");
	errno = 0;
	CHECK(rdma_resolve_addr(id, NULL, (struct sockaddr *)&sin, 100) == -1 && errno == ENODEV,
	      "resolve with no device: errno %d", errno);
	errno = 0;
	CHECK(rdma_resolve_route(id, 100) == -1 && errno == EINVAL, "resolve_route before resolve_addr");
	errno = 0;
	CHECK(rdma_connect(id, NULL) == -1 && errno == EINVAL, "connect before a route");
	errno = 0;
	CHECK(rdma_listen(id, 1) == -1 && errno == ENODEV, "listen with no device: errno %d", errno);
	struct ibv_qp_init_attr qa = {.qp_type = IBV_QPT_RC};
	errno = 0;
	CHECK(rdma_create_qp(id, NULL, &qa) == -1 && errno == EINVAL, "a QP without a device");
	struct ibv_qp_attr attr = {.qp_state = IBV_QPS_INIT};
	int mask;
	errno = 0;
	CHECK(rdma_init_qp_attr(id, &attr, &mask) == -1 && errno == EINVAL, "init_qp_attr without a device");
	CHECK(rdma_destroy_id(id) == 0, "destroy_id");

	errno = 0;
	CHECK(rdma_create_id(ch, &id, NULL, (enum rdma_port_space)0x4242) == -1, "unknown port space");
	CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_UDP) == 0 && id->qp_type == IBV_QPT_UD, "UDP ids are UD");
	rdma_destroy_id(id);
	rdma_destroy_event_channel(ch);

	/* synchronous ids have a channel of their own */
	CHECK(rdma_create_id(NULL, &id, NULL, RDMA_PS_TCP) == 0 && id->channel && id->channel->fd >= 0, "sync id");
	rdma_destroy_id(id);
}

static void test_devices(void)
{
	int n = -1;
	struct ibv_context **l = rdma_get_devices(&n);

	CHECK(l && n == 0 && l[0] == NULL, "no devices: %d", n);
	rdma_free_devices(l);
}

int main(void)
{
	setenv("RDMAFS_DEVICE_MOUNT", "/nonexistent/rdmafs-abi-test", 1);
	test_event_str();
	test_getaddrinfo();
	test_channel();
	test_devices();
	if (failures) {
		fprintf(stderr, "abi_test: %d failures\n", failures);
		return 1;
	}
	printf("abi_test: ok\n");
	return 0;
}
