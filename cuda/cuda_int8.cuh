/*
 * cuda_int8.cuh - the int8 KV cache's quantizer rule on the device, shared by the two
 * kernels that write K/V (cuda_decode_attn.cu, cuda_prefill_attn.cu).
 *
 * The rule is the CPU backend's cpu_attn_int8_quantize (engine/cpu/cpu_attn_int8.c)
 * and the host reference's cuda_ref_int8_quantize (cuda/cuda_ref.c), operation for
 * operation: amax = max |x| over the head (fmaxf, exact in any order, so the kernels
 * may reduce it in a tree), inv = 127 / amax, element = round-to-nearest-even of
 * x * inv clamped to [-127, 127], scale = amax / 127. Division and the product are
 * IEEE fp32 on the device as on the host (the build uses no fast-math), and
 * __float2int_rn rounds as lrintf does in the default rounding mode, so a slot
 * written here holds the bytes and the scale the CPU would write from the same
 * values.
 * Thread: device code, pure.
 */
#ifndef H2O_CUDA_INT8_CUH
#define H2O_CUDA_INT8_CUH

#include <stdint.h>

/* The element of x in a head whose max |x| is amax (0 when amax is 0: an all-zero
 * head reads back zeros whatever the scale). */
static __device__ __forceinline__ int8_t cuda_int8_elem(float x, float amax)
{
    if (amax == 0.0f) return 0;
    const float inv = 127.0f / amax;
    /* x * inv may round past 127 by an ulp: clamp so it never wraps. */
    const int e = __float2int_rn(x * inv);
    return (int8_t)(e > 127 ? 127 : e < -127 ? -127 : e);
}

/* The scale stored for a head whose max |x| is amax. */
static __device__ __forceinline__ float cuda_int8_scale(float amax)
{
    return amax == 0.0f ? 0.0f : amax / 127.0f;
}

#endif
