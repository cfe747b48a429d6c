/*
 * loadgen_rng.c - the load generator's seeded generator and its gamma sampler (see
 * loadgen_rng.h).
 *
 * vLLM draws its gaps with numpy's gamma sampler; ours is Marsaglia and Tsang's (ACM
 * TOMS 26(3), 2000), the method most libraries use, on a splitmix64 stream: the same
 * distribution, not the same numbers for a given --seed.
 * Thread: any.
 */
#include "loadgen_rng.h"

#include <math.h>

uint64_t loadgen_rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

double loadgen_rng_unit(uint64_t *s)
{
    return (double)(loadgen_rng_next(s) >> 11) * (1.0 / 9007199254740992.0);
}

/* Uniform in (0, 1): both ends excluded, because the callers take its logarithm. */
static double rng_open_unit(uint64_t *s)
{
    return ((double)(loadgen_rng_next(s) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

/* A standard normal draw by Marsaglia's polar method. The pair's second value is
 * dropped so that the generator's whole state stays in *s. */
static double rng_normal(uint64_t *s)
{
    double u, v, q;
    do {
        u = 2 * loadgen_rng_unit(s) - 1;
        v = 2 * loadgen_rng_unit(s) - 1;
        q = u * u + v * v;
    } while (q >= 1 || q == 0);
    return u * sqrt(-2 * log(q) / q);
}

double loadgen_rng_gamma(uint64_t *s, double shape, double scale)
{
    if (!(shape > 0) || !(scale > 0) || !isfinite(shape) || !isfinite(scale))
        return NAN;
    // The squeeze below needs shape >= 1. For shape < 1, Gamma(a) has the law of
    // Gamma(a + 1) * U^(1/a) (the paper's section 6); tiny shapes then give gaps that
    // underflow to 0, which is what a burst of simultaneous arrivals is.
    double boost = 1;
    if (shape < 1) {
        boost = pow(rng_open_unit(s), 1 / shape);
        shape += 1;
    }
    double d = shape - 1.0 / 3, c = 1 / sqrt(9 * d);
    for (;;) {
        double x = rng_normal(s), v = 1 + c * x;
        if (v <= 0)
            continue;
        v = v * v * v;
        double u = rng_open_unit(s), x2 = x * x;
        // The cheap squeeze accepts about 98% of draws; the log test is exact.
        if (u < 1 - 0.0331 * x2 * x2 || log(u) < 0.5 * x2 + d * (1 - v + log(v)))
            return d * v * boost * scale;
    }
}
