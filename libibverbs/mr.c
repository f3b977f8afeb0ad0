/* Memory registration: the verbs over mem.c, which makes the program's
 * memory reachable by the daemon (shared memory as it is, private memory
 * re-backed into the library's shadow) and checks it against the mapping.
 * The daemon maps the same pages from the program's mappings (mr/new
 * addr=A), so an MR is exactly the program's range: its address as iova,
 * its length and access.
 *
 * On-demand paging (IBV_ACCESS_ON_DEMAND) registers nothing ahead: the
 * daemon reaches the pages through the program's address space when the
 * device touches them (mr/new ... access=...,on_demand), so nothing is
 * re-backed, pinned or checked before use; an unmapped page then fails the
 * work request as a NIC does. addr NULL with length SIZE_MAX is the
 * implicit MR over the whole address space. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "rdmafs.h"

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

/* The access bits the device knows; the optional ones (relaxed ordering)
 * are hints a software device may ignore. */
#define RF_MR_ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | \
		      IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND)

static int check_access(unsigned int access)
{
	if (access & IBV_ACCESS_ZERO_BASED)
		return EOPNOTSUPP;
	if (access & ~(RF_MR_ACCESS | IBV_ACCESS_HUGETLB | IBV_ACCESS_OPTIONAL_RANGE | IBV_ACCESS_ON_DEMAND))
		return EINVAL;
	/* IBA 10.6.3.1: remote write or atomic needs local write */
	if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) && !(access & IBV_ACCESS_LOCAL_WRITE))
		return EINVAL;
	return 0;
}

/* ib_access_writable: the kernel pins such memory for writing. */
static bool writable(unsigned int access)
{
	return access & (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND);
}

/* The daemon's access word for access: the bits it knows, on_demand (64,
 * IBV_ACCESS_ON_DEMAND) among them. */
static unsigned int access_word(unsigned int access) { return access & (RF_MR_ACCESS | IBV_ACCESS_ON_DEMAND); }

/* The implicit on-demand MR: all of the address space. */
static bool implicit(void *addr, size_t length) { return !addr && length == SIZE_MAX; }

static int reg(struct rf_context *ctx, struct rf_mr *m, struct ibv_pd *pd, void *addr, size_t length,
	       uint64_t iova, unsigned int access)
{
	uintptr_t a = (uintptr_t)addr;
	char req[256];
	uint64_t v;
	int err;

	if ((err = check_access(access)))
		return err;
	if (implicit(addr, length)) {
		if (!(access & IBV_ACCESS_ON_DEMAND))
			return EINVAL;
		snprintf(req, sizeof(req), RDMAFS_KEQ(PD) "%u " RDMAFS_KEQ(IMPLICIT) "1 "
			 RDMAFS_KEQ(ACCESS) "%u", to_rpd(pd)->handle, access_word(access));
	} else {
		if (!addr || !length || a + length < a)
			return EINVAL;
		if (!(access & IBV_ACCESS_ON_DEMAND) && (err = rf_mem_pin(a, length, writable(access), &m->pin)))
			return err;
		snprintf(req, sizeof(req), RDMAFS_KEQ(PD) "%u " RDMAFS_KEQ(ADDR) "%lu "
			 RDMAFS_KEQ(LENGTH) "%zu " RDMAFS_KEQ(IOVA) "%llu " RDMAFS_KEQ(ACCESS) "%u",
			 to_rpd(pd)->handle, (unsigned long)a, length, (unsigned long long)iova, access_word(access));
	}
	if ((err = rf_transact(ctx, "mr", req, &m->handle))) {
		rf_mem_unpin(&m->pin);
		return err;
	}
	char path[64], text[512];
	snprintf(path, sizeof(path), "mr/%u/attr", m->handle);
	if ((err = rf_read_file(ctx, path, text, sizeof(text))) == 0) {
		m->mr.lkey = rf_kv_u64(text, RDMAFS_KEY_LKEY, &v) ? 0 : (uint32_t)v;
		m->mr.rkey = rf_kv_u64(text, RDMAFS_KEY_RKEY, &v) ? 0 : (uint32_t)v;
	}
	if (err || !m->mr.lkey) {
		rf_destroy(ctx, "mr", m->handle);
		rf_mem_unpin(&m->pin);
		return err ? err : EIO;
	}
	m->mr.context = pd->context;
	m->mr.pd = pd;
	m->mr.addr = addr;
	m->mr.length = length;
	m->mr.handle = m->handle;
	m->iova = iova;
	m->access = access;
	return 0;
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
	int err = rf_destroy(ctx, "mr", m->handle);

	/* the daemon no longer reaches the pages: they may change backing */
	if (!err)
		rf_mem_unpin(&m->pin);
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

/* access= of an MR's attr: the names README gives, comma-separated. */
static unsigned int access_of(const char *text)
{
	static const struct {
		const char *name;
		unsigned int bit;
	} names[] = {
		{"local_write", IBV_ACCESS_LOCAL_WRITE},   {"remote_write", IBV_ACCESS_REMOTE_WRITE},
		{"remote_read", IBV_ACCESS_REMOTE_READ},   {"remote_atomic", IBV_ACCESS_REMOTE_ATOMIC},
		{"mw_bind", IBV_ACCESS_MW_BIND},           {"on_demand", IBV_ACCESS_ON_DEMAND},
		{"zero_based", IBV_ACCESS_ZERO_BASED},
	};
	const char *s = rf_kv(text, RDMAFS_KEY_ACCESS);
	unsigned int a = 0;

	while (s && *s && *s != '\n') {
		size_t n = strcspn(s, ",\n");
		for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
			if (strlen(names[i].name) == n && !strncmp(s, names[i].name, n))
				a |= names[i].bit;
		s += n;
		if (*s == ',')
			s++;
	}
	return a;
}

/* ibv_import_mr: MR mr_handle, made by a context on the same command fd
 * (or by anyone of the caller's uid), under pd: keys, length, access and
 * addr (its iova; rdma-core leaves it NULL) from the daemon's
 * attr, which is the owner's alone (0600): another uid's MR is EACCES. The
 * pages stay the registering process's; nothing is pinned here.
 * ibv_dereg_mr destroys the MR in the daemon, ibv_unimport_mr frees only
 * the wrapper. */
struct ibv_mr *ibv_import_mr(struct ibv_pd *pd, uint32_t mr_handle)
{
	struct rf_context *ctx = to_rctx(pd->context);
	char path[64], text[512];
	struct rf_mr *m;
	uint64_t lkey, rkey = 0, len = 0, iova = 0;
	int err;

	snprintf(path, sizeof(path), "mr/%u/attr", mr_handle);
	if ((err = rf_read_file(ctx, path, text, sizeof(text)))) {
		errno = err;
		return NULL;
	}
	if (rf_kv_u64(text, RDMAFS_KEY_LKEY, &lkey)) {
		errno = EIO;
		return NULL;
	}
	rf_kv_u64(text, RDMAFS_KEY_RKEY, &rkey);
	rf_kv_u64(text, RDMAFS_KEY_LENGTH, &len);
	rf_kv_u64(text, RDMAFS_KEY_IOVA, &iova);
	if (!(m = calloc(1, sizeof(*m)))) {
		errno = ENOMEM;
		return NULL;
	}
	m->handle = mr_handle;
	m->iova = iova;
	m->access = access_of(text);
	m->mr.context = pd->context;
	m->mr.pd = pd;
	m->mr.addr = (void *)(uintptr_t)iova;
	m->mr.length = len;
	m->mr.handle = mr_handle;
	m->mr.lkey = (uint32_t)lkey;
	m->mr.rkey = (uint32_t)rkey;
	return &m->mr;
}

void ibv_unimport_mr(struct ibv_mr *mr)
{
	free(to_rmr(mr));
}

/* ibv_rereg_mr: mr/H/ctl's rereg changes the PD, the access or the memory
 * and keeps the keys, so a peer's rkey still reaches the MR. A new
 * translation is pinned first and the old one released after the daemon
 * took the new one. */
int ibv_rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr, size_t length, int access)
{
	struct rf_mr *m = to_rmr(mr);
	struct rf_context *ctx = to_rctx(mr->context);
	struct rf_pin pin = {0};
	unsigned int acc = flags & IBV_REREG_MR_CHANGE_ACCESS ? (unsigned int)access : m->access;
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
	if ((acc ^ m->access) & IBV_ACCESS_ON_DEMAND) {
		/* pinned and on-demand memory are different registrations */
		errno = EINVAL;
		return IBV_REREG_MR_ERR_INPUT;
	}
	n = snprintf(cmd, sizeof(cmd), "rereg");
	if (flags & IBV_REREG_MR_CHANGE_PD)
		n += snprintf(cmd + n, sizeof(cmd) - n, " " RDMAFS_KEQ(PD) "%u", to_rpd(pd)->handle);
	if (flags & IBV_REREG_MR_CHANGE_ACCESS)
		n += snprintf(cmd + n, sizeof(cmd) - n, " " RDMAFS_KEQ(ACCESS) "%u", access_word(acc));
	if (flags & IBV_REREG_MR_CHANGE_TRANSLATION) {
		uintptr_t a = (uintptr_t)addr;
		if (a + length < a) {
			errno = EINVAL;
			return IBV_REREG_MR_ERR_INPUT;
		}
		if (!(acc & IBV_ACCESS_ON_DEMAND) && (err = rf_mem_pin(a, length, writable(acc), &pin))) {
			errno = err;
			return IBV_REREG_MR_ERR_CMD;
		}
		snprintf(cmd + n, sizeof(cmd) - n, " " RDMAFS_KEQ(ADDR) "%lu " RDMAFS_KEQ(LENGTH) "%zu "
			 RDMAFS_KEQ(IOVA) "%lu", (unsigned long)a, length,
			 (unsigned long)a);
	} else if ((flags & IBV_REREG_MR_CHANGE_ACCESS) && writable(acc) && !writable(m->access) && m->pin.n &&
		   !m->dm) {
		/* pages pinned for reading are pinned again for writing,
		 * which checks that the program may write them */
		if ((err = rf_mem_pin((uintptr_t)mr->addr, mr->length, true, &pin))) {
			errno = err;
			return IBV_REREG_MR_ERR_CMD;
		}
		snprintf(cmd + n, sizeof(cmd) - n, " " RDMAFS_KEQ(ADDR) "%lu " RDMAFS_KEQ(LENGTH) "%zu "
			 RDMAFS_KEQ(IOVA) "%llu", (unsigned long)mr->addr,
			 mr->length, (unsigned long long)m->iova);
	}
	snprintf(path, sizeof(path), "mr/%u/ctl", m->handle);
	if ((err = rf_command(ctx, path, cmd))) {
		rf_mem_unpin(&pin);
		errno = err;
		return IBV_REREG_MR_ERR_CMD;
	}
	if (flags & IBV_REREG_MR_CHANGE_PD)
		mr->pd = pd;
	m->access = acc;
	if (pin.n || (flags & IBV_REREG_MR_CHANGE_TRANSLATION)) {
		rf_mem_unpin(&m->pin);
		m->pin = pin;
	}
	if (flags & IBV_REREG_MR_CHANGE_TRANSLATION) {
		mr->addr = addr;
		mr->length = length;
		m->iova = (uintptr_t)addr;
	}
	return 0;
}

/* ibv_advise_mr: prefetching is a hint. The daemon reaches an on-demand
 * MR's pages when the device touches them, faulting them in then, so
 * there is nothing to do ahead; the request is checked as the kernel
 * checks it. */
int rf_advise_mr(struct ibv_pd *pd, enum ibv_advise_mr_advice advice, uint32_t flags, struct ibv_sge *sg_list,
		 uint32_t num_sge)
{
	(void)pd;
	if (advice > IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT || (flags & ~(uint32_t)IBV_ADVISE_MR_FLAG_FLUSH) ||
	    !num_sge || !sg_list)
		return EINVAL;
	return 0;
}

/* Fork needs no preparation: a child gets the registered private memory
 * as private memory of its own (mem.c), as the kernel gives a child
 * copies of pinned anonymous pages since Linux 5.13 (rdma-core then
 * reports IBV_FORK_UNNEEDED too). The range calls keep their madvise
 * meaning for programs that ask for it. */
int ibv_fork_init(void) { return 0; }

enum ibv_fork_status ibv_is_fork_initialized(void) { return IBV_FORK_UNNEEDED; }

int ibv_dontfork_range(void *base, size_t size)
{
	return syscall(SYS_madvise, base, size, MADV_DONTFORK) ? errno : 0;
}

int ibv_dofork_range(void *base, size_t size)
{
	return syscall(SYS_madvise, base, size, MADV_DOFORK) ? errno : 0;
}
