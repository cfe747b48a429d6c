/*
 * fakecuda_nccl.c - cuda/comm_nccl.h on the host: each rank's handle wraps a
 * shared-memory communicator (engine/comm_shm.h, which sums fp16 in fp32 and rounds
 * once) and checks what NCCL would need: the rank's device current, the buffer that
 * device's memory, the stream the rank's.
 *
 * Owns: the group (a comm_shm group) and each handle (with its comm_shm handle).
 * Thread: as comm_nccl.h.
 */
#include "fakecuda_impl.h"

#include "comm_nccl.h"
#include "comm_shm.h"
#include "err.h"

#include <pthread.h>
#include <stdlib.h>

struct comm_nccl_group {
    struct comm_shm_group *shm;
    int n_ranks;
    /* ncclCommInitRank is collective: every rank's open waits for the others here,
     * so a rank that never comes hangs the rest, as with NCCL. */
    pthread_barrier_t open;
};

struct fake_nccl {
    struct comm base;
    struct comm *shm;
    int device;
    cudaStream_t stream;
};

static int fake_allreduce(struct comm *c, void *buf, int64_t n, enum dtype dt)
{
    struct fake_nccl *f = (struct fake_nccl *)c;
    if (n > 0 && (fakecuda_current_device() != f->device ||
                  !fakecuda_dev_ok(buf, (size_t)n * (size_t)dtype_size(dt), "ncclAllReduce") ||
                  !fakecuda_stream_ok(f->stream, "ncclAllReduce"))) {
        fakecuda_violation("ncclAllReduce: rank %d (device %d, current %d): bad buffer or stream",
                           c->rank, f->device, fakecuda_current_device());
        /* Still join the collective, or the other ranks would wait for ever. */
        comm_allreduce_sum(f->shm, NULL, 0, dt);
        return err_set(ENG_EINVAL, "NCCL (fake): bad buffer");
    }
    return comm_allreduce_sum(f->shm, buf, n, dt);
}

static int fake_barrier(struct comm *c)
{
    return comm_barrier(((struct fake_nccl *)c)->shm);
}

static void fake_destroy(struct comm *c)
{
    struct fake_nccl *f = (struct fake_nccl *)c;
    comm_destroy(f->shm);
    free(f);
}

static const struct comm_ops fake_ops = {
    .name = "nccl",
    .allreduce_sum = fake_allreduce,
    .barrier = fake_barrier,
    .destroy = fake_destroy,
};

int comm_nccl_group_create(struct comm_nccl_group **out, int n_ranks)
{
    *out = NULL;
    struct comm_nccl_group *g = calloc(1, sizeof *g);
    if (!g) return err_set(ENG_ENOMEM, "NCCL (fake): out of memory");
    int err = comm_shm_group_create(&g->shm, n_ranks);
    if (err) {
        free(g);
        return err;
    }
    g->n_ranks = n_ranks;
    pthread_barrier_init(&g->open, NULL, (unsigned)n_ranks);
    *out = g;
    return 0;
}

int comm_nccl_open(struct comm_nccl_group *g, int rank, int device, cudaStream_t stream,
                   struct comm **out)
{
    *out = NULL;
    pthread_barrier_wait(&g->open);
    if (cudaSetDevice(device) != cudaSuccess)
        return err_set(ENG_EUNAVAILABLE, "NCCL (fake): no device %d", device);
    if (!fakecuda_stream_ok(stream, "comm_nccl_open"))
        return err_set(ENG_EINVAL, "NCCL (fake): stream of another device");
    struct fake_nccl *f = calloc(1, sizeof *f);
    if (!f) return err_set(ENG_ENOMEM, "NCCL (fake): out of memory");
    int err = comm_shm_open(g->shm, rank, &f->shm);
    if (err) {
        free(f);
        return err;
    }
    f->base = (struct comm){.ops = &fake_ops, .rank = rank, .size = g->n_ranks};
    f->device = device;
    f->stream = stream;
    *out = &f->base;
    return 0;
}

void comm_nccl_group_destroy(struct comm_nccl_group *g)
{
    if (!g) return;
    comm_shm_group_destroy(g->shm);
    pthread_barrier_destroy(&g->open);
    free(g);
}
