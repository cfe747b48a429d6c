/*
 * test_cfg_validate.c - the rules between options (cfg_validate.c): each caught in one
 * line. vLLM's command line (aliases, dtype names, the positional model) is
 * test_cfg_vllm.c.
 */
#include "cfg_testlib.h"

TEST(validation_catches_each_rule_in_one_line)
{
    static const struct {
        const char *args[5];
        const char *needle;
    } cases[] = {
        {{"--max-num-seqs", "2048"}, "max_batched_tokens"},
        {{"--max-batched-tokens", "100", "--max-num-seqs", "100"}, "max_num_seqs"},
        {{"--h2o-recent", "0"}, "h2o_recent"},
        {{"--kv-cache-bytes", "1G", "--kv-cache-blocks", "100"}, "kv_cache_blocks"},
        {{"--host", ""}, "host"},
        {{"--model", ""}, "model"},
        {{"--data-dir", ""}, "data_dir"},
        {{"--api-key", "a\r\nX-Evil: 1"}, "api_key"},
        {{"--cors-allow-origin", "*\n"}, "cors_allow_origin"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *args[6] = {0};
        memcpy(args, cases[i].args, sizeof cases[i].args);
        struct cfg c;
        cfg_defaults(&c);
        if (parse(&c, NULL, args)) TEST_FAIL("%s: %s", args[0], err_msg());
        EXPECT_EQ(cfg_validate(&c), ENG_EINVAL);
        EXPECT(msg_has(cases[i].needle));
        EXPECT(!strchr(err_msg(), '\n'));
        cfg_free(&c);
    }
    /* Out-of-range values put into the struct directly. */
    struct cfg c;
    cfg_defaults(&c);
    c.h2o_heavy_ratio = 1.5;
    EXPECT_EQ(cfg_validate(&c), ENG_EINVAL);
    EXPECT(msg_has("h2o_heavy_ratio"));
    c.h2o_heavy_ratio = 0.1;
    c.port = 70000;
    EXPECT_EQ(cfg_validate(&c), ENG_EINVAL);
    EXPECT(msg_has("port"));
    c.port = 0; /* any free port */
    EXPECT_EQ(cfg_validate(&c), 0);
    c.kv_policy = (enum kv_policy)7;
    EXPECT_EQ(cfg_validate(&c), ENG_EINVAL);
    cfg_free(&c);
    /* Optional strings: "" unsets them; but not a secret: --api-key "" (an unset
     * shell variable) is refused rather than turning authentication off, on the
     * command line and in a config file alike (null is the way to say none). */
    cfg_defaults(&c);
    EXPECT_EQ(PARSE(&c, "--api-key", "s3cret", "--cors-allow-origin", "*"), 0);
    EXPECT_STR(c.api_key, "s3cret");
    EXPECT_STR(c.cors_allow_origin, "*");
    EXPECT_EQ(PARSE(&c, "--api-key="), ENG_EINVAL);
    EXPECT(strstr(err_msg(), "--api-key must not be empty") != NULL);
    EXPECT_STR(c.api_key, "s3cret");
    EXPECT_EQ(cfg_load_string(&c, "{\"api_key\": \"\"}", "k.json"), ENG_EINVAL);
    EXPECT_EQ(cfg_load_string(&c, "{\"api_key\": null}", "k.json"), 0);
    EXPECT(c.api_key == NULL);
    EXPECT_EQ(PARSE(&c, "--cors-allow-origin="), 0);
    EXPECT(c.cors_allow_origin == NULL);
    EXPECT_EQ(cfg_load_string(&c, "{\"cors_allow_origin\": null}", "n.json"), 0);
    EXPECT(c.cors_allow_origin == NULL);
    EXPECT_EQ(cfg_validate(&c), 0);
    cfg_free(&c);
}

int main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    if (!mkdtemp(tmp_dir)) return 1;
    RUN(validation_catches_each_rule_in_one_line);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_dir);
    if (system(cmd)) {
    }
    return test_done();
}
