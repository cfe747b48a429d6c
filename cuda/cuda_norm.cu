/*
 * cuda_norm.cu - RMSNorm, and LayerNorm with the model's eps, over fp16 rows with fp32
 * statistics (see cuda_kernels.h); the twin of cpu_ops_norm. OPT's LayerNorm (eps
 * 1e-5, always a bias) stays cuda_layernorm.cu, unchanged.
 *
 * One block per row, as cuda_layernorm: the row is read for the statistics (twice for
 * LayerNorm: mean, then the centred squares) and once more for the output; the later
 * reads of a row of a few tens of KiB come from L1/L2.
 */
#include "cuda_kernels.h"

#include <cuda_fp16.h>

/* A multiple of 32, at most 1024 (one warp's worth of partial sums in shared memory). */
enum { NORM_THREADS = 256, NORM_WARPS = NORM_THREADS / 32 };

/* The sum of v over the block; every thread gets it. red: [NORM_WARPS] shared floats. */
static __device__ float norm_block_sum(float v, float *red)
{
    for (int off = 16; off > 0; off /= 2)
        v += __shfl_xor_sync(0xffffffffu, v, off);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) red[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < NORM_WARPS ? red[lane] : 0.0f;
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
 * dst [n, d] = norm(x [n, d]) * w (+ b). grid: n blocks, block: NORM_THREADS, each
 * thread striding over the row's half2 pairs. rms: the mean stays 0 and b is unread.
 * dst may alias x: each element is read for the output by the thread that writes it,
 * after the reductions.
 */
__global__ __launch_bounds__(NORM_THREADS) void cuda_norm_kernel(__half2 *dst,
                                                                 const __half2 *x,
                                                                 const __half2 *w,
                                                                 const __half2 *b, bool rms,
                                                                 float eps, int32_t d2)
{
    __shared__ float red[NORM_WARPS];
    const int64_t row = blockIdx.x;
    const __half2 *in = x + row * d2;
    __half2 *out = dst + row * d2;
    const float inv_d = 1.0f / (float)(2 * d2);

    float mean = 0.0f;
    if (!rms) {
        float s = 0.0f;
        for (int32_t j = threadIdx.x; j < d2; j += blockDim.x) {
            const float2 v = __half22float2(in[j]);
            s += v.x + v.y;
        }
        mean = norm_block_sum(s, red) * inv_d;
    }

    float ss = 0.0f;
    for (int32_t j = threadIdx.x; j < d2; j += blockDim.x) {
        const float2 v = __half22float2(in[j]);
        ss += (v.x - mean) * (v.x - mean) + (v.y - mean) * (v.y - mean);
    }
    /* 1 / sqrtf rather than rsqrtf: rsqrtf is 2 ulp off, and the CPU divides. */
    const float rstd = 1.0f / sqrtf(norm_block_sum(ss, red) * inv_d + eps);

    for (int32_t j = threadIdx.x; j < d2; j += blockDim.x) {
        const float2 v = __half22float2(in[j]);
        const float2 g = __half22float2(w[j]);
        const float2 c = rms ? make_float2(0.0f, 0.0f) : __half22float2(b[j]);
        out[j] = __floats2half2_rn((v.x - mean) * rstd * g.x + c.x,
                                   (v.y - mean) * rstd * g.y + c.y);
    }
}

extern "C" cudaError_t cuda_norm(uint16_t *dst, const uint16_t *x, const uint16_t *w,
                                 const uint16_t *b, bool rms, float eps, int32_t n,
                                 int32_t d, cudaStream_t stream)
{
    if (n < 0 || d < 0 || d % 2 != 0 || (!rms && !b) || !(eps >= 0.0f))
        return cudaErrorInvalidValue;
    if (n == 0 || d == 0) return cudaSuccess;
    cuda_norm_kernel<<<n, NORM_THREADS, 0, stream>>>((__half2 *)dst, (const __half2 *)x,
                                                     (const __half2 *)w, (const __half2 *)b,
                                                     rms, eps, d / 2);
    return cudaGetLastError();
}
