/* mpi osc: one-sided communication over three kinds of window in one
 * program: MPI_Win_create on malloc'd memory, MPI_Win_create on
 * MPI_Alloc_mem memory, and MPI_Win_allocate. On each: MPI_Put and MPI_Get
 * of 1 MiB and of 8 B under MPI_Win_fence, MPI_Accumulate (sum) from every
 * rank; then under MPI_Win_lock: MPI_Fetch_and_op (every fetched value
 * distinct, the final count right), MPI_Compare_and_swap (exactly one rank
 * wins), and Put/Get with MPI_Win_flush. */
#include <stdint.h>

#include "common.h"

#define N (1 << 17) /* 64-bit elements: 1 MiB per window half */

static uint64_t val(int kind, int owner, int phase, size_t i)
{
	return ((uint64_t)kind << 56) ^ ((uint64_t)owner << 48) ^ ((uint64_t)phase << 40) ^ (i * 0x9e3779b1u);
}

static void run(int kind, const char *name, uint64_t *base, MPI_Win win)
{
	int right = (rank + 1) % nranks, left = (rank + nranks - 1) % nranks;
	uint64_t *get = malloc(N * sizeof(uint64_t));
	long bad;

	/* fence: Put my data into right's [0, N); Get right's [N, 2N) */
	for (size_t i = 0; i < 2 * N; i++)
		base[i] = i >= N ? val(kind, rank, 1, i) : 0;
	uint64_t *mine = malloc(N * sizeof(uint64_t));
	for (size_t i = 0; i < N; i++)
		mine[i] = val(kind, rank, 2, i);
	MPI_OK(MPI_Win_fence(0, win));
	MPI_OK(MPI_Put(mine, N, MPI_UINT64_T, right, 0, N, MPI_UINT64_T, win));
	MPI_OK(MPI_Get(get, N, MPI_UINT64_T, right, N, N, MPI_UINT64_T, win));
	MPI_OK(MPI_Win_fence(0, win));
	bad = 0;
	for (size_t i = 0; i < N; i++)
		bad += base[i] != val(kind, left, 2, i);
	if (bad) {
		fprintf(stderr, "rank %d: %s: fence Put: %ld of %d elements bad (first %#llx want %#llx)\n", rank, name,
			bad, N, (unsigned long long)base[0], (unsigned long long)val(kind, left, 2, 0));
		errors++;
	}
	bad = 0;
	for (size_t i = 0; i < N; i++)
		bad += get[i] != val(kind, right, 1, N + i);
	if (bad) {
		fprintf(stderr, "rank %d: %s: fence Get: %ld of %d elements bad\n", rank, name, bad, N);
		errors++;
	}
	/* small Put and Get (8 B) */
	uint64_t one = val(kind, rank, 3, 0), got = 0;
	MPI_OK(MPI_Win_fence(0, win));
	MPI_OK(MPI_Put(&one, 1, MPI_UINT64_T, right, 5, 1, MPI_UINT64_T, win));
	MPI_OK(MPI_Win_fence(0, win));
	MPI_OK(MPI_Get(&got, 1, MPI_UINT64_T, left, 5, 1, MPI_UINT64_T, win));
	MPI_OK(MPI_Win_fence(0, win));
	if (base[5] != val(kind, left, 3, 0) || got != val(kind, (left + nranks - 1) % nranks, 3, 0)) {
		fprintf(stderr, "rank %d: %s: 8-byte Put/Get wrong\n", rank, name);
		errors++;
	}
	/* Accumulate: every rank adds (rank+1)*i into rank 0's [0, 4096) */
	const int na = 4096;
	for (int i = 0; i < na; i++)
		mine[i] = (uint64_t)(rank + 1) * (uint64_t)i;
	if (rank == 0)
		for (int i = 0; i < na; i++)
			base[i] = 1;
	MPI_OK(MPI_Win_fence(0, win));
	MPI_OK(MPI_Accumulate(mine, na, MPI_UINT64_T, 0, 0, na, MPI_UINT64_T, MPI_SUM, win));
	MPI_OK(MPI_Win_fence(0, win));
	if (rank == 0) {
		bad = 0;
		for (int i = 0; i < na; i++)
			bad += base[i] != 1 + (uint64_t)(nranks * (nranks + 1) / 2) * (uint64_t)i;
		if (bad) {
			fprintf(stderr, "rank 0: %s: Accumulate: %ld of %d sums bad\n", name, bad, na);
			errors++;
		}
	}
	/* lock epochs: a counter at rank 0's element 0, a CAS slot at 1 */
	if (rank == 0) {
		base[0] = 0;
		base[1] = UINT64_MAX;
	}
	MPI_OK(MPI_Win_fence(0, win));
	const int K = 50;
	uint64_t *fetched = malloc(K * sizeof(uint64_t)), inc = 1, cas_old = 0, me = (uint64_t)rank;
	uint64_t cmp = UINT64_MAX;
	for (int k = 0; k < K; k++) {
		MPI_OK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, win));
		MPI_OK(MPI_Fetch_and_op(&inc, &fetched[k], MPI_UINT64_T, 0, 0, MPI_SUM, win));
		MPI_OK(MPI_Win_unlock(0, win));
	}
	MPI_OK(MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win));
	MPI_OK(MPI_Compare_and_swap(&me, &cmp, &cas_old, MPI_UINT64_T, 0, 1, win));
	MPI_OK(MPI_Win_unlock(0, win));
	uint64_t *all = rank == 0 ? malloc((size_t)nranks * K * sizeof(uint64_t)) : NULL;
	MPI_OK(MPI_Gather(fetched, K, MPI_UINT64_T, all, K, MPI_UINT64_T, 0, MPI_COMM_WORLD));
	int won = cas_old == UINT64_MAX, winners = 0;
	MPI_OK(MPI_Reduce(&won, &winners, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD));
	MPI_OK(MPI_Win_fence(0, win));
	if (rank == 0) {
		uint8_t *seen = calloc((size_t)nranks * K, 1);
		bad = 0;
		for (int i = 0; i < nranks * K; i++) {
			if (all[i] >= (uint64_t)nranks * K || seen[all[i]]++)
				bad++;
		}
		if (bad || base[0] != (uint64_t)nranks * K) {
			fprintf(stderr, "rank 0: %s: Fetch_and_op: %ld repeated or out-of-range values, counter %llu want %d\n",
				name, bad, (unsigned long long)base[0], nranks * K);
			errors++;
		}
		if (winners != 1 || base[1] >= (uint64_t)nranks) {
			fprintf(stderr, "rank 0: %s: Compare_and_swap: %d winners, slot %#llx\n", name, winners,
				(unsigned long long)base[1]);
			errors++;
		}
		free(seen);
		free(all);
	}
	/* lock + flush: Put into right's [N, 2N), flush, Get it back */
	for (size_t i = 0; i < N; i++)
		mine[i] = val(kind, rank, 4, i);
	MPI_OK(MPI_Win_lock(MPI_LOCK_SHARED, right, 0, win));
	MPI_OK(MPI_Put(mine, N, MPI_UINT64_T, right, N, N, MPI_UINT64_T, win));
	MPI_OK(MPI_Win_flush(right, win));
	memset(get, 0, N * sizeof(uint64_t));
	MPI_OK(MPI_Get(get, N, MPI_UINT64_T, right, N, N, MPI_UINT64_T, win));
	MPI_OK(MPI_Win_unlock(right, win));
	bad = 0;
	for (size_t i = 0; i < N; i++)
		bad += get[i] != mine[i];
	if (bad) {
		fprintf(stderr, "rank %d: %s: lock Put/flush/Get: %ld of %d elements bad\n", rank, name, bad, N);
		errors++;
	}
	MPI_OK(MPI_Barrier(MPI_COMM_WORLD));
	bad = 0;
	for (size_t i = 0; i < N; i++)
		bad += base[N + i] != val(kind, left, 4, i);
	if (bad) {
		fprintf(stderr, "rank %d: %s: lock Put seen by the target: %ld of %d elements bad\n", rank, name, bad, N);
		errors++;
	}
	free(fetched);
	free(mine);
	free(get);
	if (rank == 0)
		printf("osc: %s: done\n", name);
}

int main(int argc, char **argv)
{
	mpit_init(&argc, &argv);
	const MPI_Aint sz = 2 * N * sizeof(uint64_t);
	MPI_Win w1, w2, w3;

	uint64_t *m1 = malloc((size_t)sz);
	MPI_OK(MPI_Win_create(m1, sz, sizeof(uint64_t), MPI_INFO_NULL, MPI_COMM_WORLD, &w1));
	uint64_t *m2;
	MPI_OK(MPI_Alloc_mem(sz, MPI_INFO_NULL, &m2));
	MPI_OK(MPI_Win_create(m2, sz, sizeof(uint64_t), MPI_INFO_NULL, MPI_COMM_WORLD, &w2));
	uint64_t *m3;
	MPI_OK(MPI_Win_allocate(sz, sizeof(uint64_t), MPI_INFO_NULL, MPI_COMM_WORLD, &m3, &w3));
	MPI_Win_set_errhandler(w1, MPI_ERRORS_RETURN);
	MPI_Win_set_errhandler(w2, MPI_ERRORS_RETURN);
	MPI_Win_set_errhandler(w3, MPI_ERRORS_RETURN);
	for (int round = 0; round < 2; round++) {
		run(1, "Win_create on malloc", m1, w1);
		run(2, "Win_create on Alloc_mem", m2, w2);
		run(3, "Win_allocate", m3, w3);
	}
	MPI_OK(MPI_Win_free(&w1));
	MPI_OK(MPI_Win_free(&w2));
	MPI_OK(MPI_Win_free(&w3));
	free(m1);
	MPI_OK(MPI_Free_mem(m2));
	return mpit_finish("osc");
}
