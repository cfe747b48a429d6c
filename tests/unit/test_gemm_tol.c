/*
 * test_gemm_tol.c - the tolerances of tests/gpu/test_cuda_gemm.c (tests/lib/gemm_tol.h)
 * against a simulated device on that test's own data, in CI, where no GPU is.
 *
 * The replay. test_cuda_gemm draws every shape's x [m, k], w [n, k] and bias [n]
 * from one xorshift64* stream (gpu_rnd.h), shape after shape in the order its main
 * runs them: OPT-125m's projections, OPT-125m's LM head without a bias, the fp32 LM
 * heads, OPT-6.7B's projections, the odd shapes. This test walks the same list in
 * the same order from the same seed, so it sees the GPU test's numbers exactly; it
 * checks the rows the GPU test checks (all of them, or 16 spread over m) and skips
 * the draws it does not need with gpu_rnd_skip. OPT-125m's projections and the odd
 * shapes are checked on every column, like the GPU test (281,573 outputs in all);
 * the LM heads and OPT-6.7B's projections (7e9 multiply-adds on the GPU test's rows,
 * minutes here) only on 128 columns spread over n (the first, the last and 126
 * between), so that the whole test takes a few seconds on 2 cores.
 *
 * The simulated devices. Each output's k products (exact in fp32) are summed six
 * ways before the GEMM's fp16 store: exactly (the fp32 value nearest the exact sum:
 * a perfect GEMM), in fp32 forward, backward and pairwise, as a tensor core does it
 * (chunks of 16 products added exactly to an fp32 accumulator that is truncated,
 * not rounded, after each chunk, over 4 split-K slices added in fp32; Fasi et al.,
 * "Numerical behavior of NVIDIA tensor cores", 2021), and forward with every addition
 * truncated (the most biased fp32 sum there is). Then, as cuda_gemm_linear does:
 * rounded to fp16, the bias added in fp32, ReLU in fp32, rounded to fp16 again. A
 * seventh device, an fp16 accumulator, is the negative control.
 *
 * The checks. Every output of every device within gemm_tol_f16 (gemm_tol_f32 for
 * the fp32 path) of the exact act(s + b); and the tolerance the GPU test had before,
 * ulp16(r) + 2^-16 sum |x w|, shown wrong: a perfect GEMM misses it on 656 of the
 * 255,744 OPT-125m outputs and on 2 of the 114 of the 3 x 38 x 29 bias + ReLU case,
 * where the bias cancels a product sum whose fp16 rounding is larger than the
 * result's own ulp. The GPU test then fails on a correct device; these counts pin
 * the replay to its data too (a change there changes them). And the bound is not
 * vacuous: the fp16 accumulator falls outside it on most outputs.
 *
 * Thread: main, plus an OpenMP loop over output columns.
 */
#include "test.h"

#include "gemm_tol.h"
#include "gpu_rnd.h"

#include "dtype.h"
#include "util.h"

#include <stdbool.h>
#include <stdint.h>

/* The ways the simulated device sums the products. */
enum {
    DEV_EXACT,
    DEV_FWD,
    DEV_REV,
    DEV_PAIR,
    DEV_MMA,
    DEV_TRUNC,
    N_DEV,
    DEV_F16ACC = N_DEV,
    N_ALL
};
static const char *const dev_names[N_DEV] = {"exact",    "forward",     "reverse",
                                             "pairwise", "tensor-core", "truncating"};

/* One shape of test_cuda_gemm, in its order. */

/* What one shape's replay found, per device. */
struct tally {
    int64_t n_out;
    int64_t miss[N_ALL];     /* outside the new tolerance */
    int64_t miss_old[N_DEV]; /* outside the old one */
    double worst[N_DEV];     /* largest error / new tolerance */
    double worst_acc[N_DEV]; /* largest |a - s| / gemm_tol_acc */
};

/* One output column's accumulators, per device, and its exact sum and magnitude. */
struct out {
    float a[N_ALL];
    double s, mag;
};

static const uint64_t seed = GEMM_TEST_SEED;

/* gpu_rnd_skip's powers of the step, made once in main. */
static struct gpu_rnd_jump jump;

/* Round d toward zero to fp32 (a truncating accumulator). */
static float rz32(double d)
{
    float f = (float)d;
    if (fabs((double)f) > fabs(d)) { /* rounded away from zero: one step back */
        uint32_t u;
        memcpy(&u, &f, 4);
        u--;
        memcpy(&f, &u, 4);
    }
    return f;
}

/* The fp32 accumulator a of each device for products p [k] (exact in fp32). `tmp`
 * holds k floats. */
static void sums(const float *p, int32_t k, float *tmp, float a[N_ALL], double *s_out,
                 double *mag_out)
{
    double s = 0, mag = 0;
    float fwd = 0, trunc = 0, f16acc = 0;
    for (int32_t j = 0; j < k; j++) {
        f16acc = f16_to_f32(f32_to_f16(f16acc + p[j]));
        s += p[j];
        mag += fabs((double)p[j]);
        fwd += p[j];
        trunc = rz32((double)trunc + p[j]);
    }
    float rev = 0;
    for (int32_t j = k - 1; j >= 0; j--)
        rev += p[j];
    /* Pairwise: adjacent pairs, level by level (an odd last element moves up). */
    for (int32_t j = 0; j < k; j++)
        tmp[j] = p[j];
    for (int32_t n = k; n > 1; n = (n + 1) / 2) {
        for (int32_t j = 0; j < n / 2; j++)
            tmp[j] = tmp[2 * j] + tmp[2 * j + 1];
        if (n % 2) tmp[n / 2] = tmp[n - 1];
    }
    /* Tensor core: 4 split-K slices, each chunks of 16 exact products into a
     * truncating fp32 accumulator; the slices' sums added in fp32. */
    float mma = 0;
    const int32_t slice = CEIL_DIV(k, 4);
    for (int32_t j0 = 0; j0 < k; j0 += slice) {
        float acc = 0;
        const int32_t j1 = MIN(k, j0 + slice);
        for (int32_t c = j0; c < j1; c += 16) {
            double chunk = acc;
            for (int32_t j = c; j < MIN(j1, c + 16); j++)
                chunk += p[j];
            acc = rz32(chunk);
        }
        mma += acc;
    }
    a[DEV_EXACT] = (float)s;
    a[DEV_FWD] = fwd;
    a[DEV_REV] = rev;
    a[DEV_PAIR] = tmp[0];
    a[DEV_MMA] = mma;
    a[DEV_TRUNC] = trunc;
    a[DEV_F16ACC] = f16acc;
    *s_out = s;
    *mag_out = mag;
}

/* The tolerance test_cuda_gemm had (with r = act(s + b)): one fp16 ulp of r, plus
 * 2^-16 of the magnitude; for the fp32 path 2^-16 of it plus 1e-6. */
static double old_tol(double r, double mag, bool f32)
{
    return f32 ? ldexp(mag, -16) + 1e-6 : gemm_tol_ulp16(r) + ldexp(mag, -16);
}

/* Draw n fp16 values as gpu_rnd_f16 would, into out. */
static void draw_f16(uint64_t *st, uint16_t *out, int64_t n, float lo, float hi)
{
    for (int64_t i = 0; i < n; i++)
        out[i] = f32_to_f16(gpu_rnd_uniform(st, lo, hi));
}

/* Rows idx [n_idx] (ascending) of a [rows, k] matrix drawn from *st as gpu_rnd_f16
 * draws the whole of it, into out [n_idx, k]; *st ends where the whole draw ends. */
static void draw_rows(uint64_t *st, uint16_t *out, int64_t rows, int32_t k,
                      const int32_t *idx, int32_t n_idx, float lo, float hi)
{
    int64_t at = 0; /* draws consumed */
    for (int32_t i = 0; i < n_idx; i++) {
        gpu_rnd_skip(&jump, st, (uint64_t)((int64_t)idx[i] * k - at));
        draw_f16(st, out + (int64_t)i * k, k, lo, hi);
        at = ((int64_t)idx[i] + 1) * k;
    }
    gpu_rnd_skip(&jump, st, (uint64_t)(rows * k - at));
}

/* Replay one shape from *st, tallying into t. Columns: every one, or `max_cols`
 * spread over n. */
static void replay(uint64_t *st, const struct gemm_case *sh, int32_t max_cols, struct tally *t)
{
    const int32_t m = sh->m, n = sh->n, k = sh->k;
    const float ws = 1.0f / sqrtf((float)k); /* as test_cuda_gemm */
    int32_t *rows = xmalloc((size_t)m * sizeof *rows);
    const int32_t n_rows = gemm_check_rows(m, n, k, rows);
    const int32_t n_cols = MIN(n, max_cols);
    int32_t *cols = xmalloc((size_t)n_cols * sizeof *cols);
    for (int32_t i = 0; i < n_cols; i++)
        cols[i] = n_cols == n ? i : (int32_t)((int64_t)i * (n - 1) / (n_cols - 1));
    uint16_t *x = xmalloc((size_t)n_rows * (size_t)k * sizeof *x);
    uint16_t *w = xmalloc((size_t)n_cols * (size_t)k * sizeof *w);
    uint16_t *b = xmalloc((size_t)n * sizeof *b);
    /* check_shape's draws: x, w, then the bias. */
    draw_rows(st, x, m, k, rows, n_rows, -1.0f, 1.0f);
    draw_rows(st, w, n, k, cols, n_cols, -ws, ws);
    if (sh->bias) draw_f16(st, b, n, -0.5f, 0.5f);

    float *wf = xmalloc((size_t)n_cols * (size_t)k * sizeof *wf);
    for (int64_t i = 0; i < (int64_t)n_cols * k; i++)
        wf[i] = f16_to_f32(w[i]);
    float *xf = xmalloc((size_t)k * sizeof *xf);
    struct out *o = xmalloc((size_t)n_cols * sizeof *o);
    for (int32_t ri = 0; ri < n_rows; ri++) {
        for (int32_t j = 0; j < k; j++)
            xf[j] = f16_to_f32(x[(int64_t)ri * k + j]);
            /* The simulated devices, one output column per iteration. */
#pragma omp parallel
        {
            float *p = xmalloc((size_t)k * sizeof *p),
                  *tmp = xmalloc((size_t)k * sizeof *tmp);
#pragma omp for schedule(dynamic, 16)
            for (int32_t ci = 0; ci < n_cols; ci++) {
                const float *wr = wf + (int64_t)ci * k;
                for (int32_t j = 0; j < k; j++)
                    p[j] = xf[j] * wr[j]; /* exact */
                sums(p, k, tmp, o[ci].a, &o[ci].s, &o[ci].mag);
            }
            free(p);
            free(tmp);
        }
        for (int32_t ci = 0; ci < n_cols; ci++) {
            const double s = o[ci].s, mag = o[ci].mag;
            const float bf = sh->bias ? f16_to_f32(b[cols[ci]]) : 0.0f;
            double r = s + bf;
            if (sh->relu && r < 0) r = 0;
            const double tol =
                sh->f32 ? gemm_tol_f32(mag, k) : gemm_tol_f16(s, bf, mag, k, sh->bias);
            const double tol0 = old_tol(r, mag, sh->f32);
            const double acc_tol = gemm_tol_acc(mag, k);
            t->n_out++;
            for (int d = 0; d < N_ALL; d++) {
                const float a = o[ci].a[d];
                double got = a;
                if (!sh->f32) {
                    const uint16_t h = f32_to_f16(a); /* cuBLAS's fp16 store */
                    uint16_t y = h;
                    if (sh->bias) { /* cuda_bias_relu */
                        float v = f16_to_f32(h) + bf;
                        if (sh->relu) v = fmaxf(v, 0.0f);
                        y = f32_to_f16(v);
                    }
                    got = f16_to_f32(y);
                }
                const double e = fabs(got - r);
                if (d == DEV_F16ACC) {
                    t->miss[d] += !(e <= tol);
                    continue;
                }
                if (!(e <= tol) && t->miss[d]++ < 3)
                    TEST_FAIL("%s %s m=%d n=%d k=%d y[%d, %d] = %.8g, exact %.8g, tol %.3g",
                              dev_names[d], sh->group, m, n, k, rows[ri], cols[ci], got, r,
                              tol);
                if (!(e <= tol0)) t->miss_old[d]++;
                t->worst[d] = MAX(t->worst[d], e / tol);
                if (acc_tol > 0)
                    t->worst_acc[d] = MAX(t->worst_acc[d], fabs((double)a - s) / acc_tol);
            }
        }
    }
    free(xf), free(wf), free(o), free(x), free(w), free(b), free(rows), free(cols);
}

TEST(the_generator_skips_exactly)
{
    /* gpu_rnd_skip(n) then a draw is the (n + 1)th draw. */
    const uint64_t ns[] = {0, 1, 2, 63, 64, 1000, 12345};
    for (size_t i = 0; i < ARRAY_LEN(ns); i++) {
        uint64_t a = seed, b = seed;
        for (uint64_t j = 0; j < ns[i]; j++)
            gpu_rnd_uniform(&a, 0, 1);
        gpu_rnd_skip(&jump, &b, ns[i]);
        EXPECT(a == b);
        EXPECT(gpu_rnd_uniform(&a, -1, 1) == gpu_rnd_uniform(&b, -1, 1));
    }
    /* Skipping in parts is skipping the sum. */
    uint64_t a = seed, b = seed;
    gpu_rnd_skip(&jump, &a, (uint64_t)1 << 40);
    gpu_rnd_skip(&jump, &b, (uint64_t)1 << 39);
    gpu_rnd_skip(&jump, &b, (uint64_t)1 << 39);
    EXPECT(a == b);
}

TEST(the_bound_at_the_edges_of_fp16)
{
    /* The spacing: 2^-24 through the subnormals, 2^-10 at 1, 32 at the top. */
    EXPECT(gemm_tol_ulp16(0.0) == 0x1p-24);
    EXPECT(gemm_tol_ulp16(0x1p-20) == 0x1p-24);
    EXPECT(gemm_tol_ulp16(0x1p-14) == 0x1p-24);
    EXPECT(gemm_tol_ulp16(1.0) == 0x1p-10);
    EXPECT(gemm_tol_ulp16(-1.999) == 0x1p-10);
    EXPECT(gemm_tol_ulp16(65504.0) == 32.0);
    /* Nothing to accumulate (mag 0): only the roundings, half a subnormal step each
     * at zero (and 2^-24 of that for the bias add's fp32 rounding). */
    EXPECT(gemm_tol_f16(0, 0, 0, 768, false) == 0x1p-25);
    EXPECT(gemm_tol_f16(0, 0, 0, 768, true) >= 0x1p-24);
    EXPECT(gemm_tol_f16(0, 0, 0, 768, true) <= 0x1p-24 * 1.001);
    /* The first rounding is at the scale of the sum, not of the cancelled result. */
    EXPECT(gemm_tol_f16(1.5, -1.49, 0, 768, true) >= 0x1p-11);
    /* Where the device may round to infinity the bound gives up (INFINITY). */
    EXPECT(isinf(gemm_tol_f16(65519.5, 0, 1e5, 768, false))); /* E = 0.66 */
    EXPECT(isfinite(gemm_tol_f16(65519.5, 0, 1.0, 768, false)));
    EXPECT(isinf(gemm_tol_f16(65000.0, 600.0, 1.0, 768, true)));
    EXPECT(isfinite(gemm_tol_f16(65000.0, -600.0, 1.0, 768, true)));
    EXPECT(isfinite(gemm_tol_f16(65400.0, 0, 1.0, 768, false)));
}

/* The replay, once: every shape of test_cuda_gemm in its order. */
static struct gemm_case shapes[64];
static struct tally tallies[64];
static int32_t n_shapes;

static void replay_all(void)
{
    n_shapes = gemm_cases(shapes);
    uint64_t st = seed;
    for (int32_t i = 0; i < n_shapes; i++) {
        const struct gemm_case *sh = &shapes[i];
        const bool all_cols = !strcmp(sh->group, "opt-125m") || !strcmp(sh->group, "odd");
        replay(&st, sh, all_cols ? INT32_MAX : 128, &tallies[i]);
        const struct tally *t = &tallies[i];
        printf("# %-11s m=%3d n=%5d k=%5d%-11s %6lld outputs, old bound misses %4lld; "
               "err/tol",
               sh->group, sh->m, sh->n, sh->k,
               sh->relu   ? " +bias+relu"
               : sh->bias ? " +bias"
                          : "",
               (long long)t->n_out, (long long)t->miss_old[DEV_EXACT]);
        for (int d = 0; d < N_DEV; d++)
            printf(" %.2f", t->worst[d]);
        printf("; acc/E");
        for (int d = 0; d < N_DEV; d++)
            printf(" %.3f", t->worst_acc[d]);
        printf("\n");
    }
    printf("# columns: devices");
    for (int d = 0; d < N_DEV; d++)
        printf(" %s", dev_names[d]);
    printf("; old bound misses of the exact device\n");
}

/* Sums over the shapes of `model` (NULL: all): outputs, and misses of device d
 * under the new bound and the old one. */
static int64_t total_out(const char *model)
{
    int64_t n = 0;
    for (int32_t i = 0; i < n_shapes; i++)
        if (!model || !strcmp(shapes[i].group, model)) n += tallies[i].n_out;
    return n;
}

static int64_t total_miss(const char *model, int d, bool old)
{
    int64_t n = 0;
    for (int32_t i = 0; i < n_shapes; i++)
        if (!model || !strcmp(shapes[i].group, model))
            n += old ? tallies[i].miss_old[d] : tallies[i].miss[d];
    return n;
}

TEST(every_simulated_device_is_within_the_bound)
{
    /* Exact, fp32 in three orders, tensor-core-like, fully truncated: all inside,
     * on every output of every shape (the first misses are reported as they happen). */
    replay_all();
    for (int d = 0; d < N_DEV; d++) {
        const int64_t miss = total_miss(NULL, d, false);
        printf("# %-11s %lld of %lld outputs outside gemm_tol\n", dev_names[d],
               (long long)miss, (long long)total_out(NULL));
        EXPECT_EQ(miss, 0);
    }
}

TEST(the_old_bound_fails_a_perfect_gemm)
{
    /* The exact GEMM, rounded as cuBLAS and the bias epilogue round, against
     * ulp16(r) + 2^-16 sum |x w|: the numbers of issue 16. */
    const int64_t opt = total_miss("opt-125m", DEV_EXACT, true);
    printf("# old bound: %lld of %lld OPT-125m outputs, %lld of %lld in 3 x 38 x 29\n",
           (long long)opt, (long long)total_out("opt-125m"),
           (long long)tallies[n_shapes - 1].miss_old[DEV_EXACT],
           (long long)tallies[n_shapes - 1].n_out);
    EXPECT_EQ(opt, 656);
    EXPECT_EQ(total_out("opt-125m"), 255744);
    EXPECT_EQ(tallies[n_shapes - 1].miss_old[DEV_EXACT], 2);
    EXPECT_EQ(tallies[n_shapes - 1].n_out, 114);
    /* The fp32 path has no fp16 rounding to forget: the old bound holds there. */
    EXPECT_EQ(total_miss("lm-head-f32", DEV_EXACT, true), 0);
}

TEST(the_bound_still_tells_fp32_from_fp16_accumulation)
{
    /* Not vacuous: a device that accumulates in fp16 (the reduced-precision mistake
     * CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION rules out inside split-K)
     * misses it on most outputs. */
    const int64_t miss = total_miss(NULL, DEV_F16ACC, false), n = total_out(NULL);
    printf("# fp16 accumulation: %lld of %lld outputs outside gemm_tol\n", (long long)miss,
           (long long)n);
    EXPECT(miss > n / 2);
}

int main(void)
{
    gpu_rnd_jump_init(&jump);
    RUN(the_generator_skips_exactly);
    RUN(the_bound_at_the_edges_of_fp16);
    RUN(every_simulated_device_is_within_the_bound);
    RUN(the_old_bound_fails_a_perfect_gemm);
    RUN(the_bound_still_tells_fp32_from_fp16_accumulation);
    return test_done();
}
