/*
 * api_admin.c - the admin endpoints: GET /health, GET /v1/models[/{id}] and GET
 * /metrics (Prometheus' text format, with vLLM's series names under h2oserve:).
 *
 * Health and metrics answer without the API key (router.c routes them before the
 * /v1 check), as vLLM's do, so that probes and scrapers need no secret; the model
 * list is under /v1 and checked like the rest.
 * Owns: nothing beyond one request; the metrics label is made on first use and
 * kept in struct srv. Reads the engine's state and counters, never waits for them.
 * Thread: loop.
 */
#include "api_admin.h"

#include "batchrun.h"
#include "reply.h"
#include "srv.h"

#include "util.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static cJSON *model_object(const struct srv *s)
{
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", s->model_id);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", (double)s->started);
    cJSON_AddStringToObject(m, "owned_by", "h2oserve");
    cJSON_AddNumberToObject(m, "max_model_len", s->max_model_len);
    /* Lossy storage choices are shown to every client: int8 changes the outputs. */
    if (s->model.kv_dtype) cJSON_AddStringToObject(m, "kv_cache_dtype", s->model.kv_dtype);
    return m;
}

void api_admin_health(struct exch *x)
{
    struct srv *s = x->c->s;
    enum engine_state st = s->bridge.eng ? engine_state(s->bridge.eng) : ENGINE_STOPPED;
    const char *what = s->draining ? "draining" : engine_state_name(st);
    char body[256];
    int n = snprintf(body, sizeof body, "{\"status\":\"%s\"}", what);
    int code = st == ENGINE_READY && !s->draining ? 200 : 503;
    conn_respond(x, code, "application/json", body, (size_t)n, NULL);
}

void api_admin_models(struct exch *x, const char *id)
{
    struct srv *s = x->c->s;
    if (id) {
        if (strcmp(id, s->model_id) != 0) {
            reply_error(x, 404, "model_not_found", "The model '%s' does not exist", id);
            return;
        }
        reply_json(x, model_object(s));
        return;
    }
    cJSON *list = cJSON_CreateObject();
    cJSON_AddStringToObject(list, "object", "list");
    cJSON *data = cJSON_AddArrayToObject(list, "data");
    cJSON_AddItemToArray(data, model_object(s));
    reply_json(x, list);
}

static void appendf(char **out, size_t *len, size_t *cap, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void appendf(char **out, size_t *len, size_t *cap, const char *fmt, ...)
{
    va_list ap;
    for (;;) {
        va_start(ap, fmt);
        int n = vsnprintf(*out + *len, *cap - *len, fmt, ap);
        va_end(ap);
        if (n >= 0 && (size_t)n < *cap - *len) {
            *len += (size_t)n;
            return;
        }
        *cap = *cap * 2 + (size_t)(n > 0 ? n : 256);
        *out = xrealloc(*out, *cap);
    }
}

/* `model_name="ID"` with the id escaped as the text format wants (backslash, double
 * quote and newline), the label every series carries, as vLLM's do. Heap string. */
static char *model_label(const char *id)
{
    const size_t n = strlen(id);
    char *out = xmalloc(2 * n + sizeof "model_name=\"\""), *o = out;
    o += sprintf(o, "model_name=\"");
    for (const char *c = id; *c; c++) {
        if (*c == '\\' || *c == '"') *o++ = '\\';
        if (*c == '\n') {
            *o++ = '\\';
            *o++ = 'n';
            continue;
        }
        *o++ = *c;
    }
    sprintf(o, "\"");
    return out;
}

static void put_hist(char **out, size_t *len, size_t *cap, const char *label, const char *name,
                     const char *help, const struct metrics_hist *h)
{
    appendf(out, len, cap, "# HELP h2oserve:%s %s\n# TYPE h2oserve:%s histogram\n", name, help,
            name);
    int64_t cum = 0;
    for (int i = 0; i < METRICS_HIST_BUCKETS; i++) {
        cum += h->bucket[i];
        appendf(out, len, cap, "h2oserve:%s_bucket{le=\"%g\",%s} %lld\n", name,
                metrics_hist_bounds[i], label, (long long)cum);
    }
    appendf(out, len, cap, "h2oserve:%s_bucket{le=\"+Inf\",%s} %lld\n", name, label,
            (long long)h->count);
    appendf(out, len, cap, "h2oserve:%s_sum{%s} %.6f\nh2oserve:%s_count{%s} %lld\n", name, label,
            h->sum, name, label, (long long)h->count);
}

void api_admin_metrics(struct exch *x)
{
    struct srv *s = x->c->s;
    struct sched_stats st = {0};
    if (s->bridge.eng) engine_get_stats(s->bridge.eng, &st);
    size_t len = 0, cap = 8192;
    char *out = xmalloc(cap);
    out[0] = '\0';
    if (!s->metrics_label) s->metrics_label = model_label(s->model_id); /* once */
    const char *label = s->metrics_label;
#define GAUGE(name, help, v)                                                                    \
    appendf(&out, &len, &cap, "# HELP h2oserve:" name " " help "\n# TYPE h2oserve:" name      \
                              " gauge\nh2oserve:" name "{%s} %lld\n", label, (long long)(v))
#define COUNTER(name, help, v)                                                                  \
    appendf(&out, &len, &cap, "# HELP h2oserve:" name " " help "\n# TYPE h2oserve:" name      \
                              " counter\nh2oserve:" name "{%s} %lld\n", label, (long long)(v))
    GAUGE("num_requests_running", "Engine requests admitted and not finished.", st.n_running);
    GAUGE("num_requests_waiting", "Engine requests waiting for admission.", st.n_waiting);
    GAUGE("num_sequences_waiting",
          "Sequences of completion requests not yet seen admitted (the --max-queue count).",
          bridge_waiting(&s->bridge, REQ_PRIO_INTERACTIVE));
    GAUGE("num_sequences_waiting_peak", "The most num_sequences_waiting has been.",
          s->bridge.waiting_peak);
    COUNTER("requests_rejected_queue_full_total",
            "Completion requests refused with 429 because of --max-queue.",
            s->m.rejected_queue_full);
    GAUGE("kv_cache_blocks_used", "KV blocks held by sequences.", st.blocks_used);
    GAUGE("kv_cache_blocks_total", "KV blocks in the pool.", st.blocks_total);
    appendf(&out, &len, &cap,
            "# HELP h2oserve:kv_cache_usage_perc KV blocks in use, 0..1.\n"
            "# TYPE h2oserve:kv_cache_usage_perc gauge\nh2oserve:kv_cache_usage_perc{%s} %.6f\n",
            label, st.blocks_total ? (double)st.blocks_used / st.blocks_total : 0.0);
    COUNTER("kv_tokens_evicted_total", "Tokens evicted by the KV policy, over layers and heads.",
            st.tokens_evicted);
    COUNTER("prompt_tokens_total", "Prompt tokens processed.", st.prompt_tokens);
    COUNTER("generation_tokens_total", "Tokens generated.", st.generation_tokens);
    appendf(&out, &len, &cap, "# HELP h2oserve:request_success_total Finished sequences by "
                              "reason.\n# TYPE h2oserve:request_success_total counter\n");
    static const char *const reasons[] = {"none", "stop", "length", "cancelled", "error"};
    for (int i = 1; i < 5; i++)
        appendf(&out, &len, &cap,
                "h2oserve:request_success_total{finished_reason=\"%s\",%s} %lld\n", reasons[i],
                label, (long long)(s->m.finished[i] + s->bridge.orphan_finished[i]));
    COUNTER("http_requests_total", "HTTP requests received.", s->m.requests_total);
    struct batchrun_stats bs;
    batchrun_stats(s->br, &bs);
    GAUGE("batches_running", "Batches in progress run here (Batches API).", bs.batches);
    GAUGE("batch_requests_in_flight", "Batch-job engine requests in flight.", bs.requests);
    COUNTER("batch_claims_total", "Claims of batch requests that got some.", bs.claims);
    COUNTER("batch_requests_claimed_total", "Batch requests claimed (leased) here.",
            bs.lines_claimed);
    COUNTER("batch_commits_total", "Job store calls that recorded batch results.", bs.commits);
    COUNTER("batch_results_total", "Batch results recorded here (output and error lines).",
            bs.results);
    COUNTER("batch_results_refused_total",
            "Batch results another replica had recorded first (or that came after the "
            "batch ended).",
            bs.refused);
    COUNTER("batch_store_jobs_total", "Job store jobs the batch runner ran.", bs.store_jobs);
    COUNTER("batch_store_errors_total", "Batch runner store jobs that failed (retried).",
            bs.store_errors);
    appendf(&out, &len, &cap,
            "# HELP h2oserve:batch_store_seconds_total Time the batch runner's store jobs "
            "took.\n# TYPE h2oserve:batch_store_seconds_total counter\n"
            "h2oserve:batch_store_seconds_total{%s} %.6f\n",
            label, bs.store_seconds);
#undef GAUGE
#undef COUNTER
    put_hist(&out, &len, &cap, label, "time_to_first_token_seconds", "Time to the first token.",
             &s->m.ttft);
    put_hist(&out, &len, &cap, label, "inter_token_latency_seconds", "Time between tokens.",
             &s->m.itl);
    put_hist(&out, &len, &cap, label, "e2e_request_latency_seconds", "Request latency.",
             &s->m.e2e);
    put_hist(&out, &len, &cap, label, "request_queue_time_seconds",
             "Time waiting for admission.", &s->m.queue);
    conn_respond(x, 200, "text/plain; version=0.0.4", out, len, NULL);
    free(out);
}
