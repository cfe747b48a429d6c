/*
 * json.h - the small cJSON helpers every API module shares (completions, files,
 * batches, admin): printing, field access, and the readers of request fields that
 * answer a wrong field with the OpenAI error api_error.h describes.
 *
 * Owns: nothing. Everything that returns a char * returns a heap buffer the caller
 * frees with free() (nothing in h2oserve installs cJSON hooks, so cJSON's
 * allocations are plain malloc).
 * Thread: any (no state).
 */
#ifndef H2O_SERVER_JSON_H
#define H2O_SERVER_JSON_H

#include "api_error.h"

#include <cjson/cJSON.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * The 400 for a field of the wrong type, worded as OpenAI does: "Invalid type for
 * 'n': expected an integer, but got a string instead." (param = the field). Returns
 * -1, like api_error_set.
 */
int json_type_error(struct api_error *e, const char *param, const char *expected,
                    const cJSON *got);

/* An optional boolean field: absent or null (item NULL) leaves *out, its default;
 * anything but true or false is json_type_error's 400. Returns 0 or -1. */
int json_read_bool(const cJSON *item, const char *param, bool *out, struct api_error *e);

/* An optional "model" field (item NULL when absent or null): a string equal to the
 * served id, else 400 (not a string) or 404 model_not_found, worded as OpenAI's.
 * Returns 0 or -1. */
int json_model_check(const cJSON *item, const char *served_id, struct api_error *e);

/*
 * A JSON array of token ids, each an integer in 0..vocab-1, into ids[] (room for
 * cJSON_GetArraySize(arr)). Errors are 400 with `param` as their param and name the
 * element by `name` and its index: "Invalid type for 'prompt[2][0]': expected a token
 * id (integer), but got a string instead." or "Invalid value for 'tokens[3]': -1 is
 * not a token id in 0..50271.". Returns the count, or -1.
 */
int json_read_token_ids(const cJSON *arr, int32_t vocab, const char *param, const char *name,
                       int32_t *ids, struct api_error *e);

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
