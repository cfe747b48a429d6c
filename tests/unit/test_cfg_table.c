/*
 * test_cfg_table.c - the option table (cfg_table.c) as a specification: the documented
 * defaults, every option reachable from the file and from a flag in every subcommand
 * whose scope holds it (walking the table, so a new option is covered without a new
 * test), unknown outside its scopes, and each subcommand's own defaults and rules.
 * vLLM's command line (aliases, dtype names, the positional model) is
 * test_cfg_vllm.c.
 */
#include "cfg_testlib.h"

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

int main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    if (!mkdtemp(tmp_dir)) return 1;
    RUN(defaults_are_documented_values);
    RUN(every_option_is_settable_from_the_file_and_from_a_flag);
    RUN(an_option_outside_a_subcommands_scope_is_unknown_there);
    RUN(each_subcommand_has_its_defaults_rules_and_flags);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_dir);
    if (system(cmd)) {
    }
    return test_done();
}
