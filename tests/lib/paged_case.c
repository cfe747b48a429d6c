/*
 * paged_case.c - the random paged attention states of paged_case.h.
 *
 * Each case draws its numbers in the order the tests' logs were first written with
 * (pool, then queries or prompts, then tables), so a seed gives the same case as it
 * always has.
 */
#include "paged_case.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void *dc_alloc(size_t n)
{
    void *p = calloc(n ? n : 1, 1);
    if (!p) abort();
    return p;
}

void dc_shuffle_blocks(uint64_t *st, int32_t *blocks, int32_t n_pool, int64_t n_take)
{
    int32_t *perm = dc_alloc((size_t)n_pool * sizeof *perm);
    for (int32_t b = 0; b < n_pool; b++)
        perm[b] = b;
    for (int32_t b = n_pool - 1; b > 0; b--) {
        int32_t r = dc_int(st, b + 1), t = perm[b];
        perm[b] = perm[r];
        perm[r] = t;
    }
    memcpy(blocks, perm, (size_t)n_take * sizeof *perm);
    free(perm);
}

/* The pool and n_seq tables of up to max_slots slots each, zeroed: n_pool is the
 * blocks of every table plus 3 nobody uses. Draws nothing. */
static void pool_alloc(struct paged_pool *p, int32_t n_seq, int32_t n_head,
                       int32_t head_dim, int32_t block_size, int32_t max_slots)
{
    p->n_head = n_head;
    p->head_dim = head_dim;
    p->block_size = block_size;
    p->max_blocks = (max_slots + block_size - 1) / block_size;
    p->n_pool = n_seq * p->max_blocks + 3;
    const int64_t el = paged_pool_slots(p);
    p->k = dc_alloc((size_t)(el * head_dim) * sizeof *p->k);
    p->v = dc_alloc((size_t)(el * head_dim) * sizeof *p->v);
    p->pos = dc_alloc((size_t)el * sizeof *p->pos);
    p->score = dc_alloc((size_t)el * sizeof *p->score);
    p->blocks = dc_alloc((size_t)n_seq * p->max_blocks * sizeof *p->blocks);
}

/* K/V uniform in [-1, 1), every slot free (pos -1) with score `free_score`. The decode
 * and prefill cases fill their pools alike, so the kernels meet the same kind of
 * garbage in the slots nobody uses. */
static void pool_fill_free(struct paged_pool *p, uint64_t *st, float free_score)
{
    const int64_t el = paged_pool_slots(p);
    for (int64_t e = 0; e < el * p->head_dim; e++) {
        p->k[e] = f32_to_f16(dc_float(st, -1.0f, 1.0f));
        p->v[e] = f32_to_f16(dc_float(st, -1.0f, 1.0f));
    }
    for (int64_t e = 0; e < el; e++) {
        p->pos[e] = -1;
        p->score[e] = free_score;
    }
}

void paged_pool_to_int8(struct paged_pool *p)
{
    const int32_t D = p->head_dim, BS = p->block_size;
    const int64_t el = paged_pool_slots(p);
    p->k8 = dc_alloc((size_t)(el * D));
    p->v8 = dc_alloc((size_t)(el * D));
    p->k_scale = dc_alloc((size_t)el * sizeof *p->k_scale);
    p->v_scale = dc_alloc((size_t)el * sizeof *p->v_scale);
    uint16_t *col = dc_alloc((size_t)D * sizeof *col);
    for (int64_t si = 0; si < el; si++) {
        /* Slot si is offset si % BS of tile si / BS; its key is a column of the
         * transposed tile, its value a row. */
        const int64_t t = si / BS, o = si % BS;
        for (int32_t d = 0; d < D; d++)
            col[d] = p->k[(t * D + d) * BS + o];
        p->k_scale[si] = cuda_ref_int8_quantize(p->k8 + t * D * BS + o, BS, col, D);
        p->v_scale[si] = cuda_ref_int8_quantize(p->v8 + si * D, 1, p->v + si * D, D);
    }
    free(col);
}

static void pool_free(struct paged_pool *p)
{
    free(p->k8);
    free(p->v8);
    free(p->k_scale);
    free(p->v_scale);
    free(p->k);
    free(p->v);
    free(p->pos);
    free(p->score);
    free(p->blocks);
    memset(p, 0, sizeof *p);
}

/* ---- Decode steps. ---- */

struct cuda_decode_attn_args dc_args(struct decode_case *c)
{
    const struct paged_pool *p = &c->pool;
    struct cuda_decode_attn_args a = {
        .qkv = c->qkv,
        .out = c->out,
        .k = p->k,
        .v = p->v,
        .pos = p->pos,
        .score = p->score,
        .blocks = p->blocks,
        .max_blocks = p->max_blocks,
        .seqs = c->seqs,
        .new_slot = c->new_slot,
        .victim = c->victim,
        .n_seq = c->n_seq,
        .n_head = c->n_q_head,
        .head_dim = p->head_dim,
        .block_size = p->block_size,
        .max_slots = c->max_slots,
        .scale = 1.0f / sqrtf((float)p->head_dim),
        .n_kv_head = p->n_head,
        .window = c->window,
        .k8 = p->k8,
        .v8 = p->v8,
        .k_scale = p->k_scale,
        .v_scale = p->v_scale,
    };
    if (p->k8) a.k = a.v = NULL; /* an int8 call must not read them */
    return a;
}

/* Sequence i's state: its budget shape, then per head m earlier positions in a random
 * slot order around the hole or the next slot. slots [max_b], cand [4 max_b + 64]:
 * scratch. */
static void dc_make_seq(struct decode_case *c, uint64_t *st, int32_t i, int32_t max_b,
                        bool ties, int32_t *slots, int32_t *cand)
{
    struct paged_pool *p = &c->pool;
    struct cuda_decode_seq *sq = &c->seqs[i];
    const int32_t H = p->n_head;
    /* The budget: B = heavy + recent, in one of the shapes DESIGN names. */
    const int32_t B = 2 + dc_int(st, max_b - 1); /* 2..max_b */
    int32_t R;
    switch (dc_int(st, 4)) {
    case 0: R = 1; break;                  /* the new token competes */
    case 1: R = B; break;                  /* H = 0: local, a sliding window */
    default: R = 1 + dc_int(st, B); break; /* any split */
    }
    const bool full = dc_int(st, 6) == 0, at_budget = !full && dc_int(st, 3) != 0;
    /* m earlier tokens per head; the new one makes m + 1 occupied. */
    const int32_t m = at_budget ? B - 1 : dc_int(st, B);
    sq->n_slots = at_budget ? B : m + 1;
    sq->budget = full ? INT32_MAX : B;
    sq->recent = R;
    sq->t = m + dc_int(st, 3 * max_b + 32); /* positions 0..t-1 came before */
    const int32_t n_prev = sq->t;
    for (int32_t h = 0; h < H; h++) {
        /* m distinct earlier positions (always the newest, t - 1, when m > 0),
         * in a random slot order around a random hole. */
        for (int32_t q = 0; q < n_prev; q++)
            cand[q] = q;
        for (int32_t q = 0; q < m; q++) {
            const int32_t r = q == 0 ? n_prev - 1 : q + dc_int(st, n_prev - q);
            const int32_t t = cand[q];
            cand[q] = cand[r];
            cand[r] = t;
        }
        for (int32_t s = 0; s < sq->n_slots; s++)
            slots[s] = s;
        for (int32_t s = sq->n_slots - 1; s > 0; s--) {
            int32_t r = dc_int(st, s + 1), t = slots[s];
            slots[s] = slots[r];
            slots[r] = t;
        }
        /* at_budget: slots[m] is the hole; growing: the new token takes slot m. */
        if (!at_budget)
            for (int32_t s = 0; s <= m; s++)
                slots[s] = s;
        c->new_slot[(int64_t)i * H + h] = slots[m];
        for (int32_t q = 0; q < m; q++) {
            const int64_t e = dc_index(c, i, slots[q], h);
            p->pos[e] = cand[q];
            p->score[e] = ties ? 0.25f * (float)dc_int(st, 6) : dc_float(st, 0.0f, 4.0f);
        }
        /* The hole or the next slot: free, with a stale score. */
        p->score[dc_index(c, i, slots[m], h)] = 7.0f;
    }
    if (sq->n_slots > c->max_slots) c->max_slots = sq->n_slots;
}

void dc_make(struct decode_case *c, uint64_t *st, int32_t n_seq, int32_t n_head,
             int32_t head_dim, int32_t block_size, int32_t max_b, bool ties)
{
    dc_make_gqa(c, st, n_seq, n_head, n_head, head_dim, block_size, max_b, ties, 0);
}

void dc_make_gqa(struct decode_case *c, uint64_t *st, int32_t n_seq, int32_t n_q,
                 int32_t n_kv, int32_t head_dim, int32_t block_size, int32_t max_b,
                 bool ties, int32_t window)
{
    memset(c, 0, sizeof *c);
    c->n_seq = n_seq;
    c->n_q_head = n_q;
    c->window = window;
    const int32_t D = head_dim;
    const int64_t row = (int64_t)(n_q + 2 * n_kv) * D;
    pool_alloc(&c->pool, n_seq, n_kv, head_dim, block_size, max_b);
    pool_fill_free(&c->pool, st, 0.0f);
    c->qkv = dc_alloc((size_t)(n_seq * row) * sizeof *c->qkv);
    c->seqs = dc_alloc((size_t)n_seq * sizeof *c->seqs);
    c->new_slot = dc_alloc((size_t)n_seq * n_kv * sizeof *c->new_slot);
    c->out = dc_alloc((size_t)n_seq * n_q * D * sizeof *c->out);
    c->victim = dc_alloc((size_t)n_seq * n_kv * sizeof *c->victim);

    for (int64_t e = 0; e < n_seq * row; e++) {
        const bool is_q = e % row < (int64_t)n_q * D;
        /* Large enough logits that the softmax is far from uniform. */
        c->qkv[e] = f32_to_f16(ties && is_q ? 0.0f : dc_float(st, -3.0f, 3.0f));
    }
    dc_shuffle_blocks(st, c->pool.blocks, c->pool.n_pool,
                      (int64_t)n_seq * c->pool.max_blocks);

    int32_t *slots = dc_alloc((size_t)max_b * sizeof *slots);
    int32_t *cand = dc_alloc((size_t)(4 * max_b + 64) * sizeof *cand);
    for (int32_t i = 0; i < n_seq; i++)
        dc_make_seq(c, st, i, max_b, ties, slots, cand);
    free(slots);
    free(cand);
}

void dc_free(struct decode_case *c)
{
    pool_free(&c->pool);
    free(c->qkv);
    free(c->seqs);
    free(c->new_slot);
    free(c->out);
    free(c->victim);
    memset(c, 0, sizeof *c);
}

/* ---- Chunked prefills. ---- */

/* nc - 1 distinct cut points in (0, P), ascending, into cut[1 .. nc - 1]. */
static void pc_cuts(uint64_t *st, int32_t *cut, int32_t P, int32_t nc)
{
    cut[0] = 0;
    cut[nc] = P;
    for (int32_t k = 1; k < nc; k++) {
        int32_t x;
        bool dup;
        do {
            x = 1 + dc_int(st, P - 1);
            dup = false;
            for (int32_t m = 1; m < k; m++)
                dup |= cut[m] == x;
        } while (dup);
        int32_t m = k;
        while (m > 1 && cut[m - 1] > x) {
            cut[m] = cut[m - 1];
            m--;
        }
        cut[m] = x;
    }
}

void pc_make(struct prefill_case *c, uint64_t *st, int32_t n_seq, int32_t n_head,
             int32_t head_dim, int32_t block_size, int32_t max_p, int32_t max_chunks)
{
    pc_make_gqa(c, st, n_seq, n_head, n_head, head_dim, block_size, max_p, max_chunks, 0);
}

void pc_make_gqa(struct prefill_case *c, uint64_t *st, int32_t n_seq, int32_t n_q,
                 int32_t n_kv, int32_t head_dim, int32_t block_size, int32_t max_p,
                 int32_t max_chunks, int32_t window)
{
    memset(c, 0, sizeof *c);
    c->n_seq = n_seq;
    c->max_p = max_p;
    c->n_q_head = n_q;
    c->window = window;
    const int64_t W = (int64_t)(n_q + 2 * n_kv) * head_dim; /* one row of q | k | v */
    pool_alloc(&c->pool, n_seq, n_kv, head_dim, block_size, max_p);
    pool_fill_free(&c->pool, st, 7.0f);
    c->len = dc_alloc((size_t)n_seq * sizeof *c->len);
    c->cut = dc_alloc((size_t)n_seq * (PC_MAX_CHUNKS + 1) * sizeof *c->cut);
    c->n_chunks = dc_alloc((size_t)n_seq * sizeof *c->n_chunks);
    c->qkv = dc_alloc((size_t)n_seq * sizeof *c->qkv);
    dc_shuffle_blocks(st, c->pool.blocks, c->pool.n_pool,
                      (int64_t)n_seq * c->pool.max_blocks);
    for (int32_t i = 0; i < n_seq; i++) {
        const int32_t P = 1 + dc_int(st, max_p);
        int32_t nc = 1 + dc_int(st, max_chunks);
        if (nc > P) nc = P;
        c->len[i] = P;
        c->n_chunks[i] = nc;
        if (nc > c->n_steps) c->n_steps = nc;
        pc_cuts(st, c->cut + (int64_t)i * (PC_MAX_CHUNKS + 1), P, nc);
        c->qkv[i] = dc_alloc((size_t)(P * W) * sizeof **c->qkv);
        for (int64_t e = 0; e < P * W; e++)
            c->qkv[i][e] = f32_to_f16(dc_float(st, -3.0f, 3.0f));
    }
}

void pc_batch(const struct prefill_case *c, int32_t step, struct prefill_batch *b)
{
    const struct paged_pool *p = &c->pool;
    const int32_t H = c->n_q_head, D = p->head_dim, W = (H + 2 * p->n_head) * D;
    memset(b, 0, sizeof *b);
    int32_t n_tok = 0, n_seq = 0;
    for (int32_t i = 0; i < c->n_seq; i++)
        if (step < c->n_chunks[i]) {
            const int32_t *cut = c->cut + (int64_t)i * (PC_MAX_CHUNKS + 1);
            n_tok += cut[step + 1] - cut[step];
            n_seq++;
        }
    b->qkv = dc_alloc((size_t)n_tok * W * sizeof *b->qkv);
    b->tok_pos = dc_alloc((size_t)n_tok * sizeof *b->tok_pos);
    b->seqs = dc_alloc((size_t)n_seq * sizeof *b->seqs);
    b->blocks = dc_alloc((size_t)n_seq * p->max_blocks * sizeof *b->blocks);
    b->seq_of = dc_alloc((size_t)n_seq * sizeof *b->seq_of);
    b->out = dc_alloc((size_t)n_tok * H * D * sizeof *b->out);
    b->lse = dc_alloc((size_t)n_tok * H * sizeof *b->lse);
    for (int32_t i = 0; i < c->n_seq; i++) {
        if (step >= c->n_chunks[i]) continue;
        const int32_t *cut = c->cut + (int64_t)i * (PC_MAX_CHUNKS + 1);
        const int32_t s0 = cut[step], nt = cut[step + 1] - s0;
        struct cuda_prefill_seq *sq = &b->seqs[b->n_seq];
        *sq = (struct cuda_prefill_seq){
            .tok_start = b->n_tok, .n_tok = nt, .slot_start = s0, .n_slots = s0 + nt};
        memcpy(b->blocks + (int64_t)b->n_seq * p->max_blocks,
               p->blocks + (int64_t)i * p->max_blocks,
               (size_t)p->max_blocks * sizeof(int32_t));
        memcpy(b->qkv + (int64_t)b->n_tok * W, c->qkv[i] + (int64_t)s0 * W,
               (size_t)nt * W * sizeof *b->qkv);
        for (int32_t r = 0; r < nt; r++)
            b->tok_pos[b->n_tok + r] = s0 + r;
        if (nt > b->max_chunk) b->max_chunk = nt;
        if (sq->n_slots > b->max_slots) b->max_slots = sq->n_slots;
        b->seq_of[b->n_seq++] = i;
        b->n_tok += nt;
    }
}

void pc_batch_free(struct prefill_batch *b)
{
    free(b->qkv);
    free(b->tok_pos);
    free(b->seqs);
    free(b->blocks);
    free(b->seq_of);
    free(b->out);
    free(b->lse);
    memset(b, 0, sizeof *b);
}

struct cuda_prefill_attn_args pc_args(struct prefill_case *c, struct prefill_batch *b)
{
    const struct paged_pool *p = &c->pool;
    struct cuda_prefill_attn_args a = {
        .qkv = b->qkv,
        .out = b->out,
        .lse = b->lse,
        .k = p->k,
        .v = p->v,
        .pos = p->pos,
        .score = p->score,
        .blocks = b->blocks,
        .max_blocks = p->max_blocks,
        .tok_pos = b->tok_pos,
        .seqs = b->seqs,
        .n_tok = b->n_tok,
        .n_seq = b->n_seq,
        .n_head = c->n_q_head,
        .head_dim = p->head_dim,
        .block_size = p->block_size,
        .max_chunk = b->max_chunk,
        .max_slots = b->max_slots,
        .scale = 1.0f / sqrtf((float)p->head_dim),
        .n_kv_head = p->n_head,
        .window = c->window,
        .k8 = p->k8,
        .v8 = p->v8,
        .k_scale = p->k_scale,
        .v_scale = p->v_scale,
    };
    if (p->k8) a.k = a.v = NULL; /* an int8 call must not read them */
    return a;
}

void pc_free(struct prefill_case *c)
{
    for (int32_t i = 0; i < c->n_seq; i++)
        free(c->qkv[i]);
    free(c->qkv);
    pool_free(&c->pool);
    free(c->len);
    free(c->cut);
    free(c->n_chunks);
    memset(c, 0, sizeof *c);
}

/* ---- Prefill compaction. ---- */

struct cuda_kv_compact_args cc_args(struct compact_case *c)
{
    const struct paged_pool *p = &c->pool;
    struct cuda_kv_compact_args a = {.k = p->k,
                                     .v = p->v,
                                     .pos = p->pos,
                                     .score = p->score,
                                     .blocks = p->blocks,
                                     .keep = c->keep,
                                     .n_slots = c->n_slots,
                                     .n_keep = c->n_keep,
                                     .n_head = p->n_head,
                                     .head_dim = p->head_dim,
                                     .block_size = p->block_size,
                                     .k8 = p->k8,
                                     .v8 = p->v8,
                                     .k_scale = p->k_scale,
                                     .v_scale = p->v_scale};
    if (p->k8) a.k = a.v = NULL; /* an int8 call must not read them */
    return a;
}

void cc_make(struct compact_case *c, uint64_t *st, int32_t n_head, int32_t head_dim,
             int32_t block_size, int32_t n_slots, int32_t n_keep)
{
    memset(c, 0, sizeof *c);
    c->n_slots = n_slots;
    c->n_keep = n_keep;
    struct paged_pool *p = &c->pool;
    pool_alloc(p, 1, n_head, head_dim, block_size, n_slots);
    const int32_t nb = p->max_blocks;
    const int64_t ns = cc_slots(c);
    c->keep = dc_alloc((size_t)n_head * (n_keep ? n_keep : 1) * sizeof *c->keep);
    for (int64_t e = 0; e < ns * head_dim; e++) {
        p->k[e] = f32_to_f16(dc_float(st, -2.0f, 2.0f));
        p->v[e] = f32_to_f16(dc_float(st, -2.0f, 2.0f));
    }
    for (int64_t e = 0; e < ns; e++) {
        p->pos[e] = dc_int(st, 10) == 0 ? -1 : dc_int(st, 4 * n_slots + 1);
        p->score[e] = dc_float(st, 0.0f, 8.0f);
    }
    /* A random permutation of the pool; the table takes its first nb blocks. */
    dc_shuffle_blocks(st, p->blocks, p->n_pool, nb);
    /* Per head: choose n_keep of n_slots in order (selection sampling: ascending). */
    for (int32_t h = 0; h < n_head; h++) {
        int32_t *kp = c->keep + (int64_t)h * n_keep, got = 0;
        for (int32_t s = 0; s < n_slots && got < n_keep; s++)
            if (dc_int(st, n_slots - s) < n_keep - got) kp[got++] = s;
    }
}

void cc_free(struct compact_case *c)
{
    pool_free(&c->pool);
    free(c->keep);
    memset(c, 0, sizeof *c);
}

/* ---- KV block state. ---- */

const int32_t kb_block_sizes[4] = {1, 16, 64, 5};

void kb_fill_pool(uint64_t *st, uint16_t *v, int32_t *pos, float *score, int64_t n_state,
                  int32_t head_dim)
{
    for (int64_t e = 0; e < n_state * head_dim; e++)
        v[e] = dc_int(st, 4) == 0 ? 0x7e00 : f32_to_f16(dc_float(st, -4.0f, 4.0f));
    for (int64_t e = 0; e < n_state; e++) {
        pos[e] = dc_int(st, 1001) - 1;
        score[e] = dc_float(st, -1.0f, 100.0f);
    }
}
