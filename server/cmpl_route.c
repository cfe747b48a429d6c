/*
 * cmpl_route.c - the glue between POST /v1/completions and the engine.
 *
 * A completion request becomes one engine request per prompt (ids base_id + i,
 * registered with the bridge so engine events find their job); events feed the
 * pure response assembly of cmpl_resp.c, whose bytes go out as SSE
 * chunks or, at the end, as one JSON body.
 *
 * Owns: a job per exchange (the parsed request, the response assembly and the
 * engine ids), hung on the exchange as its ctx and freed by its dispose callback,
 * whether the response was sent or the client went first.
 * Invariant: the job's engine ids are registered from submit until the response is
 * complete (or the exchange is freed); so an event always finds its job alive.
 * Thread: loop.
 */
#include "cmpl_route.h"

#include "chat.h"

#include "cmpl_resp.h"
#include "reply.h"
#include "srv.h"

#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct cmpl_job {
    struct exch *x;
    struct cmpl_params params;
    struct cmpl_resp *resp;    /* NULL before the submit and once answered */
    char id[40];               /* the response id ("cmpl-..."), "" before */
    uint64_t base_id;          /* engine ids base_id .. base_id + n_prompts - 1 */
    int32_t n_prompts;
    double t_first, t_last;    /* for the TTFT and ITL metrics */
};

static uint64_t random_seed(struct srv *s)
{
    /* Requests without a seed still get distinct, unpredictable ones. */
    uint64_t t = uv_hrtime() ^ (s->bridge.next_id * 0x9e3779b97f4a7c15ull);
    t ^= t >> 31;
    return t * 0xbf58476d1ce4e5b9ull;
}

/* Unregister the job's engine ids; cancel the ones still running. */
static void release_ids(struct cmpl_job *j, bool cancel)
{
    struct bridge *b = &j->x->c->s->bridge;
    for (int32_t i = 0; i < j->n_prompts; i++) bridge_release(b, j->base_id + (uint64_t)i, cancel);
}

/* The completion's part of its --log-requests line, from the response before it
 * goes: "cmpl-... prompt_tokens=4 completion_tokens=16 kv=h2o(heavy=14,recent=14,
 * evicted=0)". */
static void note_completion(struct cmpl_job *j)
{
    struct exch *x = j->x;
    if (!x->c->s->cfg->log_requests) return;
    int64_t pt, ct, evicted;
    struct kv_budget b;
    cmpl_resp_usage(j->resp, &pt, &ct);
    cmpl_resp_kv_usage(j->resp, &b, &evicted);
    char kv[96] = "full";
    if (b.policy != KV_POLICY_FULL)
        snprintf(kv, sizeof kv, "%s(heavy=%d,recent=%d,evicted=%lld)",
                 kv_budget_policy_name(b.policy), b.heavy, b.recent, (long long)evicted);
    char note[256];
    snprintf(note, sizeof note, "%s prompt_tokens=%lld completion_tokens=%lld kv=%s", j->id,
             (long long)pt, (long long)ct, kv);
    free(x->log_note);
    x->log_note = xstrdup(note);
}

/* The exchange is being freed: if the engine has not finished (the client went),
 * note what it got, cancel its engine requests, and free the job. */
static void job_dispose(struct exch *x)
{
    struct cmpl_job *j = x->ctx;
    if (j->resp) {
        note_completion(j); /* the client left: what it got so far */
        release_ids(j, true);
        cmpl_resp_destroy(j->resp);
    }
    cmpl_params_free(&j->params);
    free(j);
    x->ctx = NULL;
    x->dispose = NULL;
}

/* Every prompt finished, or one failed: send what is left of the response. The
 * exchange (and with it the job) may be freed by conn_finish (its connection moves
 * on), so the response state is released first and only local buffers are written
 * after. */
static void completion_done(struct cmpl_job *j)
{
    struct exch *x = j->x;
    struct srv *s = x->c->s;
    note_completion(j);
    const struct api_error *err = cmpl_resp_error(j->resp);
    release_ids(j, err != NULL);
    metrics_hist_add(&s->m.e2e, uv_hrtime() * 1e-9 - x->t_start);
    size_t elen = 0, tlen = 0;
    char *ebuf = NULL, *tail = NULL;
    struct api_error e = {0};
    const bool stream = j->params.stream;
    if (err && stream) ebuf = cmpl_resp_stream_error(err, &elen);
    else if (err)
        api_error_set(&e, err->status, err->type, err->param, err->code, "%s", err->message);
    if (stream) tail = cmpl_resp_stream_tail(j->resp, &tlen);
    else if (!err) tail = cmpl_resp_body(j->resp, &tlen);
    cmpl_resp_destroy(j->resp);
    j->resp = NULL;
    if (stream) {
        /* After the 200 an error goes out as an SSE event, then [DONE]. */
        if (ebuf) conn_chunk(x, ebuf, elen);
        conn_chunk(x, tail, tlen);
        conn_stream_end(x);
    } else if (err) {
        conn_error(x, &e);
    } else {
        conn_respond(x, 200, "application/json", tail, tlen, NULL);
    }
    free(ebuf);
    free(tail);
}

/* An engine event for one of the job's ids (the bridge's callback). */
static void job_event(void *ctx, struct req_event *ev)
{
    struct cmpl_job *j = ctx;
    struct exch *x = j->x;
    struct srv *s = x->c->s;
    const int32_t pi = (int32_t)(ev->req_id - j->base_id);
    const double now = uv_hrtime() * 1e-9;
    if (ev->token >= 0 && ev->prompt_pos == 0) { /* a generated token */
        if (j->t_first == 0) {
            j->t_first = now;
            metrics_hist_add(&s->m.ttft, now - x->t_start);
        } else {
            metrics_hist_add(&s->m.itl, now - j->t_last);
        }
        j->t_last = now;
    }
    if (ev->token >= 0 && ev->prompt_pos == 0 && ev->queue_s >= 0)
        metrics_hist_add(&s->m.queue, ev->queue_s);
    if (ev->finish != REQ_FINISH_NONE) s->m.finished[ev->finish]++;
    if (!j->resp) return; /* already answered (an error ended it) */
    size_t len = 0;
    char *chunk = cmpl_resp_event(j->resp, pi, ev, &len);
    if (chunk) {
        conn_chunk(x, chunk, len);
        free(chunk);
    }
    if (cmpl_resp_done(j->resp) || cmpl_resp_error(j->resp)) completion_done(j);
}

/* Both endpoints: one path from the parsed params on, so admission, streaming and
 * cancellation are the same for a chat request. */
static void route(struct exch *x, bool chat)
{
    struct srv *s = x->c->s;
    struct engine *eng = s->bridge.eng;
    if (s->draining || !eng || engine_state(eng) != ENGINE_READY) {
        reply_error(x, 503, NULL, "The server is %s; try again later",
                    s->draining ? "shutting down" : "loading the model");
        return;
    }
    struct cmpl_job *j = xcalloc(1, sizeof *j);
    j->x = x;
    x->ctx = j; /* from here on the exchange frees the job, answered or not */
    x->dispose = job_dispose;
    struct api_error e = {0};
    const char *body = x->req->body ? x->req->body : "";
    if (chat ? chat_parse(body, x->req->body_len, &s->chat, &j->params, &e)
             : cmpl_parse(body, x->req->body_len, &s->model, &j->params, &e)) {
        conn_error(x, &e);
        return;
    }
    /* Admission: counted in sequences, on the loop's own count (bridge_waiting), so
     * a burst parsed between two engine steps sees every request before it. The
     * count never falls below what really waits (docs/api.md "Admission"), so
     * --max-queue is a hard bound; cmpl_parse already refused one request alone
     * larger than it. */
    const int32_t waiting = bridge_waiting(&s->bridge, REQ_PRIO_INTERACTIVE);
    const int64_t seqs = (int64_t)j->params.n_prompts * cmpl_params_seqs(&j->params);
    if (waiting + seqs > s->cfg->max_queue) {
        s->m.rejected_queue_full++;
        api_error_set(&e, 429, API_ERR_INVALID, NULL, "rate_limit_exceeded",
                      "The server's queue is full (%d sequences waiting, at most %d); "
                      "retry shortly",
                      waiting, s->cfg->max_queue);
        conn_error(x, &e); /* with Retry-After: 1 */
        return;
    }
    snprintf(j->id, sizeof j->id, "%s-%016llx", chat ? "chatcmpl" : "cmpl",
             (unsigned long long)random_seed(s));
    j->resp = cmpl_resp_create(&j->params, s->tok, j->id, (int64_t)time(NULL));
    cmpl_resp_set_fingerprint(j->resp, s->fingerprint);
    j->n_prompts = j->params.n_prompts;
    j->base_id = bridge_new_ids(&s->bridge, j->n_prompts);
    if (j->params.stream) conn_stream_start(x, 200, "text/event-stream");
    const uint64_t seed = j->params.has_seed ? (uint64_t)j->params.seed : random_seed(s);
    for (int32_t i = 0; i < j->n_prompts; i++) {
        struct req *r = cmpl_make_req(&j->params, i, j->base_id + (uint64_t)i,
                                      seed + (uint64_t)i * 1000003u);
        bridge_submit(&s->bridge, r, job_event, j);
    }
}

void cmpl_route(struct exch *x)
{
    route(x, false);
}

void cmpl_route_chat(struct exch *x)
{
    route(x, true);
}
