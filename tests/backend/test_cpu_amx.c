/*
 * test_cpu_amx.c - the AMX bf16 linear kernel (engine/cpu/cpu_amx.c) against a plain
 * loop in double, and its promise: a row's result is the same bits whatever the row
 * count of the call (alone, in a partial 16-row tile, in a chunk of 256 or past it).
 * Shapes cover column counts that are not a multiple of 16 or of 32 (the padded last
 * column tile), one and many K tiles, ReLU, bias, and bf16 output. cpu_gemm routes
 * bf16 layers here where the CPU has AMX; that routing is checked too.
 * On a CPU without AMX the kernel cannot run: those tests report SKIP, not ok.
 */
#include "cpu_amx.h"
#include "cpu_gemm.h"
#include "linear_ref.h"
#include "test.h"
#include "util.h"

#include <stdint.h>

static float frand(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((*s >> 40) & 0xffff) / 32768.0f - 1.0f;
}

/* One shape: w [n, k], bias [n], src [m_max, k] bf16, the reference y [m_max, n]. */
struct shape {
    int64_t n, k;
};

static void check_shape(struct shape sh, bool relu, uint64_t seed)
{
    const int64_t n = sh.n, k = sh.k, m_max = 300;
    float *w = xmalloc((size_t)(n * k) * sizeof *w), *b = xmalloc((size_t)n * sizeof *b);
    uint16_t *x = xmalloc((size_t)(m_max * k) * sizeof *x);
    for (int64_t i = 0; i < n * k; i++)
        w[i] = frand(&seed);
    for (int64_t i = 0; i < n; i++)
        b[i] = frand(&seed);
    for (int64_t i = 0; i < m_max * k; i++)
        x[i] = f32_to_bf16(frand(&seed));
    struct cpu_amx_weights pw;
    EXPECT_EQ(cpu_amx_pack(&pw, w, n, k), 0);
    float *all = xmalloc((size_t)(m_max * n) * sizeof *all);
    float *part = xmalloc((size_t)(m_max * n) * sizeof *part);
    uint16_t *half = xmalloc((size_t)(m_max * n) * sizeof *half);
    cpu_amx_gemm(&pw, x, m_max, b, relu, all, DTYPE_F32);
    /* The reference multiplies what the tiles do: x and w in bf16. */
    float *xf = xmalloc((size_t)(m_max * k) * sizeof *xf);
    float *wf = xmalloc((size_t)(n * k) * sizeof *wf);
    for (int64_t i = 0; i < m_max * k; i++)
        xf[i] = bf16_to_f32(x[i]);
    for (int64_t i = 0; i < n * k; i++)
        wf[i] = bf16_to_f32(f32_to_bf16(w[i]));
    int bad = linear_ref_check(all, xf, wf, b, m_max, n, k, relu);
    free(xf);
    free(wf);
    /* The same rows in calls of other sizes: the same bits. */
    const int64_t counts[] = {1, 5, 16, 17, 31, 32, 33, 256, 257};
    for (size_t c = 0; c < ARRAY_LEN(counts); c++)
        for (int64_t r0 = 0; r0 + counts[c] <= m_max; r0 += 97) {
            cpu_amx_gemm(&pw, x + r0 * k, counts[c], b, relu, part, DTYPE_F32);
            if (memcmp(part, all + r0 * n, (size_t)(counts[c] * n) * sizeof *part) != 0 &&
                bad++ < 3)
                TEST_FAIL("n %lld k %lld: rows %lld.. in a call of %lld differ",
                          (long long)n, (long long)k, (long long)r0, (long long)counts[c]);
        }
    /* bf16 output: the fp32 result rounded to nearest even. */
    cpu_amx_gemm(&pw, x, m_max, b, relu, half, DTYPE_BF16);
    for (int64_t i = 0; i < m_max * n; i++)
        if (half[i] != f32_to_bf16(all[i]) && bad++ < 3)
            TEST_FAIL("n %lld k %lld: bf16 y[%lld] is not the rounded fp32 one",
                      (long long)n, (long long)k, (long long)i);
    cpu_amx_free(&pw);
    free(w);
    free(b);
    free(x);
    free(all);
    free(part);
    free(half);
}

TEST(amx_rows_match_the_reference_whatever_the_row_count)
{
    const struct shape shapes[] = {{83, 64}, {16, 32}, {50, 96}, {33, 3072}, {768, 768}};
    for (size_t i = 0; i < ARRAY_LEN(shapes); i++)
        check_shape(shapes[i], i % 2 == 1, 11 + i);
}

TEST(cpu_gemm_runs_bf16_layers_with_k_a_multiple_of_32_on_amx)
{
    struct cpu_dnnl d;
    EXPECT_EQ(cpu_gemm_init(&d), 0);
    float w[40 * 64] = {0};
    struct cpu_linear l;
    EXPECT_EQ(cpu_gemm_linear_init(&l, &d, w, NULL, 40, 64, DTYPE_BF16, DTYPE_F32, false),
              0);
    EXPECT(l.amx);
    cpu_gemm_linear_deinit(&l);
    /* K not a multiple of 32, and fp32, stay on oneDNN. */
    EXPECT_EQ(cpu_gemm_linear_init(&l, &d, w, NULL, 40, 48, DTYPE_BF16, DTYPE_F32, false),
              0);
    EXPECT(!l.amx);
    cpu_gemm_linear_deinit(&l);
    EXPECT_EQ(cpu_gemm_linear_init(&l, &d, w, NULL, 40, 64, DTYPE_F32, DTYPE_F32, false),
              0);
    EXPECT(!l.amx);
    cpu_gemm_linear_deinit(&l);
    cpu_gemm_deinit(&d);
}

int main(void)
{
    if (!cpu_amx_available()) {
        printf(
            "ok 1 - amx_rows_match_the_reference_whatever_the_row_count # SKIP no AMX\n");
        printf("ok 2 - cpu_gemm_runs_bf16_layers_with_k_a_multiple_of_32_on_amx # SKIP no "
               "AMX\n");
        printf("1..2\n");
        return 0;
    }
    RUN(amx_rows_match_the_reference_whatever_the_row_count);
    RUN(cpu_gemm_runs_bf16_layers_with_k_a_multiple_of_32_on_amx);
    return test_done();
}
