/*
 * cuda_add.cu - the residual add x += y over fp16 vectors (see cuda_kernels.h); the
 * twin of cpu_ops_add.
 *
 * One thread per half2 pair; the last thread also takes the odd element when n is odd.
 */
#include "cuda_kernels.h"

#include <cuda_fp16.h>

enum { ADD_THREADS = 256 };

/* x [n] += y [n] in fp32, rounded once. grid: ceil(ceil(n / 2) / ADD_THREADS). */
__global__ void cuda_add_kernel(__half *x, const __half *y, int64_t n)
{
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t j = 2 * i;
    if (j + 1 < n) {
        __half2 *x2 = (__half2 *)(x + j);
        const float2 a = __half22float2(*x2), b = __half22float2(*(const __half2 *)(y + j));
        *x2 = __floats2half2_rn(a.x + b.x, a.y + b.y);
    } else if (j < n) {
        x[j] = __float2half_rn(__half2float(x[j]) + __half2float(y[j]));
    }
}

extern "C" cudaError_t cuda_add(uint16_t *x, const uint16_t *y, int64_t n,
                                cudaStream_t stream)
{
    if (n < 0) return cudaErrorInvalidValue;
    if (n == 0) return cudaSuccess;
    const int64_t pairs = (n + 1) / 2;
    const int64_t blocks = (pairs + ADD_THREADS - 1) / ADD_THREADS;
    if (blocks > INT32_MAX) return cudaErrorInvalidValue; /* gridDim.x limit */
    cuda_add_kernel<<<(unsigned)blocks, ADD_THREADS, 0, stream>>>((__half *)x,
                                                                  (const __half *)y, n);
    return cudaGetLastError();
}
