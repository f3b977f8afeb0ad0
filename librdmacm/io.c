/* cm/ files: every CM operation is a file operation on the mount, as a
 * shell would do it (cm/CONTRACT.md, "The tree"); the daemon checks
 * everything and we only translate. Each call returns 0 or a positive
 * errno, also left in errno; the daemon's reason goes to the log
 * (RDMAFS_DEBUG=1). */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mountio.h"
#include "rdmacm.h"

/* The mount as mountio sees it for d: a device that went away (ENOTCONN,
 * ECONNABORTED) is ENODEV, as librdmacm says for a device that is gone. */
static struct mio mio_of(const struct rc_device *d)
{
	return (struct mio){.mount_fd = d->mount_fd, .lease_fd = d->lease_fd, .gone = ENODEV, .tag = "rdmafs-cm"};
}

void rc_log(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	mio_vlog("rdmafs-cm", fmt, ap);
	va_end(ap);
}

int rc_read(struct rc_device *d, const char *path, char *buf, size_t len)
{
	struct mio m = mio_of(d);

	return mio_read(&m, path, buf, len);
}

int rc_transact(struct rc_device *d, const char *path, const char *req, uint32_t *handle, const char *lease_kind)
{
	struct mio m = mio_of(d);

	return mio_create(&m, path, req, lease_kind, handle);
}

void rc_lease(struct rc_device *d, const char *kind, uint32_t handle)
{
	struct mio m = mio_of(d);

	mio_lease(&m, kind, handle);
}

int rc_ctl(struct rc_device *d, uint32_t id, const char *fmt, ...)
{
	struct mio m = mio_of(d);
	char line[1024], path[64];
	va_list ap;
	int n, err;

	va_start(ap, fmt);
	n = vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (n < 0 || n >= (int)sizeof(line))
		return mio_fail(EINVAL);
	snprintf(path, sizeof(path), "cm/%u", id);
	if ((err = mio_write(&m, strcat(path, "/ctl"), line))) {
		path[strlen(path) - 4] = 0;
		mio_reason(&m, path, line);
		return mio_fail(err);
	}
	rc_log("%s: cm %u: %s", d->mount, id, line);
	return 0;
}

int rc_read_attr(struct rc_device *d, uint32_t id, struct rc_attr *a)
{
	char p[64], text[4096];
	int err;

	snprintf(p, sizeof(p), "cm/%u/attr", id);
	if ((err = rc_read(d, p, text, sizeof(text))))
		return err;
	if (rc_parse_attr(text, a)) {
		rc_log("%s: %s: cannot parse \"%s\"", d->mount, p, text);
		return mio_fail(EIO);
	}
	return 0;
}

int rc_rmdir(struct rc_device *d, const char *path)
{
	struct mio m = mio_of(d);

	return mio_rmdir(&m, path);
}
