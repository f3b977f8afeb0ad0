/* Asynchronous events. A FUSE file of the mount is not pollable (go-fuse
 * answers FUSE_POLL with ENOSYS, so the kernel calls every file always
 * ready), so context->async_fd is the read end of a pipe: a thread of the
 * context blocks in read() on MOUNT/events, keeps the events of this
 * context's objects (and the device's own: port and device_fatal), queues
 * them and writes one byte per event into the pipe. ibv_get_async_event
 * reads one byte (blocking, or EAGAIN when the program made async_fd
 * non-blocking) and takes the oldest event. The thread ends with the
 * context (pthread_cancel interrupts its FUSE read). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rdmafs.h"
#include "rdmafs-text.h"

/* The kind of object an event names (-1: the port or the device). */
static int kind_of(enum ibv_event_type t)
{
	switch (t) {
	case IBV_EVENT_CQ_ERR:
		return RF_CQ;
	case IBV_EVENT_SRQ_ERR:
	case IBV_EVENT_SRQ_LIMIT_REACHED:
		return RF_SRQ;
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_REQ_ERR:
	case IBV_EVENT_QP_ACCESS_ERR:
	case IBV_EVENT_COMM_EST:
	case IBV_EVENT_SQ_DRAINED:
	case IBV_EVENT_PATH_MIG:
	case IBV_EVENT_PATH_MIG_ERR:
	case IBV_EVENT_QP_LAST_WQE_REACHED:
		return RF_QP;
	default:
		return -1;
	}
}

void rf_track(struct rf_context *ctx, enum rf_kind kind, uint32_t handle, void *ptr)
{
	struct rf_obj *o = malloc(sizeof(*o));

	if (!o)
		return; /* its events will not be seen; nothing else breaks */
	o->kind = kind;
	o->handle = handle;
	o->ptr = ptr;
	pthread_mutex_lock(&ctx->lock);
	o->next = ctx->objs;
	ctx->objs = o;
	pthread_mutex_unlock(&ctx->lock);
}

void rf_untrack(struct rf_context *ctx, enum rf_kind kind, uint32_t handle)
{
	pthread_mutex_lock(&ctx->lock);
	for (struct rf_obj **pp = &ctx->objs; *pp; pp = &(*pp)->next) {
		if ((*pp)->kind == kind && (*pp)->handle == handle) {
			struct rf_obj *o = *pp;
			void *ptr = o->ptr;
			*pp = o->next;
			free(o);
			/* Queued events of the object go with it: nobody may see a
			 * pointer to a destroyed object. */
			struct rf_async_ev **ep = &ctx->async_head, *last = NULL;
			while (*ep) {
				struct ibv_async_event *e = &(*ep)->ev;
				if (e->element.qp == ptr || e->element.cq == ptr || e->element.srq == ptr) {
					struct rf_async_ev *dead = *ep;
					*ep = dead->next;
					free(dead);
					continue;
				}
				last = *ep;
				ep = &(*ep)->next;
			}
			ctx->async_tail = last;
			break;
		}
	}
	pthread_mutex_unlock(&ctx->lock);
}

static void *find(struct rf_context *ctx, enum rf_kind kind, uint32_t h)
{
	for (struct rf_obj *o = ctx->objs; o; o = o->next)
		if (o->kind == kind && o->handle == h)
			return o->ptr;
	return NULL;
}

/* One line: "event=NAME KIND=HANDLE". ctx->lock held. */
static bool queue_line(struct rf_context *ctx, const char *line)
{
	char name[32], kind[8];
	unsigned int h;
	int type = -1;

	if (sscanf(line, RDMAFS_KEQ(EVENT) "%31s %7[a-z]=%u", name, kind, &h) != 3)
		return false;
	for (size_t i = 0; i < sizeof(rdmafs_event_names) / sizeof(rdmafs_event_names[0]); i++)
		if (rdmafs_event_names[i] && !strcmp(rdmafs_event_names[i], name))
			type = i;
	if (type < 0)
		return false;
	struct ibv_async_event ev = {.event_type = type};
	if (!strcmp(kind, RDMAFS_KEY_QP)) {
		struct rf_qp *q = find(ctx, RF_QP, h);
		if (!q)
			return false;
		ev.element.qp = &q->qpx.qp_base;
	} else if (!strcmp(kind, RDMAFS_KEY_CQ)) {
		struct rf_cq *c = find(ctx, RF_CQ, h);
		if (!c)
			return false;
		ev.element.cq = ibv_cq_ex_to_cq(&c->cq);
	} else if (!strcmp(kind, RDMAFS_KEY_SRQ)) {
		struct rf_srq *s = find(ctx, RF_SRQ, h);
		if (!s)
			return false;
		ev.element.srq = &s->srq;
	} else {
		ev.element.port_num = h;
	}
	struct rf_async_ev *e = calloc(1, sizeof(*e));
	if (!e)
		return false;
	e->ev = ev;
	if (ctx->async_tail)
		ctx->async_tail->next = e;
	else
		ctx->async_head = e;
	ctx->async_tail = e;
	return true;
}

static void deliver(struct rf_context *ctx, char *text)
{
	int n = 0;

	pthread_mutex_lock(&ctx->lock);
	for (char *save, *l = strtok_r(text, "\n", &save); l; l = strtok_r(NULL, "\n", &save))
		n += queue_line(ctx, l);
	pthread_mutex_unlock(&ctx->lock);
	while (n-- > 0) {
		static const char b = 1;
		if (write(ctx->async_wr, &b, 1) < 0)
			break;
	}
}

static void close_events(void *arg)
{
	struct rf_context *ctx = arg;

	if (ctx->events_fd >= 0)
		close(ctx->events_fd);
	ctx->events_fd = -1;
}

static void *async_main(void *arg)
{
	struct rf_context *ctx = arg;
	char buf[16384];

	ctx->events_fd = -1;
	pthread_cleanup_push(close_events, ctx);
	for (;;) {
		if (ctx->events_fd < 0) {
			ctx->events_fd = openat(ctx->mount_fd, "events", O_RDONLY | O_CLOEXEC);
			if (ctx->events_fd < 0)
				break;
		}
		ssize_t n = read(ctx->events_fd, buf, sizeof(buf) - 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			break;
		if (n == 0)
			continue; /* end of a batch: the next read waits for another */
		buf[n] = 0;
		deliver(ctx, buf);
	}
	pthread_cleanup_pop(1);
	if (!ctx->closing) {
		/* The daemon is gone: the device is dead. */
		char line[] = RDMAFS_KEQ(EVENT) "device_fatal " RDMAFS_KEQ(PORT) "1";
		deliver(ctx, line);
	}
	return NULL;
}

int rf_async_start(struct rf_context *ctx)
{
	sigset_t all, old;
	int err;

	/* The thread takes no signals meant for the program. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	err = pthread_create(&ctx->async_thread, NULL, async_main, ctx);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (err)
		return err;
	ctx->async_started = true;
	return 0;
}

void rf_async_stop(struct rf_context *ctx)
{
	if (!ctx->async_started)
		return;
	ctx->closing = true;
	pthread_cancel(ctx->async_thread);
	pthread_join(ctx->async_thread, NULL);
	ctx->async_started = false;
}

int ibv_get_async_event(struct ibv_context *context, struct ibv_async_event *event)
{
	struct rf_context *ctx = to_rctx(context);
	char b;

	for (;;) {
		ssize_t n = read(context->async_fd, &b, 1);
		if (n < 0)
			return -1; /* EAGAIN for a non-blocking async_fd, EINTR */
		if (n == 0) {
			errno = EIO;
			return -1;
		}
		pthread_mutex_lock(&ctx->lock);
		struct rf_async_ev *e = ctx->async_head;
		if (e) {
			ctx->async_head = e->next;
			if (!ctx->async_head)
				ctx->async_tail = NULL;
			*event = e->ev;
			switch (kind_of(event->event_type)) {
			case RF_CQ:
				to_rcq(event->element.cq)->async_delivered++;
				break;
			case RF_SRQ:
				to_rsrq(event->element.srq)->async_delivered++;
				break;
			case RF_QP:
				to_rqp(event->element.qp)->async_delivered++;
				break;
			default:
				break;
			}
		}
		pthread_mutex_unlock(&ctx->lock);
		free(e);
		if (e)
			return 0;
		/* the event's object was destroyed after it was queued */
	}
}

void ibv_ack_async_event(struct ibv_async_event *event)
{
	pthread_mutex_t *m = NULL;
	pthread_cond_t *c = NULL;
	unsigned int *count = NULL;

	switch (kind_of(event->event_type)) {
	case RF_CQ:
		m = &event->element.cq->mutex;
		c = &event->element.cq->cond;
		count = &event->element.cq->async_events_completed;
		break;
	case RF_SRQ:
		m = &event->element.srq->mutex;
		c = &event->element.srq->cond;
		count = &event->element.srq->events_completed;
		break;
	case RF_QP:
		m = &event->element.qp->mutex;
		c = &event->element.qp->cond;
		count = &event->element.qp->events_completed;
		break;
	default:
		return;
	}
	pthread_mutex_lock(m);
	(*count)++;
	pthread_cond_signal(c);
	pthread_mutex_unlock(m);
}
