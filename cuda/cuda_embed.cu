/*
 * cuda_embed.cu - token embedding plus learned positions (see cuda_kernels.h); the
 * twin of cpu_ops_embed + cpu_ops_add_positions.
 *
 * One block per row, its threads striding over the row's half2 pairs: every load and
 * store is coalesced, and a row's token id and position are read once per thread.
 */
#include "cuda_kernels.h"

#include <cuda_fp16.h>

enum { EMBED_THREADS = 256 };

/*
 * dst [n, d] = (tok ? tok [ids[i], :] : dst [i, :]) + (pos_table ? pos_table [pos[i] +
 * offset, :] : 0). grid: n blocks, block: EMBED_THREADS. Sums in fp32, one rounding.
 */
__global__ void cuda_embed_kernel(__half2 *dst, const __half2 *tok, const int32_t *ids,
                                  const __half2 *pos_table, const int32_t *pos,
                                  int32_t offset, int32_t d2)
{
    const int64_t row = blockIdx.x;
    __half2 *out = dst + row * d2;
    const __half2 *t = tok ? tok + (int64_t)ids[row] * d2 : out;
    const __half2 *p = pos_table ? pos_table + (int64_t)(pos[row] + offset) * d2 : nullptr;
    for (int32_t j = threadIdx.x; j < d2; j += blockDim.x) {
        float2 v = __half22float2(t[j]);
        if (p) {
            const float2 q = __half22float2(p[j]);
            v.x += q.x;
            v.y += q.y;
        }
        out[j] = __float22half2_rn(v);
    }
}

static cudaError_t launch(uint16_t *dst, const uint16_t *tok, const int32_t *ids,
                          const uint16_t *pos_table, const int32_t *pos, int32_t offset,
                          int32_t n, int32_t d, cudaStream_t stream)
{
    if (n < 0 || d < 0 || d % 2 != 0) return cudaErrorInvalidValue;
    if (n == 0 || d == 0) return cudaSuccess;
    cuda_embed_kernel<<<n, EMBED_THREADS, 0, stream>>>((__half2 *)dst, (const __half2 *)tok,
                                                       ids, (const __half2 *)pos_table, pos,
                                                       offset, d / 2);
    return cudaGetLastError();
}

extern "C" cudaError_t cuda_embed(uint16_t *dst, const uint16_t *tok, const int32_t *ids,
                                  const uint16_t *pos_table, const int32_t *pos,
                                  int32_t offset, int32_t n, int32_t d, cudaStream_t stream)
{
    if (!tok) return cudaErrorInvalidValue;
    return launch(dst, tok, ids, pos_table, pos, offset, n, d, stream);
}

extern "C" cudaError_t cuda_embed_positions(uint16_t *x, const uint16_t *pos_table,
                                            const int32_t *pos, int32_t offset, int32_t n,
                                            int32_t d, cudaStream_t stream)
{
    if (!pos_table) return cudaErrorInvalidValue;
    return launch(x, nullptr, nullptr, pos_table, pos, offset, n, d, stream);
}
