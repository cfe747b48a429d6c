/*
 * loadgen_result.h - the file of --save-result: where vLLM would put it, and vLLM's
 * result JSON (its summary keys and per-request arrays) with ours beside it.
 *
 * Owns: nothing; it reads the options, the summary and the records.
 * Thread: main.
 */
#ifndef H2O_LOADGEN_RESULT_H
#define H2O_LOADGEN_RESULT_H

#include <stddef.h>
#include <stdint.h>

#include "loadgen_opts.h"
#include "loadgen_stats.h"

/* What the saved file says about the run besides the options and the summary. */
struct lg_result_run {
    const char *model;           /* the model the requests named */
    const char *date;            /* vLLM's "%Y%m%d-%H%M%S", local time */
    int64_t connections_opened;  /* the keep-alive check */
};

/*
 * Write into buf[len] the path of the result file, as vLLM's compute_result_filename
 * makes it: --result-filename (or our --save-result FILE), else
 * "{label}-{rate}qps[-concurrency{C}]-{model after its last '/'}-{date}.json" with
 * label = --label or the backend and rate as Python prints a float ("inf", "50.0");
 * joined under --result-dir unless the name is absolute, creating the directory and
 * its parents. Returns 0, or -1 with errno set (ENAMETOOLONG, or mkdir's).
 * Thread: main.
 */
int loadgen_result_path(char *buf, size_t len, const struct lg_opts *o,
                        const struct lg_result_run *run);

/*
 * Write the JSON to `path`: vLLM's top-level keys (date, backend, label, model_id,
 * num_prompts, request_rate, burstiness, max_concurrency, the summary counts and
 * throughputs, mean/median/std/p<p>_<metric>_ms for every metric, and the per-request
 * arrays input_lens, output_lens, ttfts, itls, latencies and start_times in seconds,
 * generated_texts, errors), then ours: "config" (the settings) and "requests" (one
 * record each, in ms). rec[0..n) in request order. Returns 0, or -1 with errno set.
 * Thread: main.
 */
int loadgen_result_save(const char *path, const struct lg_opts *o,
                        const struct lg_result_run *run, const struct lg_summary *s,
                        const struct lg_record *rec, int64_t n);

#endif
