/*
 * test_sampler.c - the sampler against its specification: greedy and its ties,
 * logit_bias, OpenAI's penalty formula, seeded reproducibility, the sampled
 * distribution against softmax (with temperature, top-k and top-p), logprobs, and
 * NaN / inf inputs. Ends with the time per call on OPT's vocabulary, as TAP comments.
 */
#include "test.h"

#include "sampler.h"
#include "util.h"

#include <float.h>
#include <stdint.h>

#define OPT_VOCAB 50272

/* One scratch for the whole file, as the engine keeps one per thread; it also
 * checks that the scratch survives vocabularies of different sizes. */
static struct sampler_scratch scratch;

/* A normal variate from the sampler's own generator (Box-Muller), for test logits. */
static float normal(struct rng *r)
{
    double u1 = rng_uniform(r), u2 = rng_uniform(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

static void random_logits(float *l, int32_t n, float scale, uint64_t seed)
{
    struct rng r;
    rng_seed(&r, seed);
    for (int32_t i = 0; i < n; i++)
        l[i] = scale * normal(&r);
}

/* softmax(l / t) in double, the reference every distribution test compares with. */
static void softmax_ref(const float *l, int32_t n, double t, double *p)
{
    double m = -INFINITY, sum = 0.0;
    for (int32_t i = 0; i < n; i++)
        m = fmax(m, l[i]);
    for (int32_t i = 0; i < n; i++)
        sum += (p[i] = exp((l[i] - m) / t));
    for (int32_t i = 0; i < n; i++)
        p[i] /= sum;
}

/* Draw `n` tokens from fresh copies of `logits` and return their frequencies. */
static void sample_freq(const struct sampler_params *p, const float *logits, int32_t vocab,
                        int32_t n, uint64_t seed, double *freq)
{
    float *work = xmalloc((size_t)vocab * sizeof *work);
    int32_t *count = xcalloc((size_t)vocab, sizeof *count);
    struct rng r;
    struct sample_out out;
    rng_seed(&r, seed);
    for (int32_t k = 0; k < n; k++) {
        memcpy(work, logits, (size_t)vocab * sizeof *work);
        int32_t t = sampler_sample(p, work, vocab, NULL, 0, &r, &scratch, &out);
        if (t < 0 || t >= vocab) {
            TEST_FAIL("token %d outside the vocabulary", t);
            break;
        }
        count[t]++;
    }
    /* Counts first, one division last: a token drawn every time has exactly 1. */
    for (int32_t i = 0; i < vocab; i++)
        freq[i] = (double)count[i] / n;
    free(count);
    free(work);
}

static double max_abs_diff(const double *a, const double *b, int32_t n)
{
    double d = 0.0;
    for (int32_t i = 0; i < n; i++)
        d = fmax(d, fabs(a[i] - b[i]));
    return d;
}

/* Ids of `l` ordered best first (larger logit, then lower id), by a plain O(n^2)
 * selection that is obviously right: the reference for top-k and top-p. */
static void rank_ref(const float *l, int32_t n, int32_t *order)
{
    char *used = xcalloc((size_t)n, 1);
    for (int32_t k = 0; k < n; k++) {
        int32_t best = -1;
        for (int32_t i = 0; i < n; i++)
            if (!used[i] && (best < 0 || l[i] > l[best])) best = i;
        used[best] = 1;
        order[k] = best;
    }
    free(used);
}

/* Set mask[i] = 1 for the nucleus of softmax(l / t) at `top_p` (smallest best-first
 * prefix whose mass reaches top_p), restricted to the top `top_k` when top_k > 0,
 * and fill p with the renormalised distribution. Returns the nucleus size. */
static int32_t nucleus_ref(const float *l, int32_t n, double t, int32_t top_k, double top_p,
                           char *mask, double *p)
{
    int32_t *order = xmalloc((size_t)n * sizeof *order);
    double *full = xmalloc((size_t)n * sizeof *full);
    rank_ref(l, n, order);
    softmax_ref(l, n, t, full);
    int32_t kk = top_k > 0 && top_k < n ? top_k : n;
    double mass_k = 0.0;
    for (int32_t k = 0; k < kk; k++)
        mass_k += full[order[k]];
    int32_t cut = 0;
    double acc = 0.0;
    while (cut < kk) {
        acc += full[order[cut]] / mass_k;
        cut++;
        if (acc >= top_p) break;
    }
    double kept = 0.0;
    for (int32_t i = 0; i < n; i++)
        mask[i] = 0, p[i] = 0.0;
    for (int32_t k = 0; k < cut; k++)
        mask[order[k]] = 1, kept += full[order[k]];
    for (int32_t k = 0; k < cut; k++)
        p[order[k]] = full[order[k]] / kept;
    free(order);
    free(full);
    return cut;
}

TEST(defaults_are_openai)
{
    struct sampler_params p;
    sampler_params_default(&p);
    EXPECT(p.temperature == 1.0f);
    EXPECT(p.top_p == 1.0f);
    EXPECT_EQ(p.top_k, 0);
    EXPECT(p.presence_penalty == 0.0f && p.frequency_penalty == 0.0f);
    EXPECT_EQ(p.n_bias, 0);
    EXPECT_EQ(p.n_logprobs, -1);
}

TEST(greedy_is_argmax_and_draws_nothing)
{
    /* Temperature 0 returns the argmax of 20 random vocabularies and leaves the rng
     * untouched, so a greedy step never shifts a seeded sequence's later draws. */
    enum { V = 1000 };
    float l[V];
    struct sampler_params p;
    sampler_params_default(&p);
    p.temperature = 0.0f;
    for (uint64_t s = 0; s < 20; s++) {
        random_logits(l, V, 3.0f, 100 + s);
        int32_t best = 0;
        for (int32_t i = 1; i < V; i++)
            if (l[i] > l[best]) best = i;
        struct rng r, before;
        struct sample_out out;
        rng_seed(&r, s);
        before = r;
        EXPECT_EQ(sampler_sample(&p, l, V, NULL, 0, &r, &scratch, &out), best);
        EXPECT_EQ(out.token, best);
        EXPECT(memcmp(&r, &before, sizeof r) == 0);
    }
}

TEST(greedy_ties_go_to_lowest_id)
{
    float l[6] = {0.5f, 2.0f, -1.0f, 2.0f, 2.0f, 1.0f};
    struct sampler_params p;
    struct rng r;
    struct sample_out out;
    sampler_params_default(&p);
    p.temperature = 0.0f;
    rng_seed(&r, 1);
    EXPECT_EQ(sampler_sample(&p, l, 6, NULL, 0, &r, &scratch, &out), 1);
    /* top_k = 1 breaks the same tie the same way. */
    sampler_params_default(&p);
    p.top_k = 1;
    EXPECT_EQ(sampler_sample(&p, l, 6, NULL, 0, &r, &scratch, &out), 1);
}

TEST(logit_bias_bans_and_forces)
{
    enum { V = 50 };
    float base[V], l[V];
    random_logits(base, V, 2.0f, 7);
    int32_t best = 0;
    for (int32_t i = 1; i < V; i++)
        if (base[i] > base[best]) best = i;

    /* -100 on the argmax: greedy moves elsewhere and sampling never picks it. */
    int32_t ban_id[1] = {best};
    float ban_val[1] = {-100.0f};
    struct sampler_params p;
    sampler_params_default(&p);
    p.bias_ids = ban_id;
    p.bias_vals = ban_val;
    p.n_bias = 1;
    double freq[V];
    sample_freq(&p, base, V, 20000, 3, freq);
    EXPECT(freq[best] == 0.0);
    p.temperature = 0.0f;
    memcpy(l, base, sizeof l);
    struct rng r;
    struct sample_out out;
    rng_seed(&r, 1);
    EXPECT(sampler_sample(&p, l, V, NULL, 0, &r, &scratch, &out) != best);
    EXPECT_NEAR(l[best], base[best] - 100.0f, 1e-4); /* logits come back processed */

    /* +100 on the least likely token: every one of 2000 draws is that token. */
    int32_t worst = 0;
    for (int32_t i = 1; i < V; i++)
        if (base[i] < base[worst]) worst = i;
    int32_t force_id[2] = {worst, V + 5}; /* an id past the vocab is ignored */
    float force_val[2] = {100.0f, 100.0f};
    sampler_params_default(&p);
    p.bias_ids = force_id;
    p.bias_vals = force_val;
    p.n_bias = 2;
    sample_freq(&p, base, V, 2000, 4, freq);
    EXPECT(freq[worst] == 1.0);
}

TEST(penalties_follow_openai_formula)
{
    /* logit[j] -= count[j] * frequency_penalty + (count[j] > 0) * presence_penalty,
     * counts over the generated tokens only; every other logit is untouched. */
    enum { V = 64 };
    float base[V], l[V];
    random_logits(base, V, 1.0f, 11);
    const int32_t gen[] = {5, 9, 5, 40, 5, 9, 63};
    const float pres[] = {0.5f, -1.25f, 2.0f, 0.0f};
    const float freq[] = {0.25f, 0.75f, -2.0f, 1.5f};
    for (size_t k = 0; k < ARRAY_LEN(pres); k++) {
        struct sampler_params p;
        struct rng r;
        struct sample_out out;
        sampler_params_default(&p);
        p.temperature = 0.0f;
        p.presence_penalty = pres[k];
        p.frequency_penalty = freq[k];
        rng_seed(&r, 1);
        memcpy(l, base, sizeof l);
        sampler_sample(&p, l, V, gen, (int32_t)ARRAY_LEN(gen), &r, &scratch, &out);
        for (int32_t j = 0; j < V; j++) {
            int32_t c = 0;
            for (size_t i = 0; i < ARRAY_LEN(gen); i++)
                c += gen[i] == j;
            float want = base[j] - ((float)c * freq[k] + (c > 0 ? pres[k] : 0.0f));
            if (l[j] != want) TEST_FAIL("case %zu token %d: %g, want %g", k, j, l[j], want);
        }
    }
    /* The counts were put back to zero for the next call. */
    for (int32_t j = 0; j < scratch.cap; j++)
        if (scratch.counts[j] != 0) TEST_FAIL("counts[%d] = %d", j, scratch.counts[j]);
}

TEST(penalty_steers_greedy_away_from_repeats)
{
    float l[4] = {3.0f, 2.5f, 0.0f, 0.0f};
    const int32_t gen[] = {0, 0};
    struct sampler_params p;
    struct rng r;
    struct sample_out out;
    sampler_params_default(&p);
    p.temperature = 0.0f;
    p.frequency_penalty = 0.5f; /* 3.0 - 2 * 0.5 = 2.0 < 2.5 */
    rng_seed(&r, 1);
    EXPECT_EQ(sampler_sample(&p, l, 4, gen, 2, &r, &scratch, &out), 1);
}

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

TEST(same_seed_same_tokens)
{
    /* 1000 draws at temperature 1 with top_p 0.95: seed 42 twice gives the same
     * sequence, seed 43 a different one. Interleaving a second sequence's rng in
     * between changes nothing, as each sequence owns its generator. */
    enum { V = 300, N = 1000 };
    float l[V];
    random_logits(l, V, 1.0f, 9);
    struct sampler_params p;
    sampler_params_default(&p);
    p.top_p = 0.95f;
    static int32_t a[N], b[N], c[N];
    struct rng ra, rb, rc, other;
    struct sample_out out;
    rng_seed(&ra, 42);
    rng_seed(&rb, 42);
    rng_seed(&rc, 43);
    rng_seed(&other, 7);
    for (int32_t i = 0; i < N; i++) {
        a[i] = sampler_sample(&p, l, V, NULL, 0, &ra, &scratch, &out);
        sampler_sample(&p, l, V, NULL, 0, &other, &scratch, &out);
        b[i] = sampler_sample(&p, l, V, NULL, 0, &rb, &scratch, &out);
        c[i] = sampler_sample(&p, l, V, NULL, 0, &rc, &scratch, &out);
    }
    int32_t same_ab = 0, same_ac = 0;
    for (int32_t i = 0; i < N; i++)
        same_ab += a[i] == b[i], same_ac += a[i] == c[i];
    EXPECT_EQ(same_ab, N);
    EXPECT(same_ac < N / 2); /* chance agreement is a few percent */

    /* Seeds 0, 1, 2 start unrelated streams (splitmix64 expansion). */
    struct rng s0, s1;
    rng_seed(&s0, 0);
    rng_seed(&s1, 1);
    EXPECT(rng_next(&s0) != rng_next(&s1));
}

TEST(distribution_matches_softmax)
{
    /* 200k draws at temperature 1 on 8 tokens; the largest error of any frequency
     * is below 0.01 (one standard error is about 0.001). */
    enum { V = 8, N = 200000 };
    const float l[V] = {1.0f, 0.0f, -1.0f, 2.0f, 0.5f, -3.0f, 1.5f, 0.25f};
    double want[V], got[V];
    struct sampler_params p;
    sampler_params_default(&p);
    softmax_ref(l, V, 1.0, want);
    sample_freq(&p, l, V, N, 123, got);
    double err = max_abs_diff(want, got, V);
    printf("# temperature 1: max |freq - softmax| = %.5f\n", err);
    EXPECT(err < 0.01);
}

TEST(temperature_sharpens)
{
    /* Temperature 0.5 samples softmax(2 * logits): sharper than temperature 1, and
     * temperature 2 flatter. */
    enum { V = 8, N = 200000 };
    const float l[V] = {1.0f, 0.0f, -1.0f, 2.0f, 0.5f, -3.0f, 1.5f, 0.25f};
    const float temps[] = {0.5f, 2.0f};
    for (size_t k = 0; k < ARRAY_LEN(temps); k++) {
        double want[V], got[V];
        struct sampler_params p;
        sampler_params_default(&p);
        p.temperature = temps[k];
        softmax_ref(l, V, temps[k], want);
        sample_freq(&p, l, V, N, 77 + k, got);
        double err = max_abs_diff(want, got, V);
        if (!(err < 0.01)) TEST_FAIL("temperature %g: error %g", temps[k], err);
    }
    double t1[V], t05[V];
    softmax_ref(l, V, 1.0, t1);
    softmax_ref(l, V, 0.5, t05);
    EXPECT(t05[3] > t1[3]); /* the reference itself sharpens the top token */
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
    sample_freq(&p, l, V, N, 31, got);
    for (int32_t i = 0; i < V; i++)
        if (!mask[i] && got[i] > 0) TEST_FAIL("token %d outside the top 3 drawn", i);
    EXPECT(max_abs_diff(want, got, V) < 0.01);
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
    sample_freq(&p, l, V, N, 8, got);
    int32_t seen = 0;
    for (int32_t i = 0; i < V; i++) {
        if (!mask[i] && got[i] > 0) TEST_FAIL("token %d outside the top 40 drawn", i);
        seen += got[i] > 0;
    }
    EXPECT_EQ(seen, 40);
    EXPECT(max_abs_diff(want, got, V) < 0.01);
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
    sample_freq(&p, l, 4, N, 99, got);
    EXPECT(got[1] == 0.0);
    EXPECT_NEAR(got[2], 0.5 / 0.95, 0.01);
    EXPECT_NEAR(got[0], 0.3 / 0.95, 0.01);
    EXPECT_NEAR(got[3], 0.15 / 0.95, 0.01);

    /* top_p = 0.79 is reached by the first two (0.8), so they alone are drawn. */
    p.top_p = 0.79f;
    sample_freq(&p, l, 4, 20000, 98, got);
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
        sample_freq(&p, l, V, N, 17 + k, got);
        int32_t outside = 0, seen = 0;
        for (int32_t i = 0; i < V; i++)
            outside += !mask[i] && got[i] > 0, seen += got[i] > 0;
        printf("# top_p %.1f temperature %.1f: nucleus %d of %d tokens, %d drawn\n",
               (double)tps[k], (double)temps[k], size, V, seen);
        EXPECT_EQ(outside, 0);
        EXPECT(max_abs_diff(want, got, V) < 0.01);
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
    sample_freq(&p, l, 200, N, 1, got);
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
    sample_freq(&p, l, V, N, 2, got);
    int32_t bad = 0;
    for (int32_t i = 100; i < V; i++)
        bad += got[i] > 0;
    EXPECT_EQ(bad, 0);
    sampler_params_default(&p);
    p.top_p = 0.5f;
    sample_freq(&p, l, V, N, 3, got);
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
    sample_freq(&p, l, V, N, 4, got);
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
    sample_freq(&p, l, 5, N, 5, got);
    EXPECT(got[2] == 0.0 && got[3] == 0.0 && got[4] == 0.0);
    EXPECT_NEAR(got[0], 0.5 / 0.8, 0.01);
}

TEST(logprobs_are_log_softmax_before_temperature)
{
    enum { V = 1000 };
    static float base[V], l[V];
    static double ref[V];
    random_logits(base, V, 2.0f, 555);
    softmax_ref(base, V, 1.0, ref);
    int32_t order[5];
    {
        static int32_t all[V];
        rank_ref(base, V, all);
        memcpy(order, all, sizeof order);
    }
    /* Greedy, plain sampling, low temperature with top-k and top-p: the chosen
     * token's logprob and the top 5 are those of softmax at temperature 1. */
    const float temps[] = {0.0f, 1.0f, 0.3f};
    for (size_t k = 0; k < ARRAY_LEN(temps); k++) {
        struct sampler_params p;
        struct rng r;
        struct sample_out out;
        sampler_params_default(&p);
        p.temperature = temps[k];
        p.n_logprobs = 5;
        if (k == 2) p.top_k = 50, p.top_p = 0.9f;
        rng_seed(&r, 3 + k);
        memcpy(l, base, sizeof l);
        int32_t t = sampler_sample(&p, l, V, NULL, 0, &r, &scratch, &out);
        EXPECT_NEAR(out.logprob, log(ref[t]), 1e-4);
        EXPECT_EQ(out.n_top, 5);
        for (int32_t i = 0; i < out.n_top; i++) {
            EXPECT_EQ(out.top_ids[i], order[i]);
            EXPECT_NEAR(out.top_logprobs[i], log(ref[order[i]]), 1e-4);
            if (i > 0) EXPECT(out.top_logprobs[i] <= out.top_logprobs[i - 1]);
        }
    }
}

TEST(logprobs_counts_and_bias)
{
    float l[6] = {1.0f, 3.0f, 2.0f, 3.0f, -1.0f, 0.0f};
    struct sampler_params p;
    struct rng r;
    struct sample_out out;
    rng_seed(&r, 1);

    /* n_logprobs 0: the chosen token's logprob, no alternatives. */
    sampler_params_default(&p);
    p.temperature = 0.0f;
    p.n_logprobs = 0;
    double ref[6];
    softmax_ref(l, 6, 1.0, ref);
    EXPECT_EQ(sampler_sample(&p, l, 6, NULL, 0, &r, &scratch, &out), 1);
    EXPECT_NEAR(out.logprob, log(ref[1]), 1e-5);
    EXPECT_EQ(out.n_top, 0);

    /* n_logprobs -1: nothing computed. */
    p.n_logprobs = -1;
    sampler_sample(&p, l, 6, NULL, 0, &r, &scratch, &out);
    EXPECT(out.logprob == 0.0f);
    EXPECT_EQ(out.n_top, 0);

    /* Ties in the top list go to the lower id; the list reflects logit_bias. */
    int32_t ids[1] = {5};
    float vals[1] = {2.5f}; /* token 5: 0 -> 2.5, between 3 and 2 */
    p.n_logprobs = 4;
    p.bias_ids = ids;
    p.bias_vals = vals;
    p.n_bias = 1;
    sampler_sample(&p, l, 6, NULL, 0, &r, &scratch, &out);
    const float biased[6] = {1.0f, 3.0f, 2.0f, 3.0f, -1.0f, 2.5f};
    softmax_ref(biased, 6, 1.0, ref);
    EXPECT_EQ(out.n_top, 4);
    EXPECT_EQ(out.top_ids[0], 1);
    EXPECT_EQ(out.top_ids[1], 3);
    EXPECT_EQ(out.top_ids[2], 5);
    EXPECT_EQ(out.top_ids[3], 2);
    EXPECT_NEAR(out.top_logprobs[2], log(ref[5]), 1e-5);

    /* More alternatives asked than tokens exist. */
    float two[2] = {0.0f, 1.0f};
    sampler_params_default(&p);
    p.n_logprobs = 5;
    sampler_sample(&p, two, 2, NULL, 0, &r, &scratch, &out);
    EXPECT_EQ(out.n_top, 2);
    EXPECT_EQ(out.top_ids[0], 1);
}

TEST(nan_and_inf_inputs)
{
    enum { V = 16, N = 20000 };
    float base[V], l[V];
    double got[V];
    struct sampler_params p;
    struct rng r;
    struct sample_out out;
    rng_seed(&r, 2);

    /* NaN and -inf tokens are never drawn; logprobs stay finite and skip them. */
    random_logits(base, V, 1.0f, 66);
    base[2] = NAN;
    base[7] = -INFINITY;
    base[11] = NAN;
    sampler_params_default(&p);
    p.n_logprobs = 5;
    p.top_k = 14;
    for (int32_t k = 0; k < 3; k++) {
        if (k == 1) p.top_k = 0, p.top_p = 0.99f;
        if (k == 2) p.top_p = 1.0f;
        sample_freq(&p, base, V, N, 40 + (uint64_t)k, got);
        EXPECT(got[2] == 0.0 && got[7] == 0.0 && got[11] == 0.0);
    }
    memcpy(l, base, sizeof l);
    int32_t t = sampler_sample(&p, l, V, NULL, 0, &r, &scratch, &out);
    EXPECT(isfinite(out.logprob));
    EXPECT(t != 2 && t != 7 && t != 11);
    for (int32_t i = 0; i < out.n_top; i++) {
        EXPECT(isfinite(out.top_logprobs[i]));
        EXPECT(out.top_ids[i] != 2 && out.top_ids[i] != 7 && out.top_ids[i] != 11);
    }
    EXPECT(isinf(l[2]) && l[2] < 0); /* NaN came back as -inf */

    /* A +inf logit takes all the mass, also when sampled. */
    random_logits(base, V, 1.0f, 67);
    base[9] = INFINITY;
    sampler_params_default(&p);
    p.n_logprobs = 1;
    sample_freq(&p, base, V, 1000, 41, got);
    EXPECT(got[9] == 1.0);
    memcpy(l, base, sizeof l);
    sampler_sample(&p, l, V, NULL, 0, &r, &scratch, &out);
    EXPECT_NEAR(out.logprob, 0.0, 1e-6);

    /* Everything NaN or -inf: uniform, so greedy says 0 with logprob -log(V) and
     * sampling still returns a valid token. */
    for (int32_t i = 0; i < V; i++)
        base[i] = i % 2 ? NAN : -INFINITY;
    sampler_params_default(&p);
    p.temperature = 0.0f;
    p.n_logprobs = 2;
    memcpy(l, base, sizeof l);
    EXPECT_EQ(sampler_sample(&p, l, V, NULL, 0, &r, &scratch, &out), 0);
    EXPECT_NEAR(out.logprob, -log((double)V), 1e-5);
    EXPECT_EQ(out.n_top, 2);
    p.temperature = 1.0f;
    p.top_p = 0.5f;
    sample_freq(&p, base, V, 1000, 42, got);

    /* Extreme temperatures stay well defined. */
    random_logits(base, V, 1.0f, 68);
    base[4] = -INFINITY;
    sampler_params_default(&p);
    p.temperature = INFINITY;
    sample_freq(&p, base, V, 1000, 43, got);
    EXPECT(got[4] == 0.0);
    p.temperature = 1e-7f; /* below the greedy threshold */
    memcpy(l, base, sizeof l);
    int32_t best = 0;
    for (int32_t i = 1; i < V; i++)
        if (base[i] > base[best]) best = i;
    EXPECT_EQ(sampler_sample(&p, l, V, NULL, 0, &r, &scratch, &out), best);
}

TEST(vocab_of_one)
{
    float l[1] = {NAN};
    struct sampler_params p;
    struct rng r;
    struct sample_out out;
    sampler_params_default(&p);
    p.top_p = 0.5f;
    p.top_k = 3;
    p.n_logprobs = 5;
    rng_seed(&r, 1);
    EXPECT_EQ(sampler_sample(&p, l, 1, NULL, 0, &r, &scratch, &out), 0);
    EXPECT_NEAR(out.logprob, 0.0, 1e-7);
    EXPECT_EQ(out.n_top, 1);
}

/* Time one configuration on OPT's vocabulary. Without bias or penalties a call
 * leaves the logits as they were, so the same buffer serves every call. */
static double time_per_call(const struct sampler_params *p, float *l, int32_t n_calls)
{
    struct rng r;
    struct sample_out out;
    rng_seed(&r, 1);
    int64_t sink = 0;
    double t0 = time_now();
    for (int32_t i = 0; i < n_calls; i++)
        sink += sampler_sample(p, l, OPT_VOCAB, NULL, 0, &r, &scratch, &out);
    double dt = (time_now() - t0) / n_calls;
    if (sink < 0) printf("#\n");
    return dt;
}

TEST(timing_on_opt_vocab)
{
    /* Logits spread like a language model's (a few units), 50272 tokens. The
     * numbers are comments for the reader, not assertions: machines differ. */
    float *l = xmalloc(OPT_VOCAB * sizeof *l);
    random_logits(l, OPT_VOCAB, 3.0f, 31337);
    struct sampler_params p;
    const int32_t n = 300;

    sampler_params_default(&p);
    p.temperature = 0.0f;
    double greedy = time_per_call(&p, l, n);
    p.n_logprobs = 5;
    double greedy_lp = time_per_call(&p, l, n);
    sampler_params_default(&p);
    double plain = time_per_call(&p, l, n);
    p.top_p = 0.9f;
    double top_p = time_per_call(&p, l, n);
    p.n_logprobs = 5;
    double top_p_lp = time_per_call(&p, l, n);
    sampler_params_default(&p);
    p.top_k = 50;
    double top_k = time_per_call(&p, l, n);

    printf("# vocab %d, per call: greedy %.1f us, greedy+logprobs(5) %.1f us,\n", OPT_VOCAB,
           greedy * 1e6, greedy_lp * 1e6);
    printf("#   temperature 1 %.1f us, top_p 0.9 %.1f us, top_p 0.9+logprobs(5) %.1f us,"
           " top_k 50 %.1f us\n",
           plain * 1e6, top_p * 1e6, top_p_lp * 1e6, top_k * 1e6);
    printf("#   256 sequences at top_p 0.9: %.2f ms per step on one core\n",
           256 * top_p * 1e3);
    free(l);
}

int main(void)
{
    sampler_scratch_init(&scratch);
    RUN(defaults_are_openai);
    RUN(greedy_is_argmax_and_draws_nothing);
    RUN(greedy_ties_go_to_lowest_id);
    RUN(logit_bias_bans_and_forces);
    RUN(penalties_follow_openai_formula);
    RUN(penalty_steers_greedy_away_from_repeats);
    RUN(top_k_1_and_tiny_top_p_are_greedy);
    RUN(same_seed_same_tokens);
    RUN(distribution_matches_softmax);
    RUN(temperature_sharpens);
    RUN(top_k_keeps_only_top_and_renormalises);
    RUN(top_k_large_vocab_matches_reference);
    RUN(top_p_picks_exactly_the_nucleus);
    RUN(top_p_large_vocab_matches_reference);
    RUN(threshold_search_edges);
    RUN(top_k_then_top_p);
    RUN(logprobs_are_log_softmax_before_temperature);
    RUN(logprobs_counts_and_bias);
    RUN(nan_and_inf_inputs);
    RUN(vocab_of_one);
    RUN(timing_on_opt_vocab);
    sampler_scratch_deinit(&scratch);
    return test_done();
}
