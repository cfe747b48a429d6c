/*
 * cuda_rope.cu - rotary positions on fp16 q and k rows in place (see cuda_kernels.h),
 * the twin of cpu_ops_rope: rotate_half pairs (i, i + dims / 2) of the first `dims`
 * elements of each head, turned by the angle (float)pos * inv_freq[i].
 *
 * The inverse frequencies come from the host (arch_rope_inv_freq: theta, linear or
 * llama3 scaling), so the device never recomputes a pow that could round differently
 * from transformers'. The angle is the same fp32 product as on the CPU; cosf and sinf
 * are CUDA's full-precision ones (with the slow path for large arguments, so a
 * position of 100k is not off by the argument reduction of __cosf).
 *
 * grid: (n rows, n_heads), block: ROPE_THREADS threads striding over the dims / 2
 * pairs. The pairs are dims / 2 apart, so elements are moved one __half at a time
 * (2-byte aligned pointers suffice); rotary runs once per token and layer on n_head +
 * n_kv_head heads, a few hundred KiB per step, and is not worth a vector layout.
 */
#include "cuda_kernels.h"

#include <cuda_fp16.h>

enum { ROPE_THREADS = 64 };

__global__ void cuda_rope_kernel(__half *x, int64_t row_stride, const int32_t *pos,
                                 const float *inv_freq, int32_t head_dim, int32_t half)
{
    __half *v = x + blockIdx.x * row_stride + (int64_t)blockIdx.y * head_dim;
    const float p = (float)pos[blockIdx.x];
    for (int32_t i = threadIdx.x; i < half; i += blockDim.x) {
        const float ang = p * inv_freq[i];
        const float c = cosf(ang), s = sinf(ang);
        const float x1 = __half2float(v[i]), x2 = __half2float(v[i + half]);
        v[i] = __float2half_rn(x1 * c - x2 * s);
        v[i + half] = __float2half_rn(x2 * c + x1 * s);
    }
}

extern "C" cudaError_t cuda_rope(uint16_t *x, int64_t row_stride, const int32_t *pos,
                                 const float *inv_freq, int32_t n, int32_t n_heads,
                                 int32_t head_dim, int32_t dims, cudaStream_t stream)
{
    if (n < 0 || n_heads < 0 || n_heads > 65535 || dims <= 0 || dims % 2 != 0 ||
        dims > head_dim || row_stride < (int64_t)n_heads * head_dim)
        return cudaErrorInvalidValue;
    if (n == 0 || n_heads == 0) return cudaSuccess;
    cuda_rope_kernel<<<dim3(n, n_heads), ROPE_THREADS, 0, stream>>>(
        (__half *)x, row_stride, pos, inv_freq, head_dim, dims / 2);
    return cudaGetLastError();
}
