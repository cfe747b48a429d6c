/*
 * test_golden.c - the CPU forward against Hugging Face transformers.
 *
 * Two tiny random OPTs (a pre-LN one, and one with OPT-350m's project_in/out and
 * post-LN), each loaded from safetensors and from pytorch_model.bin: the prefill
 * logits at every prompt position and the logits of every greedy decode step must
 * match transformers within 1e-4 in fp32, and the greedy tokens must be identical.
 * bf16 must pick the same greedy tokens for the first 8 steps, logits within 5e-2.
 */
#include "test.h"

#include "backend_cpu.h"
#include "err.h"
#include "generate.h"
#include "golden.h"

/* Prefill then greedy decode of one golden prompt; returns the worst logit error. */
static double run_prompt(struct model *m, struct kv_pool *pool, const struct golden *g,
                         const struct golden_prompt *gp, int32_t n_steps_exact,
                         int32_t n_steps)
{
    struct batch b;
    struct kv_seq kv;
    batch_init(&b);
    kv_seq_init(&kv);
    const int32_t V = g->vocab;
    struct batch_item it = {.kv = &kv, .tokens = gp->tokens, .n_tok = gp->n_tok, .pos0 = 0,
                            .all_logits = true};
    CHECK(batch_run(&b, &m->be, pool, V, &it, 1) == 0);
    double worst = max_abs_diff(b.logits, gp->prefill, (int64_t)gp->n_tok * V);
    int32_t next = argmax(b.logits + (int64_t)(gp->n_tok - 1) * V, V);
    for (int32_t k = 0; k < n_steps; k++) {
        if (k < n_steps_exact && next != gp->decode[k])
            TEST_FAIL("step %d: greedy token %d, transformers chose %d", k, next,
                      gp->decode[k]);
        /* Feed the reference token so one early mismatch does not hide later steps. */
        it = (struct batch_item){.kv = &kv, .tokens = &gp->decode[k], .n_tok = 1,
                                 .pos0 = gp->n_tok + k};
        CHECK(batch_run(&b, &m->be, pool, V, &it, 1) == 0);
        double d = max_abs_diff(b.logits, gp->logits + (int64_t)k * V, V);
        worst = d > worst ? d : worst;
        next = argmax(b.logits, V);
    }
    kv_seq_deinit(&kv, pool);
    batch_deinit(&b);
    return worst;
}

static void check_model(const char *dir, const char *golden_name, enum dtype dt, double tol,
                        int32_t exact_steps)
{
    struct golden g;
    golden_load(&g, golden_name);
    struct model *m = test_model(dir, dt, 64, 16);
    if (!m) {
        TEST_FAIL("cannot load %s", dir);
        golden_free(&g);
        return;
    }
    struct kv_pool pool;
    kv_pool_init(&pool, 64, 16);
    for (int32_t i = 0; i < g.n_prompts; i++) {
        const struct golden_prompt *gp = &g.p[i];
        int32_t exact = exact_steps < 0 ? gp->n_decode : exact_steps;
        double err = run_prompt(m, &pool, &g, gp, exact, gp->n_decode);
        printf("# %s %s prompt %d (%d tokens): max |logit - transformers| = %.3g\n", dir,
               dtype_name(dt), i, gp->n_tok, err);
        if (!(err <= tol)) TEST_FAIL("%s prompt %d: logit error %g > %g", dir, i, err, tol);
    }
    EXPECT_EQ(pool.n_free, pool.n_blocks);
    kv_pool_deinit(&pool);
    model_destroy(m);
    golden_free(&g);
}

TEST(tiny_opt_safetensors_fp32)
{
    check_model("golden/tiny-opt", "tiny-opt", DTYPE_F32, 1e-4, -1);
}

TEST(tiny_opt_bin_fp32)
{
    check_model("golden/tiny-opt-bin", "tiny-opt", DTYPE_F32, 1e-4, -1);
}

TEST(tiny_opt_350m_safetensors_fp32)
{
    check_model("golden/tiny-opt-350m", "tiny-opt-350m", DTYPE_F32, 1e-4, -1);
}

TEST(tiny_opt_350m_bin_fp32)
{
    check_model("golden/tiny-opt-350m-bin", "tiny-opt-350m", DTYPE_F32, 1e-4, -1);
}

/* bf16: the first 8 greedy tokens as in fp32, logits within 5e-2. Without
 * AVX512-BF16 the backend must refuse bf16 with a clear error instead. */
static void check_bf16(const char *dir, const char *golden_name)
{
    if (!backend_cpu_has_bf16()) {
        struct backend be = {0};
        struct be_cpu_opts o = {.dtype = DTYPE_BF16};
        EXPECT_EQ(backend_cpu_create(&be, &o), ENG_EUNSUPPORTED);
        return;
    }
    check_model(dir, golden_name, DTYPE_BF16, 5e-2, 8);
}

TEST(tiny_opt_bf16)
{
    check_bf16("golden/tiny-opt", "tiny-opt");
}

TEST(tiny_opt_350m_bf16)
{
    check_bf16("golden/tiny-opt-350m", "tiny-opt-350m");
}

/* The whole generate path (tokens in, sampler at temperature 0) gives the same
 * greedy tokens as transformers. */
TEST(generate_greedy_matches_transformers)
{
    struct golden g;
    golden_load(&g, "tiny-opt");
    struct model_opts mo;
    model_opts_default(&mo);
    mo.dtype = DTYPE_F32;
    struct model *m = NULL;
    CHECK(model_load(&m, test_data("golden/tiny-opt"), &mo) == 0);
    struct gen_opts go;
    generate_opts_default(&go);
    go.max_batched_tokens = 7; /* chunked prefill, and both prompts in one batch */
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
                TEST_FAIL("prompt %d step %d: %d != %d", i, k, res[i].tokens[k],
                          g.p[i].decode[k]);
        generate_result_free(&res[i]);
    }
    model_destroy(m);
    golden_free(&g);
}

int main(void)
{
    RUN(tiny_opt_safetensors_fp32);
    RUN(tiny_opt_bin_fp32);
    RUN(tiny_opt_350m_safetensors_fp32);
    RUN(tiny_opt_350m_bin_fp32);
    RUN(tiny_opt_bf16);
    RUN(tiny_opt_350m_bf16);
    RUN(generate_greedy_matches_transformers);
    return test_done();
}
