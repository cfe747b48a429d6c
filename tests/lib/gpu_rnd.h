/*
 * gpu_rnd.h - the fixed random inputs of the GPU tests (xorshift64*, uniform fp32,
 * fp16 arrays), CUDA-free, so that a CPU test can regenerate a GPU test's data
 * exactly: tests/unit/test_gemm_tol.c replays tests/gpu/test_cuda_gemm.c's inputs
 * on the host. tests/lib/gpu_testlib.h includes it; the numbers are the ones that
 * file always produced (the code moved here unchanged).
 *
 * gpu_rnd_skip jumps the generator ahead by n draws in at most 64 x 64 bit operations
 * (the state update is linear over GF(2), so 2^i steps are one 64 x 64 bit matrix,
 * made once by repeated squaring: struct gpu_rnd_jump), so a replay can regenerate
 * only the rows and columns it checks of a large matrix.
 *
 * The state is the caller's uint64_t, the jump table the caller's too. Thread: any
 * (no shared state).
 */
#ifndef H2O_GPU_RND_H
#define H2O_GPU_RND_H

#include "dtype.h"

#include <stdint.h>
#include <stdlib.h>

/* The state update of one draw: xorshift64 (12, 25, 27). */
uint64_t gpu_rnd_step(uint64_t s);

/* xorshift64*, uniform in [lo, hi): the same inputs on every run from the same *st. */
float gpu_rnd_uniform(uint64_t *st, float lo, float hi);

/* n fp16 values uniform in [lo, hi). Caller frees. */
uint16_t *gpu_rnd_f16(uint64_t *st, int64_t n, float lo, float hi);

/* m [64] (column j = the image of bit j) applied to v over GF(2). */
uint64_t gpu_rnd_apply(const uint64_t *m, uint64_t v);

/* The state update to the powers 2^0 .. 2^63, for gpu_rnd_skip (32 KiB). */
struct gpu_rnd_jump {
    uint64_t m[64][64]; /* m[i]: 2^i steps, as gpu_rnd_apply takes it */
};

/* Fill *j: the one step, then each power the square of the one before. */
void gpu_rnd_jump_init(struct gpu_rnd_jump *j);

/* Advance *st by n draws, as n calls of gpu_rnd_uniform would (their values unused):
 * one matrix of *j per set bit of n. */
void gpu_rnd_skip(const struct gpu_rnd_jump *j, uint64_t *st, uint64_t n);

#endif
