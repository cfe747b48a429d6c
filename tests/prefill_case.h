/*
 * prefill_case.h - random chunked prefills in the paged layout of cuda_ref.h, for the
 * test of the host reference against the CPU engine (tests/unit/
 * test_cuda_prefill_ref.c) and of the CUDA kernel against the reference (tests/gpu/
 * test_cuda_prefill.c).
 *
 * A case is n_seq prompts of random lengths, each cut into its own random number of
 * chunks, with disjoint random block tables over a shared pool whose unused slots hold
 * garbage (random K/V, pos -1, a stale score of 7). Step s of the case is the batch
 * of every sequence's chunk s (sequences with fewer chunks have dropped out), as the
 * scheduler builds chunked prefill: row r of a chunk goes to slot slot_start + r, where
 * slot_start is the prompt tokens already prefilled, and the queries see slots
 * [0, slot_start + n_tok). Positions are the prompt positions 0..P-1.
 * Header-only, static: each test includes it once.
 */
#ifndef H2O_PREFILL_CASE_H
#define H2O_PREFILL_CASE_H

#include "cuda_ref.h"
#include "decode_case.h" /* dc_int, dc_float, dc_alloc, dc_pool_make, dc_shuffle_blocks */
#include "dtype.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { PC_MAX_CHUNKS = 8 };

struct prefill_case {
    int32_t n_seq, n_head, head_dim, block_size, n_pool, max_blocks, max_p, n_steps;
    uint16_t *k,
        *v; /* pool [n_pool, n_head, head_dim, block_size], [.., block_size, head_dim] */
    int32_t *pos; /* [n_pool, n_head, block_size] */
    float *score;
    int32_t *blocks;   /* [n_seq, max_blocks] */
    int32_t *len;      /* [n_seq] prompt lengths */
    int32_t *cut;      /* [n_seq, PC_MAX_CHUNKS + 1] chunk c is [cut[c], cut[c + 1]) */
    int32_t *n_chunks; /* [n_seq] */
    uint16_t **qkv;    /* [n_seq] -> [len, 3 * n_head * head_dim] each prompt's rows */
};

/* One step's batch: the arrays cuda_prefill_attn_args points to. */
struct prefill_batch {
    int32_t n_tok, n_seq, max_chunk, max_slots;
    uint16_t *qkv;    /* [n_tok, 3 * n_head * head_dim] */
    int32_t *tok_pos; /* [n_tok] */
    struct cuda_prefill_seq *seqs;
    int32_t *blocks; /* [n_seq, max_blocks] */
    int32_t *seq_of; /* [n_seq] which case sequence each batch sequence is */
    uint16_t *out;   /* [n_tok, n_head * head_dim] */
    float *lse;      /* [n_tok, n_head] */
};

/*
 * n_seq prompts of 1..max_p tokens, each in 1..max_chunks chunks (max_chunks <=
 * PC_MAX_CHUNKS; a chunk is never empty). Caller frees with pc_free.
 */
static inline void pc_make(struct prefill_case *c, uint64_t *st, int32_t n_seq,
                           int32_t n_head, int32_t head_dim, int32_t block_size,
                           int32_t max_p, int32_t max_chunks)
{
    memset(c, 0, sizeof *c);
    c->n_seq = n_seq;
    c->n_head = n_head;
    c->head_dim = head_dim;
    c->block_size = block_size;
    c->max_p = max_p;
    c->max_blocks = (max_p + block_size - 1) / block_size;
    c->n_pool = n_seq * c->max_blocks + 3; /* a few blocks nobody uses */
    const int32_t H = n_head, D = head_dim, BS = block_size;
    const int64_t pool_el = (int64_t)c->n_pool * H * BS;
    /* Unused slots hold a stale score of 7: a written slot must start from 0. */
    dc_pool_make(st, pool_el, D, &c->k, &c->v, &c->pos, &c->score, 7.0f);
    c->blocks = dc_alloc((size_t)n_seq * c->max_blocks * sizeof *c->blocks);
    c->len = dc_alloc((size_t)n_seq * sizeof *c->len);
    c->cut = dc_alloc((size_t)n_seq * (PC_MAX_CHUNKS + 1) * sizeof *c->cut);
    c->n_chunks = dc_alloc((size_t)n_seq * sizeof *c->n_chunks);
    c->qkv = dc_alloc((size_t)n_seq * sizeof *c->qkv);
    dc_shuffle_blocks(st, c->blocks, c->n_pool, (int64_t)n_seq * c->max_blocks);
    for (int32_t i = 0; i < n_seq; i++) {
        const int32_t P = 1 + dc_int(st, max_p);
        int32_t nc = 1 + dc_int(st, max_chunks);
        if (nc > P) nc = P;
        c->len[i] = P;
        c->n_chunks[i] = nc;
        if (nc > c->n_steps) c->n_steps = nc;
        /* nc - 1 distinct cut points in (0, P), ascending. */
        int32_t *cut = c->cut + (int64_t)i * (PC_MAX_CHUNKS + 1);
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
        c->qkv[i] = dc_alloc((size_t)P * 3 * H * D * sizeof **c->qkv);
        for (int64_t e = 0; e < (int64_t)P * 3 * H * D; e++)
            c->qkv[i][e] = f32_to_f16(dc_float(st, -3.0f, 3.0f));
    }
}

/* The batch of step `step` (0 .. n_steps - 1) into b (allocated here; pc_batch_free). */
static inline void pc_batch(const struct prefill_case *c, int32_t step,
                            struct prefill_batch *b)
{
    const int32_t H = c->n_head, D = c->head_dim, W = 3 * H * D;
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
    b->blocks = dc_alloc((size_t)n_seq * c->max_blocks * sizeof *b->blocks);
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
        memcpy(b->blocks + (int64_t)b->n_seq * c->max_blocks,
               c->blocks + (int64_t)i * c->max_blocks,
               (size_t)c->max_blocks * sizeof(int32_t));
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

static inline void pc_batch_free(struct prefill_batch *b)
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

/* The arguments of cuda_prefill_attn / cuda_ref_prefill_attn: b over c's pool. */
static inline struct cuda_prefill_attn_args pc_args(struct prefill_case *c,
                                                    struct prefill_batch *b)
{
    struct cuda_prefill_attn_args a = {
        .qkv = b->qkv,
        .out = b->out,
        .lse = b->lse,
        .k = c->k,
        .v = c->v,
        .pos = c->pos,
        .score = c->score,
        .blocks = b->blocks,
        .max_blocks = c->max_blocks,
        .tok_pos = b->tok_pos,
        .seqs = b->seqs,
        .n_tok = b->n_tok,
        .n_seq = b->n_seq,
        .n_head = c->n_head,
        .head_dim = c->head_dim,
        .block_size = c->block_size,
        .max_chunk = b->max_chunk,
        .max_slots = b->max_slots,
        .scale = 1.0f / sqrtf((float)c->head_dim),
    };
    return a;
}

static inline void pc_free(struct prefill_case *c)
{
    for (int32_t i = 0; i < c->n_seq; i++)
        free(c->qkv[i]);
    free(c->qkv);
    free(c->k);
    free(c->v);
    free(c->pos);
    free(c->score);
    free(c->blocks);
    free(c->len);
    free(c->cut);
    free(c->n_chunks);
    memset(c, 0, sizeof *c);
}

#endif
