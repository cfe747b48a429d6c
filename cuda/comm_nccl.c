/*
 * comm_nccl.c - struct comm over NCCL: one communicator per rank thread (comm_nccl.h).
 *
 * NOT YET RUN on a GPU: compiled and linked on the build machines (no device there);
 * tests/gpu/test_comm_nccl exercises it on a GPU machine.
 *
 * Owns: the group's unique id and open-rank table; each rank's ncclComm_t and its
 * one-float device scratch word (for the barrier). Not the stream, not the buffers.
 * Thread: each handle by its rank's thread, with the rank's device current.
 */
#include "comm_nccl.h"

#include "err.h"
#include "util.h"

#include <nccl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

struct comm_nccl_group {
    int n_ranks;
    ncclUniqueId id;    /* drawn once; every rank's ncclCommInitRank reads it */
    pthread_mutex_t mu; /* guards opened[] */
    bool *opened;       /* [n_ranks] */
};

struct comm_nccl {
    struct comm base; /* first member: a struct comm * is a struct comm_nccl * */
    struct comm_nccl_group *g;
    ncclComm_t nc;
    cudaStream_t stream; /* the caller's */
    float *scratch;      /* [1] device memory, summed by the barrier */
};

static int nccl_fail(ncclResult_t r, ncclComm_t nc, const char *what)
{
    int code =
        r == ncclInvalidArgument || r == ncclInvalidUsage ? ENG_EINVAL : ENG_EUNAVAILABLE;
    const char *detail = ncclGetLastError(nc);
    return err_set(code, "%s: %s%s%s", what, ncclGetErrorString(r),
                   detail && *detail ? ": " : "", detail ? detail : "");
}

static int cuda_fail(cudaError_t e, const char *what)
{
    return err_set(ENG_EUNAVAILABLE, "%s: %s", what, cudaGetErrorString(e));
}

static int nccl_type(enum dtype dt, ncclDataType_t *out)
{
    switch (dt) {
    case DTYPE_F32: *out = ncclFloat32; return 0;
    case DTYPE_F16: *out = ncclFloat16; return 0;
    case DTYPE_BF16: *out = ncclBfloat16; return 0;
    case DTYPE_I8: break; /* a KV storage type: never summed */
    }
    return err_set(ENG_EUNSUPPORTED, "comm_allreduce_sum: dtype %d", (int)dt);
}

static int nccl_allreduce_sum(struct comm *c, void *buf, int64_t n, enum dtype dt)
{
    struct comm_nccl *s = (struct comm_nccl *)c;
    ncclDataType_t type = ncclFloat32;
    int err = nccl_type(dt, &type);
    if (err) return err;
    if (n < 0 || (n > 0 && !buf))
        return err_set(ENG_EINVAL, "comm_allreduce_sum: n=%lld, %s", (long long)n,
                       buf ? "a buffer" : "no buffer");
    if (n == 0) return 0;
    ncclResult_t r = ncclAllReduce(buf, buf, (size_t)n, type, ncclSum, s->nc, s->stream);
    return r == ncclSuccess ? 0 : nccl_fail(r, s->nc, "ncclAllReduce");
}

static int nccl_barrier(struct comm *c)
{
    struct comm_nccl *s = (struct comm_nccl *)c;
    ncclResult_t r =
        ncclAllReduce(s->scratch, s->scratch, 1, ncclFloat32, ncclSum, s->nc, s->stream);
    if (r != ncclSuccess) return nccl_fail(r, s->nc, "comm_barrier: ncclAllReduce");
    cudaError_t e = cudaStreamSynchronize(s->stream);
    return e == cudaSuccess ? 0 : cuda_fail(e, "comm_barrier: cudaStreamSynchronize");
}

static void nccl_destroy(struct comm *c)
{
    struct comm_nccl *s = (struct comm_nccl *)c;
    if (s->nc) {
        /* Finalize waits for this rank's outstanding collectives; errors here cannot
         * be acted on by a caller that is tearing down. */
        (void)ncclCommFinalize(s->nc);
        (void)ncclCommDestroy(s->nc);
    }
    if (s->scratch) (void)cudaFree(s->scratch);
    pthread_mutex_lock(&s->g->mu);
    s->g->opened[c->rank] = false;
    pthread_mutex_unlock(&s->g->mu);
    free(s);
}

static const struct comm_ops nccl_ops = {
    .name = "nccl",
    .allreduce_sum = nccl_allreduce_sum,
    .barrier = nccl_barrier,
    .destroy = nccl_destroy,
};

int comm_nccl_group_create(struct comm_nccl_group **out, int n_ranks)
{
    *out = NULL;
    if (n_ranks < 1)
        return err_set(ENG_EINVAL, "comm_nccl_group_create: %d ranks (need >= 1)", n_ranks);
    struct comm_nccl_group *g = xcalloc(1, sizeof *g);
    g->n_ranks = n_ranks;
    ncclResult_t r = ncclGetUniqueId(&g->id);
    if (r != ncclSuccess) {
        free(g);
        return nccl_fail(r, NULL, "ncclGetUniqueId");
    }
    g->opened = xcalloc((size_t)n_ranks, sizeof *g->opened);
    CHECK(pthread_mutex_init(&g->mu, NULL) == 0);
    *out = g;
    return 0;
}

int comm_nccl_open(struct comm_nccl_group *g, int rank, int device, cudaStream_t stream,
                   struct comm **out)
{
    *out = NULL;
    if (rank < 0 || rank >= g->n_ranks)
        return err_set(ENG_EINVAL, "comm_nccl_open: rank %d of %d", rank, g->n_ranks);
    pthread_mutex_lock(&g->mu);
    bool was_open = g->opened[rank];
    g->opened[rank] = true;
    pthread_mutex_unlock(&g->mu);
    if (was_open)
        return err_set(ENG_EINVAL, "comm_nccl_open: rank %d is already open", rank);

    struct comm_nccl *s = xcalloc(1, sizeof *s);
    s->base.ops = &nccl_ops;
    s->base.rank = rank;
    s->base.size = g->n_ranks;
    s->g = g;
    s->stream = stream;
    int err = 0;
    cudaError_t e = cudaSetDevice(device);
    if (e != cudaSuccess) {
        err = cuda_fail(e, "comm_nccl_open: cudaSetDevice");
        goto fail;
    }
    e = cudaMalloc((void **)&s->scratch, sizeof(float));
    if (e != cudaSuccess) {
        err = cuda_fail(e, "comm_nccl_open: cudaMalloc");
        goto fail;
    }
    /* Blocks until all n_ranks ranks have joined with the same id. */
    ncclResult_t r = ncclCommInitRank(&s->nc, g->n_ranks, g->id, rank);
    if (r != ncclSuccess) {
        s->nc = NULL;
        err = nccl_fail(r, NULL, "ncclCommInitRank");
        goto fail;
    }
    *out = &s->base;
    return 0;
fail:
    nccl_destroy(&s->base); /* safe on a half-built handle; clears opened[rank] */
    return err;
}

void comm_nccl_group_destroy(struct comm_nccl_group *g)
{
    if (!g) return;
    pthread_mutex_destroy(&g->mu);
    free(g->opened);
    free(g);
}
