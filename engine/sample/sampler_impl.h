/*
 * sampler_impl.h - what sampler.c and sampler_select.c share: the candidate record,
 * the token order, the vectorised threshold count, and the selection entry points.
 *
 * Internal to sampler*.c; everything else includes sampler.h.
 * sampler.c runs the steps of sampler.h in order and draws the token;
 * sampler_select.c narrows the vocabulary to the top-k or top-p candidates.
 * Thread: any, as for sampler.h; nothing here holds state.
 */
#ifndef H2O_SAMPLER_IMPL_H
#define H2O_SAMPLER_IMPL_H

#include <stdint.h>

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

#endif
