/*
 * test_cfg_vllm.c - the configuration as vLLM's command line reaches it: vLLM's flag
 * names as aliases (one flag, one field, last wins on the command line, an error
 * twice in one file), vLLM's dtype names, the model as a positional argument, and
 * --max-model-len.
 */
#include "cfg_testlib.h"

TEST(parsing_stops_at_the_second_positional_argument)
{
    struct cfg c;
    cfg_defaults(&c);
    int next = 0;
    /* The first positional is the model; parsing goes on after it and stops at the
     * second, which is the caller's (serve and run-batch refuse it). */
    EXPECT_EQ(parse(&c, &next,
                    (const char *const[]){"--port", "1", "m1", "--max-n", "3", "file.jsonl",
                                          "--max-queue", "5", NULL}),
              0);
    EXPECT_EQ(next, 6);
    EXPECT_EQ(c.port, 1);
    EXPECT_STR(c.model, "m1");
    EXPECT_EQ(c.max_n, 3);
    EXPECT_EQ(c.max_queue, 1024); /* after the second positional: not parsed */
    /* After "--" every argument is positional, even one that looks like a flag. */
    EXPECT_EQ(
        parse(&c, &next,
              (const char *const[]){"--port", "2", "--", "--odd-dir", "--max-n", NULL}),
        0);
    EXPECT_EQ(next, 5);
    EXPECT_EQ(c.port, 2);
    EXPECT_STR(c.model, "--odd-dir");
    EXPECT_EQ(c.max_n, 3);
    EXPECT_EQ(parse(&c, &next, (const char *const[]){"--port", "3", NULL}), 0);
    EXPECT_EQ(next, 3); /* argc */
    /* A value may look like a flag: negative counts. */
    EXPECT_EQ(PARSE(&c, "--h2o-heavy", "-1", "--h2o-recent", "4"), 0);
    EXPECT_EQ(c.h2o_heavy, -1);
    EXPECT_EQ(c.h2o_recent, 4);
    /* --help wins and applies nothing. */
    EXPECT_EQ(PARSE(&c, "--port", "7", "--help"), CFG_HELP);
    EXPECT_EQ(PARSE(&c, "-h"), CFG_HELP);
    EXPECT_EQ(c.port, 3);
    cfg_free(&c);
}

/* The options that carry an alias: vLLM's spellings of two flags. */
TEST(aliases_are_vllms_flag_names)
{
    EXPECT(cfg_find("--tensor-parallel-size") == cfg_find("tensor_parallel"));
    EXPECT(cfg_find("tensor_parallel_size") == cfg_find("--tensor-parallel"));
    EXPECT(cfg_find("--max-num-batched-tokens") == cfg_find("max_batched_tokens"));
    EXPECT(cfg_find("max_num_batched_tokens") == cfg_find("max_batched_tokens"));
    EXPECT(cfg_find("--tensor_parallel_size") == NULL); /* a flag spells '_' as '-' */
    EXPECT(cfg_find("tensor-parallel-size") == NULL);   /* a key spells '-' as '_' */
    struct cfg c;
    cfg_defaults(&c);
    EXPECT_EQ(PARSE(&c, "--tensor-parallel-size", "4", "--max-num-batched-tokens=512"), 0);
    EXPECT_EQ(c.tensor_parallel, 4);
    EXPECT_EQ(c.max_batched_tokens, 512);
    EXPECT_EQ(cfg_set(&c, "tensor_parallel_size", "2"), 0);
    EXPECT_EQ(c.tensor_parallel, 2);
    EXPECT_EQ(cfg_load_string(&c, "{\"tensor_parallel_size\": 8}", "v.json"), 0);
    EXPECT_EQ(c.tensor_parallel, 8);
    /* JSON out uses the canonical keys only. */
    char *j = cfg_to_json(&c, false);
    EXPECT(strstr(j, "\"tensor_parallel\"") && !strstr(j, "tensor_parallel_size") &&
           !strstr(j, "max_num_batched_tokens"));
    free(j);
    cfg_free(&c);
}

/* Walking the table: an alias is unique, sets exactly its option's field (the same
 * result as the key, by flag, flag=, file and cfg_set), and --help shows it. */
TEST(every_alias_sets_the_same_field_as_its_key)
{
    size_t n;
    const struct cfg_opt *t = cfg_opts(&n);
    char *help = NULL;
    size_t help_len = 0;
    FILE *f = open_memstream(&help, &help_len);
    cfg_usage(f, "serve");
    fclose(f);
    struct cfg d;
    cfg_defaults(&d);
    int n_alias = 0;
    for (size_t i = 0; i < n; i++) {
        if (!t[i].alias) continue;
        n_alias++;
        for (size_t j = 0; j < n; j++)
            if (strcmp(t[i].alias, t[j].key) == 0 ||
                (j != i && t[j].alias && strcmp(t[i].alias, t[j].alias) == 0))
                TEST_FAIL("alias %s of %s is also a name of %s", t[i].alias, t[i].key,
                          t[j].key);
        char text[128], jval[128], json[300], flag[80], aflag[80], eq[300];
        other_value(&d, &t[i], text, jval, sizeof text);
        flag_of(&t[i], flag, sizeof flag);
        snprintf(aflag, sizeof aflag, "--%s", t[i].alias);
        for (char *p = aflag; *p; p++)
            if (*p == '_') *p = '-';
        struct cfg by_key, c;
        cfg_defaults(&by_key);
        if (PARSE(&by_key, flag, text)) TEST_FAIL("%s %s: %s", flag, text, err_msg());
        char *want = cfg_to_json(&by_key, false);
        for (int how = 0; how < 4; how++) {
            cfg_defaults(&c);
            int err;
            snprintf(eq, sizeof eq, "%s=%s", aflag, text);
            snprintf(json, sizeof json, "{\"%s\": %s}", t[i].alias, jval);
            if (how == 0)
                err = PARSE(&c, aflag, text);
            else if (how == 1)
                err = PARSE(&c, eq);
            else if (how == 2)
                err = cfg_load_string(&c, json, "a.json");
            else
                err = cfg_set(&c, t[i].alias, text);
            if (err) TEST_FAIL("alias %s (way %d): %s", t[i].alias, how, err_msg());
            expect_only_changed(&c, &d, &t[i], text, "alias");
            char *got = cfg_to_json(&c, false);
            EXPECT_STR(got, want);
            free(got);
            cfg_free(&c);
        }
        free(want);
        cfg_free(&by_key);
        /* "--tensor-parallel N (alias --tensor-parallel-size)" on one line. */
        char entry[200];
        const char *mv = t[i].type == CFG_T_INT ? "N" : t[i].metavar ? t[i].metavar : "";
        snprintf(entry, sizeof entry, "\n  %s %s (alias %s)", flag, mv, aflag);
        if (t[i].type == CFG_T_INT && !strstr(help, entry))
            TEST_FAIL("--help lacks \"%s\"", entry + 3);
    }
    EXPECT(n_alias >= 2);
    EXPECT(strstr(help, "\n  --tensor-parallel N (alias --tensor-parallel-size)") != NULL);
    EXPECT(strstr(help, "\n  --max-batched-tokens N (alias --max-num-batched-tokens)") !=
           NULL);
    cfg_free(&d);
    free(help);
}

/* On the command line a flag and its alias are "last wins", as a flag given twice
 * is; in one file they are an error, as a key given twice is. */
TEST(a_flag_and_its_alias_last_wins_a_key_and_its_alias_is_an_error)
{
    struct cfg c;
    cfg_defaults(&c);
    EXPECT_EQ(PARSE(&c, "--port", "1", "--port", "2"), 0);
    EXPECT_EQ(c.port, 2); /* the rule the aliases follow */
    EXPECT_EQ(PARSE(&c, "--tensor-parallel", "2", "--tensor-parallel-size", "4"), 0);
    EXPECT_EQ(c.tensor_parallel, 4);
    EXPECT_EQ(PARSE(&c, "--tensor-parallel-size", "4", "--tensor-parallel", "2"), 0);
    EXPECT_EQ(c.tensor_parallel, 2);
    EXPECT_EQ(PARSE(&c, "--max-num-batched-tokens", "300", "--max-batched-tokens=400"), 0);
    EXPECT_EQ(c.max_batched_tokens, 400);
    cfg_free(&c);

    static const char *const dup[] = {
        "{\"tensor_parallel\": 2, \"tensor_parallel_size\": 2}",
        "{\"tensor_parallel_size\": 2, \"tensor_parallel\": 4}",
        "{\"tensor_parallel_size\": 2, \"tensor_parallel_size\": 4}",
        "{\"max_batched_tokens\": 512, \"max_num_batched_tokens\": 1024}",
    };
    for (size_t i = 0; i < sizeof dup / sizeof dup[0]; i++) {
        const char *path = write_file("dup.json", dup[i], 0);
        cfg_defaults(&c);
        int err = cfg_load_file(&c, path);
        if (err != ENG_EFORMAT) TEST_FAIL("%s: got %d, expected ENG_EFORMAT", dup[i], err);
        EXPECT(msg_has(path));
        EXPECT(msg_has(i < 3 ? "tensor_parallel_size" : "max_num_batched_tokens"));
        EXPECT(i == 2 ? msg_has("twice") : msg_has("both set"));
        EXPECT_EQ(c.tensor_parallel, 1); /* all or nothing */
        EXPECT_EQ(c.max_batched_tokens, 2048);
        cfg_free(&c);
    }
    /* Two files are two sources: the later one wins, also across the alias. */
    const char *a = write_file("tp_a.json", "{\"tensor_parallel\": 2}", 0);
    const char *b = write_file("tp_b.json", "{\"tensor_parallel_size\": 4}", 0);
    cfg_defaults(&c);
    EXPECT_EQ(PARSE(&c, "--config", a, "--config", b), 0);
    EXPECT_EQ(c.tensor_parallel, 4);
    cfg_free(&c);
}

/* vLLM's --dtype names are stored as ours; help and JSON show ours. */
TEST(dtype_names_normalise)
{
    static const struct {
        const char *name;
        enum cfg_dtype want;
    } cases[] = {
        {"auto", CFG_DTYPE_AUTO},    {"fp32", CFG_DTYPE_FP32},
        {"float32", CFG_DTYPE_FP32}, {"float", CFG_DTYPE_FP32},
        {"bf16", CFG_DTYPE_BF16},    {"bfloat16", CFG_DTYPE_BF16},
        {"fp16", CFG_DTYPE_FP16},    {"float16", CFG_DTYPE_FP16},
        {"half", CFG_DTYPE_FP16},
    };
    static const char *const canon[] = {"auto", "fp32", "bf16", "fp16"};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct cfg c;
        cfg_defaults(&c);
        c.dtype = cases[i].want == CFG_DTYPE_FP32 ? CFG_DTYPE_BF16 : CFG_DTYPE_FP32;
        if (PARSE(&c, "--dtype", cases[i].name))
            TEST_FAIL("%s: %s", cases[i].name, err_msg());
        EXPECT_EQ(c.dtype, cases[i].want);
        char json[80], want[80];
        snprintf(json, sizeof json, "{\"dtype\": \"%s\"}", cases[i].name);
        c.dtype = CFG_DTYPE_AUTO;
        if (cfg_load_string(&c, json, "d.json")) TEST_FAIL("%s: %s", json, err_msg());
        EXPECT_EQ(c.dtype, cases[i].want);
        char *j = cfg_to_json(&c, false);
        const char *at = strstr(j, "\"dtype\":");
        snprintf(want, sizeof want, "\"%s\"", canon[cases[i].want]);
        at = at ? at + strlen("\"dtype\":") + strspn(at + strlen("\"dtype\":"), " \t") : "";
        if (strncmp(at, want, strlen(want)) != 0)
            TEST_FAIL("%s dumps as %.12s, not %s", cases[i].name, at, want);
        free(j);
        char val[32];
        cfg_format_value(&c, cfg_find("dtype"), val, sizeof val);
        EXPECT_STR(val, canon[cases[i].want]);
        /* The engine gets the dtype and knows it was asked for. */
        struct engine_opts e, d;
        engine_opts_default(&d);
        cfg_engine_opts(&c, &e);
        EXPECT_EQ(e.model_opts.dtype_set, cases[i].want != CFG_DTYPE_AUTO);
        enum dtype dt = cases[i].want == CFG_DTYPE_FP32   ? DTYPE_F32
                        : cases[i].want == CFG_DTYPE_BF16 ? DTYPE_BF16
                        : cases[i].want == CFG_DTYPE_FP16 ? DTYPE_F16
                                                          : d.model_opts.dtype;
        EXPECT_EQ(e.model_opts.dtype, dt);
        cfg_free(&c);
    }
    /* --help lists the canonical names, then the aliases as what they stand for. */
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    cfg_usage(f, "serve");
    fclose(f);
    EXPECT(strstr(buf, "--dtype auto|fp32|bf16|fp16 ") ||
           strstr(buf, "--dtype auto|fp32|bf16|fp16\n"));
    EXPECT(strstr(buf, "bfloat16=bf16") && strstr(buf, "half=fp16") &&
           strstr(buf, "float=fp32"));
    free(buf);
}

/* --kv-cache-dtype (vLLM's spelling) and the file's kv_cache_dtype reach the engine:
 * auto leaves the cache in the compute dtype (kv_dtype_set false), anything else is
 * passed on, and is part of the fingerprint. Every subcommand that loads a model
 * takes it. */
TEST(kv_cache_dtype_reaches_the_engine)
{
    static const struct {
        const char *name;
        enum cfg_kv_dtype want;
        enum dtype dt;
    } cases[] = {
        {"auto", CFG_KV_DTYPE_AUTO, DTYPE_F32},
        {"fp32", CFG_KV_DTYPE_FP32, DTYPE_F32},
        {"float32", CFG_KV_DTYPE_FP32, DTYPE_F32},
        {"bf16", CFG_KV_DTYPE_BF16, DTYPE_BF16},
        {"bfloat16", CFG_KV_DTYPE_BF16, DTYPE_BF16},
        {"int8", CFG_KV_DTYPE_INT8, DTYPE_I8},
    };
    char fp_auto[64];
    {
        struct cfg c;
        cfg_defaults(&c);
        EXPECT_EQ(c.kv_cache_dtype, CFG_KV_DTYPE_AUTO);
        cfg_fingerprint(&c, fp_auto, sizeof fp_auto);
        cfg_free(&c);
    }
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct cfg c;
        cfg_defaults(&c);
        if (PARSE(&c, "--kv-cache-dtype", cases[i].name))
            TEST_FAIL("%s: %s", cases[i].name, err_msg());
        EXPECT_EQ(c.kv_cache_dtype, cases[i].want);
        struct engine_opts e;
        cfg_engine_opts(&c, &e);
        EXPECT_EQ(e.model_opts.kv_dtype_set, cases[i].want != CFG_KV_DTYPE_AUTO);
        if (cases[i].want != CFG_KV_DTYPE_AUTO)
            EXPECT_EQ(e.model_opts.kv_dtype, cases[i].dt);
        char fp[64];
        cfg_fingerprint(&c, fp, sizeof fp);
        EXPECT((strcmp(fp, fp_auto) == 0) == (cases[i].want == CFG_KV_DTYPE_AUTO));
        /* On the CPU the resolved dtype is the one asked for (auto: the compute one). */
        c.device = BE_DEVICE_CPU;
        EXPECT_EQ(cfg_kv_dtype(&c),
                  cases[i].want == CFG_KV_DTYPE_AUTO ? e.model_opts.dtype : cases[i].dt);
        char json[80];
        snprintf(json, sizeof json, "{\"kv_cache_dtype\": \"%s\"}", cases[i].name);
        c.kv_cache_dtype = CFG_KV_DTYPE_BF16;
        if (cfg_load_string(&c, json, "k.json")) TEST_FAIL("%s: %s", json, err_msg());
        EXPECT_EQ(c.kv_cache_dtype, cases[i].want);
        cfg_free(&c);
    }
    const unsigned scopes[] = {CFG_SERVE, CFG_RUN_BATCH, CFG_GENERATE, CFG_BENCH_QUALITY};
    for (int i = 0; i < 4; i++)
        EXPECT(cfg_find("kv_cache_dtype")->scopes & scopes[i]);
}

/* `serve MODEL` is `serve --model MODEL`, wherever MODEL stands. */
TEST(the_positional_argument_is_the_model)
{
    struct cfg c;
    cfg_defaults(&c);
    int next = 0;
    EXPECT_EQ(parse(&c, &next, (const char *const[]){"dummy:tiny", "--port", "1", NULL}),
              0);
    EXPECT_STR(c.model, "dummy:tiny");
    EXPECT_EQ(c.port, 1);
    EXPECT_EQ(next, 4); /* argc: nothing left for the caller */
    EXPECT_EQ(PARSE(&c, "--port", "2", "m2", "--max-n", "3"), 0);
    EXPECT_STR(c.model, "m2");
    EXPECT_EQ(c.max_n, 3);
    /* The same model both ways is fine; two different ones are a mistake. */
    EXPECT_EQ(PARSE(&c, "m3", "--model", "m3"), 0);
    EXPECT_STR(c.model, "m3");
    EXPECT_EQ(PARSE(&c, "--model=m4", "m4"), 0);
    EXPECT_STR(c.model, "m4");
    EXPECT_EQ(PARSE(&c, "m5", "--model", "m6", "--port", "9"), ENG_EINVAL);
    EXPECT(msg_has("'m5'") && msg_has("--model 'm6'") && msg_has("model"));
    EXPECT_EQ(PARSE(&c, "--model=m6", "m5"), ENG_EINVAL);
    EXPECT(msg_has("'m5'") && msg_has("'m6'"));
    EXPECT_STR(c.model, "m4"); /* all or nothing */
    EXPECT_EQ(c.port, 2);
    /* A file's model is a default like any other: the positional overrides it. */
    const char *fm = write_file("model.json", "{\"model\": \"from-file\"}", 0);
    EXPECT_EQ(PARSE(&c, "--config", fm, "m7"), 0);
    EXPECT_STR(c.model, "m7");
    /* A second positional stops parsing: the caller's to refuse. */
    EXPECT_EQ(parse(&c, &next, (const char *const[]){"m8", "extra", "--port", "3", NULL}),
              0);
    EXPECT_EQ(next, 2);
    EXPECT_STR(c.model, "m8");
    EXPECT_EQ(c.port, 2);
    /* Exactly one option is the positional one. */
    size_t n;
    const struct cfg_opt *t = cfg_opts(&n);
    int n_pos = 0;
    for (size_t i = 0; i < n; i++)
        if (t[i].flags & CFG_F_POSITIONAL) {
            n_pos++;
            EXPECT_STR(t[i].key, "model");
        }
    EXPECT_EQ(n_pos, 1);
    cfg_free(&c);
    /* --help shows the form. */
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    cfg_usage(f, "serve");
    fclose(f);
    EXPECT(strstr(buf, "usage: h2oserve serve [MODEL] [options]\n") != NULL);
    EXPECT(strstr(buf, "\n  MODEL ") != NULL && strstr(buf, "--model MODEL") != NULL);
    free(buf);
}

/* max_model_len: 0 (the model's) by default, a token count up to 2^20, and the
 * scheduler's limit. Whether the model supports it is checked once it is known
 * (sched_context_len; test_sched and test_vllm_flags). */
TEST(max_model_len_is_a_token_count)
{
    struct cfg c;
    cfg_defaults(&c);
    EXPECT_EQ(c.max_model_len, 0);
    struct engine_opts e;
    cfg_engine_opts(&c, &e);
    EXPECT_EQ(e.sched.max_model_len, 0);
    EXPECT_EQ(PARSE(&c, "--max-model-len", "64"), 0);
    EXPECT_EQ(c.max_model_len, 64);
    EXPECT_EQ(cfg_validate(&c), 0);
    cfg_engine_opts(&c, &e);
    EXPECT_EQ(e.sched.max_model_len, 64);
    EXPECT_EQ(PARSE(&c, "--max-model-len=1048576"), 0);
    EXPECT_EQ(c.max_model_len, 1 << 20);
    static const char *const bad[] = {"-1", "1048577", "1.5", "64k", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        EXPECT_EQ(PARSE(&c, "--max-model-len", bad[i]), ENG_EINVAL);
        EXPECT(msg_has("--max-model-len"));
    }
    EXPECT_EQ(cfg_load_string(&c, "{\"max_model_len\": -5}", "m.json"), ENG_EINVAL);
    EXPECT(msg_has("max_model_len") && msg_has("m.json"));
    EXPECT_EQ(c.max_model_len, 1 << 20);
    cfg_free(&c);
}

int main(void)
{
    if (!mkdtemp(tmp_dir)) return 1;
    RUN(parsing_stops_at_the_second_positional_argument);
    RUN(aliases_are_vllms_flag_names);
    RUN(every_alias_sets_the_same_field_as_its_key);
    RUN(a_flag_and_its_alias_last_wins_a_key_and_its_alias_is_an_error);
    RUN(dtype_names_normalise);
    RUN(kv_cache_dtype_reaches_the_engine);
    RUN(the_positional_argument_is_the_model);
    RUN(max_model_len_is_a_token_count);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_dir);
    if (system(cmd)) {
    }
    return test_done();
}
