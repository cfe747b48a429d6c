/*
 * test_cpu_avx2.c - the AVX2 fp32 linear kernel (engine/cpu/cpu_avx2.c) against a
 * plain loop in double, and its promise: a row's result is the same bits whatever the
 * row count of the call (alone, in a partial 6-row block, in a chunk of 96 or past
 * it) and whatever the thread count. Shapes cover column counts that are not a
 * multiple of 16 (the masked last panel), K below, at and past one K slice (256) and
 * not a multiple of 8, ReLU and bias. cpu_gemm routes fp32 layers here where oneDNN
 * has no AVX-512 kernels; that routing is checked too.
 * On a CPU without AVX2 and FMA the kernel cannot run: those tests report SKIP.
 */
#include "cpu_avx2.h"
#include "cpu_gemm.h"
#include "linear_ref.h"
#include "test.h"
#include "util.h"

#include <omp.h>
#include <stdint.h>

static float frand(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((*s >> 40) & 0xffff) / 32768.0f - 1.0f;
}

/* One shape: w [n, k], bias [n], src [M_MAX, k]. */
struct shape {
    int64_t n, k;
};

enum { M_MAX = 300 };

static void check_shape(struct shape sh, bool relu, uint64_t seed)
{
    const int64_t n = sh.n, k = sh.k;
    float *w = xmalloc((size_t)(n * k) * sizeof *w), *b = xmalloc((size_t)n * sizeof *b);
    float *x = xmalloc((size_t)(M_MAX * k) * sizeof *x);
    for (int64_t i = 0; i < n * k; i++)
        w[i] = frand(&seed);
    for (int64_t i = 0; i < n; i++)
        b[i] = frand(&seed);
    for (int64_t i = 0; i < M_MAX * k; i++)
        x[i] = frand(&seed);
    struct cpu_avx2_weights pw;
    EXPECT_EQ(cpu_avx2_pack(&pw, w, n, k), 0);
    float *all = xmalloc((size_t)(M_MAX * n) * sizeof *all);
    float *part = xmalloc((size_t)(M_MAX * n) * sizeof *part);
    cpu_avx2_gemm(&pw, x, M_MAX, b, relu, all);
    int bad = linear_ref_check(all, x, w, b, M_MAX, n, k, relu);
    /* The same rows in calls of other sizes, on 1 to 3 threads: the same bits. */
    const int64_t counts[] = {1, 2, 3, 4, 5, 6, 7, 9, 10, 13, 95, 96, 97, 257};
    const int threads = omp_get_max_threads();
    for (size_t c = 0; c < ARRAY_LEN(counts); c++)
        for (int64_t r0 = 0; r0 + counts[c] <= M_MAX; r0 += 97) {
            omp_set_num_threads(1 + (int)((c + (size_t)r0) % 3));
            cpu_avx2_gemm(&pw, x + r0 * k, counts[c], b, relu, part);
            if (memcmp(part, all + r0 * n, (size_t)(counts[c] * n) * sizeof *part) != 0 &&
                bad++ < 3)
                TEST_FAIL(
                    "n %lld k %lld: rows %lld.. in a call of %lld on %d threads differ",
                    (long long)n, (long long)k, (long long)r0, (long long)counts[c],
                    omp_get_max_threads());
        }
    omp_set_num_threads(threads);
    cpu_avx2_free(&pw);
    free(w);
    free(b);
    free(x);
    free(all);
    free(part);
}

TEST(avx2_rows_match_the_reference_whatever_the_row_and_thread_count)
{
    const struct shape shapes[] = {{83, 64},   {16, 8},    {50, 97},
                                   {33, 3072}, {768, 768}, {5, 300}};
    for (size_t i = 0; i < ARRAY_LEN(shapes); i++)
        check_shape(shapes[i], i % 2 == 1, 11 + i);
}

/* Where oneDNN may not use AVX-512 (avx512_core: F, BW, VL and DQ) its fp32 rows
 * depend on the row count, and cpu_gemm takes our kernel instead; where it may, it
 * keeps oneDNN. ONEDNN_MAX_CPU_ISA would move that line, so the check needs it unset. */
TEST(cpu_gemm_runs_fp32_layers_on_avx2_where_onednn_has_no_avx512)
{
    if (getenv("ONEDNN_MAX_CPU_ISA") || getenv("DNNL_MAX_CPU_ISA")) {
        printf("# ONEDNN_MAX_CPU_ISA is set: routing not checked\n");
        return;
    }
    __builtin_cpu_init();
    const bool avx512 =
        __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
    struct cpu_dnnl d;
    EXPECT_EQ(cpu_gemm_init(&d), 0);
    float w[40 * 24] = {0};
    struct cpu_linear l;
    EXPECT_EQ(cpu_gemm_linear_init(&l, &d, w, NULL, 40, 24, DTYPE_F32, DTYPE_F32, true), 0);
    EXPECT_EQ(l.avx2, !avx512);
    cpu_gemm_linear_deinit(&l);
    cpu_gemm_deinit(&d);
}

int main(void)
{
    if (!cpu_avx2_available()) {
        printf("ok 1 - avx2_rows_match_the_reference_whatever_the_row_and_thread_count # "
               "SKIP no AVX2 and FMA\n");
        printf("ok 2 - cpu_gemm_runs_fp32_layers_on_avx2_where_onednn_has_no_avx512 # SKIP "
               "no AVX2 and FMA\n");
        printf("1..2\n");
        return 0;
    }
    RUN(avx2_rows_match_the_reference_whatever_the_row_and_thread_count);
    RUN(cpu_gemm_runs_fp32_layers_on_avx2_where_onednn_has_no_avx512);
    return test_done();
}
