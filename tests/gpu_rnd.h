/*
 * gpu_rnd.h - the fixed random inputs of the GPU tests (xorshift64*, uniform fp32,
 * fp16 arrays), CUDA-free, so that a CPU test can regenerate a GPU test's data
 * exactly: tests/unit/test_gemm_tol.c replays tests/gpu/test_cuda_gemm.c's inputs
 * on the host. tests/gpu/gpu_testlib.h includes it; the numbers are the ones that
 * file always produced (the code moved here unchanged).
 *
 * gpu_rnd_skip jumps the generator ahead by n draws in at most 64 x 64 bit operations
 * (the state update is linear over GF(2), so 2^i steps are one 64 x 64 bit matrix,
 * made once by repeated squaring: struct gpu_rnd_jump), so a replay can regenerate
 * only the rows and columns it checks of a large matrix.
 *
 * Header-only (static inline); the state is the caller's uint64_t, the jump table
 * the caller's too. Thread: any (no shared state).
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

/* The state update to the powers 2^0 .. 2^63, for gpu_rnd_skip (32 KiB). */
struct gpu_rnd_jump {
    uint64_t m[64][64]; /* m[i]: 2^i steps, as gpu_rnd_apply takes it */
};

/* Fill *j: the one step, then each power the square of the one before. */
static inline void gpu_rnd_jump_init(struct gpu_rnd_jump *j)
{
    for (int b = 0; b < 64; b++)
        j->m[0][b] = gpu_rnd_step((uint64_t)1 << b);
    for (int i = 1; i < 64; i++)
        for (int b = 0; b < 64; b++)
            j->m[i][b] = gpu_rnd_apply(j->m[i - 1], j->m[i - 1][b]);
}

/* Advance *st by n draws, as n calls of gpu_rnd_uniform would (their values unused):
 * one matrix of *j per set bit of n. */
static inline void gpu_rnd_skip(const struct gpu_rnd_jump *j, uint64_t *st, uint64_t n)
{
    for (int i = 0; n; i++, n >>= 1)
        if (n & 1u) *st = gpu_rnd_apply(j->m[i], *st);
}

#endif
