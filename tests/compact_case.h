/*
 * compact_case.h - random prefill-compaction states for the kv_compact tests: one
 * layer of one sequence in the CUDA layout (cuda_ref.h, fp16 K/V), its block table
 * scattered over a larger pool (blocks not in the table are filled too and must stay
 * untouched), and per head an ascending random keep list as h2o_prefill_keep makes.
 * Shared by tests/unit/test_cuda_ref.c (the reference against the CPU backend's
 * cpu_kv_compact_head) and tests/gpu/test_cuda_kernels.c (the kernel against the
 * reference), so both check the same states. Uses decode_case.h's generator.
 */
#ifndef H2O_COMPACT_CASE_H
#define H2O_COMPACT_CASE_H

#include "decode_case.h"

struct compact_case {
    int32_t n_head, head_dim, block_size, n_pool, n_slots, n_keep;
    uint16_t *k, *v; /* [n_pool, n_head, head_dim, block_size], [.., block_size, head_dim] */
    int32_t *pos;    /* [n_pool, n_head, block_size] */
    float *score;
    int32_t *blocks; /* [ceil(n_slots / block_size)] distinct pool blocks, shuffled */
    int32_t *keep;   /* [n_head, n_keep] */
};

static inline int64_t cc_slots(const struct compact_case *c) /* pool slots per head set */
{
    return (int64_t)c->n_pool * c->n_head * c->block_size;
}

static inline struct cuda_kv_compact_args cc_args(struct compact_case *c)
{
    struct cuda_kv_compact_args a = {
        .k = c->k, .v = c->v, .pos = c->pos, .score = c->score, .blocks = c->blocks,
        .keep = c->keep, .n_slots = c->n_slots, .n_keep = c->n_keep, .n_head = c->n_head,
        .head_dim = c->head_dim, .block_size = c->block_size};
    return a;
}

/*
 * n_slots slots of random state (positions, 1 in 10 free, scores in [0, 8)), random fp16 K/V and scores; keep: n_keep of the
 * n_slots per head, ascending, drawn independently per head (a kept prefix makes
 * src == dst copies too). Free with cc_free.
 */
static inline void cc_make(struct compact_case *c, uint64_t *st, int32_t n_head,
                           int32_t head_dim, int32_t block_size, int32_t n_slots,
                           int32_t n_keep)
{
    memset(c, 0, sizeof *c);
    c->n_head = n_head;
    c->head_dim = head_dim;
    c->block_size = block_size;
    c->n_slots = n_slots;
    c->n_keep = n_keep;
    const int32_t nb = (n_slots + block_size - 1) / block_size;
    c->n_pool = nb + 3;
    const int64_t ns = cc_slots(c);
    c->k = dc_alloc((size_t)ns * head_dim * sizeof *c->k);
    c->v = dc_alloc((size_t)ns * head_dim * sizeof *c->v);
    c->pos = dc_alloc((size_t)ns * sizeof *c->pos);
    c->score = dc_alloc((size_t)ns * sizeof *c->score);
    c->blocks = dc_alloc((size_t)(nb ? nb : 1) * sizeof *c->blocks);
    c->keep = dc_alloc((size_t)n_head * (n_keep ? n_keep : 1) * sizeof *c->keep);
    for (int64_t e = 0; e < ns * head_dim; e++) {
        c->k[e] = f32_to_f16(dc_float(st, -2.0f, 2.0f));
        c->v[e] = f32_to_f16(dc_float(st, -2.0f, 2.0f));
    }
    for (int64_t e = 0; e < ns; e++) {
        c->pos[e] = dc_int(st, 10) == 0 ? -1 : dc_int(st, 4 * n_slots + 1);
        c->score[e] = dc_float(st, 0.0f, 8.0f);
    }
    /* A random permutation of the pool; the table takes its first nb blocks. */
    dc_shuffle_blocks(st, c->blocks, c->n_pool, nb);
    /* Per head: choose n_keep of n_slots in order (selection sampling: ascending). */
    for (int32_t h = 0; h < n_head; h++) {
        int32_t *kp = c->keep + (int64_t)h * n_keep, got = 0;
        for (int32_t s = 0; s < n_slots && got < n_keep; s++)
            if (dc_int(st, n_slots - s) < n_keep - got) kp[got++] = s;
    }
}

static inline void cc_free(struct compact_case *c)
{
    free(c->k), free(c->v), free(c->pos), free(c->score), free(c->blocks), free(c->keep);
    memset(c, 0, sizeof *c);
}

#endif
