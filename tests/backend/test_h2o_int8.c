/*
 * test_h2o_int8.c - H2O over the int8 KV cache (--kv-cache-dtype int8), end to end
 * through the paged engine: every budget kind of erun_cases (compaction after the
 * prompt, eviction while decoding, R = 1, H = 0, full), batched with chunked
 * prompts, on OPT and on a GQA + RoPE model (policy per KV head).
 *
 * int8 is lossy, so the engine cannot match the fp32 dense reference bit for bit.
 * What must hold: the same run with an fp32 cache gives nearly the same logits (the
 * prompt's row, and every row up to the first greedy token that differs: int8 error
 * is a few tenths of a percent of a K/V element, which a lost scale, a swapped slot or
 * a scale left behind by compaction would exceed by orders of magnitude), run_engine's
 * memory bound holds after every prompt, every block returns to the pool, and a block
 * of the int8 pool costs its K/V bytes plus the scales, so the same memory holds about
 * twice the tokens of bf16. And the CUDA backend takes the int8 cache (no refusal).
 */
#include "test.h"

#include "backend_cuda.h"
#include "engine_run.h"
#include "err.h"

#include <math.h>

/* The worst |int8 - fp32| of any compared logit row, relative to the row's max |logit|:
 * *row0 over the prompts' rows, the result over every row compared. */
static double compare_runs(const struct erun *a, const struct erun *f, const char *what,
                           double *row0)
{
    const int32_t V = a->m->cfg.vocab_size;
    double worst = 0.0;
    *row0 = 0.0;
    int32_t same_tokens = 0;
    for (int32_t c = 0; c < ERUN_CASES; c++) {
        const struct eseq *x = &a->es[c], *y = &f->es[c];
        int32_t rows = STEPS + 1;
        for (int32_t k = 0; k < STEPS; k++)
            if (x->tokens[x->P + k] != y->tokens[y->P + k]) {
                rows = k + 1; /* later rows see different tokens */
                break;
            }
        same_tokens += rows - 1;
        for (int32_t r = 0; r < rows; r++) {
            const float *lx = x->logits + (int64_t)r * V, *ly = y->logits + (int64_t)r * V;
            double d = 0.0, mag = 0.0;
            for (int32_t v = 0; v < V; v++) {
                d = fmax(d, fabs((double)lx[v] - ly[v]));
                mag = fmax(mag, fabs((double)ly[v]));
            }
            worst = fmax(worst, d / fmax(mag, 1e-3));
            if (r == 0) *row0 = fmax(*row0, d / fmax(mag, 1e-3));
        }
    }
    printf("# %s: int8 vs fp32 KV: worst logit error %.3g of the row's max |logit| (prompt "
           "rows %.3g); %d of %d greedy tokens agree before any differs\n",
           what, worst, *row0, same_tokens, ERUN_CASES * STEPS);
    return worst;
}

static void check_model(const char *name, int32_t chunk)
{
    struct model_opts mo;
    erun_opts(&mo, BE_DEVICE_CPU, 1, false);
    struct erun f = {0}, q = {0};
    if (!erun_run(&f, name, &mo, chunk, 300)) {
        TEST_FAIL("%s: cannot load", name);
        return;
    }
    mo.kv_dtype = DTYPE_I8;
    mo.kv_dtype_set = true;
    if (!erun_run(&q, name, &mo, chunk, 300)) {
        TEST_FAIL("%s: cannot load with an int8 KV cache", name);
        erun_free(&f);
        return;
    }
    EXPECT_EQ(q.m->kv_dtype, DTYPE_I8);
    EXPECT_EQ(f.m->kv_dtype, DTYPE_F32);
    /* Measured on these tiny models (head_dim 16, the coarsest int8 grid of any
     * model here): about 1% on the prompt rows and up to 7% on decode rows, where
     * near-ties in the H2O scores may evict another token than fp32 does. The bounds
     * leave twice that; a lost or misplaced scale is off by 100% or more. */
    double row0 = 0.0;
    const double worst = compare_runs(&q, &f, name, &row0);
    if (!(row0 < 0.06))
        TEST_FAIL("%s: int8 prompt logits off by %.3g of their scale", name, row0);
    if (!(worst < 0.15))
        TEST_FAIL("%s: int8 logits off by %.3g of their scale", name, worst);
    /* A block: per layer and KV head and slot, K and V of head_dim bytes each, pos,
     * score and the two scales. */
    const struct opt_config *cfg = &q.m->cfg;
    const size_t per_slot = 2 * (size_t)cfg->head_dim + 4 * sizeof(float);
    EXPECT_EQ(backend_kv_block_bytes(&q.m->be, 16),
              (size_t)cfg->n_layer * cfg->n_kv_head * 16 * per_slot);
    const double bf16_slot = 4.0 * cfg->head_dim + 2 * sizeof(float);
    printf("# %s: %.2fx the tokens of a bf16 cache in the same memory\n", name,
           bf16_slot / (double)per_slot);
    EXPECT(bf16_slot > (double)per_slot);
    erun_free(&q);
    erun_free(&f);
}

TEST(opt_budgets_batched_chunked)
{
    check_model("golden/tiny-opt", 7);
}
TEST(llama_gqa_rope_budgets_batched_chunked)
{
    check_model("golden-arch/tiny-llama", 5);
}

TEST(the_cuda_backend_takes_int8)
{
    /* The CUDA backend stores the int8 cache too (docs/cuda.md), so the dtype the
     * server names before loading is int8 on CUDA as on the CPU, while fp32 and bf16,
     * which CUDA has no kernels for, still run as fp16 there. Without a GPU the load
     * fails for lack of one, never because of the KV dtype (its old refusal named
     * "int8 KV cache"); tests/backend/test_cuda_host runs int8 on a fake GPU. */
    struct model_opts mo;
    erun_opts(&mo, BE_DEVICE_CUDA, 1, false);
    mo.kv_dtype = DTYPE_I8;
    mo.kv_dtype_set = true;
    EXPECT_EQ(model_kv_dtype(&mo), DTYPE_I8);
    if (backend_cuda_device_count() == 0) {
        struct model *m = NULL;
        EXPECT(model_load(&m, "dummy:tiny", &mo) != 0);
        EXPECT(m == NULL);
        EXPECT(strstr(err_msg(), "int8") == NULL);
    }
    mo.kv_dtype = DTYPE_BF16;
    EXPECT_EQ(model_kv_dtype(&mo), DTYPE_F16);
    mo.device = BE_DEVICE_CPU;
    EXPECT_EQ(model_kv_dtype(&mo), DTYPE_BF16);
    mo.kv_dtype = DTYPE_I8;
    EXPECT_EQ(model_kv_dtype(&mo), DTYPE_I8);
}

int main(void)
{
    RUN(opt_budgets_batched_chunked);
    RUN(llama_gqa_rope_budgets_batched_chunked);
    RUN(the_cuda_backend_takes_int8);
    return test_done();
}
