/*
 * test_cuda_gemm.c - cuda_gemm_linear and cuda_gemm_linear_f32 (cuda/cuda_gemm.c,
 * cuBLAS) against a host GEMM of the same fp16 inputs: y [m, n] = x [m, k] . w [n, k]^T
 * (+ bias, ReLU), the weight in the checkpoint's [out, in] layout as the CPU backend
 * reads it.
 *
 * The host reference widens the fp16 values and sums in double (so its own error is
 * negligible); the device sums fp32 products in fp32 in an order cuBLAS picks and
 * rounds to fp16 once, twice with a bias (the GEMM's store, then the bias add). Each
 * output must be within gemm_tol_f16 of the reference (tests/lib/gemm_tol.h): half an
 * fp16 ulp of the bias-free sum for the first rounding, half an ulp of the result for
 * the second, plus 2^-22 sqrt(k) sum |x w| for the fp32 accumulation. The first
 * rounding is at the scale of the product sum, which a cancelling bias can make far
 * larger than the result: an exact GEMM missed a bound without it on 656 of the
 * OPT-125m outputs. tests/unit/test_gemm_tol.c replays this file's data (the same
 * stream, shape after shape, in main's order: change both together) through
 * simulated devices in CI. A wrong layout, a transposed operand or an off-by-one row
 * fails by orders of magnitude more.
 *
 * Shapes: OPT-125m's projections (hidden 768, ffn 3072, vocab 50272) and
 * OPT-6.7B's (4096, 16384), with m = 1, 3, 17 and 512 tokens (odd m: no tile
 * multiple). Where m n k is large the reference checks a sample of rows (the first,
 * the last, and 14 in between) against the whole device output's rows.
 *
 * cuda_gemm_linear_f32 (the LM head, fp32 out) is checked the same way without the
 * fp16 rounding: within gemm_tol_f32 (the accumulation term alone), and not fp16
 * values.
 *
 * Without a CUDA device it prints "no CUDA device: skipping" and exits 77 (SKIP).
 */
#include "cuda_gemm.h"
#include "dtype.h"
#include "err.h"
#include "gemm_tol.h"
#include "test.h"

#include "gpu_testlib.h"

#include <cuda_runtime_api.h>

#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#define CUDA_OK(call)                                                                      \
    do {                                                                                   \
        cudaError_t e_ = (call);                                                           \
        if (e_ != cudaSuccess) {                                                           \
            TEST_FAIL("%s: %s", #call, cudaGetErrorString(e_));                            \
            goto out;                                                                      \
        }                                                                                  \
    } while (0)

static struct cuda_gemm *gemm;

/* The random inputs (gpu_rnd_*): the same data on every run, replayed by
 * tests/unit/test_gemm_tol.c (its seed and its list of shapes follow this file). */
static uint64_t rng = GEMM_TEST_SEED;

/* Compare cuda_gemm_linear with the host on one shape; returns the bad outputs. */
static int64_t check_shape(int32_t m, int32_t n, int32_t k, bool bias, bool relu)
{
    int64_t bad = 0;
    const float ws = 1.0f / sqrtf((float)k); /* keeps y near 1, as trained weights do */
    uint16_t *x = gpu_rnd_f16(&rng, (int64_t)m * k, -1.0f, 1.0f);
    uint16_t *w = gpu_rnd_f16(&rng, (int64_t)n * k, -ws, ws);
    uint16_t *b = bias ? gpu_rnd_f16(&rng, n, -0.5f, 0.5f) : NULL;
    uint16_t *y = malloc((size_t)m * n * sizeof *y);
    uint16_t *d_x = NULL, *d_w = NULL, *d_b = NULL, *d_y = NULL;
    float *xf = malloc((size_t)k * sizeof *xf), *wf = malloc((size_t)n * k * sizeof *wf);
    int32_t *rows = malloc((size_t)m * sizeof *rows); /* the rows checked */
    for (int64_t i = 0; i < (int64_t)n * k; i++) wf[i] = f16_to_f32(w[i]);

    CUDA_OK(cudaMalloc((void **)&d_x, (size_t)m * k * 2));
    CUDA_OK(cudaMalloc((void **)&d_w, (size_t)n * k * 2));
    CUDA_OK(cudaMalloc((void **)&d_y, (size_t)m * n * 2));
    CUDA_OK(cudaMemcpy(d_x, x, (size_t)m * k * 2, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(d_w, w, (size_t)n * k * 2, cudaMemcpyHostToDevice));
    if (b) {
        CUDA_OK(cudaMalloc((void **)&d_b, (size_t)n * 2));
        CUDA_OK(cudaMemcpy(d_b, b, (size_t)n * 2, cudaMemcpyHostToDevice));
    }
    CUDA_OK(cudaMemset(d_y, 0xff, (size_t)m * n * 2)); /* NaNs where nothing is written */
    int err = cuda_gemm_linear(gemm, d_y, d_x, d_w, d_b, m, n, k, relu);
    if (err) {
        TEST_FAIL("cuda_gemm_linear(%d, %d, %d): %s", m, n, k, err_msg());
        bad = 1;
        goto out;
    }
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaMemcpy(y, d_y, (size_t)m * n * 2, cudaMemcpyDeviceToHost));

    const int32_t n_rows = gemm_check_rows(m, n, k, rows);
    double worst = 0.0;
    for (int32_t ri = 0; ri < n_rows; ri++) {
        const int32_t r = rows[ri];
        for (int32_t j = 0; j < k; j++) xf[j] = f16_to_f32(x[(int64_t)r * k + j]);
        for (int32_t c = 0; c < n; c++) {
            const float *wr = wf + (int64_t)c * k;
            double sum = 0.0, mag = 0.0;
            for (int32_t j = 0; j < k; j++) {
                sum += (double)xf[j] * wr[j];
                mag += fabs((double)xf[j] * wr[j]);
            }
            const double bc = b ? f16_to_f32(b[c]) : 0.0;
            double want = sum + bc;
            if (relu && want < 0.0) want = 0.0;
            const double got = f16_to_f32(y[(int64_t)r * n + c]);
            const double tol = gemm_tol_f16(sum, bc, mag, k, b != NULL);
            const double e = fabs(got - want);
            if (!(e <= tol)) {
                if (bad++ < 5)
                    TEST_FAIL("m=%d n=%d k=%d: y[%d, %d] = %.8g, expected %.8g (tol %.3g)", m,
                              n, k, r, c, got, want, tol);
            } else if (e / tol > worst) {
                worst = e / tol;
            }
        }
    }
    printf("# m=%5d n=%5d k=%5d%s%s: %d rows checked, worst error %.2f of tolerance\n", m,
           n, k, b ? " +bias" : "", relu ? " +relu" : "", n_rows, worst);
out:
    cudaFree(d_x), cudaFree(d_w), cudaFree(d_b), cudaFree(d_y);
    free(x), free(w), free(b), free(y), free(xf), free(wf), free(rows);
    return bad;
}

/*
 * Compare cuda_gemm_linear_f32 (fp32 out, no bias) with the host on one shape; returns
 * the bad outputs. The output is the fp32 accumulator, unrounded: within gemm_tol_f32
 * of the double reference (the fp32 accumulation alone: no fp16 rounding to account
 * for), and almost never an fp16 value (an fp32 in a binade is one with odds 2^-13),
 * so a result that went through fp16 on the way fails by its count of
 * fp16-representable values.
 */
static int64_t check_shape_f32(int32_t m, int32_t n, int32_t k)
{
    int64_t bad = 0;
    const float ws = 1.0f / sqrtf((float)k);
    uint16_t *x = gpu_rnd_f16(&rng, (int64_t)m * k, -1.0f, 1.0f);
    uint16_t *w = gpu_rnd_f16(&rng, (int64_t)n * k, -ws, ws);
    float *y = malloc((size_t)m * n * sizeof *y);
    uint16_t *d_x = NULL, *d_w = NULL;
    float *d_y = NULL;
    float *xf = malloc((size_t)k * sizeof *xf), *wf = malloc((size_t)n * k * sizeof *wf);
    int32_t *rows = malloc((size_t)m * sizeof *rows); /* the rows checked */
    for (int64_t i = 0; i < (int64_t)n * k; i++)
        wf[i] = f16_to_f32(w[i]);

    CUDA_OK(cudaMalloc((void **)&d_x, (size_t)m * k * 2));
    CUDA_OK(cudaMalloc((void **)&d_w, (size_t)n * k * 2));
    CUDA_OK(cudaMalloc((void **)&d_y, (size_t)m * n * 4));
    CUDA_OK(cudaMemcpy(d_x, x, (size_t)m * k * 2, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(d_w, w, (size_t)n * k * 2, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemset(d_y, 0xff, (size_t)m * n * 4)); /* NaNs where nothing is written */
    int err = cuda_gemm_linear_f32(gemm, d_y, d_x, d_w, m, n, k);
    if (err) {
        TEST_FAIL("cuda_gemm_linear_f32(%d, %d, %d): %s", m, n, k, err_msg());
        bad = 1;
        goto out;
    }
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaMemcpy(y, d_y, (size_t)m * n * 4, cudaMemcpyDeviceToHost));

    const int32_t n_rows = gemm_check_rows(m, n, k, rows);
    double worst = 0.0;
    int64_t n_f16 = 0, n_checked = 0;
    for (int32_t ri = 0; ri < n_rows; ri++) {
        const int32_t r = rows[ri];
        for (int32_t j = 0; j < k; j++)
            xf[j] = f16_to_f32(x[(int64_t)r * k + j]);
        for (int32_t c = 0; c < n; c++) {
            const float *wr = wf + (int64_t)c * k;
            double acc = 0.0, mag = 0.0;
            for (int32_t j = 0; j < k; j++) {
                acc += (double)xf[j] * wr[j];
                mag += fabs((double)xf[j] * wr[j]);
            }
            const float got = y[(int64_t)r * n + c];
            const double tol = gemm_tol_f32(mag, k), e = fabs(got - acc);
            n_checked++;
            if (got != 0.0f && f16_to_f32(f32_to_f16(got)) == got) n_f16++;
            if (!(e <= tol)) {
                if (bad++ < 5)
                    TEST_FAIL("f32 m=%d n=%d k=%d: y[%d, %d] = %.9g, want %.9g (tol %.3g)",
                              m, n, k, r, c, got, acc, tol);
            } else if (e / tol > worst) {
                worst = e / tol;
            }
        }
    }
    if (n_f16 > n_checked / 100 + 2) {
        TEST_FAIL("f32 m=%d n=%d k=%d: %lld of %lld outputs are fp16 values (rounded?)", m,
                  n, k, (long long)n_f16, (long long)n_checked);
        bad++;
    }
    printf("# f32 m=%5d n=%5d k=%5d: %d rows checked, worst error %.2f of tolerance, "
           "%lld fp16-exact\n",
           m, n, k, n_rows, worst, (long long)n_f16);
out:
    cudaFree(d_x), cudaFree(d_w), cudaFree(d_y);
    free(x), free(w), free(y), free(xf), free(wf), free(rows);
    return bad;
}

/* The cases of one group (tests/lib/gemm_tol.h, gemm_cases: the order the inputs are
 * drawn in, which test_gemm_tol replays). */
static void check_group(const char *group)
{
    struct gemm_case c[64];
    const int32_t n = gemm_cases(c);
    for (int32_t i = 0; i < n; i++) {
        if (strcmp(c[i].group, group) != 0) continue;
        if (c[i].f32)
            EXPECT_EQ(check_shape_f32(c[i].m, c[i].n, c[i].k), 0);
        else
            EXPECT_EQ(check_shape(c[i].m, c[i].n, c[i].k, c[i].bias, c[i].relu), 0);
    }
}

/* OPT-125m's projections: qkv, out_proj, fc1 + ReLU, fc2, for 1, 3, 17 and 512
 * tokens. */
TEST(opt_125m_projections) { check_group("opt-125m"); }

/* The tied LM head: [vocab, hidden], no bias; the decode rows of a step. */
TEST(opt_125m_lm_head_without_bias) { check_group("lm-head"); }

/* cuda_gemm_linear_f32: OPT-125m's and OPT-6.7B's tied LM heads [50272, hidden] for
 * the decode rows of a step, then odd shapes (cuBLAS's fallbacks). */
TEST(lm_head_in_fp32) { check_group("lm-head-f32"); }

TEST(opt_6_7b_projections) { check_group("opt-6.7b"); }

/* n, k not multiples of 8 (cuBLAS's non-tensor-core fallbacks), with and without a
 * bias. */
TEST(odd_shapes_and_no_bias) { check_group("odd"); }

/* Achieved TFLOP/s of one projection (m = 512), from 20 calls after a warm-up. */
static void time_shape(const char *name, int32_t m, int32_t n, int32_t k, bool relu)
{
    uint16_t *d_x = NULL, *d_w = NULL, *d_b = NULL, *d_y = NULL;
    cudaEvent_t t0 = NULL, t1 = NULL;
    CUDA_OK(cudaMalloc((void **)&d_x, (size_t)m * k * 2));
    CUDA_OK(cudaMalloc((void **)&d_w, (size_t)n * k * 2));
    CUDA_OK(cudaMalloc((void **)&d_b, (size_t)n * 2));
    CUDA_OK(cudaMalloc((void **)&d_y, (size_t)m * n * 2));
    CUDA_OK(cudaMemset(d_x, 0, (size_t)m * k * 2));
    CUDA_OK(cudaMemset(d_w, 0, (size_t)n * k * 2));
    CUDA_OK(cudaMemset(d_b, 0, (size_t)n * 2));
    CUDA_OK(cudaEventCreate(&t0));
    CUDA_OK(cudaEventCreate(&t1));
    EXPECT_EQ(cuda_gemm_linear(gemm, d_y, d_x, d_w, d_b, m, n, k, relu), 0);
    CUDA_OK(cudaEventRecord(t0, 0));
    for (int i = 0; i < 20; i++) cuda_gemm_linear(gemm, d_y, d_x, d_w, d_b, m, n, k, relu);
    CUDA_OK(cudaEventRecord(t1, 0));
    CUDA_OK(cudaEventSynchronize(t1));
    float ms_ = 0.0f;
    CUDA_OK(cudaEventElapsedTime(&ms_, t0, t1));
    const double s = ms_ / 1e3 / 20, flop = 2.0 * m * n * k;
    const double bytes = 2.0 * ((double)n * k + (double)m * k + 2.0 * m * n);
    printf("# timing %-12s m=%4d n=%5d k=%5d: %8.1f us, %6.1f TFLOP/s, %6.0f GB/s\n", name,
           m, n, k, s * 1e6, flop / s / 1e12, bytes / s / 1e9);
out:
    if (t0) cudaEventDestroy(t0);
    if (t1) cudaEventDestroy(t1);
    cudaFree(d_x), cudaFree(d_w), cudaFree(d_b), cudaFree(d_y);
}

TEST(timing_opt_6_7b)
{
    const int32_t mm[] = {512, 64, 1};
    for (size_t i = 0; i < 3; i++) {
        time_shape("qkv", mm[i], 3 * 4096, 4096, false);
        time_shape("fc1", mm[i], 16384, 4096, true);
        time_shape("fc2", mm[i], 4096, 16384, false);
    }
}

TEST(bad_arguments_are_refused)
{
    uint16_t *d = NULL;
    if (cudaMalloc((void **)&d, 64) != cudaSuccess) {
        TEST_FAIL("cudaMalloc");
        return;
    }
    EXPECT_EQ(cuda_gemm_linear(gemm, d, d, d, NULL, -1, 4, 4, false), ENG_EINVAL);
    EXPECT_EQ(cuda_gemm_linear(gemm, d, d, d, NULL, 1, 0, 4, false), ENG_EINVAL);
    EXPECT_EQ(cuda_gemm_linear(gemm, d, d, d, NULL, 1, 4, 0, false), ENG_EINVAL);
    EXPECT_EQ(cuda_gemm_linear(gemm, d, d, d, NULL, 1, 4, 4, true), ENG_EINVAL); /* relu */
    EXPECT_EQ(cuda_gemm_linear(gemm, d, d, d, d, 1, 3, 4, false), ENG_EINVAL); /* odd n */
    EXPECT(strstr(err_msg(), "cuda_gemm_linear") != NULL);
    EXPECT_EQ(cuda_gemm_linear(gemm, d, d, d, d, 0, 4, 4, false), 0); /* nothing to do */
    float *f = (float *)d;
    EXPECT_EQ(cuda_gemm_linear_f32(gemm, f, d, d, -1, 4, 4), ENG_EINVAL);
    EXPECT_EQ(cuda_gemm_linear_f32(gemm, f, d, d, 1, 0, 4), ENG_EINVAL);
    EXPECT_EQ(cuda_gemm_linear_f32(gemm, f, d, d, 1, 4, 0), ENG_EINVAL);
    EXPECT_EQ(cuda_gemm_linear_f32(gemm, NULL, d, d, 1, 4, 4), ENG_EINVAL);
    EXPECT(strstr(err_msg(), "cuda_gemm_linear_f32") != NULL);
    EXPECT_EQ(cuda_gemm_linear_f32(gemm, f, d, d, 0, 4, 4), 0); /* nothing to do */
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    cudaFree(d);
}

int main(void)
{
    if (gpu_device_count() == 0) return 77; /* meson's skip code */
    int err = cuda_gemm_create(&gemm, 0, 0);
    if (err) {
        printf("Bail out! cuda_gemm_create: %s\n", err_msg());
        return 1;
    }
    RUN(opt_125m_projections);
    RUN(opt_125m_lm_head_without_bias);
    RUN(lm_head_in_fp32);
    RUN(opt_6_7b_projections);
    RUN(odd_shapes_and_no_bias);
    RUN(timing_opt_6_7b);
    RUN(bad_arguments_are_refused);
    cuda_gemm_destroy(gemm);
    return test_done();
}
