/*
 * test_sampler_select.c - the top-k / top-p selection (engine/sample/sampler_select.c)
 * through sampler_sample, against plain references (tests/lib/sampler_testlib.h):
 * nothing outside the top k or the nucleus is ever drawn, what is kept is drawn in the
 * renormalised proportions, top-k then top-p composes, the edge cases reduce to
 * greedy, and the threshold search's edges (nothing to narrow, ties everywhere, a
 * nucleus of nearly everything) stay exact. Large vocabularies exercise the
 * partitioning paths that small ones never reach.
 */
#include "test.h"

#include "sampler.h"
#include "util.h"

#include "sampler_testlib.h"

#include <stdint.h>

/* One scratch for the whole file, as the engine keeps one per thread; it also
 * checks that the scratch survives vocabularies of different sizes. */
static struct sampler_scratch scratch;

TEST(top_k_1_and_tiny_top_p_are_greedy)
{
    enum { V = 5000 };
    static float l[V];
    struct sampler_params pk, pp;
    sampler_params_default(&pk);
    pk.top_k = 1;
    sampler_params_default(&pp);
    pp.top_p = 1e-6f;
    struct rng r;
    struct sample_out out;
    rng_seed(&r, 5);
    for (uint64_t s = 0; s < 20; s++) {
        random_logits(l, V, 2.0f, 500 + s);
        int32_t best = 0;
        for (int32_t i = 1; i < V; i++)
            if (l[i] > l[best]) best = i;
        EXPECT_EQ(sampler_sample(&pk, l, V, NULL, 0, &r, &scratch, &out), best);
        EXPECT_EQ(sampler_sample(&pp, l, V, NULL, 0, &r, &scratch, &out), best);
    }
}

TEST(top_k_keeps_only_top_and_renormalises)
{
    /* top_k = 3 on 8 tokens: nothing outside the top 3, and those three in the
     * proportions of softmax over them alone. */
    enum { V = 8, N = 200000 };
    const float l[V] = {1.0f, 0.0f, -1.0f, 2.0f, 0.5f, -3.0f, 1.5f, 0.25f};
    char mask[V];
    double want[V], got[V];
    struct sampler_params p;
    sampler_params_default(&p);
    p.top_k = 3;
    EXPECT_EQ(nucleus_ref(l, V, 1.0, 3, 1.0, mask, want), 3);
    EXPECT(mask[3] && mask[6] && mask[0]);
    sample_freq(&p, l, V, N, 31, &scratch, got);
    for (int32_t i = 0; i < V; i++)
        if (!mask[i] && got[i] > 0) TEST_FAIL("token %d outside the top 3 drawn", i);
    EXPECT(dist_max_diff(want, got, V) < 0.01);
}

TEST(top_k_large_vocab_matches_reference)
{
    /* top_k = 40 of 3000 with temperature 0.7 exercises the partitioning path: the
     * drawn tokens are exactly within the reference top 40 and match its
     * renormalised distribution. */
    enum { V = 3000, N = 100000 };
    static float l[V];
    static char mask[V];
    static double want[V], got[V];
    random_logits(l, V, 1.0f, 2024);
    struct sampler_params p;
    sampler_params_default(&p);
    p.top_k = 40;
    p.temperature = 0.7f;
    nucleus_ref(l, V, 0.7, 40, 1.0, mask, want);
    sample_freq(&p, l, V, N, 8, &scratch, got);
    int32_t seen = 0;
    for (int32_t i = 0; i < V; i++) {
        if (!mask[i] && got[i] > 0) TEST_FAIL("token %d outside the top 40 drawn", i);
        seen += got[i] > 0;
    }
    EXPECT_EQ(seen, 40);
    EXPECT(dist_max_diff(want, got, V) < 0.01);
}

TEST(top_p_picks_exactly_the_nucleus)
{
    /* Probabilities 0.5, 0.3, 0.15, 0.05: 0.5 + 0.3 = 0.8 < 0.9, so top_p = 0.9
     * keeps the first three (0.95) and draws them as 0.5/0.95, 0.3/0.95, 0.15/0.95. */
    enum { N = 200000 };
    const float l[4] = {logf(0.3f), logf(0.05f), logf(0.5f), logf(0.15f)};
    double got[4];
    struct sampler_params p;
    sampler_params_default(&p);
    p.top_p = 0.9f;
    sample_freq(&p, l, 4, N, 99, &scratch, got);
    EXPECT(got[1] == 0.0);
    EXPECT_NEAR(got[2], 0.5 / 0.95, 0.01);
    EXPECT_NEAR(got[0], 0.3 / 0.95, 0.01);
    EXPECT_NEAR(got[3], 0.15 / 0.95, 0.01);

    /* top_p = 0.79 is reached by the first two (0.8), so they alone are drawn. */
    p.top_p = 0.79f;
    sample_freq(&p, l, 4, 20000, 98, &scratch, got);
    EXPECT(got[1] == 0.0 && got[3] == 0.0);
}

TEST(top_p_large_vocab_matches_reference)
{
    /* Flat-ish random logits, so the nucleus is hundreds of tokens and selection
     * must partition by mass several times; one case at temperature 1.5. Every
     * drawn token is inside the reference nucleus and the frequencies match it. */
    enum { V = 2000, N = 100000 };
    static float l[V];
    static char mask[V];
    static double want[V], got[V];
    const float tps[] = {0.9f, 0.5f, 0.8f};
    const float temps[] = {1.0f, 1.0f, 1.5f};
    for (size_t k = 0; k < ARRAY_LEN(tps); k++) {
        random_logits(l, V, 1.5f, 4242 + k);
        struct sampler_params p;
        sampler_params_default(&p);
        p.top_p = tps[k];
        p.temperature = temps[k];
        int32_t size = nucleus_ref(l, V, temps[k], 0, tps[k], mask, want);
        sample_freq(&p, l, V, N, 17 + k, &scratch, got);
        int32_t outside = 0, seen = 0;
        for (int32_t i = 0; i < V; i++)
            outside += !mask[i] && got[i] > 0, seen += got[i] > 0;
        printf("# top_p %.1f temperature %.1f: nucleus %d of %d tokens, %d drawn\n",
               (double)tps[k], (double)temps[k], size, V, seen);
        EXPECT_EQ(outside, 0);
        EXPECT(dist_max_diff(want, got, V) < 0.01);
    }
}

TEST(threshold_search_edges)
{
    /* The cases where the threshold search cannot narrow the vocabulary and the
     * selection runs on everything. */
    enum { V = 5000, N = 20000 };
    static float l[V];
    static double got[V];
    struct sampler_params p;

    /* Logits 100 apart: the 10th best is 900 below the maximum, far past every
     * distance tried. At temperature 100 the top 10 weigh e^0 .. e^-9. */
    for (int32_t i = 0; i < 200; i++)
        l[i] = -100.0f * (float)i;
    sampler_params_default(&p);
    p.top_k = 10;
    p.temperature = 100.0f;
    sample_freq(&p, l, 200, N, 1, &scratch, got);
    double z = 0.0;
    for (int32_t i = 0; i < 10; i++)
        z += exp(-(double)i);
    for (int32_t i = 0; i < 200; i++) {
        double want = i < 10 ? exp(-(double)i) / z : 0.0;
        if (!(fabs(got[i] - want) < 0.01))
            TEST_FAIL("token %d: %g, want %g", i, got[i], want);
    }

    /* All logits equal: ties go to the lowest ids, so top_k = 100 keeps ids 0..99
     * and top_p = 0.5 keeps ids 0..2499. */
    for (int32_t i = 0; i < V; i++)
        l[i] = 1.0f;
    sampler_params_default(&p);
    p.top_k = 100;
    sample_freq(&p, l, V, N, 2, &scratch, got);
    int32_t bad = 0;
    for (int32_t i = 100; i < V; i++)
        bad += got[i] > 0;
    EXPECT_EQ(bad, 0);
    sampler_params_default(&p);
    p.top_p = 0.5f;
    sample_freq(&p, l, V, N, 3, &scratch, got);
    bad = 0;
    for (int32_t i = 2500; i < V; i++)
        bad += got[i] > 0;
    EXPECT_EQ(bad, 0);
    EXPECT(got[2499] > 0 || got[2498] > 0 || got[2497] > 0);

    /* top_p just below 1: the nucleus is nearly everything, and still exact. */
    static char mask[V];
    static double want[V];
    random_logits(l, V, 1.0f, 77);
    sampler_params_default(&p);
    p.top_p = 0.99999f;
    nucleus_ref(l, V, 1.0, 0, 0.99999, mask, want);
    sample_freq(&p, l, V, N, 4, &scratch, got);
    bad = 0;
    for (int32_t i = 0; i < V; i++)
        bad += !mask[i] && got[i] > 0;
    EXPECT_EQ(bad, 0);
}

TEST(top_k_then_top_p)
{
    /* top_k = 3 leaves 0.5, 0.3, 0.15 (renormalised 0.526, 0.316, 0.158); top_p =
     * 0.8 then keeps the first two (0.842). */
    enum { N = 100000 };
    const float l[5] = {logf(0.5f), logf(0.3f), logf(0.15f), logf(0.04f), logf(0.01f)};
    double got[5];
    struct sampler_params p;
    sampler_params_default(&p);
    p.top_k = 3;
    p.top_p = 0.8f;
    sample_freq(&p, l, 5, N, 5, &scratch, got);
    EXPECT(got[2] == 0.0 && got[3] == 0.0 && got[4] == 0.0);
    EXPECT_NEAR(got[0], 0.5 / 0.8, 0.01);
}

int main(void)
{
    sampler_scratch_init(&scratch);
    RUN(top_k_1_and_tiny_top_p_are_greedy);
    RUN(top_k_keeps_only_top_and_renormalises);
    RUN(top_k_large_vocab_matches_reference);
    RUN(top_p_picks_exactly_the_nucleus);
    RUN(top_p_large_vocab_matches_reference);
    RUN(threshold_search_edges);
    RUN(top_k_then_top_p);
    sampler_scratch_deinit(&scratch);
    return test_done();
}
