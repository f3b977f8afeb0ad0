/* Every generated stub (build/stubs.tab lists them) is reachable under its
 * exported name and version and fails as libibverbs/gen/profile.go says
 * for librdmacm: called with all-zero arguments it returns -1 (NULL for
 * pointers) and sets errno to the table's constant (ENOSYS for the
 * rsocket family, EOPNOTSUPP for multicast and ECE), and it touches none
 * of its arguments.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

enum call_class { VOID, PTR, INT, LONG };

struct stub {
	const char *name, *version;
	int hidden;
	enum call_class class;
	long result;
	int err;
};

#define RDMAFS_STUB(n, v, h, c, r, e) { n, v, h, c, (long)(r), e },
#define RDMAFS_OBJECT(n, v, s)
static const struct stub stubs[] = {
#include "stubs.tab"
	{ NULL, NULL, 0, VOID, 0, 0 },
};

typedef void (*void_fn)(long, long, long, long, long, long);
typedef void *(*ptr_fn)(long, long, long, long, long, long);
typedef int (*int_fn)(long, long, long, long, long, long);
typedef long (*long_fn)(long, long, long, long, long, long);

#if defined(__clang__)
__attribute__((no_sanitize("function")))
#endif
static int call(const struct stub *s, void *sym, long *res)
{
	errno = 0;
	switch (s->class) {
	case VOID:
		((void_fn)sym)(0, 0, 0, 0, 0, 0);
		*res = 0;
		break;
	case PTR:
		*res = (long)(intptr_t)((ptr_fn)sym)(0, 0, 0, 0, 0, 0);
		break;
	case INT:
		*res = ((int_fn)sym)(0, 0, 0, 0, 0, 0);
		break;
	case LONG:
		*res = ((long_fn)sym)(0, 0, 0, 0, 0, 0);
		break;
	}
	return errno;
}

int main(void)
{
	void *lib = dlopen(RDMAFS_TEST_LIB, RTLD_NOW);
	int failures = 0, n = 0, rsockets = 0;

	if (!lib) {
		fprintf(stderr, "FAIL: dlopen %s: %s\n", RDMAFS_TEST_LIB, dlerror());
		return 1;
	}
	for (const struct stub *s = stubs; s->name; s++, n++) {
		void *sym = dlvsym(lib, s->name, s->version);
		long res = 0;
		int err;

		if (!sym) {
			fprintf(stderr, "FAIL %s@@%s: not found: %s\n", s->name, s->version, dlerror());
			failures++;
			continue;
		}
		err = call(s, sym, &res);
		if (res != s->result) {
			fprintf(stderr, "FAIL %s@%s: returned %ld, want %ld\n", s->name, s->version, res, s->result);
			failures++;
		}
		if (s->err && err != s->err) {
			fprintf(stderr, "FAIL %s@%s: errno %d (%s), want %d (%s)\n", s->name, s->version, err,
				strerror(err), s->err, strerror(s->err));
			failures++;
		}
		/* the rsocket family is the only ENOSYS one, and all of it is stubbed */
		if (s->name[0] == 'r' && strncmp(s->name, "rdma_", 5) != 0) {
			rsockets++;
			if (s->err != ENOSYS) {
				fprintf(stderr, "FAIL %s: an rsocket call that is not ENOSYS\n", s->name);
				failures++;
			}
		}
	}
	if (rsockets < 25) {
		fprintf(stderr, "FAIL: only %d rsocket stubs\n", rsockets);
		failures++;
	}
	if (failures) {
		fprintf(stderr, "stubs_test: %d failures in %d stubs\n", failures, n);
		return 1;
	}
	printf("stubs_test: %d stubs ok (%d rsocket calls: ENOSYS)\n", n, rsockets);
	return 0;
}
