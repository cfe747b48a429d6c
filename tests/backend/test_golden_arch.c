/*
 * test_golden_arch.c - the CPU forward of the non-OPT families against Hugging Face
 * transformers (tests/data/golden-arch, made by tests/data/make_golden_arch.py).
 *
 * Tiny random models of LlamaForCausalLM (GQA 4 query : 2 KV heads; and a variant
 * with rope_scaling llama3), MistralForCausalLM (sliding window 8, prompts and decode
 * steps past it), Qwen2ForCausalLM (q/k/v bias, tied embeddings) and
 * GPTNeoXForCausalLM (rotary_pct 0.25, parallel residual, fused q/k/v, GELU): the
 * prefill logits at every prompt position and the logits of every greedy decode step
 * within 1e-4 of transformers in fp32, the greedy tokens identical; the same with
 * tensor parallelism over 2 CPU ranks (KV heads sharded), and with a block size of 4
 * so that prompts span many blocks. bf16 (where the CPU has it): the first 4 greedy
 * tokens, logits within 0.2 (measured 0.02-0.15: every GEMM input is rounded to 8
 * significant bits, SwiGLU multiplies two rounded projections, and these models'
 * logits have a std of 0.8-1.5, against OPT's 0.8 and 5e-2 in test_golden.c).
 */
#include "test.h"

#include "backend_cpu.h"
#include "err.h"
#include "generate.h"
#include "golden.h"

#include <string.h>

static const char *const models[] = {"tiny-llama", "tiny-llama3", "tiny-mistral",
                                     "tiny-qwen2", "tiny-neox"};

/* Prefill then greedy decode of one golden prompt; returns the worst logit error. */
static double run_prompt(struct model *m, struct kv_pool *pool, const struct golden *g,
                         const struct golden_prompt *gp, int32_t n_exact)
{
    struct batch b;
    struct kv_seq kv;
    batch_init(&b);
    kv_seq_init(&kv);
    const int32_t V = g->vocab;
    struct batch_item it = {
        .kv = &kv, .tokens = gp->tokens, .n_tok = gp->n_tok, .pos0 = 0, .all_logits = true};
    CHECK(batch_run(&b, &m->be, pool, V, &it, 1) == 0);
    double worst = max_abs_diff(b.logits, gp->prefill, (int64_t)gp->n_tok * V);
    int32_t next = argmax(b.logits + (int64_t)(gp->n_tok - 1) * V, V);
    for (int32_t k = 0; k < gp->n_decode; k++) {
        if (k < n_exact && next != gp->decode[k])
            TEST_FAIL("step %d: greedy token %d, transformers chose %d", k, next,
                      gp->decode[k]);
        /* Feed the reference token so one early mismatch does not hide later steps. */
        it = (struct batch_item){
            .kv = &kv, .tokens = &gp->decode[k], .n_tok = 1, .pos0 = gp->n_tok + k};
        CHECK(batch_run(&b, &m->be, pool, V, &it, 1) == 0);
        double d = max_abs_diff(b.logits, gp->logits + (int64_t)k * V, V);
        worst = d > worst ? d : worst;
        next = argmax(b.logits, V);
    }
    kv_seq_deinit(&kv, pool);
    batch_deinit(&b);
    return worst;
}

static void check(const char *name, enum dtype dt, int tp, int32_t block_size, double tol,
                  int32_t n_exact)
{
    char dir[128], gname[128];
    snprintf(dir, sizeof dir, "golden-arch/%s", name);
    snprintf(gname, sizeof gname, "golden-arch/%s", name);
    struct golden g;
    golden_load(&g, gname);
    struct model_opts mo;
    model_opts_default(&mo);
    mo.dtype = dt;
    mo.tensor_parallel = tp;
    struct model *m = NULL;
    if (model_load(&m, test_data(dir), &mo)) {
        TEST_FAIL("model_load(%s): %s", dir, err_msg());
        golden_free(&g);
        return;
    }
    const int32_t n_blocks = 256 / block_size;
    CHECK(m->be.ops->kv_alloc(m->be.ctx, n_blocks, block_size) == 0);
    struct kv_pool pool;
    kv_pool_init(&pool, n_blocks, block_size);
    for (int32_t i = 0; i < g.n_prompts; i++) {
        const struct golden_prompt *gp = &g.p[i];
        double err = run_prompt(m, &pool, &g, gp, n_exact < 0 ? gp->n_decode : n_exact);
        printf("# %s %s tp %d bs %d prompt %d (%d tokens): max |logit - transformers| = "
               "%.3g\n",
               name, dtype_name(dt), tp, block_size, i, gp->n_tok, err);
        if (!(err <= tol))
            TEST_FAIL("%s prompt %d: logit error %g > %g", name, i, err, tol);
    }
    EXPECT_EQ(pool.n_free, pool.n_blocks);
    kv_pool_deinit(&pool);
    model_destroy(m);
    golden_free(&g);
}

TEST(every_family_fp32)
{
    for (size_t i = 0; i < ARRAY_LEN(models); i++)
        check(models[i], DTYPE_F32, 1, 16, 1e-4, -1);
}

TEST(every_family_fp32_block_size_4)
{
    for (size_t i = 0; i < ARRAY_LEN(models); i++)
        check(models[i], DTYPE_F32, 1, 4, 1e-4, -1);
}

/* Two ranks: each holds 2 of the 4 query heads and 1 of the 2 KV heads (NeoX: 2 of
 * 4), half of the MLP units, and the partial sums are all-reduced. */
TEST(every_family_fp32_tp2)
{
    for (size_t i = 0; i < ARRAY_LEN(models); i++)
        check(models[i], DTYPE_F32, 2, 16, 1e-4, -1);
}

TEST(every_family_bf16)
{
    if (!backend_cpu_has_bf16()) {
        printf("# no AVX512-BF16: skipped\n");
        return;
    }
    for (size_t i = 0; i < ARRAY_LEN(models); i++)
        check(models[i], DTYPE_BF16, 1, 16, 0.2, 4);
}

/* Mistral's window and H2O composed: with a budget of B = window = 8 slots (H 4 +
 * R 4, and H 7 + R 1) a slot outside the window goes first, in prefill and in decode,
 * so the cache holds exactly the window and the greedy tokens are transformers'
 * own, for prompts of 1, 7, 13 and 37 tokens (the last two evict in prefill). */
static void mistral_h2o(int32_t heavy, int32_t recent)
{
    struct golden g;
    golden_load(&g, "golden-arch/tiny-mistral");
    struct model_opts mo;
    model_opts_default(&mo);
    mo.dtype = DTYPE_F32;
    struct model *m = NULL;
    CHECK(model_load(&m, test_data("golden-arch/tiny-mistral"), &mo) == 0);
    CHECK(m->cfg.arch.sliding_window == 8);
    struct gen_opts go;
    generate_opts_default(&go);
    go.max_batched_tokens = 9;
    struct gen_request reqs[GOLDEN_MAX_PROMPTS];
    struct gen_result res[GOLDEN_MAX_PROMPTS];
    memset(reqs, 0, sizeof reqs);
    for (int32_t i = 0; i < g.n_prompts; i++) {
        sampler_params_default(&reqs[i].sp);
        reqs[i].sp.temperature = 0;
        reqs[i].prompt_ids = g.p[i].tokens;
        reqs[i].n_prompt_ids = g.p[i].n_tok;
        reqs[i].max_tokens = g.p[i].n_decode;
        reqs[i].ignore_eos = true;
        reqs[i].kv = (struct kv_spec){
            .policy = KV_POLICY_H2O, .heavy = heavy, .recent = recent, .min_budget = 0};
    }
    EXPECT_EQ(generate_run(m, &go, reqs, g.n_prompts, res), 0);
    for (int32_t i = 0; i < g.n_prompts; i++) {
        EXPECT_EQ(res[i].n_tokens, g.p[i].n_decode);
        for (int32_t k = 0; k < res[i].n_tokens && k < g.p[i].n_decode; k++)
            if (res[i].tokens[k] != g.p[i].decode[k])
                TEST_FAIL("H %d R %d prompt %d step %d: %d != %d", heavy, recent, i, k,
                          res[i].tokens[k], g.p[i].decode[k]);
        generate_result_free(&res[i]);
    }
    model_destroy(m);
    golden_free(&g);
}

TEST(mistral_window_h2o_budget_equals_window)
{
    mistral_h2o(4, 4);
    mistral_h2o(7, 1);
}

/* The whole generate path (tokens in, greedy sampler, chunked prefill, several
 * sequences in one batch) gives transformers' tokens. */
TEST(generate_greedy_matches_transformers)
{
    for (size_t mi = 0; mi < ARRAY_LEN(models); mi++) {
        char dir[128];
        snprintf(dir, sizeof dir, "golden-arch/%s", models[mi]);
        struct golden g;
        golden_load(&g, dir);
        struct model_opts mo;
        model_opts_default(&mo);
        mo.dtype = DTYPE_F32;
        struct model *m = NULL;
        CHECK(model_load(&m, test_data(dir), &mo) == 0);
        struct gen_opts go;
        generate_opts_default(&go);
        go.max_batched_tokens = 7;
        struct gen_request reqs[GOLDEN_MAX_PROMPTS];
        struct gen_result res[GOLDEN_MAX_PROMPTS];
        memset(reqs, 0, sizeof reqs);
        for (int32_t i = 0; i < g.n_prompts; i++) {
            sampler_params_default(&reqs[i].sp);
            reqs[i].sp.temperature = 0;
            reqs[i].prompt_ids = g.p[i].tokens;
            reqs[i].n_prompt_ids = g.p[i].n_tok;
            reqs[i].max_tokens = g.p[i].n_decode;
            reqs[i].ignore_eos = true;
        }
        EXPECT_EQ(generate_run(m, &go, reqs, g.n_prompts, res), 0);
        for (int32_t i = 0; i < g.n_prompts; i++) {
            EXPECT_EQ(res[i].n_tokens, g.p[i].n_decode);
            for (int32_t k = 0; k < res[i].n_tokens && k < g.p[i].n_decode; k++)
                if (res[i].tokens[k] != g.p[i].decode[k])
                    TEST_FAIL("%s prompt %d step %d: %d != %d", models[mi], i, k,
                              res[i].tokens[k], g.p[i].decode[k]);
            generate_result_free(&res[i]);
        }
        model_destroy(m);
        golden_free(&g);
    }
}

int main(void)
{
    RUN(every_family_fp32);
    RUN(every_family_fp32_block_size_4);
    RUN(every_family_fp32_tp2);
    RUN(every_family_bf16);
    RUN(generate_greedy_matches_transformers);
    RUN(mistral_window_h2o_budget_equals_window);
    return test_done();
}
