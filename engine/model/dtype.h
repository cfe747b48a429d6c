/*
 * dtype.h - element types of tensors on disk and in memory, and bf16/fp16 <-> fp32.
 */
#ifndef H2O_DTYPE_H
#define H2O_DTYPE_H

#include <stdint.h>
#include <string.h>

enum dtype {
    DTYPE_F32 = 0,
    DTYPE_F16 = 1,
    DTYPE_BF16 = 2,
    /* Symmetric int8 with an fp32 scale per (token, head): a KV cache storage type
     * only (--kv-cache-dtype int8), never weights or activations. */
    DTYPE_I8 = 3,
};

static inline int dtype_size(enum dtype t)
{
    return t == DTYPE_F32 ? 4 : t == DTYPE_I8 ? 1 : 2;
}

static inline const char *dtype_name(enum dtype t)
{
    return t == DTYPE_F32   ? "fp32"
           : t == DTYPE_F16 ? "fp16"
           : t == DTYPE_I8  ? "int8"
                            : "bf16";
}

static inline float bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Round to nearest even, as PyTorch does; NaN stays NaN. */
static inline uint16_t f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* IEEE half <-> float by bit manipulation (C11 has no half type). */
static inline float f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, u;
    if (exp == 0x1f) {
        u = sign | 0x7f800000u | (man << 13); /* inf / NaN */
    } else if (exp != 0) {
        u = sign | ((exp + 112u) << 23) | (man << 13);
    } else if (man == 0) {
        u = sign; /* signed zero */
    } else {
        /* Subnormal: shift the mantissa up until its leading 1 is implicit. */
        exp = 113;
        while (!(man & 0x400u)) {
            man <<= 1;
            exp--;
        }
        u = sign | (exp << 23) | ((man & 0x3ffu) << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Round to nearest even; overflow gives inf; NaN stays NaN. */
static inline uint16_t f32_to_f16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return sign | 0x7e00u;
    if (a >= 0x477ff000u) return sign | 0x7c00u; /* rounds to >= 65520: inf */
    if (a < 0x38800000u) {
        /* Result is subnormal or zero: scale so the rounding happens at bit 0. */
        if (a < 0x33000000u) return sign;       /* below half the smallest subnormal */
        uint32_t man = (a & 0x7fffffu) | 0x800000u;
        int shift = 126 - (int)(a >> 23);       /* 14..24 */
        uint32_t half = 1u << (shift - 1), rem = man & ((1u << shift) - 1);
        uint32_t r = man >> shift;
        if (rem > half || (rem == half && (r & 1u))) r++;
        return sign | (uint16_t)r;
    }
    uint32_t r = a - 0x38000000u; /* rebias the exponent from 127 to 15 */
    r += 0xfffu + ((r >> 13) & 1u);
    return sign | (uint16_t)(r >> 13);
}

#endif
