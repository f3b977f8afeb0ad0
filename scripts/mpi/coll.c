/* mpi coll: MPI_Allreduce (sum of ints, max of doubles), MPI_Bcast from
 * every root and MPI_Alltoall, from a few elements to 4 MiB, every element
 * checked on every rank. */
#include "common.h"

int main(int argc, char **argv)
{
	mpit_init(&argc, &argv);
	char what[128];

	/* Allreduce */
	static const int counts[] = {1, 7, 1000, 65536, 1 << 20};
	for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++) {
		int n = counts[ci];
		for (int it = 0; it < 4; it++) {
			int *in = malloc((size_t)n * sizeof(int)), *out = malloc((size_t)n * sizeof(int));
			double *din = malloc((size_t)n * sizeof(double)), *dout = malloc((size_t)n * sizeof(double));
			for (int i = 0; i < n; i++) {
				in[i] = (rank + 1) * (i % 1000 + it);
				din[i] = (double)((i * 7 + rank * 13 + it) % (nranks * 5));
				out[i] = -1;
				dout[i] = -1;
			}
			MPI_OK(MPI_Allreduce(in, out, n, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
			MPI_OK(MPI_Allreduce(din, dout, n, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
			int bad = 0, dbad = 0;
			for (int i = 0; i < n; i++) {
				if (out[i] != nranks * (nranks + 1) / 2 * (i % 1000 + it))
					bad++;
				double want = -1;
				for (int r = 0; r < nranks; r++) {
					double v = (double)((i * 7 + r * 13 + it) % (nranks * 5));
					if (v > want)
						want = v;
				}
				if (dout[i] != want)
					dbad++;
			}
			if (bad || dbad) {
				fprintf(stderr, "rank %d: Allreduce of %d: %d bad sums, %d bad maxima\n", rank, n, bad, dbad);
				errors++;
			}
			free(in);
			free(out);
			free(din);
			free(dout);
		}
	}
	/* Bcast from each root */
	for (size_t n = 1; n <= (4u << 20); n *= 4) {
		uint8_t *b = malloc(n);
		for (int root = 0; root < nranks; root++) {
			if (rank == root)
				pfill(b, n, (unsigned)n, (unsigned)root, 7);
			else
				memset(b, 0, n);
			MPI_OK(MPI_Bcast(b, (int)n, MPI_BYTE, root, MPI_COMM_WORLD));
			snprintf(what, sizeof(what), "Bcast of %zu B from %d", n, root);
			pcheck(what, b, n, (unsigned)n, (unsigned)root, 7);
		}
		free(b);
	}
	/* Alltoall: block r of rank s's send buffer is message (s, r) */
	static const size_t blocks[] = {1, 100, 4096, 65536 + 8, 1 << 20};
	for (size_t bi = 0; bi < sizeof(blocks) / sizeof(blocks[0]); bi++) {
		size_t bl = blocks[bi];
		for (int it = 0; it < 3; it++) {
			uint8_t *s = malloc(bl * (size_t)nranks), *r = malloc(bl * (size_t)nranks);
			for (int p = 0; p < nranks; p++)
				pfill(s + (size_t)p * bl, bl, (unsigned)rank, (unsigned)p, (unsigned)(it + 10 * bi));
			memset(r, 0, bl * (size_t)nranks);
			MPI_OK(MPI_Alltoall(s, (int)bl, MPI_BYTE, r, (int)bl, MPI_BYTE, MPI_COMM_WORLD));
			for (int p = 0; p < nranks; p++) {
				snprintf(what, sizeof(what), "Alltoall block of %zu B from %d", bl, p);
				pcheck(what, r + (size_t)p * bl, bl, (unsigned)p, (unsigned)rank, (unsigned)(it + 10 * bi));
			}
			free(s);
			free(r);
		}
	}
	return mpit_finish("coll");
}
