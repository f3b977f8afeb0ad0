/* Datagram rsockets with both ends bound (what udpong's client does not
 * do, so this one also runs across two --addr mounts): the client sends
 * COUNT datagrams of sizes 1..2000 bytes, each a sequence number and a
 * pattern derived from it, and waits (rpoll, 2 s) for each to come back;
 * the server echoes what it gets to whoever sent it and checks every byte
 * first. A datagram may be lost (the first ones travel by UDP while the
 * peers learn each other's QP): the client sends again after a timeout,
 * and at most COUNT/10 resends are allowed.
 *
 *   rs_dgram server ADDR PORT COUNT
 *   rs_dgram client ADDR PORT COUNT SERVER_ADDR
 */
#include "check.h"

#include <arpa/inet.h>
#include <rdma/rsocket.h>
#include <stdbool.h>
#include <stdint.h>

static size_t fill(uint8_t *b, uint32_t seq)
{
	size_t n = 4 + (seq * 389u) % 1997u;

	memcpy(b, &seq, 4);
	for (size_t i = 4; i < n; i++)
		b[i] = (uint8_t)(seq * 7 + i);
	return n;
}

static int check_msg(const uint8_t *b, size_t n, uint32_t *seq)
{
	uint8_t want[2048];

	if (n < 4)
		return -1;
	memcpy(seq, b, 4);
	return fill(want, *seq) == n && !memcmp(want, b, n) ? 0 : -1;
}

int main(int argc, char **argv)
{
	struct sockaddr_in a = { .sin_family = AF_INET }, peer;
	uint8_t buf[2048], got[2048];
	int s;

	if (argc < 5)
		FAIL("usage: rs_dgram server|client ADDR PORT COUNT [SERVER_ADDR]");
	uint32_t count = (uint32_t)atoi(argv[4]);
	CHECK(inet_pton(AF_INET, argv[2], &a.sin_addr) == 1, "address %s", argv[2]);
	bool server = !strcmp(argv[1], "server");
	a.sin_port = server ? htons((uint16_t)atoi(argv[3])) : 0;
	CHECK((s = rsocket(AF_INET, SOCK_DGRAM, 0)) >= 0, "rsocket");
	CHECK(rbind(s, (struct sockaddr *)&a, sizeof(a)) == 0, "rbind %s", argv[2]);
	if (server) {
		for (uint32_t n = 0; n < count;) {
			socklen_t pl = sizeof(peer);
			ssize_t r = rrecvfrom(s, buf, sizeof(buf), 0, (struct sockaddr *)&peer, &pl);
			uint32_t seq;
			CHECK(r > 0, "rrecvfrom");
			CHECK(check_msg(buf, (size_t)r, &seq) == 0, "datagram of %zd bytes: not as sent", r);
			CHECK(rsendto(s, buf, (size_t)r, 0, (struct sockaddr *)&peer, pl) == r, "rsendto");
			if (seq == n)
				n++;
		}
		printf("server: %u datagrams checked and echoed\n", count);
	} else {
		struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[3])) };
		uint32_t resends = 0;
		CHECK(argc == 6 && inet_pton(AF_INET, argv[5], &sa.sin_addr) == 1, "server address");
		for (uint32_t seq = 0; seq < count; seq++) {
			size_t n = fill(buf, seq);
			for (;;) {
				CHECK(rsendto(s, buf, n, 0, (struct sockaddr *)&sa, sizeof(sa)) == (ssize_t)n, "rsendto %u", seq);
				struct pollfd p = { .fd = s, .events = POLLIN };
				int pr = rpoll(&p, 1, 2000);
				CHECK(pr >= 0, "rpoll");
				if (pr == 0) {
					CHECK(++resends <= count / 10 + 1, "%u resends", resends);
					continue;
				}
				socklen_t pl = sizeof(peer);
				ssize_t r = rrecvfrom(s, got, sizeof(got), 0, (struct sockaddr *)&peer, &pl);
				uint32_t back;
				CHECK(r > 0 && check_msg(got, (size_t)r, &back) == 0, "echo of %u: %zd bytes, not as sent", seq, r);
				CHECK(peer.sin_addr.s_addr == sa.sin_addr.s_addr && peer.sin_port == sa.sin_port,
				      "the echo's source is not the server");
				if (back == seq)
					break;
			}
		}
		printf("client: %u datagrams echoed and checked (%u resends)\n", count, resends);
	}
	rclose(s);
	return 0;
}
