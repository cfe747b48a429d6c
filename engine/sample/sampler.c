/*
 * sampler.c - logits to token: bias, penalties, logprobs, temperature, and the draw
 * (see sampler.h for the order of the steps and why). The top-k / top-p selection
 * is in sampler_select.c, the random generator in rng.c.
 *
 * The steps' building blocks are exported to the CUDA sampler's host reference
 * through sampler_impl.h (sampler_sanitize, sampler_sample_random, ...), so that
 * reference runs this very code rather than a copy of it.
 *
 * Owns: nothing between calls except what the caller's sampler_scratch holds.
 * Invariant: scratch->counts is all zeros between calls.
 * Thread: any, one scratch and one rng per thread at a time.
 */
#include "sampler.h"

#include "fast_exp.h"
#include "sampler_impl.h"
#include "util.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The vectorisable building blocks (sampler_exp_weights, sampler_sum_weights) are
 * in sampler_impl.h, shared with sampler_select.c and the CUDA reference. */

/* ---- parameters and scratch ---------------------------------------------------- */

void sampler_params_default(struct sampler_params *p)
{
    memset(p, 0, sizeof *p);
    p->temperature = 1.0f;
    p->top_p = 1.0f;
    p->top_k = 0;
    p->n_logprobs = -1;
}

void sampler_scratch_init(struct sampler_scratch *s)
{
    memset(s, 0, sizeof *s);
}

void sampler_scratch_deinit(struct sampler_scratch *s)
{
    free(s->counts);
    free(s->w);
    free(s->cand);
    free(s->add_ids);
    free(s->add_vals);
    memset(s, 0, sizeof *s);
}

/* Grow the buffers to `vocab` entries. The old contents need not survive: counts
 * are all zero between calls, so fresh zeroed memory keeps the invariant. */
static void scratch_reserve(struct sampler_scratch *s, int32_t vocab)
{
    if (s->cap >= vocab) return;
    free(s->counts);
    free(s->w);
    free(s->cand);
    s->counts = xcalloc((size_t)vocab, sizeof *s->counts);
    s->w = xmalloc((size_t)vocab * sizeof *s->w);
    s->cand = xmalloc((size_t)vocab * sizeof *s->cand);
    s->cap = vocab;
}

/* Grow the step 1-2 addition lists to n entries. */
static void scratch_reserve_adds(struct sampler_scratch *s, int32_t n)
{
    if (s->cap_adds >= n) return;
    s->cap_adds = MAX(n, 2 * s->cap_adds);
    s->add_ids = xrealloc(s->add_ids, (size_t)s->cap_adds * sizeof *s->add_ids);
    s->add_vals = xrealloc(s->add_vals, (size_t)s->cap_adds * sizeof *s->add_vals);
}

/* ---- steps 1-3: the processed logits ------------------------------------------- */

/* An int32 that orders like the float with bits `b` (all of them, NaN aside):
 * negative floats grow in magnitude as their bits grow, so their low 31 bits are
 * flipped. Integer comparisons vectorise where float ones with NaN in play do not. */
static inline int32_t order_key(uint32_t b)
{
    int32_t k = (int32_t)b;
    return k ^ (int32_t)((uint32_t)(k >> 31) >> 1);
}

/*
 * Replace NaN by -inf and +inf by FLT_MAX, and find the maximum and the lowest id
 * that reaches it. When nothing is finite every logit becomes 0 (uniform), so the
 * caller always has a maximum to subtract and a token to return. The first pass
 * works on bit patterns and an integer maximum, so it is branch-free SIMD; the
 * second looks for the first copy of the maximum sixteen tokens at a time.
 */
float sampler_sanitize(float *logits, int32_t vocab, int32_t *argmax)
{
    const uint32_t neg_inf = 0xff800000u, pos_inf = 0x7f800000u, flt_max = 0x7f7fffffu;
    int32_t key_m = INT32_MIN;
    for (int32_t j = 0; j < vocab; j++) {
        uint32_t b = f32_bits(logits[j]);
        b = (b & 0x7fffffffu) > pos_inf ? neg_inf : b;
        b = b == pos_inf ? flt_max : b;
        logits[j] = bits_f32(b);
        int32_t key = order_key(b);
        key_m = key > key_m ? key : key_m;
    }
    uint32_t mb = (uint32_t)order_key((uint32_t)key_m); /* order_key is its own inverse */
    if (mb == neg_inf) {
        for (int32_t j = 0; j < vocab; j++)
            logits[j] = 0.0f;
        *argmax = 0;
        return 0.0f;
    }
    int32_t j = 0;
    for (; j + 16 <= vocab; j += 16) {
        int hit = 0;
        for (int k = 0; k < 16; k++)
            hit |= f32_bits(logits[j + k]) == mb;
        if (hit) break;
    }
    while (f32_bits(logits[j]) != mb)
        j++;
    *argmax = j;
    return bits_f32(mb);
}

/* ---- step 4: logprobs ------------------------------------------------------------ */

double sampler_log_sum_exp(const float *logits, int32_t vocab, float m, float *w)
{
    sampler_exp_weights(logits, vocab, m, 1.0f, w);
    return (double)m + log(sampler_sum_weights(w, vocab));
}
/* One pass keeping a tiny sorted array. */
int32_t sampler_top(const float *logits, int32_t vocab, int32_t n, int32_t *ids, float *vals)
{
    int32_t have = 0;
    for (int32_t j = 0; j < vocab && n > 0; j += SAMPLER_BLOCK) {
        int32_t end = MIN(j + SAMPLER_BLOCK, vocab);
        /* Once the list is full, a block with nothing at or above its last entry
         * is skipped after one vectorised count; far into the scan most are. */
        if (have == n &&
            sampler_count_ge(logits + j, NULL, end - j, vals[n - 1], NULL) == 0)
            continue;
        for (int32_t i = j; i < end; i++) {
            float l = logits[i];
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
    }
    return have;
}

/* The `n` (<= 5) most likely tokens (sampler_top) with their logprobs, given the
 * log-sum-exp `lse`. */
static void top_logprobs(const float *logits, int32_t vocab, int32_t n, double lse,
                         struct sample_out *out)
{
    int32_t ids[SAMPLER_MAX_LOGPROBS];
    float vals[SAMPLER_MAX_LOGPROBS];
    const int32_t have = sampler_top(logits, vocab, n, ids, vals);
    out->n_top = have;
    for (int32_t i = 0; i < have; i++) {
        out->top_ids[i] = ids[i];
        out->top_logprobs[i] = (float)((double)vals[i] - lse);
    }
}
/* ---- step 5: the draw ------------------------------------------------------------ */

/* Whole blocks of 64 are skipped by their (vectorised) sums while the running sum
 * stays below the target; the block that crosses it is scanned one by one. */
int32_t sampler_draw_index(const float *w, int32_t n, double total, double u01)
{
    double u = u01 * total, acc = 0.0;
    int32_t j = 0;
    for (; j + 64 <= n; j += 64) {
        double b = sampler_sum_weights(w + j, 64);
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

int32_t sampler_draw_cand(const struct sampler_cand *c, int32_t n, double u01)
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

int32_t sampler_sample_random(float temperature, int32_t top_k, float top_p,
                              const float *logits, int32_t vocab, float m, double u01,
                              float *w, struct sampler_cand *c, double *sum_t1)
{
    float inv_t = 1.0f / MIN(temperature, SAMPLER_MAX_TEMPERATURE);
    int top_k_on = top_k > 0 && top_k < vocab;
    int top_p_on = top_p < 1.0f;

    if (top_k_on) {
        /* Select by logit first, so exp runs only on the k survivors; top_p then
         * applies to what top-k left, renormalised. */
        int32_t n = sampler_select_top_k(logits, vocab, m, inv_t, top_k, c);
        if (top_p_on && n > 1) {
            double total = 0.0;
            for (int32_t j = 0; j < n; j++)
                total += c[j].w;
            n = sampler_select_nucleus(c, n, (double)top_p * total);
        }
        return sampler_draw_cand(c, n, u01);
    }

    sampler_exp_weights(logits, vocab, m, inv_t, w);
    double total = sampler_sum_weights(w, vocab);
    if (temperature == 1.0f && sum_t1) *sum_t1 = total;
    if (!top_p_on) return sampler_draw_index(w, vocab, total, u01);
    float t = MIN(temperature, SAMPLER_MAX_TEMPERATURE);
    int32_t n = sampler_select_top_p(logits, w, vocab, m, t, total, top_p, c);
    return sampler_draw_cand(c, n, u01);
}

/* ---- the whole call -------------------------------------------------------------- */

bool sampler_is_greedy(const struct sampler_params *p)
{
    /* Greedy when asked (temperature 0, or below SAMPLER_MIN_TEMPERATURE) and
     * wherever the other knobs leave a single candidate (top_k 1, top_p 0): the
     * answer is the argmax, no draw needed. NaN settings fall here too, as the
     * negated comparisons are true for NaN. */
    return !(p->temperature >= SAMPLER_MIN_TEMPERATURE) || p->top_k == 1 || !(p->top_p > 0.0f);
}

int32_t sampler_adjustments(const struct sampler_params *p, int32_t vocab,
                            const int32_t *out_tokens, int32_t n_out,
                            struct sampler_scratch *scratch, int32_t *ids, float *vals)
{
    CHECK(n_out == 0 || out_tokens);
    CHECK(p->n_bias == 0 || (p->bias_ids && p->bias_vals));
    scratch_reserve(scratch, vocab);
    int32_t n = 0;
    /* Step 1. Ids come from the client's logit_bias; the server validates them, and
     * one that slipped through is skipped rather than written out of bounds. */
    for (int32_t i = 0; i < p->n_bias; i++) {
        const int32_t id = p->bias_ids[i];
        if (id < 0 || id >= vocab) continue;
        ids[n] = id;
        vals[n++] = p->bias_vals[i];
    }
    /* Step 2. Counting into a vocab-sized array and then zeroing only the entries
     * raised costs O(n_out), not O(vocab), and needs no sort. The second loop takes
     * each distinct token once: the first time it meets a token it emits the
     * penalty and zeroes the count, so later occurrences see 0 and skip. Adding the
     * negated penalty is the same IEEE operation as subtracting it. */
    if (n_out <= 0 || (p->presence_penalty == 0.0f && p->frequency_penalty == 0.0f)) return n;
    int32_t *counts = scratch->counts;
    for (int32_t i = 0; i < n_out; i++) {
        const int32_t t = out_tokens[i];
        CHECK(t >= 0 && t < vocab); /* generated tokens are ours, never client input */
        counts[t]++;
    }
    for (int32_t i = 0; i < n_out; i++) {
        const int32_t t = out_tokens[i];
        const int32_t c = counts[t];
        if (c == 0) continue;
        ids[n] = t;
        vals[n++] = -((float)c * p->frequency_penalty + p->presence_penalty);
        counts[t] = 0;
    }
    return n;
}

int32_t sampler_sample_u(const struct sampler_params *p, float *logits, int32_t vocab, double u,
                         struct sampler_scratch *scratch, struct sample_out *out)
{
    CHECK(p && logits && vocab > 0 && scratch && out);
    CHECK(p->n_logprobs <= SAMPLER_MAX_LOGPROBS);
    scratch_reserve(scratch, vocab);
    int32_t argmax;
    float m = sampler_sanitize(logits, vocab, &argmax);
    double sum_t1 = -1.0;
    int32_t token = sampler_is_greedy(p)
                        ? argmax
                        : sampler_sample_random(p->temperature, p->top_k, p->top_p, logits,
                                                vocab, m, u, scratch->w, scratch->cand,
                                                &sum_t1);

    memset(out, 0, sizeof *out);
    out->token = token;
    if (p->n_logprobs >= 0) {
        double lse = sum_t1 > 0.0 ? (double)m + log(sum_t1)
                                  : sampler_log_sum_exp(logits, vocab, m, scratch->w);
        out->logprob = (float)((double)logits[token] - lse);
        top_logprobs(logits, vocab, p->n_logprobs, lse, out);
    }
    return token;
}

int32_t sampler_sample(const struct sampler_params *p, float *logits, int32_t vocab,
                       const int32_t *out_tokens, int32_t n_out, struct rng *rng,
                       struct sampler_scratch *scratch, struct sample_out *out)
{
    CHECK(p && logits && vocab > 0 && rng && scratch && out);
    scratch_reserve(scratch, vocab);
    /* Steps 1-2 as the additions a device would be given, applied here in order. */
    scratch_reserve_adds(scratch, p->n_bias + n_out);
    const int32_t n_add = sampler_adjustments(p, vocab, out_tokens, n_out, scratch,
                                              scratch->add_ids, scratch->add_vals);
    for (int32_t i = 0; i < n_add; i++) logits[scratch->add_ids[i]] += scratch->add_vals[i];
    /* Exactly one draw for a random choice, none for a greedy one. */
    const double u = sampler_is_greedy(p) ? 0.0 : rng_uniform(rng);
    return sampler_sample_u(p, logits, vocab, u, scratch, out);
}

void sampler_logprobs(float *logits, int32_t vocab, int32_t token, int32_t n_top,
                      struct sampler_scratch *scratch, struct sample_out *out)
{
    CHECK(logits && vocab > 0 && token >= 0 && token < vocab && scratch && out);
    CHECK(n_top >= 0 && n_top <= SAMPLER_MAX_LOGPROBS);
    scratch_reserve(scratch, vocab);
    int32_t argmax;
    float m = sampler_sanitize(logits, vocab, &argmax);
    double lse = sampler_log_sum_exp(logits, vocab, m, scratch->w);
    memset(out, 0, sizeof *out);
    out->token = token;
    out->logprob = (float)((double)logits[token] - lse);
    top_logprobs(logits, vocab, n_top, lse, out);
}
