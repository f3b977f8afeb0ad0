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

#include "rdmacm.h"

static int debug = -1;

void rc_log(const char *fmt, ...)
{
	va_list ap;

	if (debug < 0) {
		const char *e = getenv("RDMAFS_DEBUG");
		debug = e && *e && strcmp(e, "0") != 0;
	}
	if (!debug)
		return;
	fprintf(stderr, "rdmafs-cm: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

/* A device that went away answers ENOTCONN or ECONNABORTED: ENODEV, as
 * librdmacm says for a device that is gone. */
static int fail(int err)
{
	if (err == ENOTCONN || err == ECONNABORTED)
		err = ENODEV;
	errno = err;
	return err;
}

int rc_read(struct rc_device *d, const char *path, char *buf, size_t len)
{
	int fd = openat(d->mount_fd, path, O_RDONLY | O_CLOEXEC);
	size_t got = 0;

	if (fd < 0)
		return fail(errno);
	while (got + 1 < len) {
		ssize_t n = read(fd, buf + got, len - 1 - got);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			int err = errno;
			close(fd);
			return fail(err);
		}
		if (n == 0)
			break;
		got += n;
	}
	buf[got] = 0;
	close(fd);
	return 0;
}

static void log_reason(struct rc_device *d, uint32_t id, const char *what)
{
	char p[64], why[512];

	if (!debug)
		return;
	snprintf(p, sizeof(p), "cm/%u/error", id);
	if (rc_read(d, p, why, sizeof(why)) == 0)
		rc_log("%s: cm %u: %s: %s", d->mount, id, what, why);
}

int rc_transact(struct rc_device *d, const char *path, const char *req, uint32_t *handle, const char *lease_kind)
{
	char ans[256], line[512];
	size_t n = strlen(req);
	int fd, err = 0;
	ssize_t r;

	if (n + 2 > sizeof(line))
		return fail(EINVAL);
	memcpy(line, req, n);
	line[n++] = '\n';
	fd = openat(d->mount_fd, path, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return fail(errno);
	if (write(fd, line, n) != (ssize_t)n)
		err = errno ? errno : EIO;
	do
		r = read(fd, ans, sizeof(ans) - 1);
	while (r < 0 && errno == EINTR);
	close(fd);
	ans[r < 0 ? 0 : r] = 0;
	if (err) {
		rc_log("%s: %s \"%s\": %s (%s)", d->mount, path, req, strerror(err), ans);
		return fail(err);
	}
	char *end;
	unsigned long h = strtoul(ans, &end, 10);
	if (end == ans || h == 0 || h > UINT32_MAX) {
		rc_log("%s: %s \"%s\": unexpected answer \"%s\"", d->mount, path, req, ans);
		return fail(EIO);
	}
	*handle = (uint32_t)h;
	rc_lease(d, lease_kind, *handle);
	return 0;
}

void rc_lease(struct rc_device *d, const char *kind, uint32_t handle)
{
	char line[64];
	int n;

	if (d->lease_fd < 0)
		return;
	n = snprintf(line, sizeof(line), "%s %u\n", kind, handle);
	if (write(d->lease_fd, line, n) != n)
		rc_log("lease %s %u: %s", kind, handle, strerror(errno));
}

int rc_ctl(struct rc_device *d, uint32_t id, const char *fmt, ...)
{
	char line[1024], path[64];
	va_list ap;
	int fd, n, err = 0;

	va_start(ap, fmt);
	n = vsnprintf(line, sizeof(line) - 1, fmt, ap);
	va_end(ap);
	if (n < 0 || n >= (int)sizeof(line) - 1)
		return fail(EINVAL);
	line[n++] = '\n';
	snprintf(path, sizeof(path), "cm/%u/ctl", id);
	fd = openat(d->mount_fd, path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return fail(errno);
	if (write(fd, line, n) != n)
		err = errno ? errno : EIO;
	close(fd);
	if (err) {
		line[n - 1] = 0;
		log_reason(d, id, line);
		return fail(err);
	}
	rc_log("%s: cm %u: %.*s", d->mount, id, n - 1, line);
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
		return fail(EIO);
	}
	return 0;
}

int rc_rmdir(struct rc_device *d, const char *path)
{
	if (unlinkat(d->mount_fd, path, AT_REMOVEDIR) < 0) {
		rc_log("%s: rmdir %s: %s", d->mount, path, strerror(errno));
		return fail(errno);
	}
	return 0;
}
