/*
 * api_files.c - the OpenAI Files API: upload (POST /v1/files, multipart/form-data),
 * list, retrieve, delete, and download (GET /v1/files/{id}/content).
 *
 * Why it exists: the Batches API takes its input as an uploaded file and hands its
 * results back as files, so a client drives a batch with the same SDK calls it uses
 * against OpenAI (client.files.create / retrieve / content / delete / list).
 *
 * Owns: nothing beyond one request. The bodies and their rows are the job store's
 * (jobstore.h: its ordering makes an upload durable before the id is returned);
 * this file turns HTTP into store calls and store records into OpenAI's JSON.
 * Only purpose "batch" may be uploaded; files of purpose "batch_output" (a batch's
 * output and error files, published by the store) are listed, retrieved, deleted
 * and downloaded like any other.
 *
 * Trust: the user's filename is stored and echoed as JSON, never used as a path
 * (bodies live under generated ids). Ids from the path are checked to be short
 * [A-Za-z0-9_-] strings before they reach the store or an error message, so a
 * malformed one is simply a file that does not exist (404).
 *
 * Thread: loop. Neither direction holds a file in memory. A download streams the
 * body from the store (disk or database) as the client reads it
 * (conn_respond_file). An upload's body is streamed by the HTTP layer (http.h:
 * POST /v1/files is handed over when its head is complete) into files_upload.h,
 * which parses it as it arrives and writes the file part to the store in 64 KiB
 * writes, checks the form at the body's end and commits (the store's fsyncs) or
 * aborts; so a file of any size up to --max-file-bytes costs a few chunks of memory.
 */
#include "api_files.h"

#include "files_upload.h"
#include "jobstore.h"
#include "query.h"
#include "reply.h"
#include "srv.h"

#include "err.h"
#include "util.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

/* OpenAI's list default and maximum are both 10,000. */
#define FILES_LIST_MAX 10000

/* An OpenAI error with a param: status, param (NULL: none), code (static or NULL)
 * and a printf message. reply_error has no param, and the SDKs show it. */
static void files_error(struct exch *x, int status, const char *param, const char *code,
                        const char *fmt, ...) __attribute__((format(printf, 5, 6)));

static void files_error(struct exch *x, int status, const char *param, const char *code,
                        const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    struct api_error e = {0};
    api_error_set(&e, status, status >= 500 ? API_ERR_SERVER : API_ERR_INVALID, param, code,
                  "%s", msg);
    conn_error(x, &e);
}

/* OpenAI's 404 for a file id: "No such File object: file-abc", param "id". */
static void reply_no_file(struct exch *x, const char *id)
{
    files_error(x, 404, "id", NULL, "No such File object: %s", id);
}

/* The File object. expires_at is null because nothing here expires files;
 * status is always "processed" (the store holds only committed uploads) and
 * status_details null (OpenAI uses it only for fine-tuning). */
static cJSON *file_object(const struct jobstore_file *f)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", f->id);
    cJSON_AddStringToObject(o, "object", "file");
    cJSON_AddNumberToObject(o, "bytes", (double)f->bytes);
    cJSON_AddNumberToObject(o, "created_at", (double)f->created_at);
    cJSON_AddNullToObject(o, "expires_at");
    cJSON_AddStringToObject(o, "filename", f->filename ? f->filename : "");
    cJSON_AddStringToObject(o, "purpose", f->purpose);
    cJSON_AddStringToObject(o, "status", f->status[0] ? f->status : "processed");
    cJSON_AddNullToObject(o, "status_details");
    return o;
}

/* ---- POST /v1/files ---- */

/* The body ended: the verdict (files_upload_finish), then the answer, which may free
 * x and its upload. */
static void upload_end(struct exch *x)
{
    struct jobstore_file f = {0};
    struct api_error e = {0};
    const int err = files_upload_finish(x->ctx, &f, &e);
    if (!err) {
        reply_json(x, file_object(&f));
        jobstore_file_deinit(&f);
    } else if (e.status) {
        conn_error(x, &e);
    } else {
        log_error("files: upload: %s", err_msg());
        reply_store_error(x, err);
    }
}

static void upload_data(struct exch *x, const char *data, size_t len)
{
    files_upload_write(x->ctx, data, len);
}

/* The exchange is done, or its body will not end (the client left, a timeout, the
 * drain, bad framing: body_abort): an upload not finished goes now, with nothing of
 * it left in the store. */
static void upload_dispose(struct exch *x)
{
    files_upload_destroy(x->ctx);
    x->ctx = NULL;
}

/*
 * POST /v1/files, called when the request's head is complete: a Content-Type that
 * is not multipart/form-data is refused at once (before the body: with
 * "Expect: 100-continue" the client never sends it); otherwise the body goes to
 * files_upload as it arrives and is answered at its end. An empty body is not
 * streamed (http.h) and goes through the same calls at once.
 */
static void files_upload(struct exch *x)
{
    struct api_error e = {0};
    struct files_upload *up =
        files_upload_create(x->c->s->js, http_request_header(x->req, "content-type"),
                            x->c->s->cfg->max_file_bytes, &e);
    if (!up) {
        conn_error(x, &e);
        return;
    }
    x->ctx = up;
    x->dispose = upload_dispose;
    if (!x->req->body_streamed) {
        files_upload_write(up, x->req->body, x->req->body_len);
        upload_end(x);
        return;
    }
    x->body_data = upload_data;
    x->body_end = upload_end;
    x->body_abort = upload_dispose;
}

/* ---- GET /v1/files ---- */

static void files_list(struct exch *x)
{
    struct query_list q;
    if (query_list_params(x, FILES_LIST_MAX, FILES_LIST_MAX, &q)) return;
    char purpose[32];
    int got = query_get(x, "purpose", purpose, sizeof purpose);
    if (got < 0) {
        files_error(x, 400, "purpose", NULL, "purpose is not a valid purpose");
        return;
    }
    const char *after = q.after[0] ? q.after : NULL;
    /* A cursor that names no file is the client's mistake, not an empty page: a
     * silent empty page would end a pagination loop early without saying why. */
    if (after && !query_id_ok(after, strlen(after))) {
        files_error(x, 400, "after", NULL, "after is not a file id");
        return;
    }
    struct jobstore_file *fs = NULL;
    int nf = 0;
    bool has_more = false;
    int err = jobstore_file_list(x->c->s->js, got > 0 && purpose[0] ? purpose : NULL, after,
                                 q.limit, q.ascending, &fs, &nf, &has_more);
    if (err == ENG_ENOTFOUND) {
        files_error(x, 400, "after", NULL, "No such File object for 'after': %s", after);
        return;
    }
    if (err) {
        log_error("files: list: %s", err_msg());
        reply_store_error(x, err);
        return;
    }
    cJSON *list = cJSON_CreateObject();
    cJSON_AddStringToObject(list, "object", "list");
    cJSON *data = cJSON_AddArrayToObject(list, "data");
    for (int i = 0; i < nf; i++)
        cJSON_AddItemToArray(data, file_object(&fs[i]));
    if (nf > 0) {
        cJSON_AddStringToObject(list, "first_id", fs[0].id);
        cJSON_AddStringToObject(list, "last_id", fs[nf - 1].id);
    } else {
        cJSON_AddNullToObject(list, "first_id");
        cJSON_AddNullToObject(list, "last_id");
    }
    cJSON_AddBoolToObject(list, "has_more", has_more);
    jobstore_files_free(fs, nf);
    reply_json(x, list);
}

/* ---- /v1/files/{id} and /v1/files/{id}/content ---- */

static void files_retrieve(struct exch *x, const char *id)
{
    struct jobstore_file f = {0};
    int err = jobstore_file_get(x->c->s->js, id, &f);
    if (err == ENG_ENOTFOUND) {
        reply_no_file(x, id);
        return;
    }
    if (err) {
        log_error("files: get %s: %s", id, err_msg());
        reply_store_error(x, err);
        return;
    }
    reply_json(x, file_object(&f));
    jobstore_file_deinit(&f);
}

static void files_delete(struct exch *x, const char *id)
{
    int err = jobstore_file_delete(x->c->s->js, id);
    if (err == ENG_ENOTFOUND) {
        reply_no_file(x, id);
        return;
    }
    if (err) {
        log_error("files: delete %s: %s", id, err_msg());
        reply_store_error(x, err);
        return;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", id);
    cJSON_AddStringToObject(o, "object", "file");
    cJSON_AddBoolToObject(o, "deleted", true);
    reply_json(x, o);
}

static void files_content(struct exch *x, const char *id)
{
    struct jobstore *js = x->c->s->js;
    struct jobstore_file f = {0};
    FILE *body = NULL;
    int64_t have = 0;
    int err = jobstore_file_get(js, id, &f);
    if (!err) err = jobstore_file_open(js, id, &body, &have);
    const int64_t bytes = f.bytes;
    jobstore_file_deinit(&f);
    if (err == ENG_ENOTFOUND) {
        reply_no_file(x, id);
        return;
    }
    if (err) {
        log_error("files: content %s: %s", id, err_msg());
        reply_store_error(x, err);
        return;
    }
    /* The body is streamed from the store as the client reads it
     * (conn_respond_file). Its length is the body's as stored, which the store made
     * durable before the row; a size that disagrees with the row means the store is
     * damaged. */
    if (have != bytes) {
        log_error("files: content %s: %lld bytes stored, %lld recorded", id,
                  (long long)have, (long long)bytes);
        fclose(body);
        files_error(x, 500, NULL, NULL, "The content of file %s could not be read", id);
        return;
    }
    conn_respond_file(x, 200, "application/octet-stream", body, have);
}

/*
 * Route /v1/files and below. The shape of the path decides the route (else 404),
 * then the method (else 405), then the id's sanity (else 404, as for an unknown id).
 * Thread: loop.
 */
void api_files_route(struct exch *x, const char *rest)
{
    if (!x->c->s->js) {
        reply_store_closed(x);
        return;
    }
    const char *m = x->req->method;
    if (rest[0] == '\0') {
        if (strcmp(m, "POST") == 0)
            files_upload(x);
        else if (strcmp(m, "GET") == 0)
            files_list(x);
        else
            reply_error(x, 405, NULL, "Method %s not allowed here", m);
        return;
    }
    /* rest is "/{id}" or "/{id}/content"; anything else has no route. */
    const char *id = rest + 1;
    const size_t id_len = strcspn(id, "/");
    const char *tail = id + id_len;
    const bool content = strcmp(tail, "/content") == 0;
    if (id_len == 0 || (*tail && !content)) {
        reply_error(x, 404, NULL, "No route for %s", x->req->path);
        return;
    }
    const bool get = strcmp(m, "GET") == 0;
    if (!(get || (!content && strcmp(m, "DELETE") == 0))) {
        reply_error(x, 405, NULL, "Method %s not allowed here", m);
        return;
    }
    if (!query_id_ok(id, id_len)) {
        files_error(x, 404, "id", NULL, "No such File object");
        return;
    }
    char idbuf[JOBSTORE_ID_MAX];
    memcpy(idbuf, id, id_len);
    idbuf[id_len] = '\0';
    if (content)
        files_content(x, idbuf);
    else if (get)
        files_retrieve(x, idbuf);
    else
        files_delete(x, idbuf);
}
