/*
 * be_cuda_kv.c - the CUDA backend's KV pool (be_cuda_impl.h): allocation, the block
 * operations of be_ops (init, copy, compaction) and the state read-back for the
 * engine (kv_read_state). The slot state stays on the GPUs, so the table's kv_state
 * is NULL (be_cuda.c); the victims of a decode step come from the forward
 * (be_cuda_kv_victims, be_cuda_fwd.c).
 *
 * Every operation is a job run on all ranks at once, each rank on its KV heads of the
 * pool, through the rank's staging buffers. With opts.kv_int8 the pool holds int8 K/V
 * and two fp32 scales per (slot, KV head) instead of fp16 K/V (cuda_ref.h); every
 * operation that moves or frees a slot moves or clears its scales too.
 * Owns: the pool's device memory (freed by be_cuda_kv_free). Thread: engine (the
 * rank threads are internal).
 */
#include "be_cuda_impl.h"

#include "err.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>

size_t be_cuda_kv_block_bytes(void *ctx, int32_t block_size)
{
    struct cuda_be *c = ctx;
    const size_t slots = (size_t)c->cfg.n_kv_head * (size_t)block_size;
    /* K and V (2 bytes an element, or 1 with int8 plus a key and a value scale per
     * slot), then pos and score: the CPU backend's count, so --kv-cache-bytes and the
     * measured capacity hold about 1.9x the int8 tokens at head_dim 128. */
    const size_t elem = c->opts.kv_int8 ? 1 : 2;
    const size_t per_layer = 2 * slots * (size_t)c->cfg.head_dim * elem + slots * (4 + 4) +
                             (c->opts.kv_int8 ? 2 * slots * sizeof(float) : 0);
    return per_layer * (size_t)c->cfg.n_layer; /* over all ranks: each holds its heads */
}

size_t be_cuda_kv_capacity(void *ctx)
{
    return ((struct cuda_be *)ctx)->capacity;
}

/* Element counts of one layer's pool on rank r: K or V, and pos or score. */
static size_t kv_elems(const struct cuda_be *c, const struct cu_rank *r)
{
    return (size_t)c->n_blocks * (size_t)r->sh.n_kv_head * (size_t)c->cfg.head_dim *
           (size_t)c->block_size;
}

static size_t state_elems(const struct cuda_be *c, const struct cu_rank *r)
{
    return (size_t)c->n_blocks * (size_t)r->sh.n_kv_head * (size_t)c->block_size;
}

void be_cuda_kv_free(struct cuda_be *c, struct cu_rank *r)
{
    if (!r->layers) return;
    for (int32_t li = 0; li < c->cfg.n_layer; li++) {
        struct cu_layer *L = &r->layers[li];
        cudaFree(L->k);
        cudaFree(L->v);
        cudaFree(L->k8);
        cudaFree(L->v8);
        cudaFree(L->k_scale);
        cudaFree(L->v_scale);
        cudaFree(L->pos);
        cudaFree(L->score);
        L->k = L->v = NULL;
        L->k8 = L->v8 = NULL;
        L->k_scale = L->v_scale = NULL;
        L->pos = NULL;
        L->score = NULL;
    }
}

/* Allocate this rank's part of the pool (a job): every slot free, K and V (and the
 * int8 cache's scales) zero. */
static void job_kv_alloc(void *arg, int32_t rank)
{
    struct cuda_be *c = arg;
    struct cu_rank *r = &c->ranks[rank];
    if (be_cuda_fail(r, cudaSetDevice(r->device), "cudaSetDevice")) return;
    be_cuda_kv_free(c, r);
    const bool i8 = c->opts.kv_int8;
    const size_t kv = kv_elems(c, r) * (i8 ? 1 : 2), st = state_elems(c, r) * 4;
    for (int32_t li = 0; li < c->cfg.n_layer && !r->err; li++) {
        struct cu_layer *L = &r->layers[li];
        void **k = i8 ? (void **)&L->k8 : (void **)&L->k;
        void **v = i8 ? (void **)&L->v8 : (void **)&L->v;
        if (be_cuda_fail(r, cudaMalloc(k, kv), "KV pool (K)") ||
            be_cuda_fail(r, cudaMalloc(v, kv), "KV pool (V)") ||
            be_cuda_fail(r, cudaMalloc((void **)&L->pos, st), "KV pool (pos)") ||
            be_cuda_fail(r, cudaMalloc((void **)&L->score, st), "KV pool (score)"))
            return;
        if (i8 &&
            (be_cuda_fail(r, cudaMalloc((void **)&L->k_scale, st), "KV pool (K scales)") ||
             be_cuda_fail(r, cudaMalloc((void **)&L->v_scale, st), "KV pool (V scales)")))
            return;
        /* All bits set is -1 in int32: every slot free. */
        be_cuda_fail(r, cudaMemsetAsync(L->pos, 0xff, st, r->stream), "cudaMemset");
        be_cuda_fail(r, cudaMemsetAsync(L->score, 0, st, r->stream), "cudaMemset");
        be_cuda_fail(r, cudaMemsetAsync(*k, 0, kv, r->stream), "cudaMemset");
        be_cuda_fail(r, cudaMemsetAsync(*v, 0, kv, r->stream), "cudaMemset");
        if (i8) {
            be_cuda_fail(r, cudaMemsetAsync(L->k_scale, 0, st, r->stream), "cudaMemset");
            be_cuda_fail(r, cudaMemsetAsync(L->v_scale, 0, st, r->stream), "cudaMemset");
        }
    }
    be_cuda_fail(r, cudaStreamSynchronize(r->stream), "KV pool initialisation");
}

int be_cuda_kv_alloc(void *ctx, int32_t n_blocks, int32_t block_size)
{
    struct cuda_be *c = ctx;
    CHECK(c->loaded && n_blocks > 0 && block_size > 0);
    c->n_blocks = n_blocks;
    c->block_size = block_size;
    return be_cuda_run(c, job_kv_alloc);
}

/* The block operations have no error return in be_ops (on the CPU they cannot fail):
 * a GPU that fails one is lost, and the process stops with the reason rather than
 * serve from a pool it can no longer trust. */
static void run_or_abort(struct cuda_be *c, ranks_fn fn)
{
    if (be_cuda_run(c, fn)) {
        log_error("%s", err_msg());
        abort();
    }
}

/* Grow the rank's staging pair (device and pinned host) to n bytes. */
static int stage_reserve(struct cu_rank *r, size_t n)
{
    /* Every staged job starts here: make the rank's device current first (rank 0 runs
     * on the engine thread, which another backend may have moved). */
    if (be_cuda_fail(r, cudaSetDevice(r->device), "cudaSetDevice")) return r->err;
    if (n <= r->stage_cap) return r->err;
    cudaFree(r->stage_dev);
    cudaFreeHost(r->stage_host);
    r->stage_dev = r->stage_host = NULL;
    r->stage_cap = 0;
    n = MAX(n, (size_t)1 << 16);
    if (be_cuda_fail(r, cudaMalloc(&r->stage_dev, n), "staging buffer") ||
        be_cuda_fail(r, cudaMallocHost(&r->stage_host, n), "pinned staging buffer"))
        return r->err;
    r->stage_cap = n;
    return 0;
}

/* Copy n int32 to the front of the device staging buffer (through the pinned one);
 * returns the device pointer or NULL on error. */
static int32_t *stage_ints(struct cu_rank *r, const int32_t *src, size_t n, size_t extra)
{
    if (stage_reserve(r, n * 4 + extra)) return NULL;
    memcpy(r->stage_host, src, n * 4);
    if (be_cuda_fail(r,
                     cudaMemcpyAsync(r->stage_dev, r->stage_host, n * 4,
                                     cudaMemcpyHostToDevice, r->stream),
                     "upload"))
        return NULL;
    return r->stage_dev;
}

static void job_kv_init(void *arg, int32_t rank)
{
    struct cuda_be *c = arg;
    struct cu_rank *r = &c->ranks[rank];
    const int32_t *blocks = stage_ints(r, c->op_blocks, (size_t)c->op_n, 0);
    for (int32_t li = 0; blocks && li < c->cfg.n_layer; li++) {
        struct cu_layer *L = &r->layers[li];
        const cudaError_t e =
            c->opts.kv_int8
                ? cuda_kv_blocks_init_i8(L->v8, L->v_scale, L->pos, L->score, blocks,
                                         c->op_n, r->sh.n_kv_head, c->cfg.head_dim,
                                         c->block_size, r->stream)
                : cuda_kv_blocks_init(L->v, L->pos, L->score, blocks, c->op_n,
                                      r->sh.n_kv_head, c->cfg.head_dim, c->block_size,
                                      r->stream);
        if (be_cuda_fail(r, e, "cuda_kv_blocks_init")) return;
    }
    be_cuda_fail(r, cudaStreamSynchronize(r->stream), "kv_init_blocks");
}

void be_cuda_kv_init_blocks(void *ctx, const int32_t *blocks, int32_t n)
{
    struct cuda_be *c = ctx;
    if (n == 0) return;
    c->op_blocks = blocks;
    c->op_n = n;
    run_or_abort(c, job_kv_init);
}

static void job_kv_copy(void *arg, int32_t rank)
{
    struct cuda_be *c = arg;
    struct cu_rank *r = &c->ranks[rank];
    if (be_cuda_fail(r, cudaSetDevice(r->device), "cudaSetDevice")) return;
    const size_t st = (size_t)r->sh.n_kv_head * (size_t)c->block_size; /* per block */
    const bool i8 = c->opts.kv_int8;
    const size_t kv = st * (size_t)c->cfg.head_dim * (i8 ? 1 : 2); /* bytes per block */
    for (int32_t li = 0; li < c->cfg.n_layer && !r->err; li++) {
        struct cu_layer *L = &r->layers[li];
        char *kb = i8 ? (char *)L->k8 : (char *)L->k,
             *vb = i8 ? (char *)L->v8 : (char *)L->v;
        for (int32_t i = 0; i < c->op_n && !r->err; i++) {
            const size_t s = (size_t)c->op_src[i], d = (size_t)c->op_dst[i];
            const enum cudaMemcpyKind k = cudaMemcpyDeviceToDevice;
            be_cuda_fail(r, cudaMemcpyAsync(kb + d * kv, kb + s * kv, kv, k, r->stream),
                         "copy");
            be_cuda_fail(r, cudaMemcpyAsync(vb + d * kv, vb + s * kv, kv, k, r->stream),
                         "copy");
            if (i8) { /* the scales are part of the block's slots */
                be_cuda_fail(r,
                             cudaMemcpyAsync(L->k_scale + d * st, L->k_scale + s * st,
                                             st * 4, k, r->stream),
                             "copy");
                be_cuda_fail(r,
                             cudaMemcpyAsync(L->v_scale + d * st, L->v_scale + s * st,
                                             st * 4, k, r->stream),
                             "copy");
            }
            be_cuda_fail(
                r, cudaMemcpyAsync(L->pos + d * st, L->pos + s * st, st * 4, k, r->stream),
                "copy");
            be_cuda_fail(
                r,
                cudaMemcpyAsync(L->score + d * st, L->score + s * st, st * 4, k, r->stream),
                "copy");
        }
    }
    be_cuda_fail(r, cudaStreamSynchronize(r->stream), "kv_copy_blocks");
}

void be_cuda_kv_copy_blocks(void *ctx, const int32_t *src, const int32_t *dst, int32_t n)
{
    struct cuda_be *c = ctx;
    if (n == 0) return;
    c->op_src = src;
    c->op_dst = dst;
    c->op_n = n;
    run_or_abort(c, job_kv_copy);
}

/* H2O prefill compaction on this rank's KV heads: keep holds [n_layer, n_kv_head, n_keep]
 * for every KV head; the rank's rows of a layer are contiguous. */
static void job_kv_compact(void *arg, int32_t rank)
{
    struct cuda_be *c = arg;
    struct cu_rank *r = &c->ranks[rank];
    const int32_t L = c->cfg.n_layer, H = c->cfg.n_kv_head, Hr = r->sh.n_kv_head;
    const size_t nb = (size_t)CEIL_DIV(c->op_slots, c->block_size);
    const size_t per_layer = (size_t)Hr * (size_t)c->op_keep_n;
    if (stage_reserve(r, (nb + (size_t)L * per_layer) * 4)) return;
    int32_t *host = r->stage_host;
    memcpy(host, c->op_blocks, nb * 4);
    for (int32_t li = 0; li < L; li++)
        memcpy(host + nb + (size_t)li * per_layer,
               c->op_keep +
                   ((size_t)li * (size_t)H + (size_t)r->sh.kv_head0) * (size_t)c->op_keep_n,
               per_layer * 4);
    const size_t bytes = (nb + (size_t)L * per_layer) * 4;
    if (be_cuda_fail(
            r,
            cudaMemcpyAsync(r->stage_dev, host, bytes, cudaMemcpyHostToDevice, r->stream),
            "upload"))
        return;
    const int32_t *dev = r->stage_dev;
    for (int32_t li = 0; li < L; li++) {
        struct cu_layer *Ly = &r->layers[li];
        struct cuda_kv_compact_args a = {
            .k = Ly->k,
            .v = Ly->v,
            .pos = Ly->pos,
            .score = Ly->score,
            .blocks = dev,
            .keep = dev + nb + (size_t)li * per_layer,
            .n_slots = c->op_slots,
            .n_keep = c->op_keep_n,
            .n_head = Hr,
            .head_dim = c->cfg.head_dim,
            .block_size = c->block_size,
            .k8 = Ly->k8,
            .v8 = Ly->v8,
            .k_scale = Ly->k_scale,
            .v_scale = Ly->v_scale,
        };
        if (be_cuda_fail(r, cuda_kv_compact(&a, r->stream), "cuda_kv_compact")) return;
    }
    be_cuda_fail(r, cudaStreamSynchronize(r->stream), "kv_compact");
}

void be_cuda_kv_compact(void *ctx, const int32_t *blocks, int32_t n_slots,
                        const int32_t *keep, int32_t n_keep)
{
    struct cuda_be *c = ctx;
    c->op_blocks = blocks;
    c->op_slots = n_slots;
    c->op_keep = keep;
    c->op_keep_n = n_keep;
    run_or_abort(c, job_kv_compact);
}

/* One sequence's slot state of every layer, this rank's KV heads, into the engine's
 * [n_layer, n_kv_head, n_slots] arrays (the ranks write disjoint heads). The int8
 * cache's scales stay on the device: the engine's choices read pos and score only,
 * and the compaction that follows moves the scales on the device with their slots. */
static void job_kv_read(void *arg, int32_t rank)
{
    struct cuda_be *c = arg;
    struct cu_rank *r = &c->ranks[rank];
    const int32_t L = c->cfg.n_layer, H = c->cfg.n_kv_head, Hr = r->sh.n_kv_head,
                  n = c->op_slots;
    const size_t nb = (size_t)CEIL_DIV(n, c->block_size);
    const size_t per_layer = (size_t)Hr * (size_t)n; /* elements */
    const size_t state = (size_t)L * per_layer;
    const int32_t *blocks = stage_ints(r, c->op_blocks, nb, 2 * state * 4);
    if (!blocks) return;
    int32_t *pos_dev = (int32_t *)r->stage_dev + nb;
    float *score_dev = (float *)(pos_dev + state);
    for (int32_t li = 0; li < L; li++) {
        struct cu_layer *Ly = &r->layers[li];
        if (be_cuda_fail(r,
                         cuda_kv_blocks_gather_state(
                             pos_dev + li * per_layer, score_dev + li * per_layer, Ly->pos,
                             Ly->score, blocks, n, Hr, c->block_size, r->stream),
                         "cuda_kv_blocks_gather_state"))
            return;
    }
    int32_t *pos_host = (int32_t *)r->stage_host + nb;
    if (be_cuda_fail(r,
                     cudaMemcpyAsync(pos_host, pos_dev, 2 * state * 4,
                                     cudaMemcpyDeviceToHost, r->stream),
                     "download") ||
        be_cuda_fail(r, cudaStreamSynchronize(r->stream), "kv_read_state"))
        return;
    const float *score_host = (const float *)(pos_host + state);
    for (int32_t li = 0; li < L; li++) {
        /* This rank's KV heads are rows kv_head0 .. kv_head0 + Hr - 1 of the layer. */
        const size_t dst = ((size_t)li * (size_t)H + (size_t)r->sh.kv_head0) * (size_t)n;
        memcpy(c->op_pos_out + dst, pos_host + li * per_layer, per_layer * 4);
        memcpy(c->op_score_out + dst, score_host + li * per_layer, per_layer * 4);
    }
}

int be_cuda_kv_read_state(void *ctx, const int32_t *blocks, int32_t n_slots, int32_t *pos,
                          float *score)
{
    struct cuda_be *c = ctx;
    if (n_slots == 0) return 0;
    c->op_blocks = blocks;
    c->op_slots = n_slots;
    c->op_pos_out = pos;
    c->op_score_out = score;
    return be_cuda_run(c, job_kv_read);
}
