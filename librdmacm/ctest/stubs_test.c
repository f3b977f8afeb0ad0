/* Every generated stub (build/stubs.tab lists them) is reachable under its
 * exported name and version and fails as libibverbs/gen/profile.go says
 * for librdmacm: called with all-zero arguments it returns -1 (NULL for
 * pointers) and sets errno to the table's constant (EOPNOTSUPP for
 * multicast and ECE), and it touches none of its arguments. The rsocket
 * family is the library's own (rsocket*.c): none of it may be a stub.
 */
#include "../../libibverbs/ctest/stubcall.h"

#define RDMAFS_STUB(n, v, h, c, r, e) { n, v, h, c, (long)(r), e },
#define RDMAFS_OBJECT(n, v, s)
static const struct stub stubs[] = {
#include "stubs.tab"
	{ NULL, NULL, 0, VOID, 0, 0 },
};

int main(void)
{
	void *lib = dlopen(RDMAFS_TEST_LIB, RTLD_NOW);
	int failures = 0, n = 0;

	if (!lib) {
		fprintf(stderr, "FAIL: dlopen %s: %s\n", RDMAFS_TEST_LIB, dlerror());
		return 1;
	}
	for (const struct stub *s = stubs; s->name; s++, n++) {
		failures += check_stub(lib, s);
		if (s->name[0] == 'r' && strncmp(s->name, "rdma_", 5) != 0) {
			fprintf(stderr, "FAIL %s: an rsocket call is a stub\n", s->name);
			failures++;
		}
	}
	if (failures) {
		fprintf(stderr, "stubs_test: %d failures in %d stubs\n", failures, n);
		return 1;
	}
	printf("stubs_test: %d stubs ok (no rsocket call among them)\n", n);
	return 0;
}
