/*
 * cuda_ref_sample.c - the host reference of cuda_sample: engine/sampler.c's steps 3-5
 * (clean the logits, logprobs and top alternatives, greedy or one draw) for n rows,
 * with the row's uniform number passed in instead of drawn (cuda_ref.h).
 *
 * Not a copy of the CPU sampler but its own code, called step by step through
 * sampler_impl.h, so that each stage the kernel runs has its reference named:
 * sampler_sanitize (step 3 and the greedy argmax), sampler_sample_random (the
 * fast_exp weights, the eight-lane double sums, the selection of
 * sampler_select_top_k / top_p / nucleus, and the draw walking the candidates in
 * the order the selection left them), sampler_log_sum_exp and sampler_top (step 4).
 * That order of the candidates is not sorted (quickselect leaves the k best "in no
 * particular order"), and the token a given u picks depends on it, so anything else
 * would pick other tokens for the same u. The kernel keeps it by running the same
 * sequential selection on one thread over the candidates the block collected in id
 * order (docs/cuda.md).
 *
 * Owns: nothing between calls. Thread: any; pure apart from the output arrays.
 */
#include "cuda_ref.h"

#include "sampler.h"
#include "sampler_impl.h"
#include "util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(CUDA_SAMPLE_MAX_TOP == SAMPLER_MAX_LOGPROBS,
               "cuda_sample reports as many alternatives as the CPU sampler");

void cuda_ref_sample(const struct cuda_sample_args *a)
{
    CHECK(a && a->n >= 0 && a->vocab > 0);
    const int32_t V = a->vocab, K = CUDA_SAMPLE_MAX_TOP;
    float *x = xmalloc((size_t)V * sizeof *x);
    float *w = xmalloc((size_t)V * sizeof *w);
    struct sampler_cand *c = xmalloc((size_t)V * sizeof *c);
    for (int32_t i = 0; i < a->n; i++) {
        memcpy(x, a->logits + (int64_t)i * V, (size_t)V * sizeof *x);
        int32_t argmax;
        float m = sampler_sanitize(x, V, &argmax);
        float temp = a->temperature[i], top_p = a->top_p[i];
        int32_t top_k = a->top_k[i], nlp = a->n_logprobs[i];
        CHECK(nlp >= -1 && nlp <= K);
        struct sampler_params p;
        sampler_params_default(&p);
        p.temperature = temp;
        p.top_p = top_p;
        p.top_k = top_k;
        int32_t tok = sampler_is_greedy(&p) ? argmax
                                            : sampler_sample_random(temp, top_k, top_p, x, V,
                                                                    m, a->u[i], w, c, NULL);
        a->token[i] = tok;
        a->logprob[i] = 0.0f;
        a->n_top[i] = 0;
        int32_t *ids = a->top_ids + (int64_t)i * K;
        float *lps = a->top_logprobs + (int64_t)i * K;
        for (int32_t r = 0; r < K; r++)
            ids[r] = 0, lps[r] = 0.0f;
        if (nlp < 0) continue;
        /* log_sum_exp at temperature 1 around m (sampler_sample_u's by-product sum
         * at temperature 1 is this same sum of the same weights). */
        double lse = sampler_log_sum_exp(x, V, m, w);
        a->logprob[i] = (float)((double)x[tok] - lse);
        float vals[CUDA_SAMPLE_MAX_TOP];
        int32_t have = sampler_top(x, V, nlp, ids, vals);
        a->n_top[i] = have;
        for (int32_t r = 0; r < have; r++)
            lps[r] = (float)((double)vals[r] - lse);
    }
    free(c);
    free(w);
    free(x);
}
