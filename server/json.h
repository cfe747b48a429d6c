/*
 * json.h - the OpenAI error body and the small cJSON helpers every API module
 * shares (completions, files, batches, admin).
 *
 * An API error is what a handler hands the HTTP layer when a request cannot be
 * served: a status and the four fields of OpenAI's error object,
 *   {"error":{"message":"...","type":"invalid_request_error","param":"n","code":null}}
 * with all four keys always present (null when absent), because the official SDKs
 * read `param` and `code` without checking that they exist.
 *
 * Owns: an api_error owns its message and param (heap copies); type and code are
 * static strings. Everything that returns a char * returns a heap buffer the caller
 * frees with free() (nothing in h2oserve installs cJSON hooks, so cJSON's
 * allocations are plain malloc).
 * Thread: any (no state).
 */
#ifndef H2O_SERVER_JSON_H
#define H2O_SERVER_JSON_H

#include <cjson/cJSON.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

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

/*
 * The 400 for a field of the wrong type, worded as OpenAI does: "Invalid type for
 * 'n': expected an integer, but got a string instead." (param = the field). Returns
 * -1, like api_error_set.
 */
int api_error_type(struct api_error *e, const char *param, const char *expected,
                   const cJSON *got);

/* The 400 for a value out of range or otherwise wrong (param = the field), with a
 * printf-formatted message. Returns -1, like api_error_set. */
#define API_BAD_VALUE(e, param, ...) \
    api_error_set((e), 400, API_ERR_INVALID, (param), NULL, __VA_ARGS__)

/* An optional boolean field: absent or null (item NULL) leaves *out, its default;
 * anything but true or false is api_error_type's 400. Returns 0 or -1. */
int api_read_bool(const cJSON *item, const char *param, bool *out, struct api_error *e);

/* An optional "model" field (item NULL when absent or null): a string equal to the
 * served id, else 400 (not a string) or 404 model_not_found, worded as OpenAI's.
 * Returns 0 or -1. */
int api_model_check(const cJSON *item, const char *served_id, struct api_error *e);

/*
 * A JSON array of token ids, each an integer in 0..vocab-1, into ids[] (room for
 * cJSON_GetArraySize(arr)). Errors are 400 with `param` as their param and name the
 * element by `name` and its index: "Invalid type for 'prompt[2][0]': expected a token
 * id (integer), but got a string instead." or "Invalid value for 'tokens[3]': -1 is
 * not a token id in 0..50271.". Returns the count, or -1.
 */
int api_read_token_ids(const cJSON *arr, int32_t vocab, const char *param, const char *name,
                       int32_t *ids, struct api_error *e);

/* Free the message and param and zero `e`. A zeroed or cleared error is fine. */
void api_error_clear(struct api_error *e);

/* Move `src` into `dst` (dst's old contents are freed, src is left zeroed). */
void api_error_move(struct api_error *dst, struct api_error *src);

/*
 * The error body {"error":{"message","type","param","code"}} for `e`, unformatted,
 * NUL-terminated; *len (may be NULL) gets its length. Caller frees.
 * Thread: any.
 */
char *api_error_json(const struct api_error *e, size_t *len);

/* The cJSON object {"error":{...}} for `e` (caller deletes). */
cJSON *api_error_object(const struct api_error *e);

/*
 * Print `item` unformatted into a heap buffer; *len (may be NULL) gets its length.
 * Caller frees. Thread: any.
 */
char *json_print(const cJSON *item, size_t *len);

/*
 * Print `item` as one server-sent event: "data: <json>\n\n". Caller frees.
 * Thread: any.
 */
char *json_sse(const cJSON *item, size_t *len);

/* The member `key` of object obj, or NULL when absent or JSON null (null means "the
 * default" for every optional field). A key given twice takes its last value, as
 * Python's json module (and so OpenAI's and vLLM's servers) does. */
const cJSON *json_field(const cJSON *obj, const char *key);

/* "a string", "a number", "an object"... for messages that say what a field was. */
const char *json_type_name(const cJSON *item);

/* Whether `item` is a JSON number with an integral value in [lo, hi] (1.0 counts as
 * an integer: JSON has one number type and JavaScript clients cannot tell them
 * apart). On true, *out gets the value. Infinite values (1e400) are never in range. */
bool json_int_in(const cJSON *item, int64_t lo, int64_t hi, int64_t *out);

/*
 * Whether s[0..n) is well-formed UTF-8 (RFC 3629: no overlong forms, no surrogates,
 * nothing above U+10FFFF). JSON text must be UTF-8 (RFC 8259 section 8.1); cJSON
 * passes any bytes through, and echoing them back would make the response invalid
 * JSON, so the API rejects such bodies up front.
 * Thread: any.
 */
bool json_utf8_valid(const char *s, size_t n);

/*
 * Parse a request body that must hold one JSON object, with the checks every POST
 * endpoint shares: not empty, UTF-8 without a raw NUL (RFC 8259 section 8.1),
 * nothing but whitespace after the value, an object, and no \u0000 escape (cJSON's
 * NUL-terminated strings would silently cut such a string). Returns the object
 * (caller deletes), or NULL with a 400 in `e` that says what is wrong (param null:
 * the body as a whole is at fault).
 * Thread: any.
 */
cJSON *json_parse_object(const char *body, size_t len, struct api_error *e);

/* The length of the longest prefix of s, at most max bytes, that ends on a UTF-8
 * character boundary: for quoting a client's string in a message ("%.*s") without
 * making the message invalid UTF-8. */
int json_clip_len(const char *s, int max);

/* Grow *buf, of capacity *cap bytes, to hold at least `need` bytes (xrealloc:
 * never fails). *buf may start NULL with *cap 0. */
void json_buf_reserve(char **buf, size_t *cap, size_t need);

/*
 * Append s[0..n) to the NUL-terminated text *buf (length *len, capacity *cap) as
 * valid UTF-8: each invalid or unfinished sequence becomes one U+FFFD, as Hugging
 * Face's decode (Python's errors="replace") does, and so does a NUL (cJSON strings
 * end at NUL). Adds the number of characters appended to *n_chars (may be NULL).
 * For any text made of token bytes, which need not be valid UTF-8.
 * Thread: any.
 */
void json_utf8_append(char **buf, size_t *len, size_t *cap, const char *s, size_t n,
                      int64_t *n_chars);

/* Whether the JSON text s[0..n) contains the escape \u0000 (a string with a NUL in
 * it, which cJSON's NUL-terminated strings would silently truncate). */
bool json_has_nul_escape(const char *s, size_t n);

/*
 * Append `f` as a JSON number with the fewest decimal digits that still read back as
 * the same float (-0.1 rather than -0.10000000149011612), so float logprobs print as
 * what they are. Returns the new item (owned by `parent` when it is added). Non-finite
 * values print as null (cJSON's rule).
 */
cJSON *json_float(float f);

#endif
