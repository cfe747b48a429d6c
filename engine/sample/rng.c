/*
 * rng.c - xoshiro256** (Blackman and Vigna), seeded through splitmix64.
 *
 * Owns: nothing; all state is the caller's struct rng.
 * Invariant: a seeded state is never all zeros (xoshiro would then only ever return
 * zeros); splitmix64 cannot produce four zero words in a row.
 * Thread: any, one thread at a time per generator.
 */
#include "rng.h"

/* splitmix64 turns one seed into well-mixed state words; xoshiro must not start
 * from an all-zero state, and splitmix64 never yields four zeros in a row. */
static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline uint64_t rotl64(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

void rng_seed(struct rng *r, uint64_t seed)
{
    uint64_t x = seed;
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&x);
}

uint64_t rng_next(struct rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl64(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl64(s[3], 45);
    return result;
}

double rng_uniform(struct rng *r)
{
    /* The top 53 bits fill a double's mantissa exactly, so every value is a
     * multiple of 2^-53 and 1.0 itself never comes out. */
    return (double)(rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
}
