/*
 * paged_case.h - random attention states in the paged layout of cuda_ref.h, for the
 * tests of the host references against the CPU engine (tests/unit/test_cuda_ref.c,
 * test_cuda_prefill_ref.c, test_cuda_kv_blocks_ref.c) and of the CUDA kernels
 * against the references (tests/gpu/), so that both check the same states.
 *
 * All three kinds of case share one struct paged_pool: one layer's K/V, positions
 * and scores for n_pool blocks, and n_seq block tables that share nothing, scattered
 * over the pool (a few blocks nobody uses hold garbage the kernels must leave alone).
 *
 * decode_case: one decode step of n_seq sequences. Every case is a state the engine
 * can reach (kv_seq.h): either a sequence still growing (slots 0..m-1 occupied, the
 * token goes to slot m) or one at its budget (B slots, one hole per head left by the
 * last eviction, where the token goes). Each head holds its own random set of earlier
 * positions in a random slot order, as per-head hole filling leaves them. Budgets mix
 * R = 1, H = 0, both random, and full (never evicts). With ties set, every query is 0
 * (all logits 0, so each attended slot gets exactly 1/n) and prior scores come from
 * {0, 0.25, ..., 1.25}: equal scores stay equal and the victim is decided by position.
 *
 * prefill_case: n_seq prompts of random lengths, each cut into its own random number
 * of chunks. Step s of the case is the batch of every sequence's chunk s (sequences
 * with fewer chunks have dropped out), as the scheduler builds chunked prefill: row r
 * of a chunk goes to slot slot_start + r, where slot_start is the prompt tokens
 * already prefilled, and the queries see slots [0, slot_start + n_tok). Positions are
 * the prompt positions 0..P-1.
 *
 * compact_case: a prefill compaction of one sequence (fp16 K/V, every pool block
 * filled, those outside the table must stay untouched) and per head an ascending
 * random keep list as h2o_prefill_keep makes.
 *
 * paged_pool_to_int8 turns any of these pools into an int8 cache (--kv-cache-dtype
 * int8): every slot of every block quantized from its fp16 K/V by the kernels' rule,
 * so the int8 tests see the same states, and *_args then pass k8 / v8 and the scales
 * instead of k / v.
 *
 * kb_fill_pool: the raw slot state (V, pos, score) the KV block kernels reset and
 * gather, with NaNs and negative scores a reset must overwrite.
 *
 * Every case draws from the caller's rnd.h state; ownership: the case owns its
 * arrays, freed by its *_free. Thread: any.
 */
#ifndef H2O_TEST_PAGED_CASE_H
#define H2O_TEST_PAGED_CASE_H

#include "cuda_ref.h"
#include "dtype.h" /* the cases' fp16: f32_to_f16, f16_to_f32 */
#include "rnd.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The generator of every case here (rnd.h's, under the names the tests use). */
static inline int32_t dc_int(uint64_t *s, int32_t n) /* uniform in [0, n) */
{
    return lcg_below(s, n);
}

static inline float dc_float(uint64_t *s, float lo, float hi)
{
    return lcg_float(s, lo, hi);
}

/* calloc that never returns NULL (aborts), and never allocates 0 bytes. */
void *dc_alloc(size_t n);

/*
 * Block tables that share nothing: the first n_take blocks of a random permutation of
 * the n_pool pool blocks, into blocks [n_take]. Sequence i's table is then
 * blocks [i * max_blocks, (i + 1) * max_blocks), scattered over the pool.
 */
void dc_shuffle_blocks(uint64_t *st, int32_t *blocks, int32_t n_pool, int64_t n_take);

struct paged_pool {
    int32_t n_head, head_dim, block_size, n_pool, max_blocks;
    uint16_t *k, *v; /* [n_pool, n_head, head_dim, block_size], [n_pool, n_head, block_size,
                        head_dim] */
    int32_t *pos;    /* [n_pool, n_head, block_size] */
    float *score;
    int32_t *blocks; /* [n_seq, max_blocks] */
    /* An int8 cache (paged_pool_to_int8), else NULL: k8 / v8 in the layout of k / v,
     * k_scale / v_scale [n_pool, n_head, block_size]. */
    int8_t *k8, *v8;
    float *k_scale, *v_scale;
};

/*
 * Make p an int8 cache: k8 / v8 and the scales from every slot's fp16 K column and V
 * row (cuda_ref_int8_quantize, the CPU's rule), over the whole pool, free slots and
 * unused blocks too. k / v stay as they are, unused by the *_args calls from then on.
 * The arrays belong to the case (freed by its *_free).
 */
void paged_pool_to_int8(struct paged_pool *p);

/* Slots of the pool over all heads: n_pool * n_head * block_size. */
static inline int64_t paged_pool_slots(const struct paged_pool *p)
{
    return (int64_t)p->n_pool * p->n_head * p->block_size;
}

/* The pool index of sequence seq's slot `slot` in head h. */
static inline int64_t paged_pool_index(const struct paged_pool *p, int32_t seq,
                                       int32_t slot, int32_t h)
{
    const int32_t *blocks = p->blocks + (int64_t)seq * p->max_blocks;
    return ((int64_t)blocks[slot / p->block_size] * p->n_head + h) * p->block_size +
           slot % p->block_size;
}

/* The pool's heads are the KV heads (pool.n_head); n_q_head query heads read them,
 * n_q_head / pool.n_head each (grouped-query attention; equal for OPT). */
struct decode_case {
    int32_t n_seq, max_slots;
    int32_t n_q_head; /* query heads, a multiple of pool.n_head */
    int32_t window;   /* sliding window W, 0 = none */
    struct paged_pool pool;
    uint16_t *qkv; /* [n_seq, (n_q_head + 2 * n_head) * head_dim] */
    struct cuda_decode_seq *seqs;
    int32_t *new_slot; /* [n_seq, n_head] */
    uint16_t *out;     /* [n_seq, n_q_head * head_dim] */
    int32_t *victim;   /* [n_seq, n_head] */
};

/* A random step of n_seq sequences with up to max_b slots each. Free with dc_free. */
void dc_make(struct decode_case *c, uint64_t *st, int32_t n_seq, int32_t n_head,
             int32_t head_dim, int32_t block_size, int32_t max_b, bool ties);

/* The same with n_q query heads over n_kv KV heads (n_q a multiple of n_kv) and a
 * sliding window (0 = none); dc_make is n_q = n_kv = n_head, window 0. */
void dc_make_gqa(struct decode_case *c, uint64_t *st, int32_t n_seq, int32_t n_q,
                 int32_t n_kv, int32_t head_dim, int32_t block_size, int32_t max_b,
                 bool ties, int32_t window);
void dc_free(struct decode_case *c);

static inline int64_t dc_index(const struct decode_case *c, int32_t seq, int32_t slot,
                               int32_t h)
{
    return paged_pool_index(&c->pool, seq, slot, h);
}

/* The arguments of cuda_decode_attn / cuda_ref_decode_attn over this case's arrays. */
struct cuda_decode_attn_args dc_args(struct decode_case *c);

enum { PC_MAX_CHUNKS = 8 };

/* As decode_case: the pool's heads are the KV heads, n_q_head query heads read them. */
struct prefill_case {
    int32_t n_seq, max_p, n_steps;
    int32_t n_q_head; /* query heads, a multiple of pool.n_head */
    int32_t window;   /* sliding window W, 0 = none */
    struct paged_pool pool;
    int32_t *len;      /* [n_seq] prompt lengths */
    int32_t *cut;      /* [n_seq, PC_MAX_CHUNKS + 1] chunk c is [cut[c], cut[c + 1]) */
    int32_t *n_chunks; /* [n_seq] */
    uint16_t **qkv;    /* [n_seq] -> [len, (n_q_head + 2 n_head) * head_dim] each prompt's
                          rows */
};

/* One step's batch: the arrays cuda_prefill_attn_args points to. */
struct prefill_batch {
    int32_t n_tok, n_seq, max_chunk, max_slots;
    uint16_t *qkv;    /* [n_tok, (n_q_head + 2 n_head) * head_dim] */
    int32_t *tok_pos; /* [n_tok] */
    struct cuda_prefill_seq *seqs;
    int32_t *blocks; /* [n_seq, max_blocks] */
    int32_t *seq_of; /* [n_seq] which case sequence each batch sequence is */
    uint16_t *out;   /* [n_tok, n_q_head * head_dim] */
    float *lse;      /* [n_tok, n_q_head] */
};

/*
 * n_seq prompts of 1..max_p tokens, each in 1..max_chunks chunks (max_chunks <=
 * PC_MAX_CHUNKS; a chunk is never empty). Unused slots hold a stale score of 7: a
 * written slot must start from 0. Free with pc_free.
 */
void pc_make(struct prefill_case *c, uint64_t *st, int32_t n_seq, int32_t n_head,
             int32_t head_dim, int32_t block_size, int32_t max_p, int32_t max_chunks);
/* The same with n_q query heads over n_kv KV heads and a sliding window (0 = none);
 * pc_make is n_q = n_kv = n_head, window 0. */
void pc_make_gqa(struct prefill_case *c, uint64_t *st, int32_t n_seq, int32_t n_q,
                 int32_t n_kv, int32_t head_dim, int32_t block_size, int32_t max_p,
                 int32_t max_chunks, int32_t window);
void pc_free(struct prefill_case *c);

/* The batch of step `step` (0 .. n_steps - 1) into b (allocated here; pc_batch_free). */
void pc_batch(const struct prefill_case *c, int32_t step, struct prefill_batch *b);
void pc_batch_free(struct prefill_batch *b);

/* The arguments of cuda_prefill_attn / cuda_ref_prefill_attn: b over c's pool. */
struct cuda_prefill_attn_args pc_args(struct prefill_case *c, struct prefill_batch *b);

struct compact_case {
    int32_t n_slots, n_keep;
    struct paged_pool pool; /* one table of ceil(n_slots / block_size) blocks */
    int32_t *keep;          /* [n_head, n_keep] */
};

/*
 * n_slots slots of random state (positions, 1 in 10 free, scores in [0, 8)) and
 * random fp16 K/V in every pool block; keep: n_keep of the n_slots per head,
 * ascending, drawn independently per head (a kept prefix makes src == dst copies
 * too). Free with cc_free.
 */
void cc_make(struct compact_case *c, uint64_t *st, int32_t n_head, int32_t head_dim,
             int32_t block_size, int32_t n_slots, int32_t n_keep);
void cc_free(struct compact_case *c);

static inline int64_t cc_slots(const struct compact_case *c) /* pool slots per head set */
{
    return paged_pool_slots(&c->pool);
}

struct cuda_kv_compact_args cc_args(struct compact_case *c);

/* ---- KV block state: cuda_kv_blocks_init and cuda_kv_blocks_gather_state's tests. ---- */

/* The block sizes those tests draw from: 1, OPT's 16 and 64, and an odd 5. */
extern const int32_t kb_block_sizes[4];

/* A random fp16 pool of n_state slots with head_dim values each: V NaN (1 in 4) or
 * random in [-4, 4), pos in [-1, 1000), scores in [-1, 100). */
void kb_fill_pool(uint64_t *st, uint16_t *v, int32_t *pos, float *score, int64_t n_state,
                  int32_t head_dim);

#endif
