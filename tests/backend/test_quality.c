/*
 * test_quality.c - bench/quality.c's streaming perplexity against two references:
 * one dense forward of the engine over each whole segment (every row's logits, no
 * cache policy), and tests/lib/h2o_ref.c, the dense masked reference, which
 * with H = 0 is a sliding window: the query at position t sees only the R newest
 * positions (the prompt itself attended in full, as in generation).
 */
#include "test.h"

#include "batch.h"
#include "err.h"
#include "golden.h"
#include "h2o_ref.h"
#include "kv_pool.h"
#include "kv_seq.h"
#include "quality.h"

enum { SEGMENTS = 5 };

static int32_t *random_stream(int64_t n, int32_t vocab, uint64_t seed)
{
    int32_t *t = xmalloc((size_t)n * sizeof *t);
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        t[i] = 4 + (int32_t)((seed >> 33) % (uint64_t)(vocab - 4));
    }
    return t;
}

/* -ln softmax(row)[target], written apart from quality.c's. */
static double nll_of(const float *row, int32_t vocab, int32_t target)
{
    double mx = -INFINITY, sum = 0.0;
    for (int32_t j = 0; j < vocab; j++)
        mx = row[j] > mx ? row[j] : mx;
    for (int32_t j = 0; j < vocab; j++)
        sum += exp(row[j] - mx);
    return -(row[target] - mx - log(sum));
}

static struct quality_result run(struct model *m, const int32_t *s, int64_t n,
                                 const struct quality_spec *q)
{
    struct quality_result r;
    if (quality_run(m, s, n, q, &r)) TEST_FAIL("quality_run: %s", err_msg());
    return r;
}

static void spec(struct quality_spec *q, int32_t P, int32_t G, enum kv_policy pol,
                 int32_t H, int32_t R)
{
    quality_spec_default(q);
    q->prompt_len = P;
    q->gen_len = G;
    q->kv.policy = pol;
    q->kv.heavy = H;
    q->kv.recent = R;
}

/* Perplexity of each segment's last G tokens from one forward over all P + G. */
static double dense_perplexity(struct model *m, const int32_t *s, int32_t P, int32_t G)
{
    const int32_t V = m->cfg.vocab_size, L = P + G;
    struct kv_pool pool;
    kv_pool_init(&pool, CEIL_DIV(L, 16), 16);
    CHECK(m->be.ops->kv_alloc(m->be.ctx, CEIL_DIV(L, 16), 16) == 0);
    struct batch b;
    batch_init(&b);
    double nll = 0.0;
    for (int32_t seg = 0; seg < SEGMENTS; seg++) {
        struct kv_seq kv;
        kv_seq_init(&kv);
        struct batch_item it = {
            .kv = &kv, .tokens = s + seg * L, .n_tok = L, .all_logits = true};
        CHECK(batch_run(&b, &m->be, &pool, V, &it, 1) == 0);
        for (int32_t j = P; j < L; j++)
            nll +=
                nll_of(b.logits + (size_t)(it.logits_row + j - 1) * V, V, s[seg * L + j]);
        kv_seq_deinit(&kv, &pool);
    }
    batch_deinit(&b);
    kv_pool_deinit(&pool);
    return exp(nll / (SEGMENTS * G));
}

/* Perplexity from the dense reference under a policy, teacher-forced. */
static double ref_perplexity(const char *name, const int32_t *s, int32_t P, int32_t G,
                             struct h2o_ref_policy pol)
{
    struct h2o_ref *ref = NULL;
    CHECK(h2o_ref_create(&ref, name) == 0);
    const int32_t V = h2o_ref_vocab(ref), L = P + G;
    float *logits = xmalloc((size_t)G * V * sizeof *logits);
    double nll = 0.0;
    for (int32_t seg = 0; seg < SEGMENTS; seg++) {
        const int32_t *t = s + seg * L;
        CHECK(h2o_ref_run(ref, t, P, pol, G - 1, t + P, NULL, logits, NULL) == 0);
        for (int32_t k = 0; k < G; k++)
            nll += nll_of(logits + (size_t)k * V, V, t[P + k]);
    }
    free(logits);
    h2o_ref_destroy(ref);
    return exp(nll / (SEGMENTS * G));
}

static const char *path_of(const char *name)
{
    return strncmp(name, "dummy:", 6) == 0 ? name : test_data(name);
}

static void check_full_is_dense(const char *name, int32_t P, int32_t G, int32_t batch,
                                int32_t max_batched)
{
    struct model *m = test_model(name, DTYPE_F32, 16, 16);
    CHECK(m);
    const int64_t n = SEGMENTS * (P + G) + 7; /* a partial segment at the end is left out */
    int32_t *s = random_stream(n, m->cfg.vocab_size, 11);
    struct quality_spec q;
    spec(&q, P, G, KV_POLICY_FULL, -1, -1);
    q.batch = batch;
    q.max_batched = max_batched;
    struct quality_result r = run(m, s, n, &q);
    EXPECT_EQ(r.segments, SEGMENTS);
    EXPECT_EQ(r.tokens, SEGMENTS * G);
    const double dense = dense_perplexity(m, s, P, G);
    printf("# %s %d + %d batch %d: streaming %.6f, dense %.6f\n", name, P, G, batch,
           r.perplexity, dense);
    EXPECT_NEAR(r.perplexity / dense, 1.0, 1e-4);
    free(s);
    model_destroy(m);
}

TEST(full_equals_one_dense_forward)
{
    check_full_is_dense("golden/tiny-opt", 24, 40, 16, 2048);
    check_full_is_dense("golden/tiny-opt", 24, 40, 2, 10); /* groups, prompts in chunks */
    check_full_is_dense("dummy:tiny", 40, 90, 3, 64);
}

TEST(h2o_with_a_budget_above_the_length_is_exactly_full)
{
    struct model *m = test_model("golden/tiny-opt", DTYPE_F32, 16, 16);
    CHECK(m);
    const int32_t P = 30, G = 50;
    const int64_t n = SEGMENTS * (P + G);
    int32_t *s = random_stream(n, m->cfg.vocab_size, 5);
    struct quality_spec q;
    spec(&q, P, G, KV_POLICY_FULL, -1, -1);
    const struct quality_result full = run(m, s, n, &q);
    spec(&q, P, G, KV_POLICY_H2O, 50, 40); /* B = 90 > P + G */
    const struct quality_result big = run(m, s, n, &q);
    EXPECT(big.nll == full.nll);
    q.kv.heavy = q.kv.recent = -1; /* ratios 0.5 + 0.5: B = P + G */
    q.kv.heavy_ratio = q.kv.recent_ratio = 0.5f;
    const struct quality_result half = run(m, s, n, &q);
    EXPECT_EQ(half.budget.heavy + half.budget.recent, P + G);
    EXPECT(half.nll == full.nll);
    spec(&q, P, G, KV_POLICY_H2O, 4, 4); /* and a budget that evicts differs */
    EXPECT(run(m, s, n, &q).nll != full.nll);
    free(s);
    model_destroy(m);
}

static void check_against_reference(const char *name, enum kv_policy pol, int32_t H,
                                    int32_t R)
{
    struct model *m = test_model(name, DTYPE_F32, 16, 16);
    CHECK(m);
    const int32_t P = 24, G = 40;
    const int64_t n = SEGMENTS * (P + G);
    int32_t *s = random_stream(n, m->cfg.vocab_size, 3);
    struct quality_spec q;
    spec(&q, P, G, pol, H, R);
    q.max_batched = 20; /* prompts in chunks, several segments per forward */
    const struct quality_result r = run(m, s, n, &q);
    const double want = ref_perplexity(path_of(name), s, P, G,
                                       (struct h2o_ref_policy){.heavy = H, .recent = R});
    const double full =
        ref_perplexity(path_of(name), s, P, G, (struct h2o_ref_policy){.full = true});
    printf("# %s %s H %d R %d: engine %.6f, reference %.6f (full %.6f)\n", name,
           kv_budget_policy_name(pol), r.budget.heavy, r.budget.recent, r.perplexity, want,
           full);
    EXPECT_NEAR(r.perplexity / want, 1.0, 1e-4);
    EXPECT(fabs(want / full - 1.0) > 1e-3); /* the window does change the result */
    free(s);
    model_destroy(m);
}

TEST(local_matches_a_sliding_window_reference)
{
    check_against_reference("golden/tiny-opt", KV_POLICY_LOCAL, 0, 8);
    check_against_reference("dummy:tiny", KV_POLICY_LOCAL, 0, 5);
}

TEST(h2o_matches_the_dense_reference)
{
    check_against_reference("golden/tiny-opt", KV_POLICY_H2O, 6, 6);
}

TEST(bad_input_is_refused)
{
    struct model *m = test_model("golden/tiny-opt", DTYPE_F32, 16, 16);
    CHECK(m);
    int32_t s[200];
    for (int i = 0; i < 200; i++)
        s[i] = 5;
    struct quality_spec q;
    struct quality_result r;
    spec(&q, 64, 100, KV_POLICY_FULL, -1, -1); /* 164 > the model's 128 positions */
    EXPECT_EQ(quality_run(m, s, 200, &q, &r), ENG_EINVAL);
    spec(&q, 30, 30, KV_POLICY_FULL, -1, -1);
    EXPECT_EQ(quality_run(m, s, 59, &q, &r), ENG_EINVAL); /* no whole segment */
    s[10] = m->cfg.vocab_size;
    EXPECT_EQ(quality_run(m, s, 200, &q, &r), ENG_EINVAL);
    s[10] = 5;
    q.gen_len = 0;
    EXPECT_EQ(quality_run(m, s, 200, &q, &r), ENG_EINVAL);
    model_destroy(m);
}

int main(void)
{
    RUN(full_equals_one_dense_forward);
    RUN(h2o_with_a_budget_above_the_length_is_exactly_full);
    RUN(local_matches_a_sliding_window_reference);
    RUN(h2o_matches_the_dense_reference);
    RUN(bad_input_is_refused);
    printf("1..%d\n", test_n_run);
    return test_n_failed ? 1 : 0;
}
