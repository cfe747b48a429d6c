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
