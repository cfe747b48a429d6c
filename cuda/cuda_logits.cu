/*
 * cuda_logits.cu - the rows a step samples, ready for cuda_sample (see
 * cuda_kernels.h): cuda_logits_rows copies logits row rows[i] of the forward to row i
 * of a dense buffer and applies that row's step 1-2 additions (logit_bias, then the
 * presence / frequency penalties, sampler.h) in order. Checked against
 * cuda_ref_logits_rows (cuda_ref.c), which uses the same index formulas.
 *
 * Several output rows may copy one forward row (n completions of one prompt), and
 * each gets its own additions, which is why the rows are copied rather than edited
 * in place.
 */
#include "cuda_kernels.h"

#include <stdint.h>

enum { LR_THREADS = 256 };

/*
 * grid n x LR_THREADS: CTA i copies src row rows[i] (vocab floats, float4 where the
 * row is aligned) to dst row i, waits, and then one thread adds the row's additions
 * add_off[i] .. add_off[i + 1] - 1 in order: a token may appear twice (a bias and a
 * penalty), and the CPU applies them one after the other, so the order fixes the
 * rounding. Additions are a handful per row (bias entries plus distinct generated
 * tokens); one thread is plenty.
 */
__global__ void cuda_logits_rows_kernel(float *dst, const float *src, const int32_t *rows,
                                        int32_t vocab, const int32_t *add_off,
                                        const int32_t *add_ids, const float *add_vals)
{
    const int64_t i = blockIdx.x;
    const float *s = src + (int64_t)rows[i] * vocab;
    float *d = dst + i * vocab;
    for (int32_t j = threadIdx.x; j < vocab; j += blockDim.x) d[j] = s[j];
    __syncthreads();
    if (threadIdx.x == 0)
        for (int32_t k = add_off[i]; k < add_off[i + 1]; k++) d[add_ids[k]] += add_vals[k];
}

extern "C" cudaError_t cuda_logits_rows(float *dst, const float *src, const int32_t *rows,
                                        int32_t n, int32_t vocab, const int32_t *add_off,
                                        const int32_t *add_ids, const float *add_vals,
                                        cudaStream_t stream)
{
    if (n < 0 || vocab <= 0 || n > 2147483647) return cudaErrorInvalidValue;
    if (n == 0) return cudaSuccess;
    cuda_logits_rows_kernel<<<(unsigned)n, LR_THREADS, 0, stream>>>(dst, src, rows, vocab,
                                                                     add_off, add_ids, add_vals);
    return cudaGetLastError();
}
