/*
 * cuda_layernorm.cu - LayerNorm over fp16 rows with fp32 statistics (see
 * cuda_kernels.h); the twin of cpu_ops_layernorm.
 *
 * One block per row. The row is read three times (sum, centred sum of squares,
 * output), as cpu_ops_layernorm's two-pass formula wants; the second and third reads of
 * a row of at most a few tens of KiB come from L1/L2, so DRAM sees each row once.
 */
#include "cuda_kernels.h"

#include <cuda_fp16.h>

/* A multiple of 32, at most 1024 (one warp's worth of partial sums in shared memory). */
enum { LN_THREADS = 256, LN_WARPS = LN_THREADS / 32 };

/* The sum of v over the block; every thread gets it. red: [LN_WARPS] shared floats. */
static __device__ float block_sum(float v, float *red)
{
    /* Within each warp by shuffles, then warp 0 adds the warps' sums. */
    for (int off = 16; off > 0; off /= 2)
        v += __shfl_xor_sync(0xffffffffu, v, off);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) red[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < LN_WARPS ? red[lane] : 0.0f;
        for (int off = 16; off > 0; off /= 2)
            v += __shfl_xor_sync(0xffffffffu, v, off);
        if (lane == 0) red[0] = v;
    }
    __syncthreads();
    v = red[0];
    __syncthreads(); /* red is reused by the next call */
    return v;
}

/*
 * dst [n, d] = LayerNorm(x [n, d]) * w + b, eps 1e-5. grid: n blocks, block:
 * LN_THREADS, each thread striding over the row's half2 pairs. dst may alias x: each
 * element is read for the output by the thread that writes it, after both reductions.
 */
__global__ __launch_bounds__(LN_THREADS) void cuda_layernorm_kernel(
    __half2 *dst, const __half2 *x, const __half2 *w, const __half2 *b, int32_t d2)
{
    __shared__ float red[LN_WARPS];
    const int64_t row = blockIdx.x;
    const __half2 *in = x + row * d2;
    __half2 *out = dst + row * d2;
    const float inv_d = 1.0f / (float)(2 * d2);

    float s = 0.0f;
    for (int32_t j = threadIdx.x; j < d2; j += blockDim.x) {
        const float2 v = __half22float2(in[j]);
        s += v.x + v.y;
    }
    const float mean = block_sum(s, red) * inv_d;

    float ss = 0.0f;
    for (int32_t j = threadIdx.x; j < d2; j += blockDim.x) {
        const float2 v = __half22float2(in[j]);
        ss += (v.x - mean) * (v.x - mean) + (v.y - mean) * (v.y - mean);
    }
    const float rstd = rsqrtf(block_sum(ss, red) * inv_d + 1e-5f);

    for (int32_t j = threadIdx.x; j < d2; j += blockDim.x) {
        const float2 v = __half22float2(in[j]);
        const float2 g = __half22float2(w[j]), c = __half22float2(b[j]);
        out[j] = __floats2half2_rn((v.x - mean) * rstd * g.x + c.x,
                                   (v.y - mean) * rstd * g.y + c.y);
    }
}

extern "C" cudaError_t cuda_layernorm(uint16_t *dst, const uint16_t *x, const uint16_t *w,
                                      const uint16_t *b, int32_t n, int32_t d,
                                      cudaStream_t stream)
{
    if (n < 0 || d < 0 || d % 2 != 0) return cudaErrorInvalidValue;
    if (n == 0 || d == 0) return cudaSuccess;
    cuda_layernorm_kernel<<<n, LN_THREADS, 0, stream>>>(
        (__half2 *)dst, (const __half2 *)x, (const __half2 *)w, (const __half2 *)b, d / 2);
    return cudaGetLastError();
}
