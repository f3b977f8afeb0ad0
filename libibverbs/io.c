/* The control path: every verb that is not on the data path is a file
 * operation on the mount, exactly as a shell user would do it
 * (docs/file-formats.md), made by mountio.c, which librdmacm shares. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mountio.h"
#include "rdmafs.h"

/* The mount as mountio sees it for ctx. */
static struct mio mio_of(const struct rf_context *ctx)
{
	return (struct mio){.mount_fd = ctx->mount_fd, .lease_fd = ctx->lease_fd, .gone = EIO, .tag = "rdmafs"};
}

void rf_log(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	mio_vlog("rdmafs", fmt, ap);
	va_end(ap);
}

/* A device that went away (daemon died, unmounted) answers ENOTCONN or
 * ECONNABORTED; libibverbs says EIO for a dead device. */
int rf_errno_of_write(int err)
{
	struct mio m = {.gone = EIO};

	return mio_errno(&m, err);
}

int rf_read_file(struct rf_context *ctx, const char *path, char *buf, size_t len)
{
	struct mio m = mio_of(ctx);

	return mio_read(&m, path, buf, len);
}

int rf_transact(struct rf_context *ctx, const char *kind, const char *req, uint32_t *handle)
{
	struct mio m = mio_of(ctx);
	char path[64];

	snprintf(path, sizeof(path), "%s/new", kind);
	return mio_create(&m, path, req, kind, handle);
}

int rf_command(struct rf_context *ctx, const char *path, const char *cmd)
{
	struct mio m = mio_of(ctx);
	int err = mio_write(&m, path, cmd);

	if (err) {
		char dir[256];
		const char *slash = strrchr(path, '/');
		size_t dl = slash ? (size_t)(slash - path) : 0;
		if (dl >= sizeof(dir))
			dl = sizeof(dir) - 1;
		memcpy(dir, path, dl);
		dir[dl] = 0;
		mio_reason(&m, dir, cmd);
		errno = err;
	}
	return err;
}

int rf_destroy(struct rf_context *ctx, const char *kind, uint32_t handle)
{
	struct mio m = mio_of(ctx);
	char p[64];

	snprintf(p, sizeof(p), "%s/%u", kind, handle);
	return mio_rmdir(&m, p);
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
