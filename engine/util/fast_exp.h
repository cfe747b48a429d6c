/*
 * fast_exp.h - e^x for x <= 0 in straight-line code the compiler turns into SIMD.
 *
 * glibc's expf is a call per element; in the sampler and in attention's softmax it
 * was most of the time. Shared here so both use the same approximation.
 */
#ifndef H2O_FAST_EXP_H
#define H2O_FAST_EXP_H

#include <stdint.h>
#include <string.h>

/* Below this argument fast_exp returns 0: e^-87 is about FLT_MIN, the smallest
 * normal float, and next to a maximum's weight of 1 nothing smaller matters. */
#define FAST_EXP_FLOOR (-87.0f)

static inline uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/*
 * x = n ln2 + r with |r| <= ln2 / 2; e^r by its Taylor series to r^6 (truncation
 * error below 2e-7 relative); 2^n goes straight into the exponent bits. Adding
 * 1.5 * 2^23 rounds x / ln2 to the nearest integer n and leaves n in the low
 * mantissa bits. Arguments below FAST_EXP_FLOOR, -inf included, give exactly 0, so
 * impossible tokens and masked slots keep weight 0. Only for x <= 0.
 */
static inline float fast_exp(float x)
{
    const float shifter = 12582912.0f; /* 1.5 * 2^23 */
    const float ln2_hi = 0.693145751953125f, ln2_lo = 1.42860676533018e-6f;
    float xc = x < FAST_EXP_FLOOR ? FAST_EXP_FLOOR : x;
    float kf = xc * 1.44269504088896341f + shifter;
    uint32_t n_bits = f32_bits(kf) - f32_bits(shifter); /* n, two's complement */
    kf -= shifter;
    float r = (xc - kf * ln2_hi) - kf * ln2_lo;
    float p = 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    float scale = bits_f32((n_bits + 127u) << 23); /* 2^n, n in [-126, 1] */
    return x < FAST_EXP_FLOOR ? 0.0f : p * scale;
}

#endif
