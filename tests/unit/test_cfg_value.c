/*
 * test_cfg_value.c - one option's value (cfg_value.c): ranges refused naming the option,
 * sizes in bytes or binary units, and every usual spelling of a bool.
 * vLLM's command line (aliases, dtype names, the positional model) is
 * test_cfg_vllm.c.
 */
#include "cfg_testlib.h"

TEST(every_number_out_of_range_is_refused_naming_the_option)
{
    size_t n;
    const struct cfg_opt *t = cfg_opts(&n);
    for (size_t i = 0; i < n; i++) {
        const struct cfg_opt *o = &t[i];
        if (o->type != CFG_T_INT && o->type != CFG_T_SIZE && o->type != CFG_T_FLOAT)
            continue;
        double bad[2] = {o->min - (o->type == CFG_T_FLOAT ? 0.5 : 1),
                         o->max + (o->type == CFG_T_FLOAT ? 0.5 : 1) *
                                      (o->max > 1e15 ? 1e5 : 1)};
        for (int k = 0; k < 2; k++) {
            char json[200], text[64], flag[80];
            snprintf(text, sizeof text, "%.17g", bad[k]);
            snprintf(json, sizeof json, "{\"%s\": %s}", o->key, text);
            struct cfg c;
            cfg_defaults(&c);
            if (o->scopes & CFG_SERVE) {
                EXPECT_EQ(cfg_load_string(&c, json, "r.json"), ENG_EINVAL);
                EXPECT(msg_has(o->key) && msg_has("r.json"));
            }
            /* By flag in every subcommand that takes it. */
            for (size_t sc = 0; sc < sizeof all_scopes / sizeof all_scopes[0]; sc++) {
                if (!(o->scopes & all_scopes[sc])) continue;
                if (o->type != CFG_T_SIZE || bad[k] >= 0) {
                    EXPECT_EQ(
                        PARSE_CMD(&c, all_scopes[sc], flag_of(o, flag, sizeof flag), text),
                        ENG_EINVAL);
                    EXPECT(msg_has(flag));
                }
            }
            cfg_free(&c);
        }
    }
}

TEST(sizes_take_bytes_or_binary_units)
{
    static const struct {
        const char *text;
        long long bytes; /* -1: refused */
    } cases[] = {
        /* clang-format off */
        {"65536", 65536},          {"64K", 65536},         {"64k", 65536},
        {"64KiB", 65536},          {"64KB", 65536},        {"512M", 512LL << 20},
        {"2G", 2LL << 30},         {"2g", 2LL << 30},      {"2GiB", 2LL << 30},
        {"1T", 1LL << 40},         {"1.5G", 3LL << 29},    {"0.5K", 512},
        {"4096B", 4096},           {"0", 0},               {"", -1},
        {"-1", -1},                {"-1M", -1},            {"1.5", -1},
        {"12X", -1},               {"M", -1},              {"1e9", -1},
        {"0x100", -1},             {"1..2K", -1},          {" 5M", -1},
        {"5M ", -1},               {"nan", -1},            {"inf", -1},
        {"99999999999999T", -1},   {"1iB", -1},
        /* clang-format on */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct cfg c;
        cfg_defaults(&c);
        int err = cfg_set(&c, "kv_cache_bytes", cases[i].text);
        if (cases[i].bytes < 0) {
            if (!err)
                TEST_FAIL("'%s' accepted as %lld", cases[i].text,
                          (long long)c.kv_cache_bytes);
            else
                EXPECT(msg_has("--kv-cache-bytes"));
        } else if (err) {
            TEST_FAIL("'%s' refused: %s", cases[i].text, err_msg());
        } else {
            EXPECT_EQ(c.kv_cache_bytes, cases[i].bytes);
        }
        /* The same strings in the file. */
        char json[200];
        snprintf(json, sizeof json, "{\"kv_cache_bytes\": \"%s\"}", cases[i].text);
        cfg_free(&c);
        cfg_defaults(&c);
        err = cfg_load_string(&c, json, "s.json");
        EXPECT_EQ(err != 0, cases[i].bytes < 0);
        if (!err) EXPECT_EQ(c.kv_cache_bytes, cases[i].bytes);
        cfg_free(&c);
    }
    /* JSON numbers too; fractions of a byte are not sizes. */
    struct cfg c;
    cfg_defaults(&c);
    EXPECT_EQ(cfg_load_string(&c, "{\"max_body_bytes\": 1048576}", "s.json"), 0);
    EXPECT_EQ(c.max_body_bytes, 1 << 20);
    EXPECT_EQ(cfg_load_string(&c, "{\"max_body_bytes\": 2048.5}", "s.json"), ENG_EINVAL);
    EXPECT_EQ(cfg_load_string(&c, "{\"max_body_bytes\": true}", "s.json"), ENG_EINVAL);
    EXPECT(msg_has("max_body_bytes"));
    cfg_free(&c);
}

TEST(bools_take_every_usual_form)
{
    static const struct {
        const char *arg;
        int value; /* -1: refused */
    } cases[] = {
        {"--log-requests", 1},      {"--no-log-requests", 0},
        {"--log-requests=true", 1}, {"--log-requests=false", 0},
        {"--log-requests=1", 1},    {"--log-requests=0", 0},
        {"--log-requests=yes", 1},  {"--log-requests=off", 0},
        {"--log-requests=TRUE", 1}, {"--log-requests=maybe", -1},
        {"--log-requests=", -1},    {"--no-log-requests=true", -1},
        {"--no-port", -1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        for (int start = 0; start < 2; start++) {
            struct cfg c;
            cfg_defaults(&c);
            c.log_requests = start;
            int err = PARSE(&c, cases[i].arg);
            if (cases[i].value < 0) {
                EXPECT_EQ(err, ENG_EINVAL);
                EXPECT_EQ(c.log_requests, start);
            } else {
                EXPECT_EQ(err, 0);
                EXPECT_EQ(c.log_requests, cases[i].value);
            }
            cfg_free(&c);
        }
    }
    /* A bare bool flag does not swallow the next argument: it is the positional
     * model here, and parsing stops at the one after it. */
    struct cfg c;
    cfg_defaults(&c);
    int next = 0;
    EXPECT_EQ(
        parse(&c, &next, (const char *const[]){"--log-requests", "extra", "more", NULL}),
        0);
    EXPECT_EQ(next, 3);
    EXPECT(c.log_requests);
    EXPECT_STR(c.model, "extra");
    /* In the file, only JSON's true and false. */
    EXPECT_EQ(cfg_load_string(&c, "{\"log_requests\": \"true\"}", "b.json"), ENG_EINVAL);
    EXPECT(msg_has("log_requests"));
    EXPECT_EQ(cfg_load_string(&c, "{\"log_requests\": 1}", "b.json"), ENG_EINVAL);
    EXPECT_EQ(cfg_load_string(&c, "{\"log_requests\": false}", "b.json"), 0);
    EXPECT(!c.log_requests);
    cfg_free(&c);
}

int main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    if (!mkdtemp(tmp_dir)) return 1;
    RUN(every_number_out_of_range_is_refused_naming_the_option);
    RUN(sizes_take_bytes_or_binary_units);
    RUN(bools_take_every_usual_form);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_dir);
    if (system(cmd)) {
    }
    return test_done();
}
