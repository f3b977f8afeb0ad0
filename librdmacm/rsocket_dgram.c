/* Datagram rsockets over UD: not yet. */
#include "rsocket_int.h"

#include <errno.h>
#include <unistd.h>

int ds_init(struct rsock *rs, int domain)
{
	(void)rs;
	(void)domain;
	return ENOTSUP;
}
void ds_free(struct rsock *rs) { (void)rs; }
int ds_bind(struct rsock *rs, const struct sockaddr *addr, socklen_t len) { (void)rs; (void)addr; (void)len; return rs_fail(ENOTSUP); }
int ds_connect(struct rsock *rs, const struct sockaddr *addr, socklen_t len) { (void)rs; (void)addr; (void)len; return rs_fail(ENOTSUP); }
ssize_t ds_recvfrom(struct rsock *rs, void *buf, size_t len, int flags, struct sockaddr *src, socklen_t *srclen) { (void)rs; (void)buf; (void)len; (void)flags; (void)src; (void)srclen; return rs_fail(ENOTSUP); }
ssize_t ds_recvmsg(struct rsock *rs, struct msghdr *msg, int flags) { (void)rs; (void)msg; (void)flags; return rs_fail(ENOTSUP); }
ssize_t ds_sendv(struct rsock *rs, const struct iovec *iov, int iovcnt, int flags, const struct sockaddr *to, socklen_t tolen) { (void)rs; (void)iov; (void)iovcnt; (void)flags; (void)to; (void)tolen; return rs_fail(ENOTSUP); }
void ds_shutdown(struct rsock *rs) { (void)rs; }
int ds_getpeername(struct rsock *rs, struct sockaddr *addr, socklen_t *len) { (void)rs; (void)addr; (void)len; return rs_fail(ENOTSUP); }
int ds_getsockname(struct rsock *rs, struct sockaddr *addr, socklen_t *len) { (void)rs; (void)addr; (void)len; return rs_fail(ENOTSUP); }
short ds_poll_one(struct rsock *rs, short events) { (void)rs; (void)events; return 0; }
int ds_poll_fds(struct rsock *rs, struct pollfd *out) { (void)rs; (void)out; return 0; }
void ds_poll_woken(struct rsock *rs) { (void)rs; }
