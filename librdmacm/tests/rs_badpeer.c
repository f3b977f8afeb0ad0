/* rsockets against a peer that breaks the protocol: the peer is this
 * program's own, made of plain CM and verbs calls speaking rsockets' wire
 * format (../rsocket.h), so it can send what rdma-core's never would.
 *
 *   credits    the peer grants 3 credits and no more: a non-blocking
 *              rsend stops with EAGAIN after 3 messages, a blocking one
 *              waits until the peer grants more, then finishes
 *   fuzz       after one good data message (read back exactly), each bad
 *              control message (reserved opcodes, a data length the peer
 *              was never given room for, an empty one, an iomap slot out of
 *              range, an unknown control word) resets the connection:
 *              rrecv fails with ECONNRESET, rclose works
 *   privdata   connect requests without rsockets' connection data (none,
 *              short, version 2, an empty buffer) are turned away; an
 *              rsocket connecting after them is accepted
 *   riowrite   the peer maps a buffer into our iomap, and disconnects
 *              while riowrite is writing into it: riowrite fails (no
 *              crash, no hang), rclose works
 *
 *   rs_badpeer ADDR PORT    (on a mount: rdmafs exec --mount M -- ...)
 */
#include "check.h"

#include "../rsocket.h"

#include <arpa/inet.h>
#include <endian.h>
#include <fcntl.h>
#include <pthread.h>
#include <rdma/rsocket.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

static struct sockaddr_in addr;
static int port;

/* the fake peer: one connection accepted on its listener */
struct peer {
	struct rdma_cm_id *lid, *id;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	uint8_t rbuf[1 << 16]; /* what the rsocket writes its data into */
	struct ibv_mr *rmr;
	struct rs_wire_sge target[RS_SGL_SIZE + 4 * 2]; /* sgl, then 4 iomap slots (24 bytes each) */
	struct ibv_mr *tmr;
	struct rs_wire_conn theirs; /* the rsocket's connection data, host order */
	uint8_t *io; /* a buffer mapped into the rsocket's iomap */
	size_t iolen;
	struct ibv_mr *iomr;
	uint8_t sbuf[4096]; /* what the peer writes from */
	struct ibv_mr *smr;
	uint16_t credits;
	uint8_t iomap_size;
};

static void peer_listen(struct peer *p)
{
	struct sockaddr_in a = addr;

	a.sin_port = htons((uint16_t)port);
	CHECK(rdma_create_id(NULL, &p->lid, NULL, RDMA_PS_TCP) == 0, "rdma_create_id");
	int one = 1;
	rdma_set_option(p->lid, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &one, sizeof(one));
	CHECK(rdma_bind_addr(p->lid, (struct sockaddr *)&a) == 0, "rdma_bind_addr port %d", port);
	CHECK(rdma_listen(p->lid, 4) == 0, "rdma_listen");
}

static void post_recvs(struct peer *p, int n)
{
	for (int i = 0; i < n; i++) {
		struct ibv_recv_wr wr = { .wr_id = 1 }, *bad;
		CHECK(ibv_post_recv(p->id->qp, &wr, &bad) == 0, "ibv_post_recv");
	}
}

/* accepts the next request with rsockets' connection data */
static void peer_accept(struct peer *p)
{
	struct ibv_qp_init_attr qa = { 0 };
	struct rs_wire_conn c = { 0 };
	struct rdma_conn_param cp = { 0 };

	CHECK(rdma_get_request(p->lid, &p->id) == 0, "rdma_get_request");
	CHECK(p->id->event->param.conn.private_data_len >= (int)sizeof(c) &&
		      ((const uint8_t *)p->id->event->param.conn.private_data)[0] == 1,
	      "the rsocket's connection data");
	memcpy(&p->theirs, p->id->event->param.conn.private_data, sizeof(c));
	p->theirs.credits = be16toh(p->theirs.credits);
	p->theirs.target_sgl.addr = be64toh(p->theirs.target_sgl.addr);
	p->theirs.target_sgl.key = be32toh(p->theirs.target_sgl.key);
	p->theirs.target_sgl.length = be32toh(p->theirs.target_sgl.length);
	p->theirs.data_buf.addr = be64toh(p->theirs.data_buf.addr);
	p->theirs.data_buf.key = be32toh(p->theirs.data_buf.key);
	p->theirs.data_buf.length = be32toh(p->theirs.data_buf.length);
	p->pd = p->id->pd;
	CHECK((p->cq = ibv_create_cq(p->id->verbs, 64, NULL, NULL, 0)) != NULL, "ibv_create_cq");
	qa.send_cq = qa.recv_cq = p->cq;
	qa.qp_type = IBV_QPT_RC;
	qa.sq_sig_all = 1;
	qa.cap.max_send_wr = qa.cap.max_recv_wr = 32;
	qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
	qa.cap.max_inline_data = 64;
	CHECK(rdma_create_qp(p->id, p->pd, &qa) == 0, "rdma_create_qp");
	int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
	CHECK((p->rmr = ibv_reg_mr(p->pd, p->rbuf, sizeof(p->rbuf), acc)) != NULL, "ibv_reg_mr");
	CHECK((p->tmr = ibv_reg_mr(p->pd, p->target, sizeof(p->target), acc)) != NULL, "ibv_reg_mr");
	CHECK((p->smr = ibv_reg_mr(p->pd, p->sbuf, sizeof(p->sbuf), acc)) != NULL, "ibv_reg_mr");
	if (p->io)
		CHECK((p->iomr = ibv_reg_mr(p->pd, p->io, p->iolen, acc)) != NULL, "ibv_reg_mr io");
	post_recvs(p, 32);
	c.version = 1;
	c.flags = RS_CONN_IOMAP;
	c.credits = htobe16(p->credits);
	c.iomap_size = p->iomap_size;
	c.target_sgl.addr = htobe64((uintptr_t)p->target);
	c.target_sgl.length = htobe32(RS_SGL_SIZE);
	c.target_sgl.key = htobe32(p->tmr->rkey);
	c.data_buf.addr = htobe64((uintptr_t)p->rbuf);
	c.data_buf.length = htobe32(sizeof(p->rbuf));
	c.data_buf.key = htobe32(p->rmr->rkey);
	cp.private_data = &c;
	cp.private_data_len = sizeof(c);
	cp.rnr_retry_count = 7;
	CHECK(rdma_accept(p->id, &cp) == 0, "rdma_accept");
}

/* a write with immediate (payload optional) into the rsocket's memory */
static void peer_write(struct peer *p, uint32_t imm, const void *data, uint32_t len, uint64_t raddr, uint32_t rkey)
{
	struct ibv_sge sge = { .addr = (uintptr_t)p->sbuf, .length = len, .lkey = p->smr->lkey };
	struct ibv_send_wr wr = { 0 }, *bad;
	struct ibv_wc wc;

	CHECK(len <= sizeof(p->sbuf), "a peer write of %u bytes", len);
	if (len)
		memcpy(p->sbuf, data, len);

	wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
	wr.imm_data = htobe32(imm);
	wr.sg_list = len ? &sge : NULL;
	wr.num_sge = len ? 1 : 0;
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	CHECK(ibv_post_send(p->id->qp, &wr, &bad) == 0, "ibv_post_send");
	for (int i = 0; i < 5000; i++) {
		int n = ibv_poll_cq(p->cq, 1, &wc);
		CHECK(n >= 0, "ibv_poll_cq");
		if (n && !(wc.wr_id & 1)) {
			CHECK(wc.status == IBV_WC_SUCCESS, "the peer's write: %s", ibv_wc_status_str(wc.status));
			return;
		}
		usleep(1000);
	}
	FAIL("the peer's write did not complete");
}

static void peer_close(struct peer *p)
{
	if (p->id) {
		/* no waiting for the rsocket's DREP: it may be this thread's */
		fcntl(p->id->channel->fd, F_SETFL, O_NONBLOCK);
		rdma_disconnect(p->id);
		rdma_destroy_qp(p->id);
		ibv_dereg_mr(p->rmr);
		ibv_dereg_mr(p->tmr);
		ibv_dereg_mr(p->smr);
		if (p->iomr)
			ibv_dereg_mr(p->iomr);
		ibv_destroy_cq(p->cq);
		rdma_destroy_id(p->id);
		p->id = NULL;
		p->iomr = NULL;
	}
}

/* data messages the peer received (recv completions with DATA imm) */
static int peer_data_msgs(struct peer *p, uint32_t *bytes, int want, int ms)
{
	struct ibv_wc wc;
	int n = 0;

	for (int t = 0; t < ms && n < want; t++) {
		while (ibv_poll_cq(p->cq, 1, &wc) == 1) {
			if (!(wc.wr_id & 1))
				continue;
			CHECK(wc.status == IBV_WC_SUCCESS, "peer recv: %s", ibv_wc_status_str(wc.status));
			uint32_t imm = be32toh(wc.imm_data);
			if (rs_imm_op(imm) == RS_OP_DATA) {
				*bytes += rs_imm_data(imm);
				n++;
			}
		}
		if (n < want)
			usleep(1000);
	}
	return n;
}

static int rs_client(void)
{
	struct sockaddr_in a = addr;
	int s;

	a.sin_port = htons((uint16_t)port);
	CHECK((s = rsocket(AF_INET, SOCK_STREAM, 0)) >= 0, "rsocket");
	CHECK(rconnect(s, (struct sockaddr *)&a, sizeof(a)) == 0, "rconnect");
	return s;
}

struct conn_arg {
	struct peer *p;
	int s;
	int iomap; /* RDMA_IOMAPSIZE for the client */
};

static void *client_thread(void *arg)
{
	struct conn_arg *c = arg;
	struct sockaddr_in a = addr;

	a.sin_port = htons((uint16_t)port);
	CHECK((c->s = rsocket(AF_INET, SOCK_STREAM, 0)) >= 0, "rsocket");
	if (c->iomap)
		CHECK(rsetsockopt(c->s, SOL_RDMA, RDMA_IOMAPSIZE, &c->iomap, sizeof(c->iomap)) == 0, "RDMA_IOMAPSIZE");
	CHECK(rconnect(c->s, (struct sockaddr *)&a, sizeof(a)) == 0, "rconnect");
	return NULL;
}

/* an rsocket connected to a fresh fake peer */
static int connect_pair(struct peer *p, int iomap)
{
	struct conn_arg c = { .p = p, .iomap = iomap };
	pthread_t t;

	pthread_create(&t, NULL, client_thread, &c);
	peer_accept(p);
	pthread_join(t, NULL);
	return c.s;
}

static void pattern(uint8_t *b, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		b[i] = (uint8_t)(i * 7 + seed);
}

struct send_arg {
	int s;
	ssize_t ret;
	atomic_int done;
};

static void *blocking_send(void *arg)
{
	struct send_arg *a = arg;
	static uint8_t b[4096];

	pattern(b, sizeof(b), 9);
	a->ret = rsend(a->s, b, sizeof(b), 0);
	atomic_store(&a->done, 1);
	return NULL;
}

static void test_credits(struct peer *p)
{
	static uint8_t b[1 << 20];
	uint32_t got = 0;
	int s;

	p->credits = 3;
	s = connect_pair(p, 0);
	CHECK(rfcntl(s, F_SETFL, O_NONBLOCK) == 0, "rfcntl O_NONBLOCK");
	pattern(b, sizeof(b), 1);
	ssize_t n = rsend(s, b, sizeof(b), 0), more;
	CHECK(n > 0 && n < (ssize_t)sizeof(b), "non-blocking rsend of 1 MiB with 3 credits: %zd", n);
	more = rsend(s, b + n, sizeof(b) - (size_t)n, 0);
	CHECK(more == -1 && errno == EAGAIN, "rsend after the credits ran out: %zd, want EAGAIN", more);
	int msgs = peer_data_msgs(p, &got, 3, 2000);
	CHECK(msgs == 3 && got == (uint32_t)n, "the peer got %d messages, %u bytes; want 3, %zd", msgs, got, n);
	CHECK(memcmp(p->rbuf, b, (size_t)n) == 0, "the bytes the peer got");
	CHECK(peer_data_msgs(p, &got, 1, 200) == 0, "a 4th message without a credit");

	/* blocking: waits for credits, and goes once the peer grants some */
	CHECK(rfcntl(s, F_SETFL, 0) == 0, "rfcntl blocking");
	struct send_arg a = { .s = s };
	pthread_t t;
	pthread_create(&t, NULL, blocking_send, &a);
	usleep(300000);
	CHECK(!atomic_load(&a.done), "a blocking rsend returned (%zd) without credits", a.ret);
	peer_write(p, rs_imm(RS_OP_SGL, 3 + 8), NULL, 0, 0, 0);
	pthread_join(t, NULL);
	CHECK(a.ret == 4096, "the blocking rsend after the grant: %zd", a.ret);
	got = 0;
	CHECK(peer_data_msgs(p, &got, 1, 2000) >= 1 && got > 0, "the peer got the blocked data");
	CHECK(rclose(s) == 0, "rclose");
	peer_close(p);
	printf("credits: %zd bytes in 3 messages, then EAGAIN; a blocking rsend waited and went once granted\n", n);
}

static void test_fuzz(struct peer *p)
{
	struct {
		uint32_t imm;
		const char *what;
	} bad[] = {
		{ rs_imm(RS_OP_RSVD, 0), "reserved opcode 5" },
		{ rs_imm(RS_OP_DATA_MORE, 10), "reserved opcode 1 (data more)" },
		{ rs_imm(RS_OP_WRITE, 10), "opcode 2 (write), which never travels" },
		{ rs_imm(RS_OP_DRA_MORE, 10), "reserved opcode 3" },
		{ rs_imm(RS_OP_DATA, 0), "data of length 0" },
		{ rs_imm(RS_OP_DATA, 0x1fffffff), "data longer than the room given" },
		{ rs_imm(RS_OP_IOMAP_SGL, 5), "iomap slot 5 of 0" },
		{ rs_imm(RS_OP_IOMAP_SGL, 0x10000), "iomap with reserved bits" },
		{ rs_imm(RS_OP_CTRL, 7), "control word 7" },
	};
	uint8_t msg[100], got[200];

	p->credits = 64;
	pattern(msg, sizeof(msg), 3);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int s = connect_pair(p, 0);
		peer_write(p, rs_imm(RS_OP_DATA, sizeof(msg)), msg, sizeof(msg), p->theirs.data_buf.addr,
			   p->theirs.data_buf.key);
		ssize_t n = rrecv(s, got, sizeof(got), 0);
		CHECK(n == (ssize_t)sizeof(msg) && memcmp(got, msg, sizeof(msg)) == 0, "the good message: %zd bytes", n);
		peer_write(p, bad[i].imm, NULL, 0, 0, 0);
		n = rrecv(s, got, sizeof(got), 0);
		CHECK(n == -1 && errno == ECONNRESET, "rrecv after %s: %zd, want ECONNRESET", bad[i].what, n);
		n = rsend(s, got, 10, 0);
		CHECK(n == -1, "rsend after %s: %zd, want an error", bad[i].what, n);
		CHECK(rclose(s) == 0, "rclose");
		peer_close(p);
		printf("fuzz: %s: connection reset\n", bad[i].what);
	}
}

struct acc_arg {
	int l, s;
};

static void *acceptor(void *arg)
{
	struct acc_arg *a = arg;

	a->s = raccept(a->l, NULL, NULL);
	return NULL;
}

/* a raw CM connect with the given private data: must be rejected */
static void bad_connect(const void *pd, uint8_t len, const char *what)
{
	struct rdma_cm_id *id;
	struct ibv_qp_init_attr qa = { 0 };
	struct rdma_conn_param cp = { 0 };
	struct sockaddr_in a = addr;

	a.sin_port = htons((uint16_t)port);
	CHECK(rdma_create_id(NULL, &id, NULL, RDMA_PS_TCP) == 0, "rdma_create_id");
	CHECK(rdma_resolve_addr(id, NULL, (struct sockaddr *)&a, 2000) == 0, "rdma_resolve_addr");
	CHECK(rdma_resolve_route(id, 2000) == 0, "rdma_resolve_route");
	qa.qp_type = IBV_QPT_RC;
	qa.cap.max_send_wr = qa.cap.max_recv_wr = 4;
	qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
	CHECK(rdma_create_qp(id, NULL, &qa) == 0, "rdma_create_qp");
	cp.private_data = pd;
	cp.private_data_len = len;
	int r = rdma_connect(id, &cp);
	CHECK(r == -1 && errno == ECONNREFUSED, "a connect with %s: %d, want ECONNREFUSED", what, r);
	rdma_destroy_qp(id);
	rdma_destroy_id(id);
	printf("privdata: a connect request with %s: rejected\n", what);
}

static void test_privdata(void)
{
	struct sockaddr_in a = addr;
	struct acc_arg aa;
	struct rs_wire_conn c = { 0 };
	pthread_t t;

	a.sin_port = htons((uint16_t)port);
	CHECK((aa.l = rsocket(AF_INET, SOCK_STREAM, 0)) >= 0, "rsocket");
	int one = 1;
	rsetsockopt(aa.l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	CHECK(rbind(aa.l, (struct sockaddr *)&a, sizeof(a)) == 0, "rbind");
	CHECK(rlisten(aa.l, 4) == 0, "rlisten");
	pthread_create(&t, NULL, acceptor, &aa);
	bad_connect(NULL, 0, "no private data");
	bad_connect("rsocket", 7, "7 bytes");
	c.version = 2;
	c.credits = htobe16(8);
	c.target_sgl.length = htobe32(2);
	c.data_buf.length = htobe32(4096);
	bad_connect(&c, sizeof(c), "version 2");
	c.version = 1;
	c.data_buf.length = 0;
	bad_connect(&c, sizeof(c), "an empty data buffer");
	int s = rs_client();
	pthread_join(t, NULL);
	CHECK(aa.s >= 0, "raccept after the bad requests");
	CHECK(rsend(s, "ok", 2, 0) == 2, "rsend");
	char b[2];
	CHECK(rrecv(aa.s, b, 2, MSG_WAITALL) == 2 && !memcmp(b, "ok", 2), "rrecv on the accepted socket");
	rclose(s);
	rclose(aa.s);
	rclose(aa.l);
	printf("privdata: the rsocket after them was accepted and talks\n");
}

static void test_riowrite(struct peer *p)
{
	static uint8_t io[1 << 20], src[1 << 20];
	struct rs_wire_iomap m;
	int s;

	p->credits = 64;
	p->io = io;
	p->iolen = sizeof(io);
	s = connect_pair(p, 4);
	/* the peer maps io at offset 0 into our iomap's slot 0 */
	m.offset = 0;
	m.sge.addr = (uintptr_t)io;
	m.sge.key = p->iomr->rkey;
	m.sge.length = sizeof(io);
	peer_write(p, rs_imm(RS_OP_IOMAP_SGL, 0), &m, sizeof(m),
		   p->theirs.target_sgl.addr + sizeof(struct rs_wire_sge) * RS_SGL_SIZE, p->theirs.target_sgl.key);
	/* the iomap message is a receive for the rsocket: let it see it */
	rrecv(s, src, 1, MSG_DONTWAIT);
	pattern(src, sizeof(src), 5);
	size_t w = riowrite(s, src, sizeof(src), 0, 0);
	CHECK(w == sizeof(src), "the first riowrite: %zd", (ssize_t)w);
	/* riowrites carry no message: the bytes just appear */
	for (int i = 0; i < 2000 && io[sizeof(io) - 1] != src[sizeof(src) - 1]; i++)
		usleep(1000);
	CHECK(memcmp(io, src, sizeof(io)) == 0, "the bytes riowrite wrote");
	/* now the peer goes in the middle of a stream of riowrites */
	uint64_t start = 0;
	size_t r = 0;
	int calls = 0;
	struct timespec ts;
	for (;;) {
		if (calls++ == 3)
			peer_close(p);
		r = riowrite(s, src, sizeof(src), 0, 0);
		if (r != sizeof(src))
			break;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		uint64_t now = (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
		if (!start)
			start = now;
		CHECK(now - start < 20000, "riowrite still succeeds 20 s after the peer went");
	}
	CHECK(r == (size_t)-1 || r < sizeof(src), "riowrite after the disconnect: %zd", (ssize_t)r);
	int e = errno;
	size_t r2 = riowrite(s, src, sizeof(src), 0, 0);
	CHECK(r2 == (size_t)-1, "the riowrite after the short one: %zd, want an error", (ssize_t)r2);
	printf("riowrite: the peer went after %d riowrites of 1 MiB; riowrite then returned %zd (%s), then -1 (%s)\n",
	       calls - 1, (ssize_t)r, strerror(e), strerror(errno));
	CHECK(rclose(s) == 0, "rclose");
	p->io = NULL;
}

/* not on the stack: its buffers are registered (the library pins and
 * remaps registered pages) */
static struct peer p;

int main(int argc, char **argv)
{

	if (argc != 3)
		FAIL("usage: rs_badpeer ADDR PORT");
	addr.sin_family = AF_INET;
	CHECK(inet_pton(AF_INET, argv[1], &addr.sin_addr) == 1, "address %s", argv[1]);
	port = atoi(argv[2]);
	alarm(120);
	p.iomap_size = 0;
	peer_listen(&p);
	test_credits(&p);
	test_fuzz(&p);
	test_riowrite(&p);
	rdma_destroy_id(p.lid);
	port++;
	test_privdata();
	printf("rs_badpeer: ok\n");
	return 0;
}
