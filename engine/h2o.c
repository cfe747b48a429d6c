/*
 * h2o.c - budgets and the H2O selection rules (see h2o.h).
 *
 * Ties are broken by position so the result never depends on slot order, thread
 * count or sort stability: among equal scores the older token is the heavier hitter
 * at prefill (kept first) and the first to go at decode.
 */
#include "h2o.h"

#include "err.h"
#include "util.h"

#include <math.h>
#include <string.h>

void kv_spec_default(struct kv_spec *s)
{
    s->policy = KV_POLICY_H2O;
    s->heavy_ratio = 0.1f;
    s->recent_ratio = 0.1f;
    s->heavy = -1;
    s->recent = -1;
    s->min_budget = KV_MIN_BUDGET_DEFAULT;
}

int kv_policy_parse(const char *name, enum kv_policy *out)
{
    if (strcmp(name, "full") == 0) *out = KV_POLICY_FULL;
    else if (strcmp(name, "h2o") == 0) *out = KV_POLICY_H2O;
    else if (strcmp(name, "local") == 0) *out = KV_POLICY_LOCAL;
    else return -1;
    return 0;
}

const char *kv_policy_name(enum kv_policy p)
{
    return p == KV_POLICY_FULL ? "full" : p == KV_POLICY_H2O ? "h2o" : "local";
}

/* ceil(ratio * L) without float surprises: 0.1 * 100 must give 10, not 11. */
static int32_t ratio_count(float ratio, int32_t L)
{
    double v = (double)ratio * (double)L;
    double r = ceil(v - 1e-6 * (v > 1 ? v : 1));
    return r < 0 ? 0 : r > INT32_MAX / 4 ? INT32_MAX / 4 : (int32_t)r;
}

int kv_budget_resolve(const struct kv_spec *s, int32_t prompt_len, int32_t max_tokens,
                      struct kv_budget *out)
{
    out->policy = s->policy;
    out->heavy = out->recent = 0;
    if (s->policy == KV_POLICY_FULL) return 0;
    if (!(s->heavy_ratio >= 0) || !(s->recent_ratio >= 0))
        return err_set(ENG_EINVAL, "KV budget ratios must be >= 0");
    if (s->min_budget < 0) return err_set(ENG_EINVAL, "the KV budget floor must be >= 0");
    const int32_t L = (int32_t)MIN((int64_t)prompt_len + max_tokens, (int64_t)INT32_MAX / 4);
    int32_t H = s->heavy >= 0 ? s->heavy : ratio_count(s->heavy_ratio, L);
    int32_t R = s->recent >= 0 ? s->recent : MAX(1, ratio_count(s->recent_ratio, L));
    if (R < 1) return err_set(ENG_EINVAL, "the recent window must hold at least 1 token");
    if (s->policy == KV_POLICY_LOCAL) H = 0;
    /* A sequence never caches L tokens (the last one sampled is not fed back), so any
     * H or R above L evicts nothing, exactly like L. Clamping keeps B = H + R and
     * ceil(B / block_size) far from int32 overflow whatever count a request sends
     * (the API takes any absolute count up to INT32_MAX). */
    H = MIN(H, MAX(L, 1));
    R = MIN(R, MAX(L, 1));
    /* The floor: a short request's 20% is a handful of tokens, which costs it quality
     * and saves less than a block. Raising B to F keeps the split the spec asked for
     * (H : R rounded to the nearest token, R >= 1). F = L keeps every token of a
     * sequence that generates (it caches at most L - 1); one that generates nothing
     * (max_tokens 0: a scored prompt) keeps its P = L prompt tokens only when
     * P <= B - 1, so its F is L + 1. */
    const int32_t whole = max_tokens > 0 ? L : L + 1;
    const int32_t F = MIN(s->min_budget, MAX(whole, 1));
    if (H + R < F) {
        const int32_t h = (int32_t)(((int64_t)2 * F * H + (H + R)) / (2 * (int64_t)(H + R)));
        H = MIN(h, F - 1);
        R = F - H;
    }
    out->heavy = H;
    out->recent = R;
    return 0;
}

int32_t kv_budget_slots(const struct kv_budget *b)
{
    return b->policy == KV_POLICY_FULL ? INT32_MAX : b->heavy + b->recent;
}

int32_t kv_budget_peak_slots(const struct kv_budget *b, int32_t prompt_len, int32_t max_tokens)
{
    int64_t all = (int64_t)prompt_len + max_tokens;
    int64_t during = MIN(all, (int64_t)kv_budget_slots(b));
    return (int32_t)MAX((int64_t)prompt_len, during);
}

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
