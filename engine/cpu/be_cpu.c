/*
 * be_cpu.c - the CPU backend: the readable reference implementation of be_ops.
 *
 * Owns: the model's weights in oneDNN layouts, the KV pool with its slot state,
 * and the forward workspace. Every GEMM is a cpu_linear (oneDNN matmul created once
 * at load, runtime M); everything else is an OpenMP loop in cpu_ops / cpu_attn.
 * With dtype bf16 the weights, the activations entering GEMMs and the KV cache are
 * bf16; the residual stream, LayerNorm, softmax, scores and logits stay fp32.
 * Thread: engine only.
 */
#include "backend.h"
#include "cpu_attn.h"
#include "cpu_gemm.h"
#include "cpu_ops.h"
#include "err.h"
#include "util.h"
#include "weights.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct cpu_layer {
    float *ln1_w, *ln1_b;   /* [hidden] self_attn_layer_norm */
    float *ln2_w, *ln2_b;   /* [hidden] final_layer_norm of the layer */
    struct cpu_linear qkv;  /* [hidden] -> [3 * hidden]: q | k | v */
    struct cpu_linear out;  /* [hidden] -> [hidden] */
    struct cpu_linear fc1;  /* [hidden] -> [ffn], ReLU fused */
    struct cpu_linear fc2;  /* [ffn] -> [hidden] */
    struct cpu_kv_layer kv;
};

struct cpu_ws {
    int32_t cap_tok;
    float *x;      /* [n_tok, hidden] residual stream */
    void *h;       /* [n_tok, max(hidden, proj)] GEMM input (dtype) */
    float *qkv;    /* [n_tok, 3 * hidden] */
    void *attn;    /* [n_tok, hidden] attention output (dtype) */
    void *ff;      /* [n_tok, ffn] fc1 output (dtype) */
    float *tmp;    /* [n_tok, max(hidden, proj)] GEMM output before the residual add */
    float *emb;    /* [n_tok, proj] embedding before project_in */
    float *scratch; /* [scratch_rows, scratch_stride] attention rows */
    int32_t scratch_stride;
    int32_t scratch_rows; /* threads the scratch was sized for */
};

struct cpu_be {
    struct be_cpu_opts opts;
    struct opt_config cfg;
    struct cpu_dnnl dnnl;
    float *embed;          /* [vocab, proj] token embedding, fp32 for the lookup */
    float *pos_embed;      /* [max_pos + 2, hidden] */
    struct cpu_linear project_in, project_out; /* when proj != hidden */
    float *lnf_w, *lnf_b;  /* [hidden] final layer norm (pre-LN models only) */
    struct cpu_linear lm_head; /* [proj] -> [vocab], fp32 out */
    struct cpu_layer *layers;
    int32_t n_blocks, block_size;
    struct cpu_ws ws;
    struct be_profile prof; /* time spent since the last profile read */
    bool loaded;
};

static const struct be_ops cpu_ops;

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
    struct cpu_be *c = xcalloc(1, sizeof *c);
    c->opts = *opts;
    if (opts->n_threads > 0) omp_set_num_threads(opts->n_threads);
    int err = cpu_dnnl_init(&c->dnnl);
    if (err) {
        free(c);
        return err;
    }
    out->ops = &cpu_ops;
    out->ctx = c;
    return 0;
}

/* Read a tensor into a new fp32 buffer, or set *dst = NULL and return the error. */
static int read_new(const struct weights *w, const char *name, int ndim, int64_t d0,
                    int64_t d1, float **dst)
{
    int64_t shape[2] = {d0, d1};
    size_t n = (size_t)d0 * (size_t)(ndim == 2 ? d1 : 1);
    float *buf = malloc(n * sizeof *buf);
    if (!buf) return err_set(ENG_ENOMEM, "out of memory reading %s", name);
    int err = weights_read_f32(w, name, ndim, shape, buf);
    if (err) {
        free(buf);
        buf = NULL;
    }
    *dst = buf;
    return err;
}

/* A linear layer from "<prefix>.weight" [n, k] and "<prefix>.bias" [n] (if bias). */
static int load_linear(struct cpu_be *c, const struct weights *w, struct cpu_linear *l,
                       const char *prefix, int64_t n, int64_t k, bool bias,
                       enum dtype dst_dtype, bool relu)
{
    char name[128];
    float *wt = NULL, *bs = NULL;
    snprintf(name, sizeof name, "%s.weight", prefix);
    int err = read_new(w, name, 2, n, k, &wt);
    if (!err && bias) {
        snprintf(name, sizeof name, "%s.bias", prefix);
        err = read_new(w, name, 1, n, 0, &bs);
    }
    if (!err) err = cpu_linear_init(l, &c->dnnl, wt, bs, n, k, c->opts.dtype, dst_dtype, relu);
    free(wt);
    free(bs);
    return err;
}

/* q, k and v projections stacked into one [3 * hidden, hidden] GEMM. */
static int load_qkv(struct cpu_be *c, const struct weights *w, int32_t li)
{
    const int64_t hd = c->cfg.hidden;
    const char *names[3] = {"q_proj", "k_proj", "v_proj"};
    float *wt = malloc((size_t)(3 * hd * hd) * sizeof *wt);
    float *bs = malloc((size_t)(3 * hd) * sizeof *bs);
    int err = 0;
    if (!wt || !bs) {
        err = err_set(ENG_ENOMEM, "out of memory loading layer %d attention", li);
        goto done;
    }
    for (int i = 0; i < 3 && !err; i++) {
        char name[128];
        int64_t shape_w[2] = {hd, hd}, shape_b[1] = {hd};
        snprintf(name, sizeof name, "layers.%d.self_attn.%s.weight", li, names[i]);
        err = weights_read_f32(w, name, 2, shape_w, wt + i * hd * hd);
        if (err) break;
        snprintf(name, sizeof name, "layers.%d.self_attn.%s.bias", li, names[i]);
        err = weights_read_f32(w, name, 1, shape_b, bs + i * hd);
    }
    if (!err)
        err = cpu_linear_init(&c->layers[li].qkv, &c->dnnl, wt, bs, 3 * hd, hd, c->opts.dtype,
                              DTYPE_F32, false);
done:
    free(wt);
    free(bs);
    return err;
}

static int load_ln(const struct weights *w, const char *prefix, int64_t d, float **wt,
                   float **bs)
{
    char name[128];
    snprintf(name, sizeof name, "%s.weight", prefix);
    int err = read_new(w, name, 1, d, 0, wt);
    if (err) return err;
    snprintf(name, sizeof name, "%s.bias", prefix);
    return read_new(w, name, 1, d, 0, bs);
}

static int cpu_load(void *ctx, const struct opt_config *cfg, const struct weights *w)
{
    struct cpu_be *c = ctx;
    CHECK(!c->loaded);
    c->cfg = *cfg;
    if (!cpu_attn_supports(cfg->head_dim, 16))
        return err_set(ENG_EUNSUPPORTED, "CPU backend: head_dim %d is not a multiple of 16 "
                                         "up to 256", cfg->head_dim);
    const int64_t hd = cfg->hidden, proj = cfg->word_embed_proj_dim, V = cfg->vocab_size;
    const enum dtype dt = c->opts.dtype;
    int err = read_new(w, "embed_tokens.weight", 2, V, proj, &c->embed);
    if (!err) err = read_new(w, "embed_positions.weight", 2, cfg->max_pos + 2, hd, &c->pos_embed);
    if (!err && proj != hd) {
        err = load_linear(c, w, &c->project_in, "project_in", hd, proj, false, DTYPE_F32, false);
        if (!err)
            err = load_linear(c, w, &c->project_out, "project_out", proj, hd, false, DTYPE_F32,
                              false);
    }
    if (!err && cfg->ln_before) err = load_ln(w, "final_layer_norm", hd, &c->lnf_w, &c->lnf_b);
    if (!err) {
        /* lm_head is the token embedding unless the checkpoint has its own. */
        if (weights_has(w, "lm_head.weight"))
            err = load_linear(c, w, &c->lm_head, "lm_head", V, proj, false, DTYPE_F32, false);
        else
            err = cpu_linear_init(&c->lm_head, &c->dnnl, c->embed, NULL, V, proj, dt,
                                  DTYPE_F32, false);
    }
    c->layers = xcalloc((size_t)cfg->n_layer, sizeof *c->layers);
    for (int32_t li = 0; li < cfg->n_layer && !err; li++) {
        struct cpu_layer *L = &c->layers[li];
        char p[96];
        err = load_qkv(c, w, li);
        snprintf(p, sizeof p, "layers.%d.self_attn.out_proj", li);
        if (!err) err = load_linear(c, w, &L->out, p, hd, hd, true, DTYPE_F32, false);
        snprintf(p, sizeof p, "layers.%d.fc1", li);
        /* fc1's output only feeds fc2, so it is produced in the GEMM dtype. */
        if (!err) err = load_linear(c, w, &L->fc1, p, cfg->ffn, hd, true, dt, true);
        snprintf(p, sizeof p, "layers.%d.fc2", li);
        if (!err) err = load_linear(c, w, &L->fc2, p, hd, cfg->ffn, true, DTYPE_F32, false);
        snprintf(p, sizeof p, "layers.%d.self_attn_layer_norm", li);
        if (!err) err = load_ln(w, p, hd, &L->ln1_w, &L->ln1_b);
        snprintf(p, sizeof p, "layers.%d.final_layer_norm", li);
        if (!err) err = load_ln(w, p, hd, &L->ln2_w, &L->ln2_b);
    }
    c->loaded = true; /* even on failure: destroy frees what was built */
    return err;
}

static size_t cpu_kv_block_bytes(void *ctx, int32_t block_size)
{
    struct cpu_be *c = ctx;
    size_t slots = (size_t)c->cfg.n_head * (size_t)block_size;
    size_t per_layer = 2 * slots * (size_t)c->cfg.head_dim * (size_t)dtype_size(c->opts.dtype) +
                       slots * (sizeof(int32_t) + sizeof(float));
    return per_layer * (size_t)c->cfg.n_layer;
}

static void kv_free(struct cpu_be *c)
{
    for (int32_t li = 0; li < c->cfg.n_layer; li++) {
        struct cpu_kv_layer *kv = &c->layers[li].kv;
        free(kv->k);
        free(kv->v);
        free(kv->pos);
        free(kv->score);
        memset(kv, 0, sizeof *kv);
    }
    c->n_blocks = 0;
}

/* A second call replaces the pool (its contents are lost). */
static int cpu_kv_alloc(void *ctx, int32_t n_blocks, int32_t block_size)
{
    struct cpu_be *c = ctx;
    CHECK(c->loaded && n_blocks > 0);
    if (!cpu_attn_supports(c->cfg.head_dim, block_size))
        return err_set(ENG_EINVAL, "CPU backend: block size %d is not in 1..64", block_size);
    kv_free(c);
    const size_t slots = (size_t)n_blocks * (size_t)c->cfg.n_head * (size_t)block_size;
    const size_t kv_bytes = slots * (size_t)c->cfg.head_dim * (size_t)dtype_size(c->opts.dtype);
    for (int32_t li = 0; li < c->cfg.n_layer; li++) {
        struct cpu_kv_layer *kv = &c->layers[li].kv;
        kv->k = malloc(kv_bytes);
        kv->v = malloc(kv_bytes);
        kv->pos = malloc(slots * sizeof *kv->pos);
        kv->score = malloc(slots * sizeof *kv->score);
        if (!kv->k || !kv->v || !kv->pos || !kv->score)
            return err_set(ENG_ENOMEM, "out of memory for a KV pool of %d blocks (%.1f MiB)",
                           n_blocks,
                           (double)cpu_kv_block_bytes(c, block_size) * n_blocks / (1 << 20));
        /* Touch every page now: a pool that cannot really be backed by memory fails
         * at start-up, and the first requests do not pay the page faults. */
        memset(kv->k, 0, kv_bytes);
        memset(kv->v, 0, kv_bytes);
        for (size_t i = 0; i < slots; i++) kv->pos[i] = -1;
        memset(kv->score, 0, slots * sizeof *kv->score);
    }
    c->n_blocks = n_blocks;
    c->block_size = block_size;
    return 0;
}

static void cpu_kv_init_blocks(void *ctx, const int32_t *blocks, int32_t n)
{
    struct cpu_be *c = ctx;
    const size_t per_block = (size_t)c->cfg.n_head * (size_t)c->block_size;
    for (int32_t li = 0; li < c->cfg.n_layer; li++) {
        struct cpu_kv_layer *kv = &c->layers[li].kv;
        for (int32_t i = 0; i < n; i++) {
            CHECK(blocks[i] >= 0 && blocks[i] < c->n_blocks);
            size_t base = (size_t)blocks[i] * per_block;
            for (size_t j = 0; j < per_block; j++) kv->pos[base + j] = -1;
            memset(kv->score + base, 0, per_block * sizeof *kv->score);
            /* V is cleared too: attention multiplies every slot of a visible block by
             * its probability, 0 for free slots, and 0 * NaN left by an earlier owner
             * would leak into this sequence. (K needs nothing: free slots' logits are
             * replaced, not multiplied.) */
            const size_t vb = per_block * (size_t)c->cfg.head_dim * (size_t)dtype_size(c->opts.dtype);
            memset((char *)kv->v + (size_t)blocks[i] * vb, 0, vb);
        }
    }
}

static void cpu_kv_copy_blocks(void *ctx, const int32_t *src, const int32_t *dst, int32_t n)
{
    struct cpu_be *c = ctx;
    const size_t per_block = (size_t)c->cfg.n_head * (size_t)c->block_size;
    const size_t kv_block = per_block * (size_t)c->cfg.head_dim * (size_t)dtype_size(c->opts.dtype);
    for (int32_t li = 0; li < c->cfg.n_layer; li++) {
        struct cpu_kv_layer *kv = &c->layers[li].kv;
        for (int32_t i = 0; i < n; i++) {
            size_t s = (size_t)src[i], d = (size_t)dst[i];
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
    const int32_t L = c->cfg.n_layer, H = c->cfg.n_head, D = c->cfg.head_dim, BS = c->block_size;
    const size_t es = (size_t)dtype_size(c->opts.dtype);
#pragma omp parallel for schedule(dynamic, 1) collapse(2)
    for (int32_t l = 0; l < L; l++)
        for (int32_t h = 0; h < H; h++)
            cpu_kv_compact_head(&c->layers[l].kv, es, H, D, BS, h, blocks, n_slots,
                                keep + ((int64_t)l * H + h) * n_keep, n_keep);
}

static int cpu_kv_state(void *ctx, int32_t layer, int32_t **pos, float **score)
{
    struct cpu_be *c = ctx;
    CHECK(layer >= 0 && layer < c->cfg.n_layer);
    *pos = c->layers[layer].kv.pos;
    *score = c->layers[layer].kv.score;
    return 0;
}

/* Grow the workspace to n_tok rows and attention scratch for max_slots slots. */
static void ws_reserve(struct cpu_be *c, int32_t n_tok, int32_t max_slots)
{
    struct cpu_ws *ws = &c->ws;
    const size_t es = (size_t)dtype_size(c->opts.dtype);
    const size_t hd = (size_t)c->cfg.hidden, proj = (size_t)c->cfg.word_embed_proj_dim;
    const size_t wide = MAX(hd, proj);
    if (n_tok > ws->cap_tok) {
        size_t n = (size_t)MAX(n_tok, 2 * ws->cap_tok);
        ws->x = xrealloc(ws->x, n * hd * sizeof(float));
        ws->h = xrealloc(ws->h, n * wide * sizeof(float));
        ws->qkv = xrealloc(ws->qkv, n * 3 * hd * sizeof(float));
        ws->attn = xrealloc(ws->attn, n * hd * es);
        ws->ff = xrealloc(ws->ff, n * (size_t)c->cfg.ffn * es);
        ws->tmp = xrealloc(ws->tmp, n * wide * sizeof(float));
        ws->emb = xrealloc(ws->emb, n * proj * sizeof(float));
        ws->cap_tok = (int32_t)n;
    }
    /* One row per thread of the coming parallel regions. The thread count is the
     * calling thread's OpenMP setting, which another backend_cpu_create (or anyone
     * calling omp_set_num_threads) may have raised since the scratch last grew, so
     * it is checked on every forward, not only when the rows get longer. */
    const int32_t need = cpu_attn_scratch_floats(max_slots, c->block_size, c->cfg.n_head);
    const int32_t rows = omp_get_max_threads();
    if (need > ws->scratch_stride || rows > ws->scratch_rows) {
        ws->scratch_stride = need > ws->scratch_stride ? MAX(need, 2 * ws->scratch_stride)
                                                       : ws->scratch_stride;
        ws->scratch_rows = MAX(rows, ws->scratch_rows);
        ws->scratch = xrealloc(ws->scratch, (size_t)ws->scratch_rows *
                                                (size_t)ws->scratch_stride * sizeof(float));
    }
}

/* The GEMM input: x converted to the compute dtype (a no-op view for fp32). */
static const void *gemm_in(struct cpu_be *c, const float *x, int64_t n)
{
    if (c->opts.dtype == DTYPE_F32) return x;
    cpu_to_bf16(c->ws.h, x, n);
    return c->ws.h;
}

/* A GEMM, with its time added to the profile. */
static void gemm(struct cpu_be *c, const struct cpu_linear *l, const void *src, int64_t m,
                 void *dst)
{
    double t0 = time_now();
    cpu_linear_run(l, &c->dnnl, src, m, dst);
    c->prof.gemm_s += time_now() - t0;
}

static void layer_forward(struct cpu_be *c, struct cpu_layer *L, int32_t li,
                          const struct be_batch *b)
{
    struct cpu_ws *ws = &c->ws;
    const struct opt_config *cfg = &c->cfg;
    const enum dtype dt = c->opts.dtype;
    const int32_t n = b->n_tok, hd = cfg->hidden;

    /* Attention block. Pre-LN: x += attn(LN(x)). Post-LN: x = LN(x + attn(x)). */
    const void *in;
    if (cfg->ln_before) {
        cpu_layernorm(ws->h, dt, ws->x, L->ln1_w, L->ln1_b, n, hd);
        in = ws->h;
    } else {
        in = gemm_in(c, ws->x, (int64_t)n * hd);
    }
    gemm(c, &L->qkv, in, n, ws->qkv); // qkv: [n, 3 * hidden]
    struct cpu_attn_args aa = {
        .batch = b, .qkv = ws->qkv, .out = ws->attn, .out_dtype = dt, .kv = L->kv,
        .kv_dtype = dt, .layer = li, .n_head = cfg->n_head, .head_dim = cfg->head_dim,
        .block_size = c->block_size, .scale = 1.0f / sqrtf((float)cfg->head_dim),
        .scratch = ws->scratch, .scratch_stride = ws->scratch_stride,
    };
    double t0 = time_now();
    cpu_attn_forward(&aa); // attn: [n, hidden]
    c->prof.attn_s += time_now() - t0;
    gemm(c, &L->out, ws->attn, n, ws->tmp); // tmp: [n, hidden]
    cpu_add(ws->x, ws->tmp, (int64_t)n * hd);
    if (!cfg->ln_before) cpu_layernorm(ws->x, DTYPE_F32, ws->x, L->ln1_w, L->ln1_b, n, hd);

    /* Feed-forward block, same two orders. */
    if (cfg->ln_before) {
        cpu_layernorm(ws->h, dt, ws->x, L->ln2_w, L->ln2_b, n, hd);
        in = ws->h;
    } else {
        in = gemm_in(c, ws->x, (int64_t)n * hd);
    }
    gemm(c, &L->fc1, in, n, ws->ff);      // ff: [n, ffn], ReLU applied
    gemm(c, &L->fc2, ws->ff, n, ws->tmp); // tmp: [n, hidden]
    cpu_add(ws->x, ws->tmp, (int64_t)n * hd);
    if (!cfg->ln_before) cpu_layernorm(ws->x, DTYPE_F32, ws->x, L->ln2_w, L->ln2_b, n, hd);
}

static int cpu_forward_timed(struct cpu_be *c, const struct be_batch *b, float *logits);

static int cpu_forward(void *ctx, const struct be_batch *b, float *logits)
{
    struct cpu_be *c = ctx;
    /* OpenMP's thread count is per calling thread; another backend created on this
     * thread may have changed it. */
    if (c->opts.n_threads > 0) omp_set_num_threads(c->opts.n_threads);
    double t0 = time_now();
    int err = cpu_forward_timed(c, b, logits);
    c->prof.forward_s += time_now() - t0;
    c->prof.n_forward++;
    return err;
}

static int cpu_forward_timed(struct cpu_be *c, const struct be_batch *b, float *logits)
{
    const struct opt_config *cfg = &c->cfg;
    const int32_t n = b->n_tok, hd = cfg->hidden, proj = cfg->word_embed_proj_dim;
    CHECK(c->n_blocks > 0);
    if (n == 0) return 0;
    int32_t max_slots = 1;
    for (int32_t s = 0; s < b->n_seq; s++) max_slots = MAX(max_slots, b->seqs[s].n_slots);
    ws_reserve(c, n, max_slots);
    struct cpu_ws *ws = &c->ws;

    /* Embeddings: tokens (through project_in when proj != hidden) plus positions. */
    if (proj != hd) {
        cpu_embed(ws->emb, c->embed, b->tokens, n, proj); // emb: [n, proj]
        gemm(c, &c->project_in, gemm_in(c, ws->emb, (int64_t)n * proj), n,
                       ws->x);
    } else {
        cpu_embed(ws->x, c->embed, b->tokens, n, hd); // x: [n, hidden]
    }
    /* OPT's learned positions are looked up at position + 2, as Hugging Face does. */
    cpu_add_positions(ws->x, c->pos_embed, b->pos, 2, n, hd);

    for (int32_t li = 0; li < cfg->n_layer; li++) layer_forward(c, &c->layers[li], li, b);

    /* Logits only for the rows asked for (usually each sequence's last token). */
    if (b->n_out == 0) return 0;
    cpu_gather_rows(ws->tmp, ws->x, b->out_rows, b->n_out, hd); // tmp: [n_out, hidden]
    const float *hfin = ws->tmp;
    if (cfg->ln_before) {
        cpu_layernorm(ws->x, DTYPE_F32, ws->tmp, c->lnf_w, c->lnf_b, b->n_out, hd);
        hfin = ws->x; /* the residual stream is dead now; reuse it */
    }
    if (proj != hd) {
        gemm(c, &c->project_out, gemm_in(c, hfin, (int64_t)b->n_out * hd),
                       b->n_out, ws->emb); // emb: [n_out, proj]
        hfin = ws->emb;
    }
    gemm(c, &c->lm_head, gemm_in(c, hfin, (int64_t)b->n_out * proj), b->n_out,
                   logits); // logits: [n_out, vocab]
    return 0;
}

static void cpu_profile(void *ctx, struct be_profile *out)
{
    struct cpu_be *c = ctx;
    *out = c->prof;
    memset(&c->prof, 0, sizeof c->prof);
}

static void cpu_destroy(void *ctx)
{
    struct cpu_be *c = ctx;
    if (!c) return;
    if (c->layers) {
        for (int32_t li = 0; li < c->cfg.n_layer; li++) {
            struct cpu_layer *L = &c->layers[li];
            cpu_linear_deinit(&L->qkv);
            cpu_linear_deinit(&L->out);
            cpu_linear_deinit(&L->fc1);
            cpu_linear_deinit(&L->fc2);
            free(L->ln1_w);
            free(L->ln1_b);
            free(L->ln2_w);
            free(L->ln2_b);
        }
        kv_free(c);
        free(c->layers);
    }
    cpu_linear_deinit(&c->project_in);
    cpu_linear_deinit(&c->project_out);
    cpu_linear_deinit(&c->lm_head);
    free(c->embed);
    free(c->pos_embed);
    free(c->lnf_w);
    free(c->lnf_b);
    struct cpu_ws *ws = &c->ws;
    free(ws->x);
    free(ws->h);
    free(ws->qkv);
    free(ws->attn);
    free(ws->ff);
    free(ws->tmp);
    free(ws->emb);
    free(ws->scratch);
    cpu_dnnl_deinit(&c->dnnl);
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
    .forward = cpu_forward,
    .profile = cpu_profile,
    .destroy = cpu_destroy,
};
