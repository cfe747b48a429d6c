/*
 * cuda_ref_sample.c - the host reference of cuda_sample: engine/sampler.c's steps 3-5
 * (clean the logits, logprobs and top alternatives, greedy or one draw) for n rows,
 * with the row's uniform number passed in instead of drawn (cuda_ref.h).
 *
 * Written against the CPU sampler's code, not its description: the same fast_exp
 * weights, the same eight-lane double sums, the same selection (sampler_select_top_k,
 * sampler_select_top_p, sampler_select_nucleus, called here, not copied), and the draw
 * walking the candidates in the order the selection left them. That order is not
 * sorted (quickselect leaves the k best "in no particular order"), and the token a
 * given u picks depends on it, so anything else would pick other tokens for the same
 * u. The kernel keeps it by running the same sequential selection on one thread over
 * the candidates the block collected in id order (docs/cuda.md).
 *
 * Owns: nothing between calls. Thread: any; pure apart from the output arrays.
 */
#include "cuda_ref.h"

#include "fast_exp.h"
#include "sampler_impl.h"
#include "util.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* sampler.c's constants: greedy below this temperature, clamp above the other. */
#define REF_MIN_TEMPERATURE 1e-5f
#define REF_MAX_TEMPERATURE 1e30f

/* sampler.c's sum_weights: eight interleaved double lanes, the tail, then the lanes,
 * in this order, so the total (and with it u * total) is bit-identical. */
static double ref_sum_weights(const float *w, int32_t n)
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

/* An int32 ordering like the float with bits b (sampler.c's order_key): +0 ranks
 * above -0, as in the CPU sampler's integer maximum. */
static int32_t ref_key(float f)
{
    int32_t k = (int32_t)f32_bits(f);
    return k ^ (int32_t)((uint32_t)(k >> 31) >> 1);
}

/* Step 3 and the argmax: NaN -> -inf, +inf -> FLT_MAX; nothing finite -> all 0. The
 * maximum is the largest by order key; the greedy token is the first index holding
 * exactly its bits. */
static float ref_sanitize(float *x, int32_t vocab, int32_t *argmax)
{
    float m = -INFINITY;
    int32_t am = 0;
    for (int32_t j = 0; j < vocab; j++) {
        float l = x[j];
        if (isnan(l)) l = -INFINITY;
        if (l == INFINITY) l = FLT_MAX;
        x[j] = l;
        if (ref_key(l) > ref_key(m)) m = l, am = j;
    }
    if (m == -INFINITY) {
        for (int32_t j = 0; j < vocab; j++)
            x[j] = 0.0f;
        am = 0, m = 0.0f;
    }
    *argmax = am;
    return m;
}

/* sampler.c's draw_index: the first index whose running sum passes u * total, whole
 * blocks of 64 skipped by their eight-lane sums; the last non-zero weight when
 * rounding leaves the running sum short. */
static int32_t ref_draw_index(const float *w, int32_t n, double total, double u01)
{
    double u = u01 * total, acc = 0.0;
    int32_t j = 0;
    for (; j + 64 <= n; j += 64) {
        double b = ref_sum_weights(w + j, 64);
        if (acc + b > u) break;
        acc += b;
    }
    for (; j < n; j++) {
        acc += w[j];
        if (w[j] > 0.0f && acc > u) return j;
    }
    for (j = n - 1; j > 0 && !(w[j] > 0.0f); j--)
        continue;
    return j;
}

/* sampler.c's draw_cand: the same walk over candidates in their stored order. */
static int32_t ref_draw_cand(const struct sampler_cand *c, int32_t n, double u01)
{
    double total = 0.0;
    for (int32_t j = 0; j < n; j++)
        total += c[j].w;
    double u = u01 * total, acc = 0.0;
    int32_t last = 0;
    for (int32_t j = 0; j < n; j++) {
        if (!(c[j].w > 0.0f)) continue;
        acc += c[j].w;
        last = j;
        if (acc > u) return c[j].id;
    }
    return c[last].id;
}

/* Step 5 for a non-greedy row (sampler.c's sample_random with u for the draw). */
static int32_t ref_sample_random(float temperature, int32_t top_k, float top_p,
                                 const float *x, int32_t vocab, float m, double u01,
                                 float *w, struct sampler_cand *c)
{
    float inv_t = 1.0f / MIN(temperature, REF_MAX_TEMPERATURE);
    int top_k_on = top_k > 0 && top_k < vocab;
    int top_p_on = top_p < 1.0f;
    if (top_k_on) {
        int32_t n = sampler_select_top_k(x, vocab, m, inv_t, top_k, c);
        if (top_p_on && n > 1) {
            double total = 0.0;
            for (int32_t j = 0; j < n; j++)
                total += c[j].w;
            n = sampler_select_nucleus(c, n, (double)top_p * total);
        }
        return ref_draw_cand(c, n, u01);
    }
    for (int32_t j = 0; j < vocab; j++)
        w[j] = fast_exp((x[j] - m) * inv_t);
    double total = ref_sum_weights(w, vocab);
    if (!top_p_on) return ref_draw_index(w, vocab, total, u01);
    float t = MIN(temperature, REF_MAX_TEMPERATURE);
    int32_t n = sampler_select_top_p(x, w, vocab, m, t, total, top_p, c);
    return ref_draw_cand(c, n, u01);
}

/* The n best finite tokens, best first, ties to the lowest id (an insertion into a
 * list of at most five; the kernel merges per-thread lists with the same order). */
static int32_t ref_top(const float *x, int32_t vocab, int32_t n, int32_t *ids, float *vals)
{
    int32_t have = 0;
    for (int32_t i = 0; i < vocab && n > 0; i++) {
        float l = x[i];
        if (l == -INFINITY) continue;
        if (have == n && !sampler_ranks_above(l, i, vals[n - 1], ids[n - 1])) continue;
        int32_t pos = have < n ? have++ : n - 1;
        while (pos > 0 && sampler_ranks_above(l, i, vals[pos - 1], ids[pos - 1])) {
            vals[pos] = vals[pos - 1];
            ids[pos] = ids[pos - 1];
            pos--;
        }
        vals[pos] = l;
        ids[pos] = i;
    }
    return have;
}

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
        float m = ref_sanitize(x, V, &argmax);
        float temp = a->temperature[i], top_p = a->top_p[i];
        int32_t top_k = a->top_k[i], nlp = a->n_logprobs[i];
        CHECK(nlp >= -1 && nlp <= K);
        int greedy = !(temp >= REF_MIN_TEMPERATURE) || top_k == 1 || !(top_p > 0.0f);
        int32_t tok =
            greedy ? argmax : ref_sample_random(temp, top_k, top_p, x, V, m, a->u[i], w, c);
        a->token[i] = tok;
        a->logprob[i] = 0.0f;
        a->n_top[i] = 0;
        int32_t *ids = a->top_ids + (int64_t)i * K;
        float *lps = a->top_logprobs + (int64_t)i * K;
        for (int32_t r = 0; r < K; r++)
            ids[r] = 0, lps[r] = 0.0f;
        if (nlp < 0) continue;
        /* log_sum_exp at temperature 1 around m, as sampler.c (its by-product sum at
         * temperature 1 is this same sum of the same weights). */
        for (int32_t j = 0; j < V; j++)
            w[j] = fast_exp((x[j] - m) * 1.0f);
        double lse = (double)m + log(ref_sum_weights(w, V));
        a->logprob[i] = (float)((double)x[tok] - lse);
        float vals[CUDA_SAMPLE_MAX_TOP];
        int32_t have = ref_top(x, V, nlp, ids, vals);
        a->n_top[i] = have;
        for (int32_t r = 0; r < have; r++)
            lps[r] = (float)((double)vals[r] - lse);
    }
    free(c);
    free(w);
    free(x);
}
