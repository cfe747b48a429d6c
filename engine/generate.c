/*
 * generate.c - a continuous batch of prompts to completion (see generate.h).
 *
 * Per sequence: its token ids (prompt then generated), how much of the prompt is in
 * the cache, the KV block table, a sampler RNG and an incremental detokenizer.
 * Every step: decode tokens first (one per decoding sequence), then prompt chunks
 * until max_batched_tokens, one forward, then sampling for every sequence whose last
 * token this step was its final prompt token or a decode token.
 */
#include "generate.h"

#include "batch.h"
#include "detok.h"
#include "err.h"
#include "kv_pool.h"
#include "kv_seq.h"
#include "tokenizer.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>

struct gen_seq {
    const struct gen_request *req;
    int32_t *ids;        /* [n_prompt + max_tokens] prompt then generated tokens */
    int32_t n_prompt;
    int32_t n_ids;
    int32_t n_cached;    /* tokens already in the KV cache */
    struct kv_seq kv;
    struct rng rng;
    struct detok dt;
    char *text;
    size_t text_len, text_cap;
    bool done;
    enum gen_finish finish;
    int32_t kv_slots, kv_blocks_max; /* stats kept past the release of the blocks */
    int64_t kv_evicted;
};

void gen_opts_default(struct gen_opts *o)
{
    o->max_batched_tokens = 2048;
    o->block_size = 16;
    o->kv_blocks = 0;
}

static void append_text(struct gen_seq *s, const char *p, size_t n)
{
    if (s->text_len + n + 1 > s->text_cap) {
        s->text_cap = MAX(s->text_len + n + 1, 2 * s->text_cap);
        s->text = xrealloc(s->text, s->text_cap);
    }
    memcpy(s->text + s->text_len, p, n);
    s->text_len += n;
    s->text[s->text_len] = '\0';
}

static int seq_setup(struct gen_seq *s, const struct model *m, const struct gen_request *r)
{
    int32_t *ids = NULL, n = 0;
    if (r->prompt) {
        int err = tokenizer_encode(m->tok, r->prompt, r->prompt_len, true, &ids, &n);
        if (err) return err;
    } else {
        n = r->n_prompt_ids;
        ids = xmalloc((size_t)MAX(n, 1) * sizeof *ids);
        memcpy(ids, r->prompt_ids, (size_t)n * sizeof *ids);
    }
    if (n == 0) {
        free(ids);
        return err_set(ENG_EINVAL, "empty prompt");
    }
    if (n + r->max_tokens > m->cfg.max_pos) {
        free(ids);
        return err_set(ENG_EINVAL, "prompt (%d tokens) + max_tokens (%d) exceeds the "
                                   "context length %d", n, r->max_tokens, m->cfg.max_pos);
    }
    struct kv_budget budget;
    int err = kv_budget_resolve(&r->kv, n, r->max_tokens, &budget);
    if (err) {
        free(ids);
        return err;
    }
    s->req = r;
    s->ids = xrealloc(ids, (size_t)(n + r->max_tokens + 1) * sizeof *ids);
    s->n_prompt = s->n_ids = n;
    kv_seq_init(&s->kv);
    kv_seq_set_budget(&s->kv, &budget);
    rng_seed(&s->rng, r->seed);
    detok_init(&s->dt, m->tok, r->stops, r->n_stops);
    s->done = r->max_tokens == 0;
    s->finish = GEN_FINISH_LENGTH;
    append_text(s, "", 0);
    return 0;
}

/* Sample the next token from `logits` and feed it through the detokenizer. */
static void seq_sample(struct gen_seq *s, const struct model *m, float *logits,
                       struct sampler_scratch *scratch)
{
    struct sample_out so;
    const int32_t *out = s->ids + s->n_prompt;
    int32_t tok = sampler_sample(&s->req->sp, logits, m->cfg.vocab_size, out,
                                 s->n_ids - s->n_prompt, &s->rng, scratch, &so);
    s->ids[s->n_ids++] = tok;
    char *delta;
    size_t len;
    bool stopped = false;
    if (tok == m->cfg.eos_id && !s->req->ignore_eos) {
        s->done = true;
        s->finish = GEN_FINISH_STOP;
    } else {
        detok_push(&s->dt, tok, &delta, &len, &stopped);
        append_text(s, delta, len);
        if (stopped) {
            s->done = true;
            s->finish = GEN_FINISH_STOP;
        }
    }
    if (!s->done && s->n_ids - s->n_prompt >= s->req->max_tokens) s->done = true;
    if (s->done && !stopped) {
        detok_flush(&s->dt, &delta, &len);
        append_text(s, delta, len);
        /* Flushing can complete a stop string that ends in a replacement character. */
        if (detok_stopped(&s->dt)) s->finish = GEN_FINISH_STOP;
    }
}

int generate_run(struct model *m, const struct gen_opts *o, const struct gen_request *reqs,
                 int32_t n_reqs, struct gen_result *results)
{
    struct gen_seq *seqs = xcalloc((size_t)MAX(n_reqs, 1), sizeof *seqs);
    struct batch_item *items = xcalloc((size_t)MAX(n_reqs, 1), sizeof *items);
    struct gen_seq **owner = xcalloc((size_t)MAX(n_reqs, 1), sizeof *owner);
    struct kv_pool pool = {0};
    struct batch b;
    struct sampler_scratch scratch;
    batch_init(&b);
    sampler_scratch_init(&scratch);
    int err = 0, n_setup = 0;

    int32_t need_blocks = 0;
    for (; n_setup < n_reqs; n_setup++) {
        err = seq_setup(&seqs[n_setup], m, &reqs[n_setup]);
        if (err) goto done;
        need_blocks += CEIL_DIV(kv_budget_peak_slots(&seqs[n_setup].kv.budget,
                                                     seqs[n_setup].n_prompt,
                                                     reqs[n_setup].max_tokens),
                                o->block_size);
    }
    int32_t n_blocks = o->kv_blocks > 0 ? o->kv_blocks : MAX(need_blocks, 1);
    kv_pool_init(&pool, n_blocks, o->block_size);
    err = m->be.ops->kv_alloc(m->be.ctx, n_blocks, o->block_size);
    if (err) goto done;

    for (;;) {
        int32_t n_items = 0, budget = o->max_batched_tokens;
        /* Decode tokens first: a running sequence never waits behind a prompt. */
        for (int32_t i = 0; i < n_reqs && budget > 0; i++) {
            struct gen_seq *s = &seqs[i];
            if (s->done || s->n_cached < s->n_prompt) continue;
            items[n_items] = (struct batch_item){
                .kv = &s->kv, .tokens = s->ids + s->n_cached, .n_tok = 1,
                .pos0 = s->n_cached,
            };
            owner[n_items++] = s;
            budget--;
        }
        for (int32_t i = 0; i < n_reqs && budget > 0; i++) {
            struct gen_seq *s = &seqs[i];
            if (s->done || s->n_cached >= s->n_prompt) continue;
            int32_t chunk = MIN(budget, s->n_prompt - s->n_cached);
            items[n_items] = (struct batch_item){
                .kv = &s->kv, .tokens = s->ids + s->n_cached, .n_tok = chunk,
                .pos0 = s->n_cached,
            };
            owner[n_items++] = s;
            budget -= chunk;
        }
        if (n_items == 0) break;
        err = batch_run(&b, &m->be, &pool, m->cfg.vocab_size, items, n_items);
        if (err) goto done;
        for (int32_t i = 0; i < n_items; i++) {
            struct gen_seq *s = owner[i];
            const bool decode = s->n_cached >= s->n_prompt;
            const int32_t t = s->n_cached; /* position of the item's first token */
            s->n_cached += items[i].n_tok;
            if (s->n_cached < s->n_prompt) continue; /* mid-prompt: no token yet */
            /* The KV policy acts after the forward that wrote the tokens. */
            if (decode) kv_seq_after_decode(&s->kv, &m->be, &m->cfg, t);
            else kv_seq_finish_prefill(&s->kv, &pool, &m->be, &m->cfg);
            s->kv_blocks_max = MAX(s->kv_blocks_max, s->kv.n_blocks);
            seq_sample(s, m, b.logits + (int64_t)items[i].logits_row * m->cfg.vocab_size,
                       &scratch);
            if (s->done) {
                s->kv_slots = s->kv.n_slots;
                s->kv_evicted = s->kv.n_evicted;
                kv_seq_release(&s->kv, &pool);
            }
        }
    }

    for (int32_t i = 0; i < n_reqs; i++) {
        struct gen_seq *s = &seqs[i];
        struct gen_result *r = &results[i];
        r->text = s->text;
        r->text_len = s->text_len;
        s->text = NULL;
        r->n_tokens = s->n_ids - s->n_prompt;
        r->tokens = xmalloc((size_t)MAX(r->n_tokens, 1) * sizeof *r->tokens);
        memcpy(r->tokens, s->ids + s->n_prompt, (size_t)r->n_tokens * sizeof *r->tokens);
        r->prompt_tokens = s->n_prompt;
        r->finish = s->finish;
        r->budget = s->kv.budget;
        r->kv_slots = s->kv_slots;
        r->kv_blocks_max = s->kv_blocks_max;
        r->kv_evicted = s->kv_evicted;
    }
    CHECK(pool.n_free == pool.n_blocks);
done:
    for (int32_t i = 0; i < n_setup; i++) {
        struct gen_seq *s = &seqs[i];
        if (pool.free_stack) kv_seq_deinit(&s->kv, &pool);
        else free(s->kv.blocks);
        detok_deinit(&s->dt);
        free(s->ids);
        free(s->text);
    }
    kv_pool_deinit(&pool);
    batch_deinit(&b);
    sampler_scratch_deinit(&scratch);
    free(seqs);
    free(items);
    free(owner);
    return err;
}

void gen_result_free(struct gen_result *r)
{
    free(r->text);
    free(r->tokens);
    memset(r, 0, sizeof *r);
}
