/*
 * batch.h - build one backend batch from several sequences' work and run it.
 *
 * Each item is a run of consecutive tokens of one sequence: a prefill chunk or a
 * single decode token. batch_run grows each sequence's block table to cover its new
 * tokens (token i of the item goes to slot kv->n_slots + i, or, for a decode token
 * of a sequence whose heads are full, to each head's hole kv->head_slots), runs one
 * forward, and advances n_slots. H2O selection and eviction are the caller's next
 * step (kv_seq_finish_prefill, kv_seq_after_decode). An item of a sequence whose
 * prompt is finished (kv->prefilled) is a decode token: it carries the sequence's
 * H2O budget to the backend, and kv->batch_index names its be_seq for kv_victims.
 * Owns: reusable scratch arrays for the batch description and the logits.
 * Thread: engine only.
 */
#ifndef H2O_BATCH_H
#define H2O_BATCH_H

#include "backend.h"

#include <stdbool.h>
#include <stdint.h>

struct kv_pool;
struct kv_seq;

struct batch_item {
    struct kv_seq *kv;
    const int32_t *tokens; /* [n_tok] */
    int32_t n_tok;
    int32_t pos0;          /* logical position of tokens[0] */
    bool all_logits;       /* logits for every token (else only the last one) */
    int32_t logits_row;    /* out: first row of this item's logits in batch_logits */
};

struct batch {
    struct be_batch be;
    int32_t cap_tok, cap_seq, cap_out;
    int32_t *tokens, *pos, *out_rows;
    struct be_seq *seqs;
    float *logits;         /* [n_out, vocab] */
    int64_t cap_logits;
    /* Set by the caller before batch_run: leave the logits on the backend's device
     * for be_ops.sample (the forward gets logits NULL; b->logits is not written). */
    bool device_logits;
};

void batch_init(struct batch *b);
void batch_deinit(struct batch *b);

/*
 * Run the items as one forward. Returns 0, or ENG_ENOSPC when the pool cannot hold
 * the new tokens (no sequence is changed then). After success, item i's logits start
 * at row items[i].logits_row of b->logits (vocab floats per row).
 * Thread: engine.
 */
int batch_run(struct batch *b, struct backend *be, struct kv_pool *pool, int32_t vocab,
              struct batch_item *items, int32_t n_items);

#endif
