/*
 * batch_check.c - the check of a Batches API input file (see batch_check.h).
 * Thread: batch_check_file runs on libuv's thread pool and reads nothing but c.
 */
#include "batch_check.h"

#include "batch_line.h"
#include "json.h"

#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void check_error(struct batch_check *c, int64_t line, const char *code, const char *param,
                        const char *message)
{
    if (c->n_errors++ >= BATCH_CHECK_MAX_ERRORS) return;
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "code", code);
    cJSON_AddStringToObject(e, "message", message);
    if (param) cJSON_AddStringToObject(e, "param", param);
    else cJSON_AddNullToObject(e, "param");
    if (line > 0) cJSON_AddNumberToObject(e, "line", (double)line);
    else cJSON_AddNullToObject(e, "line");
    cJSON_AddItemToArray(c->errors, e);
}

void batch_check_file(struct batch_check *c)
{
    c->errors = cJSON_CreateArray();
    FILE *f = c->in;
    c->in = NULL;
    if (!f) {
        check_error(c, 0, "file_not_found", "input_file_id", "the input file cannot be read");
        return;
    }
    struct batch_line_idset ids = {0};
    char *text = NULL;
    size_t cap = 0;
    ssize_t n;
    int64_t line = 0, requests = 0;
    while ((n = getline(&text, &cap, f)) >= 0) {
        /* A 200 MB file takes seconds: a stopping server does not wait for it (the
         * batch stays validating and is validated again at the next start). */
        if (c->stop && atomic_load_explicit(c->stop, memory_order_relaxed)) {
            c->abandoned = true;
            break;
        }
        line++;
        if (batch_line_blank(text, (size_t)n)) continue; /* a trailing newline or a blank line */
        struct batch_line_error le;
        char *cid = NULL;
        cJSON *body =
            batch_line_parse(text, (size_t)n, c->endpoint, c->model, &cid, NULL, &le);
        if (cid && *cid && !batch_line_idset_add(&ids, cid)) {
            check_error(c, line, "duplicate_custom_id", "custom_id",
                        "custom_id is used by an earlier line");
        } else if (!body) {
            check_error(c, line, le.code, le.param[0] ? le.param : NULL, le.message);
        } else if (++requests <= c->max_requests && c->n_errors == 0) {
            if (c->n_reqs == c->cap_reqs) {
                c->cap_reqs = MAX(1024, 2 * c->cap_reqs);
                c->reqs = xrealloc(c->reqs, (size_t)c->cap_reqs * sizeof *c->reqs);
            }
            while (n > 0 && (text[n - 1] == '\n' || text[n - 1] == '\r')) text[--n] = '\0';
            c->reqs[c->n_reqs++] = (struct jobstore_request){
                .line = line, .custom_id = cid, .body = xstrdup(text)};
            cid = NULL;
        }
        cJSON_Delete(body);
        free(cid);
    }
    if (ferror(f)) {
        c->read_failed = true;
        check_error(c, 0, "file_unreadable", "input_file_id", "the input file cannot be read");
    }
    fclose(f);
    free(text);
    batch_line_idset_free(&ids);
    char msg[160];
    if (requests > c->max_requests) {
        snprintf(msg, sizeof msg, "the file has %lld requests; a batch may have at most %d",
                 (long long)requests, c->max_requests);
        check_error(c, 0, "too_many_requests", NULL, msg);
    }
    if (requests == 0 && c->n_errors == 0)
        check_error(c, 0, "empty_file", "input_file_id", "the input file has no requests");
}

char *batch_check_errors_json(struct batch_check *c)
{
    if (c->n_errors > BATCH_CHECK_MAX_ERRORS) {
        char msg[96];
        snprintf(msg, sizeof msg, "%lld more errors are not listed",
                 (long long)(c->n_errors - BATCH_CHECK_MAX_ERRORS));
        c->n_errors = 0; /* let this one through */
        check_error(c, 0, "too_many_errors", NULL, msg);
    }
    cJSON *list = cJSON_CreateObject();
    cJSON_AddStringToObject(list, "object", "list");
    cJSON_AddItemToObject(list, "data", c->errors);
    c->errors = NULL;
    char *text = json_print(list, NULL);
    cJSON_Delete(list);
    return text;
}

void batch_check_deinit(struct batch_check *c)
{
    jobstore_requests_free(c->reqs, c->n_reqs);
    cJSON_Delete(c->errors);
    if (c->in) fclose(c->in);
    free(c->endpoint);
    free(c->model);
}
