/* The multicast calls against a running daemon, one process on one rdmafs
 * mount (rdmafs exec --mount M): what mckey does not look at. Bad joins
 * fail with the kernel's errno (no address, not a multicast address, join
 * flags, an RC id, an id without a device, leaving a group never joined);
 * on an Ethernet (RoCEv2, --addr) mount an IPv6 group is EOPNOTSUPP, as
 * the kernel's rdma_cm refuses it there (cma_iboe_join_multicast), while
 * an InfiniBand-style mount takes it as its MGID. MULTICAST_JOIN carries
 * the context, QPN 0xffffff, RDMA_UDP_QKEY and the group's AH (::ffff:G
 * and no LID on RoCEv2, the IPoIB MGID and a multicast LID on
 * InfiniBand). A send-only join is not attached: its QP does not receive
 * what it sends to the group, a full member's does, and after
 * rdma_leave_multicast the full member no longer does. An id holds at most
 * 1024 joins.
 *
 *   mcast_api GROUP [BIND_ADDR]   (GROUP an IPv4 multicast address)
 */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#include "check.h"

#define MSG 64
#define CTX_FULL ((void *)0x5a5a)
#define CTX_SEND ((void *)0xa5a5)

struct member {
	struct rdma_cm_id *id;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	uint8_t (*buf)[40 + MSG]; /* 4 of them, on the heap */
	struct ibv_ah *ah;
	struct rdma_ud_param ud;
};

static struct sockaddr_in group, bind_addr;
static bool have_bind;

static struct sockaddr_in v4(const char *s)
{
	struct sockaddr_in a = {.sin_family = AF_INET};
	CHECK(inet_pton(AF_INET, s, &a.sin_addr) == 1, "not an IPv4 address: %s", s);
	return a;
}

/* an id of ps on ch with its route to the group resolved (it has the
 * device), as mckey's */
static struct rdma_cm_id *resolved(struct rdma_event_channel *ch, enum rdma_port_space ps)
{
	struct rdma_cm_id *id;

	CHECK(rdma_create_id(ch, &id, NULL, ps) == 0, "create_id");
	CHECK(rdma_resolve_addr(id, have_bind ? (struct sockaddr *)&bind_addr : NULL, (struct sockaddr *)&group,
				2000) == 0,
	      "resolve_addr");
	rdma_ack_cm_event(next(ch, RDMA_CM_EVENT_ADDR_RESOLVED, id));
	return id;
}

static void member_init(struct member *m, struct rdma_event_channel *ch)
{
	struct ibv_qp_init_attr qa = {.qp_type = IBV_QPT_UD,
				      .cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1}};

	memset(m, 0, sizeof(*m));
	/* (not on the stack: rdmafs's libibverbs write-protects a registered
	 * range while deregistering it, and this thread's own frame there
	 * would wait on itself) */
	CHECK((m->buf = calloc(4, sizeof(*m->buf))), "calloc");
	m->id = resolved(ch, RDMA_PS_UDP);
	CHECK((m->cq = ibv_create_cq(m->id->verbs, 16, NULL, NULL, 0)), "create_cq");
	qa.send_cq = qa.recv_cq = m->cq;
	CHECK(rdma_create_qp(m->id, NULL, &qa) == 0, "rdma_create_qp");
	CHECK((m->mr = ibv_reg_mr(m->id->pd, m->buf, 4 * sizeof(*m->buf), IBV_ACCESS_LOCAL_WRITE)), "reg_mr");
	for (int i = 0; i < 3; i++) {
		struct ibv_sge sge = {.addr = (uintptr_t)m->buf[i], .length = sizeof(m->buf[i]), .lkey = m->mr->lkey};
		struct ibv_recv_wr wr = {.wr_id = i, .sg_list = &sge, .num_sge = 1}, *bad;
		CHECK(ibv_post_recv(m->id->qp, &wr, &bad) == 0, "post_recv");
	}
}

/* join with flags, read the JOIN event and check what it carries */
static void member_join(struct member *m, struct rdma_event_channel *ch, uint32_t flags, void *ctx, bool eth)
{
	struct rdma_cm_join_mc_attr_ex a = {.comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS,
					    .join_flags = flags,
					    .addr = (struct sockaddr *)&group};
	struct rdma_cm_event *e;

	CHECK(rdma_join_multicast_ex(m->id, &a, ctx) == 0, "rdma_join_multicast_ex flags %u", flags);
	e = next(ch, RDMA_CM_EVENT_MULTICAST_JOIN, m->id);
	CHECK(e->param.ud.private_data == ctx, "the JOIN event's context %p, want %p", e->param.ud.private_data, ctx);
	CHECK(e->param.ud.qp_num == 0xffffff && e->param.ud.qkey == RDMA_UDP_QKEY, "JOIN: qpn 0x%x qkey 0x%x",
	      e->param.ud.qp_num, e->param.ud.qkey);
	m->ud = e->param.ud;
	rdma_ack_cm_event(e);
	const uint8_t *g = m->ud.ah_attr.grh.dgid.raw;
	CHECK(m->ud.ah_attr.is_global, "the JOIN's AH has no GRH");
	if (eth) {
		static const uint8_t mapped[12] = {[10] = 0xff, [11] = 0xff};
		CHECK(!memcmp(g, mapped, 12) && !memcmp(g + 12, &group.sin_addr, 4) && m->ud.ah_attr.dlid == 0,
		      "RoCEv2 MGID/LID of the group is not ::ffff:G and 0");
	} else {
		CHECK(g[0] == 0xff && g[1] == 0x12 && g[2] == 0x40 && g[3] == 0x1b, "IB MGID of the group lacks the IPoIB prefix");
		CHECK(m->ud.ah_attr.dlid >= 0xc000 && m->ud.ah_attr.dlid < 0xffff, "IB MLID 0x%x", m->ud.ah_attr.dlid);
	}
	CHECK((m->ah = ibv_create_ah(m->id->pd, &m->ud.ah_attr)), "create_ah");
}

static void send_group(struct member *m, int n)
{
	struct ibv_wc wc;

	for (int i = 0; i < n; i++) {
		struct ibv_sge sge = {.addr = (uintptr_t)m->buf[3], .length = MSG, .lkey = m->mr->lkey};
		struct ibv_send_wr wr = {.wr_id = 100 + i, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
					 .send_flags = IBV_SEND_SIGNALED}, *bad;
		wr.wr.ud.ah = m->ah;
		wr.wr.ud.remote_qpn = m->ud.qp_num;
		wr.wr.ud.remote_qkey = m->ud.qkey;
		CHECK(ibv_post_send(m->id->qp, &wr, &bad) == 0, "post_send");
	}
	for (int got = 0; got < n;) {
		int k = ibv_poll_cq(m->cq, 1, &wc);
		CHECK(k >= 0, "poll_cq");
		if (k && wc.opcode == IBV_WC_SEND) {
			CHECK(wc.status == IBV_WC_SUCCESS, "send status %d", wc.status);
			got++;
		}
		CHECK(!k || wc.opcode == IBV_WC_SEND, "the send-only member received (wr_id %lu)", (unsigned long)wc.wr_id);
	}
}

/* the receive completions on m's CQ within ms milliseconds */
static int received(struct member *m, int ms)
{
	struct ibv_wc wc;
	int n = 0;

	for (int t = 0; t < ms; t++) {
		int k;
		while ((k = ibv_poll_cq(m->cq, 1, &wc)) > 0) {
			CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV && wc.byte_len == 40 + MSG,
			      "recv status %d opcode %d len %u", wc.status, wc.opcode, wc.byte_len);
			n++;
		}
		CHECK(k == 0, "poll_cq");
		usleep(1000);
	}
	return n;
}

static void bad_joins(struct rdma_event_channel *ch, struct member *m, bool eth)
{
	struct sockaddr_in uni = v4("10.1.2.3");
	struct sockaddr_in6 six = {.sin6_family = AF_INET6};
	struct rdma_cm_join_mc_attr_ex a = {.comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS,
					    .join_flags = 7,
					    .addr = (struct sockaddr *)&group};
	struct rdma_cm_id *rc, *bare;

	errno = 0;
	CHECK(rdma_join_multicast(m->id, NULL, NULL) == -1 && errno == EINVAL, "join without an address");
	CHECK(rdma_join_multicast(m->id, (struct sockaddr *)&uni, NULL) == -1 && errno == EINVAL,
	      "join of a unicast address");
	CHECK(rdma_join_multicast_ex(m->id, &a, NULL) == -1 && errno == EINVAL, "join flags 7");
	a.comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS;
	CHECK(rdma_join_multicast_ex(m->id, &a, NULL) == -1 && errno == EINVAL, "join without join flags");
	rc = resolved(ch, RDMA_PS_TCP);
	CHECK(rdma_join_multicast(rc, (struct sockaddr *)&group, NULL) == -1 && errno == EINVAL, "join of an RC id");
	rdma_destroy_id(rc);
	CHECK(rdma_create_id(ch, &bare, NULL, RDMA_PS_UDP) == 0, "create_id");
	CHECK(rdma_join_multicast(bare, (struct sockaddr *)&group, NULL) == -1 && errno == EINVAL,
	      "join of an id without a device");
	rdma_destroy_id(bare);
	CHECK(rdma_leave_multicast(m->id, (struct sockaddr *)&group) == -1 && errno == EADDRNOTAVAIL,
	      "leave of a group never joined");
	inet_pton(AF_INET6, "ff0e::4242", &six.sin6_addr);
	if (eth) {
		CHECK(rdma_join_multicast(m->id, (struct sockaddr *)&six, NULL) == -1 && errno == EOPNOTSUPP,
		      "an IPv6 group on RoCEv2 (the kernel's rdma_cm refuses it)");
	} else {
		struct rdma_cm_event *e;
		CHECK(rdma_join_multicast(m->id, (struct sockaddr *)&six, NULL) == 0, "an IPv6 group on InfiniBand");
		e = next(ch, RDMA_CM_EVENT_MULTICAST_JOIN, m->id);
		CHECK(!memcmp(e->param.ud.ah_attr.grh.dgid.raw, &six.sin6_addr, 16), "the IPv6 group's MGID");
		rdma_ack_cm_event(e);
		CHECK(rdma_leave_multicast(m->id, (struct sockaddr *)&six) == 0, "leave the IPv6 group");
	}
}

/* an id holds at most 1024 joins (the library's bound; the attachments of
 * full joins are the daemon's, bounded per user there): send-only joins of
 * 1024 groups, then one more is ENOMEM */
static void join_bound(struct rdma_event_channel *ch)
{
	struct rdma_cm_join_mc_attr_ex a = {.comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS,
					    .join_flags = RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER};
	struct rdma_cm_id *id = resolved(ch, RDMA_PS_UDP);
	struct sockaddr_in g = group;
	int i;

	a.addr = (struct sockaddr *)&g;
	for (i = 0; i <= 1024; i++) {
		g.sin_addr.s_addr = htonl(0xef400000u + (uint32_t)i); /* 239.64.x.y */
		if (rdma_join_multicast_ex(id, &a, NULL))
			break;
	}
	CHECK(i == 1024 && errno == ENOMEM, "join %d of one id failed (want the 1025th, ENOMEM)", i);
	for (i = 0; i < 1024; i++)
		rdma_ack_cm_event(next(ch, RDMA_CM_EVENT_MULTICAST_JOIN, id));
	g.sin_addr.s_addr = htonl(0xef400000u + 7);
	CHECK(rdma_leave_multicast(id, (struct sockaddr *)&g) == 0, "leave one of 1024");
	CHECK(rdma_join_multicast_ex(id, &a, NULL) == 0, "join again after a leave");
	rdma_ack_cm_event(next(ch, RDMA_CM_EVENT_MULTICAST_JOIN, id));
	CHECK(rdma_destroy_id(id) == 0, "destroy an id with 1024 joins");
}

int main(int argc, char **argv)
{
	struct rdma_event_channel *ch;
	struct member full, sendonly;
	struct ibv_port_attr pa;
	bool eth;
	int n;

	CHECK(argc == 2 || argc == 3, "usage: mcast_api GROUP [BIND_ADDR]");
	group = v4(argv[1]);
	if (argc == 3) {
		bind_addr = v4(argv[2]);
		have_bind = true;
	}
	CHECK((ch = rdma_create_event_channel()), "create_event_channel");
	member_init(&full, ch);
	member_init(&sendonly, ch);
	CHECK(ibv_query_port(full.id->verbs, 1, &pa) == 0, "query_port");
	eth = pa.link_layer == IBV_LINK_LAYER_ETHERNET;
	bad_joins(ch, &full, eth);
	join_bound(ch);

	member_join(&full, ch, RDMA_MC_JOIN_FLAG_FULLMEMBER, CTX_FULL, eth);
	member_join(&sendonly, ch, RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER, CTX_SEND, eth);
	send_group(&sendonly, 2);
	CHECK((n = received(&full, 2000)) == 2, "the full member received %d of 2 datagrams", n);
	CHECK(received(&sendonly, 100) == 0, "the send-only member received its own datagrams");

	CHECK(rdma_leave_multicast(full.id, (struct sockaddr *)&group) == 0, "leave");
	send_group(&sendonly, 1);
	CHECK((n = received(&full, 300)) == 0, "received %d datagrams after leaving", n);

	struct member *all[] = {&full, &sendonly};
	for (int i = 0; i < 2; i++) {
		struct member *m = all[i];
		ibv_destroy_ah(m->ah);
		rdma_destroy_qp(m->id);
		ibv_dereg_mr(m->mr);
		ibv_destroy_cq(m->cq);
		rdma_destroy_id(m->id);
		free(m->buf);
	}
	rdma_destroy_event_channel(ch);
	printf("mcast_api: %s mount, group %s: bad joins refused, 1024 joins an id, JOIN events, send-only and full members, leave: ok\n",
	       eth ? "RoCEv2" : "InfiniBand", argv[1]);
	return 0;
}
