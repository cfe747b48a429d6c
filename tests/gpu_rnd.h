/*
 * gpu_rnd.h - the fixed random inputs of the GPU tests (xorshift64*, uniform fp32,
 * fp16 arrays), CUDA-free, so that a CPU test can regenerate a GPU test's data
 * exactly: tests/unit/test_gemm_tol.c replays tests/gpu/test_cuda_gemm.c's inputs
 * on the host. tests/gpu/gpu_testlib.h includes it; the numbers are the ones that
 * file always produced (the code moved here unchanged).
 *
 * gpu_rnd_skip jumps the generator ahead by n draws in O(64^2 log n) bit operations
 * (the state update is linear over GF(2), so n steps are one 64 x 64 bit matrix,
 * built by repeated squaring), so a replay can regenerate only the rows and columns
 * it checks of a large matrix.
 *
 * Header-only (static inline); state is the caller's uint64_t. Thread: any (no
 * shared state).
 */
#ifndef H2O_GPU_RND_H
#define H2O_GPU_RND_H

#include "dtype.h"

#include <stdint.h>
#include <stdlib.h>

/* The state update of one draw: xorshift64 (12, 25, 27). */
static inline uint64_t gpu_rnd_step(uint64_t s)
{
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    return s;
}

/* xorshift64*, uniform in [lo, hi): the same inputs on every run from the same *st. */
static inline float gpu_rnd_uniform(uint64_t *st, float lo, float hi)
{
    *st = gpu_rnd_step(*st);
    const uint64_t r = *st * 0x2545f4914f6cdd1dull;
    return lo + (hi - lo) * (float)(r >> 40) / (float)(1ull << 24);
}

/* n fp16 values uniform in [lo, hi). Caller frees. */
static inline uint16_t *gpu_rnd_f16(uint64_t *st, int64_t n, float lo, float hi)
{
    uint16_t *h = malloc((size_t)n * sizeof *h);
    for (int64_t i = 0; i < n; i++)
        h[i] = f32_to_f16(gpu_rnd_uniform(st, lo, hi));
    return h;
}

/* m [64] (column j = the image of bit j) applied to v over GF(2). */
static inline uint64_t gpu_rnd_apply(const uint64_t *m, uint64_t v)
{
    uint64_t r = 0;
    for (int j = 0; v; j++, v >>= 1)
        if (v & 1u) r ^= m[j];
    return r;
}

/* Advance *st by n draws, as n calls of gpu_rnd_uniform would (their values unused). */
static inline void gpu_rnd_skip(uint64_t *st, uint64_t n)
{
    uint64_t m[64], sq[64]; /* m = the step matrix to the power 2^i */
    for (int j = 0; j < 64; j++)
        m[j] = gpu_rnd_step((uint64_t)1 << j);
    for (; n; n >>= 1) {
        if (n & 1u) *st = gpu_rnd_apply(m, *st);
        if (n > 1) {
            for (int j = 0; j < 64; j++)
                sq[j] = gpu_rnd_apply(m, m[j]);
            for (int j = 0; j < 64; j++)
                m[j] = sq[j];
        }
    }
}

#endif
