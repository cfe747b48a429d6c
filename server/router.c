/*
 * router.c - what each request gets: authentication, CORS, the routes, the admin
 * endpoints (health, models, metrics) and the glue between POST /v1/completions and
 * the engine.
 *
 * A completion request becomes one engine request per prompt (ids base_id + i,
 * registered so engine events find their exchange); events feed the pure response
 * assembly of api_completions.c, whose bytes go out as SSE chunks or, at the end,
 * as one JSON body.
 * Thread: loop.
 */
#include "api_completions.h"
#include "srv.h"

#include "util.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

extern const double srv_hist_bounds[SRV_HIST_BUCKETS];

/* Constant-time string comparison: the API key check must not leak, through its
 * timing, how many leading characters a guess got right. */
static bool secret_equal(const char *a, size_t na, const char *b, size_t nb)
{
    unsigned char diff = (unsigned char)(na != nb);
    for (size_t i = 0; i < na; i++) diff |= (unsigned char)(a[i] ^ b[i % (nb ? nb : 1)]);
    return diff == 0;
}

static bool authorized(const struct exch *x)
{
    const char *key = x->c->s->cfg->api_key;
    if (!key || !*key) return true;
    const char *h = http_request_header(x->req, "authorization");
    if (!h || strncasecmp(h, "Bearer ", 7) != 0) return false;
    const char *tok = h + 7;
    return secret_equal(tok, strlen(tok), key, strlen(key));
}

/* ---- admin ---- */

static cJSON *model_object(const struct srv *s)
{
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", s->model_id);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", (double)s->started);
    cJSON_AddStringToObject(m, "owned_by", "h2oserve");
    cJSON_AddNumberToObject(m, "max_model_len", s->max_model_len);
    return m;
}

static void handle_health(struct exch *x)
{
    struct srv *s = x->c->s;
    enum engine_state st = s->eng ? engine_state(s->eng) : ENGINE_STOPPED;
    const char *what = s->draining ? "draining" : engine_state_name(st);
    char body[256];
    int n = snprintf(body, sizeof body, "{\"status\":\"%s\"}", what);
    int code = st == ENGINE_READY && !s->draining ? 200 : 503;
    exch_respond(x, code, "application/json", body, (size_t)n, NULL);
}

static void handle_models(struct exch *x, const char *id)
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
                     const char *help, const struct srv_hist *h)
{
    appendf(out, len, cap, "# HELP h2oserve:%s %s\n# TYPE h2oserve:%s histogram\n", name, help,
            name);
    int64_t cum = 0;
    for (int i = 0; i < SRV_HIST_BUCKETS; i++) {
        cum += h->bucket[i];
        appendf(out, len, cap, "h2oserve:%s_bucket{le=\"%g\",%s} %lld\n", name,
                srv_hist_bounds[i], label, (long long)cum);
    }
    appendf(out, len, cap, "h2oserve:%s_bucket{le=\"+Inf\",%s} %lld\n", name, label,
            (long long)h->count);
    appendf(out, len, cap, "h2oserve:%s_sum{%s} %.6f\nh2oserve:%s_count{%s} %lld\n", name, label,
            h->sum, name, label, (long long)h->count);
}

static void handle_metrics(struct exch *x)
{
    struct srv *s = x->c->s;
    struct sched_stats st = {0};
    if (s->eng) engine_get_stats(s->eng, &st);
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
                label, (long long)s->m.finished[i]);
    COUNTER("http_requests_total", "HTTP requests received.", s->m.requests_total);
    int32_t batches, batch_reqs;
    batchrun_stats(s->br, &batches, &batch_reqs);
    GAUGE("batches_running", "Batches in progress (Batches API).", batches);
    GAUGE("batch_requests_in_flight", "Batch-job engine requests in flight.", batch_reqs);
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
    exch_respond(x, 200, "text/plain; version=0.0.4", out, len, NULL);
    free(out);
}

/* ---- completions ---- */

void router_api_model(const struct srv *s, struct api_model *m)
{
    memset(m, 0, sizeof *m);
    m->id = s->model_id;
    m->max_model_len = s->max_model_len;
    m->vocab_size = s->mcfg.vocab_size;
    m->tok = s->tok;
    cfg_kv_spec(s->cfg, &m->kv_default);
    m->max_prompts = s->cfg->max_prompts_per_request;
    m->max_n = s->cfg->max_n;
    m->max_seqs = s->cfg->max_queue; /* prompts x max(n, best_of) in one request */
}

static uint64_t random_seed(struct srv *s)
{
    /* Requests without a seed still get distinct, unpredictable ones. */
    uint64_t t = uv_hrtime() ^ (s->next_id * 0x9e3779b97f4a7c15ull);
    t ^= t >> 31;
    return t * 0xbf58476d1ce4e5b9ull;
}

static void handle_completions(struct exch *x)
{
    struct srv *s = x->c->s;
    if (s->draining || !s->eng || engine_state(s->eng) != ENGINE_READY) {
        reply_error(x, 503, NULL, "The server is %s; try again later",
              s->draining ? "shutting down" : "loading the model");
        return;
    }
    struct api_model m;
    router_api_model(s, &m);
    struct api_error e = {0};
    x->params = xcalloc(1, sizeof *x->params);
    if (cmpl_parse(x->req->body ? x->req->body : "", x->req->body_len, &m, x->params, &e)) {
        exch_error(x, &e);
        return;
    }
    struct sched_stats st;
    engine_get_stats(s->eng, &st);
    if (st.n_waiting + x->params->n_prompts > s->cfg->max_queue) {
        api_error_set(&e, 429, API_ERR_INVALID, NULL, "rate_limit_exceeded",
                      "The server's queue is full (%d waiting requests); retry shortly",
                      st.n_waiting);
        exch_error(x, &e);
        return;
    }
    snprintf(x->id, sizeof x->id, "cmpl-%016llx", (unsigned long long)random_seed(s));
    x->resp = cmpl_resp_create(x->params, s->tok, x->id, (int64_t)time(NULL));
    cmpl_resp_set_fingerprint(x->resp, s->fingerprint);
    x->n_prompts = x->params->n_prompts;
    x->base_id = s->next_id;
    s->next_id += (uint64_t)x->n_prompts;
    x->n_live = x->n_prompts;
    if (x->params->stream) exch_stream_start(x, 200, "text/event-stream");
    const uint64_t seed = x->params->has_seed ? (uint64_t)x->params->seed : random_seed(s);
    for (int32_t i = 0; i < x->n_prompts; i++) {
        srv_reg_put(s, x->base_id + (uint64_t)i, x);
        struct req *r = cmpl_make_req(x->params, i, x->base_id + (uint64_t)i,
                                      seed + (uint64_t)i * 1000003u);
        r->t_submit = time_now(); /* the engine measures queue time from here */
        engine_submit(s->eng, r);
    }
}

/* Unregister the exchange's engine ids; cancel the ones still running. */
static void release_ids(struct exch *x, bool cancel)
{
    struct srv *s = x->c->s;
    for (int32_t i = 0; i < x->n_prompts; i++) {
        uint64_t id = x->base_id + (uint64_t)i;
        if (!srv_reg_get(s, id)) continue;
        srv_reg_del(s, id);
        if (cancel && s->eng) engine_cancel(s->eng, id); /* frees its KV blocks at once */
    }
}

/* The completion's part of its --log-requests line, from the response before it
 * goes: "cmpl-... prompt_tokens=4 completion_tokens=16 kv=h2o(heavy=14,recent=14,
 * evicted=0)". */
static void note_completion(struct exch *x)
{
    if (!x->c->s->cfg->log_requests) return;
    int64_t pt, ct, evicted;
    struct kv_budget b;
    cmpl_resp_usage(x->resp, &pt, &ct);
    cmpl_resp_kv_usage(x->resp, &b, &evicted);
    char kv[96] = "full";
    if (b.policy != KV_POLICY_FULL)
        snprintf(kv, sizeof kv, "%s(heavy=%d,recent=%d,evicted=%lld)", kv_policy_name(b.policy),
                 b.heavy, b.recent, (long long)evicted);
    char note[256];
    snprintf(note, sizeof note, "%s prompt_tokens=%lld completion_tokens=%lld kv=%s", x->id,
             (long long)pt, (long long)ct, kv);
    free(x->log_note);
    x->log_note = xstrdup(note);
}

void router_log(const struct exch *x)
{
    if (!x->c->s->cfg->log_requests || !x->req) return;
    char status[8] = "-";
    if (x->status) snprintf(status, sizeof status, "%d", x->status);
    log_info("request %s %s %s%s%s %.1f ms", x->req->method, x->req->path, status,
             x->log_note ? " " : "", x->log_note ? x->log_note : "",
             (uv_hrtime() * 1e-9 - x->t_start) * 1e3);
}

/* Every prompt finished, or one failed: send what is left of the response. The
 * exchange may be freed by exch_finish (its connection moves on), so the response
 * state is released first and only local buffers are written after. */
static void completion_done(struct exch *x)
{
    struct srv *s = x->c->s;
    note_completion(x);
    const struct api_error *err = cmpl_resp_error(x->resp);
    release_ids(x, err != NULL);
    srv_hist_add(&s->m.e2e, uv_hrtime() * 1e-9 - x->t_start);
    size_t elen = 0, tlen = 0;
    char *ebuf = NULL, *tail = NULL;
    struct api_error e = {0};
    const bool stream = x->params->stream;
    if (err && stream) ebuf = cmpl_resp_stream_error(err, &elen);
    else if (err) api_error_set(&e, err->status, err->type, err->param, err->code, "%s", err->message);
    if (stream) tail = cmpl_resp_stream_tail(x->resp, &tlen);
    else if (!err) tail = cmpl_resp_body(x->resp, &tlen);
    cmpl_resp_destroy(x->resp);
    x->resp = NULL;
    if (stream) {
        /* After the 200 an error goes out as an SSE event, then [DONE]. */
        if (ebuf) exch_chunk(x, ebuf, elen);
        exch_chunk(x, tail, tlen);
        exch_stream_end(x);
    } else if (err) {
        exch_error(x, &e);
    } else {
        exch_respond(x, 200, "application/json", tail, tlen, NULL);
    }
    free(ebuf);
    free(tail);
}

void router_event(struct exch *x, struct req_event *ev)
{
    struct srv *s = x->c->s;
    const int32_t pi = (int32_t)(ev->req_id - x->base_id);
    const double now = uv_hrtime() * 1e-9;
    if (ev->token >= 0 && ev->prompt_pos == 0) { /* a generated token */
        if (x->t_first == 0) {
            x->t_first = now;
            srv_hist_add(&s->m.ttft, now - x->t_start);
        } else {
            srv_hist_add(&s->m.itl, now - x->t_last);
        }
        x->t_last = now;
    }
    if (ev->token >= 0 && ev->prompt_pos == 0 && ev->queue_s >= 0) srv_hist_add(&s->m.queue, ev->queue_s);
    if (ev->finish != REQ_FINISH_NONE) s->m.finished[ev->finish]++;
    if (!x->resp) return; /* already answered (an error ended it) */
    size_t len = 0;
    char *chunk = cmpl_resp_event(x->resp, pi, ev, &len);
    if (chunk) {
        exch_chunk(x, chunk, len);
        free(chunk);
    }
    if (cmpl_resp_done(x->resp) || cmpl_resp_error(x->resp)) completion_done(x);
}

void router_abort(struct exch *x)
{
    if (x->resp) {
        note_completion(x); /* the client left: what it got so far */
        release_ids(x, true);
        cmpl_resp_destroy(x->resp);
        x->resp = NULL;
    }
    if (x->params) {
        cmpl_params_free(x->params);
        free(x->params);
        x->params = NULL;
    }
}

/* Whether `v` is a list of header names ("x-stainless-os, Content-Type"): tokens
 * (RFC 9110 5.6.2), commas and spaces, so that echoing it back can never inject
 * anything into the response head. */
static bool header_name_list(const char *v)
{
    if (!*v || strlen(v) > 2048) return false;
    for (const unsigned char *c = (const unsigned char *)v; *c; c++)
        if (!(isalnum(*c) || strchr("!#$%&'*+-.^_`|~, ", *c))) return false;
    return true;
}

/* A CORS preflight: the methods the API uses, and the request headers the browser
 * asks for (Access-Control-Request-Headers), whatever they are, as vLLM's
 * allow_headers=["*"] does: client libraries send their own (the openai-node
 * client's x-stainless-*), and the API key check does not depend on any of them. */
static void cors_preflight(struct exch *x)
{
    const char *want = http_request_header(x->req, "access-control-request-headers");
    char extra[2300];
    snprintf(extra, sizeof extra,
             "Access-Control-Allow-Methods: GET, POST, DELETE, OPTIONS\r\n"
             "Access-Control-Allow-Headers: %s\r\n"
             "Access-Control-Max-Age: 86400\r\n",
             want && header_name_list(want) ? want : "Authorization, Content-Type");
    exch_respond(x, 204, "text/plain", "", 0, extra);
}

void router_dispatch(struct exch *x)
{
    struct srv *s = x->c->s;
    const struct http_request *r = x->req;
    s->m.requests_total++;
    /* HEAD is GET without the body (RFC 9110 9.3.2): routed as GET, and the
     * connection writes the head alone. Rewritten in place ("HEAD" has room). */
    if (strcmp(r->method, "HEAD") == 0) {
        x->head_only = true;
        memcpy(x->req->method, "GET", 4);
    }
    const bool get = strcmp(r->method, "GET") == 0, post = strcmp(r->method, "POST") == 0;
    if (strcmp(r->method, "OPTIONS") == 0 && s->cfg->cors_allow_origin) {
        cors_preflight(x);
        return;
    }
    const char *p = r->path;
    if (strcmp(p, "/health") == 0) {
        if (!get) reply_error(x, 405, NULL, "Method %s not allowed here", r->method);
        else handle_health(x);
        return;
    }
    if (strcmp(p, "/metrics") == 0) {
        if (!get) reply_error(x, 405, NULL, "Method %s not allowed here", r->method);
        else handle_metrics(x);
        return;
    }
    if (vllm_route(x)) return; /* /tokenize, /detokenize, /version: no API key */
    if (strncmp(p, "/v1/", 4) != 0) {
        reply_error(x, 404, NULL, "No route for %s", p);
        return;
    }
    if (!authorized(x)) {
        reply_error(x, 401, "invalid_api_key", "Incorrect or missing API key%s", "");
        return;
    }
    if (strcmp(p, "/v1/models") == 0 || strncmp(p, "/v1/models/", 11) == 0) {
        if (!get) reply_error(x, 405, NULL, "Method %s not allowed here", r->method);
        else handle_models(x, p[10] == '/' ? p + 11 : NULL);
        return;
    }
    if (strcmp(p, "/v1/files") == 0 || strncmp(p, "/v1/files/", 10) == 0) {
        files_route(x, p + 9);
        return;
    }
    if (strcmp(p, "/v1/batches") == 0 || strncmp(p, "/v1/batches/", 12) == 0) {
        batches_route(x, p + 11);
        return;
    }
    if (strcmp(p, "/v1/chat/completions") == 0) {
        chat_route(x);
        return;
    }
    if (strcmp(p, "/v1/completions") == 0) {
        if (!post) reply_error(x, 405, NULL, "Method %s not allowed here", r->method);
        else handle_completions(x);
        return;
    }
    reply_error(x, 404, NULL, "No route for %s", p);
}
