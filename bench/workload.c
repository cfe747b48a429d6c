/*
 * workload.c - FlexGen's offline workload through the engine's batches (see
 * workload.h).
 */
#include "workload.h"

#include "batch.h"
#include "engine_core.h"
#include "err.h"
#include "kv_seq.h"
#include "sampler.h"
#include "util.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

int64_t workload_peak_blocks(const struct workload *w)
{
    struct kv_budget bud;
    CHECK(kv_budget_resolve(&w->spec, w->prompt_len, w->gen_len, &bud) == 0);
    const int32_t bs = w->block_size, P = w->prompt_len, G = w->gen_len;
    const int32_t B = kv_budget_slots(&bud);
    /* kv_seq_finish_prefill compacts a prompt longer than B - 1 to B - 1 slots and
     * keeps ceil(B / bs) blocks; a shorter one (and every full one) keeps its own. */
    const bool compacts = bud.policy != KV_POLICY_FULL && P > B - 1;
    const int64_t kept = compacts ? CEIL_DIV(B, bs) : CEIL_DIV(P, bs);
    /* Prefill in workload_run's order: during a forward the pool holds the compacted
     * prompts plus every prompt of the forward grown to its tokens so far (a prompt
     * cut at the forward's end is carried, blocks and all, into the next). */
    int64_t compacted = 0, peak = 0;
    int32_t seq = 0, done = 0;
    while (seq < w->n) {
        int32_t room = w->max_batched, finished = 0;
        int64_t in_forward = 0;
        while (seq < w->n && room > 0) {
            const int32_t take = MIN(room, P - done);
            /* A new prompt joins only if the pool holds it too (the first always). */
            if (done == 0 && in_forward > 0 && w->pool_blocks > 0 &&
                compacted + in_forward + CEIL_DIV(take, bs) > w->pool_blocks)
                break;
            room -= take;
            done += take;
            in_forward += CEIL_DIV(done, bs);
            if (done < P) break;
            finished++;
            seq++;
            done = 0;
        }
        peak = MAX(peak, compacted + in_forward);
        compacted += finished * kept;
    }
    /* Decode: every sequence grows by a slot a step until its budget (full: to the
     * last token fed, position P + G - 2, so P + G - 1 slots). */
    const int64_t first = compacts ? B - 1 : P;
    const int64_t most =
        bud.policy == KV_POLICY_FULL ? (int64_t)P + G - 1 : MIN((int64_t)B, first + G - 1);
    const int64_t per_seq = MAX(kept, CEIL_DIV(most, (int64_t)bs));
    return MAX(peak, (int64_t)w->n * per_seq);
}

int32_t workload_max_batch(const struct workload *w, int64_t pool_blocks, int32_t limit)
{
    /* The peak grows with n: binary search for the last n that fits. */
    struct workload t = *w;
    t.pool_blocks = pool_blocks;
    int32_t lo = 0, hi = limit;
    while (lo < hi) {
        const int32_t mid = lo + (hi - lo + 1) / 2;
        t.n = mid;
        if (workload_peak_blocks(&t) <= pool_blocks)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

/* The server's greedy choice on the host: the engine's sampler (its SIMD cleaning
 * and argmax), so the host's share of a step is what serving pays. */
static int32_t greedy(float *row, int32_t vocab, struct sampler_scratch *scratch)
{
    struct sampler_params p;
    sampler_params_default(&p);
    p.temperature = 0;
    struct sample_out out;
    return sampler_sample_u(&p, row, vocab, 0.0, scratch, &out);
}

/*
 * The greedy token of each item's last logits row, as the server takes it: on the
 * backend's device when it samples there (the logits never leave it), else on the
 * host. tok[i] gets item i's token.
 */
static int pick(struct model *m, struct batch *b, const struct batch_item *items, int32_t n,
                struct be_sample_row *rows, struct sample_out *outs, int32_t *tok)
{
    const int32_t V = m->cfg.vocab_size;
    if (!b->device_logits) {
        struct sampler_scratch scratch;
        sampler_scratch_init(&scratch);
        for (int32_t i = 0; i < n; i++)
            tok[i] =
                greedy(b->logits + (size_t)items[i].logits_row * (size_t)V, V, &scratch);
        sampler_scratch_deinit(&scratch);
        return 0;
    }
    for (int32_t i = 0; i < n; i++)
        rows[i] = (struct be_sample_row){
            .row = items[i].logits_row, .temperature = 0, .top_p = 1, .n_logprobs = -1};
    int err = backend_sample(&m->be, rows, n, outs);
    for (int32_t i = 0; !err && i < n; i++)
        tok[i] = outs[i].token;
    return err;
}

int workload_run(struct model *m, const struct workload *w, int32_t pool_blocks,
                 struct workload_result *res)
{
    const int32_t V = m->cfg.vocab_size, bs = w->block_size, n = w->n;
    const int32_t prompt_len = w->prompt_len, gen_len = w->gen_len;
    struct kv_budget budget;
    CHECK(kv_budget_resolve(&w->spec, prompt_len, gen_len, &budget) == 0);
    const struct engine_core_opts co = {
        .upto = ENGINE_CORE_POOL, .shared_model = m, .block_size = bs, .kv_blocks = pool_blocks};
    struct engine_core *core;
    int err = engine_core_open(&co, &core);
    if (err) return err;
    struct kv_pool *pool = &core->pool;
    struct kv_seq *kv = xcalloc((size_t)n, sizeof *kv);
    int32_t *toks = xmalloc((size_t)n * (size_t)(prompt_len + gen_len) * sizeof *toks);
    struct batch_item *items = xmalloc((size_t)n * sizeof *items);
    struct be_sample_row *rows = xmalloc((size_t)n * sizeof *rows);
    struct sample_out *outs = xmalloc((size_t)n * sizeof *outs);
    int32_t *picked = xmalloc((size_t)n * sizeof *picked);
    uint64_t seed = 12345;
    for (int32_t i = 0; i < n; i++) {
        kv_seq_init(&kv[i]);
        kv_seq_set_budget(&kv[i], &budget);
        int32_t *t = toks + (size_t)i * (size_t)(prompt_len + gen_len);
        t[0] = m->cfg.bos_id;
        for (int32_t j = 1; j < prompt_len; j++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            t[j] = 4 + (int32_t)((seed >> 33) % (uint64_t)(V - 4));
        }
    }
    struct batch b;
    batch_init(&b);
    b.device_logits = backend_can_sample(&m->be);
    memset(res, 0, sizeof *res);

    /* Prefill: chunks of the prompts in order, up to max_batched tokens a forward. */
    double t0 = time_now();
    int32_t seq = 0, done = 0; /* sequence being filled, its tokens already cached */
    while (!err && seq < n) {
        int32_t k = 0, room = w->max_batched, grow = 0;
        while (seq < n && room > 0) {
            const int32_t take = MIN(room, prompt_len - done);
            /* A new prompt joins only while the pool can hold it too (as
             * workload_peak_blocks plans it); the first of a forward always does. */
            const int32_t need = CEIL_DIV(done + take, bs) - kv[seq].n_blocks;
            if (done == 0 && k > 0 && grow + need > pool->n_free) break;
            grow += need;
            items[k++] = (struct batch_item){
                .kv = &kv[seq],
                .tokens = toks + (size_t)seq * (size_t)(prompt_len + gen_len) + done,
                .n_tok = take,
                .pos0 = done};
            room -= take;
            done += take;
            if (done == prompt_len) {
                seq++;
                done = 0;
            }
        }
        err = batch_run(&b, &m->be, pool, V, items, k);
        res->peak_blocks = MAX(res->peak_blocks, pool->n_blocks - pool->n_free);
        if (!err) err = pick(m, &b, items, k, rows, outs, picked);
        for (int32_t i = 0; !err && i < k; i++) {
            struct kv_seq *s = items[i].kv;
            if (items[i].pos0 + items[i].n_tok < prompt_len) continue;
            const int32_t si = (int32_t)(s - kv);
            kv_seq_finish_prefill(s, pool, &m->be, &m->cfg);
            toks[(size_t)si * (size_t)(prompt_len + gen_len) + prompt_len] = picked[i];
        }
    }
    res->prefill_s = time_now() - t0;

    /* Decode: every sequence one token per step. */
    struct be_profile prof;
    backend_profile(&m->be, &prof); /* reset */
    t0 = time_now();
    struct kv_seq **kv_ptr = xmalloc((size_t)n * sizeof *kv_ptr);
    int32_t *at = xmalloc((size_t)n * sizeof *at);
    for (int32_t i = 0; i < n; i++)
        kv_ptr[i] = &kv[i];
    for (int32_t step = 1; !err && step < gen_len; step++) {
        const int32_t p = prompt_len + step - 1; /* position of the token fed now */
        for (int32_t i = 0; i < n; i++)
            at[i] = p;
        for (int32_t i = 0; i < n; i++)
            items[i] = (struct batch_item){
                .kv = &kv[i],
                .tokens = toks + (size_t)i * (size_t)(prompt_len + gen_len) + p,
                .n_tok = 1,
                .pos0 = p};
        err = batch_run(&b, &m->be, pool, V, items, n);
        res->peak_blocks = MAX(res->peak_blocks, pool->n_blocks - pool->n_free);
        double t1 = time_now();
        if (!err) err = pick(m, &b, items, n, rows, outs, picked);
        double t2 = time_now();
        if (!err) kv_seq_after_decode_many(kv_ptr, at, n, &m->be, &m->cfg);
        res->sample_s += t2 - t1;
        res->evict_s += time_now() - t2;
        for (int32_t i = 0; !err && i < n; i++)
            toks[(size_t)i * (size_t)(prompt_len + gen_len) + p + 1] = picked[i];
    }
    res->decode_s = time_now() - t0;
    backend_profile(&m->be, &res->decode_prof);
    for (int32_t i = 0; i < n; i++) {
        res->evicted += kv[i].n_evicted;
        const int32_t *g = toks + (size_t)i * (size_t)(prompt_len + gen_len) + prompt_len;
        for (int32_t j = 0; j < gen_len; j++)
            res->checksum = res->checksum * 1000003u + (uint64_t)g[j];
        kv_seq_deinit(&kv[i], pool);
    }
    batch_deinit(&b);
    engine_core_close(core);
    free(kv);
    free(toks);
    free(items);
    free(rows);
    free(outs);
    free(picked);
    free(kv_ptr);
    free(at);
    return err;
}
