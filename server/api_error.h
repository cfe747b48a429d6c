/*
 * api_error.h - the OpenAI error a handler hands the HTTP layer when a request
 * cannot be served: a status and the four fields of OpenAI's error object,
 *   {"error":{"message":"...","type":"invalid_request_error","param":"n","code":null}}
 * with all four keys always present (null when absent), because the official SDKs
 * read `param` and `code` without checking that they exist.
 *
 * Owns: an api_error owns its message and param (heap copies); type and code are
 * static strings. The bodies it returns are heap buffers the caller frees.
 * Invariant: status is 0 exactly while no error is set (a zeroed or cleared error).
 * Thread: any (no state).
 */
#ifndef H2O_SERVER_API_ERROR_H
#define H2O_SERVER_API_ERROR_H

#include <cjson/cJSON.h>

#include <stddef.h>

/*
 * OpenAI's error types. OpenAI answers most client mistakes, 401 (code
 * "invalid_api_key") and 404 (code "model_not_found") included, with
 * invalid_request_error; failures on our side are server_error.
 */
#define API_ERR_INVALID "invalid_request_error"
#define API_ERR_SERVER "server_error"

struct api_error {
    int status;       /* HTTP status, 0 while no error is set */
    const char *type; /* one of API_ERR_* (static) */
    char *message;    /* owned; one sentence for the user */
    char *param;      /* owned; the request field at fault, or NULL */
    const char *code; /* static, e.g. "context_length_exceeded", or NULL */
};

/*
 * Set `e` (freeing what it held): status, type, param (copied; may be NULL), code
 * (static; may be NULL) and a printf-formatted message. Returns -1 so that a parser
 * can `return api_error_set(...)`.
 * Thread: any.
 */
int api_error_set(struct api_error *e, int status, const char *type, const char *param,
                  const char *code, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

/* The 400 for a value out of range or otherwise wrong (param = the field), with a
 * printf-formatted message. Returns -1, like api_error_set. */
#define API_BAD_VALUE(e, param, ...) \
    api_error_set((e), 400, API_ERR_INVALID, (param), NULL, __VA_ARGS__)

/* Free the message and param and zero `e`. A zeroed or cleared error is fine.
 * Thread: any. */
void api_error_clear(struct api_error *e);

/* Move `src` into `dst` (dst's old contents are freed, src is left zeroed).
 * Thread: any. */
void api_error_move(struct api_error *dst, struct api_error *src);

/*
 * The error body {"error":{"message","type","param","code"}} for `e`, unformatted,
 * NUL-terminated; *len (may be NULL) gets its length. Caller frees.
 * Thread: any.
 */
char *api_error_json(const struct api_error *e, size_t *len);

/* The cJSON object {"error":{...}} for `e` (caller deletes). Thread: any. */
cJSON *api_error_object(const struct api_error *e);

#endif
