/* Every generated stub (build/stubs.tab lists them) is reachable under its
 * exported name and version, and fails as gen/conventions.go says: called
 * with all-zero arguments it returns the convention's value and sets errno
 * to EOPNOTSUPP where the convention sets it, and it crashes on nothing
 * (the stubs never look at their arguments). The data objects exist with
 * their size and start zero.
 */
#include <infiniband/verbs.h>

#include "stubcall.h"

struct object {
	const char *name, *version;
	size_t size;
};

#define RDMAFS_STUB(n, v, h, c, r, e) { n, v, h, c, (long)(r), (e) ? EOPNOTSUPP : 0 },
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

int main(void)
{
	void *lib = dlopen(RDMAFS_TEST_LIB, RTLD_NOW);
	int failures = 0, n = 0;

	if (!lib) {
		fprintf(stderr, "FAIL: dlopen %s: %s\n", RDMAFS_TEST_LIB, dlerror());
		return 1;
	}
	for (const struct stub *s = stubs; s->name; s++, n++)
		failures += check_stub(lib, s);
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
