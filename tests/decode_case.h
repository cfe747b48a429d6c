/*
 * decode_case.h - random decode-attention steps in the paged layout of cuda_ref.h,
 * for the tests of the host reference against the CPU engine (tests/unit/
 * test_cuda_ref.c) and of the CUDA kernel against the reference (tests/gpu/).
 *
 * Every case is a state the engine can reach (kv_seq.h): either a sequence still
 * growing (slots 0..m-1 occupied, the token goes to slot m) or one at its budget
 * (B slots, one hole per head left by the last eviction, where the token goes). Each
 * head holds its own random set of earlier positions in a random slot order, as
 * per-head hole filling leaves them; block tables are random permutations of a
 * shared pool. Budgets mix R = 1, H = 0, both random, and full (never evicts).
 * With ties set, every query is 0 (all logits 0, so each attended slot gets exactly
 * 1/n) and prior scores come from {0, 0.25, ..., 1.25}: equal scores stay equal and
 * the victim is decided by position.
 * Header-only, static: each test includes it once.
 */
#ifndef H2O_DECODE_CASE_H
#define H2O_DECODE_CASE_H

#include "cuda_ref.h"
#include "dtype.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct decode_case {
    int32_t n_seq, n_head, head_dim, block_size, n_pool, max_blocks, max_slots;
    uint16_t *qkv;   /* [n_seq, 3 * n_head * head_dim] */
    uint16_t *k, *v; /* [n_pool, n_head, head_dim, block_size], [n_pool, n_head, block_size,
                        head_dim] */
    int32_t *pos;    /* [n_pool, n_head, block_size] */
    float *score;
    int32_t *blocks; /* [n_seq, max_blocks] */
    struct cuda_decode_seq *seqs;
    int32_t *new_slot; /* [n_seq, n_head] */
    uint16_t *out;     /* [n_seq, n_head * head_dim] */
    int32_t *victim;   /* [n_seq, n_head] */
};

static inline uint64_t dc_next(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

static inline int32_t dc_int(uint64_t *s, int32_t n) /* uniform in [0, n) */
{
    return (int32_t)(dc_next(s) % (uint64_t)n);
}

static inline float dc_float(uint64_t *s, float lo, float hi)
{
    return lo + (hi - lo) * (float)(dc_next(s) & 0xffffff) / (float)(1 << 24);
}

static inline void *dc_alloc(size_t n)
{
    void *p = calloc(n ? n : 1, 1);
    if (!p) abort();
    return p;
}

/*
 * A paged pool of pool_el slots (n_pool * n_head * block_size) with head_dim K and V
 * values each, allocated into *k, *v, *pos, *score: K/V uniform in [-1, 1), every slot
 * free (pos -1) with score `free_score`. The decode and prefill cases fill their pools
 * alike, so the kernels meet the same kind of garbage in the slots nobody uses.
 */
static inline void dc_pool_make(uint64_t *st, int64_t pool_el, int32_t head_dim,
                                uint16_t **k, uint16_t **v, int32_t **pos, float **score,
                                float free_score)
{
    *k = dc_alloc((size_t)(pool_el * head_dim) * sizeof **k);
    *v = dc_alloc((size_t)(pool_el * head_dim) * sizeof **v);
    *pos = dc_alloc((size_t)pool_el * sizeof **pos);
    *score = dc_alloc((size_t)pool_el * sizeof **score);
    for (int64_t e = 0; e < pool_el * head_dim; e++) {
        (*k)[e] = f32_to_f16(dc_float(st, -1.0f, 1.0f));
        (*v)[e] = f32_to_f16(dc_float(st, -1.0f, 1.0f));
    }
    for (int64_t e = 0; e < pool_el; e++) {
        (*pos)[e] = -1;
        (*score)[e] = free_score;
    }
}

/*
 * Block tables that share nothing: the first n_take blocks of a random permutation of
 * the n_pool pool blocks, into blocks [n_take]. Sequence i's table is then
 * blocks [i * max_blocks, (i + 1) * max_blocks), scattered over the pool.
 */
static inline void dc_shuffle_blocks(uint64_t *st, int32_t *blocks, int32_t n_pool,
                                     int64_t n_take)
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

static inline int64_t dc_index(const struct decode_case *c, int32_t seq, int32_t slot,
                               int32_t h)
{
    const int32_t *blocks = c->blocks + (int64_t)seq * c->max_blocks;
    return ((int64_t)blocks[slot / c->block_size] * c->n_head + h) * c->block_size +
           slot % c->block_size;
}

/* The arguments of cuda_decode_attn / cuda_ref_decode_attn over this case's arrays. */
static inline struct cuda_decode_attn_args dc_args(struct decode_case *c)
{
    struct cuda_decode_attn_args a = {
        .qkv = c->qkv,
        .out = c->out,
        .k = c->k,
        .v = c->v,
        .pos = c->pos,
        .score = c->score,
        .blocks = c->blocks,
        .max_blocks = c->max_blocks,
        .seqs = c->seqs,
        .new_slot = c->new_slot,
        .victim = c->victim,
        .n_seq = c->n_seq,
        .n_head = c->n_head,
        .head_dim = c->head_dim,
        .block_size = c->block_size,
        .max_slots = c->max_slots,
        .scale = 1.0f / sqrtf((float)c->head_dim),
    };
    return a;
}

/*
 * A random step of n_seq sequences with up to max_b slots each. Caller frees with
 * dc_free.
 */
static inline void dc_make(struct decode_case *c, uint64_t *st, int32_t n_seq,
                           int32_t n_head, int32_t head_dim, int32_t block_size,
                           int32_t max_b, bool ties)
{
    memset(c, 0, sizeof *c);
    c->n_seq = n_seq;
    c->n_head = n_head;
    c->head_dim = head_dim;
    c->block_size = block_size;
    c->max_blocks = (max_b + block_size - 1) / block_size;
    c->n_pool = n_seq * c->max_blocks + 3; /* a few blocks nobody uses */
    const int32_t H = n_head, D = head_dim, BS = block_size;
    const int64_t pool_el = (int64_t)c->n_pool * H * BS;
    dc_pool_make(st, pool_el, D, &c->k, &c->v, &c->pos, &c->score, 0.0f);
    c->qkv = dc_alloc((size_t)n_seq * 3 * H * D * sizeof *c->qkv);
    c->blocks = dc_alloc((size_t)n_seq * c->max_blocks * sizeof *c->blocks);
    c->seqs = dc_alloc((size_t)n_seq * sizeof *c->seqs);
    c->new_slot = dc_alloc((size_t)n_seq * H * sizeof *c->new_slot);
    c->out = dc_alloc((size_t)n_seq * H * D * sizeof *c->out);
    c->victim = dc_alloc((size_t)n_seq * H * sizeof *c->victim);

    for (int64_t e = 0; e < (int64_t)n_seq * 3 * H * D; e++) {
        const bool is_q = e % (3 * H * D) < H * D;
        /* Large enough logits that the softmax is far from uniform. */
        c->qkv[e] = f32_to_f16(ties && is_q ? 0.0f : dc_float(st, -3.0f, 3.0f));
    }
    dc_shuffle_blocks(st, c->blocks, c->n_pool, (int64_t)n_seq * c->max_blocks);

    int32_t *slots = dc_alloc((size_t)max_b * sizeof *slots);
    int32_t *cand = dc_alloc((size_t)(4 * max_b + 64) * sizeof *cand);
    for (int32_t i = 0; i < n_seq; i++) {
        struct cuda_decode_seq *sq = &c->seqs[i];
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
            for (int32_t p = 0; p < n_prev; p++)
                cand[p] = p;
            for (int32_t p = 0; p < m; p++) {
                const int32_t r = p == 0 ? n_prev - 1 : p + dc_int(st, n_prev - p);
                const int32_t t = cand[p];
                cand[p] = cand[r];
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
            for (int32_t p = 0; p < m; p++) {
                const int64_t e = dc_index(c, i, slots[p], h);
                c->pos[e] = cand[p];
                c->score[e] =
                    ties ? 0.25f * (float)dc_int(st, 6) : dc_float(st, 0.0f, 4.0f);
            }
            /* The hole or the next slot: free, with a stale score. */
            c->score[dc_index(c, i, slots[m], h)] = 7.0f;
        }
        if (sq->n_slots > c->max_slots) c->max_slots = sq->n_slots;
    }
    free(slots);
    free(cand);
}

static inline void dc_free(struct decode_case *c)
{
    free(c->qkv);
    free(c->k);
    free(c->v);
    free(c->pos);
    free(c->score);
    free(c->blocks);
    free(c->seqs);
    free(c->new_slot);
    free(c->out);
    free(c->victim);
    memset(c, 0, sizeof *c);
}

#endif
