/* Every generated stub (build/stubs.tab lists them) is reachable under its
 * exported name and version and fails as libibverbs/gen/profile.go says
 * for librdmacm: called with all-zero arguments it returns -1 (NULL for
 * pointers) and sets errno to the table's constant (ENOSYS for the
 * rsocket family, EOPNOTSUPP for multicast and ECE), and it touches none
 * of its arguments.
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
	int failures = 0, n = 0, rsockets = 0;

	if (!lib) {
		fprintf(stderr, "FAIL: dlopen %s: %s\n", RDMAFS_TEST_LIB, dlerror());
		return 1;
	}
	for (const struct stub *s = stubs; s->name; s++, n++) {
		failures += check_stub(lib, s);
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
