/*
 * loadgen_stats.h - the load generator's metrics, exactly as `vllm bench serve`
 * defines them (docs/REFERENCE section 3), its printed block and its saved JSON.
 *
 * Owns: nothing; the records and their ITL arrays belong to the caller.
 * Thread: any (pure functions over the records).
 */
#ifndef H2O_LOADGEN_STATS_H
#define H2O_LOADGEN_STATS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* One request's outcome. Times in ms from the moment it was sent (connect included,
 * as vLLM's client times it); only meaningful when ok. */
struct lg_record {
    bool ok;
    const char *error;      /* NULL when ok */
    double start_s;         /* when it was sent, from the benchmark's start */
    int32_t prompt_tokens;  /* the server's usage.prompt_tokens, else the prompt length */
    int32_t output_tokens;  /* usage.completion_tokens, else the chunks that carried text */
    double ttft_ms;         /* first chunk with a choice - send */
    double e2el_ms;         /* last chunk with a choice - send */
    const double *itl_ms;   /* gaps between consecutive chunks with a choice: [n_itl] */
    int32_t n_itl;
};

/* mean / median / p99 of one latency, in ms; numpy's percentile (linear). */
struct lg_dist {
    double mean, median, p99;
};

struct lg_summary {
    int64_t completed, failed;
    double duration_s;
    int64_t total_input, total_output;   /* over the successful requests */
    double request_throughput;           /* completed / duration */
    double output_throughput;            /* total_output / duration */
    double total_token_throughput;       /* (total_input + total_output) / duration */
    struct lg_dist ttft, tpot, itl, e2el;
    int32_t max_concurrency;             /* 0 = unlimited; printed when set */
};

/* Compute the summary of n records over a benchmark that lasted duration_s.
 * TPOT per request = (E2EL - TTFT) / (output_tokens - 1), over the requests with
 * more than one output token; ITL pooled over every successful request. Returns 0,
 * or -1 when out of memory. */
int lg_summary_compute(struct lg_summary *out, const struct lg_record *rec, int64_t n,
                       double duration_s);

/* Print vLLM's "Serving Benchmark Result" block with its labels. */
void lg_summary_print(FILE *f, const struct lg_summary *s);

/* Write the summary, the run's settings (config_json: a JSON object text, or NULL)
 * and every record as JSON to `path`. Returns 0, or -1 with errno set. */
int lg_save_json(const char *path, const struct lg_summary *s, const char *config_json,
                 const struct lg_record *rec, int64_t n);

/* numpy.percentile(x, p) with linear interpolation; sorts x in place; 0 when n == 0. */
double lg_percentile(double *x, int64_t n, double p);

#endif
