/* rdmafs's librdmacm: private declarations shared by the files of the
 * library. The public types are the system's <rdma/rdma_cma.h>, so the
 * structs a program reads (rdma_cm_id, rdma_cm_event, rdma_route) are the
 * ones it was compiled with; each object we hand out embeds the public
 * struct first and keeps our state after it.
 *
 * The kernel's part (ucma + cma + the IB CM) is the daemon's: its CM agent
 * speaks the CM MADs on QP1, and the mount's cm/ directory is the
 * interface (cm/CONTRACT.md, "Daemon side"). The library's part is
 * what librdmacm itself does: the event channel, the QP transitions at
 * the points librdmacm makes them, the synchronous ids, rdma_getaddrinfo.
 *
 * Pieces (one file per object):
 *   device.c    the mounts (mountinfo, RDMAFS_DEVICE_MOUNT), their cm/addrs
 *               and verbs context; rdma_get_devices
 *   io.c        cm/ files: transactions, ctl commands, attr, rmdir, lease
 *   record.c    parsing of event records and attr snapshots (pure; ctest)
 *   channel.c   event channels (epoll over per-device FIFOs), get/ack
 *   id.c        ids: create, destroy, bind, resolve, listen, options, migrate
 *   conn.c      connect, accept, reject, disconnect, notify, establish,
 *               rdma_init_qp_attr and the QP transitions
 *   qp.c        rdma_create_qp/_ex, rdma_destroy_qp, SRQs
 *   addrinfo.c  rdma_getaddrinfo, rdma_freeaddrinfo
 *   ep.c        rdma_create_ep, rdma_destroy_ep, rdma_get_request
 *   event_str.c rdma_event_str
 *   rsocket*.c  the rsocket family (rsocket_int.h; the wire format in
 *               rsocket.h), made of the calls above as librdmacm makes it
 *   the stubs of everything else are generated (libibverbs/gen -lib librdmacm).
 *
 * Locking: one library mutex (rc_lock) guards the id table, the devices'
 * lazily made state and every id's event count; it is never held across a
 * blocking read of a channel. A channel's own mutex guards its device
 * list (sub-channels are added when an id first uses a device).
 */
#ifndef RDMAFS_RDMACM_H
#define RDMAFS_RDMACM_H

#include <infiniband/sa.h>
#include <infiniband/verbs.h>
#include <limits.h>
#include <netinet/in.h>
#include <pthread.h>
#include <infiniband/ib.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "rdmafs-text.h" /* the words of the daemon's text, generated (libibverbs/) */

#define rc_container_of(ptr, type, member) \
	((type *)((char *)(ptr) - offsetof(type, member)))

#define RC_MAX_DEVICES 16
#define RC_RECORD_SIZE 1024
#define RC_MAX_PRIVATE 256
/* the application's private data, by message (the kernel's limits) */
#define RC_REQ_PRIVATE 56
#define RC_SIDR_REQ_PRIVATE 180
#define RC_REP_PRIVATE 196
#define RC_SIDR_REP_PRIVATE 136
#define RC_REJ_PRIVATE 148

/* --- record.c: the daemon's text, parsed (no I/O) ---------------------- */

/* One event record of a channel FIFO. Absent numbers are -1. */
struct rc_record {
	enum rdma_cm_event_type type;
	uint32_t id;
	int status;
	long listen_id;
	uint8_t private_data[RC_MAX_PRIVATE];
	int private_data_len; /* -1: no private_data key */
	int responder_resources, initiator_depth, flow_control;
	int retry_count, rnr_retry_count, srq;
	long long qp_num, qkey;
	char src_addr[INET6_ADDRSTRLEN], dst_addr[INET6_ADDRSTRLEN];
	int src_port, dst_port;
	/* a multicast join's event, made by the library (mcast.c): the
	 * join's serial number; 0 for the daemon's records */
	uint64_t mc;
};

/* An attr snapshot of cm/I/attr. Absent numbers are -1, absent addresses
 * have family AF_UNSPEC, absent GIDs are zero with has_gids false. */
struct rc_attr {
	char state[24];
	struct sockaddr_storage src, dst; /* with their ports */
	long listen_id;
	bool has_gids;
	union ibv_gid sgid, dgid;
	long slid, dlid, hop_limit, traffic_class, flow_label;
	long path_mtu; /* bytes */
	long packet_life_time, pkey, sl, tos, ack_timeout;
	long long qp_num, psn, remote_qp_num, remote_psn, remote_qkey;
	long long migrated_after; /* the id's records queued before its last migrate */
	long responder_resources, initiator_depth, flow_control, retry_count;
	long rnr_retry_count, srq, local_ack_timeout;
};

/* 0, or EINVAL for a record that is not one (no event=, unknown name, no id). */
int rc_parse_record(const char *buf, size_t len, struct rc_record *r);
int rc_parse_attr(const char *text, struct rc_attr *a);
/* The event type of a record name ("addr_resolved"), -1 if unknown. */
int rc_event_type(const char *name, size_t len);
/* addr text + port to a sockaddr; 0 or EINVAL. */
int rc_sockaddr(const char *addr, int port, struct sockaddr_storage *ss);
/* a sockaddr's address as the daemon writes it (no port); 0 or EINVAL. */
int rc_addr_text(const struct sockaddr *sa, char *out, size_t len);
int rc_port_of(const struct sockaddr *sa);
bool rc_addr_any(const struct sockaddr *sa);
socklen_t rc_sockaddr_len(const struct sockaddr *sa);
/* bytes to lower-case hex; out must hold 2*n+1 */
void rc_hex(const void *p, size_t n, char *out);
/* hex to bytes, at most max; the count or -1 */
int rc_unhex(const char *s, size_t slen, uint8_t *out, size_t max);
enum ibv_mtu rc_mtu_enum(long bytes);
/* the port space's word in cm/new, NULL if the daemon has none */
const char *rc_ps_name(enum rdma_port_space ps);

/* --- device.c ------------------------------------------------------------ */

struct rc_device {
	char mount[PATH_MAX];
	int index;
	uint64_t guid; /* node_guid, host order */
	int mount_fd;  /* O_PATH of the mount */
	int lease_fd;  /* MOUNT/lease: the ids die with the process */
	bool on_wire;  /* a --addr mount */
	char addrs[1024]; /* cm/addrs, one a line */
	struct ibv_context *verbs; /* opened on first use, kept */
	struct ibv_pd *pd;         /* the default PD (rdma_create_qp with pd NULL) */
	struct ibv_device_attr attr;
	struct ibv_port_attr port;
};

int rc_devices(struct rc_device ***list); /* scan once; the count */
/* the device answering for addr (NULL: none) */
struct rc_device *rc_device_for(const struct sockaddr *addr);
/* RDMAFS_DEVICE_MOUNT's first, else NULL */
struct rc_device *rc_device_default(void);
struct rc_device *rc_device_first_wire(void);
int rc_device_open(struct rc_device *d); /* verbs, pd, attrs; 0 or errno */
struct rc_device *rc_device_of_verbs(struct ibv_context *verbs);

/* --- io.c ---------------------------------------------------------------- */

void rc_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Each returns 0 or a positive errno (also in errno). */
int rc_transact(struct rc_device *d, const char *path, const char *req, uint32_t *handle, const char *lease_kind);
int rc_ctl(struct rc_device *d, uint32_t id, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int rc_read(struct rc_device *d, const char *path, char *buf, size_t len);
int rc_read_attr(struct rc_device *d, uint32_t id, struct rc_attr *a);
int rc_rmdir(struct rc_device *d, const char *path);
/* ties a daemon object (kind "cm" or "cm_channel") to the process's life */
void rc_lease(struct rc_device *d, const char *kind, uint32_t handle);

/* --- channel.c ----------------------------------------------------------- */

struct rc_subchan {
	struct rc_device *dev;
	uint32_t handle;
	int fifo_fd;
};

struct rc_sub;

/* A record read from a FIFO ahead of its turn (by rdma_migrate_id). */
struct rc_stashed {
	struct rc_device *dev;
	struct rc_record rec; /* parsed when it was read */
	struct rc_stashed *next;
};

struct rc_channel {
	struct rdma_event_channel ch; /* ch.fd: epoll over the FIFOs and stash_fd */
	pthread_mutex_t lock;
	struct rc_subchan subs[RC_MAX_DEVICES];
	int nsubs;
	int nids; /* ids using it (rdma_destroy_event_channel: EBUSY) */
	/* records taken before those still in the FIFOs; stash_fd (an
	 * eventfd) is readable while there are any */
	struct rc_stashed *stash, **stash_tail;
	int stash_fd;
};

static inline struct rc_channel *to_rchan(struct rdma_event_channel *c)
{
	return rc_container_of(c, struct rc_channel, ch);
}

/* the channel's handle on d, made on first use; 0 or errno */
int rc_channel_on(struct rc_channel *ch, struct rc_device *d, uint32_t *handle);
/* rdma_migrate_id's part: reads the records of the daemon id sub that
 * old's FIFO on sub->dev still holds (migrated_after of them in all) and
 * queues them on nc, keeping others' on old; 0 or errno */
int rc_channel_move(struct rc_channel *old, struct rc_channel *nc, struct rc_sub *sub, long long migrated_after);

/* --- id.c ---------------------------------------------------------------- */

/* A daemon id behind a library id: one, or one per device for a wildcard
 * listen. */
struct rc_sub {
	struct rc_device *dev;
	uint32_t handle;
	/* the records of this daemon id read from a FIFO (its own events and,
	 * for a listener, connect requests: the daemon's events_queued);
	 * rc_lock */
	long long records;
};

struct rc_id {
	struct rdma_cm_id id;
	struct rc_channel *chan;
	bool sync; /* made without a channel: the id has its own */
	struct rc_sub subs[RC_MAX_DEVICES];
	int nsubs;
	struct sockaddr_storage bind_addr; /* what rdma_bind_addr was given */
	bool bound;
	bool wild; /* a wildcard bind to port 0: subs on every device hold the
		    * port it chose, until listen or resolve_addr */
	bool listening;
	int events_out; /* events handed out and not acked */
	pthread_cond_t acked;
	struct ibv_sa_path_rec path;
	uint32_t psn;
	uint8_t responder_resources, initiator_depth; /* ours, at connect/accept */
	struct rc_id *listen; /* the listener of a connect request's id */
	struct ibv_qp_init_attr *qp_init_attr; /* rdma_create_ep's, for rdma_get_request */
	bool established;
	bool connect_error; /* finishing a CONNECT_RESPONSE failed: the peer's
			     * REJECTED or DISCONNECTED that follows is not the
			     * program's (librdmacm drops it) */
	/* options given before the daemon id exists */
	int tos, ack_timeout, reuseaddr, afonly; /* -1: not set */
	struct rc_mc *mcs; /* multicast joins (mcast.c); rc_lock */
	struct rc_id *next;
};

/* --- mcast.c ------------------------------------------------------------- */

/* One rdma_join_multicast: its group, and whether the id's QP is
 * attached to it (after the JOIN event, unless send-only). */
struct rc_mc {
	uint64_t serial;
	struct sockaddr_storage addr;
	union ibv_gid mgid;
	uint16_t mlid;
	uint32_t qkey;
	bool sendonly, attached;
	void *context;
	struct rc_mc *next;
};

/* queue a record the library made on the id's channel; 0 or errno */
int rc_channel_inject(struct rc_id *id, struct rc_device *dev, const struct rc_record *r);
/* fill a MULTICAST_JOIN event (ud param) and attach the QP: 0, EAGAIN
 * (the join is gone: no event) or an errno for MULTICAST_ERROR */
int rc_mc_event(struct rc_id *id, uint64_t serial, struct rdma_ud_param *ud);
/* every join of an id, at rdma_destroy_id */
void rc_mc_leave_all(struct rc_id *id);

static inline struct rc_id *to_rid(struct rdma_cm_id *id)
{
	return rc_container_of(id, struct rc_id, id);
}

extern pthread_mutex_t rc_lock;
/* the library id whose sub (d, handle) is; rc_lock held */
struct rc_id *rc_id_lookup(struct rc_device *d, uint32_t handle);
/* a library id for a daemon id made by a connect request; rc_lock held */
struct rc_id *rc_id_adopt(struct rc_id *listen, struct rc_device *d, uint32_t handle);
/* the id's daemon id on its device: 0 or errno (EINVAL: none yet) */
int rc_id_sub(struct rc_id *id, struct rc_sub **sub);
/* make the daemon id on d (if none) and fill id->verbs etc; 0 or errno */
int rc_id_attach(struct rc_id *id, struct rc_device *d);
/* fill route.addr (addresses, GIDs, pkey) and, with path, the path
 * record, from an attr snapshot */
void rc_id_fill(struct rc_id *id, const struct rc_attr *a, bool path);
int rc_id_refresh(struct rc_id *id, bool path);
/* sync ids: wait for the next event, which must be want; 0 or errno */
int rc_id_complete(struct rc_id *id, enum rdma_cm_event_type want);

/* --- conn.c -------------------------------------------------------------- */

int rc_qp_to(struct rc_id *id, enum ibv_qp_state state, int resp_res, int init_depth);
int rc_qp_err(struct rc_id *id);
/* a connect_response on an id with a QP: RTR, RTS, establish; 0 or errno */
int rc_conn_resp(struct rc_id *id, const struct rc_record *r);
uint32_t rc_new_psn(void); /* 24 random bits */


#endif
