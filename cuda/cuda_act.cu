/*
 * cuda_act.cu - the activations of the families' MLPs after a cuBLAS projection (see
 * cuda_kernels.h): bias + GELU (exact or tanh; GPT-NeoX's fc1) and SwiGLU's
 * silu(gate) * up (Llama, Mistral, Qwen2), the twins of cpu_ops_act and cpu_ops_swiglu.
 * OPT's bias + ReLU stays cuda_bias_relu.cu.
 *
 * Both are one pass over fp16 pairs with the arithmetic in fp32 and one rounding on
 * the store: the bias is not rounded to fp16 before the activation (oneDNN fuses it
 * on the CPU the same way). Grids as cuda_bias_relu: the row from blockIdx.x, a run of
 * ACT_THREADS pairs from blockIdx.y, so no 64-bit division per element.
 */
#include "cuda_kernels.h"

#include <cuda_fp16.h>

enum { ACT_THREADS = 256 };

/* cuda_ref_act_one on the device: the same formulas with CUDA's full-precision erff,
 * tanhf and expf (a few ulp from glibc's, far below one fp16 rounding). */
static __device__ float act_one(float x, int act)
{
    switch (act) {
    case CUDA_ACT_RELU: return x > 0.0f ? x : 0.0f;
    case CUDA_ACT_GELU: return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
    case CUDA_ACT_GELU_TANH:
        return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
    case CUDA_ACT_SILU: return x / (1.0f + expf(-x));
    }
    return x;
}

/* x [n, m] = act(x + bias), as n rows of m2 pairs; bias may be NULL. grid: (n,
 * ceil(m2 / ACT_THREADS)), block: ACT_THREADS. */
__global__ void cuda_act_kernel(__half2 *x, const __half2 *bias, int32_t m2, int act)
{
    const int32_t col = blockIdx.y * blockDim.x + threadIdx.x;
    if (col >= m2) return;
    __half2 *p = x + (int64_t)blockIdx.x * m2 + col;
    float2 v = __half22float2(*p);
    if (bias) {
        const float2 c = __half22float2(bias[col]);
        v.x += c.x;
        v.y += c.y;
    }
    *p = __floats2half2_rn(act_one(v.x, act), act_one(v.y, act));
}

/* dst [n, f2 pairs] = silu(src[:, :f]) * src[:, f:], src rows of 2 f2 pairs. grid: (n,
 * ceil(f2 / ACT_THREADS)), block: ACT_THREADS. */
__global__ void cuda_act_swiglu_kernel(__half2 *dst, const __half2 *src, int32_t f2)
{
    const int32_t col = blockIdx.y * blockDim.x + threadIdx.x;
    if (col >= f2) return;
    const __half2 *gate = src + (int64_t)blockIdx.x * 2 * f2;
    const float2 g = __half22float2(gate[col]), u = __half22float2(gate[f2 + col]);
    dst[(int64_t)blockIdx.x * f2 + col] = __floats2half2_rn(
        act_one(g.x, CUDA_ACT_SILU) * u.x, act_one(g.y, CUDA_ACT_SILU) * u.y);
}

extern "C" cudaError_t cuda_act(uint16_t *x, const uint16_t *bias, int32_t n, int32_t m,
                                enum cuda_act act, cudaStream_t stream)
{
    if (n < 0 || m < 0 || m % 2 != 0 || act < CUDA_ACT_RELU || act > CUDA_ACT_SILU)
        return cudaErrorInvalidValue;
    if (n == 0 || m == 0) return cudaSuccess;
    const int32_t m2 = m / 2, chunks = (m2 + ACT_THREADS - 1) / ACT_THREADS;
    if (chunks > 65535) return cudaErrorInvalidValue; /* gridDim.y limit: m < 2^25 */
    cuda_act_kernel<<<dim3(n, chunks), ACT_THREADS, 0, stream>>>(
        (__half2 *)x, (const __half2 *)bias, m2, (int)act);
    return cudaGetLastError();
}

extern "C" cudaError_t cuda_act_swiglu(uint16_t *dst, const uint16_t *src, int32_t n,
                                       int32_t f, cudaStream_t stream)
{
    if (n < 0 || f < 0 || f % 2 != 0) return cudaErrorInvalidValue;
    if (n == 0 || f == 0) return cudaSuccess;
    const int32_t f2 = f / 2, chunks = (f2 + ACT_THREADS - 1) / ACT_THREADS;
    if (chunks > 65535) return cudaErrorInvalidValue;
    cuda_act_swiglu_kernel<<<dim3(n, chunks), ACT_THREADS, 0, stream>>>(
        (__half2 *)dst, (const __half2 *)src, f2);
    return cudaGetLastError();
}
