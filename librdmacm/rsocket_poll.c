/* rpoll, rselect, rfcntl and the socket options of rsockets.
 *
 * rpoll takes rsocket numbers and ordinary descriptors in one array. For
 * an rsocket it first processes completions without waiting and reports
 * what the socket can do; only if nothing is ready does it arm the CQs
 * and sleep in poll(2) on the channels behind each socket (completion
 * channel and CM channel), then look again.
 */
#include "rsocket_int.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <rdma/rsocket.h>

static bool rs_always(struct rsock *rs)
{
	(void)rs;
	return true;
}

/* What one stream socket can do now. */
static short rs_poll_one(struct rsock *rs, short events)
{
	short rev = 0;

	if (rs->type == SOCK_DGRAM)
		return ds_poll_one(rs, events);
	if (rs->state == RS_LISTENING) {
		struct pollfd p = { .fd = rs->id->channel->fd, .events = POLLIN };
		if (poll(&p, 1, 0) > 0 && (p.revents & POLLIN))
			rev |= POLLIN;
		return rev & events;
	}
	if (rs->state & RS_OPENING) {
		if (rs_poll_connect(rs) && errno == EINPROGRESS)
			return 0;
	}
	if (rs->state & (RS_CONNECTED | RS_DISCONNECTED | RS_ERROR)) {
		pthread_mutex_lock(&rs->cq_lock);
		if (rs->state & RS_CONNECTED)
			rs_cm_events(rs);
		pthread_mutex_unlock(&rs->cq_lock);
		rs_process(rs, true, rs_always);
		pthread_mutex_lock(&rs->cq_lock);
		if ((events & POLLIN) && (rs_have_rdata(rs) || !(rs->state & RS_READABLE)))
			rev |= POLLIN;
		if ((events & POLLOUT) && (rs->state & RS_WRITABLE) && rs_can_send(rs))
			rev |= POLLOUT;
		/* as TCP: the hang-up shows once the data before it is read */
		if (!(rs->state & RS_CONNECTED) && !rs_have_rdata(rs))
			rev |= rs->state == RS_DISCONNECTED ? POLLHUP : POLLERR;
		pthread_mutex_unlock(&rs->cq_lock);
		return rev;
	}
	if (rs->state == RS_CONNECT_ERROR)
		return (short)((events & (POLLIN | POLLOUT)) | POLLERR);
	return 0;
}

/* Arms the socket and fills the descriptors to sleep on (at most 2). */
static int rs_poll_arm(struct rsock *rs, struct pollfd *out)
{
	if (rs->type == SOCK_DGRAM)
		return ds_poll_fds(rs, out);
	out[0].fd = rs->id->channel->fd;
	out[0].events = POLLIN;
	if (!(rs->state & RS_CONNECTED) || !rs->id->recv_cq_channel)
		return 1;
	pthread_mutex_lock(&rs->cq_lock);
	if (!rs->cq_armed) {
		ibv_req_notify_cq(rs->id->recv_cq, 0);
		rs->cq_armed = true;
	}
	pthread_mutex_unlock(&rs->cq_lock);
	out[1].fd = rs->id->recv_cq_channel->fd;
	out[1].events = POLLIN;
	return 2;
}

static void rs_poll_woken(struct rsock *rs, const struct pollfd *p, int n)
{
	if (rs->type == SOCK_DGRAM) {
		ds_poll_woken(rs);
		return;
	}
	if (n == 2 && (p[1].revents & POLLIN)) {
		pthread_mutex_lock(&rs->cq_lock);
		rs_cq_event(rs);
		pthread_mutex_unlock(&rs->cq_lock);
	}
}

/* One pass without waiting: the number of entries with events. */
static int rs_poll_check(struct pollfd *fds, nfds_t nfds)
{
	int n = 0;

	for (nfds_t i = 0; i < nfds; i++) {
		struct rsock *rs = fds[i].fd >= 0 ? rs_get(fds[i].fd) : NULL;
		fds[i].revents = 0;
		if (fds[i].fd < 0)
			continue;
		if (rs) {
			fds[i].revents = rs_poll_one(rs, fds[i].events);
		} else {
			struct pollfd p = { .fd = fds[i].fd, .events = fds[i].events };
			if (poll(&p, 1, 0) > 0)
				fds[i].revents = p.revents;
		}
		if (fds[i].revents)
			n++;
	}
	return n;
}

int rpoll(struct pollfd *fds, nfds_t nfds, int timeout)
{
	uint64_t start = rs_now_us();
	struct pollfd *rfds;
	int *cnt, n;

	if (!fds && nfds)
		return rs_fail(EFAULT);
	if ((n = rs_poll_check(fds, nfds)) || timeout == 0)
		return n;
	rfds = calloc(nfds * 2 + 1, sizeof(*rfds));
	cnt = calloc(nfds + 1, sizeof(*cnt));
	if (!rfds || !cnt) {
		free(rfds);
		free(cnt);
		return rs_fail(ENOMEM);
	}
	for (;;) {
		nfds_t k = 0;
		for (nfds_t i = 0; i < nfds; i++) {
			struct rsock *rs = fds[i].fd >= 0 ? rs_get(fds[i].fd) : NULL;
			if (rs) {
				cnt[i] = rs_poll_arm(rs, &rfds[k]);
			} else {
				rfds[k] = fds[i];
				rfds[k].revents = 0;
				cnt[i] = 1;
			}
			k += (nfds_t)cnt[i];
		}
		/* a completion may have come before the arm */
		if ((n = rs_poll_check(fds, nfds)))
			break;
		int wait = -1;
		if (timeout > 0) {
			uint64_t spent = (rs_now_us() - start) / 1000;
			if (spent >= (uint64_t)timeout)
				break;
			wait = timeout - (int)spent;
		}
		n = poll(rfds, k, wait);
		if (n < 0)
			break;
		if (n == 0) {
			if (timeout > 0)
				break;
			continue;
		}
		k = 0;
		for (nfds_t i = 0; i < nfds; i++) {
			struct rsock *rs = fds[i].fd >= 0 ? rs_get(fds[i].fd) : NULL;
			if (rs)
				rs_poll_woken(rs, &rfds[k], cnt[i]);
			k += (nfds_t)cnt[i];
		}
		if ((n = rs_poll_check(fds, nfds)))
			break;
	}
	free(rfds);
	free(cnt);
	return n;
}

int rselect(int nfds, fd_set *readfds, fd_set *writefds, fd_set *exceptfds, struct timeval *timeout)
{
	struct pollfd *p;
	int n = 0, ret, to;

	if (nfds < 0 || nfds > FD_SETSIZE)
		return rs_fail(EINVAL);
	if (!(p = calloc((size_t)nfds + 1, sizeof(*p))))
		return rs_fail(ENOMEM);
	for (int fd = 0; fd < nfds; fd++) {
		short ev = 0;
		if (readfds && FD_ISSET(fd, readfds))
			ev |= POLLIN;
		if (writefds && FD_ISSET(fd, writefds))
			ev |= POLLOUT;
		if (exceptfds && FD_ISSET(fd, exceptfds))
			ev |= POLLPRI;
		if (ev) {
			p[n].fd = fd;
			p[n].events = ev;
			n++;
		}
	}
	to = timeout ? (int)(timeout->tv_sec * 1000 + (timeout->tv_usec + 999) / 1000) : -1;
	ret = rpoll(p, (nfds_t)n, to);
	if (ret < 0) {
		free(p);
		return ret;
	}
	if (readfds)
		FD_ZERO(readfds);
	if (writefds)
		FD_ZERO(writefds);
	if (exceptfds)
		FD_ZERO(exceptfds);
	ret = 0;
	for (int i = 0; i < n; i++) {
		int hit = 0;
		if (readfds && (p[i].revents & (POLLIN | POLLHUP | POLLERR)) && (p[i].events & POLLIN)) {
			FD_SET(p[i].fd, readfds);
			hit = 1;
		}
		if (writefds && (p[i].revents & (POLLOUT | POLLERR)) && (p[i].events & POLLOUT)) {
			FD_SET(p[i].fd, writefds);
			hit = 1;
		}
		if (exceptfds && (p[i].revents & POLLPRI)) {
			FD_SET(p[i].fd, exceptfds);
			hit = 1;
		}
		ret += hit;
	}
	free(p);
	return ret;
}

int rfcntl(int s, int cmd, ...)
{
	struct rsock *rs = rs_get(s);
	va_list ap;
	long arg;

	if (!rs)
		return rs_fail(EBADF);
	va_start(ap, cmd);
	arg = va_arg(ap, long);
	va_end(ap);
	switch (cmd) {
	case F_GETFL:
		return rs->fs_flags | O_RDWR;
	case F_SETFL: {
		bool nb = arg & O_NONBLOCK;
		rs->fs_flags = nb ? O_NONBLOCK : 0;
		if (rs->type == SOCK_DGRAM)
			return 0;
		/* a connected socket's channel is always non-blocking; the
		 * others follow the socket (rdma_get_request, connect) */
		if (!(rs->state & (RS_CONNECTED | RS_DISCONNECTED | RS_ERROR)) && rs_set_fl(rs->id->channel->fd, nb))
			return -1;
		return 0;
	}
	case F_GETFD:
		return rs->fd_flags;
	case F_SETFD:
		rs->fd_flags = (int)arg & FD_CLOEXEC;
		return 0;
	default:
		return rs_fail(ENOTSUP);
	}
}

static int opt_int(const void *v, socklen_t len, int *out)
{
	if (!v || len < sizeof(int))
		return EINVAL;
	memcpy(out, v, sizeof(int));
	return 0;
}

static int put_int(void *v, socklen_t *len, int x)
{
	if (!v || !len || *len < sizeof(int))
		return rs_fail(EINVAL);
	memcpy(v, &x, sizeof(int));
	*len = sizeof(int);
	return 0;
}

int rsetsockopt(int s, int level, int name, const void *v, socklen_t len)
{
	struct rsock *rs = rs_get(s);
	int x, err;

	if (!rs)
		return rs_fail(EBADF);
	bool before_ep = rs->type == SOCK_STREAM ? !rs->id->qp : !rs->ds;
	if (level == SOL_RDMA) {
		if (!before_ep || (rs->state & RS_OPENING))
			return rs_fail(EINVAL);
		/* an IB path to use instead of resolving one: our devices
		 * resolve their own routes */
		if (name == RDMA_ROUTE)
			return rs_fail(ENOTSUP);
		if ((err = opt_int(v, len, &x)))
			return rs_fail(err);
		switch (name) {
		case RDMA_SQSIZE:
			rs->sq_size = (uint16_t)(x < 1 ? 1 : x > RS_QP_MAX ? RS_QP_MAX : x);
			return 0;
		case RDMA_RQSIZE:
			rs->rq_size = (uint16_t)(x < 1 ? 1 : x > RS_QP_MAX ? RS_QP_MAX : x);
			return 0;
		case RDMA_INLINE:
			rs->sq_inline = (uint16_t)(x < 0 ? 0 : x > RS_QP_MAX ? RS_QP_MAX : x);
			return 0;
		case RDMA_IOMAPSIZE:
			if (rs->type != SOCK_STREAM)
				return rs_fail(EINVAL);
			rs->tiomap_size = rs_unscale8(rs_scale8(x < 0 ? 0 : x > 0x7fff ? 0x7fff : x));
			return 0;
		}
		return rs_fail(ENOTSUP);
	}
	if (rs->type == SOCK_DGRAM && level != SOL_SOCKET)
		return setsockopt(rs->udp_sock, level, name, v, len);
	switch (level) {
	case SOL_SOCKET:
		if (name == SO_LINGER) {
			if (!v || len < sizeof(struct linger))
				return rs_fail(EINVAL);
			memcpy(&rs->linger, v, sizeof(rs->linger));
			return 0;
		}
		if ((err = opt_int(v, len, &x)))
			return rs_fail(err);
		switch (name) {
		case SO_REUSEADDR:
			if (rs->type == SOCK_STREAM &&
			    rdma_set_option(rs->id, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &x, sizeof(x)) &&
			    rs->state != RS_INIT)
				return -1;
			if (rs->type == SOCK_DGRAM && setsockopt(rs->udp_sock, level, name, v, len))
				return -1;
			break;
		case SO_RCVBUF:
			if (before_ep)
				rs->rbuf_size = (uint32_t)(x < RS_SNDLOWAT ? RS_SNDLOWAT : x) << 1;
			break;
		case SO_SNDBUF:
			if (before_ep)
				rs->sbuf_size = (uint32_t)(x < RS_SNDLOWAT ? RS_SNDLOWAT : x) << 1;
			break;
		case SO_KEEPALIVE:
		case SO_OOBINLINE:
		case SO_BROADCAST:
			break;
		default:
			return rs_fail(ENOTSUP);
		}
		if (x)
			rs->so_opts |= 1ull << name;
		else
			rs->so_opts &= ~(1ull << name);
		return 0;
	case IPPROTO_TCP:
		if ((err = opt_int(v, len, &x)))
			return rs_fail(err);
		switch (name) {
		case TCP_NODELAY:
			rs->tcp_nodelay = !!x; /* every rsend goes out at once anyway */
			return 0;
		case TCP_KEEPIDLE:
			rs->keepalive_time = x;
			return 0;
		case TCP_KEEPCNT:
		case TCP_KEEPINTVL:
		case TCP_MAXSEG:
			return 0;
		}
		return rs_fail(ENOTSUP);
	case IPPROTO_IP:
		if (name == IP_TOS && !opt_int(v, len, &x)) {
			uint8_t tos = (uint8_t)x;
			rs->tos = x;
			rdma_set_option(rs->id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, sizeof(tos));
			return 0;
		}
		return rs_fail(ENOTSUP);
	case IPPROTO_IPV6:
		if (name == IPV6_V6ONLY && !opt_int(v, len, &x)) {
			rs->ipv6only = !!x;
			if (rdma_set_option(rs->id, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, &x, sizeof(x)))
				return -1;
			return 0;
		}
		return rs_fail(ENOTSUP);
	}
	return rs_fail(ENOTSUP);
}

int rgetsockopt(int s, int level, int name, void *v, socklen_t *len)
{
	struct rsock *rs = rs_get(s);

	if (!rs)
		return rs_fail(EBADF);
	if (!v || !len)
		return rs_fail(EINVAL);
	switch (level) {
	case SOL_SOCKET:
		switch (name) {
		case SO_REUSEADDR:
		case SO_KEEPALIVE:
		case SO_OOBINLINE:
		case SO_BROADCAST:
			return put_int(v, len, !!(rs->so_opts & (1ull << name)));
		case SO_RCVBUF:
			return put_int(v, len, (int)rs->rbuf_size);
		case SO_SNDBUF:
			return put_int(v, len, (int)rs->sbuf_size);
		case SO_LINGER:
			if (*len < sizeof(struct linger))
				return rs_fail(EINVAL);
			memcpy(v, &rs->linger, sizeof(rs->linger));
			*len = sizeof(struct linger);
			return 0;
		case SO_ERROR: {
			pthread_mutex_lock(&rs->cq_lock);
			int e = rs->err;
			rs->err = 0;
			pthread_mutex_unlock(&rs->cq_lock);
			return put_int(v, len, e);
		}
		case SO_TYPE:
			return put_int(v, len, rs->type);
		}
		break;
	case IPPROTO_TCP:
		switch (name) {
		case TCP_NODELAY:
			return put_int(v, len, rs->tcp_nodelay);
		case TCP_MAXSEG:
			return put_int(v, len, RS_SNDLOWAT);
		case TCP_KEEPIDLE:
			return put_int(v, len, rs->keepalive_time ? rs->keepalive_time : 7200);
		}
		break;
	case IPPROTO_IP:
		if (name == IP_TOS)
			return put_int(v, len, rs->tos);
		break;
	case IPPROTO_IPV6:
		if (name == IPV6_V6ONLY)
			return put_int(v, len, rs->ipv6only);
		break;
	case SOL_RDMA:
		switch (name) {
		case RDMA_SQSIZE:
			return put_int(v, len, rs->sq_size);
		case RDMA_RQSIZE:
			return put_int(v, len, rs->rq_size);
		case RDMA_INLINE:
			return put_int(v, len, rs->sq_inline);
		case RDMA_IOMAPSIZE:
			return put_int(v, len, rs->tiomap_size);
		}
		break;
	}
	return rs_fail(ENOTSUP);
}
