/* Memory registration of the program's own memory.
 *
 * The device can only move bytes it can map, so a registration re-backs
 * the program's pages in place (DESIGN.md §6): the page-rounded range gets
 * a backing MR of the daemon's (in a PD of the library's own), its current
 * bytes are copied into that MR's memory, and the memory is mapped
 * MAP_SHARED|MAP_FIXED over the range, with each page's protection put
 * back. The program's pointer keeps working and now addresses the very
 * pages the engine reads and writes. The MR the program asked for is then
 * registered on the backing (share=H offset=N) with the program's address
 * as its iova and exactly its length and access, so the device checks the
 * program's range, not the rounded one.
 *
 * Registrations inside one re-backed range share it (a count); the last
 * deregistration puts private anonymous memory holding the current bytes
 * back over the range, so the buffer stays the program's.
 *
 * Documented side effects: a fork child shares re-backed pages unless
 * ibv_fork_init (or RDMAV_FORK_SAFE) asked for MADV_DONTFORK on them;
 * MADV_DONTNEED no longer zero-fills them; a write by another thread during
 * the copy of ibv_reg_mr can be lost. Memory that is already a shared
 * mapping (SysV shm, a shared file or memfd mapping) cannot be re-backed
 * without breaking its sharing, and is refused with EOPNOTSUPP. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "rdmafs.h"

/* Re-backing copies whole pages, which hold other objects of the program
 * too (heap neighbours, their allocator redzones under AddressSanitizer):
 * under ASan the copy must not be checked as the program's own access. */
#if defined(__SANITIZE_ADDRESS__)
__attribute__((no_sanitize("address"))) static void copy_pages(void *dst, const void *src, size_t len)
{
	volatile uint64_t *d = dst;
	const volatile uint64_t *s = src;

	for (size_t i = 0; i < len / 8; i++)
		d[i] = s[i];
}
#else
static void copy_pages(void *dst, const void *src, size_t len)
{
	memcpy(dst, src, len);
}
#endif

static bool fork_safe;
static bool fork_init_done;

/* The protection of each VMA of [base, end), in order, from
 * /proc/self/maps: what the pages get back after re-backing. */
struct vma {
	uintptr_t start, end;
	int prot;
	bool shared;
	bool huge; /* hugetlb: mapped and unmapped in whole huge pages only */
};

static int vmas_of(uintptr_t base, uintptr_t end, struct vma *out, int max, int *n)
{
	FILE *f = fopen("/proc/self/maps", "re");
	char line[512];
	uintptr_t covered = base;

	*n = 0;
	if (!f)
		return errno;
	while (fgets(line, sizeof(line), f)) {
		unsigned long s, e;
		char perms[8];
		if (sscanf(line, "%lx-%lx %7s", &s, &e, perms) != 3)
			continue;
		bool huge = strstr(line, "anon_hugepage") || strstr(line, "/hugepages");
		if (e <= base || s >= end)
			continue;
		if (s > covered || *n == max)
			break; /* a hole, or too fragmented */
		struct vma *v = &out[(*n)++];
		v->start = s < base ? base : s;
		v->end = e > end ? end : e;
		v->prot = (perms[0] == 'r' ? PROT_READ : 0) | (perms[1] == 'w' ? PROT_WRITE : 0) |
			  (perms[2] == 'x' ? PROT_EXEC : 0);
		v->shared = perms[3] == 's';
		v->huge = huge;
		covered = v->end;
	}
	fclose(f);
	return covered >= end ? 0 : EFAULT;
}

/* The page-rounded range of a registration; inside huge pages the range
 * grows to whole 2 MiB pages, the only unit in which a hugetlb mapping can
 * be replaced (the re-backed memory is then ordinary pages). */
static void round_range(uintptr_t a, size_t length, uintptr_t *base, uintptr_t *end)
{
	long ps = sysconf(_SC_PAGESIZE);
	const uintptr_t huge = 2u << 20;
	struct vma v[64];
	int n;

	*base = a & ~(uintptr_t)(ps - 1);
	*end = (a + length + ps - 1) & ~(uintptr_t)(ps - 1);
	if (vmas_of(*base, *end, v, 64, &n))
		return;
	for (int i = 0; i < n; i++)
		if (v[i].huge) {
			*base &= ~(huge - 1);
			*end = (*end + huge - 1) & ~(huge - 1);
			return;
		}
}

uint32_t rf_backing_pd(struct rf_context *ctx, int *err)
{
	/* one hidden PD per context, made on first use; ctx->lock held */
	if (!ctx->backing_pd) {
		*err = rf_transact(ctx, "pd", "", &ctx->backing_pd);
		if (*err)
			return 0;
	}
	return ctx->backing_pd;
}

static void put_prot(const struct vma *v, int n)
{
	for (int i = 0; i < n; i++)
		if (v[i].prot != (PROT_READ | PROT_WRITE))
			mprotect((void *)v[i].start, v[i].end - v[i].start, v[i].prot);
}

static bool inside_any(struct rf_extent **xs, int nx, uintptr_t s, uintptr_t e)
{
	for (int i = 0; i < nx; i++)
		if (s >= xs[i]->base && e <= xs[i]->base + xs[i]->len)
			return true;
	return false;
}

/* Re-back [base, base+len), which may cover the nold extents old (already
 * ours, shared mappings that are fine to replace): ctx->lock held. */
static struct rf_extent *extent_new(struct rf_context *ctx, uintptr_t base, size_t len, struct rf_extent **old,
				    int nold, int *err)
{
	struct vma v[64];
	int n;
	char req[128], path[64];
	struct rf_extent *x;
	void *tmp;
	int fd;

	if ((*err = vmas_of(base, base + len, v, 64, &n)))
		return NULL;
	for (int i = 0; i < n; i++)
		if (v[i].shared && !inside_any(old, nold, v[i].start, v[i].end)) {
			rf_log("reg_mr: %#lx-%#lx is a shared mapping; it cannot be re-backed", v[i].start, v[i].end);
			*err = EOPNOTSUPP;
			return NULL;
		}
	x = calloc(1, sizeof(*x));
	if (!x) {
		*err = ENOMEM;
		return NULL;
	}
	x->base = base;
	x->len = len;
	uint32_t pd = rf_backing_pd(ctx, err);
	if (!pd)
		goto fail;
	snprintf(req, sizeof(req), "pd=%u length=%zu iova=%lu access=local_write", pd, len, (unsigned long)base);
	if ((*err = rf_transact(ctx, "mr", req, &x->mr)))
		goto fail;
	snprintf(path, sizeof(path), "mr/%u/mem", x->mr);
	fd = openat(ctx->mount_fd, path, O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		*err = rf_errno_of_write(errno);
		goto fail_mr;
	}
	tmp = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (tmp == MAP_FAILED) {
		*err = errno;
		close(fd);
		goto fail_mr;
	}
	/* Pages the program cannot read (PROT_NONE, write-only) become
	 * readable for the copy. */
	for (int i = 0; i < n; i++)
		if (!(v[i].prot & PROT_READ))
			mprotect((void *)v[i].start, v[i].end - v[i].start, v[i].prot | PROT_READ);
	copy_pages(tmp, (void *)base, len);
	void *m = mmap((void *)base, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0);
	if (m == MAP_FAILED) {
		*err = errno;
		put_prot(v, n);
		munmap(tmp, len);
		close(fd);
		goto fail_mr;
	}
	munmap(tmp, len);
	close(fd);
	put_prot(v, n);
	x->rebacked = true;
	if (fork_safe) {
		madvise((void *)base, len, MADV_DONTFORK);
		x->dontfork = true;
	}
	x->next = ctx->extents;
	ctx->extents = x;
	return x;
fail_mr:
	rf_destroy(ctx, "mr", x->mr);
fail:
	free(x);
	return NULL;
}

static void unlist(struct rf_context *ctx, struct rf_extent *x)
{
	for (struct rf_extent **pp = &ctx->extents; *pp; pp = &(*pp)->next)
		if (*pp == x) {
			*pp = x->next;
			return;
		}
}

/* Put private memory with the current bytes back: ctx->lock held. */
static void extent_free(struct rf_context *ctx, struct rf_extent *x)
{
	struct vma v[64];
	int n = 0;

	unlist(ctx, x);
	if (x->rebacked && vmas_of(x->base, x->base + x->len, v, 64, &n) == 0) {
		void *tmp = mmap(NULL, x->len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (tmp != MAP_FAILED) {
			for (int i = 0; i < n; i++)
				if (!(v[i].prot & PROT_READ))
					mprotect((void *)v[i].start, v[i].end - v[i].start, v[i].prot | PROT_READ);
			copy_pages(tmp, (void *)x->base, x->len);
			if (mremap(tmp, x->len, x->len, MREMAP_MAYMOVE | MREMAP_FIXED, (void *)x->base) == MAP_FAILED)
				munmap(tmp, x->len);
			else
				put_prot(v, n);
			if (x->dontfork)
				madvise((void *)x->base, x->len, MADV_DONTFORK);
		}
	}
	rf_destroy(ctx, "mr", x->mr);
	free(x);
}

/* The extent for [base, base+len): one that holds the range, or a new one.
 * A range that overlaps registered extents without lying in one of them
 * (malloc'd buffers share pages) gets one new extent over the union; the
 * MRs of the old extents are moved onto it with a rereg, which keeps their
 * keys, and the old backings go. ctx->lock held. */
static struct rf_extent *extent_get(struct rf_context *ctx, uintptr_t base, size_t len, int *err)
{
	struct rf_extent *old[32];
	int nold = 0;
	uintptr_t lo = base, hi = base + len;

	for (struct rf_extent *x = ctx->extents; x; x = x->next) {
		if (base >= x->base && base + len <= x->base + x->len) {
			x->refs++;
			return x;
		}
		if (base < x->base + x->len && x->base < base + len) {
			if (nold == 32) {
				*err = ENOMEM;
				return NULL;
			}
			old[nold++] = x;
			lo = x->base < lo ? x->base : lo;
			hi = x->base + x->len > hi ? x->base + x->len : hi;
		}
	}
	struct rf_extent *nx = extent_new(ctx, lo, hi - lo, old, nold, err);
	if (!nx)
		return NULL;
	nx->refs = 1;
	for (int i = 0; i < nold; i++) {
		struct rf_extent *x = old[i];
		while (x->mrs) {
			struct rf_mr *m = x->mrs;
			char path[64], cmd[160];
			x->mrs = m->ext_next;
			snprintf(path, sizeof(path), "mr/%u/ctl", m->handle);
			snprintf(cmd, sizeof(cmd), "rereg share=%u offset=%lu length=%zu iova=%llu", nx->mr,
				 (unsigned long)((uintptr_t)m->mr.addr - nx->base), m->mr.length,
				 (unsigned long long)m->iova);
			if (rf_command(ctx, path, cmd))
				rf_log("reg_mr: moving mr %u onto the merged range: %s", m->handle, strerror(errno));
			m->ext = nx;
			m->ext_next = nx->mrs;
			nx->mrs = m;
		}
		nx->refs += x->refs;
		nx->dontfork |= x->dontfork;
		unlist(ctx, x);
		rf_destroy(ctx, "mr", x->mr);
		free(x);
	}
	return nx;
}

static void ext_link(struct rf_extent *x, struct rf_mr *m)
{
	m->ext = x;
	m->ext_next = x->mrs;
	x->mrs = m;
}

static void ext_unlink(struct rf_mr *m)
{
	if (!m->ext)
		return;
	for (struct rf_mr **pp = &m->ext->mrs; *pp; pp = &(*pp)->ext_next)
		if (*pp == m) {
			*pp = m->ext_next;
			break;
		}
}

static void extent_put(struct rf_context *ctx, struct rf_extent *x)
{
	if (--x->refs == 0)
		extent_free(ctx, x);
}

/* The access bits the device knows; the optional ones (relaxed ordering)
 * are hints a software device may ignore. */
#define RF_MR_ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | \
		      IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND)

static int check_access(unsigned int access)
{
	if (access & (IBV_ACCESS_ON_DEMAND | IBV_ACCESS_ZERO_BASED))
		return EOPNOTSUPP;
	if (access & ~(RF_MR_ACCESS | IBV_ACCESS_HUGETLB | IBV_ACCESS_OPTIONAL_RANGE | IBV_ACCESS_REMOTE_ATOMIC))
		return EINVAL;
	/* IBA 10.6.3.1: remote write or atomic needs local write */
	if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) && !(access & IBV_ACCESS_LOCAL_WRITE))
		return EINVAL;
	return 0;
}

static int reg(struct rf_context *ctx, struct rf_mr *m, struct ibv_pd *pd, void *addr, size_t length,
	       uint64_t iova, unsigned int access)
{
	uintptr_t a = (uintptr_t)addr, base, end;
	char req[256];
	uint64_t v;
	int err;

	if ((err = check_access(access)))
		return err;
	if (!addr || !length || a + length < a)
		return EINVAL;
	round_range(a, length, &base, &end);

	/* The lock is held throughout: a merge of extents (extent_get) moves
	 * every MR listed on the extents it replaces. */
	pthread_mutex_lock(&ctx->lock);
	struct rf_extent *x = extent_get(ctx, base, end - base, &err);
	if (!x)
		goto out;
	snprintf(req, sizeof(req), "pd=%u length=%zu iova=%llu access=%u share=%u offset=%lu", to_rpd(pd)->handle,
		 length, (unsigned long long)iova, access & RF_MR_ACCESS, x->mr, (unsigned long)(a - x->base));
	if ((err = rf_transact(ctx, "mr", req, &m->handle))) {
		extent_put(ctx, x);
		goto out;
	}
	char path[64], text[512];
	snprintf(path, sizeof(path), "mr/%u/attr", m->handle);
	if ((err = rf_read_file(ctx, path, text, sizeof(text))) == 0) {
		m->mr.lkey = rf_kv_u64(text, "lkey", &v) ? 0 : (uint32_t)v;
		m->mr.rkey = rf_kv_u64(text, "rkey", &v) ? 0 : (uint32_t)v;
	}
	if (err || !m->mr.lkey) {
		rf_destroy(ctx, "mr", m->handle);
		extent_put(ctx, x);
		err = err ? err : EIO;
		goto out;
	}
	m->mr.context = pd->context;
	m->mr.pd = pd;
	m->mr.addr = addr;
	m->mr.length = length;
	m->mr.handle = m->handle;
	m->iova = iova;
	ext_link(x, m);
out:
	pthread_mutex_unlock(&ctx->lock);
	return err;
}

static struct ibv_mr *reg_new(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova, unsigned int access)
{
	struct rf_mr *m = calloc(1, sizeof(*m));
	int err;

	if (!m) {
		errno = ENOMEM;
		return NULL;
	}
	err = reg(to_rctx(pd->context), m, pd, addr, length, iova, access);
	if (err) {
		free(m);
		errno = err;
		return NULL;
	}
	return &m->mr;
}

#undef ibv_reg_mr
struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access)
{
	return reg_new(pd, addr, length, (uintptr_t)addr, access);
}

#undef ibv_reg_mr_iova
struct ibv_mr *ibv_reg_mr_iova(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova, int access)
{
	return reg_new(pd, addr, length, iova, access);
}

struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova, unsigned int access)
{
	return reg_new(pd, addr, length, iova, access);
}

struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t length, uint64_t iova, int fd,
				 int access)
{
	(void)pd, (void)offset, (void)length, (void)iova, (void)fd, (void)access;
	errno = EOPNOTSUPP;
	return NULL;
}

static int unreg(struct rf_context *ctx, struct rf_mr *m)
{
	int err;

	pthread_mutex_lock(&ctx->lock);
	err = rf_destroy(ctx, "mr", m->handle);
	if (!err && !m->dm) {
		ext_unlink(m);
		extent_put(ctx, m->ext);
		m->ext = NULL;
	}
	pthread_mutex_unlock(&ctx->lock);
	return err;
}

int ibv_dereg_mr(struct ibv_mr *mr)
{
	struct rf_mr *m = to_rmr(mr);
	int err = unreg(to_rctx(mr->context), m);

	if (err)
		return err;
	free(m);
	return 0;
}

/* ibv_rereg_mr: mr/H/ctl's rereg changes the PD, the access or the memory
 * and keeps the keys, so a peer's rkey still reaches the MR. A new
 * translation is re-backed (or shares a re-backed range) first; the old
 * range is released after the daemon took the new one. */
int ibv_rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr, size_t length, int access)
{
	struct rf_mr *m = to_rmr(mr);
	struct rf_context *ctx = to_rctx(mr->context);
	struct rf_extent *ext = NULL;
	char cmd[256], path[64];
	int n, err;

	if (!flags || (flags & ~IBV_REREG_MR_FLAGS_SUPPORTED))
		return IBV_REREG_MR_ERR_INPUT;
	if ((flags & IBV_REREG_MR_CHANGE_TRANSLATION) && (!addr || !length || m->dm))
		return IBV_REREG_MR_ERR_INPUT;
	if ((flags & IBV_REREG_MR_CHANGE_PD) && (!pd || pd->context != mr->context))
		return IBV_REREG_MR_ERR_INPUT;
	if ((flags & IBV_REREG_MR_CHANGE_ACCESS) && check_access(access)) {
		errno = check_access(access);
		return IBV_REREG_MR_ERR_INPUT;
	}
	pthread_mutex_lock(&ctx->lock);
	n = snprintf(cmd, sizeof(cmd), "rereg");
	if (flags & IBV_REREG_MR_CHANGE_PD)
		n += snprintf(cmd + n, sizeof(cmd) - n, " pd=%u", to_rpd(pd)->handle);
	if (flags & IBV_REREG_MR_CHANGE_ACCESS)
		n += snprintf(cmd + n, sizeof(cmd) - n, " access=%u", access & RF_MR_ACCESS);
	if (flags & IBV_REREG_MR_CHANGE_TRANSLATION) {
		uintptr_t a = (uintptr_t)addr, base, end;
		round_range(a, length, &base, &end);
		ext = extent_get(ctx, base, end - base, &err);
		if (!ext) {
			pthread_mutex_unlock(&ctx->lock);
			errno = err;
			return IBV_REREG_MR_ERR_CMD;
		}
		snprintf(cmd + n, sizeof(cmd) - n, " share=%u offset=%lu length=%zu iova=%lu", ext->mr,
			 (unsigned long)(a - ext->base), length, (unsigned long)a);
	}
	snprintf(path, sizeof(path), "mr/%u/ctl", m->handle);
	if ((err = rf_command(ctx, path, cmd))) {
		if (ext)
			extent_put(ctx, ext);
		pthread_mutex_unlock(&ctx->lock);
		errno = err;
		return IBV_REREG_MR_ERR_CMD;
	}
	if (flags & IBV_REREG_MR_CHANGE_PD)
		mr->pd = pd;
	if (ext) {
		/* m->ext is read only now: a merge in extent_get may have moved m */
		ext_unlink(m);
		extent_put(ctx, m->ext);
		ext_link(ext, m);
		mr->addr = addr;
		mr->length = length;
		m->iova = (uintptr_t)addr;
	}
	pthread_mutex_unlock(&ctx->lock);
	return 0;
}

int ibv_fork_init(void)
{
	fork_safe = true;
	fork_init_done = true;
	return 0;
}

enum ibv_fork_status ibv_is_fork_initialized(void)
{
	return fork_init_done ? IBV_FORK_ENABLED : IBV_FORK_DISABLED;
}

__attribute__((constructor)) static void rf_fork_env(void)
{
	if (getenv("RDMAV_FORK_SAFE") || getenv("IBV_FORK_SAFE"))
		ibv_fork_init();
}

int ibv_dontfork_range(void *base, size_t size)
{
	return fork_safe ? madvise(base, size, MADV_DONTFORK) ? errno : 0 : 0;
}

int ibv_dofork_range(void *base, size_t size)
{
	return fork_safe ? madvise(base, size, MADV_DOFORK) ? errno : 0 : 0;
}
