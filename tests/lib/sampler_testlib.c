/*
 * sampler_testlib.c - the sampler tests' logits, draws and references
 * (sampler_testlib.h).
 */
#include "sampler_testlib.h"

#include "test.h"
#include "util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A normal variate from the sampler's own generator (Box-Muller), for test logits. */
static float normal(struct rng *r)
{
    double u1 = rng_uniform(r), u2 = rng_uniform(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

void random_logits(float *l, int32_t n, float scale, uint64_t seed)
{
    struct rng r;
    rng_seed(&r, seed);
    for (int32_t i = 0; i < n; i++)
        l[i] = scale * normal(&r);
}

void softmax_ref(const float *l, int32_t n, double t, double *p)
{
    double m = -INFINITY, sum = 0.0;
    for (int32_t i = 0; i < n; i++)
        m = fmax(m, l[i]);
    for (int32_t i = 0; i < n; i++)
        sum += (p[i] = exp((l[i] - m) / t));
    for (int32_t i = 0; i < n; i++)
        p[i] /= sum;
}

void sample_freq(const struct sampler_params *p, const float *logits, int32_t vocab,
                 int32_t n, uint64_t seed, struct sampler_scratch *scratch, double *freq)
{
    float *work = xmalloc((size_t)vocab * sizeof *work);
    int32_t *count = xcalloc((size_t)vocab, sizeof *count);
    struct rng r;
    struct sample_out out;
    rng_seed(&r, seed);
    for (int32_t k = 0; k < n; k++) {
        memcpy(work, logits, (size_t)vocab * sizeof *work);
        int32_t t = sampler_sample(p, work, vocab, NULL, 0, &r, scratch, &out);
        if (t < 0 || t >= vocab) {
            TEST_FAIL("token %d outside the vocabulary", t);
            break;
        }
        count[t]++;
    }
    /* Counts first, one division last: a token drawn every time has exactly 1. */
    for (int32_t i = 0; i < vocab; i++)
        freq[i] = (double)count[i] / n;
    free(count);
    free(work);
}

double dist_max_diff(const double *a, const double *b, int32_t n)
{
    double d = 0.0;
    for (int32_t i = 0; i < n; i++)
        d = fmax(d, fabs(a[i] - b[i]));
    return d;
}

void rank_ref(const float *l, int32_t n, int32_t *order)
{
    char *used = xcalloc((size_t)n, 1);
    for (int32_t k = 0; k < n; k++) {
        int32_t best = -1;
        for (int32_t i = 0; i < n; i++)
            if (!used[i] && (best < 0 || l[i] > l[best])) best = i;
        used[best] = 1;
        order[k] = best;
    }
    free(used);
}

int32_t nucleus_ref(const float *l, int32_t n, double t, int32_t top_k, double top_p,
                    char *mask, double *p)
{
    int32_t *order = xmalloc((size_t)n * sizeof *order);
    double *full = xmalloc((size_t)n * sizeof *full);
    rank_ref(l, n, order);
    softmax_ref(l, n, t, full);
    int32_t kk = top_k > 0 && top_k < n ? top_k : n;
    double mass_k = 0.0;
    for (int32_t k = 0; k < kk; k++)
        mass_k += full[order[k]];
    int32_t cut = 0;
    double acc = 0.0;
    while (cut < kk) {
        acc += full[order[cut]] / mass_k;
        cut++;
        if (acc >= top_p) break;
    }
    double kept = 0.0;
    for (int32_t i = 0; i < n; i++)
        mask[i] = 0, p[i] = 0.0;
    for (int32_t k = 0; k < cut; k++)
        mask[order[k]] = 1, kept += full[order[k]];
    for (int32_t k = 0; k < cut; k++)
        p[order[k]] = full[order[k]] / kept;
    free(order);
    free(full);
    return cut;
}
