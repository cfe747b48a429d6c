/*
 * kv_seq.h - one sequence's block table in the paged KV pool.
 *
 * Owns: the list of block ids the sequence holds (the blocks themselves belong to the
 * pool). Slot s of the sequence lives in blocks[s / block_size] at offset
 * s % block_size, in every layer and head. n_slots is the high-water mark of slots
 * written so far; with the full policy it equals the number of cached tokens.
 * Thread: engine only.
 */
#ifndef H2O_KV_SEQ_H
#define H2O_KV_SEQ_H

#include <stdint.h>

struct kv_pool;
struct backend;

struct kv_seq {
    int32_t *blocks;
    int32_t n_blocks;
    int32_t cap;
    int32_t n_slots;
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

/* Return every block to the pool and empty the table (reusable). Thread: engine. */
void kv_seq_release(struct kv_seq *seq, struct kv_pool *pool);

/* Release and free the table's memory. Thread: engine. */
void kv_seq_deinit(struct kv_seq *seq, struct kv_pool *pool);

#endif
