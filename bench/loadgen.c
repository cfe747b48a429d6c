/*
 * loadgen.c - an HTTP load generator for a running server: random token-id prompts
 * sent to POST /v1/completions (--endpoint) as streams, Poisson or gamma arrivals
 * (loadgen_arrivals.c) and/or a concurrency cap, and the metrics and printed block of
 * `vllm bench serve` (loadgen_stats.c).
 *
 * Owns: the requests (their bodies, SSE line buffers and ITL arrays) and the loop.
 * Flow: GET /v1/models (the model's name unless --model, and a check that the server
 * answers at all), then the benchmark: an arrival timer releases requests at their
 * precomputed times, and each release or completion dispatches as many
 * released requests as the concurrency cap allows, in order. The loop ends when the
 * last request is done; every request ends (complete, HTTP error, connection error
 * or --timeout), so the program never hangs and exits 1 if any failed.
 * Thread: main only; one libuv loop.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>
#include <uv.h>

#include "loadgen_arrivals.h"
#include "loadgen_http.h"
#include "loadgen_opts.h"
#include "loadgen_result.h"
#include "loadgen_rng.h"
#include "loadgen_stats.h"

struct lg_req {
    struct lg_call call;     /* call.user = this */
    struct lg_bench *b;
    char *body;
    size_t body_len;
    double arrival_s;        /* release time from the start (loadgen_arrivals.c) */
    uint64_t t_send, t_first, t_last;
    double *itl_ms;          /* [n_itl], grown as chunks come */
    int32_t n_itl, cap_itl, n_chunks;
    int32_t usage_prompt, usage_completion;  /* -1 until the usage chunk */
    bool done_seen;          /* data: [DONE] */
    char *line;              /* the SSE line (or error body) being assembled */
    size_t line_len, line_cap;
    char *error;
    char *text;              /* the choices' text so far, for generated_texts */
    size_t text_len, text_cap;
    struct lg_record rec;
};

struct lg_bench {
    struct lg_opts o;
    uv_loop_t *loop;
    struct lg_client *cl;
    uv_timer_t arrivals;
    struct lg_req *reqs;     /* [num_prompts] */
    int64_t n_released, n_sent, n_done, n_in_flight;
    uint64_t t_start, t_end;
    struct lg_call probe;
    char probe_path[300], path[520];
    char *probe_body;        /* GET /v1/models's answer */
    size_t probe_len, probe_cap;
    char *model;             /* owned */
    bool probe_failed;
    int64_t connects;        /* connections the benchmark opened (keep-alive check) */
};

static char *xstrdup(const char *msg)
{
    char *s = strdup(msg);
    if (!s)
        abort();
    return s;
}

static void append(char **buf, size_t *len, size_t *cap, const char *data, size_t n)
{
    if (*len + n + 1 > *cap) {
        size_t nc = (*cap ? *cap * 2 : 256);
        while (nc < *len + n + 1)
            nc *= 2;
        char *p = realloc(*buf, nc);
        if (!p)
            abort();
        *buf = p;
        *cap = nc;
    }
    memcpy(*buf + *len, data, n);
    *len += n;
    (*buf)[*len] = '\0';
}

static void req_set_error(struct lg_req *r, const char *msg)
{
    if (!r->error)
        r->error = xstrdup(msg);
}

/* One SSE event's data. A chunk with a non-empty "choices" is a token chunk (timed,
 * as vLLM times them); the usage chunk has "choices": [] and the counts. */
static void req_on_event(struct lg_req *r, const char *data, uint64_t t)
{
    if (strcmp(data, "[DONE]") == 0) {
        r->done_seen = true;
        return;
    }
    cJSON *j = cJSON_Parse(data);
    if (!j) {
        req_set_error(r, "a stream event that is not JSON");
        return;
    }
    cJSON *e = cJSON_GetObjectItem(j, "error");
    if (e) {
        cJSON *m = cJSON_GetObjectItem(e, "message");
        char msg[200];
        snprintf(msg, sizeof msg, "error event: %s",
                 cJSON_IsString(m) ? m->valuestring : "(no message)");
        req_set_error(r, msg);
    }
    cJSON *ch = cJSON_GetObjectItem(j, "choices");
    if (cJSON_IsArray(ch) && cJSON_GetArraySize(ch) > 0) {
        cJSON *text = cJSON_GetObjectItem(cJSON_GetArrayItem(ch, 0), "text");
        if (cJSON_IsString(text))
            append(&r->text, &r->text_len, &r->text_cap, text->valuestring,
                   strlen(text->valuestring));
        if (r->n_chunks == 0) {
            r->t_first = t;
        } else {
            if (r->n_itl == r->cap_itl) {
                r->cap_itl = r->cap_itl ? 2 * r->cap_itl : 16;
                r->itl_ms = realloc(r->itl_ms, sizeof(double) * (size_t)r->cap_itl);
                if (!r->itl_ms)
                    abort();
            }
            r->itl_ms[r->n_itl++] = (double)(t - r->t_last) / 1e6;
        }
        r->t_last = t;
        r->n_chunks++;
    }
    cJSON *u = cJSON_GetObjectItem(j, "usage");
    if (cJSON_IsObject(u)) {
        cJSON *p = cJSON_GetObjectItem(u, "prompt_tokens");
        cJSON *c = cJSON_GetObjectItem(u, "completion_tokens");
        if (cJSON_IsNumber(p))
            r->usage_prompt = p->valueint;
        if (cJSON_IsNumber(c))
            r->usage_completion = c->valueint;
    }
    cJSON_Delete(j);
}

static void req_on_body(struct lg_call *call, const char *data, size_t len, uint64_t t)
{
    struct lg_req *r = call->user;
    if (call->status != 200) {  /* keep the error body (bounded) for the message */
        if (r->line_len < 4096)
            append(&r->line, &r->line_len, &r->line_cap, data, len);
        return;
    }
    // SSE: events are "data: ...\n\n"; split on '\n', keep a partial line for later.
    size_t start = 0;
    for (size_t i = 0; i < len; i++) {
        if (data[i] != '\n')
            continue;
        append(&r->line, &r->line_len, &r->line_cap, data + start, i - start);
        start = i + 1;
        char *s = r->line;
        if (r->line_len && s[r->line_len - 1] == '\r')
            s[--r->line_len] = '\0';
        if (strncmp(s, "data:", 5) == 0)
            req_on_event(r, s + 5 + (s[5] == ' '), t);
        r->line_len = 0;
    }
    if (start < len)
        append(&r->line, &r->line_len, &r->line_cap, data + start, len - start);
}

static void bench_dispatch(struct lg_bench *b);

static void bench_finish(struct lg_bench *b)
{
    b->t_end = uv_hrtime();
    uv_timer_stop(&b->arrivals);
    uv_close((uv_handle_t *)&b->arrivals, NULL);
    b->connects = loadgen_http_n_connects(b->cl);  /* the probe's included (reused) */
    loadgen_http_destroy(b->cl);
    b->cl = NULL;
}

static void req_on_done(struct lg_call *call)
{
    struct lg_req *r = call->user;
    struct lg_bench *b = r->b;
    char msg[300];
    if (call->err[0]) {
        req_set_error(r, call->err);
    } else if (call->status != 200) {
        cJSON *j = r->line ? cJSON_Parse(r->line) : NULL;
        cJSON *m = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "error"), "message");
        snprintf(msg, sizeof msg, "HTTP %d: %s", call->status,
                 cJSON_IsString(m) ? m->valuestring : "(no error message)");
        cJSON_Delete(j);
        req_set_error(r, msg);
    } else if (!r->done_seen) {
        req_set_error(r, "the stream ended without data: [DONE]");
    } else if (r->n_chunks == 0) {
        req_set_error(r, "the stream carried no token chunk");
    }
    struct lg_record *rec = &r->rec;
    rec->ok = !r->error;
    rec->error = r->error;
    rec->start_s = (double)(r->t_send - b->t_start) / 1e9;
    rec->prompt_tokens = b->o.input_len;
    if (rec->ok) {
        rec->text = r->text;
        if (r->usage_prompt >= 0)
            rec->prompt_tokens = r->usage_prompt;
        rec->output_tokens = r->usage_completion >= 0 ? r->usage_completion : r->n_chunks;
        rec->ttft_ms = (double)(r->t_first - r->t_send) / 1e6;
        rec->e2el_ms = (double)(r->t_last - r->t_send) / 1e6;
        rec->itl_ms = r->itl_ms;
        rec->n_itl = r->n_itl;
    }
    free(r->line);
    r->line = NULL;
    free(r->body);
    r->body = NULL;
    b->n_done++;
    b->n_in_flight--;
    if (b->n_done == b->o.num_prompts)
        bench_finish(b);
    else
        bench_dispatch(b);
}

static void bench_dispatch(struct lg_bench *b)
{
    while (b->n_sent < b->n_released
           && (b->o.max_concurrency == 0 || b->n_in_flight < b->o.max_concurrency)) {
        struct lg_req *r = &b->reqs[b->n_sent++];
        b->n_in_flight++;
        r->t_send = uv_hrtime();
        loadgen_http_submit(b->cl, &r->call);
    }
}

/* Release every request whose arrival time has come, then sleep until the next. */
static void on_arrivals(uv_timer_t *t)
{
    struct lg_bench *b = t->data;
    double now_s = (double)(uv_hrtime() - b->t_start) / 1e9;
    while (b->n_released < b->o.num_prompts && b->reqs[b->n_released].arrival_s <= now_s)
        b->n_released++;
    bench_dispatch(b);
    if (b->n_released < b->o.num_prompts) {
        double wait_ms = (b->reqs[b->n_released].arrival_s - now_s) * 1e3;
        uv_timer_start(&b->arrivals, on_arrivals, (uint64_t)ceil(wait_ms), 0);
    }
}

/* Build every request body before the clock starts, from --seed: prompts of
 * input_len random ids (OPT's specials 0-3 left out) and the arrival schedule
 * (loadgen_arrivals.c). The two draw from separate streams, so changing
 * --request-rate or --burstiness keeps the prompts of a seed. */
static int bench_prepare(struct lg_bench *b)
{
    const struct lg_opts *o = &b->o;
    uint64_t rng = o->seed, arrival_rng = o->seed ^ 0xa5a5a5a5a5a5a5a5ull;
    b->reqs = calloc((size_t)o->num_prompts, sizeof *b->reqs);
    int *ids = malloc(sizeof(int) * (size_t)o->input_len);
    double *arrivals = malloc(sizeof(double) * (size_t)(o->num_prompts + 1));
    if (!b->reqs || !ids || !arrivals) {
        free(ids);
        free(arrivals);
        return -1;
    }
    loadgen_arrivals_fill(arrivals, o->num_prompts, o->request_rate, o->burstiness,
                          &arrival_rng);
    int err = 0;
    for (int64_t i = 0; i < o->num_prompts && !err; i++) {
        struct lg_req *r = &b->reqs[i];
        for (int32_t k = 0; k < o->input_len; k++)
            ids[k] = 4 + (int)(loadgen_rng_next(&rng) % (uint64_t)(o->vocab - 4));
        r->arrival_s = arrivals[i];
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "model", b->model);
        cJSON_AddItemToObject(j, "prompt", cJSON_CreateIntArray(ids, o->input_len));
        cJSON_AddNumberToObject(j, "max_tokens", o->output_len);
        cJSON_AddNumberToObject(j, "temperature", 0);
        cJSON_AddBoolToObject(j, "ignore_eos", true);
        cJSON_AddBoolToObject(j, "stream", true);
        cJSON *so = cJSON_AddObjectToObject(j, "stream_options");
        cJSON_AddBoolToObject(so, "include_usage", true);
        r->body = cJSON_PrintUnformatted(j);
        cJSON_Delete(j);
        if (!r->body) {
            err = -1;
            break;
        }
        r->body_len = strlen(r->body);
        r->b = b;
        r->usage_prompt = r->usage_completion = -1;
        r->call = (struct lg_call){
            .method = "POST", .path = b->path, .body = r->body, .body_len = r->body_len,
            .timeout_ms = (uint64_t)(o->timeout_s * 1e3), .on_body = req_on_body,
            .on_done = req_on_done, .user = r};
    }
    free(ids);
    free(arrivals);
    return err;
}

static void bench_start(struct lg_bench *b)
{
    if (bench_prepare(b) != 0) {
        fprintf(stderr, "loadgen: out of memory\n");
        exit(1);
    }
    char conc[32] = "unlimited";
    if (b->o.max_concurrency)
        snprintf(conc, sizeof conc, "%d", b->o.max_concurrency);
    char rate[80] = "rate inf (all at once)";
    if (isfinite(b->o.request_rate))
        snprintf(rate, sizeof rate, "rate %g req/s, burstiness %g (%s)", b->o.request_rate,
                 b->o.burstiness, b->o.burstiness == 1.0 ? "Poisson"
                                  : isinf(b->o.burstiness) ? "constant gaps" : "gamma");
    fprintf(stderr, "loadgen: model %s, %lld prompts of %d tokens, %d output tokens, "
            "%s, max concurrency %s\n", b->model, (long long)b->o.num_prompts,
            b->o.input_len, b->o.output_len, rate, conc);
    uv_timer_init(b->loop, &b->arrivals);
    b->arrivals.data = b;
    b->t_start = uv_hrtime();
    if (b->o.num_prompts == 0) {
        bench_finish(b);
        return;
    }
    on_arrivals(&b->arrivals);
}

static void probe_on_body(struct lg_call *call, const char *data, size_t len, uint64_t t)
{
    (void)t;
    struct lg_bench *b = call->user;
    if (b->probe_len < (1 << 20))
        append(&b->probe_body, &b->probe_len, &b->probe_cap, data, len);
}

/* GET /v1/models answered: pick the model, or give up with a clear message. */
static void probe_on_done(struct lg_call *call)
{
    struct lg_bench *b = call->user;
    const char *why = NULL;
    char msg[400];
    cJSON *j = NULL;
    if (call->err[0]) {
        why = call->err;
    } else if (call->status != 200 && !b->o.model) {
        snprintf(msg, sizeof msg, "GET %s answered HTTP %d", b->probe_path, call->status);
        why = msg;
    } else if (!b->o.model) {
        j = cJSON_Parse(b->probe_body ? b->probe_body : "");
        cJSON *id = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "data"), 0),
                                        "id");
        if (cJSON_IsString(id))
            b->model = xstrdup(id->valuestring);
        else
            why = "GET /v1/models listed no model (pass --model)";
    }
    cJSON_Delete(j);
    free(b->probe_body);
    b->probe_body = NULL;
    if (why) {
        fprintf(stderr, "loadgen: server at %s:%d: %s\n", b->o.host, b->o.port, why);
        b->probe_failed = true;
        loadgen_http_destroy(b->cl);
        b->cl = NULL;
        return;
    }
    bench_start(b);
}

/* Print the failures' distinct messages (at most 10) so a failed run says why. */
static void print_errors(const struct lg_bench *b)
{
    const char *seen[10];
    int n_seen = 0;
    for (int64_t i = 0; i < b->o.num_prompts && n_seen < 10; i++) {
        const char *e = b->reqs[i].rec.error;
        if (!e)
            continue;
        bool dup = false;
        for (int k = 0; k < n_seen && !dup; k++)
            dup = strcmp(seen[k], e) == 0;
        if (!dup) {
            seen[n_seen++] = e;
            fprintf(stderr, "loadgen: request %lld failed: %s\n", (long long)i, e);
        }
    }
}

/* --save-result: the file vLLM would write, where it would write it. */
static int save_result(const struct lg_bench *b, const struct lg_summary *s,
                       const struct lg_record *recs)
{
    char date[32], path[4096];
    time_t now = time(NULL);
    struct tm tm;
    if (!localtime_r(&now, &tm) || !strftime(date, sizeof date, "%Y%m%d-%H%M%S", &tm))
        snprintf(date, sizeof date, "00000000-000000");
    struct lg_result_run run = {.model = b->model, .date = date,
                                .connections_opened = b->connects};
    if (loadgen_result_path(path, sizeof path, &b->o, &run) != 0) {
        fprintf(stderr, "loadgen: cannot make the result file's path in %s: %s\n",
                b->o.result_dir ? b->o.result_dir : ".", strerror(errno));
        return -1;
    }
    if (loadgen_result_save(path, &b->o, &run, s, recs, b->o.num_prompts) != 0) {
        fprintf(stderr, "loadgen: cannot write %s: %s\n", path, strerror(errno));
        return -1;
    }
    fprintf(stderr, "loadgen: saved %s\n", path);
    return 0;
}

int main(int argc, char **argv)
{
    struct lg_bench b = {0};
    int perr = loadgen_opts_parse(&b.o, argc, argv);
    if (perr != 0)
        return perr < 0 ? 2 : 0;
    b.loop = uv_default_loop();
    char headers[600] = "", err[300];
    if (b.o.api_key)
        snprintf(headers, sizeof headers, "Authorization: Bearer %s\r\n", b.o.api_key);
    b.cl = loadgen_http_create(b.loop, b.o.host, b.o.port, headers, err, sizeof err);
    if (!b.cl) {
        fprintf(stderr, "loadgen: %s\n", err);
        return 1;
    }
    if (b.o.model)
        b.model = xstrdup(b.o.model);
    snprintf(b.probe_path, sizeof b.probe_path, "%s/v1/models", b.o.prefix);
    // vLLM's api_url is the base URL followed by --endpoint; the model list is always
    // the base URL's /v1/models.
    snprintf(b.path, sizeof b.path, "%s%s", b.o.prefix, b.o.endpoint);
    // The probe has a short limit of its own: a server that does not answer a model
    // list within it will not carry a benchmark either.
    double probe_s = b.o.timeout_s < 30 ? b.o.timeout_s : 30;
    b.probe = (struct lg_call){.method = "GET", .path = b.probe_path,
                               .timeout_ms = (uint64_t)(probe_s * 1e3),
                               .on_body = probe_on_body, .on_done = probe_on_done,
                               .user = &b};
    loadgen_http_submit(b.cl, &b.probe);
    uv_run(b.loop, UV_RUN_DEFAULT);
    int rc = 1;
    if (b.probe_failed)
        goto out;
    struct lg_record *recs = malloc(sizeof *recs * (size_t)(b.o.num_prompts + 1));
    if (!recs)
        goto out;
    for (int64_t i = 0; i < b.o.num_prompts; i++)
        recs[i] = b.reqs[i].rec;
    struct lg_summary s = {.max_concurrency = b.o.max_concurrency, .metrics = b.o.metrics,
                           .n_pct = b.o.n_pct};
    memcpy(s.pct, b.o.pct, sizeof s.pct);
    if (loadgen_stats_summarize(&s, recs, b.o.num_prompts,
                                (double)(b.t_end - b.t_start) / 1e9)) {
        free(recs);
        goto out;
    }
    print_errors(&b);
    loadgen_stats_print(stdout, &s);
    rc = s.failed ? 1 : 0;
    if (b.o.save_result && save_result(&b, &s, recs) != 0)
        rc = 1;
    free(recs);
out:
    for (int64_t i = 0; b.reqs && i < b.o.num_prompts; i++) {
        free(b.reqs[i].itl_ms);
        free(b.reqs[i].error);
        free(b.reqs[i].body);
        free(b.reqs[i].line);
        free(b.reqs[i].text);
    }
    free(b.reqs);
    free(b.model);
    uv_loop_close(b.loop);
    return rc;
}
