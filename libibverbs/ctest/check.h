/* The C tests of ctest/ (both libraries): CHECK reports a failed condition
 * with its place and counts it in failures, and the test goes on, so that
 * one run lists every failure; main returns failures != 0. */
#ifndef RDMAFS_CTEST_CHECK_H
#define RDMAFS_CTEST_CHECK_H

#include <stdio.h>

static int failures;

#define CHECK(cond, ...)                                                     \
	do {                                                                 \
		if (!(cond)) {                                               \
			fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
			fprintf(stderr, __VA_ARGS__);                        \
			fputc('\n', stderr);                                 \
			failures++;                                          \
		}                                                            \
	} while (0)

#endif
