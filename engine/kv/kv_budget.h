/*
 * kv_budget.h - the KV-cache policies (full, h2o, local) and their budgets.
 *
 * How a request or the configuration states a policy (struct kv_spec) and what it
 * resolves to for one sequence (struct kv_budget): B = heavy + recent slots per
 * (layer, head), as DESIGN.md section 5 defines them. Pure functions; h2o.h holds the
 * two selection rules that apply a budget, kv_seq.c applies both to the paged cache.
 * Thread: any (no state).
 */
#ifndef H2O_KV_BUDGET_H
#define H2O_KV_BUDGET_H

#include <stdbool.h>
#include <stdint.h>

enum kv_policy {
    KV_POLICY_FULL = 0,  /* keep every token */
    KV_POLICY_H2O = 1,   /* heavy hitters + recent window */
    KV_POLICY_LOCAL = 2, /* recent window only (H = 0), the paper's baseline */
};

/* A policy as a request or the configuration states it. */
struct kv_spec {
    enum kv_policy policy;
    float heavy_ratio;  /* of L = prompt_len + max_tokens; used when heavy < 0 */
    float recent_ratio; /* of L; used when recent < 0 */
    int32_t heavy;      /* absolute heavy-hitter count, or -1 */
    int32_t recent;     /* absolute recent-window count (>= 1), or -1 */
    int32_t min_budget; /* floor on H + R in tokens (0 = none); see kv_budget_resolve */
};

/* The floor of the default spec, in tokens per (layer, head): a request whose
 * prompt + max_tokens fits under it is never evicted. Chosen by measurement on the
 * built-in model (docs/kv-cache.md, "The floor"). */
#define KV_MIN_BUDGET_DEFAULT 128

/* A policy resolved for one sequence: B = heavy + recent slots per (layer, head). */
struct kv_budget {
    enum kv_policy policy;
    int32_t heavy;  /* H */
    int32_t recent; /* R >= 1 */
};

/* The default spec: h2o with the paper's 20% (0.1 heavy + 0.1 recent), floored at
 * KV_MIN_BUDGET_DEFAULT tokens. */
void kv_budget_spec_default(struct kv_spec *s);

/* "full", "h2o" or "local" -> policy; returns 0 or -1 for an unknown name. */
int kv_budget_policy_parse(const char *name, enum kv_policy *out);
const char *kv_budget_policy_name(enum kv_policy p);

/*
 * Resolve a spec for a sequence of prompt_len + max_tokens tokens:
 * H = ceil(heavy_ratio * L), R = max(1, ceil(recent_ratio * L)) unless absolute
 * counts are given; local forces H = 0. H and R are then clamped to L: a budget
 * that large never evicts either way, and B stays far from int32 overflow. Last,
 * a budget below the floor F = min(min_budget, L) is raised to F, keeping the
 * heavy : recent split (local: R = F); so a sequence with L <= min_budget keeps
 * every token, as `full` would (with max_tokens 0, F = min(min_budget, L + 1): the
 * prefill keeps P tokens only when P <= B - 1).
 * Returns 0, or ENG_EINVAL (message set) for negative ratios, a recent count below
 * 1 or a negative floor.
 */
int kv_budget_resolve(const struct kv_spec *s, int32_t prompt_len, int32_t max_tokens,
                      struct kv_budget *out);

/* Slots per (layer, head): H + R, or INT32_MAX for full. */
int32_t kv_budget_slots(const struct kv_budget *b);

/*
 * The most slots a sequence ever occupies: the whole prompt while it prefills, then
 * up to B (or every token for full). Admission reserves ceil(this / block_size).
 */
int32_t kv_budget_peak_slots(const struct kv_budget *b, int32_t prompt_len,
                             int32_t max_tokens);

#endif
