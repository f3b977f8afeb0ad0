/* mountio: the file operations on a mount that both drop-in libraries
 * make (libibverbs's verbs, librdmacm's CM ids). Every operation is one a
 * shell could make on the same files; the daemon checks everything and the
 * libraries only translate. Compiled into each library (dropin.mk); its
 * symbols are not exported. Each call returns 0 or a positive errno, also
 * left in errno. */
#ifndef RDMAFS_MOUNTIO_H
#define RDMAFS_MOUNTIO_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct mio {
	int mount_fd;     /* the mount's root directory */
	int lease_fd;     /* MOUNT/lease of this context, or -1 */
	int gone;         /* the errno for a device that went away */
	const char *tag;  /* the log's prefix: "rdmafs", "rdmafs-cm" */
};

/* RDMAFS_DEBUG set (and not "0"): the daemon's reasons go to stderr. */
bool mio_debug(void);
void mio_vlog(const char *tag, const char *fmt, va_list ap);
void mio_log(const char *tag, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* err as the library reports it: a dead mount (ENOTCONN, ECONNABORTED,
 * ENODEV) is m->gone. */
int mio_errno(const struct mio *m, int err);
/* Sets errno to err and returns it. */
int mio_fail(int err);

/* Reads the whole file (at most len - 1 bytes), NUL-terminated. */
int mio_read(const struct mio *m, const char *path, char *buf, size_t len);
/* One write of line (a newline is added) to path, opened write-only. */
int mio_write(const struct mio *m, const char *path, const char *line);
/* One creation: req to path (a KIND/new file), the new handle from its
 * answer; the handle is then leased as "lease_kind HANDLE" (NULL: not). */
int mio_create(const struct mio *m, const char *path, const char *req, const char *lease_kind,
	       uint32_t *handle);
/* Leases an object to the context (MOUNT/lease): it dies with it. */
void mio_lease(const struct mio *m, const char *kind, uint32_t handle);
/* Logs dir/error, the daemon's reason for the last failure on an object. */
void mio_reason(const struct mio *m, const char *dir, const char *what);
/* Removes an object's directory (destroys it). */
int mio_rmdir(const struct mio *m, const char *path);

#endif
