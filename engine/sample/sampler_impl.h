/*
 * sampler_impl.h - the sampler's internals: what sampler.c and sampler_select.c
 * share (the candidate record, the token order, the vectorised sums and threshold
 * count, the selection entry points), and the steps of sampler_sample_u one by one.
 *
 * Internal to the sampler, with one other user: the CUDA sampler's host reference
 * (cuda/cuda_ref_sample.c) calls these very functions for the steps the kernel must
 * match bit for bit, instead of a copy of them. Everything else includes sampler.h.
 * sampler.c runs the steps of sampler.h in order and draws the token;
 * sampler_select.c narrows the vocabulary to the top-k or top-p candidates.
 * Thread: any, as for sampler.h; nothing here holds state.
 */
#ifndef H2O_SAMPLER_IMPL_H
#define H2O_SAMPLER_IMPL_H

#include "fast_exp.h"

#include <stdint.h>

/* Temperatures below this are greedy, as in vLLM: dividing logits by them would
 * overflow, and the distribution is an argmax to float precision anyway. */
#define SAMPLER_MIN_TEMPERATURE 1e-5f

/* Above this every finite logit is already equally likely. Clamping keeps 1 / T
 * above zero, so a -inf logit still maps to weight 0 and not to NaN (-inf * 0). */
#define SAMPLER_MAX_TEMPERATURE 1e30f

/* A token that may survive top-k / top-p: its processed logit, its unnormalised
 * probability at the request's temperature, and its id. */
struct sampler_cand {
    float logit;
    float w;
    int32_t id;
};

/* Tokens per block in the candidate collection (see collect). */
#define SAMPLER_BLOCK 16

/* Weights in the threshold search are summed as integers in units of 2^-24. */
#define SAMPLER_FIX_ONE 16777216.0f

/*
 * How many of x[0, n) are >= tau, and (when `mass` is not NULL) the sum of their
 * weights w in units of 2^-24, each weight rounded down. Integer sums vectorise
 * (their order does not matter) and, rounded down, never overstate the mass, so a
 * threshold found sufficient with them is sufficient.
 */
static inline int32_t sampler_count_ge(const float *x, const float *w, int32_t n, float tau,
                                       int64_t *mass)
{
    int32_t count = 0;
    int64_t sum = 0;
    if (mass) {
        for (int32_t j = 0; j < n; j++) {
            int in = x[j] >= tau;
            count += in;
            sum += in ? (int64_t)(w[j] * SAMPLER_FIX_ONE) : 0;
        }
        *mass = sum;
    } else {
        for (int32_t j = 0; j < n; j++)
            count += x[j] >= tau;
    }
    return count;
}

/* w[j] = e^((logits[j] - m) * inv_t) for j < n. */
static inline void sampler_exp_weights(const float *logits, int32_t n, float m, float inv_t,
                                       float *w)
{
    for (int32_t j = 0; j < n; j++)
        w[j] = fast_exp((logits[j] - m) * inv_t);
}

/*
 * The sum of w[0, n) in double, in a fixed order: eight interleaved partial sums
 * (which the compiler keeps in SIMD registers, where one running sum would wait on
 * every addition), then the tail, then the eight lanes. Fixed order keeps the
 * result, and so every draw, identical from run to run (and the CUDA kernel's total
 * bit-identical to it).
 */
static inline double sampler_sum_weights(const float *w, int32_t n)
{
    double lane[8] = {0};
    int32_t j = 0;
    for (; j + 8 <= n; j += 8)
        for (int k = 0; k < 8; k++)
            lane[k] += (double)w[j + k];
    double s = 0.0;
    for (; j < n; j++)
        s += (double)w[j];
    for (int k = 0; k < 8; k++)
        s += lane[k];
    return s;
}

/* True when token (la, ia) ranks above (lb, ib): larger logit, then lower id. This
 * total order makes every selection (top_logprobs, top-k, the nucleus) deterministic. */
static inline int sampler_ranks_above(float la, int32_t ia, float lb, int32_t ib)
{
    return la > lb || (la == lb && ia < ib);
}

/*
 * Top-k candidates: c[0, n) on return hold the k best finite tokens (n < k only
 * when fewer are finite), weighted at temperature 1 / inv_t; returns n. `logits`
 * [vocab] are the processed logits, `m` their maximum, 0 < k < vocab; `c` has room
 * for vocab entries (the scratch's). Borrows everything, allocates nothing.
 * Thread: any, with a `c` no other thread uses meanwhile.
 */
int32_t sampler_select_top_k(const float *logits, int32_t vocab, float m, float inv_t,
                             int32_t k, struct sampler_cand *c);

/*
 * Top-p candidates without top-k: the nucleus at `top_p` of the weights `w` [vocab]
 * (their sum `total`, computed at `temperature`), placed in c[0, n); returns n >= 1.
 * `c` has room for vocab entries. Borrows everything, allocates nothing.
 * Thread: any, with a `c` no other thread uses meanwhile.
 */
int32_t sampler_select_top_p(const float *logits, const float *w, int32_t vocab, float m,
                             float temperature, double total, float top_p,
                             struct sampler_cand *c);

/*
 * The nucleus of c[0, n): rearranges c so that the smallest best-first prefix whose
 * mass (sum of w) reaches `target` (> 0) comes first, and returns its length (>= 1).
 * Used on its own for top-p after top-k. Allocates nothing.
 * Thread: any, with a `c` no other thread uses meanwhile.
 */
int32_t sampler_select_nucleus(struct sampler_cand *c, int32_t n, double target);

/* ---- the steps of sampler_sample_u (sampler.c) ---------------------------------- */

/*
 * Step 3: NaN -> -inf and +inf -> FLT_MAX in place; returns the maximum and sets
 * *argmax to the lowest id holding it (the greedy token). When nothing is finite
 * every logit becomes 0 (uniform), the maximum 0 and the argmax 0.
 * Thread: any; pure apart from `logits`.
 */
float sampler_sanitize(float *logits, int32_t vocab, int32_t *argmax);

/*
 * Step 5 for a non-greedy row: top-k (then top-p over the survivors) or top-p or
 * the whole vocabulary, weighted at `temperature` around the maximum `m` of the
 * sanitized logits, and the draw with u01 in [0, 1). w [vocab] and c [vocab] are
 * scratch. When the whole vocabulary's weights at temperature 1 fall out as a
 * by-product, their sum goes to *sum_t1 (when not NULL; untouched otherwise), so the
 * logprobs need not recompute it. Returns the token.
 * Thread: any, with scratch no other thread uses meanwhile.
 */
int32_t sampler_sample_random(float temperature, int32_t top_k, float top_p,
                              const float *logits, int32_t vocab, float m, double u01,
                              float *w, struct sampler_cand *c, double *sum_t1);

/*
 * Draw from weights w[0, n) with total `total`: the first index where the running
 * sum passes u01 * total. Rounding can leave the last running sum a hair below the
 * target; then the last index with a non-zero weight is taken, never an impossible
 * one. Thread: any.
 */
int32_t sampler_draw_index(const float *w, int32_t n, double total, double u01);

/* The same draw over candidates c[0, n) in their stored order, whose total is
 * summed here; returns the token id. Thread: any. */
int32_t sampler_draw_cand(const struct sampler_cand *c, int32_t n, double u01);

/* Step 4: log(sum_j e^logits[j]) of the sanitized logits, computed around their
 * maximum `m` so nothing overflows (weights at temperature 1 into the scratch w
 * [vocab], summed by sampler_sum_weights). Thread: any. */
double sampler_log_sum_exp(const float *logits, int32_t vocab, float m, float *w);

/*
 * Step 4's alternatives: the n (<= SAMPLER_MAX_LOGPROBS) most likely tokens of the
 * sanitized logits into ids / vals [n], best first (sampler_ranks_above: ties to
 * the lowest id), skipping -inf (impossible tokens have no meaningful logprob and
 * -inf does not fit in JSON). Returns how many were found (< n only when fewer are
 * finite). Thread: any.
 */
int32_t sampler_top(const float *logits, int32_t vocab, int32_t n, int32_t *ids, float *vals);

#endif
