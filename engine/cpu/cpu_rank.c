/*
 * cpu_rank.c - one tensor-parallel rank of the CPU backend (see cpu_rank.h): loading
 * its shard and running the decoder layers with an all-reduce after out_proj and
 * after fc2. What differs between families (norm, MLP, positions, residual) is read
 * from the model's description (arch.h), never from its name.
 *
 * Thread: the rank's own thread; the loops inside fan out to that thread's OpenMP
 * team (each rank thread has its own team, sized by the backend).
 */
#include "cpu_rank.h"

#include "backend_cpu.h"
#include "cpu_ops.h"
#include "err.h"
#include "util.h"
#include "shard.h"
#include "weights.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cpu_rank_init(struct cpu_rank *r, const struct cpu_model *m, int32_t rank, int32_t size,
                  struct comm *comm)
{
    CHECK(comm || size == 1);
    memset(r, 0, sizeof *r);
    int err = shard_init(&r->sh, &m->cfg, rank, size);
    if (err) return err;
    r->comm = comm;
    return cpu_gemm_init(&r->dnnl);
}

int cpu_rank_linear(struct cpu_rank *r, const struct cpu_model *m, struct cpu_linear *l,
                    const float *w, const float *b, int64_t n, int64_t k,
                    enum dtype dst_dtype, bool relu)
{
    return cpu_gemm_linear_init(l, &r->dnnl, w, b, n, k, m->dtype, dst_dtype, relu);
}

/* One layer's shard (shard.h) into oneDNN layers. */
static int load_layer(struct cpu_rank *r, const struct cpu_model *m,
                      const struct weights *w, int32_t li)
{
    const struct opt_config *cfg = &m->cfg;
    const struct model_arch *a = &cfg->arch;
    const int64_t hd = cfg->hidden, attn = (int64_t)r->sh.n_head * cfg->head_dim;
    const int64_t qkv = (int64_t)(r->sh.n_head + 2 * r->sh.n_kv_head) * cfg->head_dim;
    /* ReLU is fused into fc1's GEMM and its output feeds fc2 in the GEMM dtype; GELU
     * and SwiGLU run on fc1's fp32 output (cpu_ops), as HF computes them in fp32. */
    const bool fused = a->mlp == ARCH_MLP_FC && a->act == ARCH_ACT_RELU;
    const int64_t n_fc1 = (a->mlp == ARCH_MLP_SWIGLU ? 2 : 1) * (int64_t)r->sh.n_ffn;
    struct cpu_layer *L = &r->layers[li];
    struct shard_layer sl;
    int err = shard_read_layer(&r->sh, cfg, w, li, &sl);
    if (!err)
        err = cpu_rank_linear(r, m, &L->qkv, sl.qkv_w, sl.qkv_b, qkv, hd, DTYPE_F32, false);
    if (!err)
        err =
            cpu_rank_linear(r, m, &L->out, sl.out_w, sl.out_b, hd, attn, DTYPE_F32, false);
    if (!err)
        err = cpu_rank_linear(r, m, &L->fc1, sl.fc1_w, sl.fc1_b, n_fc1, hd,
                              fused ? m->dtype : DTYPE_F32, fused);
    if (!err)
        err = cpu_rank_linear(r, m, &L->fc2, sl.fc2_w, sl.fc2_b, hd, r->sh.n_ffn, DTYPE_F32,
                              false);
    if (!err) {
        /* The norms stay fp32: keep the buffers instead of copying them. */
        L->ln1_w = sl.ln1_w;
        L->ln1_b = sl.ln1_b;
        L->ln2_w = sl.ln2_w;
        L->ln2_b = sl.ln2_b;
        sl.ln1_w = sl.ln1_b = sl.ln2_w = sl.ln2_b = NULL;
    }
    shard_layer_free(&sl);
    return err;
}

int cpu_rank_load(struct cpu_rank *r, const struct cpu_model *m, const struct weights *w)
{
    const struct opt_config *cfg = &m->cfg;
    const int64_t hd = cfg->hidden, proj = cfg->word_embed_proj_dim;
    int err = 0;
    if (proj != hd) {
        float *wt = NULL;
        err = shard_read(w, "project_in", "weight", shard_whole(hd, proj), &wt);
        if (!err)
            err =
                cpu_rank_linear(r, m, &r->project_in, wt, NULL, hd, proj, DTYPE_F32, false);
        free(wt);
    }
    r->layers = xcalloc((size_t)cfg->n_layer, sizeof *r->layers);
    for (int32_t li = 0; li < cfg->n_layer && !err; li++)
        err = load_layer(r, m, w, li);
    return err;
}

/* Grow the workspace to n_tok rows and attention scratch for max_slots slots. */
static void ws_reserve(struct cpu_rank *r, const struct cpu_model *m, int32_t n_tok,
                       int32_t max_slots)
{
    struct cpu_ws *ws = &r->ws;
    const size_t es = (size_t)dtype_size(m->dtype);
    const size_t hd = (size_t)m->cfg.hidden, proj = (size_t)m->cfg.word_embed_proj_dim;
    const size_t attn = (size_t)r->sh.n_head * (size_t)m->cfg.head_dim;
    const size_t qkv =
        (size_t)(r->sh.n_head + 2 * r->sh.n_kv_head) * (size_t)m->cfg.head_dim;
    const size_t wide = MAX(hd, proj);
    if (n_tok > ws->cap_tok) {
        size_t n = (size_t)MAX(n_tok, 2 * ws->cap_tok);
        ws->x = xrealloc(ws->x, n * hd * sizeof(float));
        ws->h = xrealloc(ws->h, n * wide * sizeof(float));
        ws->qkv = xrealloc(ws->qkv, n * qkv * sizeof(float));
        ws->attn = xrealloc(ws->attn, n * attn * es);
        ws->ff = xrealloc(ws->ff, n * (size_t)r->sh.n_ffn * es);
        ws->ff32 = xrealloc(ws->ff32, n * 2 * (size_t)r->sh.n_ffn * sizeof(float));
        ws->par = xrealloc(ws->par, n * hd * sizeof(float));
        ws->tmp = xrealloc(ws->tmp, n * wide * sizeof(float));
        ws->emb = xrealloc(ws->emb, n * proj * sizeof(float));
        ws->cap_tok = (int32_t)n;
    }
    /* One row per thread of the coming parallel regions. The thread count is the
     * calling thread's OpenMP setting, which another backend_cpu_create (or anyone
     * calling omp_set_num_threads) may have raised since the scratch last grew, so
     * it is checked on every forward, not only when the rows get longer. */
    const int32_t need = cpu_attn_scratch_floats(max_slots, m->block_size, r->sh.n_head);
    const int32_t rows = omp_get_max_threads();
    if (need > ws->scratch_stride || rows > ws->scratch_rows) {
        ws->scratch_stride = need > ws->scratch_stride ? MAX(need, 2 * ws->scratch_stride)
                                                       : ws->scratch_stride;
        ws->scratch_rows = MAX(rows, ws->scratch_rows);
        ws->scratch = xrealloc(ws->scratch, (size_t)ws->scratch_rows *
                                                (size_t)ws->scratch_stride * sizeof(float));
    }
}

const void *cpu_rank_gemm_in(struct cpu_rank *r, const struct cpu_model *m, const float *x,
                             int64_t n)
{
    if (m->dtype == DTYPE_F32) return x;
    cpu_ops_to_bf16(r->ws.h, x, n);
    return r->ws.h;
}

void cpu_rank_gemm(struct cpu_rank *r, const struct cpu_linear *l, const void *src,
                   int64_t m, void *dst)
{
    double t0 = time_now();
    cpu_gemm_linear_run(l, &r->dnnl, src, m, dst);
    r->gemm_s += time_now() - t0;
}

/* Sum the ranks' partial outputs tmp [n] (out_proj or fc2). A failure here means
 * the ranks disagree on the batch: a bug, not an input error. */
static void allreduce(struct cpu_rank *r, float *tmp, int64_t n)
{
    if (r->comm) CHECK(comm_allreduce_sum(r->comm, tmp, n, DTYPE_F32) == 0);
}

/* The norm of layer weights (w, b) on x into dst (dtype dt). */
static void norm(void *dst, enum dtype dt, const float *x, const float *w, const float *b,
                 const struct model_arch *a, int32_t n, int32_t d)
{
    cpu_ops_norm(dst, dt, x, w, b, a->norm, a->norm_eps, n, d);
}

/* Attention of one layer on its input `in` (dtype): partial output in ws->tmp
 * [n, hidden], all-reduced. */
static void attention(struct cpu_rank *r, const struct cpu_model *m, int32_t li,
                      const struct be_batch *b, const void *in)
{
    struct cpu_ws *ws = &r->ws;
    const struct cpu_layer *L = &r->layers[li];
    const struct opt_config *cfg = &m->cfg;
    const struct model_arch *a = &cfg->arch;
    const int32_t n = b->n_tok, hd = cfg->hidden, D = cfg->head_dim;
    const int32_t Hr = r->sh.n_head, KVr = r->sh.n_kv_head;
    cpu_rank_gemm(r, &L->qkv, in, n, ws->qkv); // qkv: [n, (Hr + 2 KVr) * head_dim]
    /* Rotary: q and k (contiguous at the row's start) turn by their true positions
     * now, so the cache holds rotated keys and eviction never has to re-rotate. */
    if (a->pos == ARCH_POS_ROTARY)
        cpu_ops_rope(ws->qkv, (int64_t)(Hr + 2 * KVr) * D, b->pos, n, Hr + KVr, D,
                     a->rope.dims, m->inv_freq);
    struct cpu_attn_args aa = {
        .batch = b,
        .qkv = ws->qkv,
        .out = ws->attn,
        .out_dtype = m->dtype,
        .kv = m->kv[li],
        .kv_dtype = m->kv_dtype,
        .layer = li,
        .n_head = Hr,
        .n_kv = KVr,
        .head_dim = D,
        .block_size = m->block_size,
        .head0 = r->sh.kv_head0,
        .kv_n_head = cfg->n_kv_head,
        .window = a->sliding_window,
        .scale = 1.0f / sqrtf((float)D),
        .scratch = ws->scratch,
        .scratch_stride = ws->scratch_stride,
    };
    double t0 = time_now();
    cpu_attn_forward(&aa); // attn: [n, n_head_r * head_dim]
    r->attn_s += time_now() - t0;
    cpu_rank_gemm(r, &L->out, ws->attn, n, ws->tmp); // tmp: [n, hidden], partial
    allreduce(r, ws->tmp, (int64_t)n * hd);
}

/* The MLP of one layer on its input `in` (dtype): partial output in ws->tmp
 * [n, hidden], all-reduced. */
static void mlp(struct cpu_rank *r, const struct cpu_model *m, int32_t li, int32_t n,
                const void *in)
{
    struct cpu_ws *ws = &r->ws;
    const struct cpu_layer *L = &r->layers[li];
    const struct model_arch *a = &m->cfg.arch;
    const int32_t F = r->sh.n_ffn;
    if (a->mlp == ARCH_MLP_SWIGLU) {
        cpu_rank_gemm(r, &L->fc1, in, n, ws->ff32);       // ff32: [n, 2 ffn_r] gate | up
        cpu_ops_swiglu(ws->ff, m->dtype, ws->ff32, n, F); // ff: [n, ffn_r]
    } else if (a->act == ARCH_ACT_RELU) {
        cpu_rank_gemm(r, &L->fc1, in, n, ws->ff); // ff: [n, ffn_r], ReLU applied
    } else {
        cpu_rank_gemm(r, &L->fc1, in, n, ws->ff32);            // ff32: [n, ffn_r]
        cpu_ops_act(ws->ff, m->dtype, ws->ff32, a->act, n, F); // ff: [n, ffn_r]
    }
    cpu_rank_gemm(r, &L->fc2, ws->ff, n, ws->tmp); // tmp: [n, hidden], partial
    allreduce(r, ws->tmp, (int64_t)n * m->cfg.hidden);
}

static void layer_forward(struct cpu_rank *r, const struct cpu_model *m, int32_t li,
                          const struct be_batch *b)
{
    struct cpu_ws *ws = &r->ws;
    const struct cpu_layer *L = &r->layers[li];
    const struct opt_config *cfg = &m->cfg;
    const struct model_arch *a = &cfg->arch;
    const enum dtype dt = m->dtype;
    const int32_t n = b->n_tok, hd = cfg->hidden;
    const int64_t nh = (int64_t)n * hd;

    if (a->parallel_residual) {
        /* GPT-NeoX: x = x + attn(ln1(x)) + mlp(ln2(x)), both norms of the same x. */
        norm(ws->h, dt, ws->x, L->ln1_w, L->ln1_b, a, n, hd);
        attention(r, m, li, b, ws->h);
        memcpy(ws->par, ws->tmp, (size_t)nh * sizeof(float));
        norm(ws->h, dt, ws->x, L->ln2_w, L->ln2_b, a, n, hd);
        mlp(r, m, li, n, ws->h);
        cpu_ops_add(ws->tmp, ws->par, nh); /* HF: mlp_output + attn_output + x */
        cpu_ops_add(ws->x, ws->tmp, nh);
        return;
    }

    /* Attention block. Pre-LN: x += attn(LN(x)). Post-LN: x = LN(x + attn(x)). */
    const void *in;
    if (cfg->ln_before) {
        norm(ws->h, dt, ws->x, L->ln1_w, L->ln1_b, a, n, hd);
        in = ws->h;
    } else {
        in = cpu_rank_gemm_in(r, m, ws->x, nh);
    }
    attention(r, m, li, b, in);
    cpu_ops_add(ws->x, ws->tmp, nh);
    if (!cfg->ln_before) norm(ws->x, DTYPE_F32, ws->x, L->ln1_w, L->ln1_b, a, n, hd);

    /* Feed-forward block, same two orders. */
    if (cfg->ln_before) {
        norm(ws->h, dt, ws->x, L->ln2_w, L->ln2_b, a, n, hd);
        in = ws->h;
    } else {
        in = cpu_rank_gemm_in(r, m, ws->x, nh);
    }
    mlp(r, m, li, n, in);
    cpu_ops_add(ws->x, ws->tmp, nh);
    if (!cfg->ln_before) norm(ws->x, DTYPE_F32, ws->x, L->ln2_w, L->ln2_b, a, n, hd);
}

void cpu_rank_forward(struct cpu_rank *r, const struct cpu_model *m,
                      const struct be_batch *b)
{
    const struct opt_config *cfg = &m->cfg;
    const int32_t n = b->n_tok, hd = cfg->hidden, proj = cfg->word_embed_proj_dim;
    int32_t max_slots = 1;
    for (int32_t s = 0; s < b->n_seq; s++)
        max_slots = MAX(max_slots, b->seqs[s].n_slots);
    ws_reserve(r, m, n, max_slots);
    struct cpu_ws *ws = &r->ws;

    /* Embeddings: tokens (through project_in when proj != hidden) plus positions.
     * Every rank computes them itself: cheaper than sending them. */
    if (proj != hd) {
        cpu_ops_embed(ws->emb, m->embed, b->tokens, n, proj); // emb: [n, proj]
        cpu_rank_gemm(r, &r->project_in, cpu_rank_gemm_in(r, m, ws->emb, (int64_t)n * proj),
                      n, ws->x);
    } else {
        cpu_ops_embed(ws->x, m->embed, b->tokens, n, hd); // x: [n, hidden]
    }
    /* Learned positions (OPT: looked up at position + 2, as Hugging Face does);
     * rotary positions are applied to q and k inside each layer instead. */
    if (cfg->arch.pos == ARCH_POS_LEARNED)
        cpu_ops_add_positions(ws->x, m->pos_embed, b->pos, cfg->arch.pos_offset, n, hd);

    for (int32_t li = 0; li < cfg->n_layer; li++)
        layer_forward(r, m, li, b);
}

void cpu_rank_deinit(struct cpu_rank *r, int32_t n_layer)
{
    if (r->layers) {
        for (int32_t li = 0; li < n_layer; li++) {
            struct cpu_layer *L = &r->layers[li];
            cpu_gemm_linear_deinit(&L->qkv);
            cpu_gemm_linear_deinit(&L->out);
            cpu_gemm_linear_deinit(&L->fc1);
            cpu_gemm_linear_deinit(&L->fc2);
            free(L->ln1_w);
            free(L->ln1_b);
            free(L->ln2_w);
            free(L->ln2_b);
        }
        free(r->layers);
    }
    cpu_gemm_linear_deinit(&r->project_in);
    struct cpu_ws *ws = &r->ws;
    free(ws->x);
    free(ws->h);
    free(ws->qkv);
    free(ws->attn);
    free(ws->ff);
    free(ws->ff32);
    free(ws->par);
    free(ws->tmp);
    free(ws->emb);
    free(ws->scratch);
    comm_destroy(r->comm);
    if (r->dnnl.engine) cpu_gemm_deinit(&r->dnnl);
    memset(r, 0, sizeof *r);
}
