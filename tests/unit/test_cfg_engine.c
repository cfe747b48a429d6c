/*
 * test_cfg_engine.c - a configuration as engine options (cfg_engine.c): the engine's
 * options and the KV spec mirror what the configuration says.
 * vLLM's command line (aliases, dtype names, the positional model) is
 * test_cfg_vllm.c.
 */
#include "cfg_testlib.h"

TEST(engine_options_mirror_the_configuration)
{
    struct cfg c;
    cfg_defaults(&c);
    struct engine_opts e, d;
    engine_opts_default(&d);
    cfg_engine_opts(&c, &e);
    /* The defaults agree with the engine's own. */
    EXPECT_STR(e.model, d.model);
    EXPECT_EQ(e.model_opts.dtype, d.model_opts.dtype); /* auto */
    EXPECT_EQ(e.block_size, d.block_size);
    EXPECT_EQ(e.kv_cache_bytes, d.kv_cache_bytes);
    EXPECT_EQ(e.kv_blocks, d.kv_blocks);
    EXPECT_EQ(e.sched.max_num_seqs, d.sched.max_num_seqs);
    EXPECT_EQ(e.sched.max_batched_tokens, d.sched.max_batched_tokens);
    EXPECT_EQ(e.sched.max_model_len, d.sched.max_model_len);
    EXPECT_EQ(e.model_opts.dtype_set, d.model_opts.dtype_set);
    EXPECT_EQ(e.kv_default.policy, d.kv_default.policy);
    EXPECT_NEAR(e.kv_default.heavy_ratio, d.kv_default.heavy_ratio, 0);
    EXPECT_NEAR(e.kv_default.recent_ratio, d.kv_default.recent_ratio, 0);
    EXPECT_EQ(e.kv_default.heavy, d.kv_default.heavy);
    EXPECT_EQ(e.kv_default.recent, d.kv_default.recent);

    EXPECT_EQ(PARSE(&c, "--model", "dummy:tiny", "--dtype", "fp32", "--threads", "3",
                    "--dummy-seed", "42", "--block-size", "8", "--kv-cache-bytes", "64M",
                    "--max-num-seqs", "7", "--max-batched-tokens", "99", "--kv-policy",
                    "local", "--h2o-heavy-ratio", "0.25", "--h2o-recent-ratio", "0.5",
                    "--h2o-heavy", "3", "--h2o-recent", "5"),
              0);
    EXPECT_EQ(cfg_validate(&c), 0);
    cfg_engine_opts(&c, &e);
    EXPECT_STR(e.model, "dummy:tiny");
    EXPECT_EQ(e.model_opts.dtype, DTYPE_F32);
    EXPECT_EQ(e.model_opts.n_threads, 3);
    EXPECT_EQ(e.model_opts.dummy_seed, 42);
    EXPECT_EQ(e.block_size, 8);
    EXPECT_EQ(e.kv_cache_bytes, 64 << 20);
    EXPECT_EQ(e.kv_blocks, 0);
    EXPECT_EQ(e.sched.max_num_seqs, 7);
    EXPECT_EQ(e.sched.max_batched_tokens, 99);
    EXPECT_EQ(e.kv_default.policy, KV_POLICY_LOCAL);
    EXPECT_NEAR(e.kv_default.heavy_ratio, 0.25, 1e-7);
    EXPECT_NEAR(e.kv_default.recent_ratio, 0.5, 1e-7);
    EXPECT_EQ(e.kv_default.heavy, 3);
    EXPECT_EQ(e.kv_default.recent, 5);

    EXPECT_EQ(
        PARSE(&c, "--dtype", "bf16", "--kv-cache-bytes", "0", "--kv-cache-blocks", "12"),
        0);
    cfg_engine_opts(&c, &e);
    EXPECT_EQ(e.model_opts.dtype, DTYPE_BF16);
    EXPECT_EQ(e.kv_blocks, 12);
    struct kv_spec s;
    cfg_kv_spec(&c, &s);
    EXPECT_EQ(s.policy, KV_POLICY_LOCAL);
    EXPECT_EQ(s.recent, 5);
    cfg_free(&c);
}

int main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    if (!mkdtemp(tmp_dir)) return 1;
    RUN(engine_options_mirror_the_configuration);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_dir);
    if (system(cmd)) {
    }
    return test_done();
}
