/*
 * cuda_ref_testlib.c - the CPU engine's side of the CUDA host reference tests
 * (cuda_ref_testlib.h).
 */
#include "cuda_ref_testlib.h"

#include "util.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>

void cuda_ref_test_widen(float *dst, const uint16_t *src, int64_t n)
{
    for (int64_t e = 0; e < n; e++)
        dst[e] = f16_to_f32(src[e]);
}

void cuda_ref_test_cpu_attn(const struct be_batch *b, const float *qkv, float *out,
                            float *k32, float *v32, int32_t *pos, float *score,
                            int32_t n_head, int32_t head_dim, int32_t block_size,
                            int32_t max_slots)
{
    cuda_ref_test_cpu_attn_kv(b, qkv, out, k32, v32, pos, score, n_head, n_head, 0,
                              head_dim, block_size, max_slots);
}

void cuda_ref_test_cpu_attn_kv(const struct be_batch *b, const float *qkv, float *out,
                               float *k32, float *v32, int32_t *pos, float *score,
                               int32_t n_head, int32_t n_kv, int32_t window,
                               int32_t head_dim, int32_t block_size, int32_t max_slots)
{
    const int32_t stride = cpu_attn_scratch_floats(max_slots, block_size, n_head);
    float *scratch = xmalloc((size_t)omp_get_max_threads() * stride * sizeof *scratch);
    struct cpu_attn_args a = {
        .batch = b,
        .qkv = qkv,
        .out = out,
        .out_dtype = DTYPE_F32,
        .kv = {.k = k32, .v = v32, .pos = pos, .score = score},
        .kv_dtype = DTYPE_F32,
        .layer = 0,
        .n_head = n_head,
        .head_dim = head_dim,
        .block_size = block_size,
        .n_kv = n_kv,
        .window = window,
        .scale = 1.0f / sqrtf((float)head_dim),
        .scratch = scratch,
        .scratch_stride = stride,
    };
    cpu_attn_forward(&a);
    free(scratch);
}
