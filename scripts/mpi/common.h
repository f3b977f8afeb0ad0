/* What the MPI test programs share: a data pattern that differs per
 * message, checks that report and count every bad byte, and a way out
 * that makes mpirun fail. Header-only. */
#ifndef MPIT_COMMON_H
#define MPIT_COMMON_H

#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, nranks, errors;

/* byte i of message (a, b, c) */
static inline uint8_t pbyte(unsigned a, unsigned b, unsigned c, size_t i)
{
	return (uint8_t)((i * 131 + (i >> 8) * 7 + a * 17 + b * 29 + c * 53 + 1) & 0xff);
}

static inline void pfill(void *p, size_t n, unsigned a, unsigned b, unsigned c)
{
	uint8_t *q = p;

	for (size_t i = 0; i < n; i++)
		q[i] = pbyte(a, b, c, i);
}

/* pcheck: 0 when p holds message (a, b, c); else reports the first bad
 * byte and how many, and counts an error. */
static inline int pcheck(const char *what, const void *p, size_t n, unsigned a, unsigned b, unsigned c)
{
	const uint8_t *q = p;
	size_t bad = 0, first = 0;

	for (size_t i = 0; i < n; i++)
		if (q[i] != pbyte(a, b, c, i) && !bad++)
			first = i;
	if (!bad)
		return 0;
	fprintf(stderr, "rank %d: %s: %zu of %zu bytes bad, first at %zu (got %02x want %02x)\n", rank, what, bad,
		n, first, q[first], pbyte(a, b, c, first));
	errors++;
	return -1;
}

#define MPI_OK(call)                                                                            \
	do {                                                                                    \
		int rc_ = (call);                                                               \
		if (rc_ != MPI_SUCCESS) {                                                       \
			char s_[MPI_MAX_ERROR_STRING];                                          \
			int l_;                                                                 \
			MPI_Error_string(rc_, s_, &l_);                                         \
			fprintf(stderr, "rank %d: %s:%d: %s: %s\n", rank, __FILE__, __LINE__, #call, s_); \
			MPI_Abort(MPI_COMM_WORLD, 3);                                           \
		}                                                                               \
	} while (0)

static inline void mpit_init(int *argc, char ***argv)
{
	MPI_Init(argc, argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &nranks);
	MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
}

/* mpit_finish: every rank's error count summed; rank 0 prints the verdict
 * NAME ok / NAME: N errors; the exit status is non-zero on any error. */
static inline int mpit_finish(const char *name)
{
	int total = 0;

	MPI_Allreduce(&errors, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	if (rank == 0) {
		if (total)
			printf("%s: %d errors\n", name, total);
		else
			printf("%s: ok (%d ranks)\n", name, nranks);
	}
	MPI_Finalize();
	return total ? 1 : 0;
}

#endif
