/*
 * test_loadgen_arrivals.c - bench/loadgen's arrival schedule (loadgen_arrivals.c)
 * and its generator (loadgen_rng.c): the gamma sampler has the moments of
 * Gamma(shape, scale) for shapes below, at and above 1, and the schedule is vLLM's:
 * mean gap 1 / rate, gap spread set by the burstiness alone, the last release at
 * exactly n / rate, a function of the seed.
 * Statistical checks use fixed seeds and loose bounds (several standard errors), so
 * they are deterministic; none measures time.
 */
#include <stdint.h>

#include "loadgen_arrivals.h"
#include "loadgen_rng.h"
#include "test.h"

#define N_DRAWS 200000

/* Sample mean and variance of n gamma draws. */
static void gamma_moments(double shape, double scale, uint64_t seed, double *mean,
                          double *var)
{
    uint64_t s = seed;
    double sum = 0, sum2 = 0;
    for (int i = 0; i < N_DRAWS; i++) {
        double x = loadgen_rng_gamma(&s, shape, scale);
        sum += x;
        sum2 += x * x;
    }
    *mean = sum / N_DRAWS;
    *var = sum2 / N_DRAWS - *mean * *mean;
}

TEST(gamma_has_the_moments_of_its_shape_and_scale)
{
    /* Mean k*theta, variance k*theta^2. With 2e5 draws the relative standard error
     * of the mean is 1/sqrt(k * 2e5) (0.3% at k = 0.5) and that of the variance at
     * most about 1.5% (k = 0.2): 3% and 10% are several of them. */
    static const double shapes[] = {0.2, 0.5, 1.0, 2.5, 10.0, 300.0};
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        double k = shapes[i], theta = 0.02, mean, var;
        gamma_moments(k, theta, 42 + i, &mean, &var);
        if (fabs(mean / (k * theta) - 1) > 0.03)
            TEST_FAIL("shape %g: mean %g, expected %g", k, mean, k * theta);
        if (fabs(var / (k * theta * theta) - 1) > 0.10)
            TEST_FAIL("shape %g: variance %g, expected %g", k, var, k * theta * theta);
    }
}

TEST(gamma_draws_are_positive_and_finite)
{
    uint64_t s = 7;
    for (int i = 0; i < N_DRAWS; i++) {
        double x = loadgen_rng_gamma(&s, i % 2 ? 0.7 : 3.0, 1.0);
        if (!(x >= 0) || !isfinite(x)) {
            TEST_FAIL("draw %d is %g", i, x);
            return;
        }
    }
}

TEST(gamma_below_shape_one_is_not_exponential)
{
    /* Shape 0.5 puts more mass near 0 than the exponential of the same mean:
     * P(X < mean / 10) is 0.248 for Gamma(0.5) and 0.095 for Exp. */
    uint64_t s = 11;
    int below = 0;
    for (int i = 0; i < N_DRAWS; i++)
        below += loadgen_rng_gamma(&s, 0.5, 2.0) < 0.1;
    EXPECT_NEAR((double)below / N_DRAWS, 0.248, 0.01);
}

TEST(gamma_refuses_a_shape_or_scale_that_is_not_positive)
{
    uint64_t s = 1;
    EXPECT(isnan(loadgen_rng_gamma(&s, 0, 1)));
    EXPECT(isnan(loadgen_rng_gamma(&s, -1, 1)));
    EXPECT(isnan(loadgen_rng_gamma(&s, NAN, 1)));
    EXPECT(isnan(loadgen_rng_gamma(&s, INFINITY, 1)));
    EXPECT(isnan(loadgen_rng_gamma(&s, 1, 0)));
}

TEST(arrivals_at_an_infinite_rate_are_all_at_zero)
{
    double t[5] = {1, 1, 1, 1, 1};
    uint64_t s = 3;
    loadgen_arrivals_fill(t, 5, INFINITY, 0.5, &s);
    for (int i = 0; i < 5; i++)
        EXPECT_EQ(t[i] == 0, 1);
}

TEST(arrivals_end_at_n_over_rate_and_never_go_back)
{
    /* 1000 requests at 50 req/s, burstiness 0.5: the last one at exactly 20 s. */
    enum { N = 1000 };
    static double t[N];
    uint64_t s = 5;
    loadgen_arrivals_fill(t, N, 50, 0.5, &s);
    EXPECT_NEAR(t[N - 1], 20.0, 1e-9);
    EXPECT(t[0] > 0);
    for (int i = 1; i < N; i++)
        if (t[i] < t[i - 1])
            TEST_FAIL("t[%d] = %g before t[%d] = %g", i, t[i], i - 1, t[i - 1]);
}

/* Squared coefficient of variation of the gaps of an n-request schedule. */
static double gap_cv2(double rate, double burstiness, uint64_t seed)
{
    enum { N = 100000 };
    static double t[N];
    uint64_t s = seed;
    loadgen_arrivals_fill(t, N, rate, burstiness, &s);
    double sum = 0, sum2 = 0;
    for (int i = 0; i < N; i++) {
        double g = t[i] - (i ? t[i - 1] : 0);
        sum += g;
        sum2 += g * g;
    }
    double mean = sum / N;
    EXPECT_NEAR(mean, 1 / rate, 1e-9);  /* exact after the stretch to n / rate */
    return (sum2 / N - mean * mean) / (mean * mean);
}

TEST(the_burstiness_alone_sets_the_spread_of_the_gaps)
{
    /* Gamma(k) gaps have CV^2 = 1/k whatever the rate: 2 at k = 0.5 (bursty), 1 at
     * k = 1 (Poisson), 0.25 at k = 4 (even), 0 at k = inf (constant gaps). */
    EXPECT_NEAR(gap_cv2(50, 0.5, 1), 2.0, 0.1);
    EXPECT_NEAR(gap_cv2(3, 1.0, 2), 1.0, 0.05);
    EXPECT_NEAR(gap_cv2(1000, 4.0, 3), 0.25, 0.0125);
    EXPECT_NEAR(gap_cv2(8, INFINITY, 4), 0.0, 1e-9);
}

TEST(arrivals_are_a_function_of_the_seed)
{
    double a[50], b[50], c[50];
    uint64_t sa = 9, sb = 9, sc = 10;
    loadgen_arrivals_fill(a, 50, 20, 0.8, &sa);
    loadgen_arrivals_fill(b, 50, 20, 0.8, &sb);
    loadgen_arrivals_fill(c, 50, 20, 0.8, &sc);
    EXPECT(memcmp(a, b, sizeof a) == 0);
    EXPECT(memcmp(a, c, sizeof a) != 0);
}

int main(void)
{
    RUN(gamma_has_the_moments_of_its_shape_and_scale);
    RUN(gamma_draws_are_positive_and_finite);
    RUN(gamma_below_shape_one_is_not_exponential);
    RUN(gamma_refuses_a_shape_or_scale_that_is_not_positive);
    RUN(arrivals_at_an_infinite_rate_are_all_at_zero);
    RUN(arrivals_end_at_n_over_rate_and_never_go_back);
    RUN(the_burstiness_alone_sets_the_spread_of_the_gaps);
    RUN(arrivals_are_a_function_of_the_seed);
    return test_done();
}
