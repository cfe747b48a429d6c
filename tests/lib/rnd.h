/*
 * rnd.h - the tests' random numbers: one 64-bit LCG (Knuth's MMIX constants), its
 * high 31 bits per draw. A test's data is a function of its seed alone, so a failure
 * reproduces. The GPU tests' own generator (xorshift64*) is gpu_rnd.h's.
 * Header-only (static inline); the state is the caller's uint64_t. Thread: any.
 */
#ifndef H2O_TEST_RND_H
#define H2O_TEST_RND_H

#include <stdint.h>

static inline uint64_t lcg(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

/* A uniform integer in [lo, hi]. */
static inline int32_t lcg_range(uint64_t *s, int32_t lo, int32_t hi)
{
    return lo + (int32_t)(lcg(s) % (uint64_t)(hi - lo + 1));
}

/* A uniform integer in [0, n). */
static inline int32_t lcg_below(uint64_t *s, int32_t n)
{
    return (int32_t)(lcg(s) % (uint64_t)n);
}

/* A uniform float in [lo, hi), in steps of (hi - lo) / 2^24. */
static inline float lcg_float(uint64_t *s, float lo, float hi)
{
    return lo + (hi - lo) * (float)(lcg(s) & 0xffffff) / (float)(1 << 24);
}

#endif
