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
#include "err.h"
#include "generate.h"

/* Every budget kind: B < P (compaction), B reached mid-decode, R = 1, H = 0, and
 * full. */
static const struct {
    int32_t P, H, R;
    bool full;
} cases[] = {
    {40, 4, 3, false},   {40, 6, 1, false}, {40, 0, 8, false},
    {30, 25, 25, false}, {33, 0, 0, true},  {21, 0, 0, true},
};
#define N_CASES ((int32_t)ARRAY_LEN(cases))
#define POOL_BLOCKS 512
#define BS 16

static struct model *load_tp(const char *name, int tp)
{
    struct model_opts mo;
    model_opts_default(&mo);
    mo.dtype = DTYPE_F32;
    mo.tensor_parallel = tp;
    struct model *m = NULL;
    const char *path = strncmp(name, "dummy:", 6) == 0 ? name : test_data(name);
    if (model_load(&m, path, &mo)) {
        printf("# model_load(%s, tp %d): %s\n", path, tp, err_msg());
        return NULL;
    }
    CHECK(m->be.ops->kv_alloc(m->be.ctx, POOL_BLOCKS, BS) == 0);
    return m;
}

/* Run every case batched, prompts in chunks of `chunk`, on a model with `tp` ranks.
 * es[] is filled; the caller frees it with eseq_deinit on *pool. */
static struct model *run_cases(const char *name, int tp, int32_t chunk, struct eseq *es,
                               struct kv_pool *pool)
{
    struct model *m = load_tp(name, tp);
    if (!m) return NULL;
    kv_pool_init(pool, POOL_BLOCKS, BS);
    for (int32_t c = 0; c < N_CASES; c++)
        eseq_init(&es[c], cases[c].P, cases[c].H, cases[c].R, cases[c].full,
                  300 + (uint64_t)c, m->cfg.vocab_size);
    run_engine(m, pool, es, N_CASES, chunk);
    return m;
}

static void free_cases(struct model *m, struct eseq *es, struct kv_pool *pool)
{
    for (int32_t c = 0; c < N_CASES; c++)
        eseq_deinit(&es[c], pool);
    EXPECT_EQ(pool->n_free, pool->n_blocks);
    kv_pool_deinit(pool);
    model_destroy(m);
}

/* TP = tp against TP = 1: identical greedy tokens, every step's logits within tol. */
static void check_tp(const char *name, int tp, int32_t chunk)
{
    struct eseq one[N_CASES], many[N_CASES];
    struct kv_pool pool1, pooln;
    struct model *m1 = run_cases(name, 1, chunk, one, &pool1);
    struct model *mn = run_cases(name, tp, chunk, many, &pooln);
    if (!m1 || !mn) {
        TEST_FAIL("%s: cannot load with tp 1 and %d", name, tp);
        return;
    }
    const int32_t V = m1->cfg.vocab_size;
    for (int32_t c = 0; c < N_CASES; c++) {
        const struct eseq *a = &one[c], *b = &many[c];
        int32_t first_diff = -1;
        for (int32_t k = 0; k < STEPS && first_diff < 0; k++)
            if (a->tokens[a->P + k] != b->tokens[b->P + k]) first_diff = k;
        /* Logits are comparable up to the first differing token. */
        const int32_t rows = first_diff < 0 ? STEPS + 1 : first_diff + 1;
        const double d = max_abs_diff(a->logits, b->logits, (int64_t)rows * V);
        printf("# %s tp %d chunk %d case %d (P %d, %s H %d R %d): max |tp - tp1| %.3g over "
               "%d steps\n",
               name, tp, chunk, c, a->P, cases[c].full ? "full" : "h2o", cases[c].H,
               cases[c].R, d, rows);
        if (first_diff >= 0)
            TEST_FAIL("%s tp %d case %d: greedy token differs at step %d (%d vs %d)", name,
                      tp, c, first_diff, b->tokens[b->P + first_diff],
                      a->tokens[a->P + first_diff]);
        if (!(d <= 1e-4))
            TEST_FAIL("%s tp %d case %d: logits differ by %g", name, tp, c, d);
        /* The H2O cases must really have evicted, or they test nothing beyond full. */
        if (!cases[c].full && b->kv.n_evicted == 0)
            TEST_FAIL("%s case %d: no eviction happened", name, c);
    }
    free_cases(m1, one, &pool1);
    free_cases(mn, many, &pooln);
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
    struct eseq a[N_CASES], b[N_CASES];
    struct kv_pool pa, pb;
    struct model *ma = run_cases("dummy:tiny", 2, 6, a, &pa);
    struct model *mb = run_cases("dummy:tiny", 2, 6, b, &pb);
    CHECK(ma && mb);
    const size_t bytes = (size_t)(STEPS + 1) * (size_t)ma->cfg.vocab_size * sizeof(float);
    for (int32_t c = 0; c < N_CASES; c++)
        if (memcmp(a[c].logits, b[c].logits, bytes)) TEST_FAIL("case %d: runs differ", c);
    free_cases(ma, a, &pa);
    free_cases(mb, b, &pb);
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
        model_opts_default(&mo);
        mo.dtype = DTYPE_F32;
        mo.tensor_parallel = tp;
        CHECK(model_load(&m, "dummy:tiny", &mo) == 0);
        struct gen_request rq[3];
        for (int32_t i = 0; i < n; i++) {
            rq[i] = (struct gen_request){.prompt = prompts[i],
                                         .prompt_len = strlen(prompts[i]),
                                         .max_tokens = 40,
                                         .ignore_eos = true};
            sampler_params_default(&rq[i].sp);
            rq[i].sp.temperature = 0;
            rq[i].kv = (struct kv_spec){.policy = KV_POLICY_H2O, .heavy = 4, .recent = 4};
        }
        struct gen_opts go;
        gen_opts_default(&go);
        go.max_batched_tokens = 16;
        struct gen_result *out = tp == 1 ? ref : got;
        EXPECT_EQ(generate_run(m, &go, rq, n, out), 0);
        if (tp > 1) {
            for (int32_t i = 0; i < n; i++) {
                EXPECT(out[i].kv_evicted > 0);
                if (out[i].n_tokens != ref[i].n_tokens ||
                    memcmp(out[i].tokens, ref[i].tokens,
                           (size_t)ref[i].n_tokens * sizeof *ref[i].tokens))
                    TEST_FAIL("tp %d prompt %d: tokens differ from tp 1", tp, i);
                gen_result_free(&out[i]);
            }
        }
        model_destroy(m);
    }
    for (int32_t i = 0; i < n; i++)
        gen_result_free(&ref[i]);
}

/* Heads (4) not divisible by 3 ranks: a clear load error, nothing leaked or hung. */
TEST(indivisible_heads_refused)
{
    struct model_opts mo;
    model_opts_default(&mo);
    mo.dtype = DTYPE_F32;
    mo.tensor_parallel = 3;
    struct model *m = NULL;
    EXPECT_EQ(model_load(&m, "dummy:tiny", &mo), ENG_EINVAL);
    EXPECT(m == NULL);
    EXPECT(strstr(err_msg(), "4 heads") && strstr(err_msg(), "3 ranks"));
    mo.tensor_parallel = BE_MAX_TP + 1;
    EXPECT_EQ(model_load(&m, "dummy:tiny", &mo), ENG_EINVAL);
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
    return test_done();
}
