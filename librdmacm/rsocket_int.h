/* rsockets: the socket object and what its files share (rsocket.c the
 * stream sockets, rsocket_poll.c rpoll/rselect and the options,
 * rsocket_dgram.c the datagram sockets, rsocket_wire.c the checks of what
 * a peer sends; the wire format is rsocket.h). */
#ifndef RDMAFS_RSOCKET_INT_H
#define RDMAFS_RSOCKET_INT_H

#include "rdmacm.h"
#include "rsocket.h"

#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/uio.h>

#define RS_CONF_DIR "/etc/rdma/rsocket"
#define RS_OLAP_START 2048
#define RS_MAX_TRANSFER 65536
#define RS_SNDLOWAT 2048
#define RS_QP_MIN 16
#define RS_QP_MAX 0xfffe
#define RS_CTRL_SLOTS 4 /* control messages in flight; a power of 2 */
#define RS_CONN_RETRIES 6
#define RS_WR_RECV (1ull << 63)

struct rs_config {
	unsigned inline_size, sqsize, rqsize, mem, wmem, iomap_size, polling_us;
};
extern struct rs_config rs_conf;
void rs_configure(void);

/* States, ordered passive, opening, connected, gone (as rdma-core's, so
 * that the same tests read the same). */
enum {
	RS_INIT = 0,
	RS_BOUND = 0x1,
	RS_LISTENING = 0x2,
	RS_OPENING = 0x4,
	RS_RESOLVING_ADDR = RS_OPENING | 0x10,
	RS_RESOLVING_ROUTE = RS_OPENING | 0x20,
	RS_CONNECTING = RS_OPENING | 0x40,
	RS_ACCEPTING = RS_OPENING | 0x80,
	RS_CONNECTED = 0x100,
	RS_WRITABLE = 0x200,
	RS_READABLE = 0x400,
	RS_CONNECT_RDWR = RS_CONNECTED | RS_READABLE | RS_WRITABLE,
	RS_CONNECT_ERROR = 0x800,
	RS_DISCONNECTED = 0x1000,
	RS_ERROR = 0x2000,
};

/* one riomap: its MR, the offset the peer names it by, and its slot in
 * the peer's iomap (-1: read-only, not sent) */
struct rs_map {
	struct ibv_mr *mr;
	off_t offset;
	int slot;
	bool queued; /* its descriptor is still to be sent */
};

struct ds_sock;

struct rsock {
	int type; /* SOCK_STREAM, SOCK_DGRAM */
	int index; /* the socket's number: a descriptor we own */
	int domain;
	int fs_flags, fd_flags; /* O_NONBLOCK; FD_CLOEXEC */
	pthread_mutex_t slock, rlock, cq_lock, wait_lock, map_lock;

	/* options */
	uint32_t sbuf_size, rbuf_size;
	uint16_t sq_size, rq_size, sq_inline;
	int tiomap_size; /* our iomap's slots (the peer writes them) */
	uint64_t so_opts; /* SOL_SOCKET flags: 1 << SO_xxx */
	int tcp_nodelay, ipv6only, tos, keepalive_time;
	struct linger linger;

	/* stream */
	struct rdma_cm_id *id;
	struct sockaddr_storage dst;
	int retries;

	/* cq_lock: */
	int state, err;
	bool swap; /* the peer's byte order is not ours */
	bool peer_gone; /* the CM said DISCONNECTED */
	bool cq_armed;
	unsigned unacked; /* CQ events not acked */
	unsigned ctrl_seq, ctrl_max;
	uint16_t sseq_no, sseq_comp, rseq_no, rseq_comp;
	int sqe_avail;
	int remote_sge; /* next slot of the peer's target array we write */
	struct rs_wire_sge remote_sgl, remote_iomap; /* host order */
	void *tbuf; /* our target array: sgl then iomap */
	struct ibv_mr *tmr;
	volatile struct rs_wire_sge *tsgl;
	volatile struct rs_wire_iomap *tiomap;
	int tsge; /* the target half we write into */
	uint8_t *rbuf;
	struct ibv_mr *rmr;
	int rbuf_avail;    /* read, not yet given back */
	int rbuf_free_off; /* the next half to give */
	int rbuf_off;      /* where the next unread byte is */
	uint32_t granted;  /* bytes the peer may still write */
	uint32_t queued;   /* bytes received, unread */
	uint32_t *rmsg;    /* the lengths of data messages, a ring of rq_size+1 */
	int rhead, rtail;
	uint8_t *sbuf;
	struct ibv_mr *smr;
	int sbuf_avail;
	struct ibv_sge ssgl[2]; /* ssgl[0].addr: the send ring's head */

	/* map_lock: */
	struct rs_map *maps;
	int nmaps;
	bool iomap_pending;

	/* datagram */
	int udp_sock, epfd;
	struct ds_sock *ds;
};

int rs_fail(int err);
uint64_t rs_now_us(void);
int rs_set_fl(int fd, bool nonblock);
struct rsock *rs_get(int fd);
int rs_tab_set(int fd, struct rsock *rs);
struct rsock *rs_new(const struct rsock *from, int type);
void rs_free(struct rsock *rs);
void rs_copy_addr(struct sockaddr *dst, socklen_t *len, const struct sockaddr *src);

/* stream internals rpoll uses */
int rs_process(struct rsock *rs, bool nonblock, bool (*test)(struct rsock *));
void rs_cq_event(struct rsock *rs); /* cq_lock held */
void rs_cm_events(struct rsock *rs);
bool rs_can_send(struct rsock *rs);
bool rs_have_rdata(struct rsock *rs);
int rs_poll_connect(struct rsock *rs); /* rs_do_connect under slock */

#define rs_log rc_log
void rs_log_bad(struct rsock *rs, uint32_t imm);
/* the library's sync-id wait (ucma_complete): 0 or errno */
int rc_complete(struct rdma_cm_id *id);

/* datagram sockets (rsocket_dgram.c) */
int ds_init(struct rsock *rs, int domain);
void ds_free(struct rsock *rs);
int ds_bind(struct rsock *rs, const struct sockaddr *addr, socklen_t len);
int ds_connect(struct rsock *rs, const struct sockaddr *addr, socklen_t len);
ssize_t ds_recvfrom(struct rsock *rs, void *buf, size_t len, int flags, struct sockaddr *src, socklen_t *srclen);
ssize_t ds_recvmsg(struct rsock *rs, struct msghdr *msg, int flags);
ssize_t ds_sendv(struct rsock *rs, const struct iovec *iov, int iovcnt, int flags, const struct sockaddr *to,
		 socklen_t tolen);
void ds_shutdown(struct rsock *rs);
int ds_getpeername(struct rsock *rs, struct sockaddr *addr, socklen_t *len);
int ds_getsockname(struct rsock *rs, struct sockaddr *addr, socklen_t *len);
/* revents without waiting; the descriptors rpoll waits on (up to 2) */
short ds_poll_one(struct rsock *rs, short events);
int ds_poll_fds(struct rsock *rs, struct pollfd *out);
void ds_poll_woken(struct rsock *rs);

#endif
