/*
 * cpu_ops.c - embedding, LayerNorm, residual add, conversions (see cpu_ops.h).
 */
#include "cpu_ops.h"

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
