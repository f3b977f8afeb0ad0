/* What the API tests of tests/ share: failing with the place and errno,
 * and waiting for one CM event of a known type. */
#ifndef RDMAFS_CM_TESTS_CHECK_H
#define RDMAFS_CM_TESTS_CHECK_H

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rdma/rdma_cma.h>

#define FAIL(...)                                                          \
	do {                                                               \
		fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);        \
		fprintf(stderr, __VA_ARGS__);                              \
		fprintf(stderr, " (errno %d %s)\n", errno, strerror(errno)); \
		exit(1);                                                   \
	} while (0)
#define CHECK(c, ...)                  \
	do {                           \
		if (!(c))              \
			FAIL(__VA_ARGS__); \
	} while (0)

/* the next event of ch, which must be want (for id, unless NULL) */
static inline struct rdma_cm_event *next(struct rdma_event_channel *ch, enum rdma_cm_event_type want,
					 struct rdma_cm_id *id)
{
	struct rdma_cm_event *e;
	struct pollfd p = {.fd = ch->fd, .events = POLLIN};

	CHECK(poll(&p, 1, 5000) == 1, "no event within 5 s (waiting for %s)", rdma_event_str(want));
	CHECK(rdma_get_cm_event(ch, &e) == 0, "rdma_get_cm_event");
	CHECK(e->event == want, "got %s status %d, want %s", rdma_event_str(e->event), e->status,
	      rdma_event_str(want));
	CHECK(!id || e->id == id, "%s for another id", rdma_event_str(want));
	return e;
}

#endif
