/*
 * comm_nccl.h - the NCCL communicator: one GPU per rank thread, one NCCL communicator
 * per rank, behind struct comm (engine/comm.h).
 *
 * NOT YET RUN: the machines that build this project have the CUDA toolkit and NCCL
 * but no GPU, so this file is compiled (with -Werror) and linked everywhere nvcc is
 * found, and tests/gpu/test_comm_nccl checks it only on a GPU machine
 * (tests/gpu/run.sh); without a device that test skips.
 *
 * Set-up: one thread creates the group, which draws the ncclUniqueId
 * (ncclGetUniqueId) that every rank's ncclCommInitRank needs; the rank threads then
 * call comm_nccl_open concurrently, each with its own device and stream. Ranks are
 * threads of one process, so the id is shared through the group object and never
 * sent over a socket.
 *
 * Mapping of comm.h onto NCCL:
 *   comm_allreduce_sum -> ncclAllReduce(buf, buf, n, type, ncclSum, comm, stream),
 *                         in place, enqueued on the rank's stream; it returns before
 *                         the sum is done (buf is device memory, ready when the stream
 *                         reaches it). n == 0 returns without calling NCCL.
 *   comm_barrier       -> a one-element all-reduce on a device scratch word, then
 *                         cudaStreamSynchronize: every rank's earlier work on its
 *                         stream is done and every rank got there.
 *   comm_destroy       -> ncclCommFinalize + ncclCommDestroy, then the scratch word.
 * Differences from comm_shm: NCCL cannot see that ranks disagree on n or the dtype
 * (the group hangs or reads past a buffer, as with any NCCL misuse); fp16 and bf16
 * are summed in NCCL's own precision and order (ring or tree, chosen by NCCL), so the
 * results match comm_shm's only to rounding, not bit for bit. NCCL gives every rank
 * the same result for a fixed topology and NCCL_ALGO/NCCL_PROTO choice.
 *
 * Errors: NCCL's invalid-argument and invalid-usage results become ENG_EINVAL; a
 * failed CUDA call or any other NCCL failure becomes ENG_EUNAVAILABLE (the device or
 * interconnect cannot serve), with NCCL's message.
 */
#ifndef H2O_COMM_NCCL_H
#define H2O_COMM_NCCL_H

#include "comm.h"

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

struct comm_nccl_group;

/*
 * Create a group of n_ranks >= 1 ranks and draw its NCCL unique id. Returns 0 and the
 * group in *out (the caller owns it, freed with comm_nccl_group_destroy after every
 * rank's handle), ENG_EINVAL for n_ranks < 1, or ENG_EUNAVAILABLE when NCCL cannot
 * make an id. Thread: any.
 */
int comm_nccl_group_create(struct comm_nccl_group **out, int n_ranks);

/*
 * Make `device` current on the calling thread and join the group as `rank` on it
 * (ncclCommInitRank). Collective: blocks until all n_ranks ranks have called it, each
 * from its own thread, each with a different device. `stream` (0: the legacy default
 * stream) is where this rank's collectives run; the caller owns it and keeps it alive
 * until comm_destroy. Returns 0 and the handle in *out (freed with comm_destroy), or
 * ENG_EINVAL (rank out of range or already open) or ENG_EUNAVAILABLE.
 * Thread: the rank's, which must keep `device` current for every later call.
 */
int comm_nccl_open(struct comm_nccl_group *g, int rank, int device, cudaStream_t stream,
                   struct comm **out);

/* Free the group (NULL is fine); every handle must be destroyed first. Thread: any. */
void comm_nccl_group_destroy(struct comm_nccl_group *g);

#ifdef __cplusplus
}
#endif

#endif
