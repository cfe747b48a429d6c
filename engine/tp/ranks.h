/*
 * ranks.h - run one job on N tensor-parallel ranks at once: the calling thread is
 * rank 0 and N - 1 worker threads are ranks 1..N-1 (DESIGN section 2: with tensor
 * parallelism the engine thread drives one worker thread per rank).
 *
 * A job is a function called once per rank with that rank's index, on that rank's
 * thread; ranks_run returns when every rank's call has returned. A rank's thread is
 * the same for the pool's whole life, which is what per-thread state needs: OpenMP's
 * thread count, a CUDA device made current, a cuBLAS handle, an NCCL communicator.
 * The jobs of one pool run one at a time, in the order ranks_run is called.
 *
 * Owns: the worker threads (joined by ranks_destroy). Thread: ranks_run and
 * ranks_destroy from the one thread that created the pool (rank 0's).
 */
#ifndef H2O_RANKS_H
#define H2O_RANKS_H

#include <stdint.h>

struct ranks;

/* A job: called as fn(arg, rank) on rank `rank`'s thread. */
typedef void (*ranks_fn)(void *arg, int32_t rank);

/*
 * Start a pool of n >= 1 ranks (n - 1 threads). Each worker first runs
 * init(arg, rank) when init is not NULL (for example omp_set_num_threads).
 * Returns 0, or ENG_ENOMEM when a thread cannot be started (none is left running).
 * Owns: *out (ranks_destroy).
 */
int ranks_create(struct ranks **out, int32_t n, ranks_fn init, void *init_arg);

/* N, the pool's rank count. */
int32_t ranks_size(const struct ranks *r);

/* Run fn(arg, rank) on every rank, rank 0 on this thread; return when all are done. */
void ranks_run(struct ranks *r, ranks_fn fn, void *arg);

/* Stop and join the workers. NULL is fine. */
void ranks_destroy(struct ranks *r);

#endif
