/*
 * be_cuda.c - the CUDA backend behind struct be_ops: set-up, weights, profile and
 * teardown, and the ops table (the KV pool and its block operations are
 * be_cuda_kv.c, the forward be_cuda_fwd.c; the state is described in be_cuda_impl.h).
 *
 * Every operation is a job run on all ranks at once (ranks.h), each on its own
 * thread with its own device current, and ends with the rank's stream synchronised:
 * the engine calls the backend synchronously (a forward's logits are needed before
 * the next step is built), so nothing is gained by leaving work in flight between
 * calls, and host staging buffers are free again when a call returns.
 *
 * Owns: everything in struct cuda_be. Thread: engine (the rank threads are internal).
 */
#include "be_cuda_impl.h"

#include "backend_cuda.h"
#include "comm_nccl.h"

#include "err.h"
#include "util.h"
#include "weights.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct be_ops cuda_ops;

int be_cuda_fail(struct cu_rank *r, cudaError_t e, const char *what)
{
    if (e == cudaSuccess) return r->err;
    if (!r->err) {
        r->err = e == cudaErrorMemoryAllocation ? ENG_ENOMEM : ENG_EUNAVAILABLE;
        snprintf(r->msg, sizeof r->msg, "CUDA rank %d (GPU %d): %s: %s", r->sh.rank, r->device,
                 what, cudaGetErrorString(e));
    }
    return r->err;
}

int be_cuda_fail_eng(struct cu_rank *r, int err)
{
    if (err && !r->err) {
        r->err = err;
        snprintf(r->msg, sizeof r->msg, "CUDA rank %d: %s", r->sh.rank, err_msg());
    }
    return r->err;
}

int be_cuda_run(struct cuda_be *c, ranks_fn fn)
{
    for (int32_t i = 0; i < c->n_rank; i++) c->ranks[i].err = 0;
    ranks_run(c->threads, fn, c);
    for (int32_t i = 0; i < c->n_rank; i++)
        if (c->ranks[i].err) return err_set(c->ranks[i].err, "%s", c->ranks[i].msg);
    return 0;
}

int be_cuda_reserve(struct cu_rank *r, void **p, size_t *cap, size_t n, const char *what)
{
    if (n <= *cap) return r->err;
    cudaFree(*p);
    *p = NULL;
    *cap = 0;
    if (be_cuda_fail(r, cudaMalloc(p, n), what)) return r->err;
    *cap = n;
    return 0;
}

int backend_cuda_device_count(void)
{
    /* No driver, no device: answer without touching CUDA, whose runtime would only
     * fail to find a driver (and sanitizer builds need not load it at all). */
    if (!be_cuda_driver_present()) return 0;
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
    return n;
}

/* Each rank thread: make its GPU current once (every CUDA call on the thread uses
 * it). Rank 0 is the engine thread, which sets it in every job instead. */
static void rank_thread_init(void *arg, int32_t rank)
{
    (void)arg;
    cudaSetDevice(rank);
}

/* The device of `rank` current on this thread; the stream and cuBLAS handle made on
 * it. */
static void job_open(void *arg, int32_t rank)
{
    struct cuda_be *c = arg;
    struct cu_rank *r = &c->ranks[rank];
    r->device = rank;
    if (be_cuda_fail(r, cudaSetDevice(r->device), "cudaSetDevice")) return;
    if (be_cuda_fail(r, cudaStreamCreateWithFlags(&r->stream, cudaStreamNonBlocking),
                     "cudaStreamCreate"))
        return;
    be_cuda_fail_eng(r, cuda_gemm_create(&r->gemm, r->device, r->stream));
}

/* The rank's NCCL communicator, once every rank has its stream (a job of its own:
 * ncclCommInitRank waits for all ranks, so a rank that failed job_open and skipped it
 * would leave the others waiting for ever). */
static void job_comm_open(void *arg, int32_t rank)
{
    struct cuda_be *c = arg;
    struct cu_rank *r = &c->ranks[rank];
    if (be_cuda_fail(r, cudaSetDevice(r->device), "cudaSetDevice")) return;
    be_cuda_fail_eng(r, comm_nccl_open(c->group, rank, r->device, r->stream, &r->comm));
}

int backend_cuda_create(struct backend *out, const struct be_cuda_opts *opts)
{
    const int n_rank = opts->tensor_parallel > 0 ? opts->tensor_parallel : 1;
    const float util = opts->gpu_memory_utilization > 0 ? opts->gpu_memory_utilization : 0.9f;
    if (n_rank > BE_MAX_TP || !(util > 0 && util <= 1))
        return err_set(ENG_EINVAL, "CUDA backend: tensor_parallel %d or gpu_memory_utilization "
                                   "%g out of range", opts->tensor_parallel, (double)util);
    const int n_dev = backend_cuda_device_count();
    if (n_dev == 0)
        return err_set(ENG_EUNAVAILABLE, "CUDA backend: no GPU found (no NVIDIA driver or no "
                                         "device); use --device cpu");
    if (n_dev < n_rank)
        return err_set(ENG_EUNAVAILABLE, "CUDA backend: tensor parallelism over %d ranks needs "
                                         "%d GPUs, %d found", n_rank, n_rank, n_dev);
    struct cuda_be *c = xcalloc(1, sizeof *c);
    c->opts = *opts;
    c->opts.gpu_memory_utilization = util;
    c->n_rank = n_rank;
    c->ranks = xcalloc((size_t)n_rank, sizeof *c->ranks);
    for (int32_t i = 0; i < n_rank; i++) c->ranks[i].sh = (struct shard){.rank = i, .size = n_rank};
    int err = ranks_create(&c->threads, n_rank, rank_thread_init, c);
    if (!err && n_rank > 1) err = comm_nccl_group_create(&c->group, n_rank);
    if (!err) err = be_cuda_run(c, job_open);
    /* NCCL's set-up is collective: every rank opens at once, each on its thread, and
     * only when every rank got this far. */
    if (!err && n_rank > 1) err = be_cuda_run(c, job_comm_open);
    out->ops = &cuda_ops;
    out->ctx = c;
    if (err) {
        backend_destroy(out);
        return err;
    }
    return 0;
}

/* ---- weights ---- */

/* src [n] fp32 to a new device buffer of fp16 (NULL src gives NULL). */
static uint16_t *upload_f16(struct cu_rank *r, const float *src, size_t n, const char *what)
{
    if (!src || r->err) return NULL;
    uint16_t *h = malloc(n * sizeof *h);
    if (!h) {
        r->err = ENG_ENOMEM;
        snprintf(r->msg, sizeof r->msg, "out of host memory converting %s", what);
        return NULL;
    }
#pragma omp parallel for schedule(static) if (n > ((size_t)1 << 16))
    for (size_t i = 0; i < n; i++) h[i] = f32_to_f16(src[i]);
    uint16_t *d = NULL;
    if (!be_cuda_fail(r, cudaMalloc((void **)&d, n * sizeof *d), what))
        be_cuda_fail(r, cudaMemcpy(d, h, n * sizeof *d, cudaMemcpyHostToDevice), what);
    free(h);
    return d;
}

/* A whole tensor "<prefix>.<what>" of [rows, cols] to the device as fp16. */
static uint16_t *load_whole(struct cu_rank *r, const struct weights *w, const char *prefix,
                            const char *what, int64_t rows, int64_t cols)
{
    float *f = NULL;
    if (r->err ||
        be_cuda_fail_eng(r, shard_read(w, prefix, what, shard_whole(rows, cols), &f)))
        return NULL;
    char name[128];
    snprintf(name, sizeof name, "%s.%s", prefix, what);
    uint16_t *d = upload_f16(r, f, (size_t)(rows * cols), name);
    free(f);
    return d;
}

static void load_layer(struct cuda_be *c, struct cu_rank *r, int32_t li)
{
    const struct opt_config *cfg = &c->cfg;
    const size_t hd = (size_t)cfg->hidden, attn = (size_t)r->sh.n_head * (size_t)cfg->head_dim;
    const size_t qkv = (size_t)(r->sh.n_head + 2 * r->sh.n_kv_head) * (size_t)cfg->head_dim;
    const size_t ffn = (size_t)r->sh.n_ffn;
    const size_t n_fc1 = (cfg->arch.mlp == ARCH_MLP_SWIGLU ? 2 : 1) * ffn;
    struct shard_layer sl;
    if (be_cuda_fail_eng(r, shard_read_layer(&r->sh, cfg, c->w, li, &sl))) return;
    struct cu_layer *L = &r->layers[li];
    /* A bias the family does not have is NULL in sl and stays NULL here. */
    L->qkv_w = upload_f16(r, sl.qkv_w, qkv * hd, "qkv weight");
    L->qkv_b = upload_f16(r, sl.qkv_b, qkv, "qkv bias");
    L->out_w = upload_f16(r, sl.out_w, hd * attn, "out_proj weight");
    L->out_b = upload_f16(r, sl.out_b, hd, "out_proj bias");
    L->fc1_w = upload_f16(r, sl.fc1_w, n_fc1 * hd, "fc1 weight");
    L->fc1_b = upload_f16(r, sl.fc1_b, n_fc1, "fc1 bias");
    L->fc2_w = upload_f16(r, sl.fc2_w, hd * ffn, "fc2 weight");
    L->fc2_b = upload_f16(r, sl.fc2_b, hd, "fc2 bias");
    L->ln1_w = upload_f16(r, sl.ln1_w, hd, "layer norm");
    L->ln1_b = upload_f16(r, sl.ln1_b, hd, "layer norm");
    L->ln2_w = upload_f16(r, sl.ln2_w, hd, "layer norm");
    L->ln2_b = upload_f16(r, sl.ln2_b, hd, "layer norm");
    shard_layer_free(&sl);
}

/* Load one rank's weights (a job): every rank reads only its shard, in parallel. */
static void job_load(void *arg, int32_t rank)
{
    struct cuda_be *c = arg;
    struct cu_rank *r = &c->ranks[rank];
    const struct opt_config *cfg = &c->cfg;
    const struct model_arch *a = &cfg->arch;
    const struct arch_names *nm = a->names;
    const int64_t hd = cfg->hidden, proj = cfg->word_embed_proj_dim, V = cfg->vocab_size;
    if (be_cuda_fail(r, cudaSetDevice(r->device), "cudaSetDevice")) return;
    if (be_cuda_fail_eng(r, shard_init(&r->sh, cfg, rank, c->n_rank))) return;
    r->embed = load_whole(r, c->w, nm->embed, "weight", V, proj);
    if (a->pos == ARCH_POS_LEARNED)
        r->pos_embed =
            load_whole(r, c->w, nm->pos_embed, "weight", cfg->max_pos + a->pos_offset, hd);
    if (a->pos == ARCH_POS_ROTARY && !r->err) {
        /* The frequencies on the host, as the CPU backend computes them, so that both
         * turn q and k by the same fp32 angles. */
        const size_t half = (size_t)(a->rope.dims / 2);
        float *f = xmalloc(half * sizeof *f);
        arch_rope_inv_freq(&a->rope, f);
        if (!be_cuda_fail(r, cudaMalloc((void **)&r->inv_freq, half * sizeof *f),
                          "inv_freq"))
            be_cuda_fail(
                r, cudaMemcpy(r->inv_freq, f, half * sizeof *f, cudaMemcpyHostToDevice),
                "inv_freq");
        free(f);
    }
    if (proj != hd) r->project_in = load_whole(r, c->w, "project_in", "weight", hd, proj);
    if (rank == 0) {
        if (proj != hd) r->project_out = load_whole(r, c->w, "project_out", "weight", proj, hd);
        if (a->final_norm) {
            r->lnf_w = load_whole(r, c->w, nm->final_norm, "weight", hd, 1);
            if (a->norm == ARCH_NORM_LAYERNORM)
                r->lnf_b = load_whole(r, c->w, nm->final_norm, "bias", hd, 1);
        }
        /* lm_head as the CPU backend picks it (be_cpu.c): OPT's own head when the
         * checkpoint has one, else the token embedding; the other families follow
         * tie_word_embeddings (tied: the embedding even when a file stores the head;
         * untied: the checkpoint's head, or a load error). */
        char head[96];
        snprintf(head, sizeof head, "%s.weight", nm->lm_head);
        const bool opt = a->family == ARCH_OPT;
        r->own_lm_head = weights_has(c->w, head) && (opt || !cfg->tied_lm_head);
        if (!r->own_lm_head && !opt && !cfg->tied_lm_head)
            be_cuda_fail_eng(r, err_set(ENG_ENOTFOUND,
                                        "%s: no tensor %s and tie_word_embeddings is false",
                                        cfg->name, head));
        r->lm_head =
            r->own_lm_head ? load_whole(r, c->w, nm->lm_head, "weight", V, proj) : r->embed;
    }
    r->layers = xcalloc((size_t)cfg->n_layer, sizeof *r->layers);
    for (int32_t li = 0; li < cfg->n_layer && !r->err; li++) load_layer(c, r, li);
    /* The uploads are synchronous cudaMemcpy calls from pageable memory on the legacy
     * default stream, and such a copy may return once its data is staged, before the
     * DMA into device memory is done. The forward runs on a non-blocking stream, which
     * does not wait for the legacy stream, so without this its first kernels could
     * read weights still in flight. Once per rank, on the rank's device. */
    be_cuda_fail(r, cudaDeviceSynchronize(), "weights upload");
}

/* After the weights: how much of this GPU the pool may take (a job). */
static void job_measure(void *arg, int32_t rank)
{
    struct cuda_be *c = arg;
    struct cu_rank *r = &c->ranks[rank];
    size_t free_b = 0, total_b = 0;
    if (be_cuda_fail(r, cudaSetDevice(r->device), "cudaSetDevice")) return;
    if (be_cuda_fail(r, cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo")) return;
    /* The pool gets util * total minus what is in use now (weights, CUDA context,
     * cuBLAS and NCCL buffers), less a reserve for the forward's workspace, which
     * grows with the batch: room for the step's tokens (max_step_tokens, 4096 by
     * default) and rows of logits (max_step_rows, 512); and on rank 0 the device
     * sampler's buffers for as many rows (be_cuda_sample.c: the rows built from the
     * kept logits and cuda_sample's scratch, 20 bytes per row and token, allocated
     * twice over as samp_reserve grows them), 1 GB for OPT's vocabulary at 512 rows,
     * which a decode step of that many sequences would otherwise fail for once the
     * pool has taken the rest. */
    const struct opt_config *cfg = &c->cfg;
    const size_t tok = c->opts.max_step_tokens > 0 ? (size_t)c->opts.max_step_tokens : 4096;
    const size_t rows = c->opts.max_step_rows > 0 ? (size_t)c->opts.max_step_rows : 512;
    const size_t V = (size_t)cfg->vocab_size;
    const size_t wide = (size_t)MAX(cfg->hidden, cfg->word_embed_proj_dim);
    const size_t samp = rank == 0 ? be_cuda_sample_reserve_bytes((int32_t)rows, (int32_t)V) : 0;
    /* Per token: x, h, tmp, par (4 wide rows), qkv and attn (at most 4 query-head
     * widths: GQA's k and v are narrower), ff and ff2 (3 n_ffn), in fp16. */
    const size_t ws = tok * 2 *
                          (4 * wide + 4 * (size_t)r->sh.n_head * (size_t)cfg->head_dim +
                           3 * (size_t)r->sh.n_ffn) +
                      rows * V * 4 + samp + ((size_t)256 << 20);
    const double budget = (double)c->opts.gpu_memory_utilization * (double)total_b -
                          (double)(total_b - free_b) - (double)ws;
    r->kv_room = budget > 0 ? (size_t)budget : 0;
}

/*
 * Whether the kernels cover cfg's description (arch.h), with n_rank ranks: every
 * family of arch.h as its fields say (norm kind, MLP kind, positions, GQA, window,
 * parallel residual, biases); the geometry the kernels need (even widths for their
 * fp16 pairs, head_dim at most 256, even rotary dims). A model outside that is refused
 * at load with ENG_EUNSUPPORTED rather than run wrong. The tensor-parallel split
 * (heads, KV heads and fc1 units divisible by n_rank) is shard_init's to refuse.
 */
static int supported(const struct opt_config *cfg, int32_t n_rank)
{
    const struct model_arch *a = &cfg->arch;
    if (cfg->head_dim % 2 || cfg->head_dim > 256 || cfg->hidden % 2)
        return err_set(ENG_EUNSUPPORTED,
                       "CUDA backend: head_dim %d must be even and at most "
                       "256",
                       cfg->head_dim);
    if (a->pos == ARCH_POS_ROTARY && (a->rope.dims <= 0 || a->rope.dims % 2))
        return err_set(ENG_EUNSUPPORTED,
                       "CUDA backend: %s: %d rotary dims, the kernel needs "
                       "an even number",
                       cfg->name, a->rope.dims);
    /* cuda_act and cuda_act_swiglu move fp16 pairs of each rank's fc1 units. */
    if (cfg->ffn % n_rank == 0 && (cfg->ffn / n_rank) % 2)
        return err_set(ENG_EUNSUPPORTED,
                       "CUDA backend: %s: %d MLP units per rank, the "
                       "kernels need an even number",
                       cfg->name, cfg->ffn / n_rank);
    if (a->mlp == ARCH_MLP_FC && a->act == ARCH_ACT_RELU && !a->mlp_bias)
        return err_set(ENG_EUNSUPPORTED,
                       "CUDA backend: %s: ReLU without an fc1 bias is not "
                       "supported",
                       cfg->name);
    return 0;
}

static int be_cuda_load(void *ctx, const struct opt_config *cfg, const struct weights *w)
{
    struct cuda_be *c = ctx;
    CHECK(!c->loaded);
    c->loaded = true; /* even on failure: destroy frees what was built */
    c->cfg = *cfg;
    int err = supported(cfg, c->n_rank);
    if (err) return err;
    c->w = w;
    err = be_cuda_run(c, job_load);
    c->w = NULL;
    if (!err) err = be_cuda_run(c, job_measure);
    if (!err) {
        /* Every rank holds the same blocks (its own heads of them), so the smallest
         * room bounds the pool; kv_capacity counts bytes over all ranks. */
        size_t least = SIZE_MAX;
        for (int32_t i = 0; i < c->n_rank; i++) least = MIN(least, c->ranks[i].kv_room);
        c->capacity = least * (size_t)c->n_rank;
    }
    return err;
}

/* ---- profile and teardown ---- */

/* Read and reset the profile; from the first call on, the forwards time their GEMM
 * and attention spans with events on rank 0's stream (be_cuda_prof.c). Rank 0 is
 * this thread: the last forward's events (complete) are read here. */
static void be_cuda_profile(void *ctx, struct be_profile *out)
{
    struct cuda_be *c = ctx;
    struct cu_rank *r = &c->ranks[0];
    if (r->timing && cudaSetDevice(r->device) == cudaSuccess)
        be_cuda_marks_read(r, &r->marks[r->mark_cur ^ 1]);
    c->prof.gemm_s = r->span_s[CU_SPAN_GEMM];
    c->prof.attn_s = r->span_s[CU_SPAN_ATTN];
    memset(r->span_s, 0, sizeof r->span_s);
    *out = c->prof;
    memset(&c->prof, 0, sizeof c->prof);
    c->timing = true;
}

static void free_layer(struct cu_layer *L)
{
    uint16_t *bufs[] = {L->qkv_w, L->qkv_b, L->out_w, L->out_b, L->fc1_w, L->fc1_b,
                        L->fc2_w, L->fc2_b, L->ln1_w, L->ln1_b, L->ln2_w, L->ln2_b};
    for (size_t i = 0; i < ARRAY_LEN(bufs); i++) cudaFree(bufs[i]);
}

/* Free one rank's device memory and handles (a job: on the rank's thread). */
static void job_close(void *arg, int32_t rank)
{
    struct cuda_be *c = arg;
    struct cu_rank *r = &c->ranks[rank];
    if (cudaSetDevice(r->device) != cudaSuccess) return;
    if (r->stream) cudaStreamSynchronize(r->stream);
    be_cuda_kv_free(c, r);
    if (r->layers)
        for (int32_t li = 0; li < c->cfg.n_layer; li++) free_layer(&r->layers[li]);
    free(r->layers);
    if (r->own_lm_head) cudaFree(r->lm_head);
    if (rank == 0) { /* the sampler's buffers live on rank 0's GPU */
        cudaFree(c->samp_dev);
        cudaFreeHost(c->samp_host);
    }
    uint16_t *bufs[] = {r->embed, r->pos_embed, r->project_in, r->project_out, r->lnf_w,
                        r->lnf_b, r->x,         r->h,          r->qkv,         r->attn,
                        r->ff,    r->ff2,       r->tmp,        r->par};
    for (size_t i = 0; i < ARRAY_LEN(bufs); i++) cudaFree(bufs[i]);
    cudaFree(r->inv_freq);
    cudaFree(r->lse);
    cudaFree(r->logits);
    cudaFree(r->meta);
    cudaFree(r->victims);
    cudaFreeHost(r->victims_host);
    cudaFree(r->stage_dev);
    cudaFreeHost(r->stage_host);
    be_cuda_marks_free(r);
    comm_destroy(r->comm);
    cuda_gemm_destroy(r->gemm);
    if (r->stream) cudaStreamDestroy(r->stream);
    memset(r, 0, sizeof *r);
}

static void be_cuda_destroy(void *ctx)
{
    struct cuda_be *c = ctx;
    if (!c) return;
    if (c->threads) ranks_run(c->threads, job_close, c);
    ranks_destroy(c->threads);
    comm_nccl_group_destroy(c->group);
    cudaFreeHost(c->meta_host);
    free(c->dec_index);
    free(c->runs);
    free(c->ranks);
    free(c);
}

static const struct be_ops cuda_ops = {
    .name = "cuda",
    .load = be_cuda_load,
    .kv_alloc = be_cuda_kv_alloc,
    .kv_block_bytes = be_cuda_kv_block_bytes,
    .kv_init_blocks = be_cuda_kv_init_blocks,
    .kv_copy_blocks = be_cuda_kv_copy_blocks,
    .kv_compact = be_cuda_kv_compact,
    .kv_state = NULL, /* on the GPUs: kv_read_state and kv_victims serve the engine */
    .kv_read_state = be_cuda_kv_read_state,
    .kv_victims = be_cuda_kv_victims,
    .sample = be_cuda_sample,
    .kv_capacity = be_cuda_kv_capacity,
    .forward = be_cuda_forward,
    .profile = be_cuda_profile,
    .destroy = be_cuda_destroy,
};
