/*
 * test_cuda_ops_ref.c - the host references of the families' element-wise CUDA kernels
 * (cuda_ref_norm, cuda_ref_act, cuda_ref_act_swiglu, cuda_ref_rope in cuda/cuda_ref.c)
 * against the CPU backend's own ops (cpu_ops_norm, cpu_ops_act, cpu_ops_swiglu,
 * cpu_ops_rope) on the same fp16 inputs widened to fp32, plus a few values worked out
 * by hand so that a mistake shared by both would still show.
 *
 * The references and the CPU ops are the same formulas in the same order except for
 * the CPU's SIMD reductions in the norms, so everything must agree within 1e-6
 * relative (plus 1e-6 absolute). tests/gpu/test_cuda_ops then checks the kernels
 * against these references on a GPU.
 */
#include "test.h"

#include "arch.h"
#include "cpu_ops.h"
#include "cuda_ref.h"
#include "dtype.h"
#include "paged_case.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

static uint64_t rng = 0x51b3c7a29d04e6f1ull;

/* Random fp16 values in [lo, hi), and the same widened. */
static uint16_t *rnd_f16(int64_t n, float lo, float hi, float **wide)
{
    uint16_t *h = dc_alloc((size_t)n * sizeof *h);
    *wide = dc_alloc((size_t)n * sizeof **wide);
    for (int64_t i = 0; i < n; i++) {
        h[i] = f32_to_f16(dc_float(&rng, lo, hi));
        (*wide)[i] = f16_to_f32(h[i]);
    }
    return h;
}

/* How many of got [n] differ from want [n] by more than 1e-6 relative + 1e-6. */
static int64_t misses(const char *what, const float *got, const float *want, int64_t n)
{
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        const double err = fabs((double)got[i] - want[i]);
        if (!(err <= 1e-6 * fabs(want[i]) + 1e-6) && bad++ < 5)
            TEST_FAIL("%s[%lld] = %.9g, the CPU has %.9g", what, (long long)i, got[i],
                      want[i]);
    }
    return bad;
}

static void check_norm(int32_t n, int32_t d, bool rms, float eps, float centre)
{
    float *xw, *ww, *bw;
    uint16_t *x = rnd_f16((int64_t)n * d, centre - 2.0f, centre + 2.0f, &xw);
    uint16_t *w = rnd_f16(d, 0.5f, 1.5f, &ww), *b = rnd_f16(d, -0.2f, 0.2f, &bw);
    float *got = dc_alloc((size_t)n * d * sizeof *got);
    float *want = dc_alloc((size_t)n * d * sizeof *want);
    cuda_ref_norm(got, x, w, rms ? NULL : b, rms, eps, n, d);
    cpu_ops_norm(want, DTYPE_F32, xw, ww, rms ? NULL : bw,
                 rms ? ARCH_NORM_RMSNORM : ARCH_NORM_LAYERNORM, eps, n, d);
    EXPECT_EQ(misses(rms ? "rmsnorm" : "layernorm", got, want, (int64_t)n * d), 0);
    free(x), free(w), free(b), free(xw), free(ww), free(bw), free(got), free(want);
}

TEST(norm_matches_cpu_ops_norm)
{
    /* Llama's 1e-5 and 1e-6, Qwen2's 1e-6, NeoX's LayerNorm with its own eps; odd
     * widths, a large mean (LayerNorm centres, RMSNorm does not). */
    check_norm(4, 64, true, 1e-6f, 0.0f);
    check_norm(3, 4096, true, 1e-5f, 0.0f);
    check_norm(2, 18, true, 1e-6f, 3.0f);
    check_norm(4, 128, false, 1e-5f, 0.0f);
    check_norm(2, 2048, false, 1e-6f, 40.0f);
}

TEST(rmsnorm_by_hand)
{
    /* [3, 4]: mean square 12.5, so 3 / sqrt(12.5 + eps) and 4 / sqrt(12.5 + eps), times
     * w = [1, 2]. */
    const uint16_t x[2] = {f32_to_f16(3.0f), f32_to_f16(4.0f)};
    const uint16_t w[2] = {f32_to_f16(1.0f), f32_to_f16(2.0f)};
    float out[2];
    cuda_ref_norm(out, x, w, NULL, 1, 0.5f, 1, 2);
    EXPECT_NEAR(out[0], 3.0 / sqrt(13.0), 1e-6);
    EXPECT_NEAR(out[1], 8.0 / sqrt(13.0), 1e-6);
}

static void check_act(int32_t n, int32_t m, enum cuda_act act, enum arch_act cpu_act,
                      bool bias)
{
    float *xw, *bw;
    uint16_t *x = rnd_f16((int64_t)n * m, -6.0f, 6.0f, &xw);
    uint16_t *b = rnd_f16(m, -0.5f, 0.5f, &bw);
    float *got = dc_alloc((size_t)n * m * sizeof *got);
    float *want = dc_alloc((size_t)n * m * sizeof *want);
    if (bias)
        for (int64_t i = 0; i < (int64_t)n * m; i++)
            xw[i] += bw[i % m];
    cuda_ref_act(got, x, bias ? b : NULL, n, m, act);
    cpu_ops_act(want, DTYPE_F32, xw, cpu_act, n, m);
    EXPECT_EQ(misses("act", got, want, (int64_t)n * m), 0);
    free(x), free(b), free(xw), free(bw), free(got), free(want);
}

TEST(act_matches_cpu_ops_act)
{
    check_act(3, 256, CUDA_ACT_GELU, ARCH_ACT_GELU, true);
    check_act(3, 256, CUDA_ACT_GELU_TANH, ARCH_ACT_GELU_TANH, true);
    check_act(2, 64, CUDA_ACT_GELU, ARCH_ACT_GELU, false);
    check_act(2, 64, CUDA_ACT_RELU, ARCH_ACT_RELU, true);
    check_act(2, 64, CUDA_ACT_SILU, ARCH_ACT_SILU, false);
    /* The enums are mapped by value in be_cuda_fwd.c. */
    EXPECT_EQ((int)CUDA_ACT_GELU, (int)ARCH_ACT_GELU);
    EXPECT_EQ((int)CUDA_ACT_GELU_TANH, (int)ARCH_ACT_GELU_TANH);
    EXPECT_EQ((int)CUDA_ACT_SILU, (int)ARCH_ACT_SILU);
}

TEST(gelu_and_silu_by_hand)
{
    /* gelu(1) = 0.5 (1 + erf(1 / sqrt 2)) = 0.8413447; silu(1) = 1 / (1 + e^-1). */
    EXPECT_NEAR(cuda_ref_act_one(1.0f, CUDA_ACT_GELU), 0.8413447460685429, 1e-6);
    EXPECT_NEAR(cuda_ref_act_one(1.0f, CUDA_ACT_GELU_TANH), 0.8411919906082768, 1e-6);
    EXPECT_NEAR(cuda_ref_act_one(1.0f, CUDA_ACT_SILU), 0.7310585786300049, 1e-6);
    EXPECT_NEAR(cuda_ref_act_one(-3.0f, CUDA_ACT_RELU), 0.0, 0.0);
}

TEST(swiglu_matches_cpu_ops_swiglu)
{
    const int32_t n = 5, f = 176;
    float *sw;
    uint16_t *src = rnd_f16((int64_t)n * 2 * f, -5.0f, 5.0f, &sw);
    float *got = dc_alloc((size_t)n * f * sizeof *got);
    float *want = dc_alloc((size_t)n * f * sizeof *want);
    cuda_ref_act_swiglu(got, src, n, f);
    cpu_ops_swiglu(want, DTYPE_F32, sw, n, f);
    EXPECT_EQ(misses("swiglu", got, want, (int64_t)n * f), 0);
    /* gate 1, up 2: silu(1) * 2. */
    const uint16_t one[2] = {f32_to_f16(1.0f), f32_to_f16(2.0f)};
    float y;
    cuda_ref_act_swiglu(&y, one, 1, 1);
    EXPECT_NEAR(y, 2.0 * 0.7310585786300049, 1e-6);
    free(src), free(sw), free(got), free(want);
}

/* Rotary on rows of q | k | v (n_q + n_kv heads rotated, v copied), as cpu_rank.c
 * calls cpu_ops_rope on its q | k | v rows. */
static void check_rope(const struct arch_rope *r, int32_t n_q, int32_t n_kv, int32_t D,
                       int32_t max_pos)
{
    const int32_t n = 7;
    const int64_t stride = (int64_t)(n_q + 2 * n_kv) * D;
    float *xw, inv_freq[128];
    uint16_t *x = rnd_f16(n * stride, -2.0f, 2.0f, &xw);
    int32_t pos[7];
    for (int32_t i = 0; i < n; i++)
        pos[i] = i == 0 ? 0 : i == 1 ? max_pos : dc_int(&rng, max_pos);
    arch_rope_inv_freq(r, inv_freq);
    float *got = dc_alloc((size_t)(n * stride) * sizeof *got);
    cuda_ref_rope(got, x, stride, pos, inv_freq, n, n_q + n_kv, D, r->dims);
    cpu_ops_rope(xw, stride, pos, n, n_q + n_kv, D, r->dims, inv_freq);
    EXPECT_EQ(misses("rope", got, xw, n * stride), 0);
    /* Position 0 turns nothing; v is never touched. */
    for (int64_t e = 0; e < stride; e++)
        EXPECT_EQ(f32_to_f16(got[e]), x[e]);
    for (int32_t i = 0; i < n; i++)
        for (int64_t e = (int64_t)(n_q + n_kv) * D; e < stride; e++)
            if (f32_to_f16(got[i * stride + e]) != x[i * stride + e]) {
                TEST_FAIL("row %d: v[%lld] changed", i, (long long)e);
                break;
            }
    free(x), free(xw), free(got);
}

TEST(rope_matches_cpu_ops_rope)
{
    struct model_arch a;
    arch_defaults(&a, ARCH_LLAMA); /* theta 10000, whole head */
    a.rope.dims = 64;
    check_rope(&a.rope, 4, 2, 64, 4096); /* GQA: 4 q heads over 2 KV heads */
    a.rope.theta = 500000.0f;            /* Llama 3 with its scaling */
    a.rope.scaling = ARCH_ROPE_LLAMA3;
    a.rope.factor = 8.0f;
    a.rope.low_freq_factor = 1.0f;
    a.rope.high_freq_factor = 4.0f;
    a.rope.original_max_pos = 8192;
    a.rope.dims = 128;
    check_rope(&a.rope, 2, 1, 128, 131071);
    arch_defaults(&a, ARCH_GPT_NEOX); /* partial rotary: 16 of 64 dims */
    a.rope.dims = 16;
    check_rope(&a.rope, 3, 3, 64, 2048);
}

TEST(rope_by_hand)
{
    /* One head of 4, dims 2: the pair (x0, x1) turns by pos * inv_freq[0]; x2, x3 are
     * outside the rotary dims. Position 1, inv_freq 1: (cos 1 - 0, 0 + sin 1) for (1, 0).
     */
    const uint16_t x[4] = {f32_to_f16(1.0f), 0, f32_to_f16(5.0f), f32_to_f16(6.0f)};
    const int32_t pos = 1;
    const float inv_freq = 1.0f;
    float out[4];
    cuda_ref_rope(out, x, 4, &pos, &inv_freq, 1, 1, 4, 2);
    EXPECT_NEAR(out[0], cos(1.0), 1e-6);
    EXPECT_NEAR(out[1], sin(1.0), 1e-6);
    EXPECT_NEAR(out[2], 5.0, 0.0);
    EXPECT_NEAR(out[3], 6.0, 0.0);
}

int main(void)
{
    RUN(norm_matches_cpu_ops_norm);
    RUN(rmsnorm_by_hand);
    RUN(act_matches_cpu_ops_act);
    RUN(gelu_and_silu_by_hand);
    RUN(swiglu_matches_cpu_ops_swiglu);
    RUN(rope_matches_cpu_ops_rope);
    RUN(rope_by_hand);
    return test_done();
}
