/*
 * loadgen_stats.c - the metrics, printed block and saved JSON of bench/loadgen (see
 * loadgen_stats.h). The definitions and print format follow `vllm bench serve`
 * (vllm/benchmarks/serve.py: calculate_metrics and the block after it) so the two
 * programs' numbers can sit in one table.
 * Thread: any.
 */
#include "loadgen_stats.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double lg_percentile(double *x, int64_t n, double p)
{
    if (n <= 0)
        return 0;
    qsort(x, (size_t)n, sizeof *x, cmp_double);
    double pos = p / 100.0 * (double)(n - 1);
    int64_t lo = (int64_t)pos;
    if (lo >= n - 1)
        return x[n - 1];
    double frac = pos - (double)lo;
    return x[lo] + (x[lo + 1] - x[lo]) * frac;
}

/* mean, median and p99 of x[0..n); sorts x. vLLM reports 0 for an empty list
 * (np.mean(x or 0)). */
static struct lg_dist dist_of(double *x, int64_t n)
{
    struct lg_dist d = {0, 0, 0};
    if (n == 0)
        return d;
    double sum = 0;
    for (int64_t i = 0; i < n; i++)
        sum += x[i];
    d.mean = sum / (double)n;
    d.median = lg_percentile(x, n, 50);
    d.p99 = lg_percentile(x, n, 99);
    return d;
}

int lg_summary_compute(struct lg_summary *out, const struct lg_record *rec, int64_t n,
                       double duration_s)
{
    int32_t max_conc = out->max_concurrency;
    memset(out, 0, sizeof *out);
    out->max_concurrency = max_conc;
    out->duration_s = duration_s;
    int64_t n_itl = 0;
    for (int64_t i = 0; i < n; i++)
        if (rec[i].ok)
            n_itl += rec[i].n_itl;
    // ttft, tpot, e2el: [completed]; itl: [sum of n_itl] (pooled, as vLLM's all_itls)
    double *ttft = malloc(sizeof(double) * (size_t)(n + 1));
    double *tpot = malloc(sizeof(double) * (size_t)(n + 1));
    double *e2el = malloc(sizeof(double) * (size_t)(n + 1));
    double *itl = malloc(sizeof(double) * (size_t)(n_itl + 1));
    int err = -1;
    if (!ttft || !tpot || !e2el || !itl)
        goto done;
    int64_t n_ok = 0, n_tpot = 0, k = 0;
    for (int64_t i = 0; i < n; i++) {
        const struct lg_record *r = &rec[i];
        if (!r->ok) {
            out->failed++;
            continue;
        }
        out->total_input += r->prompt_tokens;
        out->total_output += r->output_tokens;
        ttft[n_ok] = r->ttft_ms;
        e2el[n_ok] = r->e2el_ms;
        n_ok++;
        if (r->output_tokens > 1)
            tpot[n_tpot++] = (r->e2el_ms - r->ttft_ms) / (double)(r->output_tokens - 1);
        for (int32_t j = 0; j < r->n_itl; j++)
            itl[k++] = r->itl_ms[j];
    }
    out->completed = n_ok;
    if (duration_s > 0) {
        out->request_throughput = (double)n_ok / duration_s;
        out->output_throughput = (double)out->total_output / duration_s;
        out->total_token_throughput =
            (double)(out->total_input + out->total_output) / duration_s;
    }
    out->ttft = dist_of(ttft, n_ok);
    out->tpot = dist_of(tpot, n_tpot);
    out->itl = dist_of(itl, k);
    out->e2el = dist_of(e2el, n_ok);
    err = 0;
done:
    free(ttft);
    free(tpot);
    free(e2el);
    free(itl);
    return err;
}

/* Python's '{s:{c}^{n}}'.format(s=title, n=50, c=fill): the odd fill char goes right. */
static void print_rule(FILE *f, const char *title, char fill)
{
    int len = (int)strlen(title), left = (50 - len) / 2, right = 50 - len - left;
    for (int i = 0; i < left; i++)
        fputc(fill, f);
    fputs(title, f);
    for (int i = 0; i < right; i++)
        fputc(fill, f);
    fputc('\n', f);
}

static void print_dist(FILE *f, const char *title, const char *name,
                       const struct lg_dist *d)
{
    char label[64];
    print_rule(f, title, '-');
    snprintf(label, sizeof label, "Mean %s (ms):", name);
    fprintf(f, "%-40s %-10.2f\n", label, d->mean);
    snprintf(label, sizeof label, "Median %s (ms):", name);
    fprintf(f, "%-40s %-10.2f\n", label, d->median);
    snprintf(label, sizeof label, "P99 %s (ms):", name);
    fprintf(f, "%-40s %-10.2f\n", label, d->p99);
}

void lg_summary_print(FILE *f, const struct lg_summary *s)
{
    print_rule(f, " Serving Benchmark Result ", '=');
    fprintf(f, "%-40s %-10lld\n", "Successful requests:", (long long)s->completed);
    fprintf(f, "%-40s %-10lld\n", "Failed requests:", (long long)s->failed);
    if (s->max_concurrency > 0)
        fprintf(f, "%-40s %-10d\n", "Maximum request concurrency:", s->max_concurrency);
    fprintf(f, "%-40s %-10.2f\n", "Benchmark duration (s):", s->duration_s);
    fprintf(f, "%-40s %-10lld\n", "Total input tokens:", (long long)s->total_input);
    fprintf(f, "%-40s %-10lld\n", "Total generated tokens:", (long long)s->total_output);
    fprintf(f, "%-40s %-10.2f\n", "Request throughput (req/s):", s->request_throughput);
    fprintf(f, "%-40s %-10.2f\n", "Output token throughput (tok/s):", s->output_throughput);
    fprintf(f, "%-40s %-10.2f\n", "Total Token throughput (tok/s):",
            s->total_token_throughput);
    print_dist(f, "Time to First Token", "TTFT", &s->ttft);
    print_dist(f, "Time per Output Token (excl. 1st token)", "TPOT", &s->tpot);
    print_dist(f, "Inter-token Latency", "ITL", &s->itl);
    print_dist(f, "End-to-end Latency", "E2EL", &s->e2el);
    print_rule(f, "", '=');
    fflush(f);
}

static void add_dist(cJSON *o, const char *name, const struct lg_dist *d)
{
    char key[48];
    snprintf(key, sizeof key, "mean_%s_ms", name);
    cJSON_AddNumberToObject(o, key, d->mean);
    snprintf(key, sizeof key, "median_%s_ms", name);
    cJSON_AddNumberToObject(o, key, d->median);
    snprintf(key, sizeof key, "p99_%s_ms", name);
    cJSON_AddNumberToObject(o, key, d->p99);
}

int lg_save_json(const char *path, const struct lg_summary *s, const char *config_json,
                 const struct lg_record *rec, int64_t n)
{
    // Top-level keys are those of vLLM's --save-result file where one exists.
    cJSON *o = cJSON_CreateObject();
    if (config_json) {
        cJSON *cfg = cJSON_Parse(config_json);
        if (cfg)
            cJSON_AddItemToObject(o, "config", cfg);
    }
    cJSON_AddNumberToObject(o, "duration", s->duration_s);
    cJSON_AddNumberToObject(o, "completed", (double)s->completed);
    cJSON_AddNumberToObject(o, "failed", (double)s->failed);
    cJSON_AddNumberToObject(o, "total_input_tokens", (double)s->total_input);
    cJSON_AddNumberToObject(o, "total_output_tokens", (double)s->total_output);
    cJSON_AddNumberToObject(o, "request_throughput", s->request_throughput);
    cJSON_AddNumberToObject(o, "output_throughput", s->output_throughput);
    cJSON_AddNumberToObject(o, "total_token_throughput", s->total_token_throughput);
    if (s->max_concurrency > 0)
        cJSON_AddNumberToObject(o, "max_concurrency", s->max_concurrency);
    add_dist(o, "ttft", &s->ttft);
    add_dist(o, "tpot", &s->tpot);
    add_dist(o, "itl", &s->itl);
    add_dist(o, "e2el", &s->e2el);
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
    char *text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
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
