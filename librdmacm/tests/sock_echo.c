/* A plain socket program, for librspreload.so to move onto rsockets: the
 * client sends BYTES of a position-derived pattern in uneven writes, the
 * server checks every byte as it reads it (read, recv and readv in turn,
 * waiting in poll and select) and sends the same stream back, which the
 * client checks too. Exits 0 only when every byte came back as sent.
 *
 *   sock_echo server ADDR PORT BYTES
 *   sock_echo client ADDR PORT BYTES
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#define DIE(...)                                                              \
	do {                                                                  \
		fprintf(stderr, "sock_echo: " __VA_ARGS__);                   \
		fprintf(stderr, " (errno %d %s)\n", errno, strerror(errno)); \
		exit(1);                                                      \
	} while (0)

static uint8_t pat(uint64_t off)
{
	return (uint8_t)(off * 131 + (off >> 9) + 7);
}

/* reads and checks n bytes, rotating through the read calls */
static void recv_check(int fd, uint64_t n, const char *who)
{
	static uint8_t buf[65536];
	uint64_t off = 0;
	int turn = 0;

	while (off < n) {
		size_t want = n - off < sizeof(buf) ? (size_t)(n - off) : sizeof(buf);
		ssize_t r;
		if (turn % 4 == 3) {
			fd_set rs;
			FD_ZERO(&rs);
			FD_SET(fd, &rs);
			struct timeval tv = { .tv_sec = 10 };
			if (select(fd + 1, &rs, NULL, NULL, &tv) != 1)
				DIE("%s: select: nothing readable within 10 s at %llu", who, (unsigned long long)off);
		} else {
			struct pollfd p = { .fd = fd, .events = POLLIN };
			if (poll(&p, 1, 10000) != 1)
				DIE("%s: poll: nothing readable within 10 s at %llu", who, (unsigned long long)off);
		}
		switch (turn++ % 3) {
		case 0:
			r = read(fd, buf, want);
			break;
		case 1:
			r = recv(fd, buf, want, 0);
			break;
		default: {
			struct iovec v[2] = { { buf, want / 2 }, { buf + want / 2, want - want / 2 } };
			r = readv(fd, v, 2);
		}
		}
		if (r < 0 && (errno == EAGAIN || errno == EINTR))
			continue;
		if (r <= 0)
			DIE("%s: read at %llu of %llu returned %zd", who, (unsigned long long)off, (unsigned long long)n, r);
		for (ssize_t i = 0; i < r; i++)
			if (buf[i] != pat(off + (uint64_t)i))
				DIE("%s: byte %llu is %u, want %u", who, (unsigned long long)(off + (uint64_t)i), buf[i],
				    pat(off + (uint64_t)i));
		off += (uint64_t)r;
	}
}

static void send_all(int fd, uint64_t n, const char *who)
{
	static uint8_t buf[100003];
	uint64_t off = 0;
	size_t step = 1;

	while (off < n) {
		/* uneven sizes: 1 byte up to ~100 KB */
		size_t len = step < n - off ? step : (size_t)(n - off);
		step = step * 3 + 1;
		if (step > sizeof(buf))
			step = 977;
		for (size_t i = 0; i < len; i++)
			buf[i] = pat(off + i);
		size_t done = 0;
		while (done < len) {
			ssize_t w = (off & 1) ? write(fd, buf + done, len - done) : send(fd, buf + done, len - done, 0);
			if (w < 0 && (errno == EAGAIN || errno == EINTR))
				continue;
			if (w <= 0)
				DIE("%s: write at %llu", who, (unsigned long long)(off + done));
			done += (size_t)w;
		}
		off += len;
	}
}

int main(int argc, char **argv)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	int one = 1, fd;

	if (argc != 5)
		DIE("usage: sock_echo server|client ADDR PORT BYTES");
	uint64_t n = strtoull(argv[4], NULL, 0);
	if (inet_pton(AF_INET, argv[2], &a.sin_addr) != 1)
		DIE("bad address %s", argv[2]);
	a.sin_port = htons((uint16_t)atoi(argv[3]));
	if ((fd = socket(AF_INET, SOCK_STREAM, 0)) < 0)
		DIE("socket");
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (!strcmp(argv[1], "server")) {
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(fd, (struct sockaddr *)&a, sizeof(a)) || listen(fd, 4))
			DIE("bind/listen %s:%s", argv[2], argv[3]);
		int c = accept(fd, NULL, NULL);
		if (c < 0)
			DIE("accept");
		struct sockaddr_in peer;
		socklen_t pl = sizeof(peer);
		if (getpeername(c, (struct sockaddr *)&peer, &pl))
			DIE("getpeername");
		recv_check(c, n, "server");
		send_all(c, n, "server");
		shutdown(c, SHUT_WR);
		char x;
		/* the client's close: end of stream */
		struct pollfd p = { .fd = c, .events = POLLIN };
		poll(&p, 1, 10000);
		if (read(c, &x, 1) != 0)
			DIE("server: no end of stream after the data");
		close(c);
		printf("server: %llu bytes checked and echoed\n", (unsigned long long)n);
	} else {
		if (connect(fd, (struct sockaddr *)&a, sizeof(a)))
			DIE("connect %s:%s", argv[2], argv[3]);
		send_all(fd, n, "client");
		recv_check(fd, n, "client");
		printf("client: %llu bytes sent and %llu checked back\n", (unsigned long long)n, (unsigned long long)n);
	}
	close(fd);
	return 0;
}
