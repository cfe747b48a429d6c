/*
 * test_batch.c - batch invariance and KV accounting of the batched forward.
 *
 * A sequence's logits must not depend on what else is in the batch: 8 sequences of
 * different lengths are run each alone (whole prompt in one chunk), then all
 * together with prompts cut into chunks that share forwards with other sequences'
 * decode tokens. Every prefill-end and decode logit row must agree within 1e-5, and
 * every block must be back in the pool afterwards. With H2O budgets that evict, the
 * decode steps of many sequences (the whole-sequence attention task) and of one (the
 * per-head task) must even give the same bits.
 */
#include "test.h"

#include "err.h"
#include "golden.h"
#include "rnd.h"

#define N_SEQ 8
#define N_DEC 10
#define MAX_PROMPT 48

struct tseq {
    int32_t tokens[MAX_PROMPT + N_DEC];
    int32_t n_prompt;
    struct kv_seq kv;
    int32_t n_cached;
    float *ref;  /* [N_DEC + 1, vocab]: last prompt token, then each decode step */
    double worst;
};

static void make_seqs(struct tseq *s, int32_t vocab, int32_t max_prompt)
{
    uint64_t st = 42;
    for (int32_t i = 0; i < N_SEQ; i++) {
        s[i].n_prompt = 1 + (int32_t)(lcg(&st) % (uint64_t)max_prompt);
        s[i].tokens[0] = 2;
        for (int32_t t = 1; t < s[i].n_prompt + N_DEC; t++)
            s[i].tokens[t] = 4 + (int32_t)(lcg(&st) % (uint64_t)(vocab - 4));
        kv_seq_init(&s[i].kv);
        s[i].n_cached = 0;
        s[i].worst = 0;
    }
}

/* Reference: each sequence alone, prompt in one forward, then N_DEC decode steps. */
static void run_alone(struct model *m, struct kv_pool *pool, struct tseq *s)
{
    const int32_t V = m->cfg.vocab_size;
    struct batch b;
    batch_init(&b);
    for (int32_t i = 0; i < N_SEQ; i++) {
        s[i].ref = xmalloc((size_t)(N_DEC + 1) * (size_t)V * sizeof(float));
        struct batch_item it = {.kv = &s[i].kv, .tokens = s[i].tokens,
                                .n_tok = s[i].n_prompt, .pos0 = 0};
        CHECK(batch_run(&b, &m->be, pool, V, &it, 1) == 0);
        memcpy(s[i].ref, b.logits, (size_t)V * sizeof(float));
        for (int32_t k = 0; k < N_DEC; k++) {
            int32_t p = s[i].n_prompt + k;
            it = (struct batch_item){.kv = &s[i].kv, .tokens = &s[i].tokens[p], .n_tok = 1,
                                     .pos0 = p};
            CHECK(batch_run(&b, &m->be, pool, V, &it, 1) == 0);
            memcpy(s[i].ref + (int64_t)(k + 1) * V, b.logits, (size_t)V * sizeof(float));
        }
        kv_seq_release(&s[i].kv, pool);
    }
    batch_deinit(&b);
}

/* All sequences together: decode tokens first, then prompt chunks of at most
 * `chunk` tokens while the step has room for `budget` tokens. */
static void run_together(struct model *m, struct kv_pool *pool, struct tseq *s,
                         int32_t chunk, int32_t budget)
{
    const int32_t V = m->cfg.vocab_size;
    struct batch b;
    batch_init(&b);
    struct batch_item items[N_SEQ];
    struct tseq *owner[N_SEQ];
    for (;;) {
        int32_t n = 0, room = budget;
        for (int32_t i = 0; i < N_SEQ; i++) {
            struct tseq *q = &s[i];
            int32_t end = q->n_prompt + N_DEC;
            if (q->n_cached >= end) continue;
            int32_t take = q->n_cached < q->n_prompt ? MIN(chunk, q->n_prompt - q->n_cached) : 1;
            if (take > room) continue;
            items[n] = (struct batch_item){.kv = &q->kv, .tokens = q->tokens + q->n_cached,
                                           .n_tok = take, .pos0 = q->n_cached};
            owner[n++] = q;
            room -= take;
        }
        if (n == 0) break;
        CHECK(batch_run(&b, &m->be, pool, V, items, n) == 0);
        for (int32_t i = 0; i < n; i++) {
            struct tseq *q = owner[i];
            q->n_cached += items[i].n_tok;
            if (q->n_cached < q->n_prompt) continue;
            int32_t k = q->n_cached - q->n_prompt; /* 0 = prompt end, then decode steps */
            if (k > N_DEC) continue;
            double d = max_abs_diff(b.logits + (int64_t)items[i].logits_row * V,
                                    q->ref + (int64_t)k * V, V);
            q->worst = d > q->worst ? d : q->worst;
        }
    }
    for (int32_t i = 0; i < N_SEQ; i++) kv_seq_release(&s[i].kv, pool);
    batch_deinit(&b);
}

static void check_invariance(const char *model, int32_t max_prompt, int32_t chunk,
                             int32_t budget)
{
    struct model *m = test_model(model, DTYPE_F32, 256, 16);
    if (!m) {
        TEST_FAIL("cannot load %s", model);
        return;
    }
    struct kv_pool pool;
    kv_pool_init(&pool, 256, 16);
    struct tseq s[N_SEQ];
    make_seqs(s, m->cfg.vocab_size, max_prompt);
    run_alone(m, &pool, s);
    EXPECT_EQ(pool.n_free, pool.n_blocks);
    run_together(m, &pool, s, chunk, budget);
    double worst = 0;
    for (int32_t i = 0; i < N_SEQ; i++) {
        if (!(s[i].worst <= 1e-5))
            TEST_FAIL("%s seq %d (prompt %d): batched logits differ by %g", model, i,
                      s[i].n_prompt, s[i].worst);
        worst = s[i].worst > worst ? s[i].worst : worst;
        free(s[i].ref);
        kv_seq_deinit(&s[i].kv, &pool);
    }
    printf("# %s chunk %d budget %d: worst |batched - alone| = %.3g\n", model, chunk, budget,
           worst);
    EXPECT_EQ(pool.n_free, pool.n_blocks);
    kv_pool_deinit(&pool);
    model_destroy(m);
}

TEST(golden_model_unchunked)
{
    check_invariance("golden/tiny-opt", 40, MAX_PROMPT, 1 << 20);
}

TEST(golden_model_chunked)
{
    check_invariance("golden/tiny-opt", 40, 5, 24);
}

TEST(golden_350m_chunked)
{
    check_invariance("golden/tiny-opt-350m", 40, 7, 32);
}

TEST(dummy_tiny_chunked)
{
    check_invariance("dummy:tiny", MAX_PROMPT, 3, 16);
}

TEST(pool_full_changes_nothing)
{
    /* A batch that does not fit fails with ENG_ENOSPC and leaves tables unchanged. */
    struct model *m = test_model("dummy:tiny", DTYPE_F32, 4, 16);
    CHECK(m);
    struct kv_pool pool;
    kv_pool_init(&pool, 4, 16);
    struct batch b;
    batch_init(&b);
    struct kv_seq a, c;
    kv_seq_init(&a);
    kv_seq_init(&c);
    int32_t toks[64];
    for (int i = 0; i < 64; i++) toks[i] = 4 + i;
    struct batch_item items[2] = {
        {.kv = &a, .tokens = toks, .n_tok = 40, .pos0 = 0},
        {.kv = &c, .tokens = toks, .n_tok = 30, .pos0 = 0},
    };
    EXPECT_EQ(batch_run(&b, &m->be, &pool, m->cfg.vocab_size, items, 2), ENG_ENOSPC);
    EXPECT_EQ(a.n_blocks, 0);
    EXPECT_EQ(c.n_blocks, 0);
    EXPECT_EQ(pool.n_free, 4);
    EXPECT_EQ(batch_run(&b, &m->be, &pool, m->cfg.vocab_size, items, 1), 0);
    EXPECT_EQ(a.n_blocks, 3);
    EXPECT_EQ(a.n_slots, 40);
    kv_seq_deinit(&a, &pool);
    kv_seq_deinit(&c, &pool);
    EXPECT_EQ(pool.n_free, 4);
    batch_deinit(&b);
    kv_pool_deinit(&pool);
    model_destroy(m);
}

/* ---- With H2O budgets: bit for bit, decode steps on either attention path. ---- */

#define NSEQ 8
#define STEPS 40
#define BS 16

struct rseq {
    int32_t tokens[128];
    int32_t P;
    struct kv_budget budget;
    struct kv_seq kv;
    int32_t n_cached, step;
    float *logits; /* [(STEPS + 1) * V] */
};

static void rseq_init(struct rseq *e, int32_t P, int32_t H, int32_t R, uint64_t seed,
                      int32_t V)
{
    memset(e, 0, sizeof *e);
    e->P = P;
    for (int32_t t = 0; t < P + STEPS; t++)
        e->tokens[t] = lcg_range(&seed, 4, V - 1);
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
                items[k++] = (struct batch_item){
                    .kv = &e->kv, .tokens = e->tokens, .n_tok = e->P, .pos0 = 0};
                break;
            }
            owner[k] = e;
            items[k++] = (struct batch_item){.kv = &e->kv,
                                             .tokens = e->tokens + e->n_cached,
                                             .n_tok = prefill ? e->P : 1,
                                             .pos0 = e->n_cached};
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
    const int32_t hr[NSEQ][2] = {{6, 4},  {0, 9},  {20, 20}, {5, 1},
                                 {3, 30}, {12, 5}, {16, 17}, {1, 2}};
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

TEST(batch_independent)
{
    check_batch_independent(DTYPE_F32, false);
}
/* The same with every prompt prefilled alone: only decode steps share a forward. */
TEST(batch_independent_decode_only)
{
    check_batch_independent(DTYPE_F32, true);
}

int main(void)
{
    RUN(golden_model_unchunked);
    RUN(golden_model_chunked);
    RUN(golden_350m_chunked);
    RUN(dummy_tiny_chunked);
    RUN(pool_full_changes_nothing);
    RUN(batch_independent);
    RUN(batch_independent_decode_only);
    return test_done();
}
