/*
 * comm_shm.h - the shared-memory communicator for CPU ranks that are threads of one
 * process (struct comm, comm.h).
 *
 * Set-up: one thread creates the group for N ranks, then each rank thread opens its
 * own handle with comm_shm_open(group, rank) and uses it through comm.h. After every
 * rank has destroyed its handle, the creator destroys the group.
 *
 * All-reduce (docs/tensor-parallel.md): each call publishes every rank's buffer
 * pointer, then rank r sums slice r of all N buffers, element by element in rank
 * order 0, 1, ..., N-1 (fp32 accumulator), and writes the sum back into slice r of
 * every buffer; a barrier ends the call. This is a reduce-scatter and an all-gather
 * fused on the shared buffers: each rank reads and writes n/N * N = n elements, and
 * the threads wait on pthread barriers (they sleep, they do not spin).
 * Determinism: every element is summed in the same order whatever the rank, call,
 * length or thread timing, and one rank writes the same value into every buffer, so
 * all ranks end bit-identical and a run is reproducible. For fp32 the result equals
 *   float s = b0[i]; s += b1[i]; ...; s += b{N-1}[i];
 * computed sequentially.
 */
#ifndef H2O_COMM_SHM_H
#define H2O_COMM_SHM_H

#include "comm.h"

struct comm_shm_group;

/*
 * Create a group of n_ranks >= 1 ranks. Returns 0 and the group in *out (the caller
 * owns it, freed with comm_shm_group_destroy), or ENG_EINVAL for n_ranks < 1.
 * Thread: any.
 */
int comm_shm_group_create(struct comm_shm_group **out, int n_ranks);

/*
 * Open rank `rank`'s handle on the group. Not collective: ranks open in any order,
 * and the first collective call waits for the rest. The group must outlive the
 * handle. Returns 0 and the handle in *out (freed with comm_destroy), or ENG_EINVAL
 * when rank is out of range or already open.
 * Thread: any (usually the rank's own thread).
 */
int comm_shm_open(struct comm_shm_group *g, int rank, struct comm **out);

/* Free the group (NULL is fine); every handle must be destroyed first. Thread: any. */
void comm_shm_group_destroy(struct comm_shm_group *g);

#endif
