/*
 * test_h2o_rules.c - the engine's H2O selection rules (engine/h2o.c) against the
 * reference's (tests/lib/h2o_ref.c), on many random cases full of ties, and the
 * budget arithmetic.
 */
#include "test.h"

#include "h2o.h"
#include "kv_budget.h"
#include "h2o_ref.h"
#include "rnd.h"
#include "util.h"

/* Scores from a small set of values, so that ties are common. */
static float tie_value(uint64_t *s)
{
    return (float)(lcg(s) % 6) * 0.25f;
}

TEST(prefill_selection_matches_reference)
{
    uint64_t st = 1;
    float col[300];
    int32_t pos[300], keep[300], scratch[300];
    bool ref_keep[300];
    for (int iter = 0; iter < 20000; iter++) {
        const int32_t P = 1 + (int32_t)(lcg(&st) % 200);
        const int32_t H = (int32_t)(lcg(&st) % 40), R = 1 + (int32_t)(lcg(&st) % 40);
        for (int32_t j = 0; j < P; j++) {
            col[j] = tie_value(&st);
            pos[j] = j; /* a prompt fills its slots in position order */
        }
        int32_t n = h2o_select_prefill(col, pos, P, H, R, keep, scratch);
        h2o_ref_select_prefill(col, P, H, R, ref_keep);
        int32_t n_ref = 0;
        for (int32_t j = 0; j < P; j++) n_ref += ref_keep[j];
        if (n != n_ref) {
            TEST_FAIL("P %d H %d R %d: keeps %d, reference %d", P, H, R, n, n_ref);
            return;
        }
        for (int32_t i = 0; i < n; i++) {
            if (!ref_keep[keep[i]] || (i > 0 && keep[i] <= keep[i - 1])) {
                TEST_FAIL("P %d H %d R %d: slot %d kept (or out of order)", P, H, R, keep[i]);
                return;
            }
        }
        EXPECT_EQ(n, MIN(P, H + R - 1));
    }
}

TEST(decode_eviction_matches_reference)
{
    uint64_t st = 2;
    float score[300];
    int32_t pos[300];
    bool kept[300];
    for (int iter = 0; iter < 20000; iter++) {
        const int32_t B = 1 + (int32_t)(lcg(&st) % 120), R = 1 + (int32_t)(lcg(&st) % B);
        const int32_t t = 3 * B + (int32_t)(lcg(&st) % 500); /* room for the gaps */
        /* B distinct positions <= t in a random slot order (holes are refilled per
         * head, so slots are not in position order). The R - 1 newest positions are
         * always all there, as in the engine (they are never evicted); older ones
         * have gaps where tokens were evicted. */
        int32_t p = t;
        for (int32_t i = 0; i < B; i++) {
            pos[i] = p;
            p -= i < R - 1 ? 1 : 1 + (int32_t)(lcg(&st) % 3);
            score[i] = tie_value(&st);
            kept[i] = true;
        }
        for (int32_t i = B - 1; i > 0; i--) {
            int32_t j = (int32_t)(lcg(&st) % (uint64_t)(i + 1)), tp = pos[i];
            float ts = score[i];
            pos[i] = pos[j], pos[j] = tp;
            score[i] = score[j], score[j] = ts;
        }
        int32_t e = h2o_select_evict(score, pos, B, t, R);
        int32_t e_ref = h2o_ref_select_evict(score, pos, kept, B, t, R);
        if (e != e_ref) {
            TEST_FAIL("B %d R %d t %d: evicts slot %d, reference %d", B, R, t, e, e_ref);
            return;
        }
    }
}

TEST(floor_raises_small_budgets_and_keeps_the_split)
{
    struct kv_spec s;
    struct kv_budget b;
    kv_budget_spec_default(&s); /* h2o 0.1 + 0.1, floor KV_MIN_BUDGET_DEFAULT */
    const int32_t F = KV_MIN_BUDGET_DEFAULT;
    EXPECT_EQ(s.min_budget, F);
    /* 4 + 16 tokens: 20% would be 2 + 2; the floor covers the whole sequence, so
     * nothing is ever evicted (B = L, exactly full's footprint). */
    EXPECT_EQ(kv_budget_resolve(&s, 4, 16, &b), 0);
    EXPECT_EQ(kv_budget_slots(&b), 20);
    EXPECT_EQ(b.heavy, 10);
    EXPECT_EQ(b.recent, 10);
    EXPECT_EQ(kv_budget_peak_slots(&b, 4, 16), 20);
    /* A scored prompt that generates nothing (max_tokens 0) keeps all P tokens only
     * when P <= B - 1: its floor is P + 1. */
    EXPECT_EQ(kv_budget_resolve(&s, 4, 0, &b), 0);
    EXPECT_EQ(kv_budget_slots(&b), 5);
    EXPECT_EQ(kv_budget_peak_slots(&b, 4, 0), 4);
    /* 512 + 32: 20% is 55 + 55 = 110 < F, raised to F, half and half. */
    EXPECT_EQ(kv_budget_resolve(&s, 512, 32, &b), 0);
    EXPECT_EQ(b.heavy, F / 2);
    EXPECT_EQ(b.recent, F - F / 2);
    /* 512 + 512: 206 > F, untouched. */
    EXPECT_EQ(kv_budget_resolve(&s, 512, 512, &b), 0);
    EXPECT_EQ(b.heavy, 103);
    EXPECT_EQ(b.recent, 103);
    /* Absolute counts keep their ratio: 7 : 2 of F. */
    s.heavy = 7;
    s.recent = 2;
    EXPECT_EQ(kv_budget_resolve(&s, 1000, 1000, &b), 0);
    EXPECT_EQ(b.heavy + b.recent, F);
    EXPECT_EQ(b.heavy, (7 * F + 4) / 9); /* rounded to the nearest token */
    /* All heavy, no recent: the window still holds the current token. */
    s.heavy = 50;
    s.recent = 1;
    s.min_budget = 1000;
    EXPECT_EQ(kv_budget_resolve(&s, 2000, 0, &b), 0);
    EXPECT(b.recent >= 1);
    EXPECT_EQ(b.heavy + b.recent, 1000);
    /* local: the window grows to F. */
    s.policy = KV_POLICY_LOCAL;
    s.heavy = s.recent = -1;
    s.min_budget = F;
    EXPECT_EQ(kv_budget_resolve(&s, 600, 400, &b), 0);
    EXPECT_EQ(b.heavy, 0);
    EXPECT_EQ(b.recent, F);
    /* 0 turns it off. */
    s.policy = KV_POLICY_H2O;
    s.min_budget = 0;
    EXPECT_EQ(kv_budget_resolve(&s, 4, 16, &b), 0);
    EXPECT_EQ(b.heavy, 2);
    EXPECT_EQ(b.recent, 2);
    /* full is full whatever the floor. */
    s.policy = KV_POLICY_FULL;
    s.min_budget = F;
    EXPECT_EQ(kv_budget_resolve(&s, 4, 16, &b), 0);
    EXPECT_EQ(kv_budget_slots(&b), INT32_MAX);
}

TEST(budgets_from_ratios_and_counts)
{
    struct kv_spec s;
    struct kv_budget b;
    kv_budget_spec_default(&s); /* h2o, 0.1 + 0.1 */
    s.min_budget = 0;    /* the floor has its own test below */
    EXPECT_EQ(kv_budget_resolve(&s, 512, 512, &b), 0);
    EXPECT_EQ(b.heavy, 103); /* ceil(102.4) */
    EXPECT_EQ(b.recent, 103);
    EXPECT_EQ(kv_budget_slots(&b), 206);
    EXPECT_EQ(kv_budget_resolve(&s, 60, 40, &b), 0);
    EXPECT_EQ(b.heavy, 10); /* exactly 10, not 11 from float rounding */
    EXPECT_EQ(b.recent, 10);
    EXPECT_EQ(kv_budget_peak_slots(&b, 60, 40), 60);  /* the prompt while it prefills */
    EXPECT_EQ(kv_budget_peak_slots(&b, 10, 40), 20);  /* B once decoding */
    EXPECT_EQ(kv_budget_peak_slots(&b, 5, 10), 15);   /* never more than the sequence */
    s.recent_ratio = 0;
    EXPECT_EQ(kv_budget_resolve(&s, 10, 10, &b), 0);
    EXPECT_EQ(b.recent, 1); /* the window always holds the current token */
    s.heavy = 7;
    s.recent = 2;
    EXPECT_EQ(kv_budget_resolve(&s, 100, 100, &b), 0);
    EXPECT_EQ(b.heavy, 7);
    EXPECT_EQ(b.recent, 2);
    s.policy = KV_POLICY_LOCAL;
    EXPECT_EQ(kv_budget_resolve(&s, 100, 100, &b), 0);
    EXPECT_EQ(b.heavy, 0);
    s.policy = KV_POLICY_FULL;
    EXPECT_EQ(kv_budget_resolve(&s, 100, 100, &b), 0);
    EXPECT_EQ(kv_budget_peak_slots(&b, 100, 100), 200);
    s.policy = KV_POLICY_H2O;
    s.recent = 0;
    EXPECT(kv_budget_resolve(&s, 10, 10, &b) != 0);
    s.recent = 2;
    s.min_budget = -1;
    EXPECT(kv_budget_resolve(&s, 10, 10, &b) != 0);
    enum kv_policy p;
    EXPECT_EQ(kv_budget_policy_parse("local", &p), 0);
    EXPECT_EQ(p, KV_POLICY_LOCAL);
    EXPECT(kv_budget_policy_parse("lru", &p) != 0);
}

/* Mistral's window composed with H2O (docs/kv-cache.md): a slot outside the next
 * token's window goes first, whatever its score, even a recent one. */
TEST(window_decode_evicts_outside_first)
{
    /* W = 4, token t = 9 just attended: the next token (10) sees positions > 6. */
    const int32_t pos[5] = {2, 5, 7, 8, 9};
    const float score[5] = {9.0f, 0.1f, 0.2f, 0.3f, 0.4f};
    EXPECT_EQ(h2o_select_evict_window(score, pos, 5, 9, 2, 4), 0); /* oldest outside */
    /* Nothing outside the window: the H2O rule (argmin among positions < 9). */
    const int32_t pos2[4] = {7, 8, 9, 6 + 4};
    const float score2[4] = {0.5f, 0.2f, 0.1f, 0.0f};
    EXPECT_EQ(h2o_select_evict_window(score2, pos2, 3, 9, 2, 4), 1);
    /* With R - 1 = 3 protecting 7, 8, 9, position 6 is outside (6 <= 10 - 4) and goes. */
    const int32_t pos3[4] = {6, 7, 8, 9};
    const float score3[4] = {5.0f, 0.0f, 0.0f, 0.0f};
    EXPECT_EQ(h2o_select_evict_window(score3, pos3, 4, 9, 4, 4), 0);
    /* window 0 is h2o_select_evict, on random cases. */
    uint64_t st = 7;
    int32_t p[64];
    float sc[64];
    for (int iter = 0; iter < 2000; iter++) {
        const int32_t n = 1 + (int32_t)(lcg(&st) % 60), R = 1 + (int32_t)(lcg(&st) % 8);
        for (int32_t i = 0; i < n; i++) {
            p[i] = (int32_t)(lcg(&st) % 100);
            sc[i] = tie_value(&st);
        }
        if (h2o_select_evict_window(sc, p, n, 100, R, 0) !=
            h2o_select_evict(sc, p, n, 100, R))
            TEST_FAIL("iter %d: window 0 differs from h2o_select_evict", iter);
    }
}

TEST(window_prefill_keeps_the_window_first)
{
    float col[10] = {9, 8, 7, 6, 0.5f, 0.4f, 0.3f, 0.2f, 0.1f, 0.0f};
    int32_t pos[10], keep[10], scratch[10];
    for (int32_t j = 0; j < 10; j++)
        pos[j] = j;
    /* B = 4, W = 4: exactly B - 1 = 3 prompt tokens (7, 8, 9) are inside the next
     * token's window; the heavy hitters 0..3 are outside and dropped. */
    EXPECT_EQ(h2o_select_prefill_window(col, pos, 10, 2, 2, 4, keep, scratch), 3);
    EXPECT_EQ(keep[0], 7);
    EXPECT_EQ(keep[1], 8);
    EXPECT_EQ(keep[2], 9);
    /* W = 6: positions 5..9 inside; H2O among them: the newest (9) and the two
     * largest col of 5..8 (5 and 6). */
    EXPECT_EQ(h2o_select_prefill_window(col, pos, 10, 2, 2, 6, keep, scratch), 3);
    EXPECT_EQ(keep[0], 5);
    EXPECT_EQ(keep[1], 6);
    EXPECT_EQ(keep[2], 9);
    /* W = 2 < B: the one inside (9) and the newest outside (7, 8) fill B - 1. */
    EXPECT_EQ(h2o_select_prefill_window(col, pos, 10, 2, 2, 2, keep, scratch), 3);
    EXPECT_EQ(keep[0], 7);
    EXPECT_EQ(keep[1], 8);
    EXPECT_EQ(keep[2], 9);
    /* No window: the plain rule (0 and 1 heavy, 9 recent). */
    EXPECT_EQ(h2o_select_prefill_window(col, pos, 10, 2, 2, 0, keep, scratch), 3);
    EXPECT_EQ(keep[0], 0);
    EXPECT_EQ(keep[1], 1);
    EXPECT_EQ(keep[2], 9);
}

int main(void)
{
    RUN(prefill_selection_matches_reference);
    RUN(decode_eviction_matches_reference);
    RUN(budgets_from_ratios_and_counts);
    RUN(floor_raises_small_budgets_and_keeps_the_split);
    RUN(window_decode_evicts_outside_first);
    RUN(window_prefill_keeps_the_window_first);
    return test_done();
}
