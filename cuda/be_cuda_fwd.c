/*
 * be_cuda_fwd.c - the CUDA backend's forward (be_ops.forward) and the H2O victims it
 * leaves behind (be_ops.kv_victims). State: be_cuda_impl.h.
 *
 * The engine thread describes the batch once in pinned host memory (token ids,
 * positions, output rows, the decode sequences and the prefill chunks with their
 * block tables, and every rank's new slots per head); then each rank, on its own
 * thread and GPU, uploads it in one copy and runs the whole model on its stream:
 *
 *   x = embed(tokens) + positions                       [n_tok, hidden] fp16
 *   per layer: h = LN1(x); qkv = h W_qkv^T + b           [n_tok, 3 * n_head_r * D]
 *              attention (decode kernel for one-token sequences, prefill kernel for
 *              chunks; K/V written, H2O scores accumulated, decode victims chosen)
 *              x += all_reduce(attn W_out^T (+ b on rank 0))
 *              x += all_reduce(relu(LN2(x) W_fc1^T + b) W_fc2^T (+ b on rank 0))
 *   rank 0: rows = x[out_rows]; LN_f; (project_out); logits = rows W_lm^T in fp32
 *
 * (post-LN models normalise after the residual adds instead). Every projection is
 * one cuBLAS GEMM over all the step's tokens. The logits [n_out, vocab] and, when a
 * sequence evicts, the victims [n_layer, n_dec, n_head_r] are the only data copied
 * back. Thread: engine, driving the rank threads.
 */
#include "be_cuda_impl.h"

#include "err.h"
#include "util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static size_t align16(size_t n)
{
    return (n + 15) & ~(size_t)15;
}

/* Lay out and fill c->meta_host for batch b; returns 0 or ENG_ENOMEM. */
static int describe(struct cuda_be *c, const struct be_batch *b)
{
    /* H: KV heads (the pool's, the new slots' and the victims'), Hr per rank. */
    const int32_t L = c->cfg.n_layer, H = c->cfg.n_kv_head, N = c->n_rank;
    if (b->n_seq > c->cap_seq) {
        c->cap_seq = MAX(b->n_seq, 2 * c->cap_seq);
        c->dec_index = xrealloc(c->dec_index, (size_t)c->cap_seq * sizeof *c->dec_index);
        c->runs = xrealloc(c->runs, (size_t)c->cap_seq * sizeof *c->runs);
    }
    c->n_seq = b->n_seq;
    c->n_dec = c->n_pre = 0;
    c->max_blocks = 1;
    c->max_dec_slots = c->max_pre_slots = c->max_chunk = 1;
    c->n_runs = 0;
    for (int32_t i = 0; i < b->n_seq; i++) {
        const struct be_seq *s = &b->seqs[i];
        c->max_blocks = MAX(c->max_blocks, s->n_blocks);
        if (s->n_tok == 1) {
            c->dec_index[i] = c->n_dec;
            c->max_dec_slots = MAX(c->max_dec_slots, s->n_slots);
            /* Extend the current run when this row follows its last row. */
            struct dec_run *last = c->n_runs ? &c->runs[c->n_runs - 1] : NULL;
            if (last && last->d1 == c->n_dec && last->row0 + (last->d1 - last->d0) == s->tok_start)
                last->d1++;
            else
                c->runs[c->n_runs++] = (struct dec_run){c->n_dec, c->n_dec + 1, s->tok_start};
            c->n_dec++;
        } else {
            c->dec_index[i] = -1;
            c->max_pre_slots = MAX(c->max_pre_slots, s->n_slots);
            c->max_chunk = MAX(c->max_chunk, s->n_tok);
            c->n_pre++;
        }
    }
    /* Offsets: every array 16-byte aligned. */
    struct cu_meta *m = &c->meta;
    size_t off = 0;
    m->tokens = off, off = align16(off + (size_t)b->n_tok * 4);
    m->pos = off, off = align16(off + (size_t)b->n_tok * 4);
    m->out_rows = off, off = align16(off + (size_t)b->n_out * 4);
    m->dec_seqs = off, off = align16(off + (size_t)c->n_dec * sizeof(struct cuda_decode_seq));
    m->dec_blocks = off, off = align16(off + (size_t)c->n_dec * (size_t)c->max_blocks * 4);
    m->dec_slots = off, off = align16(off + (size_t)L * (size_t)c->n_dec * (size_t)H * 4);
    m->pre_seqs = off, off = align16(off + (size_t)c->n_pre * sizeof(struct cuda_prefill_seq));
    m->pre_blocks = off, off = align16(off + (size_t)c->n_pre * (size_t)c->max_blocks * 4);
    m->bytes = off;
    if (m->bytes > c->meta_host_cap) {
        cudaFreeHost(c->meta_host);
        c->meta_host = NULL;
        c->meta_host_cap = 0;
        /* Portable: every rank's GPU copies from it. */
        if (cudaHostAlloc(&c->meta_host, 2 * m->bytes, cudaHostAllocPortable) != cudaSuccess)
            return err_set(ENG_ENOMEM, "CUDA backend: no pinned memory for a batch of %d tokens",
                           b->n_tok);
        c->meta_host_cap = 2 * m->bytes;
    }
    char *base = c->meta_host;
    memcpy(base + m->tokens, b->tokens, (size_t)b->n_tok * 4);
    memcpy(base + m->pos, b->pos, (size_t)b->n_tok * 4);
    memcpy(base + m->out_rows, b->out_rows, (size_t)b->n_out * 4);
    struct cuda_decode_seq *ds = (struct cuda_decode_seq *)(base + m->dec_seqs);
    struct cuda_prefill_seq *ps = (struct cuda_prefill_seq *)(base + m->pre_seqs);
    int32_t *db = (int32_t *)(base + m->dec_blocks), *pb = (int32_t *)(base + m->pre_blocks);
    int32_t *slots = (int32_t *)(base + m->dec_slots);
    const int32_t Hr = H / N; /* KV heads per rank */
    c->have_victims = false;
    for (int32_t i = 0, d = 0, p = 0; i < b->n_seq; i++) {
        const struct be_seq *s = &b->seqs[i];
        int32_t *row = s->n_tok == 1 ? db + (size_t)d * (size_t)c->max_blocks
                                     : pb + (size_t)p * (size_t)c->max_blocks;
        memcpy(row, s->blocks, (size_t)s->n_blocks * 4);
        for (int32_t j = s->n_blocks; j < c->max_blocks; j++) row[j] = 0; /* never read */
        if (s->n_tok != 1) {
            ps[p++] = (struct cuda_prefill_seq){.tok_start = s->tok_start, .n_tok = s->n_tok,
                                               .slot_start = s->slot_start,
                                               .n_slots = s->n_slots};
            continue;
        }
        const bool evicts = s->h2o_budget > 0;
        c->have_victims |= evicts;
        ds[d] = (struct cuda_decode_seq){.n_slots = s->n_slots, .t = b->pos[s->tok_start],
                                         .budget = evicts ? s->h2o_budget : INT32_MAX,
                                         .recent = evicts ? MAX(s->h2o_recent, 1) : 1};
        /* Rank r's new slots, [n_layer, n_dec, n_kv_head_r], after the lower ranks'. */
        for (int32_t r = 0; r < N; r++) {
            int32_t *rs = slots + (size_t)r * (size_t)L * (size_t)c->n_dec * (size_t)Hr;
            for (int32_t l = 0; l < L; l++)
                for (int32_t h = 0; h < Hr; h++)
                    rs[((size_t)l * (size_t)c->n_dec + (size_t)d) * (size_t)Hr + (size_t)h] =
                        s->head_slots ? s->head_slots[l * H + r * Hr + h] : s->slot_start;
        }
        d++;
    }
    return 0;
}

/* Grow a rank's workspace for n_tok rows and n_out logits rows. */
static int ws_reserve(struct cuda_be *c, struct cu_rank *r, int32_t n_tok, int32_t n_out)
{
    const struct opt_config *cfg = &c->cfg;
    const size_t wide = (size_t)MAX(cfg->hidden, cfg->word_embed_proj_dim);
    const size_t attn = (size_t)r->sh.n_head * (size_t)cfg->head_dim;
    const size_t qkv = (size_t)(r->sh.n_head + 2 * r->sh.n_kv_head) * (size_t)cfg->head_dim;
    const bool swiglu = cfg->arch.mlp == ARCH_MLP_SWIGLU;
    const bool par = cfg->arch.parallel_residual;
    if (n_tok > r->cap_tok) {
        const size_t n = (size_t)MAX(n_tok, 2 * r->cap_tok);
        struct {
            void **p;
            size_t bytes;
        } bufs[] = {
            {(void **)&r->x, n * (size_t)cfg->hidden * 2},
            {(void **)&r->h, n * wide * 2},
            {(void **)&r->tmp, n * wide * 2},
            {(void **)&r->qkv, n * qkv * 2},
            {(void **)&r->attn, n * attn * 2},
            {(void **)&r->ff, n * (size_t)r->sh.n_ffn * 2},
            {(void **)&r->lse, n * (size_t)r->sh.n_head * 4},
            /* Only the families that use them: SwiGLU's gate | up, NeoX's branch. */
            {(void **)&r->ff2, swiglu ? n * 2 * (size_t)r->sh.n_ffn * 2 : 0},
            {(void **)&r->par, par ? n * (size_t)cfg->hidden * 2 : 0},
        };
        for (size_t i = 0; i < ARRAY_LEN(bufs); i++) {
            cudaFree(*bufs[i].p);
            *bufs[i].p = NULL;
        }
        r->cap_tok = 0;
        for (size_t i = 0; i < ARRAY_LEN(bufs); i++)
            if (bufs[i].bytes &&
                be_cuda_fail(r, cudaMalloc(bufs[i].p, bufs[i].bytes), "forward workspace"))
                return r->err;
        r->cap_tok = (int32_t)n;
    }
    if (r->sh.rank == 0 && n_out > r->cap_out) {
        const size_t n = (size_t)MAX(n_out, 2 * r->cap_out);
        cudaFree(r->logits);
        r->logits = NULL;
        r->cap_out = 0;
        if (be_cuda_fail(r,
                         cudaMalloc((void **)&r->logits, n * (size_t)cfg->vocab_size * 4),
                         "logits buffer"))
            return r->err;
        r->cap_out = (int32_t)n;
    }
    const size_t nv =
        (size_t)cfg->n_layer * (size_t)MAX(c->n_dec, 1) * (size_t)r->sh.n_kv_head;
    if (nv > r->victims_cap) {
        cudaFree(r->victims);
        cudaFreeHost(r->victims_host);
        r->victims = NULL;
        r->victims_host = NULL;
        r->victims_cap = 0;
        if (be_cuda_fail(r, cudaMalloc((void **)&r->victims, 2 * nv * 4), "victims") ||
            be_cuda_fail(r, cudaMallocHost((void **)&r->victims_host, 2 * nv * 4),
                         "victims"))
            return r->err;
        r->victims_cap = 2 * nv;
    }
    return be_cuda_reserve(r, &r->meta, &r->meta_cap, c->meta.bytes, "batch description");
}

/* A projection on the rank's stream: y [m, n] = x [m, k] W^T (+ b) (ReLU). */
static int gemm(struct cu_rank *r, uint16_t *y, const uint16_t *x, const uint16_t *w,
                const uint16_t *b, int32_t m, int32_t n, int32_t k, bool relu)
{
    return be_cuda_fail_eng(r, cuda_gemm_linear(r->gemm, y, x, w, b, m, n, k, relu));
}

/* Sum the ranks' partial outputs y [n] (out_proj or fc2). */
static int allreduce(struct cu_rank *r, uint16_t *y, int64_t n)
{
    return r->comm ? be_cuda_fail_eng(r, comm_allreduce_sum(r->comm, y, n, DTYPE_F16))
                   : r->err;
}

/* One layer's attention on rank r: rotary on q and k (rotary families), the decode
 * runs, then the prefill chunks. */
static int attention(struct cuda_be *c, struct cu_rank *r, int32_t li, const struct be_batch *b)
{
    const struct opt_config *cfg = &c->cfg;
    const struct model_arch *arch = &cfg->arch;
    const struct cu_meta *m = &c->meta;
    const char *meta = r->meta;
    const int32_t Hr = r->sh.n_head, KVr = r->sh.n_kv_head, D = cfg->head_dim;
    const size_t row = (size_t)(Hr + 2 * KVr) * (size_t)D; /* one token's q | k | v */
    const float scale = 1.0f / sqrtf((float)D);
    struct cu_layer *L = &r->layers[li];
    /* q and k (the first Hr + KVr heads of each row) turn by their true positions
     * before K is cached, as cpu_rank.c does: the cache holds rotated keys, which
     * eviction and compaction move without re-rotating. */
    if (arch->pos == ARCH_POS_ROTARY &&
        be_cuda_fail(r,
                     cuda_rope(r->qkv, (int64_t)row, (const int32_t *)(meta + m->pos),
                               r->inv_freq, b->n_tok, Hr + KVr, D, arch->rope.dims,
                               r->stream),
                     "cuda_rope"))
        return r->err;
    const int32_t *slots =
        (const int32_t *)(meta + m->dec_slots) +
        (size_t)r->sh.rank * (size_t)cfg->n_layer * (size_t)c->n_dec * (size_t)KVr;
    for (int32_t i = 0; i < c->n_runs; i++) {
        const struct dec_run *run = &c->runs[i];
        const size_t at = (size_t)li * (size_t)c->n_dec + (size_t)run->d0; /* [layer, seq] */
        struct cuda_decode_attn_args a = {
            .qkv = r->qkv + (size_t)run->row0 * row,
            .out = r->attn + (size_t)run->row0 * (size_t)Hr * (size_t)D,
            .k = L->k,
            .v = L->v,
            .pos = L->pos,
            .score = L->score,
            .blocks = (const int32_t *)(meta + m->dec_blocks) +
                      (size_t)run->d0 * (size_t)c->max_blocks,
            .max_blocks = c->max_blocks,
            .seqs = (const struct cuda_decode_seq *)(meta + m->dec_seqs) + run->d0,
            .new_slot = slots + at * (size_t)KVr,
            .victim = r->victims + at * (size_t)KVr,
            .n_seq = run->d1 - run->d0,
            .n_head = Hr,
            .head_dim = D,
            .block_size = c->block_size,
            .max_slots = c->max_dec_slots,
            .scale = scale,
            .n_kv_head = KVr,
            .window = arch->sliding_window,
            .k8 = L->k8, /* NULL unless the cache is int8 */
            .v8 = L->v8,
            .k_scale = L->k_scale,
            .v_scale = L->v_scale,
        };
        if (be_cuda_fail(r, cuda_decode_attn(&a, r->stream), "cuda_decode_attn"))
            return r->err;
    }
    if (c->n_pre == 0) return 0;
    struct cuda_prefill_attn_args p = {
        .qkv = r->qkv,
        .out = r->attn,
        .lse = r->lse,
        .k = L->k,
        .v = L->v,
        .pos = L->pos,
        .score = L->score,
        .blocks = (const int32_t *)(meta + m->pre_blocks),
        .max_blocks = c->max_blocks,
        .tok_pos = (const int32_t *)(meta + m->pos),
        .seqs = (const struct cuda_prefill_seq *)(meta + m->pre_seqs),
        .n_tok = b->n_tok,
        .n_seq = c->n_pre,
        .n_head = Hr,
        .head_dim = D,
        .block_size = c->block_size,
        .max_chunk = c->max_chunk,
        .max_slots = c->max_pre_slots,
        .scale = scale,
        .n_kv_head = KVr,
        .window = arch->sliding_window,
        .k8 = L->k8,
        .v8 = L->v8,
        .k_scale = L->k_scale,
        .v_scale = L->v_scale,
    };
    return be_cuda_fail(r, cuda_prefill_attn(&p, r->stream), "cuda_prefill_attn");
}

/* dst [n, hidden] = the model's norm of x with weights (w, b): OPT's LayerNorm (eps
 * 1e-5, cuda_layernorm, unchanged), else cuda_norm with the family's kind and eps. */
static int norm(struct cuda_be *c, struct cu_rank *r, uint16_t *dst, const uint16_t *x,
                const uint16_t *w, const uint16_t *b, int32_t n)
{
    const struct model_arch *a = &c->cfg.arch;
    const int32_t hd = c->cfg.hidden;
    if (a->family == ARCH_OPT)
        return be_cuda_fail(r, cuda_layernorm(dst, x, w, b, n, hd, r->stream), "layernorm");
    return be_cuda_fail(r,
                        cuda_norm(dst, x, w, b, a->norm == ARCH_NORM_RMSNORM, a->norm_eps,
                                  n, hd, r->stream),
                        "norm");
}

/* The attention block on its input `in` [n, hidden]: partial output all-reduced into
 * r->tmp [n, hidden]. */
static int attn_block(struct cuda_be *c, struct cu_rank *r, int32_t li,
                      const struct be_batch *b, const uint16_t *in)
{
    const struct opt_config *cfg = &c->cfg;
    const struct cu_layer *L = &r->layers[li];
    const int32_t n = b->n_tok, hd = cfg->hidden, D = cfg->head_dim;
    const int32_t attn = r->sh.n_head * D;
    const int32_t qkv = (r->sh.n_head + 2 * r->sh.n_kv_head) * D;
    if (be_cuda_mark(r, CU_SPAN_GEMM) ||
        gemm(r, r->qkv, in, L->qkv_w, L->qkv_b, n, qkv, hd, false) || // qkv: [n, qkv]
        be_cuda_mark(r, CU_SPAN_ATTN) || attention(c, r, li, b) ||    // attn: [n, attn]
        be_cuda_mark(r, CU_SPAN_GEMM) ||
        gemm(r, r->tmp, r->attn, L->out_w, L->out_b, n, hd, attn, false) ||
        be_cuda_mark(r, CU_SPAN_OTHER))
        return r->err;
    return allreduce(r, r->tmp, (int64_t)n * hd);
}

/* The MLP on its input `in` [n, hidden]: partial output all-reduced into r->tmp. */
static int mlp_block(struct cuda_be *c, struct cu_rank *r, int32_t li, int32_t n,
                     const uint16_t *in)
{
    const struct opt_config *cfg = &c->cfg;
    const struct model_arch *a = &cfg->arch;
    const struct cu_layer *L = &r->layers[li];
    const int32_t hd = cfg->hidden, F = r->sh.n_ffn;
    if (be_cuda_mark(r, CU_SPAN_GEMM)) return r->err;
    if (a->mlp == ARCH_MLP_SWIGLU) {
        /* One GEMM for gate and up (shard.h stacks their rows), then silu(gate) * up. */
        if (gemm(r, r->ff2, in, L->fc1_w, L->fc1_b, n, 2 * F, hd, false) || // [n, 2F]
            be_cuda_fail(r, cuda_act_swiglu(r->ff, r->ff2, n, F, r->stream), "swiglu"))
            return r->err;
    } else if (a->act == ARCH_ACT_RELU) {
        if (gemm(r, r->ff, in, L->fc1_w, L->fc1_b, n, F, hd, true)) return r->err;
    } else {
        /* GELU: the bias is added in fp32 inside cuda_act, not rounded to fp16 first. */
        if (gemm(r, r->ff, in, L->fc1_w, NULL, n, F, hd, false) ||
            be_cuda_fail(r,
                         cuda_act(r->ff, L->fc1_b, n, F, (enum cuda_act)a->act, r->stream),
                         "activation"))
            return r->err;
    }
    if (gemm(r, r->tmp, r->ff, L->fc2_w, L->fc2_b, n, hd, F, false) || // tmp: [n, hidden]
        be_cuda_mark(r, CU_SPAN_OTHER))
        return r->err;
    return allreduce(r, r->tmp, (int64_t)n * hd);
}

static int layer_forward(struct cuda_be *c, struct cu_rank *r, int32_t li,
                         const struct be_batch *b)
{
    const struct opt_config *cfg = &c->cfg;
    const struct cu_layer *L = &r->layers[li];
    const int32_t n = b->n_tok, hd = cfg->hidden;
    const int64_t nh = (int64_t)n * hd;
    cudaStream_t st = r->stream;

    if (cfg->arch.parallel_residual) {
        /* GPT-NeoX: x = x + attn(ln1(x)) + mlp(ln2(x)), both norms of the same x; the
         * two branches added first, as HF does (mlp_output + attn_output + x). */
        if (norm(c, r, r->h, r->x, L->ln1_w, L->ln1_b, n) ||
            attn_block(c, r, li, b, r->h) ||
            be_cuda_fail(r,
                         cudaMemcpyAsync(r->par, r->tmp, (size_t)nh * 2,
                                         cudaMemcpyDeviceToDevice, st),
                         "parallel residual") ||
            norm(c, r, r->h, r->x, L->ln2_w, L->ln2_b, n) || mlp_block(c, r, li, n, r->h) ||
            be_cuda_fail(r, cuda_add(r->tmp, r->par, nh, st), "residual") ||
            be_cuda_fail(r, cuda_add(r->x, r->tmp, nh, st), "residual"))
            return r->err;
        return 0;
    }

    /* Attention block. Pre-LN: x += attn(LN(x)). Post-LN: x = LN(x + attn(x)). */
    const uint16_t *in = r->x;
    if (cfg->ln_before) {
        if (norm(c, r, r->h, r->x, L->ln1_w, L->ln1_b, n)) return r->err;
        in = r->h;
    }
    if (attn_block(c, r, li, b, in) ||
        be_cuda_fail(r, cuda_add(r->x, r->tmp, nh, st), "residual"))
        return r->err;
    if (!cfg->ln_before && norm(c, r, r->x, r->x, L->ln1_w, L->ln1_b, n)) return r->err;

    /* Feed-forward block, same two orders. */
    in = r->x;
    if (cfg->ln_before) {
        if (norm(c, r, r->h, r->x, L->ln2_w, L->ln2_b, n)) return r->err;
        in = r->h;
    }
    if (mlp_block(c, r, li, n, in) ||
        be_cuda_fail(r, cuda_add(r->x, r->tmp, nh, st), "residual"))
        return r->err;
    if (!cfg->ln_before) norm(c, r, r->x, r->x, L->ln2_w, L->ln2_b, n);
    return r->err;
}

/* Rank 0: logits [n_out, vocab] fp32 of the requested rows, copied to the host. */
static int logits(struct cuda_be *c, struct cu_rank *r, const struct be_batch *b)
{
    const struct opt_config *cfg = &c->cfg;
    const int32_t hd = cfg->hidden, proj = cfg->word_embed_proj_dim, n_out = b->n_out;
    const int32_t *rows = (const int32_t *)((const char *)r->meta + c->meta.out_rows);
    cudaStream_t st = r->stream;
    /* Gather the rows: an embedding lookup with x as the table. */
    if (be_cuda_fail(r, cuda_embed(r->h, r->x, rows, NULL, NULL, 0, n_out, hd, st),
                     "gather rows"))
        return r->err;
    if (cfg->arch.final_norm && norm(c, r, r->h, r->h, r->lnf_w, r->lnf_b, n_out))
        return r->err;
    const uint16_t *fin = r->h;
    if (be_cuda_mark(r, CU_SPAN_GEMM)) return r->err;
    if (proj != hd) {
        if (gemm(r, r->tmp, r->h, r->project_out, NULL, n_out, proj, hd, false)) return r->err;
        fin = r->tmp;
    }
    if (be_cuda_fail_eng(r, cuda_gemm_linear_f32(r->gemm, r->logits, fin, r->lm_head, n_out,
                                                 cfg->vocab_size, proj)) ||
        be_cuda_mark(r, CU_SPAN_OTHER))
        return r->err;
    if (!c->logits_out) return 0; /* kept on the device for sample */
    return be_cuda_fail(r,
                        cudaMemcpyAsync(c->logits_out, r->logits,
                                        (size_t)n_out * (size_t)cfg->vocab_size * 4,
                                        cudaMemcpyDeviceToHost, st),
                        "logits download");
}

/* Grow one rank's workspace for the batch (a ranks job of its own, before the
 * forward: a rank that failed here inside the forward would leave the others waiting
 * for ever in its first all-reduce). */
static void job_reserve(void *arg, int32_t rank)
{
    struct cuda_be *c = arg;
    struct cu_rank *r = &c->ranks[rank];
    if (be_cuda_fail(r, cudaSetDevice(r->device), "cudaSetDevice")) return;
    ws_reserve(c, r, c->batch->n_tok, c->batch->n_out);
}

/* Rank r's forward enqueued on its stream, its device current: the batch upload,
 * the embeddings, every layer, rank 0's logits and the downloads. Returns r->err;
 * the caller synchronises. */
static int forward_enqueue(struct cuda_be *c, struct cu_rank *r, const struct be_batch *b)
{
    const struct opt_config *cfg = &c->cfg;
    const int32_t n = b->n_tok, hd = cfg->hidden, proj = cfg->word_embed_proj_dim;
    cudaStream_t st = r->stream;
    if (be_cuda_fail(r,
                     cudaMemcpyAsync(r->meta, c->meta_host, c->meta.bytes,
                                     cudaMemcpyHostToDevice, st),
                     "batch upload"))
        return r->err;
    const char *meta = r->meta;
    const int32_t *tokens = (const int32_t *)(meta + c->meta.tokens);
    const int32_t *pos = (const int32_t *)(meta + c->meta.pos);
    /* Embeddings; OPT looks its learned positions up at position + 2 (pos_offset);
     * rotary families add none here (q and k turn inside each layer). */
    const int32_t off = cfg->arch.pos_offset;
    const uint16_t *pt = cfg->arch.pos == ARCH_POS_LEARNED ? r->pos_embed : NULL;
    if (proj != hd) {
        if (be_cuda_fail(r,
                         cuda_embed(r->tmp, r->embed, tokens, NULL, NULL, 0, n, proj, st),
                         "embed") ||
            be_cuda_mark(r, CU_SPAN_GEMM) ||
            gemm(r, r->x, r->tmp, r->project_in, NULL, n, hd, proj, false) ||
            be_cuda_mark(r, CU_SPAN_OTHER) ||
            (pt && be_cuda_fail(r, cuda_embed_positions(r->x, pt, pos, off, n, hd, st),
                                "positions")))
            return r->err;
    } else if (be_cuda_fail(r, cuda_embed(r->x, r->embed, tokens, pt, pos, off, n, hd, st),
                            "embed")) {
        return r->err;
    }
    for (int32_t li = 0; li < cfg->n_layer; li++)
        if (layer_forward(c, r, li, b)) return r->err;
    /* The last forward's events completed before it returned: read them now, while the
     * GPU works through this one and before the logits' download to pageable memory,
     * which blocks the host (be_cuda_prof.c). */
    if (r->timing) be_cuda_marks_read(r, &r->marks[r->mark_cur ^ 1]);
    if (r->sh.rank == 0 && b->n_out > 0 && logits(c, r, b)) return r->err;
    if (c->have_victims) {
        const size_t nv = (size_t)cfg->n_layer * (size_t)c->n_dec * (size_t)r->sh.n_kv_head;
        be_cuda_fail(r,
                     cudaMemcpyAsync(r->victims_host, r->victims, nv * 4,
                                     cudaMemcpyDeviceToHost, st),
                     "victims download");
    }
    return r->err;
}

/* One rank's forward (a ranks job), its workspace reserved. Rank 0 times it when the
 * profile asks (be_cuda_prof.c). */
static void job_forward(void *arg, int32_t rank)
{
    struct cuda_be *c = arg;
    struct cu_rank *r = &c->ranks[rank];
    r->timing = c->timing && rank == 0;
    if (be_cuda_fail(r, cudaSetDevice(r->device), "cudaSetDevice")) return;
    if (!forward_enqueue(c, r, c->batch))
        be_cuda_fail(r, cudaStreamSynchronize(r->stream), "forward");
    be_cuda_marks_done(r, !r->err);
}

int be_cuda_forward(void *ctx, const struct be_batch *b, float *logits_out)
{
    struct cuda_be *c = ctx;
    CHECK(c->n_blocks > 0);
    if (b->n_tok == 0) return 0;
    const double t0 = time_now();
    int err = describe(c, b);
    if (err) return err;
    c->batch = b;
    c->logits_out = logits_out;
    c->n_kept = 0;
    err = be_cuda_run(c, job_reserve);
    if (!err) err = be_cuda_run(c, job_forward);
    if (!err && !logits_out) c->n_kept = b->n_out;
    c->prof.forward_s += time_now() - t0;
    c->prof.n_forward++;
    return err;
}

int be_cuda_kv_victims(void *ctx, int32_t seq, int32_t *victims)
{
    struct cuda_be *c = ctx;
    const int32_t L = c->cfg.n_layer, H = c->cfg.n_kv_head; /* victims per KV head */
    if (!c->have_victims || seq < 0 || seq >= c->n_seq || c->dec_index[seq] < 0)
        return err_set(ENG_EINVAL, "kv_victims: sequence %d of the last forward evicted "
                                   "nothing", seq);
    const size_t d = (size_t)c->dec_index[seq];
    for (int32_t i = 0; i < c->n_rank; i++) {
        const struct cu_rank *r = &c->ranks[i];
        const int32_t Hr = r->sh.n_kv_head;
        for (int32_t l = 0; l < L; l++)
            for (int32_t h = 0; h < Hr; h++)
                victims[l * H + r->sh.kv_head0 + h] =
                    r->victims_host[((size_t)l * (size_t)c->n_dec + d) * (size_t)Hr +
                                    (size_t)h];
    }
    return 0;
}
