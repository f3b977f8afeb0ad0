/* Every generated stub (build/stubs.tab lists them) is reachable under its
 * exported name and version, and fails as gen/conventions.go says: called
 * with all-zero arguments it returns the convention's value and sets errno
 * to EOPNOTSUPP where the convention sets it, and it crashes on nothing
 * (the stubs never look at their arguments). The data objects exist with
 * their size and start zero.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <infiniband/verbs.h>

enum call_class { VOID, PTR, INT, LONG };

struct stub {
	const char *name, *version;
	int hidden;
	enum call_class class;
	long result;
	int sets_errno;
};

struct object {
	const char *name, *version;
	size_t size;
};

#define RDMAFS_STUB(n, v, h, c, r, e) { n, v, h, c, (long)(r), e },
#define RDMAFS_OBJECT(n, v, s)
static const struct stub stubs[] = {
#include "stubs.tab"
	{ NULL, NULL, 0, VOID, 0, 0 },
};
#undef RDMAFS_STUB
#undef RDMAFS_OBJECT

#define RDMAFS_STUB(n, v, h, c, r, e)
#define RDMAFS_OBJECT(n, v, s) { n, v, s },
static const struct object objects[] = {
#include "stubs.tab"
	{ NULL, NULL, 0 },
};

/* A stub is called through a pointer of its return class with six zero
 * arguments, more than any stub takes: under the SysV calling conventions
 * the extra ones are ignored, and the stubs read none of theirs. */
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
	int failures = 0, n = 0;

	if (!lib) {
		fprintf(stderr, "FAIL: dlopen %s: %s\n", RDMAFS_TEST_LIB, dlerror());
		return 1;
	}
	for (const struct stub *s = stubs; s->name; s++, n++) {
		void *sym = dlvsym(lib, s->name, s->version);
		long res = 0;
		int err;

		if (!sym) {
			fprintf(stderr, "FAIL %s@%s%s: not found: %s\n", s->name,
				s->hidden ? "" : "@", s->version, dlerror());
			failures++;
			continue;
		}
		err = call(s, sym, &res);
		if (res != s->result) {
			fprintf(stderr, "FAIL %s@%s: returned %ld, want %ld\n",
				s->name, s->version, res, s->result);
			failures++;
		}
		if (s->sets_errno && err != EOPNOTSUPP) {
			fprintf(stderr, "FAIL %s@%s: errno %d (%s), want EOPNOTSUPP\n",
				s->name, s->version, err, strerror(err));
			failures++;
		}
	}
	for (const struct object *o = objects; o->name; o++) {
		const unsigned char *p = dlvsym(lib, o->name, o->version);

		if (!p) {
			fprintf(stderr, "FAIL %s@@%s: not found\n", o->name, o->version);
			failures++;
			continue;
		}
		for (size_t i = 0; i < o->size; i++) {
			if (p[i]) {
				fprintf(stderr, "FAIL %s: byte %zu is %u, want 0\n", o->name, i, p[i]);
				failures++;
			}
		}
	}
	if (failures) {
		fprintf(stderr, "stubs_test: %d failures in %d stubs\n", failures, n);
		return 1;
	}
	printf("stubs_test: %d stubs ok\n", n);
	return 0;
}
