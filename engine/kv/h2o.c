/*
 * h2o.c - the H2O selection rules (see h2o.h).
 *
 * Ties are broken by position so the result never depends on slot order, thread
 * count or sort stability: among equal scores the older token is the heavier hitter
 * at prefill (kept first) and the first to go at decode.
 */
#include "h2o.h"

#include "err.h"
#include "util.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* Whether slot a ranks before slot b as a heavy hitter: larger score, then older. */
static inline bool heavier(const float *col, const int32_t *pos, int32_t a, int32_t b)
{
    if (col[a] != col[b]) return col[a] > col[b];
    return pos[a] < pos[b];
}

/* The index (lo, mid or hi) of idx[] holding the median of three by heavier(). */
static int32_t median3(const float *col, const int32_t *pos, const int32_t *idx, int32_t lo,
                       int32_t mid, int32_t hi)
{
    int32_t a = lo, b = mid, c = hi, t;
    /* Sort the three positions so that idx[a] is heaviest and idx[c] lightest. */
    if (heavier(col, pos, idx[b], idx[a])) t = a, a = b, b = t;
    if (heavier(col, pos, idx[c], idx[b])) t = b, b = c, c = t;
    if (heavier(col, pos, idx[b], idx[a])) t = a, a = b, b = t;
    return b;
}

/* Reorder idx[0..n) so that its first k entries are the k heaviest (in any order).
 * Quickselect with a median-of-three pivot: expected O(n). */
static void select_heaviest(const float *col, const int32_t *pos, int32_t *idx, int32_t n,
                            int32_t k)
{
    int32_t lo = 0, hi = n - 1;
    while (lo < hi) {
        int32_t m = median3(col, pos, idx, lo, lo + (hi - lo) / 2, hi), t;
        t = idx[m], idx[m] = idx[hi], idx[hi] = t;
        const int32_t piv = idx[hi];
        int32_t store = lo;
        for (int32_t i = lo; i < hi; i++)
            if (heavier(col, pos, idx[i], piv)) t = idx[i], idx[i] = idx[store], idx[store++] = t;
        idx[hi] = idx[store];
        idx[store] = piv;
        /* Now idx[lo..store) are heavier than the pivot and idx[store] is the pivot. */
        if (store == k || store + 1 == k) return;
        if (store > k) hi = store - 1;
        else lo = store + 1;
    }
}

int32_t h2o_select_prefill(const float *col, const int32_t *pos, int32_t n, int32_t heavy,
                           int32_t recent, int32_t *keep, int32_t *scratch)
{
    if (n <= heavy + recent - 1) {
        for (int32_t i = 0; i < n; i++) keep[i] = i;
        return n;
    }
    /* The R - 1 newest positions: those above pmax - (R - 1). */
    int32_t pmax = INT32_MIN;
    for (int32_t i = 0; i < n; i++) pmax = MAX(pmax, pos[i]);
    const int32_t newest_from = pmax - recent + 2;
    /* keep[] doubles as a kept flag per slot, then is compacted in place into the
     * ascending list of kept slots (the write index never passes the read index). */
    int32_t n_rest = 0;
    for (int32_t i = 0; i < n; i++) {
        keep[i] = pos[i] >= newest_from;
        if (!keep[i]) scratch[n_rest++] = i;
    }
    const int32_t h = MIN(heavy, n_rest);
    if (h > 0 && h < n_rest) select_heaviest(col, pos, scratch, n_rest, h);
    for (int32_t i = 0; i < h; i++) keep[scratch[i]] = 1;
    int32_t n_keep = 0;
    for (int32_t i = 0; i < n; i++)
        if (keep[i]) keep[n_keep++] = i;
    return n_keep;
}

int32_t h2o_select_evict(const float *score, const int32_t *pos, int32_t n, int32_t t,
                         int32_t recent)
{
    const int32_t protect_from = t - recent + 2; /* positions above t - (R - 1) stay */
    /* Two passes instead of one branchy one: every decode step runs this for every
     * head of every evicting sequence, B slots each. The first is branch-free, so it
     * vectorises: the lowest score among the candidates (scores are finite, >= 0). */
    float lo = INFINITY;
    for (int32_t i = 0; i < n; i++) {
        const float s = pos[i] >= 0 && pos[i] < protect_from ? score[i] : INFINITY;
        lo = s < lo ? s : lo;
    }
    /* The second finds the candidate holding it; ties go to the older position. */
    int32_t best = -1;
    for (int32_t i = 0; i < n; i++)
        if (score[i] == lo && pos[i] >= 0 && pos[i] < protect_from &&
            (best < 0 || pos[i] < pos[best]))
            best = i;
    /* NaN scores (a model producing NaN attention) match nothing above; the first
     * candidate then goes, as the one-pass scan this replaced would have chosen. */
    for (int32_t i = 0; best < 0 && i < n; i++)
        if (pos[i] >= 0 && pos[i] < protect_from) best = i;
    return best;
}

int32_t h2o_select_prefill_window(const float *col, const int32_t *pos, int32_t n,
                                  int32_t heavy, int32_t recent, int32_t window,
                                  int32_t *keep, int32_t *scratch)
{
    const int64_t B = (int64_t)heavy + recent;
    if (window <= 0 || n <= B - 1)
        return h2o_select_prefill(col, pos, n, heavy, recent, keep, scratch);
    int32_t next = 0;
    for (int32_t i = 0; i < n; i++)
        next = pos[i] + 1 > next ? pos[i] + 1 : next;
    const int32_t lo = next - window; /* inside: position > lo */
    int32_t *idx = xmalloc((size_t)n * sizeof *idx), n_in = 0;
    for (int32_t i = 0; i < n; i++)
        if (pos[i] > lo) idx[n_in++] = i;
    int32_t got;
    if (n_in >= B - 1) {
        /* The H2O rule among the tokens the next query can still see. */
        float *sc = xmalloc((size_t)n_in * sizeof *sc);
        int32_t *sp = xmalloc((size_t)n_in * sizeof *sp), *sk = scratch;
        for (int32_t i = 0; i < n_in; i++) {
            sc[i] = col[idx[i]];
            sp[i] = pos[idx[i]];
        }
        int32_t *k = xmalloc((size_t)n_in * sizeof *k);
        got = h2o_select_prefill(sc, sp, n_in, heavy, recent, k, sk);
        for (int32_t i = 0; i < got; i++)
            keep[i] = idx[k[i]]; /* idx ascending: keep stays ascending */
        free(k);
        free(sc);
        free(sp);
    } else {
        /* Every token inside, then the newest outside up to B - 1 (marked in
         * scratch, 1 = kept), in slot order. */
        for (int32_t i = 0; i < n; i++)
            scratch[i] = pos[i] > lo;
        int32_t need = (int32_t)(B - 1) - n_in;
        while (need > 0) {
            int32_t best = -1;
            for (int32_t i = 0; i < n; i++)
                if (!scratch[i] && (best < 0 || pos[i] > pos[best])) best = i;
            scratch[best] = 1;
            need--;
        }
        got = 0;
        for (int32_t i = 0; i < n; i++)
            if (scratch[i]) keep[got++] = i;
    }
    free(idx);
    return got;
}

int32_t h2o_select_evict_window(const float *score, const int32_t *pos, int32_t n,
                                int32_t t, int32_t recent, int32_t window)
{
    if (window > 0) {
        int32_t best = -1;
        for (int32_t i = 0; i < n; i++)
            if (pos[i] >= 0 && pos[i] <= t + 1 - window && (best < 0 || pos[i] < pos[best]))
                best = i;
        if (best >= 0) return best;
    }
    return h2o_select_evict(score, pos, n, t, recent);
}
