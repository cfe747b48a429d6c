/*
 * cuda_ref_testlib.h - the CPU engine's side of the tests that check the CUDA host
 * references against it (test_cuda_ref.c for decode, test_cuda_prefill_ref.c for
 * chunked prefill): the fp16 case data widened to the engine's fp32, and one
 * cpu_attn_forward call set up as the CPU backend makes it.
 *
 * The cases (tests/lib/paged_case.h) hold fp16 K/V and qkv, as the
 * kernels read them; the engine runs on fp32 holding the same values widened, which
 * is exact, so any difference comes from the attention itself. An int8 case
 * (paged_pool_to_int8) runs the engine on its int8 cache (kv_dtype int8) holding the
 * very same bytes and scales: struct cuda_ref_test_pool is either.
 */
#ifndef H2O_CUDA_REF_TESTLIB_H
#define H2O_CUDA_REF_TESTLIB_H

#include "cpu_attn.h"
#include "dtype.h"
#include "paged_case.h"
#include "util.h"

#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>

/* dst [n] = src [n] widened from fp16 to fp32 (exactly). */
void cuda_ref_test_widen(float *dst, const uint16_t *src, int64_t n);

/*
 * The engine's attention for layer 0 on batch b: qkv [n_tok, 3 * n_head * head_dim]
 * and out [n_tok, n_head * head_dim] in fp32, over an fp32 pool (k32, v32, pos, score)
 * that it updates in place (K/V writes, H2O score sums). The scratch rows are sized
 * for max_slots, the longest sequence of the batch, per OpenMP thread.
 */
void cuda_ref_test_cpu_attn(const struct be_batch *b, const float *qkv, float *out,
                            float *k32, float *v32, int32_t *pos, float *score,
                            int32_t n_head, int32_t head_dim, int32_t block_size,
                            int32_t max_slots);

/* The same with n_head query heads over n_kv KV heads (qkv rows (n_head + 2 n_kv) *
 * head_dim, the pool per KV head) and a sliding window (0 = none). */
void cuda_ref_test_cpu_attn_kv(const struct be_batch *b, const float *qkv, float *out,
                               float *k32, float *v32, int32_t *pos, float *score,
                               int32_t n_head, int32_t n_kv, int32_t window,
                               int32_t head_dim, int32_t block_size, int32_t max_slots);

/*
 * The engine's own copy of a case's pool: fp32 K/V widened from the fp16 ones, or,
 * when the case is an int8 cache, the same int8 K/V and scales (kv_dtype int8); pos
 * and score copied. Owns its arrays (cuda_ref_test_pool_copy allocates them,
 * cuda_ref_test_pool_free frees them); the case's pool is only read. Thread: any, one
 * pool per thread.
 */
struct cuda_ref_test_pool {
    struct cpu_kv_layer kv; /* k / v are float * (fp32) or int8_t * (int8) */
    enum dtype dtype;       /* DTYPE_F32 or DTYPE_I8 */
    int64_t n_slot;         /* slots over all heads */
    int32_t head_dim, block_size;
};

void cuda_ref_test_pool_copy(struct cuda_ref_test_pool *e, const struct paged_pool *p);
void cuda_ref_test_pool_free(struct cuda_ref_test_pool *e);

/* K/V elements (and with int8 the scales) of the engine's pool that differ from the
 * case's, bit for bit: the same writes on both sides give 0. */
int64_t cuda_ref_test_pool_kv_diffs(const struct cuda_ref_test_pool *e,
                                    const struct paged_pool *p);

/* cuda_ref_test_cpu_attn_kv over the engine's pool e, of either dtype. */
void cuda_ref_test_cpu_attn_pool(const struct be_batch *b, const float *qkv, float *out,
                                 struct cuda_ref_test_pool *e, int32_t n_head, int32_t n_kv,
                                 int32_t window, int32_t block_size, int32_t max_slots);

#endif
