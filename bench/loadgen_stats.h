/*
 * loadgen_stats.h - the load generator's metrics, exactly as `vllm bench serve`
 * defines them (docs/REFERENCE section 3), and its printed block (the saved JSON is
 * loadgen_result.c's).
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
    const char *text;       /* the streamed choices' text, NULL for none */
    double start_s;         /* when it was sent, from the benchmark's start */
    int32_t prompt_tokens;  /* usage.prompt_tokens, else (and when failed) the prompt's */
    int32_t output_tokens;  /* usage.completion_tokens, else the chunks that carried text */
    double ttft_ms;         /* first chunk with a choice - send */
    double e2el_ms;         /* last chunk with a choice - send */
    const double *itl_ms;   /* gaps between consecutive chunks with a choice: [n_itl] */
    int32_t n_itl;
};

/* The four latencies, in the order vLLM prints their sections. */
enum lg_metric { LG_TTFT, LG_TPOT, LG_ITL, LG_E2EL, LG_N_METRICS };

#define LG_MAX_PERCENTILES 16

/* A metric's name in vLLM's JSON keys and --percentile-metrics ("ttft", ...), and in
 * its printed labels ("TTFT", ...). Thread: any. */
const char *loadgen_stats_metric_key(enum lg_metric m);
const char *loadgen_stats_metric_label(enum lg_metric m);

/* One latency over the requests, in ms: numpy's mean, median, std (ddof 0) and
 * percentile (linear) of each of the summary's percentiles; all 0 for no values, as
 * vLLM's np.mean(x or 0). */
struct lg_dist {
    double mean, median, std;
    double pct[LG_MAX_PERCENTILES];  /* [summary.n_pct] */
};

struct lg_summary {
    /* Set by the caller before loadgen_stats_summarize, which keeps them. */
    int32_t max_concurrency;             /* 0 = unlimited; printed when set */
    unsigned metrics;                    /* 1 << enum lg_metric: the printed sections */
    int n_pct;                           /* --metric-percentiles, in the given order */
    double pct[LG_MAX_PERCENTILES];
    /* Computed. */
    int64_t completed, failed;
    double duration_s;
    int64_t total_input, total_output;   /* over the successful requests */
    double request_throughput;           /* completed / duration */
    double output_throughput;            /* total_output / duration */
    double total_token_throughput;       /* (total_input + total_output) / duration */
    struct lg_dist dist[LG_N_METRICS];
};

/* Compute the summary of n records over a benchmark that lasted duration_s, keeping
 * the caller's settings in *out. TPOT per request = (E2EL - TTFT) / (output_tokens -
 * 1), over the requests with more than one output token; ITL pooled over every
 * successful request. Returns 0, or -1 when out of memory. Thread: any. */
int loadgen_stats_summarize(struct lg_summary *out, const struct lg_record *rec, int64_t n,
                            double duration_s);

/* Print vLLM's "Serving Benchmark Result" block with its labels: the selected
 * metrics' sections only, each with Mean, Median and a "P<p>" line per percentile.
 * Thread: any. */
void loadgen_stats_print(FILE *f, const struct lg_summary *s);

/* numpy.percentile(x, p) with linear interpolation; sorts x in place; 0 when n == 0.
 * Thread: any. */
double loadgen_stats_percentile(double *x, int64_t n, double p);

/* Python's str(x) for a float ("inf", "50.0", "99.9", "1e-05"): vLLM puts it in
 * file names and keys. Thread: any. */
void loadgen_stats_py_float(char *buf, size_t len, double x);

/* vLLM's name of percentile p in labels and keys: "99" for 99.0, "99.9" (Python's
 * str(int(p)) if int(p) == p else str(p)). Thread: any. */
void loadgen_stats_percentile_word(char *buf, size_t len, double p);

#endif
