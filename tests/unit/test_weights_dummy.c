/*
 * test_weights_dummy.c - the dummy weights (engine/weights/weights_dummy.c): the real
 * OPT tensor names and shapes for every size (tied lm_head, OPT-350m's projections and
 * missing final LayerNorm), values with the initialisers' statistics (N(0, 0.02)
 * matrices, zero biases, LayerNorm weights of one), the same values for the same seed
 * on any thread count (pinned, since every dummy model depends on them), and nothing
 * materialised on open, so that dummy:opt-30b opens at once.
 */
#include "err.h"
#include "model.h"
#include "test.h"
#include "weights.h"
#include "weights_impl.h" /* white-box: walk the tensor table */
#include "weights_testlib.h"

#include <omp.h>
#include <stdint.h>

static int64_t max_numel(const struct weights *w)
{
    int64_t m = 0;
    for (int32_t i = 0; i < w->n_tensors; i++)
        m = MAX(m, w->tensors[i].numel);
    return m;
}

TEST(dummy_opt_125m_has_real_shapes_and_stats)
{
    struct opt_config cfg;
    opt_config_dummy(&cfg, "dummy:opt-125m");
    struct weights *w = NULL;
    EXPECT_EQ(weights_open_dummy(&w, &cfg, 0), 0);
    /* 4 global tensors + 16 per layer; lm_head is tied, so absent. */
    EXPECT_EQ(w->n_tensors, 4 + 12 * 16);
    EXPECT(!weights_has(w, "lm_head.weight"));
    EXPECT(!weights_has(w, "project_in.weight"));
    float *buf = malloc((size_t)max_numel(w) * sizeof *buf);
    double t0 = time_now();
    int64_t total = 0;
    for (int32_t i = 0; i < w->n_tensors; i++) {
        const struct weights_tensor *t = &w->tensors[i];
        EXPECT_EQ(weights_read_f32(w, t->name, t->ndim, t->shape, buf), 0);
        total += t->numel;
        double sum = 0, sq = 0;
        for (int64_t k = 0; k < t->numel; k++) {
            sum += buf[k];
            sq += (double)buf[k] * buf[k];
        }
        double mean = sum / (double)t->numel,
               std = sqrt(sq / (double)t->numel - mean * mean);
        const char *n = t->name;
        size_t len = strlen(n);
        if (len > 5 && strcmp(n + len - 5, ".bias") == 0) {
            EXPECT(sum == 0 && sq == 0);
        } else if (strstr(n, "layer_norm.weight")) {
            EXPECT(mean == 1.0 && std == 0);
        } else {
            EXPECT_NEAR(mean, 0, 5.0 / sqrt((double)t->numel) * 0.02);
            EXPECT_NEAR(std, 0.02, 0.02 * 0.02);
        }
    }
    printf("# dummy:opt-125m: %lld values of %d tensors read in %.3f s (%d threads)\n",
           (long long)total, w->n_tensors, time_now() - t0, omp_get_max_threads());
    EXPECT_EQ(total, 125239296); /* HF's opt-125m parameter count */
    free(buf);
    weights_close(w);
}

TEST(dummy_values_are_deterministic)
{
    struct opt_config cfg;
    opt_config_dummy(&cfg, "dummy:tiny");
    struct weights *a, *b, *c;
    weights_open_dummy(&a, &cfg, 42);
    weights_open_dummy(&b, &cfg, 42);
    weights_open_dummy(&c, &cfg, 43);
    const int64_t shape[2] = {512, 64};
    float *x = malloc(512 * 64 * 4), *y = malloc(512 * 64 * 4), *z = malloc(512 * 64 * 4);
    EXPECT_EQ(weights_read_f32(a, "embed_tokens.weight", 2, shape, x), 0);
    int threads = omp_get_max_threads();
    omp_set_num_threads(1); /* any thread count gives the same values */
    EXPECT_EQ(weights_read_f32(b, "embed_tokens.weight", 2, shape, y), 0);
    omp_set_num_threads(threads);
    EXPECT_EQ(weights_read_f32(c, "embed_tokens.weight", 2, shape, z), 0);
    EXPECT(memcmp(x, y, sizeof(float) * 512 * 64) == 0);
    EXPECT(memcmp(x, z, sizeof(float) * 512 * 64) != 0);
    /* Pinned values: a change here changes every dummy model on every machine. */
    static const float pinned[4] = {-0x1.514842p-7f, -0x1.beebccp-7f, -0x1.341004p-6f,
                                    -0x1.e47d4p-9f};
    for (int i = 0; i < 4; i++)
        if (x[i] != pinned[i])
            TEST_FAIL("embed_tokens[%d] = %a, pinned %a", i, x[i], pinned[i]);
    /* Different tensors are different streams. */
    EXPECT_EQ(weights_read_f32(a, "layers.0.fc1.weight", 2, (int64_t[]){256, 64}, y), 0);
    EXPECT(memcmp(x, y, 4 * 64) != 0);
    EXPECT_EQ(weights_read_f32(a, "embed_tokens.weight", 2, (int64_t[]){64, 512}, y),
              ENG_EFORMAT);
    EXPECT_MSG("dummy:tiny", "embed_tokens.weight");
    EXPECT_EQ(weights_read_f32(a, "lm_head.weight", 2, shape, y), ENG_ENOTFOUND);
    EXPECT_MSG("dummy:tiny", "lm_head.weight");
    free(x);
    free(y);
    free(z);
    weights_close(a);
    weights_close(b);
    weights_close(c);
}

TEST(dummy_opt_350m_has_projections_and_no_final_norm)
{
    struct opt_config cfg;
    opt_config_dummy(&cfg, "dummy:opt-350m");
    struct weights *w;
    weights_open_dummy(&w, &cfg, 0);
    const struct weights_tensor *t = weights_find(w, "project_in.weight");
    EXPECT(t && t->shape[0] == 1024 && t->shape[1] == 512);
    t = weights_find(w, "project_out.weight");
    EXPECT(t && t->shape[0] == 512 && t->shape[1] == 1024);
    t = weights_find(w, "embed_tokens.weight");
    EXPECT(t && t->shape[0] == 50272 && t->shape[1] == 512);
    t = weights_find(w, "embed_positions.weight");
    EXPECT(t && t->shape[0] == 2050 && t->shape[1] == 1024);
    EXPECT(!weights_has(w, "final_layer_norm.weight"));
    EXPECT(weights_has(w, "layers.23.final_layer_norm.bias"));
    EXPECT(!weights_has(w, "layers.24.fc1.weight"));
    weights_close(w);
}

TEST(dummy_opt_30b_is_lazy)
{
    /* 30B parameters would be 120 GB of fp32: opening must cost nothing, and one
     * small tensor can be read on its own. */
    struct opt_config cfg;
    opt_config_dummy(&cfg, "dummy:opt-30b");
    struct weights *w;
    double t0 = time_now();
    EXPECT_EQ(weights_open_dummy(&w, &cfg, 0), 0);
    EXPECT(time_now() - t0 < 1.0);
    const struct weights_tensor *t = weights_find(w, "layers.47.fc1.weight");
    EXPECT(t && t->shape[0] == 28672 && t->shape[1] == 7168);
    float *v = malloc(7168 * sizeof *v);
    EXPECT_EQ(weights_read_f32(w, "layers.47.fc2.bias", 1, (int64_t[]){7168}, v), 0);
    EXPECT_EQ(weights_read_f32(w, "layers.47.self_attn_layer_norm.weight", 1,
                               (int64_t[]){7168}, v),
              0);
    EXPECT_EQ(v[7167], 1.0f);
    free(v);
    weights_close(w);
}

int main(void)
{
    RUN(dummy_opt_125m_has_real_shapes_and_stats);
    RUN(dummy_values_are_deterministic);
    RUN(dummy_opt_350m_has_projections_and_no_final_norm);
    RUN(dummy_opt_30b_is_lazy);
    return test_done();
}
