/* The stubs_test of both drop-in libraries: how one generated stub (a row
 * of build/stubs.tab) is called and checked. A stub is called through a
 * pointer of its return class with six zero arguments, more than any stub
 * takes: under the SysV calling conventions the extra ones are ignored,
 * and the stubs read none of theirs. */
#ifndef RDMAFS_STUBCALL_H
#define RDMAFS_STUBCALL_H

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
	int err; /* the errno the stub sets, 0 for none */
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

/* check_stub finds s in lib under its name and version, calls it and
 * checks its result and errno; it returns the failures, each reported. */
static int check_stub(void *lib, const struct stub *s)
{
	void *sym = dlvsym(lib, s->name, s->version);
	long res = 0;
	int err, failures = 0;

	if (!sym) {
		fprintf(stderr, "FAIL %s@%s%s: not found: %s\n", s->name, s->hidden ? "" : "@", s->version,
			dlerror());
		return 1;
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
	return failures;
}

#endif
