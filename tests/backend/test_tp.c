/*
 * test_tp.c - CPU tensor parallelism against the unsharded model.
 *
 * The bar: with the layers sharded over N = 2 and N = 4 rank threads (heads
 * and fc1 units split, out_proj and fc2 summed by the shared-memory all-reduce), the
 * logits equal N = 1's within 1e-4 and the greedy tokens are identical, on the
 * golden tiny OPTs (pre-LN, and post-LN with OPT-350m's projections) and dummy:tiny,
 * with `full` and with `h2o` budgets that evict during the prompt and while
 * decoding. Each model runs the same sequences batched and in prompt chunks, as the
 * scheduler feeds them, so decode holes (per-head slots) and compaction are on the
 * sharded path too. Also: a sharded run repeats bit for bit (the all-reduce sums in
 * a fixed order), the scheduler path (generate_run) picks the same tokens, and a
 * model whose heads do not divide by N fails to load with a clear message.
 */
#include "test.h"

#include "engine_run.h"

/* Every case of engine_run.h's table (every budget kind) on a model with `tp`
 * ranks. */
static bool run_tp(struct erun *r, const char *name, int tp, int32_t chunk)
{
    struct model_opts mo;
    erun_opts(&mo, BE_DEVICE_CPU, tp, false);
    return erun_run(r, name, &mo, chunk, 300);
}

/* TP = tp against TP = 1: identical greedy tokens, every step's logits within tol. */
static void check_tp(const char *name, int tp, int32_t chunk)
{
    struct erun one = {0}, many = {0};
    if (!run_tp(&one, name, 1, chunk) || !run_tp(&many, name, tp, chunk)) {
        TEST_FAIL("%s: cannot load with tp 1 and %d", name, tp);
        erun_free(&one);
        erun_free(&many);
        return;
    }
    const int32_t V = one.m->cfg.vocab_size;
    for (int32_t c = 0; c < ERUN_CASES; c++) {
        const struct eseq *a = &one.es[c], *b = &many.es[c];
        const struct erun_case *k = &erun_cases[c];
        int32_t first_diff = -1;
        for (int32_t t = 0; t < STEPS && first_diff < 0; t++)
            if (a->tokens[a->P + t] != b->tokens[b->P + t]) first_diff = t;
        /* Logits are comparable up to the first differing token. */
        const int32_t rows = first_diff < 0 ? STEPS + 1 : first_diff + 1;
        const double d = max_abs_diff(a->logits, b->logits, (int64_t)rows * V);
        printf("# %s tp %d chunk %d case %d (P %d, %s H %d R %d): max |tp - tp1| %.3g over "
               "%d steps\n",
               name, tp, chunk, c, a->P, k->full ? "full" : "h2o", k->H, k->R, d, rows);
        if (first_diff >= 0)
            TEST_FAIL("%s tp %d case %d: greedy token differs at step %d (%d vs %d)", name,
                      tp, c, first_diff, b->tokens[b->P + first_diff],
                      a->tokens[a->P + first_diff]);
        if (!(d <= 1e-4))
            TEST_FAIL("%s tp %d case %d: logits differ by %g", name, tp, c, d);
        /* The H2O cases must really have evicted, or they test nothing beyond full. */
        if (!k->full && b->kv.n_evicted == 0)
            TEST_FAIL("%s case %d: no eviction happened", name, c);
    }
    erun_free(&one);
    erun_free(&many);
}

TEST(golden_tp2)
{
    check_tp("golden/tiny-opt", 2, 7);
}
TEST(golden_tp4)
{
    check_tp("golden/tiny-opt", 4, 1 << 20);
}
TEST(golden_350m_tp2)
{
    check_tp("golden/tiny-opt-350m", 2, 1 << 20);
}
TEST(golden_350m_tp4)
{
    check_tp("golden/tiny-opt-350m", 4, 9);
}
TEST(dummy_tiny_tp2)
{
    check_tp("dummy:tiny", 2, 1 << 20);
}
TEST(dummy_tiny_tp4)
{
    check_tp("dummy:tiny", 4, 5);
}

/* Two TP = 2 runs give the same bits: the all-reduce sums in rank order whatever
 * the threads' timing. */
TEST(tp_runs_repeat_bit_for_bit)
{
    struct erun a = {0}, b = {0};
    CHECK(run_tp(&a, "dummy:tiny", 2, 6) && run_tp(&b, "dummy:tiny", 2, 6));
    const size_t bytes = (size_t)(STEPS + 1) * (size_t)a.m->cfg.vocab_size * sizeof(float);
    for (int32_t c = 0; c < ERUN_CASES; c++)
        if (memcmp(a.es[c].logits, b.es[c].logits, bytes))
            TEST_FAIL("case %d: runs differ", c);
    erun_free(&a);
    erun_free(&b);
}

/* The scheduler's path (h2oserve generate): several prompts with an H2O budget,
 * greedy, the same tokens at TP = 1, 2 and 4. */
TEST(generate_same_tokens_at_every_tp)
{
    static const char *const prompts[] = {
        "The quick brown fox jumps over the lazy dog because",
        "In a hole in the ground there lived",
        "Tensor parallelism splits every layer",
    };
    const int32_t n = (int32_t)ARRAY_LEN(prompts);
    struct gen_result ref[3], got[3];
    for (int tp = 1; tp <= 4; tp *= 2) {
        struct model *m = NULL;
        struct model_opts mo;
        erun_opts(&mo, BE_DEVICE_CPU, tp, false);
        CHECK(model_load(&m, "dummy:tiny", &mo) == 0);
        struct gen_request rq[3];
        erun_requests(rq, prompts, n, 40,
                      (struct kv_spec){.policy = KV_POLICY_H2O, .heavy = 4, .recent = 4});
        struct gen_result *out = tp == 1 ? ref : got;
        EXPECT_EQ(erun_generate(m, rq, n, out), 0);
        if (tp > 1) {
            for (int32_t i = 0; i < n; i++) {
                EXPECT(out[i].kv_evicted > 0);
                if (out[i].n_tokens != ref[i].n_tokens ||
                    memcmp(out[i].tokens, ref[i].tokens,
                           (size_t)ref[i].n_tokens * sizeof *ref[i].tokens))
                    TEST_FAIL("tp %d prompt %d: tokens differ from tp 1", tp, i);
                generate_result_free(&out[i]);
            }
        }
        model_destroy(m);
    }
    for (int32_t i = 0; i < n; i++)
        generate_result_free(&ref[i]);
}

/* Heads (4) not divisible by 3 ranks: a clear load error, nothing leaked or hung. */
TEST(indivisible_heads_refused)
{
    struct model_opts mo;
    erun_opts(&mo, BE_DEVICE_CPU, 3, false);
    struct model *m = NULL;
    EXPECT_EQ(model_load(&m, "dummy:tiny", &mo), ENG_EINVAL);
    EXPECT(m == NULL);
    EXPECT(strstr(err_msg(), "4 heads") && strstr(err_msg(), "3 ranks"));
    mo.tensor_parallel = BE_MAX_TP + 1;
    EXPECT_EQ(model_load(&m, "dummy:tiny", &mo), ENG_EINVAL);
}

/* The other families with every budget kind: KV heads sharded (tiny-llama: 1 of
 * its 2 KV heads and the 2 query heads reading it per rank), Mistral's window,
 * Qwen2's biases, NeoX's fused q/k/v and parallel residual. */
TEST(llama_family_tp2)
{
    check_tp("golden-arch/tiny-llama", 2, 7);
    check_tp("golden-arch/tiny-mistral", 2, 1 << 20);
    check_tp("golden-arch/tiny-qwen2", 2, 5);
    check_tp("golden-arch/tiny-neox", 2, 9);
    check_tp("golden-arch/tiny-neox", 4, 1 << 20);
}

/* 2 KV heads do not split over 4 ranks: refused at load, naming the KV heads. */
TEST(indivisible_kv_heads_refused)
{
    struct model_opts mo;
    erun_opts(&mo, BE_DEVICE_CPU, 4, false);
    struct model *m = NULL;
    EXPECT_EQ(model_load(&m, "dummy:llama-tiny", &mo), ENG_EINVAL);
    EXPECT(strstr(err_msg(), "KV heads") != NULL);
    EXPECT(m == NULL);
}

int main(void)
{
    RUN(golden_tp2);
    RUN(golden_tp4);
    RUN(golden_350m_tp2);
    RUN(golden_350m_tp4);
    RUN(dummy_tiny_tp2);
    RUN(dummy_tiny_tp4);
    RUN(tp_runs_repeat_bit_for_bit);
    RUN(generate_same_tokens_at_every_tp);
    RUN(indivisible_heads_refused);
    RUN(llama_family_tp2);
    RUN(indivisible_kv_heads_refused);
    return test_done();
}
