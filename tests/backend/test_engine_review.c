/*
 * test_engine_review.c - regressions found reviewing the engine's KV path
 * (sched.c, kv_seq.c, h2o.c, batch.c, the CPU attention).
 *
 * Each test pins one edge the broader tests (test_sched, test_h2o_equiv) do not
 * reach: budgets at the edge of int32, results that must not depend on which other
 * sequences share a forward, and forks whose H2O state must equal their parent's.
 */
#include "sched_harness.h"

#include "batch.h"
#include "golden.h"
#include "kv_seq.h"

/* ---- 1. Budgets near INT32_MAX. ---- */

/*
 * The API accepts any absolute heavy / recent count up to INT32_MAX. H + R then
 * overflowed int32 in kv_budget_slots (and ceil(B / block_size) for values just
 * below it), so the scheduler computed a negative decode share and aborted on its
 * own invariants: one request could take the server down. A budget that large can
 * never evict anything, so it must run exactly like a full cache.
 */
TEST(huge_absolute_budget)
{
    const int32_t hr[][2] = {{INT32_MAX, 1}, {1, INT32_MAX}, {INT32_MAX, INT32_MAX},
                             {INT32_MAX - 20, 5}};
    struct kv_budget b;
    for (int32_t c = 0; c < (int32_t)ARRAY_LEN(hr); c++) {
        const struct kv_spec kv = spec_abs(KV_POLICY_H2O, hr[c][0], hr[c][1]);
        CHECK(kv_budget_resolve(&kv, 20, 8, &b) == 0);
        const int64_t B = (int64_t)b.heavy + b.recent;
        /* Still no eviction: B above every token the sequence can hold. */
        EXPECT(B >= 28);
        /* ceil(B / block_size) must not overflow either. */
        EXPECT(B <= INT32_MAX - 4096);
        EXPECT_EQ((int64_t)kv_budget_slots(&b), B);
    }

    struct harness h;
    if (!h_open(&h, 64, 8, 64, 16)) return;
    for (int32_t c = 0; c < (int32_t)ARRAY_LEN(hr); c++) {
        const struct kv_spec kv = spec_abs(KV_POLICY_H2O, hr[c][0], hr[c][1]);
        h_add(&h, mkreq((uint64_t)(2 * c), 20, 8, 2, REQ_PRIO_BATCH, kv, 9));
        h_add(&h, mkreq((uint64_t)(2 * c + 1), 20, 8, 1, REQ_PRIO_BATCH, spec_full(), 9));
        h_run_idle(&h, 200);
    }
    h_check_all_answered(&h);
    for (int32_t c = 0; c < (int32_t)ARRAY_LEN(hr); c++) {
        const struct req_obs *big = &h.o.r[2 * c], *full = &h.o.r[2 * c + 1];
        for (int32_t k = 0; k < 2; k++)
            if (big->seq[k].tok_hash != full->seq[0].tok_hash)
                TEST_FAIL("H %d R %d seq %d: differs from the full cache", hr[c][0], hr[c][1],
                          k);
    }
    h_close(&h);
}

/* ---- 2. A sequence's logits do not depend on its batch. ---- */

#define NSEQ 8
#define STEPS 40

struct rseq {
    int32_t tokens[128];
    int32_t P;
    struct kv_budget budget;
    struct kv_seq kv;
    int32_t n_cached, step;
    float *logits; /* [(STEPS + 1) * V] */
};

static void rseq_init(struct rseq *e, int32_t P, int32_t H, int32_t R, uint64_t seed, int32_t V)
{
    memset(e, 0, sizeof *e);
    e->P = P;
    for (int32_t t = 0; t < P + STEPS; t++) e->tokens[t] = lcg_range(&seed, 4, V - 1);
    e->budget = (struct kv_budget){.policy = KV_POLICY_H2O, .heavy = H, .recent = R};
    kv_seq_init(&e->kv);
    kv_seq_set_budget(&e->kv, &e->budget);
    e->logits = xmalloc((size_t)(STEPS + 1) * (size_t)V * sizeof(float));
}

/* Prefill each sequence whole, then STEPS decode steps of forced tokens, the n
 * sequences' decode tokens in one forward per step. prefill_alone: each prompt in a
 * forward of its own first (so only the decode steps share forwards). */
static void rseq_run(struct model *m, struct kv_pool *pool, struct rseq *es, int32_t n,
                     bool prefill_alone)
{
    const int32_t V = m->cfg.vocab_size;
    struct batch b;
    batch_init(&b);
    struct batch_item items[NSEQ];
    struct rseq *owner[NSEQ];
    for (;;) {
        int32_t k = 0;
        for (int32_t i = 0; i < n; i++) {
            struct rseq *e = &es[i];
            if (e->step >= STEPS) continue;
            const bool prefill = e->n_cached < e->P;
            if (prefill_alone && prefill) {
                k = 0; /* this prompt alone */
                owner[k] = e;
                items[k++] = (struct batch_item){.kv = &e->kv, .tokens = e->tokens,
                                                 .n_tok = e->P, .pos0 = 0};
                break;
            }
            owner[k] = e;
            items[k++] = (struct batch_item){.kv = &e->kv, .tokens = e->tokens + e->n_cached,
                                             .n_tok = prefill ? e->P : 1, .pos0 = e->n_cached};
        }
        if (k == 0) break;
        CHECK(batch_run(&b, &m->be, pool, V, items, k) == 0);
        for (int32_t i = 0; i < k; i++) {
            struct rseq *e = owner[i];
            const struct batch_item *it = &items[i];
            const int32_t t = e->n_cached;
            const bool decode = t >= e->P;
            e->n_cached += it->n_tok;
            if (decode) {
                kv_seq_after_decode(&e->kv, &m->be, &m->cfg, t);
                e->step++;
            } else {
                kv_seq_finish_prefill(&e->kv, pool, &m->be, &m->cfg);
            }
            memcpy(e->logits + (int64_t)e->step * V, b.logits + (int64_t)it->logits_row * V,
                   (size_t)V * sizeof(float));
        }
    }
    batch_deinit(&b);
}

/*
 * Decode steps of many sequences take the whole-sequence attention task
 * (attend_decode_seq) while a lone sequence takes the per-head one; both must give
 * bit-identical logits, or a request's output would depend on the server's load.
 * fp32 only: with bf16 the oneDNN GEMMs themselves differ in the last bit between
 * M = 1 and M = 8 (seen while writing this test, with attention on either path).
 */
static void check_batch_independent(enum dtype dt, bool prefill_alone)
{
    struct model_opts mo;
    model_opts_default(&mo);
    mo.dtype = dt;
    mo.n_threads = 1; /* 2 decode sequences already take the whole-sequence path */
    struct model *m = NULL;
    CHECK(model_load(&m, "dummy:tiny", &mo) == 0);
    CHECK(m->be.ops->kv_alloc(m->be.ctx, 256, BS) == 0);
    struct kv_pool pool;
    kv_pool_init(&pool, 256, BS);
    const int32_t V = m->cfg.vocab_size;
    const int32_t hr[NSEQ][2] = {{6, 4}, {0, 9}, {20, 20}, {5, 1}, {3, 30}, {12, 5},
                                 {16, 17}, {1, 2}};
    struct rseq alone[NSEQ], together[NSEQ];
    for (int32_t i = 0; i < NSEQ; i++) {
        rseq_init(&alone[i], 30 + 3 * i, hr[i][0], hr[i][1], 77 + (uint64_t)i, V);
        rseq_init(&together[i], 30 + 3 * i, hr[i][0], hr[i][1], 77 + (uint64_t)i, V);
        rseq_run(m, &pool, &alone[i], 1, false);
    }
    rseq_run(m, &pool, together, NSEQ, prefill_alone);
    for (int32_t i = 0; i < NSEQ; i++) {
        const int64_t n = (int64_t)(STEPS + 1) * V;
        if (memcmp(alone[i].logits, together[i].logits, (size_t)n * sizeof(float)) != 0)
            TEST_FAIL("%s seq %d (H %d R %d): logits alone and batched differ by %g",
                      dtype_name(dt), i, hr[i][0], hr[i][1],
                      max_abs_diff(alone[i].logits, together[i].logits, n));
        EXPECT_EQ(alone[i].kv.n_evicted, together[i].kv.n_evicted);
        kv_seq_deinit(&alone[i].kv, &pool);
        kv_seq_deinit(&together[i].kv, &pool);
        free(alone[i].logits);
        free(together[i].logits);
    }
    EXPECT_EQ(pool.n_free, pool.n_blocks);
    kv_pool_deinit(&pool);
    model_destroy(m);
}

TEST(batch_independent) { check_batch_independent(DTYPE_F32, false); }
/* The same with every prompt prefilled alone: only decode steps share a forward. */
TEST(batch_independent_decode_only) { check_batch_independent(DTYPE_F32, true); }

/* ---- 3. Forks: n > 1 at every budget shape, max_tokens 1 and 2. ---- */

/*
 * Greedy forks must each produce the lone request's tokens: the fork copies blocks,
 * slot state and n_slots, and every later eviction must see the same state in every
 * fork. Budgets: below the prompt (compacted), the prompt exactly B - 1 and B, above
 * the prompt but reached while decoding, never reached; max_tokens 1 (the forks never
 * decode) and 2 (one decode step, not cached after).
 */
TEST(forks_match_lone_request)
{
    const int32_t cases[][4] = {
        /* P, H, R, max_tokens */
        {40, 4, 3, 30}, {9, 5, 5, 30}, {10, 5, 5, 30}, {12, 10, 10, 30}, {20, 40, 40, 20},
        {40, 4, 3, 1},  {40, 4, 3, 2}, {9, 5, 5, 2},   {17, 0, 1, 20},   {16, 8, 9, 25},
    };
    const int32_t n_cases = (int32_t)ARRAY_LEN(cases);
    struct harness h;
    if (!h_open(&h, 128, 8, 64, 2 * n_cases)) return;
    for (int32_t c = 0; c < n_cases; c++) {
        const struct kv_spec kv = spec_abs(KV_POLICY_H2O, cases[c][1], cases[c][2]);
        h_add(&h, mkreq((uint64_t)(2 * c), cases[c][0], cases[c][3], 1, REQ_PRIO_BATCH, kv, 31));
        h_add(&h,
              mkreq((uint64_t)(2 * c + 1), cases[c][0], cases[c][3], 4, REQ_PRIO_BATCH, kv, 31));
    }
    h_run_idle(&h, 2000);
    h_check_all_answered(&h);
    for (int32_t c = 0; c < n_cases; c++) {
        const struct req_obs *one = &h.o.r[2 * c], *four = &h.o.r[2 * c + 1];
        for (int32_t k = 0; k < 4; k++) {
            EXPECT_EQ(four->seq[k].n_tok, cases[c][3]);
            if (four->seq[k].tok_hash != one->seq[0].tok_hash)
                TEST_FAIL("P %d H %d R %d T %d: fork %d differs from the lone request",
                          cases[c][0], cases[c][1], cases[c][2], cases[c][3], k);
        }
    }
    h_close(&h);
}

/* ---- 4. Attention scratch rows follow the OpenMP thread count. ---- */

/*
 * The CPU backend sized its attention scratch for omp_get_max_threads() when the
 * scratch last grew, but the thread count is the calling thread's OpenMP setting,
 * which a later backend_cpu_create (another model, n_threads > 0) changes. The next
 * forward of the first model, with no bigger sequence to trigger a regrow, then ran
 * its attention tasks on threads whose scratch rows were never allocated: a heap
 * overflow (AddressSanitizer reports it; without it, silent corruption).
 */
TEST(scratch_rows_follow_thread_count)
{
    struct model_opts mo;
    model_opts_default(&mo);
    mo.dtype = DTYPE_F32;
    mo.n_threads = 1;
    struct model *a = NULL, *b = NULL;
    CHECK(model_load(&a, "dummy:tiny", &mo) == 0);
    CHECK(a->be.ops->kv_alloc(a->be.ctx, 64, BS) == 0);
    struct kv_pool pool;
    kv_pool_init(&pool, 64, BS);
    const int32_t V = a->cfg.vocab_size, P = 40;
    struct batch bt;
    batch_init(&bt);
    int32_t tokens[P];
    uint64_t seed = 5;
    for (int32_t t = 0; t < P; t++) tokens[t] = lcg_range(&seed, 4, V - 1);
    struct kv_seq kv[NSEQ];
    struct batch_item items[NSEQ];
    float *first = xmalloc((size_t)V * sizeof *first);
    for (int32_t round = 0; round < 2; round++) {
        for (int32_t i = 0; i < NSEQ; i++) {
            kv_seq_init(&kv[i]);
            items[i] = (struct batch_item){.kv = &kv[i], .tokens = tokens, .n_tok = P};
        }
        /* Round 0 on one thread; round 1 after another model asked for 8. */
        CHECK(batch_run(&bt, &a->be, &pool, V, items, round == 0 ? 1 : NSEQ) == 0);
        if (round == 0) {
            memcpy(first, bt.logits, (size_t)V * sizeof *first);
            mo.n_threads = 8;
            CHECK(model_load(&b, "dummy:tiny", &mo) == 0);
        } else {
            for (int32_t i = 0; i < NSEQ; i++)
                if (memcmp(first, bt.logits + (int64_t)items[i].logits_row * V,
                           (size_t)V * sizeof *first) != 0)
                    TEST_FAIL("seq %d: logits differ from the same prompt's first run", i);
        }
        for (int32_t i = 0; i < (round == 0 ? 1 : NSEQ); i++) kv_seq_deinit(&kv[i], &pool);
    }
    free(first);
    batch_deinit(&bt);
    EXPECT_EQ(pool.n_free, pool.n_blocks);
    kv_pool_deinit(&pool);
    model_destroy(b);
    model_destroy(a);
}

int main(void)
{
    RUN(huge_absolute_budget);
    RUN(batch_independent);
    RUN(batch_independent_decode_only);
    RUN(forks_match_lone_request);
    RUN(scratch_rows_follow_thread_count);
    return test_done();
}
