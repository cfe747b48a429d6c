/*
 * emu_ops.c - the families' element-wise kernels (cuda_norm.cu, cuda_act.cu,
 * cuda_rope.cu) run under the CPU emulation of cuda_emu.h against their host
 * references (cuda_ref.c): outputs within half an fp16 ulp + 1e-5 of the unrounded
 * reference, and rotary leaving every element outside its dims bit for bit. The
 * same bar as tests/gpu/test_cuda_norm, test_cuda_act and test_cuda_rope. Built and
 * run by emu_attn.sh; prints one line per check and exits 1 on any mismatch.
 */
#include "cuda_kernels.h"
#include "dtype.h"
#include "paged_case.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t st = 77;
static long bad;

static uint16_t *rnd(int64_t n, float lo, float hi)
{
    uint16_t *x = dc_alloc((size_t)n * 2);
    for (int64_t i = 0; i < n; i++)
        x[i] = f32_to_f16(dc_float(&st, lo, hi));
    return x;
}

static void check(const char *what, const uint16_t *got, const float *want, int64_t n)
{
    long b = 0;
    for (int64_t i = 0; i < n; i++) {
        const double g = f16_to_f32(got[i]), r = want[i];
        if (!(fabs(g - r) <= fabs(r) / 2048.0 + 1e-5) && b++ < 3)
            printf("  %s[%lld] = %g, want %g\n", what, (long long)i, g, r);
    }
    printf("%s: %lld values, %ld bad\n", what, (long long)n, b);
    bad += b;
}

static void norm(int32_t n, int32_t d, bool rms, float eps)
{
    uint16_t *x = rnd((int64_t)n * d, -2, 3), *w = rnd(d, 0.5f, 1.5f),
             *b = rnd(d, -0.2f, 0.2f);
    uint16_t *got = dc_alloc((size_t)n * d * 2);
    float *want = dc_alloc((size_t)n * d * 4);
    cuda_ref_norm(want, x, w, rms ? NULL : b, rms, eps, n, d);
    cuda_norm(got, x, w, rms ? NULL : b, rms, eps, n, d, 0);
    check(rms ? "rmsnorm" : "layernorm", got, want, (int64_t)n * d);
    free(x), free(w), free(b), free(got), free(want);
}

static void act(int32_t n, int32_t m, enum cuda_act a, bool bias)
{
    uint16_t *x = rnd((int64_t)n * m, -8, 8), *b = rnd(m, -1, 1);
    float *want = dc_alloc((size_t)n * m * 4);
    cuda_ref_act(want, x, bias ? b : NULL, n, m, a);
    cuda_act(x, bias ? b : NULL, n, m, a, 0);
    check("act", x, want, (int64_t)n * m);
    free(x), free(b), free(want);
}

static void swiglu(int32_t n, int32_t f)
{
    uint16_t *src = rnd((int64_t)n * 2 * f, -6, 6), *got = dc_alloc((size_t)n * f * 2);
    float *want = dc_alloc((size_t)n * f * 4);
    cuda_ref_act_swiglu(want, src, n, f);
    cuda_act_swiglu(got, src, n, f, 0);
    check("swiglu", got, want, (int64_t)n * f);
    free(src), free(got), free(want);
}

static void rope(int32_t n, int32_t nq, int32_t nkv, int32_t D, int32_t dims, float theta)
{
    const int64_t stride = (int64_t)(nq + 2 * nkv) * D, total = n * stride;
    uint16_t *x = rnd(total, -2, 2), *x0 = dc_alloc((size_t)total * 2);
    memcpy(x0, x, (size_t)total * 2);
    int32_t *pos = dc_alloc((size_t)n * 4);
    float *f = dc_alloc((size_t)(dims / 2) * 4), *want = dc_alloc((size_t)total * 4);
    for (int32_t i = 0; i < n; i++)
        pos[i] = i == 0 ? 131071 : dc_int(&st, 4096);
    for (int32_t i = 0; i < dims / 2; i++)
        f[i] = 1.0f / powf(theta, (float)(2 * i) / (float)dims);
    cuda_ref_rope(want, x, stride, pos, f, n, nq + nkv, D, dims);
    cuda_rope(x, stride, pos, f, n, nq + nkv, D, dims, 0);
    check("rope", x, want, total);
    long moved = 0;
    for (int64_t e = 0; e < total; e++) {
        const int64_t h = (e % stride) / D, d = e % D;
        moved += (h >= nq + nkv || d >= dims) && x[e] != x0[e];
    }
    printf("rope: %ld elements outside the rotary dims changed\n", moved);
    bad += moved;
    free(x), free(x0), free(pos), free(f), free(want);
}

int main(void)
{
    norm(3, 512, true, 1e-6f);
    norm(2, 18, true, 1e-5f);
    norm(3, 640, false, 1e-5f);
    act(3, 1030, CUDA_ACT_GELU, true);
    act(2, 64, CUDA_ACT_GELU_TANH, false);
    act(2, 64, CUDA_ACT_RELU, true);
    swiglu(3, 600);
    rope(4, 4, 2, 64, 64, 10000.0f);
    rope(3, 3, 3, 80, 20, 10000.0f);
    printf("TOTAL bad %ld\n", bad);
    return bad != 0;
}
