/*
 * loadgen_result.c - the --save-result file (see loadgen_result.h).
 *
 * The keys follow vllm/benchmarks/serve.py's result_json so that scripts written for
 * vLLM's files read ours. Where the two differ, ours is the superset: the summary
 * keys of all four metrics (vLLM keeps only the --percentile-metrics'), the
 * per-request arrays always (vLLM needs --save-detailed for most of them), and our
 * own "config" and "requests". start_times count from the benchmark's start, where
 * vLLM's are raw perf_counter readings that only their differences give meaning to.
 * Thread: main.
 */
#include "loadgen_result.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

/* os.makedirs(dir, exist_ok=True). A component that exists as a file passes here
 * and fails the fopen afterwards with ENOTDIR, which names the problem as well. */
static int mkdir_parents(const char *dir)
{
    char p[4096];
    if (snprintf(p, sizeof p, "%s", dir) >= (int)sizeof p) {
        errno = ENAMETOOLONG;
        return -1;
    }
    for (char *q = p + 1;; q++) {
        if (*q != '/' && *q != '\0')
            continue;
        char c = *q;
        *q = '\0';
        if (mkdir(p, 0777) != 0 && errno != EEXIST)
            return -1;
        *q = c;
        if (!c)
            return 0;
    }
}

int loadgen_result_path(char *buf, size_t len, const struct lg_opts *o,
                        const struct lg_result_run *run)
{
    char name[2048];
    if (o->result_filename) {
        snprintf(name, sizeof name, "%s", o->result_filename);
    } else {
        char rate[40], conc[40] = "";
        loadgen_stats_py_float(rate, sizeof rate, o->request_rate);
        if (o->max_concurrency > 0)
            snprintf(conc, sizeof conc, "-concurrency%d", o->max_concurrency);
        const char *slash = strrchr(run->model, '/');
        snprintf(name, sizeof name, "%s-%sqps%s-%s-%s.json", o->label ? o->label : o->backend,
                 rate, conc, slash ? slash + 1 : run->model, run->date);
    }
    if (o->result_dir && mkdir_parents(o->result_dir) != 0)
        return -1;
    int n;
    if (o->result_dir && name[0] != '/') {  /* os.path.join keeps an absolute name */
        size_t dl = strlen(o->result_dir);
        n = snprintf(buf, len, "%s%s%s", o->result_dir,
                     o->result_dir[dl - 1] == '/' ? "" : "/", name);
    } else {
        n = snprintf(buf, len, "%s", name);
    }
    if (n < 0 || (size_t)n >= len || strlen(name) + 1 >= sizeof name) {
        errno = ENAMETOOLONG;
        return -1;
    }
    return 0;
}

/* A rate or shape that may be infinite: vLLM writes "inf" for the rate, and JSON
 * has no infinity (Python would write the invalid token Infinity). */
static void add_finite_or_inf(cJSON *o, const char *key, double x)
{
    if (isfinite(x))
        cJSON_AddNumberToObject(o, key, x);
    else
        cJSON_AddStringToObject(o, key, "inf");
}

static cJSON *config_json(const struct lg_opts *o, const struct lg_result_run *run)
{
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "host", o->host);
    cJSON_AddNumberToObject(j, "port", o->port);
    cJSON_AddStringToObject(j, "endpoint", o->endpoint);
    cJSON_AddStringToObject(j, "model", run->model);
    cJSON_AddNumberToObject(j, "num_prompts", (double)o->num_prompts);
    add_finite_or_inf(j, "request_rate", o->request_rate);
    add_finite_or_inf(j, "burstiness", o->burstiness);
    cJSON_AddNumberToObject(j, "max_concurrency", o->max_concurrency);
    cJSON_AddNumberToObject(j, "random_input_len", o->input_len);
    cJSON_AddNumberToObject(j, "random_output_len", o->output_len);
    cJSON_AddNumberToObject(j, "seed", (double)o->seed);
    cJSON_AddNumberToObject(j, "connections_opened", (double)run->connections_opened);
    return j;
}

/* vLLM's keys of one metric: mean_/median_/std_<key>_ms and p<word>_<key>_ms. */
static void add_dist(cJSON *o, const struct lg_summary *s, enum lg_metric m)
{
    const struct lg_dist *d = &s->dist[m];
    const char *name = loadgen_stats_metric_key(m);
    char key[80], word[40];
    snprintf(key, sizeof key, "mean_%s_ms", name);
    cJSON_AddNumberToObject(o, key, d->mean);
    snprintf(key, sizeof key, "median_%s_ms", name);
    cJSON_AddNumberToObject(o, key, d->median);
    snprintf(key, sizeof key, "std_%s_ms", name);
    cJSON_AddNumberToObject(o, key, d->std);
    for (int k = 0; k < s->n_pct; k++) {
        loadgen_stats_percentile_word(word, sizeof word, s->pct[k]);
        snprintf(key, sizeof key, "p%s_%s_ms", word, name);
        cJSON_DeleteItemFromObject(o, key);  /* a repeated percentile: one key, as a dict */
        cJSON_AddNumberToObject(o, key, d->pct[k]);
    }
}

/* vLLM's per-request arrays, in request order. A failed request has vLLM's defaults
 * (RequestFuncOutput's): TTFT and latency 0, no ITLs, output length 0, empty text,
 * and its error message. Times in seconds, as vLLM's. */
static void add_arrays(cJSON *o, const struct lg_record *rec, int64_t n)
{
    cJSON *in = cJSON_AddArrayToObject(o, "input_lens");
    cJSON *out = cJSON_AddArrayToObject(o, "output_lens");
    cJSON *ttfts = cJSON_AddArrayToObject(o, "ttfts");
    cJSON *itls = cJSON_AddArrayToObject(o, "itls");
    cJSON *lat = cJSON_AddArrayToObject(o, "latencies");
    cJSON *starts = cJSON_AddArrayToObject(o, "start_times");
    cJSON *texts = cJSON_AddArrayToObject(o, "generated_texts");
    cJSON *errs = cJSON_AddArrayToObject(o, "errors");
    for (int64_t i = 0; i < n; i++) {
        const struct lg_record *r = &rec[i];
        cJSON *itl = cJSON_CreateArray();
        for (int32_t j = 0; r->ok && j < r->n_itl; j++)
            cJSON_AddItemToArray(itl, cJSON_CreateNumber(r->itl_ms[j] / 1e3));
        cJSON_AddItemToArray(in, cJSON_CreateNumber(r->prompt_tokens));
        cJSON_AddItemToArray(out, cJSON_CreateNumber(r->ok ? r->output_tokens : 0));
        cJSON_AddItemToArray(ttfts, cJSON_CreateNumber(r->ok ? r->ttft_ms / 1e3 : 0));
        cJSON_AddItemToArray(itls, itl);
        cJSON_AddItemToArray(lat, cJSON_CreateNumber(r->ok ? r->e2el_ms / 1e3 : 0));
        cJSON_AddItemToArray(starts, cJSON_CreateNumber(r->start_s));
        cJSON_AddItemToArray(texts, cJSON_CreateString(r->ok && r->text ? r->text : ""));
        cJSON_AddItemToArray(errs, cJSON_CreateString(r->ok ? ""
                                                      : r->error ? r->error : "unknown"));
    }
}

/* Our one record per request, in ms (the file's format before the vLLM arrays). */
static void add_requests(cJSON *o, const struct lg_record *rec, int64_t n)
{
    cJSON *arr = cJSON_AddArrayToObject(o, "requests");
    for (int64_t i = 0; i < n; i++) {
        const struct lg_record *r = &rec[i];
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "index", (double)i);
        cJSON_AddBoolToObject(e, "success", r->ok);
        cJSON_AddNumberToObject(e, "start_s", r->start_s);
        if (r->ok) {
            cJSON_AddNumberToObject(e, "prompt_tokens", r->prompt_tokens);
            cJSON_AddNumberToObject(e, "output_tokens", r->output_tokens);
            cJSON_AddNumberToObject(e, "ttft_ms", r->ttft_ms);
            cJSON_AddNumberToObject(e, "e2el_ms", r->e2el_ms);
            cJSON *itl = cJSON_AddArrayToObject(e, "itl_ms");
            for (int32_t j = 0; j < r->n_itl; j++)
                cJSON_AddItemToArray(itl, cJSON_CreateNumber(r->itl_ms[j]));
        } else {
            cJSON_AddStringToObject(e, "error", r->error ? r->error : "unknown");
        }
        cJSON_AddItemToArray(arr, e);
    }
}

int loadgen_result_save(const char *path, const struct lg_opts *o,
                        const struct lg_result_run *run, const struct lg_summary *s,
                        const struct lg_record *rec, int64_t n)
{
    cJSON *j = cJSON_CreateObject();
    // vLLM's order: the setup, the traffic, the benchmark's result.
    cJSON_AddStringToObject(j, "date", run->date);
    cJSON_AddStringToObject(j, "endpoint_type", o->backend);
    cJSON_AddStringToObject(j, "backend", o->backend);
    if (o->label)
        cJSON_AddStringToObject(j, "label", o->label);
    else
        cJSON_AddNullToObject(j, "label");
    cJSON_AddStringToObject(j, "model_id", run->model);
    cJSON_AddNumberToObject(j, "num_prompts", (double)o->num_prompts);
    add_finite_or_inf(j, "request_rate", o->request_rate);
    add_finite_or_inf(j, "burstiness", o->burstiness);
    if (o->max_concurrency > 0)
        cJSON_AddNumberToObject(j, "max_concurrency", o->max_concurrency);
    else
        cJSON_AddNullToObject(j, "max_concurrency");
    cJSON_AddItemToObject(j, "config", config_json(o, run));
    cJSON_AddNumberToObject(j, "duration", s->duration_s);
    cJSON_AddNumberToObject(j, "completed", (double)s->completed);
    cJSON_AddNumberToObject(j, "failed", (double)s->failed);
    cJSON_AddNumberToObject(j, "total_input_tokens", (double)s->total_input);
    cJSON_AddNumberToObject(j, "total_output_tokens", (double)s->total_output);
    cJSON_AddNumberToObject(j, "request_throughput", s->request_throughput);
    cJSON_AddNullToObject(j, "request_goodput");  /* vLLM's null without --goodput */
    cJSON_AddNumberToObject(j, "output_throughput", s->output_throughput);
    cJSON_AddNumberToObject(j, "total_token_throughput", s->total_token_throughput);
    add_arrays(j, rec, n);
    for (int m = 0; m < LG_N_METRICS; m++)
        add_dist(j, s, (enum lg_metric)m);
    add_requests(j, rec, n);
    char *text = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    if (!text) {
        errno = ENOMEM;
        return -1;
    }
    FILE *f = fopen(path, "w");
    int err = -1;
    if (f) {
        size_t len = strlen(text);
        err = fwrite(text, 1, len, f) == len && fputc('\n', f) != EOF ? 0 : -1;
        if (fclose(f) != 0)
            err = -1;
    }
    free(text);
    return err;
}
