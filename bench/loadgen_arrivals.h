/*
 * loadgen_arrivals.h - when bench/loadgen releases each request: `vllm bench serve`'s
 * arrival process (gamma-distributed gaps whose shape is --burstiness, 1 = Poisson,
 * drawn from loadgen_rng.h's generator).
 *
 * Owns: nothing; the caller owns the generator state and the arrival array.
 * Thread: any (pure functions of their arguments and the generator state).
 */
#ifndef H2O_LOADGEN_ARRIVALS_H
#define H2O_LOADGEN_ARRIVALS_H

#include <stdint.h>

/*
 * Fill t[0..n) with the release times in seconds from the benchmark's start, as vLLM
 * computes them: every gap is Gamma(burstiness, 1 / (rate * burstiness)) (mean
 * 1 / rate; burstiness INFINITY gives the constant gap 1 / rate), the times are the
 * running sums (the first request waits one gap too), and the whole schedule is then
 * stretched so the last release falls at exactly n / rate, which keeps the achieved
 * rate from drifting with the seed. rate INFINITY releases everything at 0.
 * Expects rate > 0 and burstiness > 0 (loadgen_opts.c refuses anything else).
 * Thread: any.
 */
void loadgen_arrivals_fill(double *t, int64_t n, double rate, double burstiness,
                           uint64_t *rng);

#endif
