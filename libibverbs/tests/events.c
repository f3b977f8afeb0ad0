/* events: completion channels and asynchronous events as real descriptors.
 * A channel's fd becomes readable for poll() and epoll when an armed CQ
 * completes, ibv_get_cq_event names that CQ, a non-blocking fd answers
 * EAGAIN; async_fd becomes readable for an SRQ limit and a QP access error,
 * ibv_get_async_event names the object, and destroy waits for the acks.
 *
 *   events               (the library found on LD_LIBRARY_PATH) */
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "common.h"


static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_port_attr port;
static union ibv_gid gid;

static struct ibv_qp *qp_new(struct ibv_cq *cq, struct ibv_srq *srq)
{
	struct ibv_qp_init_attr a = {.send_cq = cq, .recv_cq = cq, .srq = srq, .qp_type = IBV_QPT_RC,
				     .cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1}};
	return ibv_create_qp(pd, &a);
}

static void connect_qp(struct ibv_qp *q, uint32_t dest)
{
	int e = tc_connect(q, dest, &port, &gid, IBV_ACCESS_REMOTE_WRITE, 10, 2);

	if (e) {
		fprintf(stderr, "connect: %s\n", strerror(e));
		exit(1);
	}
}

static int post(struct ibv_qp *q, enum ibv_wr_opcode op, struct ibv_mr *mr, uint32_t len, uint32_t rkey)
{
	struct ibv_sge sge = {.addr = (uintptr_t)mr->addr, .length = len, .lkey = mr->lkey};
	struct ibv_send_wr wr = {.wr_id = op, .sg_list = &sge, .num_sge = 1, .opcode = op,
				 .send_flags = IBV_SEND_SIGNALED,
				 .wr.rdma = {.remote_addr = (uintptr_t)mr->addr, .rkey = rkey}}, *bad;
	return ibv_post_send(q, &wr, &bad);
}

static int readable(int fd, int ms)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};

	return poll(&p, 1, ms) == 1 && (p.revents & POLLIN);
}

static void drain(struct ibv_cq *cq, int want)
{
	struct ibv_wc wc;

	for (int got = 0, spins = 0; got < want && spins < 5000000; spins++)
		got += ibv_poll_cq(cq, 1, &wc) > 0;
}

int main(void)
{
	int num;
	struct ibv_device **list = ibv_get_device_list(&num);

	if (!list || num < 1 || !(ctx = ibv_open_device(list[0]))) {
		fprintf(stderr, "no device\n");
		return 1;
	}
	if (ibv_query_port(ctx, 1, &port) || ibv_query_gid(ctx, 1, 0, &gid))
		return 1;
	pd = ibv_alloc_pd(ctx);
	char *buf = aligned_alloc(4096, 8192);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, 8192, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!pd || !mr)
		return 1;

	/* Completion channel: poll, epoll, the CQ named, non-blocking EAGAIN. */
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	int token;
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, &token, ch, 0);
	CHECK(ch && cq, "channel and CQ");
	struct ibv_qp *a = qp_new(cq, NULL), *b = qp_new(cq, NULL);
	connect_qp(a, b->qp_num);
	connect_qp(b, a->qp_num);
	int ep = epoll_create1(0);
	struct epoll_event ev = {.events = EPOLLIN}, out;
	CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, ch->fd, &ev) == 0, "epoll_ctl on channel->fd: %s", strerror(errno));
	CHECK(!readable(ch->fd, 0), "channel readable before any event");
	CHECK(ibv_req_notify_cq(cq, 0) == 0, "req_notify_cq");
	CHECK(post(a, IBV_WR_RDMA_WRITE, mr, 64, mr->rkey) == 0, "post");
	CHECK(readable(ch->fd, 5000), "poll() on channel->fd after a completion");
	CHECK(epoll_wait(ep, &out, 1, 0) == 1, "epoll_wait on channel->fd");
	struct ibv_cq *got_cq;
	void *got_ctx;
	CHECK(ibv_get_cq_event(ch, &got_cq, &got_ctx) == 0 && got_cq == cq && got_ctx == &token,
	      "ibv_get_cq_event names the CQ and its context");
	ibv_ack_cq_events(cq, 1);
	drain(cq, 1);
	fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK);
	errno = 0;
	CHECK(ibv_get_cq_event(ch, &got_cq, &got_ctx) == -1 && errno == EAGAIN, "non-blocking: EAGAIN (%d)", errno);
	CHECK(ibv_destroy_comp_channel(ch) == EBUSY, "a channel with a CQ is busy");
	close(ep);

	/* Async: an SRQ below its limit. */
	struct ibv_srq_init_attr sa = {.attr = {.max_wr = 8, .max_sge = 1}};
	struct ibv_srq *srq = ibv_create_srq(pd, &sa);
	CHECK(srq != NULL, "create_srq");
	struct ibv_cq *cq2 = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	struct ibv_qp *c = qp_new(cq2, NULL), *d = qp_new(cq2, srq);
	connect_qp(c, d->qp_num);
	connect_qp(d, c->qp_num);
	for (int i = 0; i < 4; i++) {
		struct ibv_sge sge = {.addr = (uintptr_t)buf + 4096, .length = 64, .lkey = mr->lkey};
		struct ibv_recv_wr rwr = {.wr_id = i, .sg_list = &sge, .num_sge = 1}, *rbad;
		CHECK(ibv_post_srq_recv(srq, &rwr, &rbad) == 0, "post_srq_recv");
	}
	struct ibv_srq_attr lim = {.srq_limit = 3};
	CHECK(ibv_modify_srq(srq, &lim, IBV_SRQ_LIMIT) == 0, "modify_srq limit");
	CHECK(!readable(ctx->async_fd, 0), "async_fd readable before any event");
	for (int i = 0; i < 2; i++)
		CHECK(post(c, IBV_WR_SEND, mr, 16, 0) == 0, "send");
	drain(cq2, 4);
	CHECK(readable(ctx->async_fd, 5000), "poll() on async_fd after the SRQ went below its limit");
	struct ibv_async_event ae;
	CHECK(ibv_get_async_event(ctx, &ae) == 0 && ae.event_type == IBV_EVENT_SRQ_LIMIT_REACHED &&
		      ae.element.srq == srq,
	      "srq_limit_reached names the SRQ (got %s)", ibv_event_type_str(ae.event_type));
	ibv_ack_async_event(&ae);

	/* Async: a WRITE with a bad rkey puts the responder in ERR. */
	CHECK(post(a, IBV_WR_RDMA_WRITE, mr, 64, mr->rkey ^ 0x5500) == 0, "post bad rkey");
	CHECK(readable(ctx->async_fd, 5000), "poll() on async_fd after an access error");
	CHECK(ibv_get_async_event(ctx, &ae) == 0 && ae.event_type == IBV_EVENT_QP_ACCESS_ERR && ae.element.qp == b,
	      "qp_access_err names the responder (got %s)", ibv_event_type_str(ae.event_type));
	ibv_ack_async_event(&ae);
	fcntl(ctx->async_fd, F_SETFL, fcntl(ctx->async_fd, F_GETFL) | O_NONBLOCK);
	usleep(100000);
	while (ibv_get_async_event(ctx, &ae) == 0)
		ibv_ack_async_event(&ae); /* the requester's events, if any */
	CHECK(errno == EAGAIN, "non-blocking async_fd: EAGAIN (%d)", errno);

	CHECK(ibv_destroy_qp(a) == 0 && ibv_destroy_qp(b) == 0 && ibv_destroy_qp(c) == 0 && ibv_destroy_qp(d) == 0,
	      "destroy QPs");
	CHECK(ibv_destroy_srq(srq) == 0, "destroy SRQ (its event acked)");
	CHECK(ibv_destroy_cq(cq) == 0 && ibv_destroy_cq(cq2) == 0, "destroy CQs");
	CHECK(ibv_destroy_comp_channel(ch) == 0, "destroy channel");
	ibv_dereg_mr(mr);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	free(buf);
	if (failures) {
		fprintf(stderr, "events: %d checks failed\n", failures);
		return 1;
	}
	printf("events: channel and async fds poll, epoll and block as descriptors do\n");
	return 0;
}
