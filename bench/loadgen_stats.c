/*
 * loadgen_stats.c - the metrics and printed block of bench/loadgen (see
 * loadgen_stats.h). The definitions and print format follow `vllm bench serve`
 * (vllm/benchmarks/serve.py: calculate_metrics and the block after it) so the two
 * programs' numbers can sit in one table.
 * Thread: any.
 */
#include "loadgen_stats.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double loadgen_stats_percentile(double *x, int64_t n, double p)
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

const char *loadgen_stats_metric_key(enum lg_metric m)
{
    static const char *const keys[LG_N_METRICS] = {"ttft", "tpot", "itl", "e2el"};
    return m >= 0 && m < LG_N_METRICS ? keys[m] : "?";
}

const char *loadgen_stats_metric_label(enum lg_metric m)
{
    static const char *const labels[LG_N_METRICS] = {"TTFT", "TPOT", "ITL", "E2EL"};
    return m >= 0 && m < LG_N_METRICS ? labels[m] : "?";
}

/* The distribution of x[0..n) at the summary's percentiles; sorts x. */
static struct lg_dist dist_of(double *x, int64_t n, const struct lg_summary *s)
{
    struct lg_dist d;
    memset(&d, 0, sizeof d);
    if (n == 0)
        return d;
    double sum = 0, dev2 = 0;
    for (int64_t i = 0; i < n; i++)
        sum += x[i];
    d.mean = sum / (double)n;
    for (int64_t i = 0; i < n; i++)  /* two passes: no cancellation of big means */
        dev2 += (x[i] - d.mean) * (x[i] - d.mean);
    d.std = sqrt(dev2 / (double)n);
    d.median = loadgen_stats_percentile(x, n, 50);
    for (int k = 0; k < s->n_pct; k++)
        d.pct[k] = loadgen_stats_percentile(x, n, s->pct[k]);
    return d;
}

void loadgen_stats_py_float(char *buf, size_t len, double x)
{
    if (isnan(x) || isinf(x)) {
        snprintf(buf, len, "%s", isnan(x) ? "nan" : x > 0 ? "inf" : "-inf");
        return;
    }
    // repr's digits are the fewest that read back as x.
    int prec = 1;
    for (; prec < 17; prec++) {
        snprintf(buf, len, "%.*e", prec - 1, x);
        if (strtod(buf, NULL) == x)
            break;
    }
    char sci[40];
    snprintf(sci, sizeof sci, "%.*e", prec - 1, x);
    int exp10 = atoi(strchr(sci, 'e') + 1);
    // repr writes exponents -4..15 in positional form, always with a fraction.
    if (exp10 < -4 || exp10 >= 16) {
        snprintf(buf, len, "%s", sci);
    } else if (exp10 >= prec - 1) {
        snprintf(buf, len, "%.0f.0", x);  /* an integer: all its digits before the point */
    } else {
        snprintf(buf, len, "%.*f", prec - 1 - exp10, x);
    }
}

void loadgen_stats_percentile_word(char *buf, size_t len, double p)
{
    if (p == floor(p) && fabs(p) < 1e15)
        snprintf(buf, len, "%lld", (long long)p);
    else
        loadgen_stats_py_float(buf, len, p);
}

int loadgen_stats_summarize(struct lg_summary *out, const struct lg_record *rec, int64_t n,
                            double duration_s)
{
    struct lg_summary in = *out;
    memset(out, 0, sizeof *out);
    out->max_concurrency = in.max_concurrency;
    out->metrics = in.metrics;
    out->n_pct = in.n_pct < LG_MAX_PERCENTILES ? in.n_pct : LG_MAX_PERCENTILES;
    memcpy(out->pct, in.pct, sizeof out->pct);
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
    out->dist[LG_TTFT] = dist_of(ttft, n_ok, out);
    out->dist[LG_TPOT] = dist_of(tpot, n_tpot, out);
    out->dist[LG_ITL] = dist_of(itl, k, out);
    out->dist[LG_E2EL] = dist_of(e2el, n_ok, out);
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

static void print_dist(FILE *f, const struct lg_summary *s, enum lg_metric m)
{
    static const char *const titles[LG_N_METRICS] = {
        "Time to First Token", "Time per Output Token (excl. 1st token)",
        "Inter-token Latency", "End-to-end Latency"};
    const struct lg_dist *d = &s->dist[m];
    const char *name = loadgen_stats_metric_label(m);
    char label[64], word[40];
    print_rule(f, titles[m], '-');
    snprintf(label, sizeof label, "Mean %s (ms):", name);
    fprintf(f, "%-40s %-10.2f\n", label, d->mean);
    snprintf(label, sizeof label, "Median %s (ms):", name);
    fprintf(f, "%-40s %-10.2f\n", label, d->median);
    for (int k = 0; k < s->n_pct; k++) {
        loadgen_stats_percentile_word(word, sizeof word, s->pct[k]);
        snprintf(label, sizeof label, "P%s %s (ms):", word, name);
        fprintf(f, "%-40s %-10.2f\n", label, d->pct[k]);
    }
}

void loadgen_stats_print(FILE *f, const struct lg_summary *s)
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
    // vLLM prints the sections in this order whatever the order of the selection.
    for (int m = 0; m < LG_N_METRICS; m++)
        if (s->metrics & (1u << m))
            print_dist(f, s, (enum lg_metric)m);
    print_rule(f, "", '=');
    fflush(f);
}
