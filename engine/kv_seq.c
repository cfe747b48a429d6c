/*
 * kv_seq.c - a sequence's block table (see kv_seq.h).
 */
#include "kv_seq.h"

#include "backend.h"
#include "err.h"
#include "kv_pool.h"
#include "util.h"

#include <stdlib.h>

void kv_seq_init(struct kv_seq *seq)
{
    seq->blocks = NULL;
    seq->n_blocks = seq->cap = seq->n_slots = 0;
}

int kv_seq_grow(struct kv_seq *seq, struct kv_pool *pool, struct backend *be,
                int32_t n_slots)
{
    int32_t need = CEIL_DIV(n_slots, pool->block_size);
    if (need <= seq->n_blocks) return 0;
    if (need > seq->cap) {
        seq->cap = MAX(need, 2 * seq->cap);
        seq->blocks = xrealloc(seq->blocks, (size_t)seq->cap * sizeof *seq->blocks);
    }
    int32_t add = need - seq->n_blocks;
    int err = kv_pool_alloc(pool, add, seq->blocks + seq->n_blocks);
    if (err) return err;
    be->ops->kv_init_blocks(be->ctx, seq->blocks + seq->n_blocks, add);
    seq->n_blocks = need;
    return 0;
}

void kv_seq_release(struct kv_seq *seq, struct kv_pool *pool)
{
    kv_pool_free(pool, seq->blocks, seq->n_blocks);
    seq->n_blocks = 0;
    seq->n_slots = 0;
}

void kv_seq_deinit(struct kv_seq *seq, struct kv_pool *pool)
{
    kv_seq_release(seq, pool);
    free(seq->blocks);
    kv_seq_init(seq);
}
