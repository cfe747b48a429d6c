/*
 * cpu_ops.c - embedding, norms, activations, rotary, residual add, conversions (see
 * cpu_ops.h).
 */
#include "cpu_ops.h"

#include "fast_exp.h"

#include <math.h>
#include <string.h>

void cpu_ops_embed(float *dst, const float *table, const int32_t *ids, int32_t n, int32_t d)
{
#pragma omp parallel for schedule(static)
    for (int32_t i = 0; i < n; i++)
        memcpy(dst + (int64_t)i * d, table + (int64_t)ids[i] * d, (size_t)d * sizeof *dst);
}

void cpu_ops_add_positions(float *x, const float *table, const int32_t *pos, int32_t offset,
                           int32_t n, int32_t d)
{
#pragma omp parallel for schedule(static)
    for (int32_t i = 0; i < n; i++) {
        float *row = x + (int64_t)i * d;
        const float *p = table + (int64_t)(pos[i] + offset) * d;
#pragma omp simd
        for (int32_t j = 0; j < d; j++) row[j] += p[j];
    }
}

void cpu_ops_layernorm(void *dst, enum dtype dst_dtype, const float *x, const float *w,
                       const float *b, int32_t n, int32_t d)
{
#pragma omp parallel for schedule(static)
    for (int32_t i = 0; i < n; i++) {
        const float *row = x + (int64_t)i * d;
        /* Two passes (mean, then variance of the centred values) as PyTorch does;
         * the one-pass formula loses precision when the mean is large. */
        float mean = 0.0f;
#pragma omp simd reduction(+ : mean)
        for (int32_t j = 0; j < d; j++) mean += row[j];
        mean /= (float)d;
        float var = 0.0f;
#pragma omp simd reduction(+ : var)
        for (int32_t j = 0; j < d; j++) var += (row[j] - mean) * (row[j] - mean);
        var /= (float)d;
        float rstd = 1.0f / sqrtf(var + 1e-5f);
        if (dst_dtype == DTYPE_F32) {
            float *out = (float *)dst + (int64_t)i * d;
#pragma omp simd
            for (int32_t j = 0; j < d; j++) out[j] = (row[j] - mean) * rstd * w[j] + b[j];
        } else {
            uint16_t *out = (uint16_t *)dst + (int64_t)i * d;
            for (int32_t j = 0; j < d; j++)
                out[j] = f32_to_bf16((row[j] - mean) * rstd * w[j] + b[j]);
        }
    }
}

void cpu_ops_norm(void *dst, enum dtype dst_dtype, const float *x, const float *w,
                  const float *b, enum arch_norm kind, float eps, int32_t n, int32_t d)
{
#pragma omp parallel for schedule(static)
    for (int32_t i = 0; i < n; i++) {
        const float *row = x + (int64_t)i * d;
        float mean = 0.0f, var = 0.0f;
        if (kind == ARCH_NORM_LAYERNORM) {
#pragma omp simd reduction(+ : mean)
            for (int32_t j = 0; j < d; j++)
                mean += row[j];
            mean /= (float)d;
        }
        /* LayerNorm: the variance of the centred values (two passes, as PyTorch);
         * RMSNorm: the mean square (mean stays 0). */
#pragma omp simd reduction(+ : var)
        for (int32_t j = 0; j < d; j++)
            var += (row[j] - mean) * (row[j] - mean);
        var /= (float)d;
        const float rstd = 1.0f / sqrtf(var + eps);
        if (dst_dtype == DTYPE_F32) {
            float *out = (float *)dst + (int64_t)i * d;
            if (b) {
#pragma omp simd
                for (int32_t j = 0; j < d; j++)
                    out[j] = (row[j] - mean) * rstd * w[j] + b[j];
            } else {
#pragma omp simd
                for (int32_t j = 0; j < d; j++)
                    out[j] = (row[j] - mean) * rstd * w[j];
            }
        } else {
            uint16_t *out = (uint16_t *)dst + (int64_t)i * d;
            for (int32_t j = 0; j < d; j++)
                out[j] = f32_to_bf16((row[j] - mean) * rstd * w[j] + (b ? b[j] : 0.0f));
        }
    }
}

static inline float act_one(float x, enum arch_act act)
{
    switch (act) {
    case ARCH_ACT_RELU: return x > 0.0f ? x : 0.0f;
    case ARCH_ACT_GELU: return 0.5f * x * (1.0f + erff(x * (float)M_SQRT1_2));
    case ARCH_ACT_GELU_TANH:
        return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
    case ARCH_ACT_SILU: return x / (1.0f + expf(-x));
    }
    return x;
}

void cpu_ops_act(void *dst, enum dtype dst_dtype, const float *src, enum arch_act act,
                 int32_t n, int32_t f)
{
    const int64_t total = (int64_t)n * f;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < total; i++) {
        float y = act_one(src[i], act);
        if (dst_dtype == DTYPE_F32)
            ((float *)dst)[i] = y;
        else
            ((uint16_t *)dst)[i] = f32_to_bf16(y);
    }
}

/* silu(x) = x * sigmoid(x), with e^-|x| from fast_exp (which takes x <= 0 only):
 * sigmoid(x) = 1 / (1 + e^-x) for x >= 0 and e^x / (1 + e^x) below. Straight-line,
 * so the loop vectorises, where glibc's expf is a call per element (the same reason
 * attention's softmax uses it); the relative error stays below 1e-6. */
static inline float silu_fast(float x)
{
    const float e = fast_exp(-fabsf(x));
    const float sig = x >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
    return x * sig;
}

void cpu_ops_swiglu(void *dst, enum dtype dst_dtype, const float *src, int32_t n, int32_t f)
{
#pragma omp parallel for schedule(static)
    for (int32_t i = 0; i < n; i++) {
        const float *gate = src + (int64_t)i * 2 * f, *up = gate + f;
        if (dst_dtype == DTYPE_F32) {
            float *out = (float *)dst + (int64_t)i * f;
#pragma omp simd
            for (int32_t j = 0; j < f; j++)
                out[j] = silu_fast(gate[j]) * up[j];
        } else {
            uint16_t *out = (uint16_t *)dst + (int64_t)i * f;
            for (int32_t j = 0; j < f; j++)
                out[j] = f32_to_bf16(silu_fast(gate[j]) * up[j]);
        }
    }
}

void cpu_ops_rope(float *x, int64_t row_stride, const int32_t *pos, int32_t n,
                  int32_t n_heads, int32_t head_dim, int32_t dims, const float *inv_freq)
{
    const int32_t half = dims / 2;
#pragma omp parallel for schedule(static)
    for (int32_t r = 0; r < n; r++) {
        float c[128], s[128]; /* dims <= head_dim <= 256 (cpu_attn_supports) */
        /* HF: the angle is the fp32 product position * inv_freq, then cos and sin. */
        for (int32_t i = 0; i < half; i++) {
            const float ang = (float)pos[r] * inv_freq[i];
            c[i] = cosf(ang);
            s[i] = sinf(ang);
        }
        for (int32_t h = 0; h < n_heads; h++) {
            float *v = x + r * row_stride + (int64_t)h * head_dim;
            for (int32_t i = 0; i < half; i++) {
                const float x1 = v[i], x2 = v[i + half];
                v[i] = x1 * c[i] - x2 * s[i];
                v[i + half] = x2 * c[i] + x1 * s[i];
            }
        }
    }
}

void cpu_ops_add(float *x, const float *y, int64_t n)
{
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; i++) x[i] += y[i];
}

void cpu_ops_to_bf16(uint16_t *dst, const float *src, int64_t n)
{
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) dst[i] = f32_to_bf16(src[i]);
}

void cpu_ops_gather_rows(float *dst, const float *src, const int32_t *rows, int32_t n_rows,
                         int32_t d)
{
    for (int32_t i = 0; i < n_rows; i++)
        memcpy(dst + (int64_t)i * d, src + (int64_t)rows[i] * d, (size_t)d * sizeof *dst);
}
