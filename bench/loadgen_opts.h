/*
 * loadgen_opts.h - bench/loadgen's command line: the flags of `vllm bench serve` it
 * shares, with vLLM's meaning and defaults, plus a few of its own (--base-url's
 * /v1 suffix, --random-vocab-size, --timeout, --save-result FILE).
 * Thread: main.
 */
#ifndef H2O_LOADGEN_OPTS_H
#define H2O_LOADGEN_OPTS_H

#include <stdbool.h>
#include <stdint.h>

#include "loadgen_stats.h"

struct lg_opts {
    char host[256];
    int port;
    char prefix[256];        /* path prefix of --base-url, "" or "/something" */
    const char *endpoint;    /* --endpoint, appended to the prefix: "/v1/completions" */
    const char *backend;     /* "openai" or "vllm": both the streaming completions client */
    const char *model;
    const char *api_key;
    int64_t num_prompts;
    double request_rate;     /* requests/s; INFINITY = all at once */
    double burstiness;       /* gamma shape of the gaps: 1 = Poisson, INFINITY = even */
    int32_t max_concurrency; /* 0 = unlimited */
    int32_t input_len, output_len;
    int32_t vocab;           /* prompt ids drawn from [4, vocab) */
    uint64_t seed;
    double timeout_s;
    unsigned metrics;        /* --percentile-metrics: 1 << enum lg_metric (ttft,tpot,itl) */
    int n_pct;               /* --metric-percentiles, in the given order (99) */
    double pct[LG_MAX_PERCENTILES];
    /* --save-result FILE (ours) is --save-result --result-filename FILE (vLLM's). */
    bool save_result;        /* write the JSON file */
    const char *result_filename;  /* NULL: vLLM's generated name (loadgen_result.c) */
    const char *result_dir;  /* NULL: the current directory */
    const char *label;       /* --label, NULL: the backend's name, as vLLM */
};

/* Fill `o` from argv (defaults first). Returns 0; 1 after printing --help (exit 0);
 * -1 after printing what is wrong to stderr (exit 2). Borrows argv's strings.
 * Thread: main. */
int loadgen_opts_parse(struct lg_opts *o, int argc, char **argv);

#endif
