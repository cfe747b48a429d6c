/*
 * sampler_testlib.h - what the sampler tests share (test_sampler.c for sampler.c,
 * test_sampler_select.c for sampler_select.c's top-k / top-p): seeded test logits,
 * the empirical distribution of many draws, and plain references that are obviously
 * right (softmax in double, a best-first ranking by O(n^2) selection, the top-k /
 * top-p nucleus built from that ranking).
 * Thread: any; every helper uses only what it is given.
 */
#ifndef H2O_SAMPLER_TESTLIB_H
#define H2O_SAMPLER_TESTLIB_H

#include "sampler.h"

#include <stdint.h>

/* l[0, n) = scale * a standard normal variate each, from the sampler's own generator
 * seeded with `seed` (Box-Muller): the same logits on every machine. */
void random_logits(float *l, int32_t n, float scale, uint64_t seed);

/* softmax(l / t) in double, the reference every distribution test compares with. */
void softmax_ref(const float *l, int32_t n, double t, double *p);

/* Draw `n` tokens from fresh copies of `logits` with sampler_sample (rng seeded with
 * `seed`, the caller's scratch) and return their frequencies in freq[vocab]. A token
 * outside the vocabulary fails the current test. */
void sample_freq(const struct sampler_params *p, const float *logits, int32_t vocab,
                 int32_t n, uint64_t seed, struct sampler_scratch *scratch, double *freq);

/* max |a[i] - b[i]| over i in [0, n): how far apart two distributions are (the
 * golden tests' max_abs_diff is golden.h's, on floats). */
double dist_max_diff(const double *a, const double *b, int32_t n);

/* Ids of `l` ordered best first (larger logit, then lower id), by a plain O(n^2)
 * selection that is obviously right: the reference for top-k and top-p. */
void rank_ref(const float *l, int32_t n, int32_t *order);

/* Set mask[i] = 1 for the nucleus of softmax(l / t) at `top_p` (smallest best-first
 * prefix whose mass reaches top_p), restricted to the top `top_k` when top_k > 0,
 * and fill p with the renormalised distribution. Returns the nucleus size. */
int32_t nucleus_ref(const float *l, int32_t n, double t, int32_t top_k, double top_p,
                    char *mask, double *p);

#endif
