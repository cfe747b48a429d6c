/*
 * batch.c - one forward over many sequences' tokens (see batch.h).
 */
#include "batch.h"

#include "err.h"
#include "kv_pool.h"
#include "kv_seq.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>

void batch_init(struct batch *b)
{
    memset(b, 0, sizeof *b);
}

void batch_deinit(struct batch *b)
{
    free(b->tokens);
    free(b->pos);
    free(b->out_rows);
    free(b->seqs);
    free(b->logits);
    memset(b, 0, sizeof *b);
}

static void reserve(struct batch *b, int32_t n_tok, int32_t n_seq, int32_t n_out,
                    int32_t vocab)
{
    if (n_tok > b->cap_tok) {
        b->cap_tok = MAX(n_tok, 2 * b->cap_tok);
        b->tokens = xrealloc(b->tokens, (size_t)b->cap_tok * sizeof *b->tokens);
        b->pos = xrealloc(b->pos, (size_t)b->cap_tok * sizeof *b->pos);
    }
    if (n_seq > b->cap_seq) {
        b->cap_seq = MAX(n_seq, 2 * b->cap_seq);
        b->seqs = xrealloc(b->seqs, (size_t)b->cap_seq * sizeof *b->seqs);
    }
    if (n_out > b->cap_out) {
        b->cap_out = MAX(n_out, 2 * b->cap_out);
        b->out_rows = xrealloc(b->out_rows, (size_t)b->cap_out * sizeof *b->out_rows);
    }
    if ((int64_t)n_out * vocab > b->cap_logits) {
        b->cap_logits = (int64_t)b->cap_out * vocab;
        b->logits = xrealloc(b->logits, (size_t)b->cap_logits * sizeof *b->logits);
    }
}

int batch_run(struct batch *b, struct backend *be, struct kv_pool *pool, int32_t vocab,
              struct batch_item *items, int32_t n_items)
{
    int32_t n_tok = 0, n_out = 0;
    for (int32_t i = 0; i < n_items; i++) {
        CHECK(items[i].n_tok > 0);
        CHECK(!items[i].kv->head_slots || items[i].n_tok == 1);
        /* After kv_seq_finish_prefill a sequence only ever feeds its decode tokens. */
        CHECK(!items[i].kv->prefilled || items[i].n_tok == 1);
        n_tok += items[i].n_tok;
        n_out += items[i].all_logits ? items[i].n_tok : 1;
    }
    reserve(b, n_tok, n_items, n_out, vocab);

    /* Grow every block table first, all or nothing, so a full pool changes nothing. */
    int32_t *old_blocks = xmalloc((size_t)MAX(n_items, 1) * sizeof *old_blocks);
    for (int32_t i = 0; i < n_items; i++) old_blocks[i] = items[i].kv->n_blocks;
    for (int32_t i = 0; i < n_items; i++) {
        struct batch_item *it = &items[i];
        int32_t need = it->kv->head_slots ? it->kv->n_slots : it->kv->n_slots + it->n_tok;
        int err = kv_seq_grow(it->kv, pool, be, need);
        if (err) {
            for (int32_t j = 0; j <= i; j++) {
                struct kv_seq *kv = items[j].kv;
                kv_pool_free(pool, kv->blocks + old_blocks[j], kv->n_blocks - old_blocks[j]);
                kv->n_blocks = old_blocks[j];
            }
            free(old_blocks);
            return err;
        }
    }
    free(old_blocks);

    int32_t row = 0, out = 0;
    for (int32_t i = 0; i < n_items; i++) {
        struct batch_item *it = &items[i];
        struct be_seq *s = &b->seqs[i];
        s->blocks = it->kv->blocks;
        s->n_blocks = it->kv->n_blocks;
        s->tok_start = row;
        s->n_tok = it->n_tok;
        s->slot_start = it->kv->n_slots;
        s->head_slots = it->kv->head_slots;
        s->n_slots = it->kv->head_slots ? it->kv->n_slots : it->kv->n_slots + it->n_tok;
        /* The budget goes with decode tokens only, so that a device backend picks
         * victims for them alone. A decode token is told apart from a 1-token prompt
         * chunk by the sequence's own life cycle (prefilled, set when the caller
         * finished the prompt), not by n_tok, which is 1 for both. */
        s->h2o_budget = s->h2o_recent = 0;
        if (it->kv->prefilled && it->kv->budget.policy != KV_POLICY_FULL) {
            s->h2o_budget = kv_budget_slots(&it->kv->budget);
            s->h2o_recent = it->kv->budget.recent;
        }
        it->kv->batch_index = i;
        for (int32_t t = 0; t < it->n_tok; t++) {
            b->tokens[row + t] = it->tokens[t];
            b->pos[row + t] = it->pos0 + t;
        }
        it->logits_row = out;
        if (it->all_logits)
            for (int32_t t = 0; t < it->n_tok; t++) b->out_rows[out++] = row + t;
        else
            b->out_rows[out++] = row + it->n_tok - 1;
        row += it->n_tok;
    }
    b->be = (struct be_batch){
        .n_tok = n_tok, .tokens = b->tokens, .pos = b->pos, .n_seq = n_items,
        .seqs = b->seqs, .n_out = n_out, .out_rows = b->out_rows,
    };
    CHECK(!b->device_logits || backend_can_sample(be));
    int err = backend_forward(be, &b->be, b->device_logits ? NULL : b->logits);
    if (err) return err;
    for (int32_t i = 0; i < n_items; i++)
        if (!items[i].kv->head_slots) items[i].kv->n_slots += items[i].n_tok;
    return 0;
}
