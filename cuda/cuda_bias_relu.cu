/*
 * cuda_bias_relu.cu - the bias (+ ReLU) epilogue of a projection (see cuda_kernels.h).
 * On the CPU oneDNN fuses both into the matmul; cuBLAS's GemmEx does not, so the CUDA
 * backend runs this after each projection (fc1 with relu, the others without).
 *
 * A 2-D grid: blockIdx.x is the row, blockIdx.y a run of BIAS_THREADS column pairs,
 * one pair per thread. The column comes from the grid, not from a 64-bit modulo of a
 * flat index (which costs more than the memory access it would address), and a decode
 * step of a few rows still gets m / 512 blocks per row.
 */
#include "cuda_kernels.h"

#include <cuda_fp16.h>

enum { BIAS_THREADS = 256 };

/* x [n, m] = act(x + bias [m]), as n rows of m2 pairs. grid: (n, ceil(m2 /
 * BIAS_THREADS)), block: BIAS_THREADS. */
__global__ void cuda_bias_relu_kernel(__half2 *x, const __half2 *bias, int32_t m2,
                                      bool relu)
{
    const int32_t col = blockIdx.y * blockDim.x + threadIdx.x;
    if (col >= m2) return;
    __half2 *p = x + (int64_t)blockIdx.x * m2 + col;
    float2 v = __half22float2(*p);
    const float2 c = __half22float2(bias[col]);
    v.x += c.x;
    v.y += c.y;
    if (relu) {
        v.x = fmaxf(v.x, 0.0f);
        v.y = fmaxf(v.y, 0.0f);
    }
    *p = __float22half2_rn(v);
}

extern "C" cudaError_t cuda_bias_relu(uint16_t *x, const uint16_t *bias, int32_t n,
                                      int32_t m, bool relu, cudaStream_t stream)
{
    if (n < 0 || m < 0 || m % 2 != 0) return cudaErrorInvalidValue;
    if (n == 0 || m == 0) return cudaSuccess;
    const int32_t m2 = m / 2, chunks = (m2 + BIAS_THREADS - 1) / BIAS_THREADS;
    if (chunks > 65535) return cudaErrorInvalidValue; /* gridDim.y limit: m < 2^25 */
    cuda_bias_relu_kernel<<<dim3(n, chunks), BIAS_THREADS, 0, stream>>>(
        (__half2 *)x, (const __half2 *)bias, m2, relu);
    return cudaGetLastError();
}
