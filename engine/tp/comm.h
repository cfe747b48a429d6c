/*
 * comm.h - the tensor-parallel communicator: one rank's handle on a group of N ranks
 * that sum buffers together (DESIGN section 4).
 *
 * Megatron-style tensor parallelism needs one collective, an in-place all-reduce
 * (sum) after out_proj and after fc2, plus a barrier. The interface is a small table
 * of function pointers behind an opaque handle, like struct be_ops, with two
 * implementations:
 *   - comm_shm.h: CPU ranks that are threads of one process, summing through shared
 *     memory (engine/comm_shm.c); this is what the CPU backend and CI use;
 *   - cuda/comm_nccl.h: one GPU per rank thread, one NCCL communicator per rank
 *     (built only with CUDA).
 * Code above the interface (the sharded forward) sees only struct comm.
 *
 * Every call below except comm_rank/comm_size/comm_destroy is collective: all N
 * ranks make the same sequence of calls with the same length and dtype, each from
 * its own thread, or the group deadlocks (as with MPI and NCCL). A rank's handle is
 * used by one thread at a time.
 *
 * Owns: nothing the caller passes; a handle is created by its implementation's open
 * function and freed by comm_destroy.
 * Errors: 0 or a negative engine code (err.h) with the thread's message set.
 */
#ifndef H2O_COMM_H
#define H2O_COMM_H

#include "dtype.h"

#include <stdint.h>

struct comm;

struct comm_ops {
    const char *name; /* "shm", "nccl" */
    /* See comm_allreduce_sum. */
    int (*allreduce_sum)(struct comm *c, void *buf, int64_t n, enum dtype dt);
    /* See comm_barrier. */
    int (*barrier)(struct comm *c);
    /* See comm_destroy. */
    void (*destroy)(struct comm *c);
};

/* The part every implementation's handle starts with; the rest is private. */
struct comm {
    const struct comm_ops *ops;
    int rank; /* 0 .. size-1 */
    int size; /* N, the number of ranks in the group */
};

/* This handle's rank, 0..N-1. Thread: the rank's. */
static inline int comm_rank(const struct comm *c)
{
    return c->rank;
}

/* N, the number of ranks in the group. Thread: the rank's. */
static inline int comm_size(const struct comm *c)
{
    return c->size;
}

/*
 * Replace buf [n] on every rank with the element-wise sum of all ranks' buf [n].
 * Collective. dt is DTYPE_F32, DTYPE_F16 or DTYPE_BF16; 16-bit elements are summed
 * in fp32 and rounded once (shm; NCCL sums in its own precision, see comm_nccl.h).
 * buf is host memory for shm and device memory for NCCL. n may be 0 (still a
 * collective call). Returns 0, or ENG_EINVAL when the ranks disagree on n or dt, n is
 * negative or buf is NULL with n > 0 (shm fails on every rank together), or
 * ENG_EUNSUPPORTED for a dtype the implementation cannot sum.
 * Thread: the rank's.
 */
static inline int comm_allreduce_sum(struct comm *c, void *buf, int64_t n, enum dtype dt)
{
    return c->ops->allreduce_sum(c, buf, n, dt);
}

/* Return once every rank has entered the barrier. Collective. Thread: the rank's. */
static inline int comm_barrier(struct comm *c)
{
    return c->ops->barrier(c);
}

/*
 * Free this rank's handle (NULL is fine). Not collective, but no rank may still be
 * in a collective call on the group. Thread: the rank's.
 */
static inline void comm_destroy(struct comm *c)
{
    if (c) c->ops->destroy(c);
}

#endif
