/*
 * test_cuda_model.c - the whole CUDA backend against the CPU backend: logits,
 * greedy tokens and H2O evictions, through the engine's own step driver.
 *
 * The same sequences (tests/backend/engine_run.h: batched, prompts fed in chunks,
 * 64 greedy decode steps, budgets that evict during the prompt and mid-decode,
 * R = 1, H = 0, and full) run on the CPU backend in fp32 and on the CUDA backend in
 * fp16, for the golden tiny OPT (pre-LN), the golden tiny OPT-350m (post-LN,
 * project_in/out) and dummy:opt-125m (12 layers, 12 heads, the real vocabulary).
 * fp16 activations put the logits within a small tolerance of fp32's, not bit for
 * bit, so a greedy token may flip where the two best logits are nearly tied: the
 * runs must agree up to the first differing token, and that difference must be such
 * a near-tie in the CPU's logits. The H2O decisions (evictions, slots, blocks) must
 * be the same while the tokens are. With two GPUs, TP = 2 is compared with TP = 1
 * the same way. Finally generate_run (the scheduler) runs on CUDA.
 *
 * Without a GPU it prints why and exits 77 (skip).
 */
#include "test.h"

#include "engine_run.h"
#include "err.h"
#include "generate.h"

#include <math.h>

/* Every budget kind (as in test_tp.c and test_device_state.c). */
static const struct {
    int32_t P, H, R;
    bool full;
} cases[] = {
    {40, 4, 3, false}, {40, 6, 1, false}, {40, 0, 8, false}, {30, 25, 25, false},
    {33, 0, 0, true},  {21, 0, 0, true},
};
#define N_CASES ((int32_t)ARRAY_LEN(cases))
#define POOL_BLOCKS 512
#define BS 16

/* fp16 residual streams over 2-12 layers: measured differences are printed; these
 * bounds leave room above them without hiding a wrong head, slot or scale (which
 * move logits by whole units). */
#define TOL_LOGIT 5e-2
#define TOL_TP 2e-2

static struct model *load(const char *name, enum be_device dev, int tp)
{
    struct model_opts mo;
    model_opts_default(&mo);
    mo.dtype = DTYPE_F32;
    mo.device = dev;
    mo.tensor_parallel = tp;
    struct model *m = NULL;
    const char *path = strncmp(name, "dummy:", 6) == 0 ? name : test_data(name);
    if (model_load(&m, path, &mo)) {
        printf("# model_load(%s): %s\n", path, err_msg());
        return NULL;
    }
    if (m->be.ops->kv_alloc(m->be.ctx, POOL_BLOCKS, BS)) {
        printf("# kv_alloc: %s\n", err_msg());
        model_destroy(m);
        return NULL;
    }
    return m;
}

struct run {
    struct model *m;
    struct kv_pool pool;
    struct eseq es[N_CASES];
};

static bool run_cases(struct run *r, const char *name, enum be_device dev, int tp, int32_t chunk)
{
    r->m = load(name, dev, tp);
    if (!r->m) return false;
    kv_pool_init(&r->pool, POOL_BLOCKS, BS);
    for (int32_t c = 0; c < N_CASES; c++)
        eseq_init(&r->es[c], cases[c].P, cases[c].H, cases[c].R, cases[c].full,
                  500 + (uint64_t)c, r->m->cfg.vocab_size);
    run_engine(r->m, &r->pool, r->es, N_CASES, chunk);
    return true;
}

static void free_run(struct run *r)
{
    if (!r->m) return;
    for (int32_t c = 0; c < N_CASES; c++) eseq_deinit(&r->es[c], &r->pool);
    EXPECT_EQ(r->pool.n_free, r->pool.n_blocks);
    kv_pool_deinit(&r->pool);
    model_destroy(r->m);
}

/* The gap between the two largest logits of a row. */
static double top2_gap(const float *x, int32_t n)
{
    float a = -INFINITY, b = -INFINITY;
    for (int32_t i = 0; i < n; i++) {
        if (x[i] > a) {
            b = a;
            a = x[i];
        } else if (x[i] > b) {
            b = x[i];
        }
    }
    return (double)a - (double)b;
}

/* Run `got` against reference `ref` case by case with logit tolerance tol. */
static void compare(const struct run *ref, const struct run *got, double tol, const char *what)
{
    const int32_t V = ref->m->cfg.vocab_size;
    for (int32_t c = 0; c < N_CASES; c++) {
        const struct eseq *a = &ref->es[c], *b = &got->es[c];
        int32_t diff = -1;
        for (int32_t k = 0; k < STEPS && diff < 0; k++)
            if (a->tokens[a->P + k] != b->tokens[b->P + k]) diff = k;
        const int32_t rows = diff < 0 ? STEPS + 1 : diff + 1;
        const double d = max_abs_diff(a->logits, b->logits, (int64_t)rows * V);
        printf("# %s case %d (P %d, %s H %d R %d): max |logit diff| %.3g over %d steps%s\n",
               what, c, a->P, cases[c].full ? "full" : "h2o", cases[c].H, cases[c].R, d, rows,
               diff < 0 ? "" : " (then a token differs)");
        if (!(d <= tol)) TEST_FAIL("%s case %d: logits differ by %g > %g", what, c, d, tol);
        if (diff >= 0) {
            /* Only a near-tie may flip: the reference's best two within 2 tol. */
            const double gap = top2_gap(a->logits + (int64_t)diff * V, V);
            if (!(gap <= 2 * tol))
                TEST_FAIL("%s case %d: token %d differs at step %d with a margin of %g", what,
                          c, b->tokens[b->P + diff], diff, gap);
        } else {
            EXPECT_EQ(a->kv.n_evicted, b->kv.n_evicted);
            EXPECT_EQ(a->kv.n_slots, b->kv.n_slots);
            EXPECT_EQ(a->kv.n_blocks, b->kv.n_blocks);
        }
        if (!cases[c].full && b->kv.n_evicted == 0) TEST_FAIL("%s case %d: no eviction", what, c);
    }
}

static void check_model(const char *name, int32_t chunk)
{
    struct run cpu = {0}, gpu = {0};
    if (!run_cases(&cpu, name, BE_DEVICE_CPU, 1, chunk) ||
        !run_cases(&gpu, name, BE_DEVICE_CUDA, 1, chunk)) {
        TEST_FAIL("%s: cannot run on both backends", name);
    } else {
        char what[96];
        snprintf(what, sizeof what, "%s cuda vs cpu, chunk %d", name, chunk);
        compare(&cpu, &gpu, TOL_LOGIT, what);
    }
    free_run(&cpu);
    free_run(&gpu);
}

TEST(golden_tiny_opt) { check_model("golden/tiny-opt", 7); }
TEST(golden_tiny_opt_350m) { check_model("golden/tiny-opt-350m", 1 << 20); }
TEST(dummy_opt_125m) { check_model("dummy:opt-125m", 9); }

/* TP = 2 against TP = 1, both on CUDA (two GPUs). */
static void check_tp2(const char *name)
{
    struct run one = {0}, two = {0};
    if (!run_cases(&one, name, BE_DEVICE_CUDA, 1, 5) ||
        !run_cases(&two, name, BE_DEVICE_CUDA, 2, 5)) {
        TEST_FAIL("%s: cannot run with tp 1 and 2", name);
    } else {
        char what[96];
        snprintf(what, sizeof what, "%s cuda tp 2 vs tp 1", name);
        compare(&one, &two, TOL_TP, what);
    }
    free_run(&one);
    free_run(&two);
}

TEST(tp2_matches_tp1)
{
    check_tp2("golden/tiny-opt");
    check_tp2("dummy:opt-125m");
}

/* The scheduler's path on CUDA: several prompts, H2O, greedy; the same tokens as the
 * CPU where no near-tie intervenes is already covered above, so here: it runs, the
 * budget holds, and a second run repeats the first. */
TEST(generate_on_cuda)
{
    static const char *const prompts[] = {"The quick brown fox", "In a hole in the ground",
                                          "Tensor parallelism splits every layer"};
    struct gen_result out[2][3];
    for (int rep = 0; rep < 2; rep++) {
        struct model_opts mo;
        model_opts_default(&mo);
        mo.device = BE_DEVICE_CUDA;
        struct model *m = NULL;
        if (model_load(&m, "dummy:opt-125m", &mo)) {
            TEST_FAIL("model_load: %s", err_msg());
            return;
        }
        struct gen_request rq[3];
        for (int i = 0; i < 3; i++) {
            rq[i] = (struct gen_request){.prompt = prompts[i], .prompt_len = strlen(prompts[i]),
                                         .max_tokens = 48, .ignore_eos = true};
            sampler_params_default(&rq[i].sp);
            rq[i].sp.temperature = 0;
            rq[i].kv = (struct kv_spec){.policy = KV_POLICY_H2O, .heavy = 4, .recent = 4};
        }
        struct gen_opts go;
        gen_opts_default(&go);
        go.max_batched_tokens = 16;
        EXPECT_EQ(generate_run(m, &go, rq, 3, out[rep]), 0);
        model_destroy(m);
    }
    for (int i = 0; i < 3; i++) {
        EXPECT_EQ(out[0][i].n_tokens, 48);
        EXPECT(out[0][i].kv_evicted > 0);
        EXPECT(out[0][i].kv_slots <= 8);
        if (out[0][i].n_tokens != out[1][i].n_tokens ||
            memcmp(out[0][i].tokens, out[1][i].tokens, (size_t)out[0][i].n_tokens * 4))
            TEST_FAIL("prompt %d: two runs differ", i);
        gen_result_free(&out[0][i]);
        gen_result_free(&out[1][i]);
    }
}

int main(void)
{
    const int n_dev = backend_cuda_device_count();
    if (n_dev == 0) {
        printf("no CUDA device (or a build without CUDA): skipping\n");
        return 77;
    }
    printf("# %d CUDA device(s)\n", n_dev);
    RUN(golden_tiny_opt);
    RUN(golden_tiny_opt_350m);
    RUN(dummy_opt_125m);
    if (n_dev >= 2) {
        RUN(tp2_matches_tp1);
    } else {
        printf("# one GPU: TP = 2 not run\n");
    }
    RUN(generate_on_cuda);
    return test_done();
}
