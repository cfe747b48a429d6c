/*
 * batch_line.c - parse Batch input lines and print output lines (see batch_line.h).
 * Thread: any.
 */
#include "batch_line.h"

#include "json.h"
#include "util.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

__attribute__((format(printf, 4, 5))) static cJSON *fail(struct batch_line_error *e,
                                                        const char *code, const char *param,
                                                        const char *fmt, ...)
{
    e->code = code;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return NULL;
}

/* A line json_parse_checked refused. A bad string is the fault of the top-level
 * member it is in, so a custom_id with a NUL is invalid_custom_id and a prompt with
 * one is invalid_body naming body.prompt; the rest is not JSON we take. */
static cJSON *fail_fault(struct batch_line_error *e, const struct json_fault *f)
{
    if (f->kind != JSON_FAULT_UTF8 && f->kind != JSON_FAULT_NUL) {
        if (f->kind == JSON_FAULT_SYNTAX)
            return fail(e, "invalid_json", NULL,
                        "the line is not one JSON object (error near byte %zu)", f->at);
        return fail(e, "invalid_json", NULL, "the line is not one JSON object");
    }
    char say[sizeof f->path + 80];
    json_fault_say(f, say, sizeof say);
    static const struct {
        const char *member, *code;
    } owners[] = {{"custom_id", "invalid_custom_id"},
                  {"method", "invalid_method"},
                  {"url", "invalid_url"},
                  {"body", "invalid_body"}};
    const size_t top = strcspn(f->path, ".[");
    const char *code = f->path[0] ? "invalid_json" : NULL;
    for (size_t i = 0; code && i < ARRAY_LEN(owners); i++)
        if (strlen(owners[i].member) == top && memcmp(f->path, owners[i].member, top) == 0)
            code = owners[i].code;
    if (!code) /* a member name of the line itself */
        return fail(e, "invalid_json", NULL, "%s", say);
    fail(e, code, NULL, "%s", say);
    snprintf(e->param, sizeof e->param, "%s", f->path);
    return NULL;
}

bool batch_line_blank(const char *text, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (text[i] != ' ' && text[i] != '\t' && text[i] != '\r' && text[i] != '\n')
            return false;
    return true;
}

/* The endpoints a line may name. */
static bool known_url(const char *url)
{
    return strcmp(url, BATCH_LINE_COMPLETIONS) == 0 || strcmp(url, BATCH_LINE_CHAT) == 0;
}

cJSON *batch_line_parse(const char *text, size_t len, const char *endpoint,
                        const char *model, char **custom_id, bool *chat,
                        struct batch_line_error *e)
{
    *custom_id = NULL;
    if (chat) *chat = false;
    /* The parser every JSON a client sends goes through (json.h): one object and
     * nothing after it ("{..}{..}" on one line would otherwise pass as its first
     * request and silently drop the second), UTF-8 throughout, no NUL in a string. */
    struct json_fault f;
    cJSON *j = json_parse_checked(text, len, &f);
    if (!j) return fail_fault(e, &f);
    /* json_field, as cmpl.c reads the body: a key given twice takes its last value. */
    const cJSON *cid = json_field(j, "custom_id");
    const cJSON *method = json_field(j, "method");
    const cJSON *url = json_field(j, "url");
    const cJSON *body = json_field(j, "body");
    if (cJSON_IsString(cid)) *custom_id = xstrdup(cid->valuestring);
    cJSON *out = NULL;
    if (!cJSON_IsString(cid) || !*cid->valuestring)
        fail(e, "missing_custom_id", "custom_id", "custom_id must be a non-empty string");
    else if (!cJSON_IsString(method) || strcmp(method->valuestring, "POST") != 0)
        fail(e, "invalid_method", "method", "method must be POST");
    else if (endpoint && (!cJSON_IsString(url) || strcmp(url->valuestring, endpoint) != 0))
        fail(e, "invalid_url", "url", "url must be %s, the batch's endpoint", endpoint);
    else if (!endpoint && (!cJSON_IsString(url) || !known_url(url->valuestring)))
        fail(e, "invalid_url", "url", "url must be %s or %s", BATCH_LINE_COMPLETIONS,
             BATCH_LINE_CHAT);
    else if (!cJSON_IsObject(body))
        fail(e, "invalid_body", "body", "body must be a JSON object");
    else
        out = cJSON_DetachItemViaPointer(j, (cJSON *)body);
    if (out && chat) *chat = strcmp(url->valuestring, BATCH_LINE_CHAT) == 0;
    if (out && model) {
        const cJSON *m = json_field(out, "model");
        bool bad = true;
        if (!cJSON_IsString(m) || strcmp(m->valuestring, model) != 0)
            fail(e, "model_not_found", "body.model", "body.model must be '%s', the served model",
                 model);
        else if (cJSON_IsTrue(json_field(out, "stream")))
            fail(e, "invalid_body", "body.stream", "stream is not supported in a batch");
        else
            bad = false;
        if (bad) {
            cJSON_Delete(out);
            out = NULL;
        }
    }
    cJSON_Delete(j);
    return out;
}

/* Add s as a string member, its invalid UTF-8 (if any) each replaced by U+FFFD. */
static void add_clean_string(cJSON *o, const char *name, const char *s)
{
    const size_t n = strlen(s);
    if (json_utf8_valid(s, n)) {
        cJSON_AddStringToObject(o, name, s);
        return;
    }
    char *buf = NULL;
    size_t len = 0, cap = 0;
    json_utf8_append(&buf, &len, &cap, s, n, NULL);
    cJSON_AddStringToObject(o, name, buf);
    free(buf);
}

char *batch_line_output(const char *id, const char *custom_id, int status,
                        const char *request_id, cJSON *body, const char *err_code,
                        const char *err_message)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", id);
    /* Ids from batch_line_parse are clean; one read back from a store written before
     * it checked them may not be, and one bad line must not spoil the whole file. */
    if (custom_id) add_clean_string(o, "custom_id", custom_id);
    else cJSON_AddNullToObject(o, "custom_id");
    if (body) {
        cJSON *resp = cJSON_AddObjectToObject(o, "response");
        cJSON_AddNumberToObject(resp, "status_code", status);
        if (request_id) cJSON_AddStringToObject(resp, "request_id", request_id);
        else cJSON_AddNullToObject(resp, "request_id");
        cJSON_AddItemToObject(resp, "body", body);
    } else {
        cJSON_AddNullToObject(o, "response");
    }
    if (err_code) {
        cJSON *e = cJSON_AddObjectToObject(o, "error");
        cJSON_AddStringToObject(e, "code", err_code);
        add_clean_string(e, "message", err_message ? err_message : "");
    } else {
        cJSON_AddNullToObject(o, "error");
    }
    char *s = json_print(o, NULL);
    cJSON_Delete(o);
    return s;
}

static uint64_t str_hash(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

bool batch_line_idset_add(struct batch_line_idset *set, const char *s)
{
    if (2 * (set->n + 1) > set->cap) {
        struct batch_line_idset bigger = {.cap = set->cap ? 2 * set->cap : 1024,
                                          .n = set->n};
        bigger.slot = xcalloc(bigger.cap, sizeof *bigger.slot);
        for (size_t i = 0; i < set->cap; i++)
            if (set->slot[i]) {
                size_t j = str_hash(set->slot[i]) & (bigger.cap - 1);
                while (bigger.slot[j]) j = (j + 1) & (bigger.cap - 1);
                bigger.slot[j] = set->slot[i];
            }
        free(set->slot);
        *set = bigger;
    }
    size_t j = str_hash(s) & (set->cap - 1);
    for (; set->slot[j]; j = (j + 1) & (set->cap - 1))
        if (strcmp(set->slot[j], s) == 0) return false;
    set->slot[j] = xstrdup(s);
    set->n++;
    return true;
}

void batch_line_idset_free(struct batch_line_idset *set)
{
    for (size_t i = 0; i < set->cap; i++) free(set->slot[i]);
    free(set->slot);
    memset(set, 0, sizeof *set);
}
