/*
 * quality.c - streaming perplexity through the engine's batches (see quality.h).
 *
 * Segments run `batch` at a time, like generation does: their prompts are prefilled
 * in forwards of up to max_batched tokens (several prompts, or chunks of one, per
 * forward), then every segment of the group decodes one true token per step. A
 * sequence's logits do not depend on the rest of its batch (DESIGN section 4), so
 * the result does not depend on `batch` either.
 */
#include "quality.h"

#include "batch.h"
#include "engine_core.h"
#include "err.h"
#include "kv_seq.h"
#include "util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void quality_spec_default(struct quality_spec *q)
{
    *q = (struct quality_spec){
        .prompt_len = 64,
        .gen_len = 448,
        .batch = 16,
        .max_batched = 2048,
        .block_size = 16,
    };
    q->kv.policy = KV_POLICY_FULL;
    q->kv.heavy = q->kv.recent = -1;
}

/* -ln softmax(row)[target], in double. */
static double token_nll(const float *row, int32_t vocab, int32_t target)
{
    float mx = row[0];
    for (int32_t j = 1; j < vocab; j++)
        mx = row[j] > mx ? row[j] : mx;
    double sum = 0.0;
    for (int32_t j = 0; j < vocab; j++)
        sum += exp((double)row[j] - mx);
    return (double)mx + log(sum) - (double)row[target];
}

/* Run segments seg[0..n) (each P + G tokens) as one group; adds to res. */
static int run_group(struct model *m, const struct quality_spec *q, struct kv_pool *pool,
                     struct batch *b, const int32_t *const *seg, int32_t n,
                     struct quality_result *res)
{
    const int32_t V = m->cfg.vocab_size, P = q->prompt_len, G = q->gen_len;
    struct kv_seq *kv = xcalloc((size_t)n, sizeof *kv);
    struct kv_seq **kv_ptr = xmalloc((size_t)n * sizeof *kv_ptr);
    struct batch_item *items = xmalloc((size_t)n * sizeof *items);
    int32_t *at = xmalloc((size_t)n * sizeof *at);
    for (int32_t i = 0; i < n; i++) {
        kv_seq_init(&kv[i]);
        kv_seq_set_budget(&kv[i], &res->budget);
        kv_ptr[i] = &kv[i];
    }

    /* Prefill; the last chunk of a prompt scores token P. */
    int err = 0;
    int32_t s = 0, done = 0; /* segment being filled, its tokens already cached */
    while (!err && s < n) {
        int32_t k = 0, room = q->max_batched;
        while (s < n && room > 0) {
            const int32_t take = MIN(room, P - done);
            items[k++] = (struct batch_item){
                .kv = &kv[s], .tokens = seg[s] + done, .n_tok = take, .pos0 = done};
            room -= take;
            done += take;
            if (done == P) {
                s++;
                done = 0;
            }
        }
        err = batch_run(b, &m->be, pool, V, items, k);
        for (int32_t i = 0; !err && i < k; i++) {
            if (items[i].pos0 + items[i].n_tok < P) continue;
            const int32_t si = (int32_t)(items[i].kv - kv);
            res->nll += token_nll(b->logits + (size_t)items[i].logits_row * (size_t)V, V,
                                  seg[si][P]);
            kv_seq_finish_prefill(&kv[si], pool, &m->be, &m->cfg);
        }
    }

    /* Decode: step j feeds token P + j - 1 and scores token P + j. */
    for (int32_t j = 1; !err && j < G; j++) {
        const int32_t p = P + j - 1;
        for (int32_t i = 0; i < n; i++) {
            items[i] = (struct batch_item){
                .kv = &kv[i], .tokens = seg[i] + p, .n_tok = 1, .pos0 = p};
            at[i] = p;
        }
        err = batch_run(b, &m->be, pool, V, items, n);
        for (int32_t i = 0; !err && i < n; i++)
            res->nll += token_nll(b->logits + (size_t)items[i].logits_row * (size_t)V, V,
                                  seg[i][p + 1]);
        if (!err) kv_seq_after_decode_many(kv_ptr, at, n, &m->be, &m->cfg);
    }
    if (!err) {
        res->segments += n;
        res->tokens += (int64_t)n * G;
    }
    for (int32_t i = 0; i < n; i++)
        kv_seq_deinit(&kv[i], pool);
    free(kv);
    free(kv_ptr);
    free(items);
    free(at);
    return err;
}

int quality_run(struct model *m, const int32_t *stream, int64_t n,
                const struct quality_spec *q, struct quality_result *res)
{
    const int32_t P = q->prompt_len, G = q->gen_len, L = P + G;
    memset(res, 0, sizeof *res);
    if (P < 1 || G < 1 || q->batch < 1 || q->max_batched < 1 || q->block_size < 1)
        return err_set(ENG_EINVAL, "quality: prompt and gen lengths, batch, max batched "
                                   "tokens and block size must be positive");
    if (L > m->cfg.max_pos)
        return err_set(ENG_EINVAL,
                       "quality: a segment of %d + %d tokens is longer than the "
                       "model's %d positions",
                       P, G, m->cfg.max_pos);
    int64_t n_seg = n / L;
    if (q->segments > 0) n_seg = MIN(n_seg, q->segments);
    if (n_seg == 0)
        return err_set(ENG_EINVAL,
                       "quality: the text has %lld tokens, fewer than one segment "
                       "of %d + %d",
                       (long long)n, P, G);
    for (int64_t i = 0; i < n_seg * L; i++)
        if (stream[i] < 0 || stream[i] >= m->cfg.vocab_size)
            return err_set(ENG_EINVAL,
                           "quality: token %lld (id %d) is outside the vocabulary",
                           (long long)i, stream[i]);
    int err = kv_budget_resolve(&q->kv, P, G, &res->budget);
    if (err) return err;

    /* A pool that holds a whole group uncompacted: the prompts may all be in flight. */
    const int32_t group = (int32_t)MIN(n_seg, q->batch);
    const struct engine_core_opts co = {
        .upto = ENGINE_CORE_POOL,
        .shared_model = m,
        .block_size = q->block_size,
        .kv_blocks = group * CEIL_DIV(L, q->block_size),
    };
    struct engine_core *core;
    err = engine_core_open(&co, &core);
    if (err) return err;
    struct batch b;
    batch_init(&b);
    const int32_t **seg = xmalloc((size_t)group * sizeof *seg);
    for (int64_t s0 = 0; !err && s0 < n_seg; s0 += group) {
        const int32_t k = (int32_t)MIN(group, n_seg - s0);
        for (int32_t i = 0; i < k; i++)
            seg[i] = stream + (s0 + i) * L;
        err = run_group(m, q, &core->pool, &b, seg, k, res);
    }
    free(seg);
    batch_deinit(&b);
    engine_core_close(core);
    res->perplexity = res->tokens ? exp(res->nll / (double)res->tokens) : NAN;
    return err;
}
