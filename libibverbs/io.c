/* The control path: every verb that is not on the data path is a file
 * operation on the mount, exactly as a shell user would do it (README.md,
 * "File formats"). The daemon checks everything; we only translate. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rdmafs.h"

static int debug = -1;

void rf_log(const char *fmt, ...)
{
	va_list ap;

	if (debug < 0) {
		const char *e = getenv("RDMAFS_DEBUG");
		debug = e && *e && strcmp(e, "0") != 0;
	}
	if (!debug)
		return;
	fprintf(stderr, "rdmafs: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

/* A device that went away (daemon died, unmounted) answers ENOTCONN or
 * ECONNABORTED; libibverbs says EIO for a dead device. */
int rf_errno_of_write(int err)
{
	if (err == ENOTCONN || err == ECONNABORTED || err == ENODEV)
		return EIO;
	return err;
}

static int fail(int err)
{
	errno = err;
	return err;
}

int rf_read_file(struct rf_context *ctx, const char *path, char *buf, size_t len)
{
	int fd = openat(ctx->mount_fd, path, O_RDONLY | O_CLOEXEC);
	size_t got = 0;

	if (fd < 0)
		return fail(rf_errno_of_write(errno));
	while (got + 1 < len) {
		ssize_t n = read(fd, buf + got, len - 1 - got);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			int err = errno;
			close(fd);
			return fail(rf_errno_of_write(err));
		}
		if (n == 0)
			break;
		got += n;
	}
	buf[got] = 0;
	close(fd);
	return 0;
}

/* The last failure on an object, for the log. */
static void log_error_file(struct rf_context *ctx, const char *dir, const char *what)
{
	char p[300], why[512];

	if (!debug)
		return;
	snprintf(p, sizeof(p), "%s/error", dir);
	if (rf_read_file(ctx, p, why, sizeof(why)) == 0)
		rf_log("%s: %s", what, why);
}

int rf_transact(struct rf_context *ctx, const char *kind, const char *req, uint32_t *handle)
{
	char path[64], ans[512], line[1024];
	int fd, err = 0;
	size_t n = strlen(req);
	ssize_t r;

	if (n + 2 > sizeof(line))
		return fail(EINVAL);
	memcpy(line, req, n);
	line[n++] = '\n';
	snprintf(path, sizeof(path), "%s/new", kind);
	fd = openat(ctx->mount_fd, path, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return fail(rf_errno_of_write(errno));
	if (write(fd, line, n) != (ssize_t)n)
		err = rf_errno_of_write(errno ? errno : EIO);
	do
		r = read(fd, ans, sizeof(ans) - 1);
	while (r < 0 && errno == EINTR);
	close(fd);
	if (r < 0)
		r = 0;
	ans[r] = 0;
	if (err) {
		rf_log("%s/new \"%s\": %s", kind, req, ans);
		return fail(err);
	}
	char *end;
	unsigned long h = strtoul(ans, &end, 10);
	if (end == ans || h == 0 || h > UINT32_MAX) {
		rf_log("%s/new \"%s\": unexpected answer \"%s\"", kind, req, ans);
		return fail(EIO);
	}
	*handle = h;
	if (ctx->lease_fd >= 0) {
		n = snprintf(line, sizeof(line), "%s %lu\n", kind, h);
		if (write(ctx->lease_fd, line, n) != (ssize_t)n)
			rf_log("lease %s %lu: %s", kind, h, strerror(errno));
	}
	return 0;
}

int rf_command(struct rf_context *ctx, const char *path, const char *cmd)
{
	char line[2048];
	size_t n = strlen(cmd);
	int fd, err = 0;

	if (n + 2 > sizeof(line))
		return fail(EINVAL);
	memcpy(line, cmd, n);
	line[n++] = '\n';
	fd = openat(ctx->mount_fd, path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return fail(rf_errno_of_write(errno));
	if (write(fd, line, n) != (ssize_t)n)
		err = rf_errno_of_write(errno ? errno : EIO);
	close(fd);
	if (err) {
		char dir[256];
		const char *slash = strrchr(path, '/');
		size_t dl = slash ? (size_t)(slash - path) : 0;
		if (dl >= sizeof(dir))
			dl = sizeof(dir) - 1;
		memcpy(dir, path, dl);
		dir[dl] = 0;
		log_error_file(ctx, dir, cmd);
		return fail(err);
	}
	return 0;
}

int rf_destroy(struct rf_context *ctx, const char *kind, uint32_t handle)
{
	char p[64];

	snprintf(p, sizeof(p), "%s/%u", kind, handle);
	if (unlinkat(ctx->mount_fd, p, AT_REMOVEDIR) < 0) {
		int err = rf_errno_of_write(errno);
		log_error_file(ctx, p, "destroy");
		return fail(err);
	}
	return 0;
}

const char *rf_kv(const char *text, const char *key)
{
	size_t kl = strlen(key);
	const char *p = text;

	while (p && *p) {
		while (*p == ' ' || *p == '\n' || *p == '\t')
			p++;
		if (!strncmp(p, key, kl) && p[kl] == '=')
			return p + kl + 1;
		p = strpbrk(p, " \n\t");
	}
	return NULL;
}

int rf_kv_u64(const char *text, const char *key, uint64_t *v)
{
	const char *s = rf_kv(text, key);
	char *end;

	if (!s)
		return ENOENT;
	errno = 0;
	*v = strtoull(s, &end, 0);
	if (end == s || errno)
		return EINVAL;
	return 0;
}

int rf_ring_map(int dirfd, const char *path, uint32_t kind, struct rf_ring *r)
{
	struct stat st;
	uint8_t *m;
	int fd, err;

	memset(r, 0, sizeof(*r));
	r->fd = -1;
	fd = openat(dirfd, path, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return rf_errno_of_write(errno);
	if (fstat(fd, &st) < 0 || st.st_size < RDMAFS_HEADER_SIZE) {
		close(fd);
		return EIO;
	}
	m = rf_mmap(st.st_size, fd);
	if (m == MAP_FAILED) {
		err = errno;
		close(fd);
		return err;
	}
	/* Read each field once: the header is shared memory. */
	uint32_t magic = rf_get32(m, RDMAFS_OFF_MAGIC), ver = rf_get32(m, RDMAFS_OFF_VERSION);
	uint32_t k = rf_get32(m, RDMAFS_OFF_KIND), ss = rf_get32(m, RDMAFS_OFF_SLOT_SIZE);
	uint32_t sc = rf_get32(m, RDMAFS_OFF_SLOT_COUNT), doff = rf_get32(m, RDMAFS_OFF_DATA_OFFSET);
	if (magic != RDMAFS_MAGIC || ver != RDMAFS_VERSION || k != kind || doff != RDMAFS_HEADER_SIZE ||
	    ss < RDMAFS_MIN_SLOT_SIZE || (ss & (ss - 1)) || !sc || (sc & (sc - 1)) ||
	    (uint64_t)ss * sc + RDMAFS_HEADER_SIZE > (uint64_t)st.st_size) {
		rf_log("%s: not a ring of kind %u (magic %#x version %u kind %u)", path, kind, magic, ver, k);
		rf_munmap(m, st.st_size);
		close(fd);
		return EIO;
	}
	r->base = m;
	r->maplen = st.st_size;
	r->fd = fd;
	r->slot_size = ss;
	r->slot_count = sc;
	r->mask = sc - 1;
	r->data = m + RDMAFS_HEADER_SIZE;
	r->prod = (uint32_t *)(m + RDMAFS_OFF_PRODUCER);
	r->cons = (uint32_t *)(m + RDMAFS_OFF_CONSUMER);
	r->flags = (uint32_t *)(m + RDMAFS_OFF_FLAGS);
	r->event = (uint32_t *)(m + RDMAFS_OFF_EVENT_SEQ);
	r->armed = (uint32_t *)(m + RDMAFS_OFF_ARMED);
	return 0;
}

void rf_ring_unmap(struct rf_ring *r)
{
	if (r->base)
		rf_munmap(r->base, r->maplen);
	if (r->fd >= 0)
		close(r->fd);
	r->base = NULL;
	r->fd = -1;
}
