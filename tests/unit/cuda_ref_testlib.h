/*
 * cuda_ref_testlib.h - the CPU engine's side of the tests that check the CUDA host
 * references against it (test_cuda_ref.c for decode, test_cuda_prefill_ref.c for
 * chunked prefill): the fp16 case data widened to the engine's fp32, and one
 * cpu_attn_forward call set up as the CPU backend makes it.
 *
 * The cases (tests/lib/paged_case.h) hold fp16 K/V and qkv, as the
 * kernels read them; the engine runs on fp32 holding the same values widened, which
 * is exact, so any difference comes from the attention itself.
 */
#ifndef H2O_CUDA_REF_TESTLIB_H
#define H2O_CUDA_REF_TESTLIB_H

#include "cpu_attn.h"
#include "dtype.h"
#include "util.h"

#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>

/* dst [n] = src [n] widened from fp16 to fp32 (exactly). */
static inline void cuda_ref_test_widen(float *dst, const uint16_t *src, int64_t n)
{
    for (int64_t e = 0; e < n; e++)
        dst[e] = f16_to_f32(src[e]);
}

/*
 * The engine's attention for layer 0 on batch b: qkv [n_tok, 3 * n_head * head_dim]
 * and out [n_tok, n_head * head_dim] in fp32, over an fp32 pool (k32, v32, pos, score)
 * that it updates in place (K/V writes, H2O score sums). The scratch rows are sized
 * for max_slots, the longest sequence of the batch, per OpenMP thread.
 */
static inline void cuda_ref_test_cpu_attn(const struct be_batch *b, const float *qkv,
                                          float *out, float *k32, float *v32, int32_t *pos,
                                          float *score, int32_t n_head, int32_t head_dim,
                                          int32_t block_size, int32_t max_slots)
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
        .scale = 1.0f / sqrtf((float)head_dim),
        .scratch = scratch,
        .scratch_stride = stride,
    };
    cpu_attn_forward(&a);
    free(scratch);
}

#endif
