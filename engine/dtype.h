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
};

static inline int dtype_size(enum dtype t)
{
    return t == DTYPE_F32 ? 4 : 2;
}

static inline const char *dtype_name(enum dtype t)
{
    return t == DTYPE_F32 ? "fp32" : t == DTYPE_F16 ? "fp16" : "bf16";
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

static inline float f16_to_f32(uint16_t h)
{
    return (float)*(const _Float16 *)&h;
}

static inline uint16_t f32_to_f16(float f)
{
    _Float16 h = (_Float16)f;
    uint16_t u;
    memcpy(&u, &h, 2);
    return u;
}

#endif
