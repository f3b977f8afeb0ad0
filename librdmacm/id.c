/* rdma_cm_ids. A library id exists from rdma_create_id; its daemon id
 * (cm/I) is made when the device is known, at rdma_bind_addr to a
 * specific address or at rdma_resolve_addr, as the kernel binds an id to
 * a device only then. A wildcard rdma_listen listens on every device: one
 * daemon id per device behind the one library id (rc_id.subs).
 *
 * Device choice (cm/CONTRACT.md, "Library side"): bind to an address → the
 * device answering for it; resolve_addr → the bound device, else
 * RDMAFS_DEVICE_MOUNT's first, else the device answering for dst, else the
 * first --addr device. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rdmacm.h"

pthread_mutex_t rc_lock = PTHREAD_MUTEX_INITIALIZER;
static struct rc_id *ids;

static int fail(int err)
{
	errno = err;
	return -1;
}

struct rc_id *rc_id_lookup(struct rc_device *d, uint32_t handle)
{
	for (struct rc_id *id = ids; id; id = id->next)
		for (int i = 0; i < id->nsubs; i++)
			if (id->subs[i].dev == d && id->subs[i].handle == handle)
				return id;
	return NULL;
}

static struct rc_id *id_new(struct rc_channel *ch, void *context, enum rdma_port_space ps,
			    enum ibv_qp_type qp_type)
{
	struct rc_id *id = calloc(1, sizeof(*id));

	if (!id)
		return NULL;
	id->id.channel = &ch->ch;
	id->chan = ch;
	id->id.context = context;
	id->id.ps = ps;
	id->id.qp_type = qp_type;
	id->tos = id->ack_timeout = id->reuseaddr = id->afonly = -1;
	/* the starting PSN is the id's from its creation, as the kernel's
	 * seq_num: a program that moves its own QP (rdma_init_qp_attr before
	 * rdma_accept) gets the one the REP will carry */
	id->psn = rc_new_psn();
	pthread_cond_init(&id->acked, NULL);
	return id;
}

/* rc_lock held */
static void id_link(struct rc_id *id)
{
	id->next = ids;
	ids = id;
	id->chan->nids++;
}

static void id_unlink(struct rc_id *id)
{
	for (struct rc_id **p = &ids; *p; p = &(*p)->next) {
		if (*p == id) {
			*p = id->next;
			break;
		}
	}
	id->chan->nids--;
}

struct rc_id *rc_id_adopt(struct rc_id *listen, struct rc_device *d, uint32_t handle)
{
	struct rc_id *id = id_new(listen->chan, listen->id.context, listen->id.ps, listen->id.qp_type);

	if (!id)
		return NULL;
	if (rc_device_open(d)) {
		free(id);
		return NULL;
	}
	id->subs[0] = (struct rc_sub){.dev = d, .handle = handle};
	id->nsubs = 1;
	id->id.verbs = d->verbs;
	id->id.pd = d->pd;
	id->id.port_num = 1;
	id->listen = listen;
	id->sync = false;
	id_link(id);
	/* the request's id dies with the process too (the channel's lease
	 * would take it, but each id of ours is leased) */
	rc_lease(d, "cm", handle);
	return id;
}

int rc_id_sub(struct rc_id *id, struct rc_sub **sub)
{
	if (id->nsubs < 1)
		return errno = EINVAL;
	*sub = &id->subs[0];
	return 0;
}

static int replay_options(struct rc_id *id, struct rc_sub *s)
{
	int err = 0;

	if (id->tos >= 0)
		err = rc_ctl(s->dev, s->handle, "set_option " RDMAFS_KEQ(TOS) "%d", id->tos);
	if (!err && id->ack_timeout >= 0)
		err = rc_ctl(s->dev, s->handle, "set_option " RDMAFS_KEQ(ACK_TIMEOUT) "%d", id->ack_timeout);
	if (!err && id->reuseaddr >= 0)
		err = rc_ctl(s->dev, s->handle, "set_option " RDMAFS_KEQ(REUSEADDR) "%d", id->reuseaddr);
	if (!err && id->afonly >= 0)
		err = rc_ctl(s->dev, s->handle, "set_option " RDMAFS_KEQ(AFONLY) "%d", id->afonly);
	return err;
}

/* A daemon id on d for id (another sub when id already has some). */
static int add_sub(struct rc_id *id, struct rc_device *d, struct rc_sub **out)
{
	char req[128];
	uint32_t ch, h;
	int err;

	if (id->nsubs == RC_MAX_DEVICES)
		return errno = ENOMEM;
	pthread_mutex_lock(&rc_lock);
	err = rc_device_open(d);
	pthread_mutex_unlock(&rc_lock);
	if (err)
		return errno = err;
	if ((err = rc_channel_on(id->chan, d, &ch)))
		return err;
	const char *ps = rc_ps_name(id->id.ps);
	snprintf(req, sizeof(req), RDMAFS_KEQ(PS) "%s " RDMAFS_KEQ(QP_TYPE) "%s " RDMAFS_KEQ(CHANNEL) "%u", ps,
		 id->id.qp_type == IBV_QPT_UD ? "ud" : "rc", ch);
	if ((err = rc_transact(d, "cm/new", req, &h, "cm")))
		return err;
	pthread_mutex_lock(&rc_lock);
	struct rc_sub *s = &id->subs[id->nsubs++];
	*s = (struct rc_sub){.dev = d, .handle = h};
	pthread_mutex_unlock(&rc_lock);
	if ((err = replay_options(id, s)))
		return err;
	*out = s;
	return 0;
}

/* the id is now on d: its context, PD and port */
static void attached(struct rc_id *id, struct rc_device *d)
{
	id->id.verbs = d->verbs;
	/* the device's PD, as librdmacm's ucma_get_device gives every id it
	 * binds (pyverbs's CMID.pd is this one: its AHs and MRs need it) */
	if (!id->id.pd)
		id->id.pd = d->pd;
	id->id.port_num = 1;
}

int rc_id_attach(struct rc_id *id, struct rc_device *d)
{
	struct rc_sub *s;
	int err;

	if (id->nsubs)
		return id->subs[0].dev == d ? 0 : (errno = EINVAL);
	if ((err = add_sub(id, d, &s)))
		return err;
	attached(id, d);
	return 0;
}

void rc_id_fill(struct rc_id *id, const struct rc_attr *a, bool path)
{
	struct rdma_addr *ad = &id->id.route.addr;

	if (a->src.ss_family)
		memcpy(&ad->src_storage, &a->src, sizeof(a->src));
	if (a->dst.ss_family)
		memcpy(&ad->dst_storage, &a->dst, sizeof(a->dst));
	if (a->has_gids) {
		ad->addr.ibaddr.sgid = a->sgid;
		ad->addr.ibaddr.dgid = a->dgid;
	}
	ad->addr.ibaddr.pkey = htobe16(a->pkey >= 0 ? (uint16_t)a->pkey : 0xffff);
	if (!path || !a->has_gids)
		return;
	struct ibv_sa_path_rec *p = &id->path;
	memset(p, 0, sizeof(*p));
	p->dgid = a->dgid;
	p->sgid = a->sgid;
	p->dlid = htobe16(a->dlid > 0 ? (uint16_t)a->dlid : 0);
	p->slid = htobe16(a->slid > 0 ? (uint16_t)a->slid : 0);
	p->flow_label = htobe32(a->flow_label > 0 ? (uint32_t)a->flow_label : 0);
	p->hop_limit = a->hop_limit >= 0 ? (uint8_t)a->hop_limit : 1;
	p->traffic_class = a->traffic_class > 0 ? (uint8_t)a->traffic_class : 0;
	p->reversible = htobe32(1);
	p->numb_path = 1;
	p->pkey = ad->addr.ibaddr.pkey;
	p->sl = a->sl > 0 ? (uint8_t)a->sl : 0;
	p->mtu_selector = 2; /* exactly */
	p->mtu = rc_mtu_enum(a->path_mtu);
	p->rate_selector = 2;
	p->rate = IBV_RATE_MAX;
	p->packet_life_time_selector = 2;
	p->packet_life_time = a->packet_life_time >= 0 ? (uint8_t)a->packet_life_time : 18;
	id->id.route.path_rec = p;
	id->id.route.num_paths = 1;
}

int rc_id_refresh(struct rc_id *id, bool path)
{
	struct rc_attr a;
	struct rc_sub *s;
	int err;

	if ((err = rc_id_sub(id, &s)) || (err = rc_read_attr(s->dev, s->handle, &a)))
		return err;
	rc_id_fill(id, &a, path);
	return 0;
}

int rc_id_complete(struct rc_id *id, enum rdma_cm_event_type want)
{
	struct rdma_cm_event *e;

	(void)want;
	if (!id->sync)
		return 0;
	if (id->id.event) {
		rdma_ack_cm_event(id->id.event);
		id->id.event = NULL;
	}
	if (rdma_get_cm_event(id->id.channel, &e))
		return errno;
	id->id.event = e;
	if (e->status) {
		if (e->event == RDMA_CM_EVENT_REJECTED)
			return errno = ECONNREFUSED;
		return errno = e->status < 0 ? -e->status : e->status;
	}
	return 0;
}

int rdma_create_id(struct rdma_event_channel *channel, struct rdma_cm_id **id, void *context,
		   enum rdma_port_space ps)
{
	enum ibv_qp_type t = (ps == RDMA_PS_UDP || ps == RDMA_PS_IPOIB) ? IBV_QPT_UD : IBV_QPT_RC;
	struct rdma_event_channel *own = NULL;
	struct rc_id *r;

	if (!id)
		return fail(EINVAL);
	if (!rc_ps_name(ps))
		return fail(EPROTONOSUPPORT);
	if (!channel) {
		if (!(own = rdma_create_event_channel()))
			return -1;
		channel = own;
	}
	r = id_new(to_rchan(channel), context, ps, t);
	if (!r) {
		if (own)
			rdma_destroy_event_channel(own);
		return fail(ENOMEM);
	}
	r->sync = own != NULL;
	pthread_mutex_lock(&rc_lock);
	id_link(r);
	pthread_mutex_unlock(&rc_lock);
	*id = &r->id;
	return 0;
}

int rdma_destroy_id(struct rdma_cm_id *cid)
{
	struct rc_id *id = to_rid(cid);
	char p[32];

	if (cid->event) {
		rdma_ack_cm_event(cid->event);
		cid->event = NULL;
	}
	pthread_mutex_lock(&rc_lock);
	id_unlink(id);
	pthread_mutex_unlock(&rc_lock);
	for (int i = 0; i < id->nsubs; i++) {
		snprintf(p, sizeof(p), "cm/%u", id->subs[i].handle);
		rc_rmdir(id->subs[i].dev, p);
	}
	/* the events handed out must be acked first (librdmacm waits too) */
	pthread_mutex_lock(&rc_lock);
	while (id->events_out > 0)
		pthread_cond_wait(&id->acked, &rc_lock);
	pthread_mutex_unlock(&rc_lock);
	rc_mc_leave_all(id);
	if (id->sync)
		rdma_destroy_event_channel(cid->channel);
	free(id->qp_init_attr);
	pthread_cond_destroy(&id->acked);
	free(id);
	return 0;
}

static int check_family(const struct sockaddr *sa)
{
	if (!sa)
		return EINVAL;
	if (sa->sa_family != AF_INET && sa->sa_family != AF_INET6)
		return EAFNOSUPPORT;
	return 0;
}

static bool is_loopback(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
	return IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)sa)->sin6_addr);
}

static int bind_sub(struct rc_sub *s, const struct sockaddr *addr, int port)
{
	char text[INET6_ADDRSTRLEN];

	if (rc_addr_text(addr, text, sizeof(text)))
		return errno = EINVAL;
	return rc_ctl(s->dev, s->handle, "bind " RDMAFS_KEQ(ADDR) "%s " RDMAFS_KEQ(PORT) "%d", text, port);
}

/* destroys the id's subs from the first-th on */
static void drop_subs(struct rc_id *id, int first)
{
	char p[32];

	while (id->nsubs > first) {
		struct rc_sub *s = &id->subs[id->nsubs - 1];
		snprintf(p, sizeof(p), "cm/%u", s->handle);
		rc_rmdir(s->dev, p);
		pthread_mutex_lock(&rc_lock);
		id->nsubs--;
		pthread_mutex_unlock(&rc_lock);
	}
}

static void set_port(struct sockaddr *sa, int port)
{
	if (sa->sa_family == AF_INET)
		((struct sockaddr_in *)sa)->sin_port = htons(port);
	else if (sa->sa_family == AF_INET6)
		((struct sockaddr_in6 *)sa)->sin6_port = htons(port);
}

/* A wildcard bind to port 0 takes its ephemeral port at the bind, as the
 * kernel's (cma_alloc_port): qperf reads it with rdma_get_src_port before
 * rdma_listen and sends it to its client. The port is held by one daemon
 * id per device, each bound to it (the first device's choice; all again
 * on another when a device has it taken), until rdma_listen listens on
 * them or rdma_resolve_addr keeps its device's. No device: the port stays
 * 0 and is chosen at listen, as before. 0 or errno. */
static int reserve_any_port(struct rc_id *id)
{
	struct sockaddr *ba = (struct sockaddr *)&id->bind_addr;
	struct rc_device **list;
	int n, err = 0;

	pthread_mutex_lock(&rc_lock);
	n = rc_devices(&list);
	pthread_mutex_unlock(&rc_lock);
	if (!n)
		return 0;
	for (int try = 0; try < 16; try++) {
		int port = 0;
		struct rc_sub *s;

		err = 0;
		for (int i = 0; i < n && !err; i++) {
			if ((err = add_sub(id, list[i], &s)) || (err = bind_sub(s, ba, port)))
				break;
			if (!port) {
				struct rc_attr a;
				if ((err = rc_read_attr(s->dev, s->handle, &a)))
					break;
				if (!(port = a.src.ss_family ? rc_port_of((struct sockaddr *)&a.src) : 0))
					err = errno = EIO;
			}
		}
		if (!err) {
			set_port(ba, port);
			id->wild = true;
			return 0;
		}
		drop_subs(id, 0);
		if (err != EADDRINUSE || n == 1)
			break;
	}
	return err;
}

int rdma_bind_addr(struct rdma_cm_id *cid, struct sockaddr *addr)
{
	struct rc_id *id = to_rid(cid);
	struct rc_device *d;
	struct rc_sub *s;
	int err;

	if ((err = check_family(addr)))
		return fail(err);
	if (id->bound || id->nsubs)
		return fail(EINVAL);
	memcpy(&id->bind_addr, addr, rc_sockaddr_len(addr));
	memcpy(&cid->route.addr.src_storage, addr, rc_sockaddr_len(addr));
	if (rc_addr_any(addr)) {
		/* the device is chosen at listen or resolve_addr; the port
		 * now */
		if (!rc_port_of(addr) && (err = reserve_any_port(id)))
			return fail(err);
		memcpy(&cid->route.addr.src_storage, &id->bind_addr, sizeof(id->bind_addr));
		id->bound = true;
		return 0;
	}
	pthread_mutex_lock(&rc_lock);
	d = rc_device_for(addr);
	pthread_mutex_unlock(&rc_lock);
	if (!d && is_loopback(addr)) {
		/* the kernel's cma_any_addr counts a loopback address as a
		 * wildcard: the bind succeeds with no device (verbs NULL) and
		 * a listen takes every device's requests. libfabric's verbs
		 * provider binds "localhost" to probe and then takes its
		 * devices' own addresses; --addr mounts answer none of 127/8 */
		struct sockaddr_storage any = {.ss_family = addr->sa_family};
		if (addr->sa_family == AF_INET)
			((struct sockaddr_in *)&any)->sin_port = ((struct sockaddr_in *)addr)->sin_port;
		else
			((struct sockaddr_in6 *)&any)->sin6_port = ((struct sockaddr_in6 *)addr)->sin6_port;
		memcpy(&id->bind_addr, &any, sizeof(any));
		if (!rc_port_of(addr) && (err = reserve_any_port(id)))
			return fail(err);
		set_port(&cid->route.addr.src_addr, rc_port_of((struct sockaddr *)&id->bind_addr));
		id->bound = true;
		return 0;
	}
	if (!d)
		return fail(EADDRNOTAVAIL);
	if ((err = rc_id_attach(id, d)) || (err = rc_id_sub(id, &s)) ||
	    (err = bind_sub(s, addr, rc_port_of(addr))))
		return fail(err);
	id->bound = true;
	rc_id_refresh(id, false);
	return 0;
}

int rdma_resolve_addr(struct rdma_cm_id *cid, struct sockaddr *src_addr, struct sockaddr *dst_addr,
		      int timeout_ms)
{
	struct rc_id *id = to_rid(cid);
	char dst[INET6_ADDRSTRLEN], src[INET6_ADDRSTRLEN + 8] = "";
	struct rc_device *d = NULL;
	struct rc_sub *s;
	int err;

	if ((err = check_family(dst_addr)))
		return fail(err);
	if (src_addr && src_addr->sa_family && !id->bound && rdma_bind_addr(cid, src_addr))
		return -1;
	pthread_mutex_lock(&rc_lock);
	if (id->nsubs && !id->wild)
		d = id->subs[0].dev;
	if (!d)
		d = rc_device_default();
	if (!d)
		d = rc_device_for(dst_addr);
	if (!d)
		d = rc_device_first_wire();
	pthread_mutex_unlock(&rc_lock);
	if (!d)
		return fail(ENODEV);
	if (id->wild) {
		/* the wildcard bind's port: keep d's daemon id, drop the rest */
		int i = 0;
		while (i < id->nsubs && id->subs[i].dev != d)
			i++;
		if (i < id->nsubs) {
			struct rc_sub keep = id->subs[i];
			pthread_mutex_lock(&rc_lock);
			id->subs[i] = id->subs[0];
			id->subs[0] = keep;
			pthread_mutex_unlock(&rc_lock);
			drop_subs(id, 1);
			attached(id, d);
		} else {
			drop_subs(id, 0); /* a device that came later: bound there anew */
		}
		id->wild = false;
	}
	bool had = id->nsubs > 0;
	if ((err = rc_id_attach(id, d)) || (err = rc_id_sub(id, &s)))
		return fail(err);
	if (!had && id->bound && rc_port_of((struct sockaddr *)&id->bind_addr) &&
	    (err = bind_sub(s, (struct sockaddr *)&id->bind_addr, rc_port_of((struct sockaddr *)&id->bind_addr))))
		return fail(err);
	if (id->bound && !rc_addr_any((struct sockaddr *)&id->bind_addr)) {
		char t[INET6_ADDRSTRLEN];
		if (!rc_addr_text((struct sockaddr *)&id->bind_addr, t, sizeof(t)))
			snprintf(src, sizeof(src), " " RDMAFS_KEQ(SRC) "%s", t);
	}
	if (rc_addr_text(dst_addr, dst, sizeof(dst)))
		return fail(EINVAL);
	memcpy(&cid->route.addr.dst_storage, dst_addr, rc_sockaddr_len(dst_addr));
	if ((err = rc_ctl(s->dev, s->handle,
			  "resolve_addr " RDMAFS_KEQ(DST) "%s " RDMAFS_KEQ(PORT) "%d%s " RDMAFS_KEQ(TIMEOUT_MS) "%d", dst,
			  rc_port_of(dst_addr), src, timeout_ms > 0 ? timeout_ms : 2000)))
		return fail(err);
	if ((err = rc_id_complete(id, RDMA_CM_EVENT_ADDR_RESOLVED)))
		return fail(err);
	return 0;
}

int rdma_resolve_route(struct rdma_cm_id *cid, int timeout_ms)
{
	struct rc_id *id = to_rid(cid);
	struct rc_sub *s;
	int err;

	if ((err = rc_id_sub(id, &s)))
		return fail(err);
	if ((err = rc_ctl(s->dev, s->handle, "resolve_route " RDMAFS_KEQ(TIMEOUT_MS) "%d",
		timeout_ms > 0 ? timeout_ms : 2000)))
		return fail(err);
	if ((err = rc_id_complete(id, RDMA_CM_EVENT_ROUTE_RESOLVED)))
		return fail(err);
	return 0;
}

static int listen_sub(struct rc_sub *s, int backlog)
{
	if (backlog > 0)
		return rc_ctl(s->dev, s->handle, "listen " RDMAFS_KEQ(BACKLOG) "%d", backlog);
	return rc_ctl(s->dev, s->handle, "listen");
}

int rdma_listen(struct rdma_cm_id *cid, int backlog)
{
	struct rc_id *id = to_rid(cid);
	struct rc_device **list;
	struct rc_sub *s;
	int n, err = 0, port, ok = 0;

	if (id->listening)
		return fail(EINVAL);
	if (id->wild) {
		/* bound to the wildcard's port on every device already */
		for (int i = 0; i < id->nsubs; i++)
			if ((err = listen_sub(&id->subs[i], backlog)))
				return fail(err);
		id->wild = false;
		id->listening = true;
		return 0;
	}
	if (id->nsubs) {
		if ((err = listen_sub(&id->subs[0], backlog)))
			return fail(err);
		id->listening = true;
		rc_id_refresh(id, false);
		return 0;
	}
	/* unbound, or bound to a wildcard: every device */
	if (!id->bound) {
		struct sockaddr_in any = {.sin_family = AF_INET};
		memcpy(&id->bind_addr, &any, sizeof(any));
		id->bound = true;
	}
	port = rc_port_of((struct sockaddr *)&id->bind_addr);
	pthread_mutex_lock(&rc_lock);
	n = rc_devices(&list);
	pthread_mutex_unlock(&rc_lock);
	if (!n)
		return fail(ENODEV);
	for (int i = 0; i < n; i++) {
		int e;
		if ((e = add_sub(id, list[i], &s))) {
			err = err ? err : e;
			continue;
		}
		if ((e = bind_sub(s, (struct sockaddr *)&id->bind_addr, port)) || (e = listen_sub(s, backlog))) {
			char p[32];
			snprintf(p, sizeof(p), "cm/%u", s->handle);
			rc_rmdir(s->dev, p);
			pthread_mutex_lock(&rc_lock);
			id->nsubs--;
			pthread_mutex_unlock(&rc_lock);
			err = err ? err : e;
			continue;
		}
		if (!port) {
			/* one port for every device: the first one's */
			struct rc_attr a;
			if (!rc_read_attr(s->dev, s->handle, &a) && a.src.ss_family)
				port = rc_port_of((struct sockaddr *)&a.src);
		}
		ok++;
	}
	if (!ok)
		return fail(err ? err : ENODEV);
	id->listening = true;
	if (port) {
		struct sockaddr *sa = &cid->route.addr.src_addr;
		if (!sa->sa_family) /* else the bound address (a loopback one stays) */
			memcpy(&cid->route.addr.src_storage, &id->bind_addr, sizeof(id->bind_addr));
		if (sa->sa_family == AF_INET)
			((struct sockaddr_in *)sa)->sin_port = htons(port);
		else
			((struct sockaddr_in6 *)sa)->sin6_port = htons(port);
	}
	return 0;
}

static int set_id_option(struct rc_id *id, const char *key, int value, int *slot)
{
	int err;

	*slot = value;
	for (int i = 0; i < id->nsubs; i++)
		if ((err = rc_ctl(id->subs[i].dev, id->subs[i].handle, "set_option %s=%d", key, value)))
			return err;
	return 0;
}

int rdma_set_option(struct rdma_cm_id *cid, int level, int optname, void *optval, size_t optlen)
{
	struct rc_id *id = to_rid(cid);
	int err;

	if (!optval)
		return fail(EINVAL);
	if (level == RDMA_OPTION_ID) {
		switch (optname) {
		case RDMA_OPTION_ID_TOS:
			if (optlen != sizeof(uint8_t))
				return fail(EINVAL);
			err = set_id_option(id, RDMAFS_KEY_TOS, *(uint8_t *)optval, &id->tos);
			break;
		case RDMA_OPTION_ID_ACK_TIMEOUT:
			if (optlen != sizeof(uint8_t))
				return fail(EINVAL);
			err = set_id_option(id, RDMAFS_KEY_ACK_TIMEOUT, *(uint8_t *)optval, &id->ack_timeout);
			break;
		case RDMA_OPTION_ID_REUSEADDR:
			if (optlen != sizeof(int))
				return fail(EINVAL);
			err = set_id_option(id, RDMAFS_KEY_REUSEADDR, !!*(int *)optval, &id->reuseaddr);
			break;
		case RDMA_OPTION_ID_AFONLY:
			if (optlen != sizeof(int))
				return fail(EINVAL);
			err = set_id_option(id, RDMAFS_KEY_AFONLY, !!*(int *)optval, &id->afonly);
			break;
		default:
			return fail(ENOSYS); /* the kernel's answer to an option it lacks */
		}
		return err ? fail(err) : 0;
	}
	if (level == RDMA_OPTION_IB && optname == RDMA_OPTION_IB_PATH)
		return fail(EOPNOTSUPP);
	return fail(ENOSYS);
}

int rdma_migrate_id(struct rdma_cm_id *cid, struct rdma_event_channel *channel)
{
	struct rc_id *id = to_rid(cid);
	struct rdma_event_channel *own = NULL;
	struct rc_channel *old = id->chan, *nc;
	bool was_sync = id->sync;
	uint32_t h;
	int err;

	if (was_sync && !channel)
		return fail(EINVAL);
	if (!channel) {
		if (!(own = rdma_create_event_channel()))
			return -1;
		channel = own;
	}
	nc = to_rchan(channel);
	for (int i = 0; i < id->nsubs; i++) {
		struct rc_sub *s = &id->subs[i];
		if ((err = rc_channel_on(nc, s->dev, &h)) ||
		    (err = rc_ctl(s->dev, s->handle, "migrate " RDMAFS_KEQ(CHANNEL) "%u", h))) {
			if (own)
				rdma_destroy_event_channel(own);
			return fail(err);
		}
	}
	/* a synchronous id's last event (kept in cid->event by the helpers,
	 * rdma_resolve_addr's ADDR_RESOLVED for one) is acked here, as
	 * librdmacm does: nobody else ever will, and the wait below would
	 * never end (libfabric's verbs provider migrates such an id) */
	if (was_sync && cid->event) {
		rdma_ack_cm_event(cid->event);
		cid->event = NULL;
	}
	/* the records the old channel still holds for the id move with it,
	 * ahead of anything the new channel gets (ucma_move_events) */
	for (int i = 0; i < id->nsubs && old != nc; i++) {
		struct rc_sub *s = &id->subs[i];
		struct rc_attr a;
		if ((err = rc_read_attr(s->dev, s->handle, &a)) ||
		    (a.migrated_after > 0 && (err = rc_channel_move(old, nc, s, a.migrated_after)))) {
			if (own)
				rdma_destroy_event_channel(own);
			return fail(err);
		}
	}
	pthread_mutex_lock(&rc_lock);
	/* events already handed out on the old channel are acked first */
	while (id->events_out > 0)
		pthread_cond_wait(&id->acked, &rc_lock);
	old->nids--;
	nc->nids++;
	id->chan = nc;
	cid->channel = channel;
	id->sync = own != NULL;
	pthread_mutex_unlock(&rc_lock);
	if (was_sync)
		rdma_destroy_event_channel(&old->ch);
	return 0;
}

__be16 rdma_get_src_port(struct rdma_cm_id *cid)
{
	return htons((uint16_t)rc_port_of(&cid->route.addr.src_addr));
}

__be16 rdma_get_dst_port(struct rdma_cm_id *cid)
{
	return htons((uint16_t)rc_port_of(&cid->route.addr.dst_addr));
}
