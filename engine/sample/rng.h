/*
 * rng.h - the per-sequence random generator: xoshiro256** seeded through splitmix64.
 *
 * The sampler (sampler.h) makes its one draw per token from it, and sampler.h
 * includes this header, so the sampler's callers need nothing more.
 * Thread: any; a generator is plain state that touches nothing else, so one thread
 * at a time per generator.
 */
#ifndef H2O_RNG_H
#define H2O_RNG_H

#include <stdint.h>

/*
 * A xoshiro256** generator. Each sequence owns one, so a sequence's tokens depend
 * only on its seed and its own logits, never on what else shares the batch.
 */
struct rng {
    uint64_t s[4];
};

/*
 * Seed `r` from a 64-bit seed, expanded through splitmix64 so that nearby seeds
 * (0, 1, 2, ...) give unrelated streams. A request without a seed gets one from
 * the caller (for example from the clock and the request id).
 * Thread: any (touches only `r`).
 */
void rng_seed(struct rng *r, uint64_t seed);

/* The next 64 random bits of `r`. Thread: any (touches only `r`). */
uint64_t rng_next(struct rng *r);

/* A uniform double in [0, 1) with 53 random bits. Thread: any (touches only `r`). */
double rng_uniform(struct rng *r);

#endif
