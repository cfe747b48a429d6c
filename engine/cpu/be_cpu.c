/*
 * be_cpu.c - the CPU backend: the readable reference implementation of be_ops.
 *
 * Owns: the tables every rank reads (token and position embeddings), the final
 * LayerNorm, project_out and the LM head (run by rank 0), the KV pool with its slot
 * state, the tensor-parallel ranks (cpu_rank.h) and the worker threads of ranks
 * 1..N-1. Every GEMM is a cpu_linear (oneDNN matmul created once at load, runtime
 * M); everything else is an OpenMP loop in cpu_ops / cpu_attn. With dtype bf16 the
 * weights, the activations entering GEMMs and the KV cache are bf16; the residual
 * stream, LayerNorm, softmax, scores and logits stay fp32.
 *
 * Tensor parallelism (opts.tensor_parallel = N > 1): the engine thread is rank 0 and
 * N - 1 worker threads (ranks.h) run the other ranks; a forward runs every rank's
 * part at once and returns when all are done. The ranks meet in the all-reduces of the
 * shared-memory communicator (comm_shm.h). The OpenMP threads are split evenly between
 * the ranks.
 *
 * Device-state emulation (opts.device_state, be_cpu_device.c): the slot state stays
 * in the host pool, but the backend serves it as the CUDA backend does, so the
 * engine's device path runs and is tested here: the ops table handed out has no
 * kv_state, kv_read_state copies a sequence's state out, and after every forward
 * the victim of each (layer, head) of every decode token with an H2O budget is
 * chosen on the spot, the way a device decode pass does, and kept for kv_victims; a
 * forward without a logits destination keeps them for sample, which runs the
 * sampler's device half (sampler_sample_u). Without it the ops table has kv_state
 * and kv_read_state (a plain gather, valid either way) but no kv_victims or sample:
 * the engine evicts and samples on the host.
 * Thread: engine only (the workers are internal).
 */
#include "backend.h"
#include "backend_cpu.h"
#include "be_cpu_device.h"
#include "comm_shm.h"
#include "cpu_attn.h"
#include "cpu_gemm.h"
#include "cpu_ops.h"
#include "cpu_rank.h"
#include "cpu_threads.h"
#include "err.h"
#include "ranks.h"
#include "shard.h"
#include "util.h"
#include "weights.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct cpu_be {
    struct be_cpu_opts opts;
    struct cpu_model m;            /* shared tables; m.kv points at kv once allocated */
    struct cpu_kv_layer *kv;       /* [n_layer] the pool, every head */
    struct cpu_linear project_out; /* when proj != hidden (rank 0's) */
    float *lnf_w, *lnf_b;          /* [hidden] final norm (not OPT post-LN; b: LayerNorm) */
    struct cpu_linear lm_head;     /* [proj] -> [vocab], fp32 out (rank 0's) */
    int32_t n_rank;                /* N, tensor-parallel ranks */
    int rank_threads;              /* OpenMP threads per rank */
    struct cpu_rank *ranks;        /* [n_rank]; ranks[0] runs on the engine thread */
    struct comm_shm_group *group;  /* NULL when n_rank == 1 */
    struct ranks *threads;         /* rank threads; rank 0 is the engine thread */
    const struct be_batch *batch;  /* the forward's batch, read by every rank */
    int32_t n_blocks;
    struct be_cpu_device dev; /* device_state only: victims and kept logits */
    struct be_profile prof; /* time spent since the last profile read */
    bool loaded;
};

static const struct be_ops cpu_ops, cpu_device_ops;

int backend_cpu_has_bf16(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512bf16");
}

int backend_cpu_create(struct backend *out, const struct be_cpu_opts *opts)
{
    if (opts->dtype != DTYPE_F32 && opts->dtype != DTYPE_BF16)
        return err_set(ENG_EUNSUPPORTED, "CPU backend: dtype %s is not supported",
                       dtype_name(opts->dtype));
    if (opts->dtype == DTYPE_BF16 && !backend_cpu_has_bf16())
        return err_set(ENG_EUNSUPPORTED, "CPU backend: bf16 needs AVX512-BF16, which this "
                                         "CPU lacks; use --dtype fp32");
    if (opts->kv_dtype_set && opts->kv_dtype != DTYPE_F32 && opts->kv_dtype != DTYPE_BF16 &&
        opts->kv_dtype != DTYPE_I8)
        return err_set(ENG_EUNSUPPORTED,
                       "CPU backend: KV cache dtype %s is not supported (fp32, bf16, int8)",
                       dtype_name(opts->kv_dtype));
    if (opts->tensor_parallel < 0 || opts->tensor_parallel > BE_MAX_TP)
        return err_set(ENG_EINVAL, "CPU backend: tensor_parallel %d is not in 1..%d",
                       opts->tensor_parallel, BE_MAX_TP);
    struct cpu_be *c = xcalloc(1, sizeof *c);
    c->opts = *opts;
    c->m.dtype = opts->dtype;
    c->m.kv_dtype = opts->kv_dtype_set ? opts->kv_dtype : opts->dtype;
    c->n_rank = opts->tensor_parallel > 0 ? opts->tensor_parallel : 1;
    if (opts->n_threads > 0) omp_set_num_threads(opts->n_threads);
    /* The cores are split between the ranks: N teams of T / N threads. */
    c->rank_threads = MAX(1, omp_get_max_threads() / c->n_rank);
    log_info("CPU backend: %d OpenMP threads, %s, oneDNN ISA %s", omp_get_max_threads(),
             cpu_threads_wait_policy(), cpu_gemm_isa());
    c->ranks = xcalloc((size_t)c->n_rank, sizeof *c->ranks);
    out->ops = opts->device_state ? &cpu_device_ops : &cpu_ops;
    out->ctx = c;
    return 0;
}

/* Each rank thread's OpenMP team: the cores split evenly between the ranks. */
static void rank_thread_init(void *arg, int32_t rank)
{
    (void)rank;
    omp_set_num_threads(((struct cpu_be *)arg)->rank_threads);
}

/* Set up the ranks for c->m.cfg: the communicator, each rank's head and fc1 range
 * and oneDNN engine, and the worker threads. */
static int ranks_start(struct cpu_be *c)
{
    const struct opt_config *cfg = &c->m.cfg;
    const int32_t N = c->n_rank;
    struct shard whole;
    int err = shard_init(&whole, cfg, 0, N); /* heads and ffn must divide by N */
    if (err) return err;
    if (N > 1) CHECK(comm_shm_group_create(&c->group, N) == 0);
    for (int32_t r = 0; r < N; r++) {
        struct comm *comm = NULL;
        if (N > 1) CHECK(comm_shm_open(c->group, r, &comm) == 0);
        err = cpu_rank_init(&c->ranks[r], &c->m, r, N, comm);
        if (err) return err;
    }
    return ranks_create(&c->threads, N, rank_thread_init, c);
}

/* A whole [n, k] matrix without bias into a linear layer with fp32 output. */
static int load_whole(struct cpu_rank *r, const struct cpu_model *m,
                      const struct weights *w, struct cpu_linear *l, const char *prefix,
                      int64_t n, int64_t k)
{
    float *wt = NULL;
    int err = shard_read(w, prefix, "weight", shard_whole(n, k), &wt);
    if (!err) err = cpu_rank_linear(r, m, l, wt, NULL, n, k, DTYPE_F32, false);
    free(wt);
    return err;
}

static int cpu_load(void *ctx, const struct opt_config *cfg, const struct weights *w)
{
    struct cpu_be *c = ctx;
    CHECK(!c->loaded);
    c->loaded = true; /* even on failure: destroy frees what was built */
    c->m.cfg = *cfg;
    if (!cpu_attn_supports(cfg->head_dim, 16))
        return err_set(ENG_EUNSUPPORTED,
                       "CPU backend: head_dim %d is not a multiple of 16 "
                       "up to 256",
                       cfg->head_dim);
    c->kv = xcalloc((size_t)cfg->n_layer, sizeof *c->kv);
    int err = ranks_start(c);
    if (err) return err;
    const struct model_arch *a = &cfg->arch;
    const struct arch_names *nm = a->names;
    const int64_t hd = cfg->hidden, proj = cfg->word_embed_proj_dim, V = cfg->vocab_size;
    struct cpu_rank *r0 = &c->ranks[0];
    err = shard_read(w, nm->embed, "weight", shard_whole(V, proj), &c->m.embed);
    if (!err && a->pos == ARCH_POS_LEARNED)
        err = shard_read(w, nm->pos_embed, "weight",
                         shard_whole(cfg->max_pos + a->pos_offset, hd), &c->m.pos_embed);
    if (!err && a->pos == ARCH_POS_ROTARY) {
        c->m.inv_freq = xmalloc((size_t)(a->rope.dims / 2) * sizeof *c->m.inv_freq);
        arch_rope_inv_freq(&a->rope, c->m.inv_freq);
    }
    if (!err && proj != hd)
        err = load_whole(r0, &c->m, w, &c->project_out, "project_out", proj, hd);
    if (!err && a->final_norm) {
        err = shard_read(w, nm->final_norm, "weight", shard_whole(hd, 1), &c->lnf_w);
        if (!err && a->norm == ARCH_NORM_LAYERNORM)
            err = shard_read(w, nm->final_norm, "bias", shard_whole(hd, 1), &c->lnf_b);
    }
    if (!err) {
        /* Tied (tie_word_embeddings, OPT's default): the token embedding is the head,
         * whether or not the checkpoint also stores it (torch .bin files store the
         * shared tensor again; safetensors drops it). Untied: the checkpoint's own. */
        char head[96];
        snprintf(head, sizeof head, "%s.weight", nm->lm_head);
        if (cfg->tied_lm_head)
            err = cpu_gemm_linear_init(&c->lm_head, &r0->dnnl, c->m.embed, NULL, V, proj,
                                       c->m.dtype, DTYPE_F32, false);
        else if (weights_has(w, head))
            err = load_whole(r0, &c->m, w, &c->lm_head, nm->lm_head, V, proj);
        else
            err =
                err_set(ENG_ENOTFOUND, "%s: no tensor %s and tie_word_embeddings is false",
                        cfg->name, head);
    }
    /* Each rank reads only its shard of the layers. */
    for (int32_t r = 0; r < c->n_rank && !err; r++)
        err = cpu_rank_load(&c->ranks[r], &c->m, w);
    return err;
}

static size_t cpu_kv_block_bytes(void *ctx, int32_t block_size)
{
    struct cpu_be *c = ctx;
    size_t slots = (size_t)c->m.cfg.n_kv_head * (size_t)block_size;
    /* K and V, pos and score, and with int8 K/V one fp32 scale each per slot: about
     * 0.55x bf16's bytes at head_dim 64, so the same memory holds ~1.8x the tokens. */
    size_t per_layer =
        2 * slots * (size_t)c->m.cfg.head_dim * (size_t)dtype_size(c->m.kv_dtype) +
        slots * (sizeof(int32_t) + sizeof(float)) +
        (c->m.kv_dtype == DTYPE_I8 ? 2 * slots * sizeof(float) : 0);
    return per_layer * (size_t)c->m.cfg.n_layer;
}

static void kv_free(struct cpu_be *c)
{
    if (!c->kv) return;
    for (int32_t li = 0; li < c->m.cfg.n_layer; li++) {
        struct cpu_kv_layer *kv = &c->kv[li];
        free(kv->k);
        free(kv->v);
        free(kv->pos);
        free(kv->score);
        free(kv->k_scale);
        free(kv->v_scale);
        memset(kv, 0, sizeof *kv);
    }
    c->n_blocks = 0;
}

/* A second call replaces the pool (its contents are lost). */
static int cpu_kv_alloc(void *ctx, int32_t n_blocks, int32_t block_size)
{
    struct cpu_be *c = ctx;
    CHECK(c->loaded && n_blocks > 0);
    if (!cpu_attn_supports(c->m.cfg.head_dim, block_size))
        return err_set(ENG_EINVAL, "CPU backend: block size %d is not in 1..64",
                       block_size);
    kv_free(c);
    const size_t slots = (size_t)n_blocks * (size_t)c->m.cfg.n_kv_head * (size_t)block_size;
    const size_t kv_bytes =
        slots * (size_t)c->m.cfg.head_dim * (size_t)dtype_size(c->m.kv_dtype);
    const bool int8 = c->m.kv_dtype == DTYPE_I8;
    for (int32_t li = 0; li < c->m.cfg.n_layer; li++) {
        struct cpu_kv_layer *kv = &c->kv[li];
        kv->k = malloc(kv_bytes);
        kv->v = malloc(kv_bytes);
        kv->pos = malloc(slots * sizeof *kv->pos);
        kv->score = malloc(slots * sizeof *kv->score);
        if (int8) { /* zeroed: every scale is finite before its slot is first written */
            kv->k_scale = calloc(slots, sizeof *kv->k_scale);
            kv->v_scale = calloc(slots, sizeof *kv->v_scale);
        }
        if (!kv->k || !kv->v || !kv->pos || !kv->score ||
            (int8 && (!kv->k_scale || !kv->v_scale)))
            return err_set(
                ENG_ENOMEM, "out of memory for a KV pool of %d blocks (%.1f MiB)", n_blocks,
                (double)cpu_kv_block_bytes(c, block_size) * n_blocks / (1 << 20));
        /* Touch every page now: a pool that cannot really be backed by memory fails
         * at start-up, and the first requests do not pay the page faults. */
        memset(kv->k, 0, kv_bytes);
        memset(kv->v, 0, kv_bytes);
        for (size_t i = 0; i < slots; i++)
            kv->pos[i] = -1;
        memset(kv->score, 0, slots * sizeof *kv->score);
    }
    c->n_blocks = n_blocks;
    c->m.block_size = block_size;
    c->m.kv = c->kv;
    return 0;
}

static void cpu_kv_init_blocks(void *ctx, const int32_t *blocks, int32_t n)
{
    struct cpu_be *c = ctx;
    const size_t per_block = (size_t)c->m.cfg.n_kv_head * (size_t)c->m.block_size;
    for (int32_t li = 0; li < c->m.cfg.n_layer; li++) {
        struct cpu_kv_layer *kv = &c->kv[li];
        for (int32_t i = 0; i < n; i++) {
            CHECK(blocks[i] >= 0 && blocks[i] < c->n_blocks);
            size_t base = (size_t)blocks[i] * per_block;
            for (size_t j = 0; j < per_block; j++)
                kv->pos[base + j] = -1;
            memset(kv->score + base, 0, per_block * sizeof *kv->score);
            /* V is cleared too: attention multiplies every slot of a visible block by
             * its probability, 0 for free slots, and 0 * NaN left by an earlier owner
             * would leak into this sequence. (K needs nothing: free slots' logits are
             * replaced, not multiplied.) */
            const size_t vb =
                per_block * (size_t)c->m.cfg.head_dim * (size_t)dtype_size(c->m.kv_dtype);
            memset((char *)kv->v + (size_t)blocks[i] * vb, 0, vb);
            if (kv->v_scale) memset(kv->v_scale + base, 0, per_block * sizeof *kv->v_scale);
        }
    }
}

static void cpu_kv_copy_blocks(void *ctx, const int32_t *src, const int32_t *dst, int32_t n)
{
    struct cpu_be *c = ctx;
    const size_t per_block = (size_t)c->m.cfg.n_kv_head * (size_t)c->m.block_size;
    const size_t kv_block =
        per_block * (size_t)c->m.cfg.head_dim * (size_t)dtype_size(c->m.kv_dtype);
    for (int32_t li = 0; li < c->m.cfg.n_layer; li++) {
        struct cpu_kv_layer *kv = &c->kv[li];
        for (int32_t i = 0; i < n; i++) {
            size_t s = (size_t)src[i], d = (size_t)dst[i];
            if (kv->k_scale) { /* int8: the scales are part of the block */
                memcpy(kv->k_scale + d * per_block, kv->k_scale + s * per_block,
                       per_block * sizeof *kv->k_scale);
                memcpy(kv->v_scale + d * per_block, kv->v_scale + s * per_block,
                       per_block * sizeof *kv->v_scale);
            }
            memcpy((char *)kv->k + d * kv_block, (char *)kv->k + s * kv_block, kv_block);
            memcpy((char *)kv->v + d * kv_block, (char *)kv->v + s * kv_block, kv_block);
            memcpy(kv->pos + d * per_block, kv->pos + s * per_block,
                   per_block * sizeof *kv->pos);
            memcpy(kv->score + d * per_block, kv->score + s * per_block,
                   per_block * sizeof *kv->score);
        }
    }
}

static void cpu_kv_compact(void *ctx, const int32_t *blocks, int32_t n_slots,
                           const int32_t *keep, int32_t n_keep)
{
    struct cpu_be *c = ctx;
    const int32_t L = c->m.cfg.n_layer, H = c->m.cfg.n_kv_head, D = c->m.cfg.head_dim,
                  BS = c->m.block_size;
#pragma omp parallel for schedule(dynamic, 1) collapse(2)
    for (int32_t l = 0; l < L; l++)
        for (int32_t h = 0; h < H; h++)
            cpu_attn_kv_compact_head(&c->kv[l], c->m.kv_dtype, H, D, BS, h, blocks, n_slots,
                                     keep + ((int64_t)l * H + h) * n_keep, n_keep);
}

static int cpu_kv_state(void *ctx, int32_t layer, int32_t **pos, float **score)
{
    struct cpu_be *c = ctx;
    CHECK(layer >= 0 && layer < c->m.cfg.n_layer);
    *pos = c->kv[layer].pos;
    *score = c->kv[layer].score;
    return 0;
}

/* The pool as the device-state module reads it. */
static struct be_cpu_device_pool dev_pool(const struct cpu_be *c)
{
    return (struct be_cpu_device_pool){.kv = c->kv,
                                       .n_layer = c->m.cfg.n_layer,
                                       .n_head = c->m.cfg.n_kv_head,
                                       .block_size = c->m.block_size,
                                       .window = c->m.cfg.arch.sliding_window};
}

/* pos / score [n_layer, n_head, n_slots]: what a device backend copies back. */
static int cpu_kv_read_state(void *ctx, const int32_t *blocks, int32_t n_slots,
                             int32_t *pos, float *score)
{
    struct cpu_be *c = ctx;
    const struct be_cpu_device_pool p = dev_pool(c);
    be_cpu_device_read_state(&p, blocks, n_slots, pos, score);
    return 0;
}

/* device_state: the victims of the last forward's sequence seq. */
static int cpu_kv_victims(void *ctx, int32_t seq, int32_t *victims)
{
    struct cpu_be *c = ctx;
    const struct be_cpu_device_pool p = dev_pool(c);
    return be_cpu_device_victims(&c->dev, &p, seq, victims);
}

/* One rank's part of a forward (a ranks job). */
static void rank_forward(void *arg, int32_t rank)
{
    struct cpu_be *c = arg;
    cpu_rank_forward(&c->ranks[rank], &c->m, c->batch);
}

static int cpu_forward_timed(struct cpu_be *c, const struct be_batch *b, float *logits)
{
    const struct opt_config *cfg = &c->m.cfg;
    const int32_t hd = cfg->hidden, proj = cfg->word_embed_proj_dim;
    CHECK(c->n_blocks > 0);
    be_cpu_device_begin(&c->dev);
    if (b->n_tok == 0) return 0;
    c->batch = b;
    ranks_run(c->threads, rank_forward, c);
    if (c->opts.device_state) {
        const struct be_cpu_device_pool p = dev_pool(c);
        be_cpu_device_pick_victims(&c->dev, &p, b);
    }

    /* Logits only for the rows asked for (usually each sequence's last token), on
     * rank 0, whose residual stream is every rank's. Without a destination they are
     * kept for sample, as a device would keep them. */
    c->dev.n_kept = 0;
    if (b->n_out == 0) return 0;
    if (!logits) {
        CHECK(c->opts.device_state);
        logits = be_cpu_device_keep(&c->dev, b->n_out, cfg->vocab_size);
    }
    struct cpu_rank *r0 = &c->ranks[0];
    struct cpu_ws *ws = &r0->ws;
    cpu_ops_gather_rows(ws->tmp, ws->x, b->out_rows, b->n_out, hd); // tmp: [n_out, hidden]
    const float *hfin = ws->tmp;
    if (cfg->arch.final_norm) {
        cpu_ops_norm(ws->x, DTYPE_F32, ws->tmp, c->lnf_w, c->lnf_b, cfg->arch.norm,
                     cfg->arch.norm_eps, b->n_out, hd);
        hfin = ws->x; /* the residual stream is dead now; reuse it */
    }
    if (proj != hd) {
        cpu_rank_gemm(r0, &c->project_out,
                      cpu_rank_gemm_in(r0, &c->m, hfin, (int64_t)b->n_out * hd), b->n_out,
                      ws->emb); // emb: [n_out, proj]
        hfin = ws->emb;
    }
    cpu_rank_gemm(r0, &c->lm_head,
                  cpu_rank_gemm_in(r0, &c->m, hfin, (int64_t)b->n_out * proj), b->n_out,
                  logits); // logits: [n_out, vocab]
    return 0;
}

/* device_state: sample kept rows as a device does (be_cpu_device_sample). */
static int cpu_sample(void *ctx, const struct be_sample_row *rows, int32_t n,
                      struct sample_out *out)
{
    struct cpu_be *c = ctx;
    return be_cpu_device_sample(&c->dev, c->m.cfg.vocab_size, rows, n, out);
}

static int cpu_forward(void *ctx, const struct be_batch *b, float *logits)
{
    struct cpu_be *c = ctx;
    /* OpenMP's thread count is per calling thread; another backend created on this
     * thread may have changed it. */
    omp_set_num_threads(c->rank_threads);
    double t0 = time_now();
    int err = cpu_forward_timed(c, b, logits);
    c->prof.forward_s += time_now() - t0;
    c->prof.n_forward++;
    return err;
}

/* Rank 0's split of the time: the ranks run side by side, so one rank's time is the
 * step's. */
static void cpu_profile(void *ctx, struct be_profile *out)
{
    struct cpu_be *c = ctx;
    c->prof.gemm_s = c->ranks[0].gemm_s;
    c->prof.attn_s = c->ranks[0].attn_s;
    *out = c->prof;
    memset(&c->prof, 0, sizeof c->prof);
    for (int32_t r = 0; r < c->n_rank; r++)
        c->ranks[r].gemm_s = c->ranks[r].attn_s = 0;
}

static void cpu_destroy(void *ctx)
{
    struct cpu_be *c = ctx;
    if (!c) return;
    ranks_destroy(c->threads);
    kv_free(c);
    free(c->kv);
    for (int32_t r = 0; r < c->n_rank; r++)
        cpu_rank_deinit(&c->ranks[r], c->m.cfg.n_layer);
    comm_shm_group_destroy(c->group);
    cpu_gemm_linear_deinit(&c->project_out);
    cpu_gemm_linear_deinit(&c->lm_head);
    free(c->m.embed);
    free(c->m.pos_embed);
    free(c->m.inv_freq);
    free(c->lnf_w);
    free(c->lnf_b);
    free(c->ranks);
    be_cpu_device_deinit(&c->dev);
    free(c);
}

static const struct be_ops cpu_ops = {
    .name = "cpu",
    .load = cpu_load,
    .kv_alloc = cpu_kv_alloc,
    .kv_block_bytes = cpu_kv_block_bytes,
    .kv_init_blocks = cpu_kv_init_blocks,
    .kv_copy_blocks = cpu_kv_copy_blocks,
    .kv_compact = cpu_kv_compact,
    .kv_state = cpu_kv_state,
    .kv_read_state = cpu_kv_read_state,
    .forward = cpu_forward,
    .profile = cpu_profile,
    .destroy = cpu_destroy,
};

/* The same backend with its slot state served as a device's (opts.device_state):
 * no kv_state, and be_cpu_device.c's victims and sampling. */
static const struct be_ops cpu_device_ops = {
    .name = "cpu",
    .load = cpu_load,
    .kv_alloc = cpu_kv_alloc,
    .kv_block_bytes = cpu_kv_block_bytes,
    .kv_init_blocks = cpu_kv_init_blocks,
    .kv_copy_blocks = cpu_kv_copy_blocks,
    .kv_compact = cpu_kv_compact,
    .kv_state = NULL, /* on the "device": kv_read_state and kv_victims stand in */
    .kv_read_state = cpu_kv_read_state,
    .kv_victims = cpu_kv_victims,
    .sample = cpu_sample,
    .forward = cpu_forward,
    .profile = cpu_profile,
    .destroy = cpu_destroy,
};
