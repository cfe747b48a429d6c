/*
 * api_batches.c - the Batches API: create, list, retrieve and cancel OpenAI Batch
 * objects kept in the job store; the batch runner (batchrun.c) does the work.
 * Thread: loop.
 */
#include "api_batches.h"

#include "batch_create.h"
#include "batchrun.h"
#include "jobstore.h"
#include "json.h"
#include "query.h"
#include "reply.h"
#include "srv.h"

#include "err.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void add_time(cJSON *o, const char *name, int64_t t)
{
    if (t) cJSON_AddNumberToObject(o, name, (double)t);
    else cJSON_AddNullToObject(o, name);
}

static void add_id(cJSON *o, const char *name, const char *id)
{
    if (id && *id) cJSON_AddStringToObject(o, name, id);
    else cJSON_AddNullToObject(o, name);
}

/* JSON text kept in the store, embedded as JSON (null when absent or unreadable).
 * It passes the checks a client's JSON passes, so that a store written before
 * create checked metadata (or damaged since) cannot make every listing invalid
 * UTF-8 from then on. */
static void add_raw(cJSON *o, const char *name, const char *text)
{
    struct json_fault f;
    cJSON *v = text ? json_parse_checked(text, strlen(text), &f) : NULL;
    cJSON_AddItemToObject(o, name, v ? v : cJSON_CreateNull());
}

static cJSON *batch_object(const struct jobstore_batch *b)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", b->id);
    cJSON_AddStringToObject(o, "object", "batch");
    cJSON_AddStringToObject(o, "endpoint", b->endpoint ? b->endpoint : "");
    add_raw(o, "errors", b->errors);
    cJSON_AddStringToObject(o, "input_file_id", b->input_file_id);
    cJSON_AddStringToObject(o, "completion_window", b->completion_window);
    cJSON_AddStringToObject(o, "status", jobstore_status_name(b->status));
    add_id(o, "output_file_id", b->output_file_id);
    add_id(o, "error_file_id", b->error_file_id);
    add_time(o, "created_at", b->created_at);
    add_time(o, "in_progress_at", b->in_progress_at);
    add_time(o, "expires_at", b->expires_at);
    add_time(o, "finalizing_at", b->finalizing_at);
    add_time(o, "completed_at", b->completed_at);
    add_time(o, "failed_at", b->failed_at);
    add_time(o, "expired_at", b->expired_at);
    add_time(o, "cancelling_at", b->cancelling_at);
    add_time(o, "cancelled_at", b->cancelled_at);
    cJSON *rc = cJSON_AddObjectToObject(o, "request_counts");
    cJSON_AddNumberToObject(rc, "total", (double)b->total);
    cJSON_AddNumberToObject(rc, "completed", (double)b->completed);
    cJSON_AddNumberToObject(rc, "failed", (double)b->failed);
    cJSON *u = cJSON_AddObjectToObject(o, "usage");
    cJSON_AddNumberToObject(u, "input_tokens", (double)b->prompt_tokens);
    cJSON *id = cJSON_AddObjectToObject(u, "input_tokens_details");
    cJSON_AddNumberToObject(id, "cached_tokens", 0);
    cJSON_AddNumberToObject(u, "output_tokens", (double)b->completion_tokens);
    cJSON *od = cJSON_AddObjectToObject(u, "output_tokens_details");
    cJSON_AddNumberToObject(od, "reasoning_tokens", 0);
    cJSON_AddNumberToObject(u, "total_tokens", (double)(b->prompt_tokens + b->completion_tokens));
    add_raw(o, "metadata", b->metadata);
    return o;
}

static void reply_batch(struct exch *x, const struct jobstore_batch *b)
{
    reply_json(x, batch_object(b));
}

static void create(struct exch *x)
{
    struct srv *s = x->c->s;
    if (s->draining) {
        reply_error(x, 503, NULL, "The server is shutting down; try again later%s", "");
        return;
    }
    struct api_error e = {0};
    struct batch_create c;
    if (batch_create_parse(x->req->body, x->req->body_len, &c, &e)) {
        conn_error(x, &e);
        return;
    }
    struct jobstore_file f;
    int err = jobstore_file_get(s->js, c.input_file_id, &f);
    if (!err) {
        if (strcmp(f.purpose, "batch") != 0)
            err = err_set(ENG_EINVAL, "file %s has purpose '%s'; a batch needs purpose 'batch'",
                          f.id, f.purpose);
        jobstore_file_deinit(&f);
    }
    struct jobstore_batch b;
    /* "24h" is what OpenAI accepts and what the object says; the server's own
     * window (batch_window_s) decides when it expires. */
    if (!err)
        err = jobstore_batch_create(s->js, c.input_file_id, c.endpoint, "24h", c.metadata,
                                    s->cfg->batch_window_s, &b);
    batch_create_free(&c);
    if (err) {
        reply_store_error(x, err);
        return;
    }
    log_info("batch %s: validating %s", b.id, b.input_file_id);
    batchrun_validate(s->br, b.id);
    reply_batch(x, &b);
    jobstore_batch_deinit(&b);
}

static void list(struct exch *x)
{
    struct query_list q;
    if (query_list_params(x, 20, 100, &q)) return;
    if (q.after[0] && !query_id_ok(q.after, strlen(q.after))) {
        reply_error(x, 400, NULL, "after is not a batch id%s", "");
        return;
    }
    struct jobstore_batch *bs;
    int n;
    bool more;
    int err = jobstore_batch_list(x->c->s->js, q.after[0] ? q.after : NULL, q.limit, q.ascending,
                                  &bs, &n, &more);
    if (err == ENG_ENOTFOUND) { /* as the Files list answers an unknown cursor */
        reply_error(x, 400, NULL, "No such Batch object for 'after': %s", q.after);
        return;
    }
    if (err) {
        reply_store_error(x, err);
        return;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON *data = cJSON_AddArrayToObject(o, "data");
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(data, batch_object(&bs[i]));
    add_id(o, "first_id", n ? bs[0].id : NULL);
    add_id(o, "last_id", n ? bs[n - 1].id : NULL);
    cJSON_AddBoolToObject(o, "has_more", more);
    jobstore_batches_free(bs, n);
    reply_json(x, o);
}

static void retrieve(struct exch *x, const char *id)
{
    struct jobstore_batch b;
    int err = jobstore_batch_get(x->c->s->js, id, &b);
    if (err) {
        reply_store_error(x, err);
        return;
    }
    reply_batch(x, &b);
    jobstore_batch_deinit(&b);
}

static void cancel(struct exch *x, const char *id)
{
    struct srv *s = x->c->s;
    int err = jobstore_batch_set_status(s->js, id, JOBSTORE_CANCELLING, NULL);
    if (err) {
        reply_store_error(x, err);
        return;
    }
    log_info("batch %s: cancelling", id);
    batchrun_cancel(s->br, id); /* it becomes cancelled once the runner let go of it */
    retrieve(x, id);
}

void api_batches_route(struct exch *x, const char *rest)
{
    if (!*rest) {
        if (!strcmp(x->req->method, "POST")) create(x);
        else if (reply_method_is(x, "GET")) list(x);
        return;
    }
    /* "/{id}" or "/{id}/cancel" */
    const char *id = rest + 1;
    size_t len = strcspn(id, "/");
    char buf[JOBSTORE_ID_MAX];
    if (!query_id_ok(id, len)) {
        reply_error(x, 404, "not_found", "No such batch%s", "");
        return;
    }
    memcpy(buf, id, len);
    buf[len] = '\0';
    if (!id[len]) {
        if (reply_method_is(x, "GET")) retrieve(x, buf);
    } else if (!strcmp(id + len, "/cancel")) {
        if (reply_method_is(x, "POST")) cancel(x, buf);
    } else {
        reply_error(x, 404, NULL, "No route for %s", x->req->path);
    }
}
