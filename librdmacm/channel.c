/* Event channels. The daemon writes each event as one 1024-byte record to
 * the FIFO of the channel it made on a device (cm/channel/C/fifo); an
 * rdma_event_channel is an epoll descriptor over its FIFOs, one per device
 * its ids use (added on first use), so channel->fd is a real descriptor
 * that poll and select see readable, and O_NONBLOCK on it makes
 * rdma_get_cm_event fail with EAGAIN instead of waiting.
 *
 * rdma_get_cm_event reads one record and does what librdmacm does on the
 * way (cma.c, rdma_get_cm_event): fills the id's route from the daemon's
 * attr on ADDR/ROUTE_RESOLVED, makes the new id of a CONNECT_REQUEST,
 * finishes the connection on CONNECT_RESPONSE when the id has a QP (RTR,
 * RTS, `establish`: the program sees ESTABLISHED), and moves the QP to ERR
 * on REJECTED, UNREACHABLE and CONNECT_ERROR. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "rdmacm.h"

/* An event handed out: the public struct and what it points to. */
struct rc_event {
	struct rdma_cm_event ev;
	struct rc_id *owner; /* the id whose count it is on (a listener for a request) */
	uint8_t private_data[RC_MAX_PRIVATE];
};

/* epoll's tag of the stash's eventfd (FIFOs are tagged by their index) */
#define STASH_TAG UINT32_MAX

/* Queues a record read ahead; ch->lock held. */
static void stash_push(struct rc_channel *ch, struct rc_stashed *r)
{
	uint64_t one = 1;

	r->next = NULL;
	*ch->stash_tail = r;
	ch->stash_tail = &r->next;
	if (write(ch->stash_fd, &one, sizeof(one)) < 0)
		rc_log("event channel: eventfd write: %s", strerror(errno));
}

/* The oldest record read ahead, or NULL; ch->lock held. */
static struct rc_stashed *stash_pop(struct rc_channel *ch)
{
	struct rc_stashed *r = ch->stash;
	uint64_t n;

	if (!r)
		return NULL;
	if (!(ch->stash = r->next)) {
		ch->stash_tail = &ch->stash;
		if (read(ch->stash_fd, &n, sizeof(n)) < 0 && errno != EAGAIN)
			rc_log("event channel: eventfd read: %s", strerror(errno));
	}
	return r;
}

/* Reads one record from a FIFO of dev into *rec, parsed: 0, or the errno
 * of the read (ENODEV: the daemon's end is gone; EAGAIN: another thread
 * took it), or EIO for a record that is short or does not parse (logged,
 * and skipped by the callers). */
static int fifo_record(int fd, struct rc_device *dev, struct rc_record *rec)
{
	char buf[RC_RECORD_SIZE + 1];
	ssize_t r = read(fd, buf, RC_RECORD_SIZE);

	if (r < 0)
		return errno;
	if (r == 0)
		return ENODEV;
	if (r != RC_RECORD_SIZE) {
		rc_log("%s: a short event record (%zd bytes)", dev->mount, r);
		return EIO;
	}
	buf[RC_RECORD_SIZE] = 0;
	if (rc_parse_record(buf, RC_RECORD_SIZE, rec)) {
		rc_log("%s: not an event record: \"%.80s\"", dev->mount, buf);
		return EIO;
	}
	return 0;
}

/* Counts a record just read from dev's FIFO on the daemon id it belongs
 * to (a connect request: its listener), as the daemon counts what it
 * queued (attr events_queued); the sub, or NULL. */
static struct rc_sub *count_record(struct rc_device *dev, const struct rc_record *r)
{
	struct rc_sub *sub = NULL;
	long h;

	h = r->type == RDMA_CM_EVENT_CONNECT_REQUEST ? r->listen_id : (long)r->id;
	pthread_mutex_lock(&rc_lock);
	struct rc_id *id = h > 0 ? rc_id_lookup(dev, (uint32_t)h) : NULL;
	for (int i = 0; id && i < id->nsubs; i++) {
		if (id->subs[i].dev == dev && id->subs[i].handle == (uint32_t)h) {
			sub = &id->subs[i];
			sub->records++;
		}
	}
	pthread_mutex_unlock(&rc_lock);
	return sub;
}

struct rdma_event_channel *rdma_create_event_channel(void)
{
	struct rc_channel *ch = calloc(1, sizeof(*ch));

	if (!ch) {
		errno = ENOMEM;
		return NULL;
	}
	struct epoll_event ev = {.events = EPOLLIN, .data.u32 = STASH_TAG};

	ch->stash_fd = -1;
	ch->ch.fd = epoll_create1(EPOLL_CLOEXEC);
	if (ch->ch.fd < 0)
		goto fail;
	ch->stash_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (ch->stash_fd < 0 || epoll_ctl(ch->ch.fd, EPOLL_CTL_ADD, ch->stash_fd, &ev) < 0)
		goto fail;
	ch->stash_tail = &ch->stash;
	pthread_mutex_init(&ch->lock, NULL);
	return &ch->ch;
fail:;
	int err = errno;
	if (ch->stash_fd >= 0)
		close(ch->stash_fd);
	if (ch->ch.fd >= 0)
		close(ch->ch.fd);
	free(ch);
	errno = err;
	return NULL;
}

void rdma_destroy_event_channel(struct rdma_event_channel *channel)
{
	struct rc_channel *ch = to_rchan(channel);
	char p[64];

	/* librdmacm's is void: a channel still in use is the program's bug */
	if (ch->nids)
		rc_log("rdma_destroy_event_channel: %d ids still use the channel", ch->nids);
	for (int i = 0; i < ch->nsubs; i++) {
		close(ch->subs[i].fifo_fd);
		snprintf(p, sizeof(p), "cm/channel/%u", ch->subs[i].handle);
		rc_rmdir(ch->subs[i].dev, p);
	}
	for (struct rc_stashed *r; (r = stash_pop(ch));)
		free(r);
	close(ch->stash_fd);
	close(ch->ch.fd);
	pthread_mutex_destroy(&ch->lock);
	free(ch);
}

int rc_channel_on(struct rc_channel *ch, struct rc_device *d, uint32_t *handle)
{
	struct epoll_event ev = {.events = EPOLLIN};
	char p[64];
	uint32_t h;
	int fd, err;

	pthread_mutex_lock(&ch->lock);
	for (int i = 0; i < ch->nsubs; i++) {
		if (ch->subs[i].dev == d) {
			*handle = ch->subs[i].handle;
			pthread_mutex_unlock(&ch->lock);
			return 0;
		}
	}
	if (ch->nsubs == RC_MAX_DEVICES) {
		pthread_mutex_unlock(&ch->lock);
		return errno = ENOMEM;
	}
	if ((err = rc_transact(d, "cm/channel/new", "", &h, "cm_channel"))) {
		pthread_mutex_unlock(&ch->lock);
		return err;
	}
	snprintf(p, sizeof(p), "cm/channel/%u/fifo", h);
	fd = openat(d->mount_fd, p, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0) {
		err = errno;
		snprintf(p, sizeof(p), "cm/channel/%u", h);
		rc_rmdir(d, p);
		pthread_mutex_unlock(&ch->lock);
		return errno = err;
	}
	ev.data.u32 = ch->nsubs;
	if (epoll_ctl(ch->ch.fd, EPOLL_CTL_ADD, fd, &ev) < 0) {
		err = errno;
		close(fd);
		snprintf(p, sizeof(p), "cm/channel/%u", h);
		rc_rmdir(d, p);
		pthread_mutex_unlock(&ch->lock);
		return errno = err;
	}
	ch->subs[ch->nsubs++] = (struct rc_subchan){.dev = d, .handle = h, .fifo_fd = fd};
	*handle = h;
	pthread_mutex_unlock(&ch->lock);
	return 0;
}

/* One record: read ahead, else from a ready FIFO of the channel; 0,
 * EAGAIN or an errno. */
static int read_record(struct rc_channel *ch, struct rc_record *rec, struct rc_device **dev)
{
	int nonblock = fcntl(ch->ch.fd, F_GETFL) & O_NONBLOCK;
	struct epoll_event ev;

	for (;;) {
		pthread_mutex_lock(&ch->lock);
		struct rc_stashed *st = stash_pop(ch);
		pthread_mutex_unlock(&ch->lock);
		if (st) {
			*rec = st->rec;
			*dev = st->dev;
			free(st);
			return 0;
		}
		int n = epoll_wait(ch->ch.fd, &ev, 1, nonblock ? 0 : -1);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return errno;
		}
		if (n == 0)
			return EAGAIN;
		if (ev.data.u32 == STASH_TAG)
			continue;
		pthread_mutex_lock(&ch->lock);
		struct rc_subchan *s = ev.data.u32 < (uint32_t)ch->nsubs ? &ch->subs[ev.data.u32] : NULL;
		int fd = s ? s->fifo_fd : -1;
		*dev = s ? s->dev : NULL;
		pthread_mutex_unlock(&ch->lock);
		if (fd < 0)
			continue;
		int err = fifo_record(fd, *dev, rec);
		if (err == EAGAIN || err == EINTR || err == EIO)
			continue; /* another thread took it, or a bad record (logged) */
		if (err)
			return err;
		count_record(*dev, rec);
		return 0;
	}
}

int rc_channel_move(struct rc_channel *old, struct rc_channel *nc, struct rc_sub *sub, long long migrated_after)
{
	int fd = -1;

	pthread_mutex_lock(&old->lock);
	for (int i = 0; i < old->nsubs; i++)
		if (old->subs[i].dev == sub->dev)
			fd = old->subs[i].fifo_fd;
	pthread_mutex_unlock(&old->lock);
	if (fd < 0)
		return 0; /* the old channel never had this device: nothing queued */
	for (;;) {
		pthread_mutex_lock(&rc_lock);
		bool done = sub->records >= migrated_after;
		pthread_mutex_unlock(&rc_lock);
		if (done)
			return 0;
		/* the daemon writes what it queued as the FIFO has room, so
		 * this wait ends; a thread reading the old channel meanwhile may
		 * take a record first, hence the bounded waits */
		struct pollfd p = {.fd = fd, .events = POLLIN};
		int n = poll(&p, 1, 100);
		if (n < 0 && errno != EINTR)
			return errno;
		if (n <= 0)
			continue;
		struct rc_stashed *st = malloc(sizeof(*st));
		if (!st)
			return ENOMEM;
		int err = fifo_record(fd, sub->dev, &st->rec);
		if (err) {
			free(st);
			if (err == EAGAIN || err == EINTR)
				continue;
			return err; /* EIO: a bad record would never be counted */
		}
		st->dev = sub->dev;
		struct rc_channel *to = count_record(sub->dev, &st->rec) == sub ? nc : old;
		pthread_mutex_lock(&to->lock);
		stash_push(to, st);
		pthread_mutex_unlock(&to->lock);
	}
}

static void copy_conn(struct rc_event *e, const struct rc_record *r)
{
	struct rdma_conn_param *c = &e->ev.param.conn;

	if (r->private_data_len > 0) {
		memcpy(e->private_data, r->private_data, r->private_data_len);
		c->private_data = e->private_data;
		c->private_data_len = (uint8_t)r->private_data_len;
	}
	if (r->responder_resources >= 0)
		c->responder_resources = (uint8_t)r->responder_resources;
	if (r->initiator_depth >= 0)
		c->initiator_depth = (uint8_t)r->initiator_depth;
	if (r->flow_control >= 0)
		c->flow_control = (uint8_t)r->flow_control;
	if (r->retry_count >= 0)
		c->retry_count = (uint8_t)r->retry_count;
	if (r->rnr_retry_count >= 0)
		c->rnr_retry_count = (uint8_t)r->rnr_retry_count;
	if (r->srq >= 0)
		c->srq = (uint8_t)r->srq;
	if (r->qp_num >= 0)
		c->qp_num = (uint32_t)r->qp_num;
}

/* The UD parameters: the peer's QPN and Q_Key, and an AH to it. */
static void copy_ud(struct rc_event *e, struct rc_id *id, const struct rc_record *r)
{
	struct rdma_ud_param *u = &e->ev.param.ud;
	const struct ibv_sa_path_rec *p = &id->path;

	if (r->private_data_len > 0) {
		memcpy(e->private_data, r->private_data, r->private_data_len);
		u->private_data = e->private_data;
		u->private_data_len = (uint8_t)r->private_data_len;
	}
	if (r->qp_num >= 0)
		u->qp_num = (uint32_t)r->qp_num;
	if (r->qkey >= 0)
		u->qkey = (uint32_t)r->qkey;
	u->ah_attr.dlid = be16toh(p->dlid);
	u->ah_attr.sl = p->sl;
	u->ah_attr.port_num = 1;
	u->ah_attr.is_global = 1;
	u->ah_attr.grh.dgid = p->dgid;
	u->ah_attr.grh.sgid_index = 0;
	u->ah_attr.grh.hop_limit = p->hop_limit;
	u->ah_attr.grh.traffic_class = p->traffic_class;
	u->ah_attr.grh.flow_label = be32toh(p->flow_label);
}

int rc_channel_inject(struct rc_id *id, struct rc_device *dev, const struct rc_record *r)
{
	struct rc_channel *ch = id->chan;
	struct rc_stashed *st;

	if (!ch)
		return EINVAL;
	if (!(st = calloc(1, sizeof(*st))))
		return ENOMEM;
	st->rec = *r;
	st->dev = dev;
	pthread_mutex_lock(&ch->lock);
	stash_push(ch, st);
	pthread_mutex_unlock(&ch->lock);
	return 0;
}

/* Turns a record into the event the program gets: 0 (e filled), EAGAIN
 * (consumed, nothing to hand out) or an errno. */
static int process(struct rc_device *dev, const struct rc_record *r, struct rc_event *e)
{
	struct rc_id *id, *owner;

	pthread_mutex_lock(&rc_lock);
	if (r->type == RDMA_CM_EVENT_CONNECT_REQUEST) {
		struct rc_id *l = r->listen_id > 0 ? rc_id_lookup(dev, (uint32_t)r->listen_id) : NULL;
		if (!l) {
			pthread_mutex_unlock(&rc_lock);
			rc_log("%s: a connect request %u for no listener of ours (%ld)", dev->mount, r->id, r->listen_id);
			return EAGAIN;
		}
		id = rc_id_adopt(l, dev, r->id);
		if (!id) {
			pthread_mutex_unlock(&rc_lock);
			char p[32];
			snprintf(p, sizeof(p), "cm/%u", r->id);
			rc_rmdir(dev, p);
			return EAGAIN;
		}
		owner = l;
		e->ev.listen_id = &l->id;
	} else {
		id = owner = rc_id_lookup(dev, r->id);
		if (!id) {
			pthread_mutex_unlock(&rc_lock);
			rc_log("%s: event for an id no longer ours (%u)", dev->mount, r->id);
			return EAGAIN;
		}
	}
	owner->events_out++;
	pthread_mutex_unlock(&rc_lock);

	e->owner = owner;
	e->ev.id = &id->id;
	e->ev.event = r->type;
	e->ev.status = r->status;
	bool ud = id->id.qp_type == IBV_QPT_UD;
	switch (r->type) {
	case RDMA_CM_EVENT_ADDR_RESOLVED:
		if (!r->status)
			rc_id_refresh(id, false);
		break;
	case RDMA_CM_EVENT_ROUTE_RESOLVED:
		if (!r->status)
			rc_id_refresh(id, true);
		break;
	case RDMA_CM_EVENT_CONNECT_REQUEST:
		rc_id_refresh(id, true);
		/* what the peer asked for: rdma_accept's RDMA_MAX_* means these */
		if (r->initiator_depth >= 0)
			id->initiator_depth = (uint8_t)r->initiator_depth;
		if (r->responder_resources >= 0)
			id->responder_resources = (uint8_t)r->responder_resources;
		if (ud)
			copy_ud(e, id, r);
		else
			copy_conn(e, r);
		break;
	case RDMA_CM_EVENT_CONNECT_RESPONSE:
		copy_conn(e, r);
		if (id->id.qp) {
			int err = rc_conn_resp(id, r);
			if (err) {
				e->ev.event = RDMA_CM_EVENT_CONNECT_ERROR;
				e->ev.status = -err;
				id->connect_error = true;
			} else {
				e->ev.event = RDMA_CM_EVENT_ESTABLISHED;
				id->established = true;
			}
		}
		break;
	case RDMA_CM_EVENT_ESTABLISHED:
		if (ud) {
			rc_id_refresh(id, true);
			copy_ud(e, id, r);
		} else {
			copy_conn(e, r);
		}
		id->established = true;
		break;
	case RDMA_CM_EVENT_MULTICAST_JOIN:
	case RDMA_CM_EVENT_MULTICAST_ERROR:
		if (r->mc) {
			int err = rc_mc_event(id, r->mc, &e->ev.param.ud);
			if (err == EAGAIN) {
				e->owner = owner;
				return EAGAIN;
			}
			if (err) {
				e->ev.event = RDMA_CM_EVENT_MULTICAST_ERROR;
				e->ev.status = -err;
			}
		}
		break;
	case RDMA_CM_EVENT_REJECTED:
		if (id->connect_error)
			return EAGAIN;
		copy_conn(e, r);
		rc_qp_err(id);
		break;
	case RDMA_CM_EVENT_DISCONNECTED:
		if (id->connect_error)
			return EAGAIN;
		copy_conn(e, r);
		id->established = false;
		break;
	default:
		if (ud)
			copy_ud(e, id, r);
		else
			copy_conn(e, r);
		break;
	}
	return 0;
}

int rdma_get_cm_event(struct rdma_event_channel *channel, struct rdma_cm_event **event)
{
	struct rc_channel *ch = to_rchan(channel);

	if (!event) {
		errno = EINVAL;
		return -1;
	}
	for (;;) {
		struct rc_device *dev = NULL;
		struct rc_record rec;
		int err = read_record(ch, &rec, &dev);

		if (err) {
			errno = err;
			return -1;
		}
		struct rc_event *e = calloc(1, sizeof(*e));
		if (!e) {
			errno = ENOMEM;
			return -1;
		}
		err = process(dev, &rec, e);
		if (err == EAGAIN) {
			if (e->owner)
				rdma_ack_cm_event(&e->ev);
			else
				free(e);
			continue;
		}
		if (err) {
			free(e);
			errno = err;
			return -1;
		}
		*event = &e->ev;
		return 0;
	}
}

int rdma_ack_cm_event(struct rdma_cm_event *event)
{
	struct rc_event *e;

	if (!event) {
		errno = EINVAL;
		return -1;
	}
	e = rc_container_of(event, struct rc_event, ev);
	pthread_mutex_lock(&rc_lock);
	e->owner->events_out--;
	pthread_cond_broadcast(&e->owner->acked);
	pthread_mutex_unlock(&rc_lock);
	free(e);
	return 0;
}
