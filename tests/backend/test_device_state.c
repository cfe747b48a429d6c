/*
 * test_device_state.c - the engine's path for slot state kept on a device, run on
 * the CPU backend's emulation of it (model_opts.device_state), against the host
 * path.
 *
 * With device_state the engine reads the prompt's state with kv_read_state, takes
 * each decode token's victims from kv_victims (chosen in the forward, as the CUDA
 * decode pass does) and leaves the victims' slots alone until the next token is
 * written over them. None of that may change a single bit: on the golden tiny OPTs
 * (pre-LN, and post-LN with OPT-350m's projections) and dummy:tiny, with full and
 * h2o budgets that evict during the prompt and mid-decode, R = 1 and H = 0, batched
 * with chunked prompts (1-token chunks included), and with tensor_parallel = 2, the
 * logits (memcmp) and tokens equal the host path's. Also: kv_read_state gathers the
 * very state kv_state shows, the device's state differs from the host's only in the
 * victims it has not freed, and the scheduler path (generate_run) picks the same
 * tokens.
 */
#include "test.h"

#include "engine_run.h"

/* Every case of engine_run.h's table (every budget kind) at `tp` ranks, with the
 * slot state on the host or (emulated) on a device. */
static bool run_state(struct erun *r, const char *name, int tp, bool device_state,
                      int32_t chunk)
{
    struct model_opts mo;
    erun_opts(&mo, BE_DEVICE_CPU, tp, device_state);
    return erun_run(r, name, &mo, chunk, 500);
}

/* A model alone, to ask its backend. */
static struct model *load(bool device_state)
{
    struct model_opts mo;
    erun_opts(&mo, BE_DEVICE_CPU, 1, device_state);
    return erun_load("dummy:tiny", &mo);
}

/*
 * The state of every case at the end of both runs, read with kv_read_state.
 * On the host backend it must be exactly what kv_state shows (gathered here
 * independently). The device run's state must equal it everywhere except in each
 * head's hole: the host freed the victim (pos -1, score 0), the device still holds
 * it (pos >= 0) until the next token overwrites it.
 */
static void check_state(const struct model *mh, const struct eseq *host,
                        const struct model *md, const struct eseq *dev)
{
    const int32_t L = mh->cfg.n_layer, H = mh->cfg.n_kv_head;
    struct backend *bh = (struct backend *)&mh->be, *bd = (struct backend *)&md->be;
    int32_t *lpos;
    float *lscore;
    EXPECT(bd->ops->kv_state == NULL); /* "on the device" */
    EXPECT(backend_state_on_device(bd) && !backend_state_on_device(bh));
    for (int32_t c = 0; c < ERUN_CASES; c++) {
        const struct kv_seq *a = &host[c].kv, *b = &dev[c].kv;
        EXPECT_EQ(a->n_slots, b->n_slots);
        EXPECT_EQ(a->n_evicted, b->n_evicted);
        EXPECT_EQ(a->n_blocks, b->n_blocks);
        EXPECT_EQ(!a->head_slots, !b->head_slots);
        const int32_t n = a->n_slots;
        const size_t cells = (size_t)L * H * (size_t)n;
        int32_t *hp = xmalloc(cells * sizeof *hp), *dp = xmalloc(cells * sizeof *dp);
        float *hs = xmalloc(cells * sizeof *hs), *ds = xmalloc(cells * sizeof *ds);
        EXPECT_EQ(bh->ops->kv_read_state(bh->ctx, a->blocks, n, hp, hs), 0);
        EXPECT_EQ(bd->ops->kv_read_state(bd->ctx, b->blocks, n, dp, ds), 0);
        int32_t n_bad_read = 0, n_bad_dev = 0, n_holes = 0;
        for (int32_t l = 0; l < L; l++) {
            CHECK(bh->ops->kv_state(bh->ctx, l, &lpos, &lscore) == 0);
            for (int32_t h = 0; h < H; h++)
                for (int32_t s = 0; s < n; s++) {
                    const int64_t i = ((int64_t)l * H + h) * n + s;
                    const int64_t at =
                        ((int64_t)a->blocks[s / ERUN_BS] * H + h) * ERUN_BS + s % ERUN_BS;
                    n_bad_read += hp[i] != lpos[at] || memcmp(&hs[i], &lscore[at], 4);
                    const bool hole = a->head_slots && a->head_slots[l * H + h] == s;
                    if (hole) {
                        n_holes++;
                        EXPECT_EQ(b->head_slots[l * H + h], s);
                        n_bad_dev += hp[i] != -1 || hs[i] != 0.0f || dp[i] < 0;
                    } else {
                        n_bad_dev += hp[i] != dp[i] || memcmp(&hs[i], &ds[i], 4);
                    }
                }
        }
        if (n_bad_read)
            TEST_FAIL("case %d: kv_read_state differs from kv_state in %d slots", c,
                      n_bad_read);
        if (n_bad_dev)
            TEST_FAIL("case %d: device state differs from the host's in %d slots", c,
                      n_bad_dev);
        if (a->head_slots && n_holes != L * H)
            TEST_FAIL("case %d: %d holes, want %d", c, n_holes, L * H);
        free(hp);
        free(dp);
        free(hs);
        free(ds);
    }
}

/* device_state against host state at `tp` ranks: the same bits, step by step. */
static void check_device(const char *name, int tp, int32_t chunk)
{
    struct erun host = {0}, dev = {0};
    if (!run_state(&host, name, tp, false, chunk) ||
        !run_state(&dev, name, tp, true, chunk)) {
        TEST_FAIL("%s: cannot load with tp %d", name, tp);
        erun_free(&host);
        erun_free(&dev);
        return;
    }
    const size_t bytes =
        (size_t)(STEPS + 1) * (size_t)host.m->cfg.vocab_size * sizeof(float);
    for (int32_t c = 0; c < ERUN_CASES; c++) {
        const struct eseq *a = &host.es[c], *b = &dev.es[c];
        if (memcmp(a->tokens, b->tokens, (size_t)(a->P + STEPS) * sizeof *a->tokens))
            TEST_FAIL("%s tp %d chunk %d case %d: tokens differ", name, tp, chunk, c);
        if (memcmp(a->logits, b->logits, bytes))
            TEST_FAIL("%s tp %d chunk %d case %d: logits differ", name, tp, chunk, c);
        /* The H2O cases must really have evicted, or they test nothing beyond full. */
        if (!erun_cases[c].full && b->kv.n_evicted == 0)
            TEST_FAIL("%s case %d: no eviction happened", name, c);
        if (!erun_cases[c].full && !b->kv.head_slots)
            TEST_FAIL("%s case %d: never evicted while decoding", name, c);
    }
    printf("# %s tp %d chunk %d: %d cases bit-identical\n", name, tp, chunk, ERUN_CASES);
    check_state(host.m, host.es, dev.m, dev.es);
    erun_free(&host);
    erun_free(&dev);
}

TEST(golden_device_state)
{
    check_device("golden/tiny-opt", 1, 7);
    check_device("golden/tiny-opt", 1, 1); /* every prompt chunk a single token */
}
TEST(golden_350m_device_state)
{
    check_device("golden/tiny-opt-350m", 1, 1 << 20);
    check_device("golden/tiny-opt-350m", 1, 9);
}
TEST(dummy_tiny_device_state)
{
    check_device("dummy:tiny", 1, 5);
}
TEST(device_state_tp2)
{
    check_device("golden/tiny-opt", 2, 7);
    check_device("golden/tiny-opt-350m", 2, 1);
    check_device("dummy:tiny", 2, 1 << 20);
}

/* Grouped-query attention (the state and the victims per KV head) and Mistral's
 * window (victims outside the window first, chosen in the decode pass). */
TEST(llama_family_device_state)
{
    check_device("golden-arch/tiny-llama", 1, 7);
    check_device("golden-arch/tiny-mistral", 1, 1 << 20);
    check_device("golden-arch/tiny-qwen2", 2, 5);
    check_device("dummy:llama-tiny", 2, 9);
}

/* kv_victims answers only for the last forward's sequences. */
TEST(victims_of_the_last_forward_only)
{
    struct model *m = load(true);
    CHECK(m);
    int32_t v[64];
    CHECK(m->cfg.n_layer * m->cfg.n_kv_head <= 64);
    EXPECT_EQ(m->be.ops->kv_victims(m->be.ctx, 0, v), ENG_EINVAL);
    model_destroy(m);
    /* The host-state backend has no victims to give: the engine evicts itself. */
    m = load(false);
    CHECK(m);
    EXPECT(m->be.ops->kv_victims == NULL);
    EXPECT(m->be.ops->kv_read_state != NULL);
    model_destroy(m);
}

/* The scheduler's path (h2oserve generate): several prompts with H2O budgets that
 * evict, greedy, the same tokens and evictions with and without device_state. */
TEST(generate_same_tokens)
{
    static const char *const prompts[] = {
        "The quick brown fox jumps over the lazy dog because",
        "In a hole in the ground there lived",
        "A",
        "Slot state on a device",
    };
    const int32_t n = (int32_t)ARRAY_LEN(prompts);
    struct gen_result res[2][4];
    for (int dev = 0; dev < 2; dev++) {
        struct model *m = load(dev == 1);
        CHECK(m);
        struct gen_request rq[4];
        erun_requests(rq, prompts, n, 40, (struct kv_spec){.policy = KV_POLICY_H2O});
        for (int32_t i = 0; i < n; i++) /* B = 5 each, from H = 4, R = 1 to H = 1, R = 4 */
            rq[i].kv =
                (struct kv_spec){.policy = KV_POLICY_H2O, .heavy = 4 - i, .recent = 1 + i};
        EXPECT_EQ(erun_generate(m, rq, n, res[dev]), 0);
        model_destroy(m);
    }
    for (int32_t i = 0; i < n; i++) {
        const struct gen_result *a = &res[0][i], *b = &res[1][i];
        EXPECT(b->kv_evicted > 0);
        EXPECT_EQ(a->kv_evicted, b->kv_evicted);
        if (a->n_tokens != b->n_tokens ||
            memcmp(a->tokens, b->tokens, (size_t)a->n_tokens * sizeof *a->tokens))
            TEST_FAIL("prompt %d: device_state tokens differ", i);
        generate_result_free(&res[0][i]);
        generate_result_free(&res[1][i]);
    }
}

int main(void)
{
    RUN(golden_device_state);
    RUN(golden_350m_device_state);
    RUN(dummy_tiny_device_state);
    RUN(device_state_tp2);
    RUN(llama_family_device_state);
    RUN(victims_of_the_last_forward_only);
    RUN(generate_same_tokens);
    return test_done();
}
