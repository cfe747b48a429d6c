/*
 * gpu_rnd.c - the GPU tests' fixed random inputs (gpu_rnd.h).
 */
#include "gpu_rnd.h"

#include <stdlib.h>

uint64_t gpu_rnd_step(uint64_t s)
{
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    return s;
}

float gpu_rnd_uniform(uint64_t *st, float lo, float hi)
{
    *st = gpu_rnd_step(*st);
    const uint64_t r = *st * 0x2545f4914f6cdd1dull;
    return lo + (hi - lo) * (float)(r >> 40) / (float)(1ull << 24);
}

uint16_t *gpu_rnd_f16(uint64_t *st, int64_t n, float lo, float hi)
{
    uint16_t *h = malloc((size_t)n * sizeof *h);
    for (int64_t i = 0; i < n; i++)
        h[i] = f32_to_f16(gpu_rnd_uniform(st, lo, hi));
    return h;
}

uint64_t gpu_rnd_apply(const uint64_t *m, uint64_t v)
{
    uint64_t r = 0;
    for (int j = 0; v; j++, v >>= 1)
        if (v & 1u) r ^= m[j];
    return r;
}

void gpu_rnd_jump_init(struct gpu_rnd_jump *j)
{
    for (int b = 0; b < 64; b++)
        j->m[0][b] = gpu_rnd_step((uint64_t)1 << b);
    for (int i = 1; i < 64; i++)
        for (int b = 0; b < 64; b++)
            j->m[i][b] = gpu_rnd_apply(j->m[i - 1], j->m[i - 1][b]);
}

void gpu_rnd_skip(const struct gpu_rnd_jump *j, uint64_t *st, uint64_t n)
{
    for (int i = 0; n; i++, n >>= 1)
        if (n & 1u) *st = gpu_rnd_apply(j->m[i], *st);
}
