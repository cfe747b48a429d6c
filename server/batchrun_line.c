/*
 * batchrun_line.c - the batch runner's lines in flight: a claimed request parsed and
 * handed to the engine as one engine request per prompt (seeded from its batch and
 * custom_id when it has no seed), its events assembled into the response, and the
 * answer (or why there is none) kept as a result line for the next commit
 * (batchrun.c). A request the API refuses is answered at once with its error.
 *
 * Owns: the lines (struct br_line) in br->lines, sorted by base_id, and their
 * parsed requests and responses. Thread: loop.
 */
#include "batchrun_impl.h"

#include "batch_line.h"
#include "chat.h"
#include "cmpl_resp.h"
#include "jobstore.h"
#include "srv.h"

#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The line holding engine id `id`, or -1. */
static int32_t find_line(const struct batchrun *br, uint64_t id)
{
    int32_t lo = 0, hi = br->n_lines - 1, at = -1;
    while (lo <= hi) { /* the last line with base_id <= id */
        int32_t mid = lo + (hi - lo) / 2;
        if (br->lines[mid]->base_id <= id) at = mid, lo = mid + 1;
        else hi = mid - 1;
    }
    if (at < 0 || id >= br->lines[at]->base_id + (uint64_t)br->lines[at]->n_prompts) return -1;
    return at;
}

void batchrun_line_drop(struct batchrun *br, int32_t k, bool cancel)
{
    struct br_line *l = br->lines[k];
    for (int32_t i = 0; i < l->n_prompts; i++)
        bridge_release(&br->s->bridge, l->base_id + (uint64_t)i, cancel);
    l->b->n_lines--;
    br->n_reqs -= l->n_prompts;
    memmove(&br->lines[k], &br->lines[k + 1], (size_t)(br->n_lines - k - 1) * sizeof *br->lines);
    br->n_lines--;
    cmpl_resp_destroy(l->resp);
    cmpl_params_free(&l->params);
    free(l->custom_id);
    free(l);
}

void batchrun_line_drop_batch(struct batchrun *br, struct br_batch *b)
{
    for (int32_t k = br->n_lines - 1; k >= 0; k--)
        if (br->lines[k]->b == b) batchrun_line_drop(br, k, true);
}

void batchrun_keep_result(struct br_batch *b, const char *custom_id, bool ok, char *line)
{
    if (b->n_results == b->cap_results) {
        b->cap_results = MAX(16, 2 * b->cap_results);
        b->results = xrealloc(b->results, (size_t)b->cap_results * sizeof *b->results);
    }
    b->results[b->n_results++] =
        (struct br_result){.custom_id = xstrdup(custom_id), .line = line, .ok = ok};
}

/* Keep request custom_id's line for the next commit: in the output file when ok,
 * else the error file. `body` (taken) is its response's body with `status`, or NULL
 * for an error {code, message} with no response (batch_line_output). */
static void keep_line(struct br_batch *b, const char *custom_id, bool ok, int status,
                      const char *request_id, cJSON *body, const char *code,
                      const char *message)
{
    char id[JOBSTORE_ID_MAX];
    jobstore_new_id("batch_req_", id, sizeof id);
    batchrun_keep_result(b, custom_id, ok,
                         batch_line_output(id, custom_id, status, request_id, body, code,
                                           message));
}

static uint64_t seed_of(const char *batch_id, const char *custom_id)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a over "batch_id\0custom_id" */
    for (const char *p = batch_id; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
    h *= 1099511628211ull;
    for (const char *p = custom_id; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
    return h;
}

static void line_event(void *ctx, struct req_event *ev);

void batchrun_line_start(struct batchrun *br, struct br_batch *b, const struct jobstore_request *r)
{
    struct srv *s = br->s;
    struct batch_line_error le;
    char *cid = NULL;
    bool chat = false;
    /* Stored lines were checked against the batch's endpoint when it was created. */
    cJSON *body = batch_line_parse(r->body, strlen(r->body), NULL, NULL, &cid, &chat, &le);
    free(cid);
    if (!body) { /* validated before it was stored: only a damaged store gets here */
        keep_line(b, r->custom_id, false, 0, NULL, NULL, le.code, le.message);
        return;
    }
    struct br_line *l = xcalloc(1, sizeof *l);
    l->br = br;
    l->b = b;
    l->custom_id = xstrdup(r->custom_id);
    struct api_error e = {0};
    int err = chat_parse_batch_body(body, chat, &s->chat, &l->params, &e);
    cJSON_Delete(body);
    if (err) { /* a request the API refuses: its error body is the response */
        keep_line(b, l->custom_id, false, e.status, NULL, api_error_object(&e), NULL, NULL);
        api_error_clear(&e);
        cmpl_params_free(&l->params);
        free(l->custom_id);
        free(l);
        return;
    }
    jobstore_new_id(chat ? "chatcmpl-" : "cmpl-", l->request_id, sizeof l->request_id);
    l->resp = cmpl_resp_create(&l->params, s->tok, l->request_id, (int64_t)time(NULL));
    cmpl_resp_set_fingerprint(l->resp, s->fingerprint);
    l->n_prompts = l->params.n_prompts;
    l->base_id = bridge_new_ids(&s->bridge, l->n_prompts);
    if (br->n_lines == br->cap_lines) {
        br->cap_lines = MAX(64, 2 * br->cap_lines);
        br->lines = xrealloc(br->lines, (size_t)br->cap_lines * sizeof *br->lines);
    }
    br->lines[br->n_lines++] = l; /* the bridge's ids only grow: the array stays sorted */
    b->n_lines++;
    br->n_reqs += l->n_prompts;
    const uint64_t seed =
        l->params.has_seed ? (uint64_t)l->params.seed : seed_of(b->id, l->custom_id);
    for (int32_t i = 0; i < l->n_prompts; i++) {
        struct req *q = cmpl_make_req(&l->params, i, l->base_id + (uint64_t)i,
                                      seed + (uint64_t)i * 1000003u);
        q->prio = REQ_PRIO_BATCH;
        bridge_submit(&s->bridge, q, line_event, l);
    }
}

/* Line k is answered (every prompt finished, or one failed): its result waits for
 * the next commit, and the engine has room again. */
static void finish_line(struct batchrun *br, int32_t k)
{
    struct br_line *l = br->lines[k];
    struct br_batch *b = l->b;
    const struct api_error *err = cmpl_resp_error(l->resp);
    const bool failed = err != NULL;
    if (err) {
        struct api_error e = {0};
        api_error_set(&e, err->status, err->type, err->param, err->code, "%s", err->message);
        keep_line(b, l->custom_id, false, e.status, NULL, api_error_object(&e), NULL, NULL);
        api_error_clear(&e);
    } else {
        size_t len;
        char *text = cmpl_resp_body(l->resp, &len);
        cJSON *body = cJSON_ParseWithLength(text, len);
        free(text);
        keep_line(b, l->custom_id, true, 200, l->request_id, body, NULL, NULL);
    }
    batchrun_line_drop(br, k, failed); /* an error stops its other prompts */
    batchrun_commit_soon(br, b);
}

/* An engine event for one of line l's ids (the bridge's callback: l is alive). */
static void line_event(void *ctx, struct req_event *ev)
{
    struct br_line *l = ctx;
    struct batchrun *br = l->br;
    const int32_t k = find_line(br, l->base_id);
    CHECK(k >= 0 && br->lines[k] == l); /* registered ids belong to tracked lines */
    if (ev->finish != REQ_FINISH_NONE) br->s->m.finished[ev->finish]++;
    const int32_t pi = (int32_t)(ev->req_id - l->base_id);
    free(cmpl_resp_event(l->resp, pi, ev, NULL)); /* not streaming: nothing to send */
    if (cmpl_resp_done(l->resp) || cmpl_resp_error(l->resp)) finish_line(br, k);
}
