/* Device memory (ibv_alloc_dm): memory the device holds apart from any
 * program's pages, as a NIC's on-chip memory. Here it is a daemon MR of the
 * context's own (in the PD of the backing MRs, zero-based) mapped into the
 * program; ibv_memcpy_to_dm/from_dm copy through the mapping, and
 * ibv_reg_dm_mr registers a zero-based MR on it (share=H offset=N), so its
 * addresses are offsets into the device memory. A context may hold up to
 * max_dm_size bytes; copies are in 4-byte units, as on mlx5. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "rdmafs.h"

struct rf_dm {
	struct ibv_dm dm;
	uint32_t mr;   /* the daemon MR that holds it */
	uint8_t *mem;  /* its mapping */
	size_t length; /* what was asked for */
	size_t maplen;
	bool imported; /* ibv_import_dm: not counted in the context's dm_bytes */
};

static int dm_to(struct ibv_dm *d, uint64_t off, const void *src, size_t len)
{
	struct rf_dm *dm = (struct rf_dm *)d;

	if ((off | len) & 3 || off > dm->length || len > dm->length - off)
		return EINVAL;
	memcpy(dm->mem + off, src, len);
	return 0;
}

static int dm_from(void *dst, struct ibv_dm *d, uint64_t off, size_t len)
{
	struct rf_dm *dm = (struct rf_dm *)d;

	if ((off | len) & 3 || off > dm->length || len > dm->length - off)
		return EINVAL;
	memcpy(dst, dm->mem + off, len);
	return 0;
}

struct ibv_dm *rf_alloc_dm(struct ibv_context *context, struct ibv_alloc_dm_attr *attr)
{
	struct rf_context *ctx = to_rctx(context);
	long ps = sysconf(_SC_PAGESIZE);
	char req[128], path[64];
	struct rf_dm *dm;
	int err = 0, fd;

	if (attr->comp_mask || attr->log_align_req > 12) {
		errno = EINVAL;
		return NULL;
	}
	pthread_mutex_lock(&ctx->lock);
	if (!attr->length || attr->length > RF_MAX_DM_SIZE - ctx->dm_bytes) {
		pthread_mutex_unlock(&ctx->lock);
		errno = ENOMEM;
		return NULL;
	}
	dm = calloc(1, sizeof(*dm));
	if (!dm) {
		err = ENOMEM;
		goto out;
	}
	dm->length = attr->length;
	dm->maplen = (attr->length + ps - 1) & ~(size_t)(ps - 1);
	uint32_t pd = rf_backing_pd(ctx, &err);
	if (!pd)
		goto fail;
	snprintf(req, sizeof(req), RDMAFS_KEQ(PD) "%u " RDMAFS_KEQ(LENGTH) "%zu " RDMAFS_KEQ(IOVA) "0 "
		 RDMAFS_KEQ(ACCESS) "local_write", pd, dm->maplen);
	if ((err = rf_transact(ctx, "mr", req, &dm->mr)))
		goto fail;
	snprintf(path, sizeof(path), "mr/%u/mem", dm->mr);
	fd = openat(ctx->mount_fd, path, O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		err = rf_errno_of_write(errno);
		goto fail_mr;
	}
	dm->mem = rf_mmap(dm->maplen, fd);
	close(fd);
	if (dm->mem == MAP_FAILED) {
		err = errno;
		goto fail_mr;
	}
	dm->dm.context = context;
	dm->dm.memcpy_to_dm = dm_to;
	dm->dm.memcpy_from_dm = dm_from;
	dm->dm.handle = dm->mr;
	ctx->dm_bytes += dm->length;
	pthread_mutex_unlock(&ctx->lock);
	return &dm->dm;
fail_mr:
	rf_destroy(ctx, "mr", dm->mr);
fail:
	free(dm);
out:
	pthread_mutex_unlock(&ctx->lock);
	errno = err;
	return NULL;
}

int rf_free_dm(struct ibv_dm *d)
{
	struct rf_dm *dm = (struct rf_dm *)d;
	struct rf_context *ctx = to_rctx(d->context);
	int err;

	pthread_mutex_lock(&ctx->lock);
	/* EBUSY while MRs are registered on it, as the daemon says */
	if ((err = rf_destroy(ctx, "mr", dm->mr))) {
		pthread_mutex_unlock(&ctx->lock);
		return err;
	}
	if (!dm->imported)
		ctx->dm_bytes -= dm->length;
	pthread_mutex_unlock(&ctx->lock);
	rf_munmap(dm->mem, dm->maplen);
	free(dm);
	return 0;
}

struct ibv_mr *rf_reg_dm_mr(struct ibv_pd *pd, struct ibv_dm *d, uint64_t offset, size_t length,
			    unsigned int access)
{
	struct rf_dm *dm = (struct rf_dm *)d;
	struct rf_context *ctx = to_rctx(pd->context);
	char req[192], path[64], text[512];
	struct rf_mr *m;
	uint64_t v;
	int err;

	if (!(access & IBV_ACCESS_ZERO_BASED) || offset > dm->length || length > dm->length - offset ||
	    (access & ~(IBV_ACCESS_ZERO_BASED | IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_OPTIONAL_RANGE))) {
		errno = EINVAL;
		return NULL;
	}
	m = calloc(1, sizeof(*m));
	if (!m) {
		errno = ENOMEM;
		return NULL;
	}
	snprintf(req, sizeof(req), RDMAFS_KEQ(PD) "%u " RDMAFS_KEQ(LENGTH) "%zu " RDMAFS_KEQ(IOVA) "0 "
		 RDMAFS_KEQ(ACCESS) "%u " RDMAFS_KEQ(SHARE) "%u " RDMAFS_KEQ(OFFSET) "%llu", to_rpd(pd)->handle,
		 length, access & (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
				   IBV_ACCESS_REMOTE_ATOMIC),
		 dm->mr, (unsigned long long)offset);
	if ((err = rf_transact(ctx, "mr", req, &m->handle)))
		goto fail;
	snprintf(path, sizeof(path), "mr/%u/attr", m->handle);
	if ((err = rf_read_file(ctx, path, text, sizeof(text))) || rf_kv_u64(text, RDMAFS_KEY_LKEY, &v)) {
		rf_destroy(ctx, "mr", m->handle);
		err = err ? err : EIO;
		goto fail;
	}
	m->mr.lkey = v;
	m->mr.rkey = rf_kv_u64(text, RDMAFS_KEY_RKEY, &v) ? 0 : v;
	m->mr.context = pd->context;
	m->mr.pd = pd;
	m->mr.addr = (void *)(uintptr_t)offset;
	m->mr.length = length;
	m->mr.handle = m->handle;
	m->dm = true;
	return &m->mr;
fail:
	free(m);
	errno = err;
	return NULL;
}

/* ibv_import_dm: device memory dm_handle (its ibv_dm.handle, the daemon MR
 * that holds it) of a context on the same command fd, mapped again here:
 * both mappings are the same memory. The MR's attr and mem are the
 * owner's alone (0600): another uid's is EACCES. ibv_free_dm frees it in
 * the daemon; ibv_unimport_dm only unmaps it here. */
struct ibv_dm *ibv_import_dm(struct ibv_context *context, uint32_t dm_handle)
{
	struct rf_context *ctx = to_rctx(context);
	long ps = sysconf(_SC_PAGESIZE);
	char path[64], text[512];
	struct rf_dm *dm;
	uint64_t len = 0;
	int err, fd;

	snprintf(path, sizeof(path), "mr/%u/attr", dm_handle);
	if ((err = rf_read_file(ctx, path, text, sizeof(text))))
		goto fail;
	if (rf_kv_u64(text, RDMAFS_KEY_LENGTH, &len) || !len || len > RF_MAX_DM_SIZE) {
		err = EINVAL;
		goto fail;
	}
	if (!(dm = calloc(1, sizeof(*dm)))) {
		err = ENOMEM;
		goto fail;
	}
	dm->mr = dm_handle;
	dm->length = len;
	dm->maplen = (len + ps - 1) & ~(size_t)(ps - 1);
	dm->imported = true;
	snprintf(path, sizeof(path), "mr/%u/mem", dm_handle);
	fd = openat(ctx->mount_fd, path, O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		err = rf_errno_of_write(errno);
		free(dm);
		goto fail;
	}
	dm->mem = rf_mmap(dm->maplen, fd);
	close(fd);
	if (dm->mem == MAP_FAILED) {
		err = errno;
		free(dm);
		goto fail;
	}
	dm->dm.context = context;
	dm->dm.memcpy_to_dm = dm_to;
	dm->dm.memcpy_from_dm = dm_from;
	dm->dm.handle = dm_handle;
	return &dm->dm;
fail:
	errno = err;
	return NULL;
}

void ibv_unimport_dm(struct ibv_dm *d)
{
	struct rf_dm *dm = (struct rf_dm *)d;

	rf_munmap(dm->mem, dm->maplen);
	free(dm);
}
