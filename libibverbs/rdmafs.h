/* rdmafs's libibverbs: private declarations shared by the files of the
 * library. The public types are the system's <infiniband/verbs.h>, so the
 * structs that verbs.h's inline functions dereference are exactly the ones
 * the program was compiled with; every object we hand out embeds the
 * public struct first and keeps our state after it.
 *
 * Pieces (one file per object, as rdma-core's providers):
 *   device.c   mount discovery, the device list, open/close, the queries
 *              (device, port, GIDs, pkeys), sysfs helpers, the doorbell
 *   io.c       the control path: transactions (KIND/new), commands, attr
 *              files, rmdir, the lease; mapping a ring file
 *   ring.h     the mapped rings (ABI from rdmafs-abi.h, generated from ring/)
 *   pd.c       PDs, parent and thread domains, AHs
 *   mem.c      the program's memory as the daemon maps it: shadows for
 *              private memory, pins, fork (its own process-wide lock)
 *   mr.c       registration, rereg, on-demand paging;  dm.c  device memory
 *   cq.c       CQs, completion channels (epoll over the CQ FIFOs), cq_ex
 *   qp.c       QPs, modify/query, ibv_post_send/recv;  qp_ex.c  ibv_wr_*
 *   srq.c mw.c events.c (async events: a thread reading MOUNT/events)
 *   wc_status.c  the string and rate helpers
 *   the stubs of every other export are generated (gen/, Makefile).
 *
 * Threads: the program's, and one per context that blocks in read() on
 * MOUNT/events (cancelled at ibv_close_device).
 *
 * Locking: each queue has its own spinlock (posting to one QP from several
 * threads is serialised, different QPs do not contend; wr_start holds the
 * send queue's until wr_complete); a CQ's spinlock orders polls (start_poll
 * holds it until end_poll); the context's mutex guards its object list, the
 * queued async events and the MR extents, and is held across a whole
 * registration (its FUSE requests included), so that merging extents sees
 * every MR. Order: context mutex before a CQ's lock (resize, cq_clean) and
 * never the other way. A channel's mutex guards only its refcount.
 */
#ifndef RDMAFS_H
#define RDMAFS_H

#include <infiniband/verbs.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rdmafs-text.h" /* the words of the daemon's text, generated from qp/ and cm/ */
#include "ring.h"

#define rf_container_of(ptr, type, member) \
	((type *)((char *)(ptr) - offsetof(type, member)))

/* One rdmafs mount is one ibv_device. */
struct rf_device {
	struct ibv_device dev;
	/* rdma-core's verbs_device keeps its ops pointer right after
	 * ibv_device, and libmlx5/libefa helpers read it: NULL here. */
	void *ops;
	char mount[PATH_MAX];
	int index;
	uint64_t guid; /* node_guid, network order as ibv_get_device_guid */
};

/* What the port file says, parsed once at open. */
struct rf_port {
	enum ibv_port_state state;
	enum ibv_mtu max_mtu, active_mtu;
	uint8_t link_layer;
	uint16_t lid;
	union ibv_gid gid;
	bool roce; /* the mount is on the wire: Ethernet link, RoCEv2 GID */
	uint32_t max_msg_sz;
};

struct rf_context {
	struct verbs_context vctx; /* ibv_context is its last member */
	struct rf_device *dev;
	char mount[PATH_MAX];
	int lease_fd;  /* MOUNT/lease: objects die with the context */
	int mount_fd;  /* O_PATH of the mount root, for *at() calls */
	struct rf_ring bell; /* MOUNT/doorbell (futex), bell.base NULL if absent */
	struct ibv_device_attr attr;
	uint64_t cap_flags_ex; /* device_cap_flags_ex (IB_UVERBS_DEVICE_* bits) */
	uint64_t hca_core_clock, ts_mask; /* the device clock: kHz, timestamp bits */
	struct rf_port port;
	uint32_t max_inline;

	pthread_mutex_t lock;

	/* async events: a thread reads MOUNT/events and queues the events of
	 * this context's objects; async_fd is the read end of a pipe that
	 * holds one byte per queued event. */
	int async_wr;
	int events_fd; /* the async thread's open MOUNT/events */
	pthread_t async_thread;
	bool async_started;
	volatile bool closing;
	struct rf_async_ev *async_head, *async_tail;
	struct rf_obj *objs; /* objects that can raise events */
	uint32_t backing_pd; /* the PD of the backing MRs (0: none yet) */
	size_t dm_bytes;     /* device memory held (ibv_alloc_dm) */
};

/* Objects that async events name, listed on their context. */
enum rf_kind { RF_QP, RF_CQ, RF_SRQ };

struct rf_obj {
	struct rf_obj *next;
	enum rf_kind kind;
	uint32_t handle;
	void *ptr;
};

struct rf_async_ev {
	struct rf_async_ev *next;
	struct ibv_async_event ev;
};

struct rf_pd {
	struct ibv_pd pd;
	uint32_t handle;
	bool parent; /* a parent domain: handle is its PD's */
};

/* What one registration holds of mem.c's shadows: pieces of shadow k. */
struct rf_pin_piece {
	uintptr_t s, e;
	int k;
};
struct rf_pin {
	int n;
	struct rf_pin_piece *p;
};

struct rf_mr {
	struct ibv_mr mr;
	uint32_t handle;
	uint64_t iova;
	unsigned int access;
	struct rf_pin pin; /* the re-backed pages it holds (mem.c) */
	bool dm;           /* registered on device memory */
};

/* Device memory a context may hold (ibv_alloc_dm), as max_dm_size. */
#define RF_MAX_DM_SIZE (256 << 10)

struct rf_mw {
	struct ibv_mw mw;
	uint32_t handle;
};

struct rf_ah {
	struct ibv_ah ah;
	uint32_t handle;
};

struct rf_comp_channel {
	struct ibv_comp_channel ch; /* ch.fd is an epoll fd over the CQ FIFOs */
	pthread_mutex_t lock;
	/* events read from a FIFO and not yet handed out */
	uint32_t pending[64];
	int npending;
};

struct rf_cq {
	struct ibv_cq_ex cq; /* ibv_cq is its prefix */
	uint32_t handle;
	pthread_spinlock_t lock;
	struct rf_ring ring;
	int fifo_fd; /* the channel FIFO, when the CQ has a channel */
	/* the CQE the ibv_cq_ex reader is on */
	uint8_t cur[64];
	uint64_t wc_flags_req;
	bool polling;
	unsigned int events_delivered, async_delivered;
};

struct rf_xrcd {
	struct ibv_xrcd xrcd;
	uint32_t handle;
};

struct rf_srq {
	struct ibv_srq srq;
	uint32_t handle;
	uint32_t srq_num; /* an XRC SRQ's number (ibv_get_srq_num); 0 for a basic one */
	pthread_spinlock_t lock;
	struct rf_ring ring;
	uint32_t max_wr, max_sge;
	unsigned int async_delivered;
};

struct rf_qp {
	struct ibv_qp_ex qpx; /* ibv_qp is its prefix */
	uint32_t qpn;
	struct ibv_qp_cap cap;
	bool sq_sig_all;
	uint8_t max_rd_atomic;
	pthread_spinlock_t sq_lock, rq_lock;
	struct rf_ring sq, rq;
	/* the ibv_wr_* builder: the WQE being built, its slot, and the
	 * first error of the batch */
	bool has_ex;       /* made with send_ops_flags: ibv_qp_to_qp_ex works */
	bool wr_pending;   /* wr holds a WR not yet encoded */
	uint32_t wr_start_head;
	int wr_err;
	struct ibv_send_wr wr;
	struct ibv_sge *wr_sge;
	size_t wr_sge_cap;
	uint8_t wr_atomic[8]; /* ibv_wr_atomic_write's bytes, copied at the call */
	unsigned int async_delivered;
};

static inline struct rf_context *to_rctx(struct ibv_context *c)
{
	return rf_container_of(c, struct rf_context, vctx.context);
}
static inline struct rf_pd *to_rpd(struct ibv_pd *p) { return rf_container_of(p, struct rf_pd, pd); }
static inline struct rf_mr *to_rmr(struct ibv_mr *m) { return rf_container_of(m, struct rf_mr, mr); }
static inline struct rf_cq *to_rcq(struct ibv_cq *c) { return (struct rf_cq *)c; }
static inline struct rf_cq *to_rcqx(struct ibv_cq_ex *c) { return rf_container_of(c, struct rf_cq, cq); }
static inline struct rf_qp *to_rqp(struct ibv_qp *q) { return (struct rf_qp *)q; }
static inline struct rf_qp *to_rqpx(struct ibv_qp_ex *q) { return rf_container_of(q, struct rf_qp, qpx); }
static inline struct rf_srq *to_rsrq(struct ibv_srq *s) { return rf_container_of(s, struct rf_srq, srq); }
static inline struct rf_ah *to_rah(struct ibv_ah *a) { return rf_container_of(a, struct rf_ah, ah); }
static inline struct rf_mw *to_rmw(struct ibv_mw *w) { return rf_container_of(w, struct rf_mw, mw); }
static inline struct rf_xrcd *to_rxrcd(struct ibv_xrcd *x) { return rf_container_of(x, struct rf_xrcd, xrcd); }

/* io.c: the control path. Each returns 0 or a positive errno (also left in
 * errno); the daemon's reason goes to the log (RDMAFS_DEBUG=1). */
int rf_transact(struct rf_context *ctx, const char *kind, const char *req, uint32_t *handle);
int rf_command(struct rf_context *ctx, const char *path, const char *cmd);
int rf_destroy(struct rf_context *ctx, const char *kind, uint32_t handle);
int rf_read_file(struct rf_context *ctx, const char *path, char *buf, size_t len);
/* rf_kv finds key in a key=value text; returns the value's start or NULL. */
const char *rf_kv(const char *text, const char *key);
int rf_kv_u64(const char *text, const char *key, uint64_t *v);
void rf_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
int rf_errno_of_write(int err);

/* device.c */
int rf_parse_gid(const char *s, union ibv_gid *gid);
int rf_query_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr, size_t len);
int rf_query_device_ex(struct ibv_context *ctx, const struct ibv_query_device_ex_input *in,
		       struct ibv_device_attr_ex *attr, size_t len);

/* dm.c, mr.c */
struct ibv_dm *rf_alloc_dm(struct ibv_context *ctx, struct ibv_alloc_dm_attr *attr);
int rf_free_dm(struct ibv_dm *dm);
struct ibv_mr *rf_reg_dm_mr(struct ibv_pd *pd, struct ibv_dm *dm, uint64_t offset, size_t length, unsigned int access);
uint32_t rf_backing_pd(struct rf_context *ctx, int *err);
int rf_advise_mr(struct ibv_pd *pd, enum ibv_advise_mr_advice advice, uint32_t flags, struct ibv_sge *sg_list,
		 uint32_t num_sge);
/* mem.c: make [addr, addr+len) reachable by the daemon, checked as
 * ib_umem_get checks it (write: the access writes); 0 or an errno. */
int rf_mem_pin(uintptr_t addr, size_t len, bool write, struct rf_pin *pin);
void rf_mem_unpin(struct rf_pin *pin);
/* mem.c: shared read-write mappings of a whole file and their removal, as
 * raw system calls that no interposed hook sees */
void *rf_mmap(size_t len, int fd);
int rf_munmap(void *a, size_t len);

/* pd.c */
void rf_dest_gid(struct rf_context *ctx, const struct ibv_ah_attr *ah, char *out, size_t len);
/* A GRH's flow label is 20 bits; ibv_global_route's field is 32. The
 * kernel keeps the low 20 (the UDP source port of RoCEv2 is derived from
 * them) and so do we: UCX passes ~0 on purpose, "a workaround for
 * rdma-core's flow label to UDP sport conversion", and the daemon's text
 * interface refuses anything past 20 bits. */
static inline uint32_t rf_flow_label(uint32_t fl) { return fl & 0xfffff; }

/* events.c */
void rf_track(struct rf_context *ctx, enum rf_kind kind, uint32_t handle, void *ptr);
void rf_untrack(struct rf_context *ctx, enum rf_kind kind, uint32_t handle);
int rf_async_start(struct rf_context *ctx);
void rf_async_stop(struct rf_context *ctx);

/* doorbells */
void rf_ring_bell(struct rf_context *ctx, struct rf_ring *r, uint32_t qpn);

/* the data-path slots installed in ibv_context_ops */
int rf_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
int rf_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
int rf_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
int rf_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc);
void rf_cq_clean(struct ibv_cq *cq, uint32_t qpn, bool keep_recv);
int rf_req_notify_cq(struct ibv_cq *cq, int solicited_only);
struct ibv_mw *rf_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type);
int rf_dealloc_mw(struct ibv_mw *mw);
int rf_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mw_bind *bind);
struct ibv_qp *rf_create_qp_ex(struct ibv_context *ctx, struct ibv_qp_init_attr_ex *attr);
struct ibv_cq_ex *rf_create_cq_ex(struct ibv_context *ctx, struct ibv_cq_init_attr_ex *attr);
struct ibv_pd *rf_alloc_parent_domain(struct ibv_context *ctx, struct ibv_parent_domain_init_attr *attr);
struct ibv_td *rf_alloc_td(struct ibv_context *ctx, struct ibv_td_init_attr *attr);
int rf_dealloc_td(struct ibv_td *td);
struct ibv_srq *rf_create_srq_ex(struct ibv_context *ctx, struct ibv_srq_init_attr_ex *attr);
void rf_qp_ex_init(struct rf_qp *qp, uint64_t ops);
int rf_encode_recv(struct rf_ring *r, const struct ibv_recv_wr *wr, uint32_t max_sge);
int rf_encode_send(struct rf_qp *q, uint8_t *slot, const struct ibv_send_wr *wr);

/* xrc.c */
struct ibv_xrcd *rf_open_xrcd(struct ibv_context *ctx, struct ibv_xrcd_init_attr *attr);
int rf_close_xrcd(struct ibv_xrcd *xrcd);
int rf_get_srq_num(struct ibv_srq *srq, uint32_t *num);
struct ibv_qp *rf_open_qp(struct ibv_context *ctx, struct ibv_qp_open_attr *attr);
struct ibv_qp *rf_xrc_recv_qp(struct rf_context *ctx, const char *req, void *qp_context);
int rf_close_xrc_recv(struct rf_context *ctx, uint32_t qpn);

#endif
