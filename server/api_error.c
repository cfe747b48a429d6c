/*
 * api_error.c - the OpenAI error object (see api_error.h).
 * Thread: any.
 */
#include "api_error.h"

#include "util.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int api_error_set(struct api_error *e, int status, const char *type, const char *param,
                  const char *code, const char *fmt, ...)
{
    api_error_clear(e);
    e->status = status;
    e->type = type;
    e->param = param ? xstrdup(param) : NULL;
    e->code = code;
    va_list ap;
    va_start(ap, fmt);
    char *msg = NULL;
    int n = vasprintf(&msg, fmt, ap); /* GNU; sizes the buffer in one pass */
    va_end(ap);
    e->message = n >= 0 ? msg : xstrdup("error");
    return -1;
}

void api_error_clear(struct api_error *e)
{
    free(e->message);
    free(e->param);
    memset(e, 0, sizeof *e);
}

void api_error_move(struct api_error *dst, struct api_error *src)
{
    api_error_clear(dst);
    *dst = *src;
    memset(src, 0, sizeof *src);
}

/* A string item, or null for NULL. */
static cJSON *string_or_null(const char *s)
{
    return s ? cJSON_CreateString(s) : cJSON_CreateNull();
}

cJSON *api_error_object(const struct api_error *e)
{
    cJSON *root = cJSON_CreateObject();
    cJSON *err = cJSON_CreateObject();
    cJSON_AddItemToObject(root, "error", err);
    /* An error without a message would leave the user guessing; say so at least. */
    cJSON_AddItemToObject(err, "message",
                          cJSON_CreateString(e->message ? e->message : "unknown error"));
    cJSON_AddItemToObject(err, "type",
                          cJSON_CreateString(e->type ? e->type : API_ERR_SERVER));
    cJSON_AddItemToObject(err, "param", string_or_null(e->param));
    cJSON_AddItemToObject(err, "code", string_or_null(e->code));
    return root;
}

char *api_error_json(const struct api_error *e, size_t *len)
{
    /* Printed here rather than with json_print: json.c reads errors, and this file
     * stays below it. */
    cJSON *root = api_error_object(e);
    char *s = cJSON_PrintUnformatted(root);
    CHECK(s != NULL); /* cJSON fails only when malloc does */
    cJSON_Delete(root);
    if (len) *len = strlen(s);
    return s;
}

