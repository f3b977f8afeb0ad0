/* mpi stream: a window of W receive buffers packed into ONE malloc, each
 * buffer starting where the last ended (so neighbours share pages), all
 * posted with MPI_Irecv before the sender's W MPI_Isends; every byte of
 * every message is checked (issue 20: receives into one malloc lost data
 * when a neighbour's registration raced an RDMA into it). Ranks 2k send
 * to 2k+1, then the other way. The window is malloc'd anew every 4
 * iterations. */
#include "common.h"

#define W 16

int main(int argc, char **argv)
{
	static const size_t msz[] = {65536 + 40, 262144 + 8, 1044480, (1 << 20) + 24};
	const int iters = 12;

	mpit_init(&argc, &argv);
	if (nranks % 2) {
		if (!rank)
			fprintf(stderr, "stream needs an even number of ranks\n");
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	int peer = rank ^ 1;
	for (size_t mi = 0; mi < sizeof(msz) / sizeof(msz[0]); mi++) {
		size_t m = msz[mi];
		uint8_t *win = NULL, *src = malloc(W * m);
		MPI_Request req[W];
		MPI_Status sts[W];
		if (!src)
			MPI_Abort(MPI_COMM_WORLD, 2);
		for (int it = 0; it < 2 * iters; it++) {
			int sender = (it < iters) == !(rank & 1);
			if (it % 4 == 0) {
				free(win);
				win = malloc(W * m + 64);
				if (!win)
					MPI_Abort(MPI_COMM_WORLD, 2);
			}
			uint8_t *slot0 = win + 16;
			if (sender) {
				for (int k = 0; k < W; k++)
					pfill(src + k * m, m, (unsigned)it, (unsigned)k, (unsigned)mi);
				MPI_Barrier(MPI_COMM_WORLD); /* the receives are posted */
				for (int k = 0; k < W; k++)
					MPI_OK(MPI_Isend(src + k * m, (int)m, MPI_BYTE, peer, k, MPI_COMM_WORLD, &req[k]));
				MPI_OK(MPI_Waitall(W, req, sts));
			} else {
				memset(win, 0, W * m + 64);
				for (int k = 0; k < W; k++)
					MPI_OK(MPI_Irecv(slot0 + k * m, (int)m, MPI_BYTE, peer, k, MPI_COMM_WORLD, &req[k]));
				MPI_Barrier(MPI_COMM_WORLD);
				MPI_OK(MPI_Waitall(W, req, sts));
				for (int k = 0; k < W; k++) {
					char what[96];
					snprintf(what, sizeof(what), "iter %d: message %d of %zu B", it, k, m);
					pcheck(what, slot0 + k * m, m, (unsigned)it, (unsigned)k, (unsigned)mi);
				}
			}
			if (errors > 50)
				break;
		}
		free(win);
		free(src);
	}
	return mpit_finish("stream");
}
