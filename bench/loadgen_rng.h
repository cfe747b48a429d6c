/*
 * loadgen_rng.h - bench/loadgen's seeded generator, which the prompts and the arrival
 * schedule (loadgen_arrivals.h) share, and its gamma sampler.
 *
 * Owns: nothing; the caller owns the generator state (one uint64_t).
 * Thread: any (pure functions of their arguments and the generator state).
 */
#ifndef H2O_LOADGEN_RNG_H
#define H2O_LOADGEN_RNG_H

#include <stdint.h>

/* splitmix64: the next 64 random bits of the stream whose state is *s. Every random
 * choice of a run comes from --seed through it, so a run is a function of its flags.
 * Thread: any. */
uint64_t loadgen_rng_next(uint64_t *s);

/* Uniform in [0, 1), 53 bits. Thread: any. */
double loadgen_rng_unit(uint64_t *s);

/* One draw of Gamma(shape, scale) (mean shape * scale, variance shape * scale^2) by
 * Marsaglia and Tsang's method; shape < 1 is boosted to shape + 1 and scaled by
 * U^(1/shape). Returns NAN unless shape > 0 and scale > 0. Thread: any. */
double loadgen_rng_gamma(uint64_t *s, double shape, double scale);

#endif
