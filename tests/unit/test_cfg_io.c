/*
 * test_cfg_io.c - reading a configuration (cfg_io.c): the JSON file, flags overriding
 * the file wherever --config stands, one message per kind of mistake in either,
 * hostile files, the example file and the JSON dump. argv[1] is config/example.json.
 * vLLM's command line (aliases, dtype names, the positional model) is
 * test_cfg_vllm.c.
 */
#include "cfg_testlib.h"

static const char *example_path = "config/example.json";

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
        {"{\"dtype\": \"fp8\"}", ENG_EINVAL, "auto, fp32, bf16 or fp16"},
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
        {{"--kv-policy", "nope"}, "full, h2o or local, got 'nope'"},
        {{"--dtype=fp8"},
         "auto, fp32, bf16 or fp16 (or float32, float, bfloat16, float16, half), got"},
        {{"--dtype", "FP16"}, "--dtype"},
        {{"--kv-cache-dtype", "fp8"},
         "--kv-cache-dtype wants auto, fp32, bf16 or int8 (or float32, bfloat16), got "
         "'fp8'"},
        {{"--kv-cache-dtype=int4"}, "--kv-cache-dtype"},
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

int main(int argc, char **argv)
{
    if (argc > 1) example_path = argv[1];
    if (!mkdtemp(tmp_dir)) return 1;
    RUN(flags_override_the_file_wherever_config_stands);
    RUN(each_file_mistake_names_the_file_and_the_key);
    RUN(hostile_files_fail_cleanly);
    RUN(each_flag_mistake_names_the_flag);
    RUN(a_bad_flag_after_a_good_config_changes_nothing);
    RUN(example_json_loads_validates_and_documents_every_key);
    RUN(json_dump_round_trips_and_redacts_the_key);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_dir);
    if (system(cmd)) {
    }
    return test_done();
}
