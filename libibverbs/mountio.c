#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mountio.h"

static int debug = -1;

bool mio_debug(void)
{
	if (debug < 0) {
		const char *e = getenv("RDMAFS_DEBUG");
		debug = e && *e && strcmp(e, "0") != 0;
	}
	return debug;
}

void mio_vlog(const char *tag, const char *fmt, va_list ap)
{
	if (!mio_debug())
		return;
	fprintf(stderr, "%s: ", tag);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
}

void mio_log(const char *tag, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	mio_vlog(tag, fmt, ap);
	va_end(ap);
}

int mio_errno(const struct mio *m, int err)
{
	if (err == ENOTCONN || err == ECONNABORTED || err == ENODEV)
		return m->gone;
	return err;
}

int mio_fail(int err)
{
	errno = err;
	return err;
}

int mio_read(const struct mio *m, const char *path, char *buf, size_t len)
{
	int fd = openat(m->mount_fd, path, O_RDONLY | O_CLOEXEC);
	size_t got = 0;

	if (fd < 0)
		return mio_fail(mio_errno(m, errno));
	while (got + 1 < len) {
		ssize_t n = read(fd, buf + got, len - 1 - got);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			int err = errno;
			close(fd);
			return mio_fail(mio_errno(m, err));
		}
		if (n == 0)
			break;
		got += n;
	}
	buf[got] = 0;
	close(fd);
	return 0;
}

/* line plus a newline into out (size outlen): its length, or -1. */
static ssize_t terminated(const char *line, char *out, size_t outlen)
{
	size_t n = strlen(line);

	if (n + 2 > outlen)
		return -1;
	memcpy(out, line, n);
	out[n++] = '\n';
	return n;
}

int mio_write(const struct mio *m, const char *path, const char *line)
{
	char buf[2048];
	ssize_t n = terminated(line, buf, sizeof(buf));
	int fd, err = 0;

	if (n < 0)
		return mio_fail(EINVAL);
	fd = openat(m->mount_fd, path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return mio_fail(mio_errno(m, errno));
	if (write(fd, buf, n) != n)
		err = mio_errno(m, errno ? errno : EIO);
	close(fd);
	return err ? mio_fail(err) : 0;
}

int mio_create(const struct mio *m, const char *path, const char *req, const char *lease_kind,
	       uint32_t *handle)
{
	char ans[512], buf[1024];
	ssize_t n = terminated(req, buf, sizeof(buf)), r;
	int fd, err = 0;

	if (n < 0)
		return mio_fail(EINVAL);
	fd = openat(m->mount_fd, path, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return mio_fail(mio_errno(m, errno));
	if (write(fd, buf, n) != n)
		err = mio_errno(m, errno ? errno : EIO);
	/* The answer: the new handle, or "error: REASON". */
	do
		r = read(fd, ans, sizeof(ans) - 1);
	while (r < 0 && errno == EINTR);
	close(fd);
	ans[r < 0 ? 0 : r] = 0;
	if (err) {
		mio_log(m->tag, "%s \"%s\": %s (%s)", path, req, strerror(err), ans);
		return mio_fail(err);
	}
	char *end;
	unsigned long h = strtoul(ans, &end, 10);
	if (end == ans || h == 0 || h > UINT32_MAX) {
		mio_log(m->tag, "%s \"%s\": unexpected answer \"%s\"", path, req, ans);
		return mio_fail(EIO);
	}
	*handle = h;
	if (lease_kind)
		mio_lease(m, lease_kind, *handle);
	return 0;
}

void mio_lease(const struct mio *m, const char *kind, uint32_t handle)
{
	char line[64];
	int n;

	if (m->lease_fd < 0)
		return;
	n = snprintf(line, sizeof(line), "%s %u\n", kind, handle);
	if (write(m->lease_fd, line, n) != n)
		mio_log(m->tag, "lease %s %u: %s", kind, handle, strerror(errno));
}

void mio_reason(const struct mio *m, const char *dir, const char *what)
{
	char p[300], why[512];

	if (!mio_debug())
		return;
	snprintf(p, sizeof(p), "%s/error", dir);
	if (mio_read(m, p, why, sizeof(why)) == 0)
		mio_log(m->tag, "%s: %s: %s", dir, what, why);
}

int mio_rmdir(const struct mio *m, const char *path)
{
	if (unlinkat(m->mount_fd, path, AT_REMOVEDIR) < 0) {
		int err = mio_errno(m, errno);
		mio_reason(m, path, "destroy");
		return mio_fail(err);
	}
	return 0;
}
