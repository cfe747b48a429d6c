/*
 * test_h2o_ref.c - the dense H2O reference checks itself before anything is checked
 * against it.
 *
 * With the full policy it must be Hugging Face transformers (golden logits within
 * 1e-4, identical greedy tokens); with a budget that never fills it must be the full
 * policy bit for bit; with a small budget every (layer, head) must end at B - 1 kept
 * tokens; and the two selection rules of DESIGN section 5 are checked by hand on
 * small arrays with ties.
 */
#include "test.h"

#include "err.h"
#include "golden.h"
#include "h2o_ref.h"

static const struct h2o_ref_policy FULL = {.full = true};

static struct h2o_ref *load_ref(const char *rel)
{
    struct h2o_ref *r = NULL;
    const char *path = strncmp(rel, "dummy:", 6) == 0 ? rel : test_data(rel);
    int err = h2o_ref_create(&r, path);
    if (err) {
        printf("# h2o_ref_create(%s): %s\n", path, err_msg());
        return NULL;
    }
    return r;
}

/* Full policy vs transformers on every golden prompt of `name`. */
static void check_golden(const char *name)
{
    char dir[128];
    /* "tiny-opt" is golden/tiny-opt; "golden-arch/tiny-llama" is itself. */
    snprintf(dir, sizeof dir, "%s%s", strchr(name, '/') ? "" : "golden/", name);
    struct golden g;
    golden_load(&g, name);
    struct h2o_ref *r = load_ref(dir);
    if (!r) {
        TEST_FAIL("cannot load %s", dir);
        golden_free(&g);
        return;
    }
    const int32_t V = g.vocab;
    EXPECT_EQ(h2o_ref_vocab(r), V);
    for (int32_t i = 0; i < g.n_prompts; i++) {
        const struct golden_prompt *gp = &g.p[i];
        const int32_t S = gp->n_decode;
        float *logits = xmalloc((size_t)(S + 1) * V * sizeof *logits);
        int32_t *toks = xmalloc((size_t)(S ? S : 1) * sizeof *toks);

        /* Forced to transformers' tokens: row 0 is the last prefill row, row k + 1 the
         * logits after decode token k; greedy picks must agree at every step. */
        CHECK(h2o_ref_run(r, gp->tokens, gp->n_tok, FULL, S, gp->decode, toks, logits,
                          NULL) == 0);
        double err = max_abs_diff(logits, gp->prefill + (int64_t)(gp->n_tok - 1) * V, V);
        for (int32_t k = 0; k < S; k++) {
            double d =
                max_abs_diff(logits + (int64_t)(k + 1) * V, gp->logits + (int64_t)k * V, V);
            err = d > err ? d : err;
            EXPECT_EQ(toks[k], gp->decode[k]);
            if (argmax(logits + (int64_t)k * V, V) != gp->decode[k])
                TEST_FAIL("%s prompt %d step %d: argmax %d, transformers chose %d", name, i,
                          k, argmax(logits + (int64_t)k * V, V), gp->decode[k]);
        }
        printf("# %s prompt %d (%d tokens): max |logit - transformers| = %.3g\n", name, i,
               gp->n_tok, err);
        if (!(err <= 1e-4)) TEST_FAIL("%s prompt %d: logit error %g > 1e-4", name, i, err);

        /* Greedy on its own: the same tokens as transformers. */
        CHECK(h2o_ref_run(r, gp->tokens, gp->n_tok, FULL, S, NULL, toks, logits, NULL) ==
              0);
        for (int32_t k = 0; k < S; k++)
            if (toks[k] != gp->decode[k])
                TEST_FAIL("%s prompt %d step %d: greedy %d, transformers %d", name, i, k,
                          toks[k], gp->decode[k]);
        free(logits);
        free(toks);
    }
    h2o_ref_destroy(r);
    golden_free(&g);
}

TEST(full_matches_transformers_tiny_opt)
{
    check_golden("tiny-opt");
}

TEST(full_matches_transformers_tiny_opt_350m)
{
    check_golden("tiny-opt-350m");
}

/* The Llama family (GQA 4 : 2, RoPE; Qwen2's biases and tied head) and GPT-NeoX
 * (partial rotary, parallel residual) as transformers runs them. */
TEST(full_matches_transformers_other_families)
{
    check_golden("golden-arch/tiny-llama");
    check_golden("golden-arch/tiny-qwen2");
    check_golden("golden-arch/tiny-neox");
}

/* A deterministic prompt of n tokens in [3, vocab). */
static void make_prompt(int32_t *p, int32_t n, int32_t vocab)
{
    uint32_t s = 12345;
    for (int32_t i = 0; i < n; i++) {
        s = s * 1103515245u + 12345u;
        p[i] = 3 + (int32_t)((s >> 8) % (uint32_t)(vocab - 3));
    }
}

/* Greedy run of `pol`; returns the logits [(S + 1) * V] (caller frees). */
static float *run_policy(struct h2o_ref *r, const int32_t *prompt, int32_t P,
                         struct h2o_ref_policy pol, int32_t S, int32_t *toks, int32_t *kept)
{
    const int32_t V = h2o_ref_vocab(r);
    float *logits = xmalloc((size_t)(S + 1) * V * sizeof *logits);
    CHECK(h2o_ref_run(r, prompt, P, pol, S, NULL, toks, logits, kept) == 0);
    return logits;
}

TEST(budget_that_never_fills_equals_full)
{
    /* B >= P + n_steps: no query ever misses a token (at B == P + n_steps the only
     * eviction comes after the last token's attention), so the logits are the full
     * policy's bit for bit, and so are the greedy tokens. */
    const char *models[] = {"golden/tiny-opt", "golden/tiny-opt-350m", "dummy:tiny"};
    const int32_t P = 40, S = 30;
    const struct h2o_ref_policy pols[] = {
        {.heavy = 35, .recent = 35}, /* B = 70 = P + S */
        {.heavy = 0, .recent = 80},  /* B = 80: a window wider than the run */
        {.heavy = 69, .recent = 1},  /* B = 70, R = 1 */
        {.heavy = 50, .recent = 50},
    };
    for (size_t m = 0; m < ARRAY_LEN(models); m++) {
        struct h2o_ref *r = load_ref(models[m]);
        if (!r) {
            TEST_FAIL("cannot load %s", models[m]);
            continue;
        }
        const int32_t V = h2o_ref_vocab(r);
        int32_t prompt[40], toks_full[30], toks[30];
        make_prompt(prompt, P, V);
        float *full = run_policy(r, prompt, P, FULL, S, toks_full, NULL);
        for (size_t k = 0; k < ARRAY_LEN(pols); k++) {
            float *h2o = run_policy(r, prompt, P, pols[k], S, toks, NULL);
            double d = max_abs_diff(full, h2o, (int64_t)(S + 1) * V);
            if (d != 0)
                TEST_FAIL("%s H=%d R=%d: logits differ from full by %g", models[m],
                          pols[k].heavy, pols[k].recent, d);
            EXPECT(memcmp(toks, toks_full, sizeof toks) == 0);
            free(h2o);
        }
        /* And a budget that does fill changes something, or the test above proves
         * nothing. */
        float *small = run_policy(
            r, prompt, P, (struct h2o_ref_policy){.heavy = 4, .recent = 3}, S, toks, NULL);
        EXPECT(max_abs_diff(full, small, (int64_t)(S + 1) * V) > 1e-3);
        free(small);
        free(full);
        h2o_ref_destroy(r);
    }
}

/* With GQA the policy is per KV head: dummy:llama-tiny has 2 layers of 2 KV heads
 * (4 query heads), so 4 kept counts, each H + R - 1 after decoding. */
TEST(gqa_keeps_per_kv_head)
{
    struct h2o_ref *r = load_ref("dummy:llama-tiny");
    if (!r) {
        TEST_FAIL("cannot load dummy:llama-tiny");
        return;
    }
    int32_t prompt[40], toks[20], kept[8];
    for (int32_t i = 0; i < 8; i++)
        kept[i] = -1;
    for (int32_t i = 0; i < 40; i++)
        prompt[i] = 3 + (i * 37) % 500;
    free(run_policy(r, prompt, 40, (struct h2o_ref_policy){.heavy = 5, .recent = 4}, 20,
                    toks, kept));
    for (int32_t i = 0; i < 4; i++)
        EXPECT_EQ(kept[i], 8);
    EXPECT_EQ(kept[4], -1); /* nothing past n_layer * n_kv_head written */
    h2o_ref_destroy(r);
}

TEST(kept_counts_end_at_budget_minus_one)
{
    /* P = 40, 30 decode steps: after the last step H heavy hitters and R - 1 recent
     * tokens remain in every (layer, head); with full, every token. */
    struct h2o_ref *r = load_ref("dummy:tiny");
    if (!r) {
        TEST_FAIL("cannot load dummy:tiny");
        return;
    }
    const int32_t P = 40, S = 30, n_lh = 2 * 4; /* dummy:tiny: 2 layers, 4 heads */
    const int32_t V = h2o_ref_vocab(r);
    int32_t prompt[40], toks[30], kept[8];
    make_prompt(prompt, P, V);
    const struct {
        struct h2o_ref_policy pol;
        int32_t want;
    } cases[] = {
        {{.heavy = 4, .recent = 3}, 6},
        {{.heavy = 0, .recent = 5}, 4},
        {{.heavy = 3, .recent = 1}, 3},
        {{.full = true}, 70},
    };
    for (size_t c = 0; c < ARRAY_LEN(cases); c++) {
        for (int32_t i = 0; i < n_lh; i++)
            kept[i] = -1;
        free(run_policy(r, prompt, P, cases[c].pol, S, toks, kept));
        for (int32_t i = 0; i < n_lh; i++)
            if (kept[i] != cases[c].want)
                TEST_FAIL("H=%d R=%d full=%d: (layer %d, head %d) keeps %d, expected %d",
                          cases[c].pol.heavy, cases[c].pol.recent, cases[c].pol.full, i / 4,
                          i % 4, kept[i], cases[c].want);
    }
    /* A prompt shorter than B - 1 stays whole after prefill (no decode step). */
    free(run_policy(r, prompt, 5, (struct h2o_ref_policy){.heavy = 4, .recent = 3}, 0, NULL,
                    kept));
    for (int32_t i = 0; i < n_lh; i++)
        EXPECT_EQ(kept[i], 5);
    /* Exactly B - 1 after a longer prefill. */
    free(run_policy(r, prompt, 40, (struct h2o_ref_policy){.heavy = 4, .recent = 3}, 0,
                    NULL, kept));
    for (int32_t i = 0; i < n_lh; i++)
        EXPECT_EQ(kept[i], 6);
    h2o_ref_destroy(r);
}

TEST(prefill_rule_by_hand)
{
    /*            pos:  0     1     2     3     4     5     6 */
    const float col[] = {0.5f, 0.9f, 0.5f, 0.9f, 0.1f, 0.0f, 0.3f};
    bool keep[7];

    /* H = 1, R = 3: the R - 1 = 2 newest (5, 6) are kept whatever their col (5 has the
     * smallest); the one heavy hitter is the older of the tied 0.9s, position 1. */
    h2o_ref_select_prefill(col, 7, 1, 3, keep);
    const bool want1[] = {false, true, false, false, false, true, true};
    EXPECT(memcmp(keep, want1, sizeof keep) == 0);

    /* H = 3, R = 3: both 0.9s, then the older of the tied 0.5s (0 before 2). */
    h2o_ref_select_prefill(col, 7, 3, 3, keep);
    const bool want3[] = {true, true, false, true, false, true, true};
    EXPECT(memcmp(keep, want3, sizeof keep) == 0);

    /* H = 2, R = 1: no recent token is protected; the heavy hitters are the 0.9s. */
    h2o_ref_select_prefill(col, 7, 2, 1, keep);
    const bool want_r1[] = {false, true, false, true, false, false, false};
    EXPECT(memcmp(keep, want_r1, sizeof keep) == 0);

    /* H = 0, R = 4: a window of the 3 newest. */
    h2o_ref_select_prefill(col, 7, 0, 4, keep);
    const bool want_h0[] = {false, false, false, false, true, true, true};
    EXPECT(memcmp(keep, want_h0, sizeof keep) == 0);

    /* P <= B - 1 (7 <= 4 + 4 - 1): everything is kept. */
    h2o_ref_select_prefill(col, 7, 4, 4, keep);
    for (int i = 0; i < 7; i++)
        EXPECT(keep[i]);
}

TEST(decode_rule_by_hand)
{
    /* Slots hold tokens out of position order (per-head hole filling), so the rule must
     * look at pos, not at the index. The current token is at t = 9. */
    /*                  idx:    0     1     2     3      4 */
    const float score[] = {0.3f, 0.1f, 0.1f, 0.05f, 0.2f};
    const int32_t pos[] = {4, 7, 2, 9, 0};
    bool kept[] = {true, true, true, true, true};

    /* R = 2 protects position 9 (the lowest score); 7 and 2 tie at 0.1: the older
     * position 2 (index 2) goes. */
    EXPECT_EQ(h2o_ref_select_evict(score, pos, kept, 5, 9, 2), 2);
    /* R = 1: nothing is protected, the current token competes and loses. */
    EXPECT_EQ(h2o_ref_select_evict(score, pos, kept, 5, 9, 1), 3);
    /* R = 3 protects positions > 7: only 9 (position 8 is not held), so again 2. */
    EXPECT_EQ(h2o_ref_select_evict(score, pos, kept, 5, 9, 3), 2);
    /* R = 4 protects positions > 6: 7 and 9; the argmin of the rest is still 2. */
    EXPECT_EQ(h2o_ref_select_evict(score, pos, kept, 5, 9, 4), 2);
    /* An evicted entry is never chosen again: without index 2, the tie is gone and
     * position 7 (index 1) is the argmin. */
    kept[2] = false;
    EXPECT_EQ(h2o_ref_select_evict(score, pos, kept, 5, 9, 2), 1);
    /* R = 4 protects 7 as well: position 0 (0.2) beats position 4 (0.3). */
    EXPECT_EQ(h2o_ref_select_evict(score, pos, kept, 5, 9, 4), 4);
    /* Everything protected or evicted: no candidate. */
    EXPECT_EQ(h2o_ref_select_evict(score, pos, kept, 5, 9, 11), -1);

    /* All scores equal: the oldest position goes, whatever its slot. */
    const float flat[] = {1.0f, 1.0f, 1.0f, 1.0f};
    const int32_t pos2[] = {6, 3, 5, 8};
    const bool all[] = {true, true, true, true};
    EXPECT_EQ(h2o_ref_select_evict(flat, pos2, all, 4, 8, 2), 1);
}

TEST(rejects_bad_input)
{
    /* The reference refuses big models before reading a weight. */
    struct h2o_ref *big = NULL;
    EXPECT_EQ(h2o_ref_create(&big, "dummy:opt-125m"), ENG_EUNSUPPORTED);
    EXPECT(big == NULL);

    struct h2o_ref *r = load_ref("dummy:tiny");
    if (!r) {
        TEST_FAIL("cannot load dummy:tiny");
        return;
    }
    const int32_t V = h2o_ref_vocab(r);
    float *logits = xmalloc((size_t)2 * V * sizeof *logits);
    int32_t tok = 5, bad = V, out;
    EXPECT_EQ(h2o_ref_run(r, &bad, 1, FULL, 0, NULL, NULL, logits, NULL), ENG_EINVAL);
    EXPECT_EQ(h2o_ref_run(r, &tok, 1, (struct h2o_ref_policy){.heavy = 2, .recent = 0}, 1,
                          NULL, &out, logits, NULL),
              ENG_EINVAL);
    EXPECT_EQ(h2o_ref_run(r, &tok, 1, FULL, 1, &bad, &out, logits, NULL), ENG_EINVAL);
    EXPECT_EQ(h2o_ref_run(r, &tok, 1, FULL, 1, &tok, &out, logits, NULL), 0);
    free(logits);
    h2o_ref_destroy(r);
}

int main(void)
{
    RUN(prefill_rule_by_hand);
    RUN(decode_rule_by_hand);
    RUN(full_matches_transformers_tiny_opt);
    RUN(full_matches_transformers_tiny_opt_350m);
    RUN(full_matches_transformers_other_families);
    RUN(gqa_keeps_per_kv_head);
    RUN(budget_that_never_fills_equals_full);
    RUN(kept_counts_end_at_budget_minus_one);
    RUN(rejects_bad_input);
    return test_done();
}
