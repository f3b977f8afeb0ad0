/* The program's memory as the device sees it (DESIGN.md §6).
 *
 * The daemon reaches a registration through the program's own mappings:
 * every shared mapping has a file behind it (/proc/PID/map_files), which
 * the daemon maps at the same offset, so program, device and every other
 * process sharing the memory see the same pages. Shared memory (MAP_SHARED
 * anonymous or file, memfd, SysV shm, hugetlbfs, /dev/shm) is registered
 * as it is and never touched.
 *
 * Private memory (heap, stack, private mmap) has no file. A registration
 * re-backs its pages once into a "shadow": a sparse memfd of the library's
 * own in which each page's offset is its address. The private pages are
 * copied into the shadow and the shadow mapped MAP_SHARED|MAP_FIXED over
 * them, with their protection. Because a page's place in the shadow is
 * its address, a later registration that meets an already re-backed page
 * uses it as it is: no page the device can reach is ever copied again or
 * changes its backing while any MR covers it. While the copy runs, the
 * range is write-protected with userfaultfd, so a thread that stores into
 * it waits for the new mapping and stores there: no store is lost.
 *
 * When the last registration over a re-backed page goes, the page is put
 * back as private memory holding its current bytes (write-protected the
 * same way), and its shadow page is freed. A shadow page still covered
 * that the program unmapped or re-mapped meanwhile (a heap trimmed by
 * glibc, then regrown) is told apart by the mapping itself: a page is
 * re-backed exactly when its mapping is the shadow at offset == address.
 * A fresh private page where a covered shadow page used to be is re-backed
 * into another shadow, so the old MR keeps its pages, as a NIC would.
 *
 * Every mapping call here is a raw system call whose result address is
 * checked: an interposed mmap/mremap hook (UCX's, Open MPI's patcher)
 * neither sees the library's remapping as the program freeing memory nor
 * changes its arguments.
 *
 * Fork: a child gets the registered private memory as private memory (a
 * copy taken in the child right after fork, as the kernel copies pinned
 * anonymous pages for a child since Linux 5.13), so ibv_fork_init is not
 * needed and reports IBV_FORK_UNNEEDED. Shared memory stays shared.
 *
 * Lock: one process-wide mutex (memory is the process's, not a context's:
 * two contexts, or two devices, register the same pages). Between write-
 * protecting a range and mapping over it nothing here allocates or takes
 * a lock (a thread blocked on the protection may hold the allocator's),
 * and the thread runs on a stack of the library's own (the window, below:
 * its own stack may be in the range). */
#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <linux/userfaultfd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <ucontext.h>
#include <unistd.h>

#include "rdmafs.h"

#ifndef UFFD_FEATURE_WP_UNPOPULATED
#define UFFD_FEATURE_WP_UNPOPULATED (1 << 13)
#endif
#ifndef MFD_HUGETLB
#define MFD_HUGETLB 0x0004U
#endif

#define HUGE_SZ ((uintptr_t)2 << 20)

/* PROCMAP_QUERY (Linux 6.11): one VMA of /proc/self/maps per ioctl. */
struct rf_procmap_query {
	uint64_t size, query_flags, query_addr;
	uint64_t vma_start, vma_end, vma_flags, vma_page_size, vma_offset, inode;
	uint32_t dev_major, dev_minor, vma_name_size, build_id_size;
	uint64_t vma_name_addr, build_id_addr;
};
#define RF_PROCMAP_QUERY _IOWR('f', 17, struct rf_procmap_query)
#define RF_Q_COVERING_OR_NEXT 0x10

struct vma {
	uintptr_t start, end;
	int prot;
	bool shared;
	uint64_t off, ino;
	dev_t dev;
	uintptr_t pgsz;
};

struct shadow {
	int fd;
	bool huge;
	uint64_t ino;
	dev_t dev;
	uint64_t size;
};

/* A span of a shadow's pages and how many registrations cover it; sorted
 * by (shadow, start), disjoint. */
struct span {
	uintptr_t s, e;
	int k, n;
};

#define MAX_SHADOWS 16

static pthread_mutex_t mem_lock = PTHREAD_MUTEX_INITIALIZER;
static struct shadow shadows[MAX_SHADOWS];
static int nshadows;
static struct span *spans;
static int nspans, capspans;
static int maps_fd = -1;
static pid_t maps_pid;
static bool no_query; /* PROCMAP_QUERY unknown: parse the text */
static bool wp_warned;

static uintptr_t page_size(void)
{
	static uintptr_t ps;
	if (!ps)
		ps = (uintptr_t)sysconf(_SC_PAGESIZE);
	return ps;
}

/* Raw system calls: no hook sees them (the library's ring and device
 * memory mappings use them too: rf_mmap, rf_munmap). */
static void *sys_mmap(void *a, size_t len, int prot, int flags, int fd, off_t off)
{
	return (void *)syscall(SYS_mmap, a, len, prot, flags, fd, off);
}
static int sys_munmap(void *a, size_t len) { return (int)syscall(SYS_munmap, a, len); }
void *rf_mmap(size_t len, int fd) { return sys_mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0); }
int rf_munmap(void *a, size_t len) { return sys_munmap(a, len); }
static void *sys_mremap(void *old, size_t len, void *new)
{
	return (void *)syscall(SYS_mremap, old, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, new);
}
static int sys_mprotect(void *a, size_t len, int prot) { return (int)syscall(SYS_mprotect, a, len, prot); }

/* Whole transfers between the shadow and memory, looping over short ones. */
static int shadow_io(int write, int fd, void *buf, size_t len, uint64_t off)
{
	char *p = buf;
	while (len) {
		long n = syscall(write ? SYS_pwrite64 : SYS_pread64, fd, p, len, off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? errno : EIO;
		p += n, off += (uint64_t)n, len -= (size_t)n;
	}
	return 0;
}

static int prot_of(const char *perms)
{
	return (perms[0] == 'r' ? PROT_READ : 0) | (perms[1] == 'w' ? PROT_WRITE : 0) |
	       (perms[2] == 'x' ? PROT_EXEC : 0);
}

/* The text of /proc/self/maps, for kernels before PROCMAP_QUERY. */
static int vma_text(uintptr_t addr, struct vma *v)
{
	FILE *f = fopen("/proc/self/maps", "re");
	char line[512];
	int err = ENOENT;

	if (!f)
		return errno;
	while (fgets(line, sizeof(line), f)) {
		unsigned long s, e, off, ino;
		unsigned maj, min;
		char perms[8];
		if (sscanf(line, "%lx-%lx %7s %lx %x:%x %lu", &s, &e, perms, &off, &maj, &min, &ino) != 7)
			continue;
		if (e <= addr)
			continue;
		*v = (struct vma){.start = s, .end = e, .prot = prot_of(perms), .shared = perms[3] == 's',
				  .off = off, .ino = ino, .dev = makedev(maj, min), .pgsz = page_size()};
		if (strstr(line, "anon_hugepage") || strstr(line, "/hugepages") || strstr(line, "hugetlb"))
			v->pgsz = HUGE_SZ;
		err = 0;
		break;
	}
	fclose(f);
	return err;
}

/* The VMA that covers addr, or the next one above it: 0, ENOENT, or an
 * errno. mem_lock held. */
static int vma_at(uintptr_t addr, struct vma *v)
{
	if (no_query)
		return vma_text(addr, v);
	if (maps_fd < 0 || maps_pid != getpid()) {
		if (maps_fd >= 0)
			close(maps_fd);
		maps_fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
		maps_pid = getpid();
		if (maps_fd < 0)
			return errno;
	}
	struct rf_procmap_query q = {.size = sizeof(q), .query_flags = RF_Q_COVERING_OR_NEXT, .query_addr = addr};
	if (ioctl(maps_fd, RF_PROCMAP_QUERY, &q)) {
		if (errno == ENOTTY || errno == EINVAL) {
			no_query = true;
			return vma_text(addr, v);
		}
		return errno;
	}
	*v = (struct vma){.start = q.vma_start, .end = q.vma_end, .shared = q.vma_flags & 8, .off = q.vma_offset,
			  .ino = q.inode, .dev = makedev(q.dev_major, q.dev_minor), .pgsz = q.vma_page_size};
	v->prot = (q.vma_flags & 1 ? PROT_READ : 0) | (q.vma_flags & 2 ? PROT_WRITE : 0) |
		  (q.vma_flags & 4 ? PROT_EXEC : 0);
	return 0;
}

/* Which shadow v maps at offset == address, or -1. */
static int shadow_of(const struct vma *v)
{
	if (!v->shared || v->off != v->start)
		return -1;
	for (int k = 0; k < nshadows; k++)
		if (shadows[k].fd >= 0 && shadows[k].ino == v->ino && shadows[k].dev == v->dev)
			return k;
	return -1;
}

/* Which shadow v maps, at any offset, or -1. */
static int shadow_file(const struct vma *v)
{
	if (!v->shared)
		return -1;
	for (int k = 0; k < nshadows; k++)
		if (shadows[k].fd >= 0 && shadows[k].ino == v->ino && shadows[k].dev == v->dev)
			return k;
	return -1;
}

static int shadow_new(bool huge)
{
	struct stat st;
	int k = -1;

	for (int i = 0; i < nshadows; i++)
		if (shadows[i].fd < 0)
			k = i;
	if (k < 0) {
		if (nshadows == MAX_SHADOWS)
			return -ENOMEM;
		k = nshadows++;
	}
	int fd = (int)syscall(SYS_memfd_create, huge ? "rdmafs-shadow-huge" : "rdmafs-shadow",
			      MFD_CLOEXEC | MFD_ALLOW_SEALING | (huge ? MFD_HUGETLB : 0));
	if (fd < 0)
		return -errno;
	/* Sealed against shrinking: the daemon maps it only then, since a
	 * mapping past the end of a truncated file would fault in the daemon.
	 * It still grows, and holes are still punched. */
	if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK) || fstat(fd, &st)) {
		int err = errno;
		close(fd);
		return -err;
	}
	shadows[k] = (struct shadow){.fd = fd, .huge = huge, .ino = st.st_ino, .dev = st.st_dev};
	return k;
}

static int shadow_grow(struct shadow *sh, uint64_t end)
{
	if (end <= sh->size)
		return 0;
	if (sh->huge)
		end = (end + HUGE_SZ - 1) & ~(HUGE_SZ - 1);
	if (ftruncate(sh->fd, (off_t)end))
		return errno;
	sh->size = end;
	return 0;
}

/* ---- counts of registrations over shadow pages ---- */

static int span_insert(int at, struct span sp)
{
	if (nspans == capspans) {
		int cap = capspans ? capspans * 2 : 64;
		struct span *n = realloc(spans, (size_t)cap * sizeof(*n));
		if (!n)
			return ENOMEM;
		spans = n, capspans = cap;
	}
	memmove(&spans[at + 1], &spans[at], (size_t)(nspans - at) * sizeof(*spans));
	spans[at] = sp;
	nspans++;
	return 0;
}

static void span_remove(int at)
{
	memmove(&spans[at], &spans[at + 1], (size_t)(nspans - at - 1) * sizeof(*spans));
	nspans--;
}

/* Splits the spans of shadow k so that none straddles x. */
static int span_split(int k, uintptr_t x)
{
	for (int i = 0; i < nspans; i++)
		if (spans[i].k == k && spans[i].s < x && x < spans[i].e) {
			struct span hi = spans[i];
			hi.s = x;
			spans[i].e = x;
			return span_insert(i + 1, hi);
		}
	return 0;
}

static bool span_free(int k, uintptr_t s, uintptr_t e)
{
	for (int i = 0; i < nspans; i++)
		if (spans[i].k == k && spans[i].s < e && s < spans[i].e)
			return false;
	return true;
}

/* One more registration over [s, e) of shadow k: the spans there count
 * one more, and the gaps between them become spans of one. */
static int span_get(int k, uintptr_t s, uintptr_t e)
{
	int err, i = 0;

	if ((err = span_split(k, s)) || (err = span_split(k, e)))
		return err;
	while (i < nspans && (spans[i].k < k || (spans[i].k == k && spans[i].s < s)))
		i++;
	for (uintptr_t at = s; at < e; i++) {
		if (i < nspans && spans[i].k == k && spans[i].s == at) {
			spans[i].n++;
			at = spans[i].e;
			continue;
		}
		uintptr_t end = i < nspans && spans[i].k == k && spans[i].s < e ? spans[i].s : e;
		if ((err = span_insert(i, (struct span){.s = at, .e = end, .k = k, .n = 1})))
			return err;
		at = end;
	}
	return 0;
}

/* ---- write protection while pages change their backing ---- */

/* Write-protects [s, s+len) with a userfaultfd of its own: a store there
 * blocks until the fd is closed (after the range was mapped anew, where
 * the store is then retried). -1 when the kernel offers no protection. */
static int wp_begin(uintptr_t s, size_t len, bool shmem)
{
	int fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
	if (fd < 0 && errno == EPERM)
		fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY);
	if (fd < 0)
		return -1;
	uint64_t want = UFFD_FEATURE_PAGEFAULT_FLAG_WP | UFFD_FEATURE_WP_UNPOPULATED |
			(shmem ? UFFD_FEATURE_WP_HUGETLBFS_SHMEM : 0);
	struct uffdio_api api = {.api = UFFD_API, .features = want};
	if (ioctl(fd, UFFDIO_API, &api)) {
		/* an older kernel: without protection of untouched pages, which
		 * are then touched before the protection */
		close(fd);
		fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
		if (fd < 0)
			return -1;
		api = (struct uffdio_api){.api = UFFD_API, .features = want & ~(uint64_t)UFFD_FEATURE_WP_UNPOPULATED};
		if (ioctl(fd, UFFDIO_API, &api))
			goto fail;
		for (uintptr_t p = s; p < s + len; p += page_size())
			(void)*(volatile char *)p;
	}
	struct uffdio_register reg = {.range = {.start = s, .len = len}, .mode = UFFDIO_REGISTER_MODE_WP};
	if (ioctl(fd, UFFDIO_REGISTER, &reg))
		goto fail;
	struct uffdio_writeprotect wp = {.range = {.start = s, .len = len}, .mode = UFFDIO_WRITEPROTECT_MODE_WP};
	if (ioctl(fd, UFFDIO_WRITEPROTECT, &wp))
		goto fail;
	return fd;
fail:
	close(fd);
	return -1;
}

static void wp_unprotected(uintptr_t s, uintptr_t e)
{
	if (!wp_warned)
		rf_log("reg_mr: %#lx-%#lx changes its backing without write protection (userfaultfd refused): "
		       "a store by another thread during the copy could be lost",
		       (unsigned long)s, (unsigned long)e);
	wp_warned = true;
}

/* ---- re-backing and giving back ---- */

/* ---- the window: a range write-protected while its backing changes ----
 *
 * The window runs on a stack of the library's own (swapcontext): the
 * calling thread's stack may lie in the range (a buffer in the frame that
 * registers it, or deregisters it, or the forking thread's own stack in
 * the child), and a store to a protected page waits for the window's end,
 * which that thread would never reach; and a stack page copied while its
 * frames still change would come back without the changes. On its own
 * stack the thread touches nothing of the range but what it copies. The
 * window's arguments and result are static for the same reason (mem_lock
 * held: one window at a time). */

#define WIN_STACK ((size_t)256 << 10)

static struct window {
	int k;          /* the shadow */
	uintptr_t s, e; /* the range */
	int prot;       /* reback: the range's protection */
	void *view;     /* reback of a huge shadow: a mapping of it */
	const struct vma *v; /* give_back: the VMA, a mapping of shadow k */
	void *tmp;      /* give_back: the private pages to put in place */
	int err;
} win;
static ucontext_t win_ctx, win_caller;
static char *win_stack;
static void (*win_fn)(void);

static void win_entry(void) { win_fn(); }

/* Runs fn (which reads and writes win) on the window stack. */
static int in_window(void (*fn)(void))
{
	if (!win_stack) {
		void *st = sys_mmap(NULL, WIN_STACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
		if (st == MAP_FAILED)
			return errno;
		win_stack = st;
	}
	if (win.s < (uintptr_t)win_stack + WIN_STACK && (uintptr_t)win_stack < win.e)
		return EFAULT; /* the range covers the window's own stack */
	win_fn = fn;
	if (getcontext(&win_ctx))
		return errno;
	win_ctx.uc_stack.ss_sp = win_stack;
	win_ctx.uc_stack.ss_size = WIN_STACK;
	win_ctx.uc_link = &win_caller;
	makecontext(&win_ctx, win_entry, 0);
	if (swapcontext(&win_caller, &win_ctx))
		return errno;
	return win.err;
}

/* reback's window: copies win's private range into the shadow and maps
 * the shadow over it. */
static void reback_window(void)
{
	struct shadow *sh = &shadows[win.k];
	uintptr_t s = win.s;
	size_t len = win.e - s;
	int err = 0;
	int uffd = wp_begin(s, len, false);
	if (uffd < 0)
		wp_unprotected(s, win.e);
	/* From here to close(uffd): system calls only. */
	if (win.view) {
		volatile uint64_t *d = win.view;
		const volatile uint64_t *src = (const void *)s;
		for (size_t i = 0; i < len / 8; i++)
			d[i] = src[i];
	} else {
		err = shadow_io(1, sh->fd, (void *)s, len, s);
	}
	if (!err) {
		void *m = sys_mmap((void *)s, len, win.prot, MAP_SHARED | MAP_FIXED, sh->fd, (off_t)s);
		if (m == MAP_FAILED)
			err = errno;
		else if (m != (void *)s)
			err = EFAULT; /* cannot happen with MAP_FIXED; never trust it */
	}
	if (uffd >= 0)
		close(uffd);
	win.err = err;
}

/* Copies private [s, e) (protection prot) into shadow k and maps the
 * shadow over it. */
static int reback(int k, uintptr_t s, uintptr_t e, int prot)
{
	struct shadow *sh = &shadows[k];
	size_t len = e - s;
	int err = shadow_grow(sh, e);
	if (err)
		return err;
	void *view = NULL;
	if (sh->huge) {
		/* hugetlbfs has no write(): copy through a mapping of the shadow */
		view = sys_mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, sh->fd, (off_t)s);
		if (view == MAP_FAILED)
			return errno;
	}
	win = (struct window){.k = k, .s = s, .e = e, .prot = prot, .view = view};
	err = in_window(reback_window);
	if (view)
		sys_munmap(view, len);
	return err;
}

/* give_back's window: puts win.tmp, holding the range's bytes and
 * protection, in place of the shadow's mapping. */
static void give_back_window(void)
{
	struct shadow *sh = &shadows[win.k];
	const struct vma *v = win.v;
	uintptr_t s = win.s;
	size_t len = win.e - s;
	uint64_t off = v->off + (s - v->start); /* s's offset in the shadow */
	int err = 0;
	int uffd = wp_begin(s, len, true);
	if (uffd < 0)
		wp_unprotected(s, win.e);
	if (sh->huge) {
		volatile uint64_t *d = win.tmp;
		const volatile uint64_t *src = (const void *)s;
		if (!(v->prot & PROT_READ))
			sys_mprotect((void *)s, len, v->prot | PROT_READ);
		for (size_t i = 0; i < len / 8; i++)
			d[i] = src[i];
	} else {
		err = shadow_io(0, sh->fd, win.tmp, len, off);
	}
	if (!err && v->prot != (PROT_READ | PROT_WRITE))
		sys_mprotect(win.tmp, len, v->prot);
	if (!err) {
		void *m = sys_mremap(win.tmp, len, (void *)s);
		if (m == MAP_FAILED)
			err = errno;
		else if (m != (void *)s)
			err = EFAULT;
	}
	if (uffd >= 0)
		close(uffd);
	win.err = err;
}

/* Puts [s, e) of VMA v, a mapping of shadow k, back as private memory
 * with its bytes and protection. */
static int give_back(int k, const struct vma *v, uintptr_t s, uintptr_t e)
{
	struct shadow *sh = &shadows[k];
	size_t len = e - s;
	int huge = sh->huge ? MAP_HUGETLB : 0;
	void *tmp = sys_mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | huge, -1, 0);
	if (tmp == MAP_FAILED && huge)
		tmp = sys_mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (tmp == MAP_FAILED)
		return errno;
	win = (struct window){.k = k, .s = s, .e = e, .v = v, .tmp = tmp};
	int err = in_window(give_back_window);
	if (err)
		sys_munmap(tmp, len);
	return err;
}

/* The registrations over [s, e) of shadow k are gone: give back what the
 * program still maps of those shadow pages, where it maps them (at their
 * own address, or wherever mremap moved them: a realloc of a registered
 * buffer), then free the pages. What cannot be given back stays. */
static void release(int k, uintptr_t s, uintptr_t e)
{
	struct vma v;
	bool kept = false, elsewhere = false;
	uintptr_t at = s;

	while (at < e) {
		if (vma_at(at, &v) || v.start >= e) {
			elsewhere = true;
			break;
		}
		if (v.start > at)
			elsewhere = true;
		uintptr_t a = v.start > at ? v.start : at, b = v.end < e ? v.end : e;
		if (shadow_of(&v) != k)
			elsewhere = true;
		else if (give_back(k, &v, a, b)) {
			rf_log("dereg_mr: %#lx-%#lx stays shared: giving it back failed", (unsigned long)a,
			       (unsigned long)b);
			kept = true;
		}
		at = b;
	}
	/* Pages not at their own address may have moved: look through every
	 * mapping for these shadow pages elsewhere. */
	for (at = 0; elsewhere && vma_at(at, &v) == 0; at = v.end) {
		if (shadow_file(&v) != k || v.off == v.start)
			continue;
		uint64_t lo = v.off, hi = v.off + (v.end - v.start);
		if (hi <= s || lo >= e)
			continue;
		uintptr_t a = v.start + ((lo < s ? s : lo) - v.off), b = v.start + ((hi > e ? e : hi) - v.off);
		if (give_back(k, &v, a, b)) {
			rf_log("dereg_mr: %#lx-%#lx (moved) stays shared: giving it back failed", (unsigned long)a,
			       (unsigned long)b);
			kept = true;
		}
	}
	if (!kept)
		fallocate(shadows[k].fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)s, (off_t)(e - s));
}

/* One registration fewer over [s, e) of shadow k; what reaches no
 * registration is released. */
static void span_put(int k, uintptr_t s, uintptr_t e)
{
	for (int i = 0; i < nspans;) {
		struct span *x = &spans[i];
		if (x->k != k || x->e <= s || x->s >= e) {
			i++;
			continue;
		}
		/* pieces are split at registration bounds, so x lies inside */
		if (--x->n == 0) {
			uintptr_t a = x->s, b = x->e;
			span_remove(i);
			release(k, a, b);
			continue;
		}
		i++;
	}
}

/* ---- the pins registrations hold ---- */

static int pin_add(struct rf_pin *pin, int k, uintptr_t s, uintptr_t e)
{
	if (pin->n && pin->p[pin->n - 1].k == k && pin->p[pin->n - 1].e == s) {
		pin->p[pin->n - 1].e = e;
		return 0;
	}
	struct rf_pin_piece *p = realloc(pin->p, (size_t)(pin->n + 1) * sizeof(*p));
	if (!p)
		return ENOMEM;
	pin->p = p;
	pin->p[pin->n++] = (struct rf_pin_piece){.s = s, .e = e, .k = k};
	return 0;
}

static void unpin_locked(struct rf_pin *pin)
{
	for (int i = 0; i < pin->n; i++)
		span_put(pin->p[i].k, pin->p[i].s, pin->p[i].e);
	free(pin->p);
	pin->p = NULL;
	pin->n = 0;
}

/* A free shadow for private [s, e): one whose pages there no registration
 * covers (so re-backing them changes no MR's memory). */
static int shadow_for(uintptr_t s, uintptr_t e, bool huge)
{
	for (int k = 0; k < nshadows; k++)
		if (shadows[k].fd >= 0 && shadows[k].huge == huge && span_free(k, s, e))
			return k;
	return shadow_new(huge);
}

int rf_mem_pin(uintptr_t addr, size_t len, bool write, struct rf_pin *pin)
{
	uintptr_t ps = page_size();
	uintptr_t lo = addr & ~(ps - 1), hi = (addr + len + ps - 1) & ~(ps - 1);
	struct vma v;
	int err = 0;

	if (!len || addr + len < addr)
		return EINVAL;
	*pin = (struct rf_pin){0};
	pthread_mutex_lock(&mem_lock);
	/* Check the whole range first, as ib_umem_get does: a hole, PROT_NONE
	 * or write access to read-only memory is EFAULT, before anything
	 * changes. */
	for (uintptr_t at = lo; at < hi; at = v.end) {
		if ((err = vma_at(at, &v)) || v.start > at) {
			err = EFAULT;
			rf_log("reg_mr: %#lx is not mapped", (unsigned long)at);
			goto out;
		}
		if (!(v.prot & (PROT_READ | PROT_WRITE)) || (write && !(v.prot & PROT_WRITE))) {
			rf_log("reg_mr: %#lx-%#lx is %s", (unsigned long)v.start, (unsigned long)v.end,
			       v.prot & (PROT_READ | PROT_WRITE) ? "read-only and the access writes" : "PROT_NONE");
			err = EFAULT;
			goto out;
		}
	}
	for (uintptr_t at = lo; at < hi;) {
		if ((err = vma_at(at, &v)) || v.start > at) {
			err = err ? err : EFAULT;
			break;
		}
		uintptr_t s = at, e = v.end < hi ? v.end : hi;
		bool huge = v.pgsz > ps;
		if (huge) {
			/* hugetlb changes in whole huge pages */
			s &= ~(v.pgsz - 1);
			e = (e + v.pgsz - 1) & ~(v.pgsz - 1);
		}
		/* The shadow pages a piece holds are counted by their offset
		 * in the shadow: their address, unless mremap moved them. */
		int k = shadow_file(&v);
		uint64_t fs = v.off + (s - v.start);
		if (k < 0 && !v.shared) {
			fs = s;
			k = shadow_for(s, e, huge);
			if (k < 0) {
				err = -k;
				break;
			}
			if ((err = reback(k, s, e, v.prot)) && huge) {
				/* no huge pages to spare: ordinary ones */
				if ((k = shadow_for(s, e, false)) >= 0)
					err = reback(k, s, e, v.prot);
			}
			if (err) {
				rf_log("reg_mr: re-backing %#lx-%#lx: %s", (unsigned long)s, (unsigned long)e,
				       strerror(err));
				break;
			}
		}
		if (k >= 0 && ((err = span_get(k, fs, fs + (e - s))) || (err = pin_add(pin, k, fs, fs + (e - s)))))
			break;
		at = e;
	}
	if (err)
		unpin_locked(pin);
out:
	pthread_mutex_unlock(&mem_lock);
	return err;
}

void rf_mem_unpin(struct rf_pin *pin)
{
	if (!pin->n)
		return;
	pthread_mutex_lock(&mem_lock);
	unpin_locked(pin);
	pthread_mutex_unlock(&mem_lock);
}

/* ---- fork ---- */

static void fork_prepare(void) { pthread_mutex_lock(&mem_lock); }
static void fork_parent(void) { pthread_mutex_unlock(&mem_lock); }

/* The child: its registered private memory becomes private again (it has
 * no MRs; the parent's shadows are the parent's), single-threaded. */
static void fork_child(void)
{
	struct vma v;

	if (maps_fd >= 0)
		close(maps_fd);
	maps_fd = -1;
	for (uintptr_t at = 0; nshadows && vma_at(at, &v) == 0; at = v.end) {
		int k = shadow_file(&v);
		if (k >= 0 && give_back(k, &v, v.start, v.end))
			rf_log("fork: %#lx-%#lx stays shared with the parent", (unsigned long)v.start,
			       (unsigned long)v.end);
	}
	for (int k = 0; k < nshadows; k++)
		if (shadows[k].fd >= 0)
			close(shadows[k].fd);
	nshadows = 0;
	free(spans);
	spans = NULL;
	nspans = capspans = 0;
	pthread_mutex_unlock(&mem_lock);
}

__attribute__((constructor)) static void mem_init(void) { pthread_atfork(fork_prepare, fork_parent, fork_child); }
