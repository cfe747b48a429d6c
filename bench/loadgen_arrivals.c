/*
 * loadgen_arrivals.c - the arrival schedule (see loadgen_arrivals.h); its gaps come
 * from loadgen_rng.c's gamma sampler.
 * Thread: any.
 */
#include "loadgen_arrivals.h"

#include <math.h>

#include "loadgen_rng.h"

void loadgen_arrivals_fill(double *t, int64_t n, double rate, double burstiness,
                           uint64_t *rng)
{
    if (n <= 0)
        return;
    if (isinf(rate)) {
        for (int64_t i = 0; i < n; i++)
            t[i] = 0;
        return;
    }
    // Scale 1 / (rate * shape) keeps the mean gap at 1 / rate whatever the shape; the
    // shape alone sets the spread (coefficient of variation 1 / sqrt(burstiness)).
    double sum = 0;
    for (int64_t i = 0; i < n; i++) {
        sum += isinf(burstiness)
                   ? 1 / rate
                   : loadgen_rng_gamma(rng, burstiness, 1 / (rate * burstiness));
        t[i] = sum;
    }
    // vLLM (since its PR 21108) stretches the schedule to end at n / rate: a sum of
    // random gaps misses it by a percent or two, which would show up as a
    // seed-dependent throughput. An all-zero schedule stays all at once.
    if (sum > 0) {
        double f = ((double)n / rate) / sum;
        for (int64_t i = 0; i < n; i++)
            t[i] *= f;
    }
}
