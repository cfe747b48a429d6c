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
#ifdef __AVX512F__
#include <immintrin.h>
#endif
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

int32_t h2o_select_evict_portable(const float *score, const int32_t *pos, int32_t n,
                                  int32_t t, int32_t recent)
{
    const int32_t protect_from = t - recent + 2; /* positions above t - (R - 1) stay */
    /* Two passes instead of one branchy one. The first is branch-free: the lowest
     * score among the candidates (scores are finite, >= 0). */
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

#ifdef __AVX512F__
/* One set of 16 lanes, each the best candidate it has seen: score, position, slot. */
struct evict_lanes {
    __m512 s;
    __m512i p, i;
};

/*
 * Offer slots i0 .. i0 + 15 (those below n) to the lanes: a candidate replaces a
 * lane's best if its score is lower, or equal (a lane with none yet holds INFINITY
 * with slot -1, which any finite or infinite score beats or matches) with an older
 * position or no best yet. Slots come in increasing order per lane, so on a full tie
 * the lane keeps the first.
 */
static inline void evict_offer(struct evict_lanes *l, const float *score,
                               const int32_t *pos, int32_t n, int32_t i0, __m512i lim)
{
    const __m512i zero = _mm512_setzero_si512();
    const __mmask16 in = n - i0 >= 16 ? (__mmask16)0xffff
                         : n > i0     ? (__mmask16)((1u << (n - i0)) - 1u)
                                      : (__mmask16)0;
    const __m512i p = _mm512_maskz_loadu_epi32(in, pos + i0);
    const __m512 s = _mm512_maskz_loadu_ps(in, score + i0);
    const __mmask16 cand =
        _mm512_mask_cmpge_epi32_mask(in, p, zero) & _mm512_cmplt_epi32_mask(p, lim);
    const __mmask16 none = _mm512_cmplt_epi32_mask(l->i, zero);
    const __mmask16 eq = _mm512_cmp_ps_mask(s, l->s, _CMP_EQ_OQ);
    const __mmask16 better = cand & (_mm512_cmp_ps_mask(s, l->s, _CMP_LT_OQ) |
                                     (eq & (_mm512_cmplt_epi32_mask(p, l->p) | none)));
    const __m512i idx = _mm512_add_epi32(
        _mm512_set1_epi32(i0),
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
    l->s = _mm512_mask_mov_ps(l->s, better, s);
    l->p = _mm512_mask_mov_epi32(l->p, better, p);
    l->i = _mm512_mask_mov_epi32(l->i, better, idx);
}

/*
 * h2o_select_evict in one pass, 16 slots a vector: lanes keep the best candidate by
 * (score, position, slot), the order the portable version's two passes decide by
 * (the lowest score, then the older position, then the first slot), so the lanes'
 * winners reduced by the same order give the same slot, however the slots were
 * dealt to lanes. Two sets of lanes take alternate vectors, so that two update
 * chains are in flight. A NaN score compares false both ways and is never taken, as
 * there. Every decode step runs this for every head of every evicting sequence over
 * B slots, which made it a visible share of a step.
 */
static int32_t select_evict_avx512(const float *score, const int32_t *pos, int32_t n,
                                   int32_t t, int32_t recent)
{
    const int32_t protect_from = t - recent + 2;
    const __m512i lim = _mm512_set1_epi32(protect_from);
    struct evict_lanes l[2];
    for (int k = 0; k < 2; k++)
        l[k] = (struct evict_lanes){_mm512_set1_ps(INFINITY), _mm512_set1_epi32(INT32_MAX),
                                    _mm512_set1_epi32(-1)};
    for (int32_t i = 0; i < n; i += 32) {
        evict_offer(&l[0], score, pos, n, i, lim);
        evict_offer(&l[1], score, pos, n, i + 16, lim);
    }
    float ls[32];
    int32_t lp[32], li[32];
    for (int k = 0; k < 2; k++) {
        _mm512_storeu_ps(ls + 16 * k, l[k].s);
        _mm512_storeu_si512(lp + 16 * k, l[k].p);
        _mm512_storeu_si512(li + 16 * k, l[k].i);
    }
    int32_t best = -1;
    float best_s = INFINITY;
    int32_t best_p = INT32_MAX;
    for (int32_t k = 0; k < 32; k++) {
        if (li[k] < 0) continue;
        if (best < 0 || ls[k] < best_s ||
            (ls[k] == best_s && (lp[k] < best_p || (lp[k] == best_p && li[k] < best)))) {
            best = li[k];
            best_s = ls[k];
            best_p = lp[k];
        }
    }
    if (best >= 0) return best;
    /* No candidate with a comparable score (all NaN, or none at all): the portable
     * version's fallback, the first candidate. */
    for (int32_t i = 0; i < n; i++)
        if (pos[i] >= 0 && pos[i] < protect_from) return i;
    return -1;
}
#endif

int32_t h2o_select_evict(const float *score, const int32_t *pos, int32_t n, int32_t t,
                         int32_t recent)
{
#ifdef __AVX512F__
    return select_evict_avx512(score, pos, n, t, recent);
#else
    return h2o_select_evict_portable(score, pos, n, t, recent);
#endif
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

/* The first slot holding the oldest position <= hi (outside the window), or -1. */
static int32_t oldest_outside_portable(const int32_t *pos, int32_t n, int32_t hi)
{
    int32_t best = -1;
    for (int32_t i = 0; i < n; i++)
        if (pos[i] >= 0 && pos[i] <= hi && (best < 0 || pos[i] < pos[best])) best = i;
    return best;
}

static int32_t oldest_outside(const int32_t *pos, int32_t n, int32_t hi)
{
#ifdef __AVX512F__
    /* The oldest such position in 16 lanes, then its first slot: the slot the
     * scalar scan picks (strictly older wins there, so the first of equals). */
    __m512i lo = _mm512_set1_epi32(INT32_MAX);
    for (int32_t i = 0; i < n; i += 16) {
        const __mmask16 in =
            n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1u);
        const __m512i p = _mm512_maskz_loadu_epi32(in, pos + i);
        const __mmask16 out = _mm512_mask_cmpge_epi32_mask(in, p, _mm512_setzero_si512()) &
                              _mm512_cmple_epi32_mask(p, _mm512_set1_epi32(hi));
        lo = _mm512_mask_min_epi32(lo, out, lo, p);
    }
    /* hi < INT32_MAX (t + 1 - window with window > 0), so INT32_MAX means none. */
    const int32_t oldest = _mm512_reduce_min_epi32(lo);
    for (int32_t i = 0; oldest != INT32_MAX && i < n; i++)
        if (pos[i] == oldest) return i;
    return -1;
#else
    return oldest_outside_portable(pos, n, hi);
#endif
}

int32_t h2o_select_evict_window_portable(const float *score, const int32_t *pos, int32_t n,
                                         int32_t t, int32_t recent, int32_t window)
{
    const int32_t best = window > 0 ? oldest_outside_portable(pos, n, t + 1 - window) : -1;
    return best >= 0 ? best : h2o_select_evict_portable(score, pos, n, t, recent);
}

int32_t h2o_select_evict_window(const float *score, const int32_t *pos, int32_t n,
                                int32_t t, int32_t recent, int32_t window)
{
    const int32_t best = window > 0 ? oldest_outside(pos, n, t + 1 - window) : -1;
    return best >= 0 ? best : h2o_select_evict(score, pos, n, t, recent);
}
