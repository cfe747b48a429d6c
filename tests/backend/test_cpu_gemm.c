/*
 * test_cpu_gemm.c - cpu_linear against a plain loop: every dtype path, bias and ReLU,
 * row counts below, at and past CPU_LINEAR_CHUNK (the half-precision layers run in
 * chunks on primitives built per row count), and rows that do not depend on how
 * many other rows share the call; and that the oneDNN loaded is the one compiled
 * against (-Donednn_prefix builds link a second one).
 * bf16 layers need AVX-512 or AMX: on a CPU without them the layer is refused with
 * the reason, which is checked, and the bf16 tests that compute report SKIP.
 */
#include "cpu_gemm.h"
#include "err.h"
#include "test.h"
#include "util.h"

#include <stdint.h>

enum { K = 96, N = 80 };

static float frand(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((*s >> 40) & 0xffff) / 32768.0f - 1.0f;
}

static void fill(float *a, int64_t n, uint64_t *seed)
{
    for (int64_t i = 0; i < n; i++)
        a[i] = frand(seed);
}

/* What the layer should compute, with inputs rounded to the compute dtype as the
 * layer rounds them and fp32 sums. */
static float reference(const float *w, const float *b, const float *x, int64_t row,
                       int64_t j, enum dtype dt, bool relu)
{
    double acc = b ? b[j] : 0.0;
    for (int64_t k = 0; k < K; k++) {
        float xv = x[row * K + k], wv = w[j * K + k];
        if (dt == DTYPE_BF16) {
            xv = bf16_to_f32(f32_to_bf16(xv));
            wv = bf16_to_f32(f32_to_bf16(wv));
        }
        acc += (double)xv * wv;
    }
    return relu && acc < 0 ? 0.0f : (float)acc;
}

/* Runs m rows through a layer of dtype dt (dst fp32) and checks every value. */
static void check_rows(enum dtype dt, bool bias, bool relu, int64_t m)
{
    struct cpu_dnnl d;
    EXPECT_EQ(cpu_gemm_init(&d), 0);
    uint64_t seed = 42 + (uint64_t)m;
    float *w = xmalloc(N * K * sizeof *w), b[N];
    fill(w, N * K, &seed);
    fill(b, N, &seed);
    float *x = xmalloc((size_t)(m * K) * sizeof *x),
          *y = xmalloc((size_t)(m * N) * sizeof *y);
    fill(x, m * K, &seed);
    uint16_t *xh = xmalloc((size_t)(m * K) * sizeof *xh);
    for (int64_t i = 0; i < m * K; i++)
        xh[i] = f32_to_bf16(x[i]);

    struct cpu_linear l;
    EXPECT_EQ(cpu_gemm_linear_init(&l, &d, w, bias ? b : NULL, N, K, dt, DTYPE_F32, relu),
              0);
    const void *src = dt == DTYPE_F32 ? (const void *)x : (const void *)xh;
    cpu_gemm_linear_run(&l, &d, src, m, y);
    int bad = 0;
    for (int64_t r = 0; r < m; r++)
        for (int64_t j = 0; j < N; j++) {
            const float want = reference(w, bias ? b : NULL, x, r, j, dt, relu);
            if (fabsf(y[r * N + j] - want) > 1e-4f * (1.0f + fabsf(want)) && bad++ < 3)
                TEST_FAIL("m %lld: y[%lld][%lld] = %g, expected %g", (long long)m,
                          (long long)r, (long long)j, y[r * N + j], want);
        }

    /* The first and the last row again, alone: the same bits. */
    float one[N];
    for (int64_t r = 0; r<m; r += m - 1> 0 ? m - 1 : 1) {
        const size_t es = dt == DTYPE_F32 ? sizeof(float) : sizeof(uint16_t);
        cpu_gemm_linear_run(&l, &d, (const char *)src + (size_t)(r * K) * es, 1, one);
        if (memcmp(one, y + r * N, sizeof one) != 0)
            TEST_FAIL("m %lld: row %lld alone differs from the batched row", (long long)m,
                      (long long)r);
    }
    cpu_gemm_linear_deinit(&l);
    cpu_gemm_deinit(&d);
    free(w);
    free(x);
    free(xh);
    free(y);
}

static const int64_t row_counts[] = {
    1, 7, 37, CPU_LINEAR_CHUNK, CPU_LINEAR_CHUNK + 1, 2 * CPU_LINEAR_CHUNK + 45};

TEST(bf16_rows_of_every_chunking_match_the_reference)
{
    for (size_t i = 0; i < ARRAY_LEN(row_counts); i++)
        check_rows(DTYPE_BF16, true, false, row_counts[i]);
}

TEST(bf16_relu_without_bias)
{
    for (size_t i = 0; i < ARRAY_LEN(row_counts); i++)
        check_rows(DTYPE_BF16, false, true, row_counts[i]);
}

TEST(fp32_runtime_rows_match_the_reference)
{
    for (size_t i = 0; i < ARRAY_LEN(row_counts); i++)
        check_rows(DTYPE_F32, true, true, row_counts[i]);
}

TEST(bf16_output_is_the_rounded_fp32_output)
{
    struct cpu_dnnl d;
    EXPECT_EQ(cpu_gemm_init(&d), 0);
    uint64_t seed = 7;
    const int64_t m = CPU_LINEAR_CHUNK + 3;
    float *w = xmalloc(N * K * sizeof *w), b[N];
    fill(w, N * K, &seed);
    fill(b, N, &seed);
    uint16_t *xh = xmalloc((size_t)(m * K) * sizeof *xh),
             *yh = xmalloc((size_t)(m * N) * 2);
    float *y = xmalloc((size_t)(m * N) * sizeof *y);
    for (int64_t i = 0; i < m * K; i++)
        xh[i] = f32_to_bf16(frand(&seed));
    struct cpu_linear l32, l16;
    EXPECT_EQ(cpu_gemm_linear_init(&l32, &d, w, b, N, K, DTYPE_BF16, DTYPE_F32, false), 0);
    EXPECT_EQ(cpu_gemm_linear_init(&l16, &d, w, b, N, K, DTYPE_BF16, DTYPE_BF16, false), 0);
    cpu_gemm_linear_run(&l32, &d, xh, m, y);
    cpu_gemm_linear_run(&l16, &d, xh, m, yh);
    int bad = 0;
    for (int64_t i = 0; i < m * N; i++)
        if (fabsf(bf16_to_f32(yh[i]) - y[i]) > 1e-2f * (1.0f + fabsf(y[i])) && bad++ < 3)
            TEST_FAIL("y[%lld] = %g in bf16, %g in fp32", (long long)i, bf16_to_f32(yh[i]),
                      y[i]);
    cpu_gemm_linear_deinit(&l32);
    cpu_gemm_linear_deinit(&l16);
    cpu_gemm_deinit(&d);
    free(w);
    free(xh);
    free(yh);
    free(y);
}

/* bf16 runs where oneDNN has AVX-512; elsewhere (AVX2 and older, where oneDNN 2.6
 * builds a bf16 matmul and then fails to run it) the layer is refused at init with
 * a message that says what to use, and deinit of the refused layer is safe. */
TEST(bf16_runs_or_is_refused_with_the_reason)
{
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512f")) EXPECT(!cpu_gemm_has_bf16());
    struct cpu_dnnl d;
    EXPECT_EQ(cpu_gemm_init(&d), 0);
    float w[N * K] = {0};
    struct cpu_linear l;
    const int err =
        cpu_gemm_linear_init(&l, &d, w, NULL, N, K, DTYPE_BF16, DTYPE_F32, false);
    if (cpu_gemm_has_bf16()) {
        EXPECT_EQ(err, 0);
    } else {
        EXPECT_EQ(err, ENG_EUNSUPPORTED);
        EXPECT(strstr(err_msg(), "AVX-512") && strstr(err_msg(), "--dtype fp32"));
        printf("# refused: %s\n", err_msg());
    }
    cpu_gemm_linear_deinit(&l);
    cpu_gemm_deinit(&d);
}

/* A test this CPU cannot run, in TAP: ok, SKIP and the reason. */
static void skip(const char *name, const char *why)
{
    printf("ok %d - %s # SKIP %s\n", ++test_n_run, name, why);
}

/* A build with -Donednn_prefix compiles against the prefix's headers and links its
 * library; were /usr/include's 2.6 headers found first, or the system's libdnnl.so.2
 * loaded, the API would not match the code (cpu_gemm.c's helpers pick by the header's
 * version). And the library's threads must be OpenMP's, which the engine's thread
 * count bounds. */
TEST(runs_the_onednn_it_was_compiled_against)
{
    const dnnl_version_t *v = dnnl_version();
    printf("# oneDNN %d.%d.%d (%s), headers %d.%d\n", v->major, v->minor, v->patch, v->hash,
           DNNL_VERSION_MAJOR, DNNL_VERSION_MINOR);
    EXPECT_EQ(v->major, DNNL_VERSION_MAJOR);
    EXPECT_EQ(v->minor, DNNL_VERSION_MINOR);
    EXPECT_EQ(v->cpu_runtime, DNNL_RUNTIME_OMP);
}

int main(void)
{
    RUN(runs_the_onednn_it_was_compiled_against);
    RUN(bf16_runs_or_is_refused_with_the_reason);
    if (cpu_gemm_has_bf16()) {
        RUN(bf16_rows_of_every_chunking_match_the_reference);
        RUN(bf16_relu_without_bias);
        RUN(bf16_output_is_the_rounded_fp32_output);
    } else {
        const char *why = "bf16 GEMMs need AVX-512 or AMX";
        skip("bf16_rows_of_every_chunking_match_the_reference", why);
        skip("bf16_relu_without_bias", why);
        skip("bf16_output_is_the_rounded_fp32_output", why);
    }
    RUN(fp32_runtime_rows_match_the_reference);
    return test_done();
}
