/* mpi pingpong: ranks 2k and 2k+1 exchange messages of every power of two
 * from 1 B to 4 MiB (and a few odd sizes), each iteration with its own
 * data; every byte is checked at both ends, and the bytes just past the
 * message must stay as they were. Every 8th iteration the buffers are
 * malloc'd anew (so a registration cache cannot hide a registration), and
 * at each new size they grow by realloc.
 *
 *   pingpong          the check
 *   pingpong -b       the benchmark, no check: latency at 8 B (half the
 *                     round trip, 2,000 of them), then bandwidth from
 *                     256 KiB to 4 MiB (MB/s: bytes both ways / time) */
#include <unistd.h>

#include "common.h"

#define MAXN (4u << 20)
#define GUARD 64

int main(int argc, char **argv)
{
	int bench = argc > 1 && !strcmp(argv[1], "-b");

	mpit_init(&argc, &argv);
	if (nranks % 2) {
		if (!rank)
			fprintf(stderr, "pingpong needs an even number of ranks\n");
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	int peer = rank ^ 1, first = !(rank & 1);
	size_t sizes[64];
	int ns = 0;
	if (bench) {
		sizes[ns++] = 8;
		for (size_t s = 256 << 10; s <= MAXN; s *= 2)
			sizes[ns++] = s;
	} else {
		for (size_t s = 1; s <= MAXN; s *= 2)
			sizes[ns++] = s;
		sizes[ns++] = 3;
		sizes[ns++] = 1000;
		sizes[ns++] = 65537;
		sizes[ns++] = 1044480;
		sizes[ns++] = MAXN - 1;
	}
	uint8_t *sbuf = NULL, *rbuf = NULL;
	for (int si = 0; si < ns; si++) {
		size_t n = sizes[si];
		int iters = bench ? (n < 4096 ? 2000 : 40) : n >= (1 << 20) ? 10 : 20;
		if (bench) {
			free(sbuf);
			free(rbuf);
			sbuf = malloc(n);
			rbuf = malloc(n);
			memset(sbuf, 1, n);
			MPI_Barrier(MPI_COMM_WORLD);
			/* warm-up round trips */
			for (int it = n < 4096 ? -100 : -2; it < iters; it++) {
				static double t0;
				if (it == 0)
					t0 = MPI_Wtime();
				if (first) {
					MPI_OK(MPI_Send(sbuf, (int)n, MPI_BYTE, peer, 1, MPI_COMM_WORLD));
					MPI_OK(MPI_Recv(rbuf, (int)n, MPI_BYTE, peer, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
				} else {
					MPI_OK(MPI_Recv(rbuf, (int)n, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
					MPI_OK(MPI_Send(sbuf, (int)n, MPI_BYTE, peer, 2, MPI_COMM_WORLD));
				}
				if (it == iters - 1 && rank == 0 && n < 4096) {
					double dt = MPI_Wtime() - t0;
					printf("pingpong %8zu B: %9.2f us one way (half a round trip, %d round trips)\n", n,
					       dt / iters / 2 * 1e6, iters);
				} else if (it == iters - 1 && rank == 0) {
					double dt = MPI_Wtime() - t0;
					printf("pingpong %8zu B: %9.1f MB/s  %9.1f us per round trip\n", n,
					       2.0 * (double)n * iters / dt / 1e6, dt / iters * 1e6);
				}
			}
			continue;
		}
		/* grown by realloc at each new size (the old buffers were
		 * sent from and received into), malloc'd anew every 8th
		 * iteration */
		sbuf = realloc(sbuf, n + GUARD);
		rbuf = realloc(rbuf, n + GUARD);
		if (!sbuf || !rbuf)
			MPI_Abort(MPI_COMM_WORLD, 2);
		for (int it = 0; it < iters; it++) {
			if (it % 8 == 7) {
				free(sbuf);
				free(rbuf);
				sbuf = malloc(n + GUARD);
				rbuf = malloc(n + GUARD);
				if (!sbuf || !rbuf)
					MPI_Abort(MPI_COMM_WORLD, 2);
			}
			char what[96];
			unsigned tag = (unsigned)(si * 1000 + it);
			memset(rbuf, 0xee, n + GUARD);
			if (first) {
				pfill(sbuf, n, tag, 1, (unsigned)rank);
				MPI_OK(MPI_Send(sbuf, (int)n, MPI_BYTE, peer, 1, MPI_COMM_WORLD));
				MPI_OK(MPI_Recv(rbuf, (int)n, MPI_BYTE, peer, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
				snprintf(what, sizeof(what), "pong of %zu B, iteration %d", n, it);
				pcheck(what, rbuf, n, tag, 2, (unsigned)peer);
			} else {
				MPI_OK(MPI_Recv(rbuf, (int)n, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
				snprintf(what, sizeof(what), "ping of %zu B, iteration %d", n, it);
				pcheck(what, rbuf, n, tag, 1, (unsigned)peer);
				pfill(sbuf, n, tag, 2, (unsigned)rank);
				MPI_OK(MPI_Send(sbuf, (int)n, MPI_BYTE, peer, 2, MPI_COMM_WORLD));
			}
			for (int g = 0; g < GUARD; g++)
				if (rbuf[n + g] != 0xee) {
					fprintf(stderr, "rank %d: %zu B iteration %d: byte %d past the message changed\n",
						rank, n, it, g);
					errors++;
					break;
				}
		}
		if (errors > 50)
			break;
	}
	free(sbuf);
	free(rbuf);
	return mpit_finish(bench ? "pingpong -b" : "pingpong");
}
