/*
 * test_cfg.c - the configuration module as a specification: defaults, the JSON file,
 * flags overriding the file wherever --config stands, every option reachable both
 * ways (walking the option table, so a new option is covered without a new test),
 * sizes and bools, one error message per kind of mistake, --help, the example file
 * and the mapping to the engine's options. vLLM's command line (aliases, dtype
 * names, the positional model, --max-model-len) is test_cfg_vllm.c.
 * argv[1] is config/example.json.
 */
#include "cfg_testlib.h"

static const char *example_path = "config/example.json";

TEST(defaults_are_documented_values)
{
    struct cfg c;
    cfg_defaults(&c);
    EXPECT_STR(c.host, "127.0.0.1");
    EXPECT_EQ(c.port, 8000);
    EXPECT_STR(c.model, "default");
    EXPECT(c.served_model_name == NULL);
    EXPECT_EQ(c.dtype, CFG_DTYPE_AUTO);
    EXPECT_EQ(c.threads, 0);
    EXPECT_EQ(c.block_size, 16);
    EXPECT_EQ(c.kv_cache_bytes, 0);
    EXPECT_EQ(c.max_num_seqs, 256);
    EXPECT_EQ(c.max_batched_tokens, 2048);
    EXPECT_EQ(c.kv_policy, KV_POLICY_H2O);
    EXPECT_NEAR(c.h2o_heavy_ratio, 0.1, 1e-12);
    EXPECT_NEAR(c.h2o_recent_ratio, 0.1, 1e-12);
    EXPECT_EQ(c.h2o_heavy, -1);
    EXPECT_EQ(c.h2o_recent, -1);
    EXPECT(c.api_key == NULL);
    EXPECT_EQ(c.max_body_bytes, 32 << 20);
    EXPECT_EQ(c.max_header_bytes, 16 << 10);
    EXPECT_EQ(c.max_prompts_per_request, 64);
    EXPECT_EQ(c.max_n, 128);
    EXPECT_EQ(c.max_queue, 1024);
    EXPECT_EQ(c.max_connections, 1024);
    EXPECT_EQ(c.idle_timeout_s, 60);
    EXPECT_EQ(c.request_timeout_s, 0);
    EXPECT(c.cors_allow_origin == NULL);
    EXPECT_EQ(c.shutdown_grace_s, 30);
    EXPECT_EQ(c.write_queue_max_bytes, 8 << 20);
    EXPECT(!c.log_requests);
    EXPECT_STR(c.data_dir, "./h2oserve-data");
    EXPECT_EQ(c.batch_max_in_flight, 64);
    EXPECT_EQ(cfg_validate(&c), 0);
    cfg_free(&c);
}

TEST(flags_override_the_file_wherever_config_stands)
{
    const char *f = write_file("a.json",
                               "{\"port\": 9000, \"max_n\": 5, \"model\": "
                               "\"dummy:tiny\"}",
                               0);
    struct cfg c;
    cfg_defaults(&c);
    EXPECT_EQ(PARSE(&c, "--port", "9100", "--config", f), 0);
    EXPECT_EQ(c.port, 9100); /* the flag, though --config came later */
    EXPECT_EQ(c.max_n, 5);   /* the file */
    EXPECT_STR(c.model, "dummy:tiny");
    cfg_free(&c);

    cfg_defaults(&c);
    char eq[300];
    snprintf(eq, sizeof eq, "--config=%s", f);
    EXPECT_EQ(PARSE(&c, eq, "--port=9100"), 0);
    EXPECT_EQ(c.port, 9100);
    EXPECT_EQ(c.max_n, 5);
    cfg_free(&c);

    /* Several files apply in order; flags still win over all of them. */
    const char *g = write_file("b.json", "{\"max_n\": 7, \"max_queue\": 3}", 0);
    cfg_defaults(&c);
    EXPECT_EQ(PARSE(&c, "--max-queue", "11", "--config", f, "--config", g), 0);
    EXPECT_EQ(c.port, 9000);
    EXPECT_EQ(c.max_n, 7);
    EXPECT_EQ(c.max_queue, 11);
    cfg_free(&c);
}

TEST(every_option_is_settable_from_the_file_and_from_a_flag)
{
    size_t n;
    const struct cfg_opt *t = cfg_opts(&n);
    EXPECT(n >= 30);
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < i; j++)
            if (t[i].offset == t[j].offset || strcmp(t[i].key, t[j].key) == 0)
                TEST_FAIL("%s and %s share a field or a key", t[i].key, t[j].key);
    /* Within one subcommand a flag names one row: two rows may share a flag (tokenize's
     * and bench quality's --text) only when no subcommand takes both. */
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < i; j++) {
            char fi[80], fj[80];
            flag_of(&t[i], fi, sizeof fi);
            flag_of(&t[j], fj, sizeof fj);
            if (strcmp(fi, fj) == 0 && (t[i].scopes & t[j].scopes))
                TEST_FAIL("%s and %s share %s in one subcommand", t[i].key, t[j].key, fi);
        }
    /* Each option, in each subcommand that takes it, every way that subcommand has:
     * serve's options by file too; each compared with its command's defaults. */
    for (size_t i = 0; i < n; i++) {
        const struct cfg_opt *o = &t[i];
        if (!o->scopes) TEST_FAIL("%s belongs to no subcommand", o->key);
        for (size_t sc = 0; sc < sizeof all_scopes / sizeof all_scopes[0]; sc++) {
            const unsigned scope = all_scopes[sc];
            if (!(o->scopes & scope)) continue;
            struct cfg d;
            cfg_defaults_cmd(&d, scope);
            char text[128], jval[128], json[300], flag[80], eq[300];
            other_value(&d, o, text, jval, sizeof text);
            flag_of(o, flag, sizeof flag);

            struct cfg c;
            if (scope == CFG_SERVE) {
                cfg_defaults_cmd(&c, scope);
                snprintf(json, sizeof json, "{\"%s\": %s}", o->key, jval);
                if (cfg_load_string(&c, json, "t.json"))
                    TEST_FAIL("%s: %s", json, err_msg());
                expect_only_changed(&c, &d, o, text, "file");
                cfg_free(&c);
            }

            cfg_defaults_cmd(&c, scope);
            int err;
            if (o->type == CFG_T_BOOL) {
                /* A bare bool flag takes no value ("--x true" would make "true" the
                 * positional model): --x or --no-x. */
                char no[90];
                snprintf(no, sizeof no, "--no-%s", flag + 2);
                err = PARSE_CMD(&c, scope, strcmp(text, "true") == 0 ? flag : no);
            } else {
                err = PARSE_CMD(&c, scope, flag, text);
            }
            if (err) TEST_FAIL("%s: %s %s: %s", scope_names[sc], flag, text, err_msg());
            expect_only_changed(&c, &d, o, text, "flag");
            cfg_free(&c);

            cfg_defaults_cmd(&c, scope);
            snprintf(eq, sizeof eq, "%s=%s", flag, text);
            if (PARSE_CMD(&c, scope, eq))
                TEST_FAIL("%s: %s: %s", scope_names[sc], eq, err_msg());
            expect_only_changed(&c, &d, o, text, "flag=");
            cfg_free(&c);

            if (o->short_flag) {
                char sf[4] = {'-', o->short_flag, 0, 0};
                cfg_defaults_cmd(&c, scope);
                if (PARSE_CMD(&c, scope, sf, text))
                    TEST_FAIL("%s %s: %s", sf, text, err_msg());
                expect_only_changed(&c, &d, o, text, "short flag");
                cfg_free(&c);
            }

            cfg_defaults_cmd(&c, scope);
            if (cfg_set(&c, o->key, text)) TEST_FAIL("cfg_set %s: %s", o->key, err_msg());
            expect_only_changed(&c, &d, o, text, "cfg_set");
            cfg_free(&c);
            cfg_free(&d);
        }
    }
}

/* The row of `scope` other than o whose flag is `flag`, or NULL. */
static const struct cfg_opt *flag_twin(const struct cfg_opt *o, const char *flag,
                                       unsigned scope)
{
    size_t n;
    const struct cfg_opt *t = cfg_opts(&n);
    for (size_t i = 0; i < n; i++) {
        char f[80];
        if (&t[i] != o && (t[i].scopes & scope) &&
            strcmp(flag_of(&t[i], f, sizeof f), flag) == 0)
            return &t[i];
    }
    return NULL;
}

TEST(an_option_outside_a_subcommands_scope_is_unknown_there)
{
    size_t n;
    const struct cfg_opt *t = cfg_opts(&n);
    int n_outside = 0, n_twins = 0;
    for (size_t i = 0; i < n; i++) {
        const struct cfg_opt *o = &t[i];
        char flag[80], json[200];
        flag_of(o, flag, sizeof flag);
        for (size_t sc = 0; sc < sizeof all_scopes / sizeof all_scopes[0]; sc++) {
            if (o->scopes & all_scopes[sc]) continue;
            n_outside++;
            struct cfg c;
            cfg_defaults_cmd(&c, all_scopes[sc]);
            const struct cfg_opt *twin = flag_twin(o, flag, all_scopes[sc]);
            if (twin) {
                /* The flag is this subcommand's own row (bench quality's --text is
                 * its file, not tokenize's text): it sets that row, never o. */
                n_twins++;
                struct cfg d;
                cfg_defaults_cmd(&d, all_scopes[sc]);
                char text[128], jval[128];
                other_value(&d, twin, text, jval, sizeof text);
                EXPECT(twin->type != CFG_T_BOOL);
                if (PARSE_CMD(&c, all_scopes[sc], flag, text))
                    TEST_FAIL("%s: %s %s: %s", scope_names[sc], flag, text, err_msg());
                expect_only_changed(&c, &d, twin, text, "a shared flag");
                cfg_free(&d);
                cfg_free(&c);
                continue;
            }
            EXPECT_EQ(PARSE_CMD(&c, all_scopes[sc], flag, "1"), ENG_EINVAL);
            EXPECT(msg_has("unknown option") && msg_has(flag));
            cfg_free(&c);
        }
        /* The file is serve's: generate's --temperature is no key of it. */
        if (!(o->scopes & CFG_SERVE)) {
            struct cfg c;
            cfg_defaults(&c);
            snprintf(json, sizeof json, "{\"%s\": 1}", o->key);
            EXPECT_EQ(cfg_load_string(&c, json, "x.json"), ENG_EFORMAT);
            EXPECT(msg_has("unknown key") && msg_has(o->key));
            cfg_free(&c);
        }
    }
    EXPECT(n_outside > 0);
    EXPECT_EQ(n_twins, 2); /* --text: tokenize's in bench quality, and the other way */
}

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

TEST(each_file_mistake_names_the_file_and_the_key)
{
    static const struct {
        const char *json;
        int err;
        const char *needle; /* besides the file name */
    } cases[] = {
        {"{\"port\": }", ENG_EFORMAT, "not valid JSON"},
        {"{\"port\": 1,\n \"max_n\" 2}", ENG_EFORMAT, ":2:"},
        {"", ENG_EFORMAT, "not valid JSON"},
        {"{} {}", ENG_EFORMAT, "not valid JSON"},
        {"[1, 2]", ENG_EFORMAT, "object"},
        {"\"port\"", ENG_EFORMAT, "object"},
        {"{\"prot\": 1}", ENG_EFORMAT, "prot"},
        {"{\"max-n\": 1}", ENG_EFORMAT, "'_'"},
        {"{\"config\": \"x.json\"}", ENG_EFORMAT, "config"},
        {"{\"port\": \"8000\"}", ENG_EINVAL, "port"},
        {"{\"port\": 80.5}", ENG_EINVAL, "port"},
        {"{\"port\": 1e400}", ENG_EINVAL, "port"},
        {"{\"max_n\": 99999999999999999999999}", ENG_EINVAL, "max_n"},
        {"{\"kv_cache_bytes\": 1e30}", ENG_EINVAL, "kv_cache_bytes"},
        {"{\"kv_cache_bytes\": -1}", ENG_EINVAL, "kv_cache_bytes"},
        {"{\"max_body_bytes\": \"-1M\"}", ENG_EINVAL, "max_body_bytes"},
        {"{\"dtype\": \"fp8\"}", ENG_EINVAL, "auto|fp32|bf16|fp16"},
        {"{\"dtype\": \"Float16\"}", ENG_EINVAL, "bfloat16"},
        {"{\"tensor-parallel-size\": 2}", ENG_EFORMAT, "'_'"},
        {"{\"tensor_parallel\": 2, \"tensor_parallel_size\": 2}", ENG_EFORMAT,
         "tensor_parallel_size"},
        {"{\"max_num_batched_tokens\": 0}", ENG_EINVAL, "max_num_batched_tokens"},
        {"{\"kv_policy\": 1}", ENG_EINVAL, "kv_policy"},
        {"{\"h2o_heavy_ratio\": \"0.1\"}", ENG_EINVAL, "h2o_heavy_ratio"},
        {"{\"host\": null}", ENG_EINVAL, "host"},
        {"{\"host\": [\"a\"]}", ENG_EINVAL, "an array"},
        {"{\"model\": {}}", ENG_EINVAL, "an object"},
        {"{\"port\": 1, \"port\": 2}", ENG_EFORMAT, "twice"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *path = write_file("bad.json", cases[i].json, 0);
        struct cfg c;
        cfg_defaults(&c);
        int err = cfg_load_file(&c, path);
        if (err != cases[i].err)
            TEST_FAIL("%s: got %d (%s), expected %d", cases[i].json, err, err_msg(),
                      cases[i].err);
        EXPECT(msg_has(path) && msg_has(cases[i].needle));
        EXPECT_EQ(c.port, 8000); /* all or nothing */
        cfg_free(&c);
    }
}

TEST(hostile_files_fail_cleanly)
{
    struct cfg c;
    cfg_defaults(&c);
    /* Nesting far past cJSON's limit. */
    size_t depth = 100000;
    char *deep = malloc(2 * depth + 32);
    strcpy(deep, "{\"port\": ");
    size_t k = strlen(deep);
    for (size_t i = 0; i < depth; i++)
        deep[k++] = '[';
    for (size_t i = 0; i < depth; i++)
        deep[k++] = ']';
    deep[k++] = '}';
    deep[k] = '\0';
    EXPECT(cfg_load_string(&c, deep, "deep.json") < 0);
    free(deep);
    /* A NUL byte, binary garbage, a directory, a missing file, a huge file. */
    const char *p = write_file("nul.json", "{\"port\": 1}\0{}", 14);
    EXPECT_EQ(cfg_load_file(&c, p), ENG_EFORMAT);
    EXPECT(msg_has("NUL"));
    p = write_file("bin.json", "\xff\xfe\x00\x01garbage", 11);
    EXPECT(cfg_load_file(&c, p) < 0);
    EXPECT_EQ(cfg_load_file(&c, tmp_dir), ENG_EIO);
    EXPECT(msg_has(tmp_dir));
    EXPECT_EQ(cfg_load_file(&c, "/nonexistent/h2o.json"), ENG_EIO);
    EXPECT(msg_has("/nonexistent/h2o.json"));
    size_t big = (1 << 20) + 10;
    char *huge = malloc(big);
    memset(huge, ' ', big);
    huge[0] = '{';
    huge[big - 1] = '}';
    p = write_file("huge.json", huge, big);
    free(huge);
    EXPECT_EQ(cfg_load_file(&c, p), ENG_EIO);
    /* Comments, a byte order mark and an empty object are fine. */
    EXPECT_EQ(cfg_load_string(&c, "\xEF\xBB\xBF{\"_x\": 1, \"_x\": [2], \"_comment\": {}}",
                              "ok.json"),
              0);
    EXPECT_EQ(cfg_load_string(&c, "{}", "ok.json"), 0);
    EXPECT_EQ(c.port, 8000);
    EXPECT_EQ(cfg_validate(&c), 0);
    cfg_free(&c);
}

TEST(each_flag_mistake_names_the_flag)
{
    static const struct {
        const char *args[4];
        const char *needle;
    } cases[] = {
        {{"--prot", "1"}, "--prot"},
        {{"--port"}, "--port needs a value"},
        {{"--port", "80x"}, "--port"},
        {{"--port", "0x50"}, "--port"},
        {{"--port", " 80"}, "--port"},
        {{"--port", ""}, "--port"},
        {{"--port=65536"}, "--port"},
        {{"--max-n", "1.5"}, "--max-n"},
        {{"--threads", "nan"}, "--threads"},
        {{"--h2o-heavy-ratio", "inf"}, "--h2o-heavy-ratio"},
        {{"--h2o-recent-ratio", "1.5"}, "--h2o-recent-ratio"},
        {{"--kv-policy", "nope"}, "full|h2o|local"},
        {{"--dtype=fp8"}, "auto|fp32|bf16|fp16 (or float32"},
        {{"--dtype", "FP16"}, "--dtype"},
        {{"--tensor-parallel-size", "0"}, "--tensor-parallel-size wants"},
        {{"--max-num-batched-tokens=x"}, "--max-num-batched-tokens"},
        {{"--no-tensor-parallel-size"}, "--no-tensor-parallel-size"},
        {{"--max-model-len", "-1"}, "--max-model-len"},
        {{"--max-model-len", "1048577"}, "--max-model-len"},
        {{"--kv-cache-bytes=-5"}, "--kv-cache-bytes"},
        {{"-p", "80"}, "-p"},
        {{"--config"}, "--config"},
        {{"--config="}, "--config"},
        {{"--config", "/nonexistent/c.json"}, "/nonexistent/c.json"},
        {{"--port", "1", "--bogus"}, "--bogus"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *args[5] = {0};
        memcpy(args, cases[i].args, sizeof cases[i].args);
        struct cfg c;
        cfg_defaults(&c);
        int err = parse(&c, NULL, args);
        if (err >= 0) TEST_FAIL("%s accepted", args[0]);
        EXPECT(msg_has(cases[i].needle));
        EXPECT_EQ(c.port, 8000); /* all or nothing */
        cfg_free(&c);
    }
    struct cfg c;
    cfg_defaults(&c);
    EXPECT_EQ(cfg_set(&c, "nope", "1"), ENG_ENOTFOUND);
    EXPECT(msg_has("nope"));
    cfg_free(&c);
}

/* One table, five subcommands: each has its own defaults where they differ, its own
 * rules, and only the flags of its scope (short ones, lists, --config and the
 * positional model where it takes them). */
TEST(each_subcommand_has_its_defaults_rules_and_flags)
{
    struct cfg c;
    /* generate and bench quality run on the CPU unless told; generate runs every
     * prompt at once; bench quality scores full and floors nothing. */
    cfg_defaults_cmd(&c, CFG_SERVE);
    EXPECT_EQ(c.device, BE_DEVICE_AUTO);
    EXPECT_EQ(c.max_num_seqs, 256);
    EXPECT_EQ(cfg_validate_cmd(&c, CFG_SERVE), 0);
    EXPECT_EQ(cfg_validate_cmd(&c, CFG_RUN_BATCH), 0);
    cfg_free(&c);
    cfg_defaults_cmd(&c, CFG_GENERATE);
    EXPECT_EQ(c.device, BE_DEVICE_CPU);
    EXPECT_EQ(c.max_num_seqs, 0);
    EXPECT_EQ(c.kv_policy, KV_POLICY_H2O);
    EXPECT_EQ(c.generate.max_tokens, 16);
    EXPECT_NEAR(c.generate.temperature, 1, 0);
    EXPECT_EQ(cfg_validate_cmd(&c, CFG_GENERATE), 0);
    /* generate's 0 is no count for a server. */
    EXPECT_EQ(cfg_validate_cmd(&c, CFG_SERVE), ENG_EINVAL);
    EXPECT(msg_has("max_num_seqs"));
    cfg_free(&c);
    cfg_defaults_cmd(&c, CFG_BENCH_QUALITY);
    EXPECT_EQ(c.device, BE_DEVICE_CPU);
    EXPECT_EQ(c.kv_policy, KV_POLICY_FULL);
    EXPECT_EQ(c.kv_min_budget, 0);
    EXPECT_EQ(c.bench_quality.prompt_len, 64);
    EXPECT_EQ(c.bench_quality.gen_len, 448);
    EXPECT_EQ(cfg_validate_cmd(&c, CFG_BENCH_QUALITY), 0);
    cfg_free(&c);

    /* Lists: each --prompt appends, --stop at most 4 times. */
    cfg_defaults_cmd(&c, CFG_GENERATE);
    EXPECT_EQ(PARSE_CMD(&c, CFG_GENERATE, "--prompt", "a", "--prompt=b b", "--stop", "x"),
              0);
    EXPECT_EQ(c.generate.prompt.n, 2);
    EXPECT_STR(c.generate.prompt.items[0], "a");
    EXPECT_STR(c.generate.prompt.items[1], "b b");
    EXPECT_EQ(c.generate.stop.n, 1);
    EXPECT_EQ(PARSE_CMD(&c, CFG_GENERATE, "--stop", "1", "--stop", "2", "--stop", "3",
                        "--stop", "4"),
              ENG_EINVAL);
    EXPECT(msg_has("--stop"));
    EXPECT_EQ(c.generate.stop.n, 1); /* all or nothing */
    /* generate takes no --config and no positional model: a word stops parsing. */
    EXPECT_EQ(PARSE_CMD(&c, CFG_GENERATE, "--config", "x.json"), ENG_EINVAL);
    EXPECT(msg_has("unknown option '--config'"));
    int next = 0;
    EXPECT_EQ(parse_cmd(&c, CFG_GENERATE, &next,
                        (const char *const[]){"--max-tokens", "3", "word", NULL}),
              0);
    EXPECT_EQ(next, 3);
    EXPECT_STR(c.model, "default");
    EXPECT_EQ(PARSE_CMD(&c, CFG_GENERATE, "--device", "gpu"), ENG_EINVAL);
    EXPECT(msg_has("--device wants cpu, cuda or auto"));
    EXPECT_EQ(PARSE_CMD(&c, CFG_GENERATE, "--h2o-recent", "0"), 0);
    EXPECT_EQ(cfg_validate_cmd(&c, CFG_GENERATE), ENG_EINVAL);
    EXPECT(msg_has("--h2o-recent"));
    cfg_free(&c);

    /* run-batch: -i and -o, every serve flag, serve's files, the positional model. */
    const char *f = write_file("rb.json", "{\"max_n\": 5}", 0);
    cfg_defaults_cmd(&c, CFG_RUN_BATCH);
    EXPECT_EQ(PARSE_CMD(&c, CFG_RUN_BATCH, "-i", "in.jsonl", "m", "--output-file=out.jsonl",
                        "--config", f, "--port", "1"),
              0);
    EXPECT_STR(c.run_batch.input_file, "in.jsonl");
    EXPECT_STR(c.run_batch.output_file, "out.jsonl");
    EXPECT_STR(c.model, "m");
    EXPECT_EQ(c.max_n, 5);
    EXPECT_EQ(PARSE_CMD(&c, CFG_RUN_BATCH, "-o"), ENG_EINVAL);
    EXPECT(msg_has("-o needs a value"));
    EXPECT_EQ(PARSE_CMD(&c, CFG_RUN_BATCH, "-x", "1"), ENG_EINVAL);
    EXPECT(msg_has("'-x'"));
    cfg_free(&c);
    cfg_defaults(&c);
    EXPECT_EQ(PARSE(&c, "-i", "in.jsonl"), ENG_EINVAL); /* serve has no -i */
    cfg_free(&c);

    /* bench quality: --sweep is fractions, --plot needs it. */
    static const char *const bad_sweep[] = {"0.1,2", "0", "0.1,", "", "a"};
    for (size_t i = 0; i < sizeof bad_sweep / sizeof bad_sweep[0]; i++) {
        cfg_defaults_cmd(&c, CFG_BENCH_QUALITY);
        EXPECT_EQ(PARSE_CMD(&c, CFG_BENCH_QUALITY, "--sweep", bad_sweep[i]), 0);
        if (bad_sweep[i][0]) {
            EXPECT_EQ(cfg_validate_cmd(&c, CFG_BENCH_QUALITY), ENG_EINVAL);
            EXPECT(msg_has("--sweep"));
        }
        cfg_free(&c);
    }
    float fr[CFG_SWEEP_MAX];
    EXPECT_EQ(cfg_fractions("0.05,0.1,1", fr, CFG_SWEEP_MAX), 3);
    EXPECT_NEAR(fr[2], 1, 0);
    EXPECT_EQ(cfg_fractions("0.1,0.2,0.3", fr, 2), -1);
    cfg_defaults_cmd(&c, CFG_BENCH_QUALITY);
    EXPECT_EQ(PARSE_CMD(&c, CFG_BENCH_QUALITY, "--plot", "x.png"), 0);
    EXPECT_EQ(cfg_validate_cmd(&c, CFG_BENCH_QUALITY), ENG_EINVAL);
    EXPECT(msg_has("--plot"));
    cfg_free(&c);

    /* tokenize: the model's tokenizer with BOS first; its --text is the text itself
     * (taken as given: "" and newlines are values), bench quality's the file. */
    cfg_defaults_cmd(&c, CFG_TOKENIZE);
    EXPECT_STR(c.model, "default");
    EXPECT(c.tokenize.bos);
    EXPECT(c.tokenize.text == NULL && c.tokenize.decode == NULL);
    EXPECT_EQ(cfg_validate_cmd(&c, CFG_TOKENIZE), 0);
    EXPECT_EQ(PARSE_CMD(&c, CFG_TOKENIZE, "--model", "dummy:tiny", "--text", "a\tb\nc",
                        "--no-bos"),
              0);
    EXPECT_STR(c.model, "dummy:tiny");
    EXPECT_STR(c.tokenize.text, "a\tb\nc");
    EXPECT(c.bench_quality.text == NULL);
    EXPECT(!c.tokenize.bos);
    EXPECT_EQ(cfg_validate_cmd(&c, CFG_TOKENIZE), 0);
    EXPECT_EQ(PARSE_CMD(&c, CFG_TOKENIZE, "--text=", "--decode", "[2, 76]"), 0);
    EXPECT(c.tokenize.text != NULL && c.tokenize.text[0] == '\0');
    EXPECT_STR(c.tokenize.decode, "[2, 76]");
    EXPECT_EQ(cfg_validate_cmd(&c, CFG_TOKENIZE), 0);
    cfg_free(&c);
    cfg_defaults_cmd(&c, CFG_BENCH_QUALITY);
    EXPECT_EQ(PARSE_CMD(&c, CFG_BENCH_QUALITY, "--text", "t.txt"), 0);
    EXPECT_STR(c.bench_quality.text, "t.txt");
    EXPECT(c.tokenize.text == NULL);
    EXPECT_EQ(PARSE_CMD(&c, CFG_BENCH_QUALITY, "--decode", "1"), ENG_EINVAL);
    EXPECT(msg_has("unknown option '--decode'"));
    cfg_free(&c);
    /* The row's key is not a flag where the row names its flag; the key still sets it
     * through cfg_set, which names the flag in its messages. */
    cfg_defaults_cmd(&c, CFG_TOKENIZE);
    EXPECT_EQ(PARSE_CMD(&c, CFG_TOKENIZE, "--tokenize-text", "x"), ENG_EINVAL);
    EXPECT(msg_has("unknown option '--tokenize-text'"));
    EXPECT_EQ(cfg_set(&c, "tokenize_text", "x"), 0);
    EXPECT_STR(c.tokenize.text, "x");
    EXPECT(cfg_find("--text") == cfg_find("text")); /* bench quality's, first */
    EXPECT_EQ(cfg_set(&c, "bos", "maybe"), ENG_EINVAL);
    EXPECT(msg_has("--bos"));
    /* No --config and no positional model: a word stops parsing, for cli_parse to
     * refuse. */
    EXPECT_EQ(PARSE_CMD(&c, CFG_TOKENIZE, "--config", "x.json"), ENG_EINVAL);
    int tnext = 0;
    EXPECT_EQ(parse_cmd(&c, CFG_TOKENIZE, &tnext,
                        (const char *const[]){"--text", "hi", "word", NULL}),
              0);
    EXPECT_EQ(tnext, 3);
    EXPECT_STR(c.model, "default");
    cfg_free(&c);
}

TEST(a_bad_flag_after_a_good_config_changes_nothing)
{
    const char *f = write_file("good.json", "{\"port\": 9000, \"api_key\": \"k\"}", 0);
    struct cfg c;
    cfg_defaults(&c);
    EXPECT_EQ(PARSE(&c, "--config", f, "--max-n", "0"), ENG_EINVAL);
    EXPECT_EQ(c.port, 8000);
    EXPECT(c.api_key == NULL);
    cfg_free(&c);
}

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
    /* Optional strings: "" unsets them. */
    cfg_defaults(&c);
    EXPECT_EQ(PARSE(&c, "--api-key", "s3cret", "--cors-allow-origin", "*"), 0);
    EXPECT_STR(c.api_key, "s3cret");
    EXPECT_STR(c.cors_allow_origin, "*");
    EXPECT_EQ(PARSE(&c, "--api-key="), 0);
    EXPECT(c.api_key == NULL);
    EXPECT_EQ(cfg_load_string(&c, "{\"cors_allow_origin\": null}", "n.json"), 0);
    EXPECT(c.cors_allow_origin == NULL);
    EXPECT_EQ(cfg_validate(&c), 0);
    cfg_free(&c);
}

/* Where buf has the --help entry of flag: "\n  FLAG" (or "\n  -x, FLAG") then a
 * space (placeholder, help) or a newline; NULL when it has none. */
static const char *usage_entry(const char *buf, const char *flag)
{
    const char *at = buf;
    size_t fl = strlen(flag);
    while ((at = strstr(at, flag))) {
        bool starts = (at - buf >= 3 && strncmp(at - 3, "\n  ", 3) == 0) ||
                      (at - buf >= 7 && strncmp(at - 7, "\n  -", 4) == 0 &&
                       strncmp(at - 2, ", ", 2) == 0);
        if (starts && (at[fl] == ' ' || at[fl] == '\n')) return at;
        at++;
    }
    return NULL;
}

TEST(usage_lists_every_flag_with_its_default)
{
    for (size_t sc = 0; sc < sizeof all_scopes / sizeof all_scopes[0]; sc++) {
        const unsigned scope = all_scopes[sc];
        char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);
        cfg_usage(f, scope_names[sc]);
        fclose(f);
        char want_usage[80];
        snprintf(want_usage, sizeof want_usage, "usage: h2oserve %s", scope_names[sc]);
        EXPECT(strstr(buf, want_usage) != NULL);
        EXPECT_EQ(strstr(buf, "--config FILE") != NULL,
                  (scope & (CFG_SERVE | CFG_RUN_BATCH)) != 0);
        EXPECT(strstr(buf, "--help") != NULL);
        EXPECT_EQ(cfg_scope_of(scope_names[sc]), scope);
        size_t n;
        const struct cfg_opt *t = cfg_opts(&n);
        struct cfg d;
        cfg_defaults_cmd(&d, scope);
        for (size_t i = 0; i < n; i++) {
            char flag[80], want[300], val[128];
            char plain[64];
            flag_of(&t[i], plain, sizeof plain);
            if (t[i].type == CFG_T_BOOL)
                snprintf(flag, sizeof flag, "--[no-]%s", plain + 2);
            else
                snprintf(flag, sizeof flag, "%s", plain);
            const char *at = usage_entry(buf, flag);
            if (!(t[i].scopes & scope)) {
                /* Another subcommand's option is not in this one's help (a flag it
                 * shares with a row of this one is that row's entry). */
                if (at && !flag_twin(&t[i], plain, scope))
                    TEST_FAIL("%s usage lists %s", scope_names[sc], flag);
                continue;
            }
            if (!at) TEST_FAIL("%s usage lacks %s", scope_names[sc], flag);
            /* The default, after the flag (the help text may wrap before it). */
            snprintf(want, sizeof want, "(default: %s)",
                     t[i].dflt_note ? t[i].dflt_note
                                    : cfg_format_value(&d, &t[i], val, sizeof val));
            const char *next = at ? strstr(at + 1, "\n  -") : NULL;
            const char *hit = at ? strstr(at, want) : NULL;
            if (!hit || (next && hit > next))
                TEST_FAIL("%s usage of %s lacks %s", scope_names[sc], flag, want);
        }
        if (scope == CFG_SERVE) {
            EXPECT(strstr(buf, "(default: 8000)") != NULL);
            EXPECT(strstr(buf, "(default: 32M)") != NULL);
            EXPECT(strstr(buf, "(default: h2o)") != NULL);
        }
        /* No line wider than 80 columns (the help wraps). */
        for (const char *p = buf; *p;) {
            size_t w = strcspn(p, "\n");
            if (w > 80) TEST_FAIL("usage line of %zu columns: %.40s...", w, p);
            p += w + (p[w] != 0);
        }
        cfg_free(&d);
        free(buf);
    }
}

TEST(example_json_loads_validates_and_documents_every_key)
{
    char *text = NULL;
    FILE *f = fopen(example_path, "rb");
    if (!f) {
        TEST_FAIL("cannot open %s", example_path);
        return;
    }
    text = calloc(1, 1 << 20);
    size_t len = fread(text, 1, (1 << 20) - 1, f);
    fclose(f);
    text[len] = '\0';
    struct cfg c, d;
    cfg_defaults(&c);
    cfg_defaults(&d);
    c.port = 1; /* the file must set it back */
    if (cfg_load_file(&c, example_path)) TEST_FAIL("%s", err_msg());
    EXPECT_EQ(cfg_validate(&c), 0);
    /* It shows the defaults: loading it changes nothing. */
    char *a = cfg_to_json(&c, false), *b = cfg_to_json(&d, false);
    EXPECT_STR(a, b);
    free(a);
    free(b);
    size_t n;
    const struct cfg_opt *t = cfg_opts(&n);
    for (size_t i = 0; i < n; i++) {
        if (!(t[i].scopes & CFG_SERVE)) continue; /* the file is serve's */
        char key[80], comment[80];
        snprintf(key, sizeof key, "\"%s\":", t[i].key);
        snprintf(comment, sizeof comment, "\"_%s\":", t[i].key);
        if (!strstr(text, key)) TEST_FAIL("%s lacks %s", example_path, key);
        if (!strstr(text, comment))
            TEST_FAIL("%s lacks the comment %s", example_path, comment);
    }
    cfg_free(&c);
    cfg_free(&d);
    free(text);
}

TEST(json_dump_round_trips_and_redacts_the_key)
{
    struct cfg c, back;
    cfg_defaults(&c);
    EXPECT_EQ(PARSE(&c, "--api-key", "s3cret", "--port", "0", "--kv-cache-bytes", "1536M",
                    "--max-body-bytes", "1500", "--h2o-heavy-ratio", "0.3", "--dtype",
                    "fp32", "--log-requests", "--served-model-name", "m"),
              0);
    char *j = cfg_to_json(&c, false);
    cfg_defaults(&back);
    if (cfg_load_string(&back, j, "dump.json")) TEST_FAIL("%s", err_msg());
    char *j2 = cfg_to_json(&back, false);
    EXPECT_STR(j2, j);
    EXPECT(strstr(j, "\"1536M\"") != NULL);
    free(j);
    free(j2);
    j = cfg_to_json(&c, true);
    EXPECT(strstr(j, "s3cret") == NULL);
    EXPECT(strstr(j, "\"***\"") != NULL);
    free(j);
    cfg_free(&c);
    cfg_free(&back);
}

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
    if (argc > 1) example_path = argv[1];
    if (!mkdtemp(tmp_dir)) return 1;
    RUN(defaults_are_documented_values);
    RUN(flags_override_the_file_wherever_config_stands);
    RUN(every_option_is_settable_from_the_file_and_from_a_flag);
    RUN(an_option_outside_a_subcommands_scope_is_unknown_there);
    RUN(each_subcommand_has_its_defaults_rules_and_flags);
    RUN(every_number_out_of_range_is_refused_naming_the_option);
    RUN(sizes_take_bytes_or_binary_units);
    RUN(bools_take_every_usual_form);
    RUN(each_file_mistake_names_the_file_and_the_key);
    RUN(hostile_files_fail_cleanly);
    RUN(each_flag_mistake_names_the_flag);
    RUN(a_bad_flag_after_a_good_config_changes_nothing);
    RUN(validation_catches_each_rule_in_one_line);
    RUN(usage_lists_every_flag_with_its_default);
    RUN(example_json_loads_validates_and_documents_every_key);
    RUN(json_dump_round_trips_and_redacts_the_key);
    RUN(engine_options_mirror_the_configuration);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_dir);
    if (system(cmd)) {
    }
    return test_done();
}
