/*
 * kv_seq.h - one sequence's block table in the paged KV pool.
 *
 * Owns: the list of block ids the sequence holds (the blocks themselves belong to the
 * pool) and the sequence's H2O bookkeeping. Slot s of the sequence lives in
 * blocks[s / block_size] at offset s % block_size, in every layer and head.
 * n_slots is the high-water mark of slots written so far; with the full policy it
 * equals the number of cached tokens.
 *
 * H2O life cycle (DESIGN.md section 5): the prompt fills slots 0..P-1 in every head;
 * kv_seq_finish_prefill keeps B - 1 of them per (layer, head), moves them to slots
 * 0..B-2 and gives back the blocks past ceil(B / block_size). Decode tokens go to
 * the next slot while heads have room; once a head holds B tokens,
 * kv_seq_after_decode evicts one per (layer, head) and head_slots[] remembers each
 * head's hole, where that head's next token goes.
 * Invariant: after the prompt, n_blocks <= ceil(B / block_size).
 *
 * Slot state on a device (be_ops.kv_state NULL, the CUDA backend): the prompt's
 * state is read once with kv_read_state, and the decode victims are those the forward
 * itself chose (kv_victims, asked by batch_index); a victim is not freed on the host,
 * it keeps its pos and score until its head's next token overwrites it.
 * Thread: engine only.
 */
#ifndef H2O_KV_SEQ_H
#define H2O_KV_SEQ_H

#include <stdbool.h>
#include <stdint.h>

#include "kv_budget.h"

struct kv_pool;
struct backend;
struct opt_config;

struct kv_seq {
    int32_t *blocks;
    int32_t n_blocks;
    int32_t cap;
    int32_t n_slots;
    struct kv_budget budget; /* full unless kv_seq_set_budget says otherwise */
    int32_t *head_slots; /* [n_layer * n_kv_head] holes, or NULL while heads have room */
    int64_t n_evicted;       /* tokens evicted, summed over layers and heads */
    int32_t block_size;      /* the pool's, set by the first kv_seq_grow */
    /* Set by kv_seq_finish_prefill: the prompt is done, so every later batch item of
     * this sequence is a decode token. batch_run reads it to tell a decode token from
     * a 1-token prompt chunk (both have n_tok == 1). */
    bool prefilled;
    /* Index of this sequence's be_seq in the last batch_run's forward (the seq
     * argument of be_ops.kv_victims); valid until the next batch_run. */
    int32_t batch_index;
};

/* An empty table. Caller-owned struct. Thread: engine. */
void kv_seq_init(struct kv_seq *seq);

/*
 * Make the table cover at least n_slots slots, taking new blocks from the pool and
 * marking their slots free in the backend. All or nothing: returns 0, or
 * ENG_ENOSPC with the table unchanged. Thread: engine.
 */
int kv_seq_grow(struct kv_seq *seq, struct kv_pool *pool, struct backend *be,
                int32_t n_slots);

/* Use this budget from now on (before the prompt). Thread: engine. */
void kv_seq_set_budget(struct kv_seq *seq, const struct kv_budget *b);

/*
 * The prompt is in the cache (slots 0..n_slots-1, scores = its column sums): keep
 * B - 1 tokens per (layer, head) by h2o_select_prefill, compact them to the front
 * and return the blocks the budget does not need. Nothing happens for full or when
 * the prompt fits, except that the sequence counts as prefilled from now on. Reads
 * the state through kv_state, or kv_read_state when it lives on a device.
 * Thread: engine.
 */
void kv_seq_finish_prefill(struct kv_seq *seq, struct kv_pool *pool, struct backend *be,
                           const struct opt_config *cfg);

/*
 * A decode token at position t has been written and attended (batch_run has
 * counted its slot). Once B slots are occupied, evicts one token per (layer, head)
 * (h2o_select_evict) and records the holes in head_slots. With the state on a device
 * the victims are the forward's own (kv_victims for batch_index), and their slots are
 * left as they are on the device. Thread: engine, right after the batch_run.
 */
void kv_seq_after_decode(struct kv_seq *seq, struct backend *be, const struct opt_config *cfg,
                         int32_t t);

/*
 * kv_seq_after_decode for a whole decode step: seqs[i]'s token was at position t[i].
 * The heads of every evicting sequence are spread over the OpenMP threads in one
 * region (the same choices as one call per sequence). Thread: engine.
 */
void kv_seq_after_decode_many(struct kv_seq *const *seqs, const int32_t *t, int32_t n,
                              struct backend *be, const struct opt_config *cfg);

/* The slots this sequence's next decode token will need: n_slots + 1, or n_slots
 * when it fills holes. */
int32_t kv_seq_next_slots(const struct kv_seq *seq);

/* Return every block to the pool and empty the table (reusable). Thread: engine. */
void kv_seq_release(struct kv_seq *seq, struct kv_pool *pool);

/* Release and free the table's memory. Thread: engine. */
void kv_seq_deinit(struct kv_seq *seq, struct kv_pool *pool);

#endif
