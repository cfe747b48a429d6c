/*
 * sampler_select.c - step 5's narrowing of the vocabulary: the threshold search,
 * quickselect for top-k, and the mass-partition selection of the top-p nucleus.
 *
 * Nothing here sorts the whole vocabulary. A few vectorised counting passes find a
 * logit threshold that the answer surely lies above, only the tokens above it become
 * candidates, and selection (expected linear time) runs on those few.
 * Owns: nothing; candidates live in the caller's sampler_scratch.
 * Invariant: every selection orders tokens by sampler_ranks_above (larger logit, then
 * lower id), a total order, so the same logits always give the same candidates.
 * Thread: any, one candidate buffer per thread at a time.
 */
#include "sampler_impl.h"

#include "fast_exp.h"
#include "util.h"

#include <math.h>

/* Below this many elements selection finishes with an insertion sort, which beats
 * further partitioning on such short ranges. */
#define SAMPLER_SMALL 16

/* Thresholds tried per sweep of the threshold search (see find_tau). */
#define SAMPLER_N_TAU 4

/* The threshold search stops refining once this many tokens (plus 4k for top-k)
 * pass it: selection on a few thousand candidates costs less than another pass. */
#define SAMPLER_FEW_CANDS 1024

/* ---- selection over candidates --------------------------------------------------- */

static inline int cand_above(const struct sampler_cand *a, const struct sampler_cand *b)
{
    return sampler_ranks_above(a->logit, a->id, b->logit, b->id);
}

static inline void cand_swap(struct sampler_cand *c, int32_t i, int32_t j)
{
    struct sampler_cand t = c[i];
    c[i] = c[j];
    c[j] = t;
}

/* Sort c[lo, hi) best first. Only used on ranges of at most SAMPLER_SMALL. */
static void cand_insertion_sort(struct sampler_cand *c, int32_t lo, int32_t hi)
{
    for (int32_t i = lo + 1; i < hi; i++) {
        struct sampler_cand x = c[i];
        int32_t j = i;
        while (j > lo && cand_above(&x, &c[j - 1])) {
            c[j] = c[j - 1];
            j--;
        }
        c[j] = x;
    }
}

/*
 * Partition c[lo, hi) (hi - lo >= 3) around a median-of-three pivot: on return the
 * pivot is at the returned index i, everything in [lo, i) ranks above it and
 * everything in (i, hi) below. *mass_above receives the sum of w over [lo, i).
 * Ids are unique, so no two candidates tie and the split is always strict.
 */
static int32_t cand_partition(struct sampler_cand *c, int32_t lo, int32_t hi,
                              double *mass_above)
{
    int32_t mid = lo + (hi - lo) / 2, last = hi - 1;
    /* Order c[lo], c[mid], c[last] so the median lands in c[mid], then park it at
     * the end where the scan below does not touch it. */
    if (cand_above(&c[mid], &c[lo])) cand_swap(c, mid, lo);
    if (cand_above(&c[last], &c[lo])) cand_swap(c, last, lo);
    if (cand_above(&c[last], &c[mid])) cand_swap(c, last, mid);
    cand_swap(c, mid, last);
    struct sampler_cand pv = c[last];
    double mass = 0.0;
    int32_t i = lo;
    for (int32_t j = lo; j < last; j++) {
        if (cand_above(&c[j], &pv)) {
            mass += c[j].w;
            cand_swap(c, i, j);
            i++;
        }
    }
    cand_swap(c, i, last);
    *mass_above = mass;
    return i;
}

/* Rearrange c[0, n) so that its k best (0 < k < n) come first, in no particular
 * order. Quickselect: expected O(n), and nothing beyond the k-th is ever sorted. */
static void cand_top_k(struct sampler_cand *c, int32_t n, int32_t k)
{
    int32_t lo = 0, hi = n;
    while (hi - lo > SAMPLER_SMALL) {
        double unused;
        int32_t i = cand_partition(c, lo, hi, &unused);
        if (i == k || i + 1 == k) return;
        if (i > k)
            hi = i;
        else
            lo = i + 1;
    }
    cand_insertion_sort(c, lo, hi);
}

/*
 * The nucleus: rearrange c[0, n) so that the smallest best-first prefix whose mass
 * (sum of w) reaches `target` (> 0) comes first, and return its length (>= 1).
 * Like quickselect, but the side to keep is chosen by mass rather than by count:
 * if the candidates above the pivot already reach the target, the cut lies among
 * them; otherwise they and the pivot are all in, and the cut lies below. Expected
 * O(n) even when the nucleus is most of the vocabulary (flat distributions).
 */
int32_t sampler_select_nucleus(struct sampler_cand *c, int32_t n, double target)
{
    int32_t lo = 0, hi = n;
    double acc = 0.0; /* mass of c[0, lo), all in the nucleus; always below target */
    while (hi - lo > SAMPLER_SMALL) {
        double above;
        int32_t i = cand_partition(c, lo, hi, &above);
        if (acc + above >= target) {
            hi = i;
        } else {
            acc += above + c[i].w;
            lo = i + 1;
            if (acc >= target) return lo;
        }
    }
    cand_insertion_sort(c, lo, hi);
    for (int32_t j = lo; j < hi; j++) {
        acc += c[j].w;
        if (acc >= target) return j + 1;
    }
    /* Summing in a different order than the partition did can fall short of the
     * target by a rounding error; the whole remaining range is then the nucleus. */
    return hi > 0 ? hi : 1;
}

/* ---- the threshold search -------------------------------------------------------- */

/* sampler_count_ge for SAMPLER_N_TAU thresholds in one sweep: the constant inner loop
 * unrolls into independent sums, which the compiler vectorises side by side. */
static void count_ge_n(const float *x, const float *w, int32_t n, const float *tau,
                       int32_t *count, int64_t *mass)
{
    int32_t cnt[SAMPLER_N_TAU] = {0};
    int64_t sum[SAMPLER_N_TAU] = {0};
    if (w) {
        for (int32_t j = 0; j < n; j++) {
            int64_t wf = (int64_t)(w[j] * SAMPLER_FIX_ONE);
            for (int t = 0; t < SAMPLER_N_TAU; t++) {
                int in = x[j] >= tau[t];
                cnt[t] += in;
                sum[t] += in ? wf : 0;
            }
        }
    } else {
        for (int32_t j = 0; j < n; j++)
            for (int t = 0; t < SAMPLER_N_TAU; t++)
                cnt[t] += x[j] >= tau[t];
    }
    for (int t = 0; t < SAMPLER_N_TAU; t++)
        count[t] = cnt[t], mass[t] = sum[t];
}

/*
 * A logit threshold for top-k (w == NULL: at least `k` tokens at or above it) or
 * top-p (w != NULL: tokens at or above it hold at least `target` of w's mass), as
 * high as a few sweeps can find; -inf when only the whole vocabulary is known to
 * suffice. The first sweep tries distances of 1, 4, 16 and 64 times `scale`
 * below the maximum m (for top-p, scale is the temperature, so the weight at the
 * threshold goes from e^-1 to e^-64); each later sweep splits the gap between the
 * last distance that fell short and the first that sufficed, while many
 * candidates would pass and a third or more of them might not be needed. Each
 * sweep is vectorised, where a histogram would scatter into memory token by token.
 */
static float find_tau(const float *logits, const float *w, int32_t vocab, float m,
                      float scale, int32_t k, double target)
{
    const int64_t need = (int64_t)ceil(target * (double)SAMPLER_FIX_ONE);
    const int32_t few = SAMPLER_FEW_CANDS + 4 * k;
    float dist[SAMPLER_N_TAU], tau[SAMPLER_N_TAU];
    int32_t count[SAMPLER_N_TAU];
    int64_t mass[SAMPLER_N_TAU];
    float lo = 0.0f, hi = -1.0f; /* distances: `lo` falls short, `hi` suffices */
    int32_t n_lo = 0, n_hi = 0;
    for (int sweep = 0; sweep < 6; sweep++) {
        for (int t = 0; t < SAMPLER_N_TAU; t++) {
            if (sweep == 0)
                dist[t] = scale * (float)(1 << (2 * t)); /* 1, 4, 16, 64 */
            else
                dist[t] = lo + (hi - lo) * (float)(t + 1) / (float)(SAMPLER_N_TAU + 1);
            tau[t] = m - dist[t];
        }
        count_ge_n(logits, w, vocab, tau, count, mass);
        int t = 0;
        while (t < SAMPLER_N_TAU && (w ? mass[t] < need : count[t] < k))
            t++;
        if (t > 0) lo = dist[t - 1], n_lo = count[t - 1];
        if (t < SAMPLER_N_TAU) hi = dist[t], n_hi = count[t];
        if (hi < 0.0f) return -INFINITY; /* not even 64 * scale below the maximum */
        if (n_hi <= few || n_hi <= n_lo + n_lo / 2) break;
    }
    return m - hi;
}

/*
 * Put every token with logit >= tau (and > -inf; with `w`, also weight > 0) into
 * c, with its weight when `w` is given; returns how many. A block of
 * SAMPLER_BLOCK tokens is skipped after one vectorised count when none passes,
 * which is most blocks for top-k; within a block the candidate is written
 * unconditionally and the count advanced by the test, so no branch mispredicts
 * when the passing tokens are scattered (a wide nucleus).
 */
static int32_t collect(const float *logits, const float *w, int32_t vocab, float tau,
                       struct sampler_cand *c)
{
    int32_t n = 0;
    for (int32_t j = 0; j < vocab; j += SAMPLER_BLOCK) {
        int32_t end = MIN(j + SAMPLER_BLOCK, vocab);
        if (sampler_count_ge(logits + j, NULL, end - j, tau, NULL) == 0) continue;
        for (int32_t i = j; i < end; i++) {
            float l = logits[i], wi = w ? w[i] : 0.0f;
            c[n].logit = l;
            c[n].w = wi;
            c[n].id = i;
            n += l >= tau && l > -INFINITY && (!w || wi > 0.0f);
        }
    }
    return n;
}

/*
 * Top-k candidates: c[0, n) on return hold the k best finite tokens (n < k only
 * when fewer are finite), weighted at temperature 1 / inv_t; returns n. A
 * threshold search narrows the vocabulary to about k tokens (or a thousand), and
 * quickselect finishes on those.
 */
int32_t sampler_select_top_k(const float *logits, int32_t vocab, float m, float inv_t,
                             int32_t k, struct sampler_cand *c)
{
    float tau = find_tau(logits, NULL, vocab, m, 1.0f, k, 0.0);
    int32_t n = collect(logits, NULL, vocab, tau, c);
    if (n > k) {
        cand_top_k(c, n, k);
        n = k;
    }
    for (int32_t j = 0; j < n; j++)
        c[j].w = fast_exp((c[j].logit - m) * inv_t);
    return n;
}

/*
 * Top-p candidates without top-k: the nucleus at `top_p` of the weights `w`
 * [vocab] (total `total`), placed in c[0, n); returns n >= 1. A threshold search
 * narrows the vocabulary to tokens that surely hold the nucleus (checked exactly
 * here, in double; the whole vocabulary when the check fails), and the
 * mass-partition selection finds the exact nucleus among them.
 */
int32_t sampler_select_top_p(const float *logits, const float *w, int32_t vocab, float m,
                             float temperature, double total, float top_p,
                             struct sampler_cand *c)
{
    double target = (double)top_p * total;
    float tau = find_tau(logits, w, vocab, m, temperature, 0, target);
    int32_t n = collect(logits, w, vocab, tau, c);
    double kept = 0.0;
    for (int32_t j = 0; j < n; j++)
        kept += c[j].w;
    if (kept < target && tau > -INFINITY) n = collect(logits, w, vocab, -INFINITY, c);
    return n > 1 ? sampler_select_nucleus(c, n, target) : n;
}
