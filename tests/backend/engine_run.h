/*
 * engine_run.h - drive several sequences through the paged engine step by step
 * (batch_run plus the H2O hooks), the way the scheduler does, and keep every step's
 * logits; shared by the tests that compare such runs (test_h2o_equiv against the
 * dense reference, test_tp across tensor-parallel sizes).
 *
 * Header-only and static, like test.h: each test program includes it once.
 */
#ifndef H2O_TEST_ENGINE_RUN_H
#define H2O_TEST_ENGINE_RUN_H

#include "test.h"

#include "golden.h"
#include "h2o.h"
#include "h2o_ref.h"

#define STEPS 64
#define MAX_SEQ 8

struct eseq {
    int32_t tokens[256];
    int32_t P;
    struct kv_budget budget;
    struct h2o_ref_policy pol;
    struct kv_seq kv;
    int32_t n_cached, step;
    float *logits; /* [(STEPS + 1) * V] as the engine computed them */
};

static inline uint64_t lcg(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

static inline void eseq_init(struct eseq *e, int32_t P, int32_t H, int32_t R, bool full,
                             uint64_t seed, int32_t vocab)
{
    memset(e, 0, sizeof *e);
    e->P = P;
    e->tokens[0] = 2;
    for (int32_t t = 1; t < P; t++)
        e->tokens[t] = 4 + (int32_t)(lcg(&seed) % (uint64_t)(vocab - 4));
    e->budget = (struct kv_budget){
        .policy = full ? KV_POLICY_FULL : KV_POLICY_H2O, .heavy = H, .recent = R};
    e->pol = (struct h2o_ref_policy){.full = full, .heavy = H, .recent = R};
    kv_seq_init(&e->kv);
    kv_seq_set_budget(&e->kv, &e->budget);
    e->logits = xmalloc((size_t)(STEPS + 1) * (size_t)vocab * sizeof(float));
}

/* Run the sequences together through the paged engine: decode tokens first, then
 * prompt chunks of at most `chunk` tokens. Decode tokens are the engine's own
 * greedy choices. */
static inline void run_engine(struct model *m, struct kv_pool *pool, struct eseq *es,
                              int32_t n, int32_t chunk)
{
    const int32_t V = m->cfg.vocab_size;
    struct batch b;
    batch_init(&b);
    struct batch_item items[MAX_SEQ];
    struct eseq *owner[MAX_SEQ];
    for (;;) {
        int32_t k = 0;
        for (int32_t i = 0; i < n; i++) {
            struct eseq *e = &es[i];
            if (e->step >= STEPS) continue;
            int32_t take = e->n_cached < e->P ? MIN(chunk, e->P - e->n_cached) : 1;
            items[k] = (struct batch_item){.kv = &e->kv,
                                           .tokens = e->tokens + e->n_cached,
                                           .n_tok = take,
                                           .pos0 = e->n_cached};
            owner[k++] = e;
        }
        if (k == 0) break;
        CHECK(batch_run(&b, &m->be, pool, V, items, k) == 0);
        for (int32_t i = 0; i < k; i++) {
            struct eseq *e = owner[i];
            const bool decode = e->n_cached >= e->P;
            const int32_t t = e->n_cached;
            e->n_cached += items[i].n_tok;
            if (e->n_cached < e->P) continue;
            if (decode) {
                kv_seq_after_decode(&e->kv, &m->be, &m->cfg, t);
                e->step++;
            } else {
                kv_seq_finish_prefill(&e->kv, pool, &m->be, &m->cfg);
            }
            if (e->budget.policy != KV_POLICY_FULL) {
                int32_t bound = CEIL_DIV(kv_budget_slots(&e->budget), pool->block_size);
                if (e->kv.n_blocks > bound)
                    TEST_FAIL("holds %d blocks after its prompt, budget %d", e->kv.n_blocks,
                              bound);
            }
            const float *row = b.logits + (int64_t)items[i].logits_row * V;
            memcpy(e->logits + (int64_t)e->step * V, row, (size_t)V * sizeof(float));
            if (e->step < STEPS) e->tokens[e->P + e->step] = argmax(row, V);
        }
    }
    batch_deinit(&b);
}

/* Free what eseq_init and run_engine gave the sequence. */
static inline void eseq_deinit(struct eseq *e, struct kv_pool *pool)
{
    kv_seq_deinit(&e->kv, pool);
    free(e->logits);
}

#endif
