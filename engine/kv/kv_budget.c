/*
 * kv_budget.c - policy names, the default spec and budget resolution (see
 * kv_budget.h).
 */
#include "kv_budget.h"

#include "err.h"
#include "util.h"

#include <math.h>
#include <string.h>

void kv_budget_spec_default(struct kv_spec *s)
{
    s->policy = KV_POLICY_H2O;
    s->heavy_ratio = 0.1f;
    s->recent_ratio = 0.1f;
    s->heavy = -1;
    s->recent = -1;
    s->min_budget = KV_MIN_BUDGET_DEFAULT;
}

int kv_budget_policy_parse(const char *name, enum kv_policy *out)
{
    if (strcmp(name, "full") == 0) *out = KV_POLICY_FULL;
    else if (strcmp(name, "h2o") == 0) *out = KV_POLICY_H2O;
    else if (strcmp(name, "local") == 0) *out = KV_POLICY_LOCAL;
    else return -1;
    return 0;
}

const char *kv_budget_policy_name(enum kv_policy p)
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
