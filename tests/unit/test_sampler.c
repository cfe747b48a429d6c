/*
 * test_sampler.c - the sampler (engine/sample/sampler.c) against its specification:
 * greedy and its ties, logit_bias, OpenAI's penalty formula, seeded
 * reproducibility, the sampled distribution against softmax with temperature,
 * logprobs, and NaN / inf inputs. Ends with the time per call on OPT's vocabulary, as
 * TAP comments. The top-k / top-p selection (sampler_select.c) is
 * test_sampler_select.c's; the references both use are tests/lib/sampler_testlib.h.
 */
#include "test.h"

#include "sampler.h"
#include "util.h"

#include "sampler_testlib.h"

#include <float.h>
#include <stdint.h>

#define OPT_VOCAB 50272

/* One scratch for the whole file, as the engine keeps one per thread; it also
 * checks that the scratch survives vocabularies of different sizes. */
static struct sampler_scratch scratch;

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
    sample_freq(&p, base, V, 20000, 3, &scratch, freq);
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
    sample_freq(&p, base, V, 2000, 4, &scratch, freq);
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
    sample_freq(&p, l, V, N, 123, &scratch, got);
    double err = dist_max_diff(want, got, V);
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
        sample_freq(&p, l, V, N, 77 + k, &scratch, got);
        double err = dist_max_diff(want, got, V);
        if (!(err < 0.01)) TEST_FAIL("temperature %g: error %g", temps[k], err);
    }
    double t1[V], t05[V];
    softmax_ref(l, V, 1.0, t1);
    softmax_ref(l, V, 0.5, t05);
    EXPECT(t05[3] > t1[3]); /* the reference itself sharpens the top token */
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
        sample_freq(&p, base, V, N, 40 + (uint64_t)k, &scratch, got);
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
    sample_freq(&p, base, V, 1000, 41, &scratch, got);
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
    sample_freq(&p, base, V, 1000, 42, &scratch, got);

    /* Extreme temperatures stay well defined. */
    random_logits(base, V, 1.0f, 68);
    base[4] = -INFINITY;
    sampler_params_default(&p);
    p.temperature = INFINITY;
    sample_freq(&p, base, V, 1000, 43, &scratch, got);
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
    RUN(same_seed_same_tokens);
    RUN(distribution_matches_softmax);
    RUN(temperature_sharpens);
    RUN(logprobs_are_log_softmax_before_temperature);
    RUN(logprobs_counts_and_bias);
    RUN(nan_and_inf_inputs);
    RUN(vocab_of_one);
    RUN(timing_on_opt_vocab);
    sampler_scratch_deinit(&scratch);
    return test_done();
}
