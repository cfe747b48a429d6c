/*
 * test_loadgen_opts.c - bench/loadgen's command line (loadgen_opts.c) and the names
 * it shares with `vllm bench serve` (loadgen_stats.c): vLLM's defaults, both forms
 * of --save-result, the metric and percentile lists, every refusal, and the way
 * Python prints the floats that vLLM puts in labels, keys and file names.
 */
#include <stdint.h>

#include "loadgen_opts.h"
#include "loadgen_stats.h"
#include "test.h"

/* Parse a NULL-terminated argument list after "loadgen". */
#define PARSE(o, ...)                                                                   \
    parse_args(o, (const char *[]){"loadgen", __VA_ARGS__, NULL})

static int parse_args(struct lg_opts *o, const char **args)
{
    static char *argv[64];
    int argc = 0;
    while (args[argc] && argc < 63) {
        argv[argc] = (char *)args[argc];
        argc++;
    }
    argv[argc] = NULL;
    return loadgen_opts_parse(o, argc, argv);
}

TEST(defaults_are_vllms)
{
    struct lg_opts o;
    EXPECT_EQ(PARSE(&o, "--port", "8001"), 0);
    EXPECT_STR(o.endpoint, "/v1/completions");
    EXPECT_STR(o.backend, "openai");
    EXPECT_EQ(o.metrics, 1u << LG_TTFT | 1u << LG_TPOT | 1u << LG_ITL);  /* no E2EL */
    EXPECT_EQ(o.n_pct, 1);
    EXPECT_NEAR(o.pct[0], 99, 0);
    EXPECT_NEAR(o.burstiness, 1, 0);
    EXPECT(isinf(o.request_rate));
    EXPECT_EQ(o.save_result, 0);
    EXPECT(o.result_filename == NULL && o.result_dir == NULL && o.label == NULL);
}

TEST(vllm_flags_are_accepted)
{
    struct lg_opts o;
    EXPECT_EQ(PARSE(&o, "--backend", "vllm", "--dataset-name", "random", "--endpoint",
                    "/v2/completions", "--burstiness", "0.5", "--request-rate", "50",
                    "--label", "run1", "--save-detailed"), 0);
    EXPECT_STR(o.backend, "vllm");
    EXPECT_STR(o.endpoint, "/v2/completions");
    EXPECT_NEAR(o.burstiness, 0.5, 0);
    EXPECT_STR(o.label, "run1");
    EXPECT_EQ(PARSE(&o, "--burstiness", "inf", "--request-rate", "3"), 0);
    EXPECT(isinf(o.burstiness));
}

TEST(save_result_takes_a_file_or_is_vllms_flag)
{
    struct lg_opts o;
    EXPECT_EQ(PARSE(&o, "--save-result", "out.json", "--port", "1"), 0);
    EXPECT(o.save_result);
    EXPECT_STR(o.result_filename, "out.json");
    EXPECT_EQ(o.port, 1);

    EXPECT_EQ(PARSE(&o, "--save-result", "--result-filename", "r.json", "--result-dir",
                    "res"), 0);
    EXPECT(o.save_result);
    EXPECT_STR(o.result_filename, "r.json");
    EXPECT_STR(o.result_dir, "res");

    EXPECT_EQ(PARSE(&o, "--port", "2", "--save-result"), 0);  /* the last word */
    EXPECT(o.save_result && o.result_filename == NULL);

    EXPECT_EQ(PARSE(&o, "--save-result=x.json", "--result-dir", "d"), 0);
    EXPECT_STR(o.result_filename, "x.json");

    /* vLLM saves only with --save-result; a file name alone is a warning. */
    EXPECT_EQ(PARSE(&o, "--result-filename", "r.json"), 0);
    EXPECT_EQ(o.save_result, 0);

    EXPECT_EQ(PARSE(&o, "--save-result", "a.json", "--result-filename", "b.json"), -1);
    EXPECT_EQ(PARSE(&o, "--save-result", "a.json", "--result-filename", "a.json"), 0);
    EXPECT_EQ(PARSE(&o, "--save-result", "a.json", "stray"), -1);
}

TEST(percentile_lists_keep_vllms_meaning)
{
    struct lg_opts o;
    EXPECT_EQ(PARSE(&o, "--percentile-metrics", "e2el,ttft", "--metric-percentiles",
                    "50, 90,99.9"), 0);
    EXPECT_EQ(o.metrics, 1u << LG_TTFT | 1u << LG_E2EL);
    EXPECT_EQ(o.n_pct, 3);
    EXPECT_NEAR(o.pct[0], 50, 0);
    EXPECT_NEAR(o.pct[1], 90, 0);
    EXPECT_NEAR(o.pct[2], 99.9, 0);
    EXPECT_EQ(PARSE(&o, "--percentile-metrics", "ttft,tpot,itl,e2el",
                    "--metric-percentiles", "0,100"), 0);
    EXPECT_EQ(o.metrics, 15);
    EXPECT_EQ(o.n_pct, 2);
}

TEST(bad_values_are_refused)
{
    static const char *const bad[][2] = {
        {"--dataset-name", "sharegpt"}, {"--dataset-name", "sonnet"},
        {"--backend", "openai-chat"}, {"--backend", "tgi"},
        {"--endpoint", "/v1/models"}, {"--endpoint", "v1/completions"},
        {"--burstiness", "0"}, {"--burstiness", "-1"}, {"--burstiness", "nan"},
        {"--burstiness", "x"}, {"--percentile-metrics", "ttft,bogus"},
        {"--percentile-metrics", ""}, {"--percentile-metrics", "client_queue_time"},
        {"--metric-percentiles", "101"}, {"--metric-percentiles", "-1"},
        {"--metric-percentiles", "50,,90"}, {"--metric-percentiles", "inf"},
        {"--result-dir", ""}, {"--request-rate", "0"}, {"--port", "0"},
    };
    struct lg_opts o;
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        if (PARSE(&o, bad[i][0], bad[i][1]) != -1)
            TEST_FAIL("%s %s was accepted", bad[i][0], bad[i][1]);
    EXPECT_EQ(PARSE(&o, "--goodput", "ttft:100"), -1);  /* not ours: unknown */
    EXPECT_EQ(PARSE(&o, "--metric-percentiles",
                    "1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17"), -1);
}

TEST(floats_print_as_python_prints_them)
{
    /* vLLM's file name has str(request_rate); its labels str(p) for a fraction. */
    static const struct { double x; const char *s; } cases[] = {
        {50, "50.0"}, {0.5, "0.5"}, {99.9, "99.9"}, {12.5, "12.5"}, {0, "0.0"},
        {INFINITY, "inf"}, {0.1 + 0.2, "0.30000000000000004"}, {1e-05, "1e-05"},
        {0.0001, "0.0001"}, {1.5e-07, "1.5e-07"}, {1e15, "1000000000000000.0"},
        {1e16, "1e+16"}, {123.456, "123.456"}, {2.0 / 3, "0.6666666666666666"},
    };
    char buf[64];
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        loadgen_stats_py_float(buf, sizeof buf, cases[i].x);
        EXPECT_STR(buf, cases[i].s);
    }
}

TEST(percentiles_are_named_as_vllm_names_them)
{
    char buf[64];
    loadgen_stats_percentile_word(buf, sizeof buf, 99);
    EXPECT_STR(buf, "99");
    loadgen_stats_percentile_word(buf, sizeof buf, 50.0);
    EXPECT_STR(buf, "50");
    loadgen_stats_percentile_word(buf, sizeof buf, 99.9);
    EXPECT_STR(buf, "99.9");
    loadgen_stats_percentile_word(buf, sizeof buf, 0.001);
    EXPECT_STR(buf, "0.001");
}

TEST(percentile_is_numpys_linear_one)
{
    double x[] = {4, 1, 3, 2};
    EXPECT_NEAR(loadgen_stats_percentile(x, 4, 50), 2.5, 1e-12);
    EXPECT_NEAR(loadgen_stats_percentile(x, 4, 99), 3.97, 1e-12);
    EXPECT_NEAR(loadgen_stats_percentile(x, 4, 0), 1, 0);
    EXPECT_NEAR(loadgen_stats_percentile(x, 4, 100), 4, 0);
    EXPECT_NEAR(loadgen_stats_percentile(x, 0, 50), 0, 0);
}

int main(void)
{
    RUN(defaults_are_vllms);
    RUN(vllm_flags_are_accepted);
    RUN(save_result_takes_a_file_or_is_vllms_flag);
    RUN(percentile_lists_keep_vllms_meaning);
    RUN(bad_values_are_refused);
    RUN(floats_print_as_python_prints_them);
    RUN(percentiles_are_named_as_vllm_names_them);
    RUN(percentile_is_numpys_linear_one);
    return test_done();
}
