/*
 * test_cfg.c - the configuration module as a specification: defaults, the JSON file,
 * flags overriding the file wherever --config stands, every option reachable both
 * ways (walking the option table, so a new option is covered without a new test),
 * sizes and bools, one error message per kind of mistake, --help, the example file
 * and the mapping to the engine's options.
 * argv[1] is config/example.json.
 */
#include "cfg.h"
#include "err.h"
#include "test.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *example_path = "config/example.json";
static char tmp_dir[] = "/tmp/h2o_test_cfg_XXXXXX";

/* Write `text` (len bytes, or strlen) to tmp_dir/name; returns the path (static). */
static const char *write_file(const char *name, const char *text, size_t len)
{
    static char path[4][256];
    static int k;
    char *p = path[k++ % 4];
    snprintf(p, sizeof path[0], "%s/%s", tmp_dir, name);
    FILE *f = fopen(p, "wb");
    if (!f) abort();
    fwrite(text, 1, len ? len : strlen(text), f);
    fclose(f);
    return p;
}

/* cfg_parse_args on a NULL-terminated list; argv[0] is "serve". */
static int parse(struct cfg *c, int *next, const char *const *args)
{
    char *argv[64] = {"serve"};
    int argc = 1;
    while (args[argc - 1]) {
        argv[argc] = (char *)args[argc - 1];
        argc++;
    }
    int dummy;
    return cfg_parse_args(c, argc, argv, next ? next : &dummy);
}
#define PARSE(c, ...) parse((c), NULL, (const char *const[]){__VA_ARGS__, NULL})

/* Whether the last error message contains `needle`. */
static int msg_has(const char *needle)
{
    if (strstr(err_msg(), needle)) return 1;
    printf("# message \"%s\" lacks \"%s\"\n", err_msg(), needle);
    return 0;
}

/* A field's raw value through the table (independent of cfg.c's accessors). */
static int64_t field_int(const struct cfg *c, const struct cfg_opt *o)
{
    const char *p = (const char *)c + o->offset;
    if (o->type == CFG_T_BOOL) return *(const bool *)p;
    if (o->type == CFG_T_ENUM) return *(const int *)p;
    if (o->size == 4) return *(const int32_t *)p;
    return *(const int64_t *)p;
}

static double field_float(const struct cfg *c, const struct cfg_opt *o)
{
    return *(const double *)((const char *)c + o->offset);
}

static const char *field_str(const struct cfg *c, const struct cfg_opt *o)
{
    return *(char *const *)((const char *)c + o->offset);
}

static char *flag_of(const struct cfg_opt *o, char *buf, size_t len)
{
    snprintf(buf, len, "--%s", o->key);
    for (char *p = buf; *p; p++)
        if (*p == '_') *p = '-';
    return buf;
}

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

/* A value of o that differs from its default, as flag text and as JSON. */
static void other_value(const struct cfg *d, const struct cfg_opt *o, char *text,
                        char *json, size_t len)
{
    int64_t v;
    double f;
    switch (o->type) {
    case CFG_T_STR:
        snprintf(text, len, "x.example");
        snprintf(json, len, "\"x.example\"");
        break;
    case CFG_T_INT:
    case CFG_T_SIZE:
        v = field_int(d, o);
        v = (double)(v + 1024) <= o->max ? v + 1024
            : (double)(v + 1) <= o->max  ? v + 1
                                         : v - 1;
        snprintf(text, len, "%lld", (long long)v);
        snprintf(json, len, "%lld", (long long)v);
        break;
    case CFG_T_FLOAT:
        f = field_float(d, o);
        f = f + 0.25 <= o->max ? f + 0.25 : f - 0.25;
        snprintf(text, len, "%.17g", f);
        snprintf(json, len, "%.17g", f);
        break;
    case CFG_T_BOOL:
        snprintf(text, len, "%s", field_int(d, o) ? "false" : "true");
        snprintf(json, len, "%s", text);
        break;
    case CFG_T_ENUM: {
        int n = 0;
        while (o->values[n])
            n++;
        snprintf(text, len, "%s", o->values[(field_int(d, o) + 1) % n]);
        snprintf(json, len, "\"%.100s\"", text);
        break;
    }
    }
}

/* o in c holds the value `text` stands for, and every other option its default. */
static void expect_only_changed(const struct cfg *c, const struct cfg *d,
                                const struct cfg_opt *o, const char *text, const char *how)
{
    size_t n;
    const struct cfg_opt *t = cfg_opts(&n);
    for (size_t i = 0; i < n; i++) {
        char a[128], b[128];
        cfg_format_value(c, &t[i], a, sizeof a);
        cfg_format_value(d, &t[i], b, sizeof b);
        if (&t[i] == o) {
            if (strcmp(a, b) == 0)
                TEST_FAIL("%s via %s: still the default %s", o->key, how, a);
        } else if (strcmp(a, b) != 0) {
            TEST_FAIL("%s via %s also changed %s (%s -> %s)", o->key, how, t[i].key, b, a);
        }
    }
    switch (o->type) {
    case CFG_T_STR: EXPECT_STR(field_str(c, o), text); break;
    case CFG_T_INT:
    case CFG_T_SIZE: EXPECT_EQ(field_int(c, o), strtoll(text, NULL, 10)); break;
    case CFG_T_FLOAT: EXPECT_NEAR(field_float(c, o), strtod(text, NULL), 1e-12); break;
    case CFG_T_BOOL: EXPECT_EQ(field_int(c, o), strcmp(text, "true") == 0); break;
    case CFG_T_ENUM: EXPECT_STR(o->values[field_int(c, o)], text); break;
    }
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
    struct cfg d;
    cfg_defaults(&d);
    for (size_t i = 0; i < n; i++) {
        const struct cfg_opt *o = &t[i];
        char text[128], jval[128], json[300], flag[80], eq[300];
        other_value(&d, o, text, jval, sizeof text);
        flag_of(o, flag, sizeof flag);

        struct cfg c;
        cfg_defaults(&c);
        snprintf(json, sizeof json, "{\"%s\": %s}", o->key, jval);
        if (cfg_load_string(&c, json, "t.json")) TEST_FAIL("%s: %s", json, err_msg());
        expect_only_changed(&c, &d, o, text, "file");
        cfg_free(&c);

        cfg_defaults(&c);
        if (o->type == CFG_T_BOOL) {
            /* A bare bool flag takes no value ("--x true" would make "true" the
             * positional model): --x or --no-x. */
            char no[90];
            snprintf(no, sizeof no, "--no-%s", flag + 2);
            if (PARSE(&c, strcmp(text, "true") == 0 ? flag : no))
                TEST_FAIL("%s: %s", flag, err_msg());
        } else if (PARSE(&c, flag, text)) {
            TEST_FAIL("%s %s: %s", flag, text, err_msg());
        }
        expect_only_changed(&c, &d, o, text, "flag");
        cfg_free(&c);

        cfg_defaults(&c);
        snprintf(eq, sizeof eq, "%s=%s", flag, text);
        if (PARSE(&c, eq)) TEST_FAIL("%s: %s", eq, err_msg());
        expect_only_changed(&c, &d, o, text, "flag=");
        cfg_free(&c);

        cfg_defaults(&c);
        if (cfg_set(&c, o->key, text)) TEST_FAIL("cfg_set %s: %s", o->key, err_msg());
        expect_only_changed(&c, &d, o, text, "cfg_set");
        cfg_free(&c);
    }
    cfg_free(&d);
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
            EXPECT_EQ(cfg_load_string(&c, json, "r.json"), ENG_EINVAL);
            EXPECT(msg_has(o->key) && msg_has("r.json"));
            if (o->type != CFG_T_SIZE || bad[k] >= 0) {
                EXPECT_EQ(PARSE(&c, flag_of(o, flag, sizeof flag), text), ENG_EINVAL);
                EXPECT(msg_has(flag));
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

TEST(usage_lists_every_flag_with_its_default)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    cfg_usage(f, "serve");
    fclose(f);
    EXPECT(strstr(buf, "usage: h2oserve serve") != NULL);
    EXPECT(strstr(buf, "--config FILE") != NULL);
    EXPECT(strstr(buf, "--help") != NULL);
    size_t n;
    const struct cfg_opt *t = cfg_opts(&n);
    struct cfg d;
    cfg_defaults(&d);
    for (size_t i = 0; i < n; i++) {
        char flag[80], want[300], val[128];
        flag_of(&t[i], flag, sizeof flag);
        if (t[i].type == CFG_T_BOOL) snprintf(flag, sizeof flag, "--[no-]%s", t[i].key);
        for (char *p = flag; *p; p++)
            if (*p == '_') *p = '-';
        /* The entry: "\n  FLAG" then a space (placeholder, help) or a newline. */
        const char *at = buf;
        size_t fl = strlen(flag);
        while ((at = strstr(at, flag)) &&
               !(at - buf >= 3 && strncmp(at - 3, "\n  ", 3) == 0 &&
                 (at[fl] == ' ' || at[fl] == '\n')))
            at++;
        if (!at) TEST_FAIL("usage lacks %s", flag);
        /* The default, after the flag (the help text may wrap before it). */
        snprintf(want, sizeof want, "(default: %s)",
                 t[i].dflt_note ? t[i].dflt_note
                                : cfg_format_value(&d, &t[i], val, sizeof val));
        const char *next = at ? strstr(at + 1, "\n  --") : NULL;
        const char *hit = at ? strstr(at, want) : NULL;
        if (!hit || (next && hit > next)) TEST_FAIL("usage of %s lacks %s", flag, want);
    }
    EXPECT(strstr(buf, "(default: 8000)") != NULL);
    EXPECT(strstr(buf, "(default: 32M)") != NULL);
    EXPECT(strstr(buf, "(default: h2o)") != NULL);
    /* No line wider than 80 columns (the help wraps). */
    for (const char *p = buf; *p;) {
        size_t w = strcspn(p, "\n");
        if (w > 80) TEST_FAIL("usage line of %zu columns: %.40s...", w, p);
        p += w + (p[w] != 0);
    }
    cfg_free(&d);
    free(buf);
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
    RUN(every_number_out_of_range_is_refused_naming_the_option);
    RUN(sizes_take_bytes_or_binary_units);
    RUN(bools_take_every_usual_form);
    RUN(each_file_mistake_names_the_file_and_the_key);
    RUN(hostile_files_fail_cleanly);
    RUN(each_flag_mistake_names_the_flag);
    RUN(a_bad_flag_after_a_good_config_changes_nothing);
    RUN(parsing_stops_at_the_second_positional_argument);
    RUN(aliases_are_vllms_flag_names);
    RUN(every_alias_sets_the_same_field_as_its_key);
    RUN(a_flag_and_its_alias_last_wins_a_key_and_its_alias_is_an_error);
    RUN(dtype_names_normalise);
    RUN(the_positional_argument_is_the_model);
    RUN(max_model_len_is_a_token_count);
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
