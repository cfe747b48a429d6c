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

/* Why bytes are not one acceptable JSON object (json_parse_checked). */
enum json_fault_kind {
    JSON_FAULT_NONE,
    JSON_FAULT_EMPTY,      /* nothing but whitespace */
    JSON_FAULT_SYNTAX,     /* not JSON, or something other than whitespace after it */
    JSON_FAULT_NOT_OBJECT, /* JSON, but not an object */
    JSON_FAULT_UTF8,       /* a string (member name or value) that is not UTF-8 */
    JSON_FAULT_NUL,        /* a string holding U+0000, escaped or raw */
};

/* Where and why; path and in_key are set for faults inside a string only (UTF8, NUL,
 * and a string's SYNTAX: a bad escape or a raw control byte). */
struct json_fault {
    enum json_fault_kind kind;
    size_t at;      /* byte offset of the fault in the text */
    bool in_key;    /* the fault is in a member name of `path`, not in its value */
    char path[160]; /* the member, from the top-level object: "prompt", "prompt[2]",
                       "body.stop[0]", "metadata.k" ("" = the top-level object itself);
                       names as written in the text, clipped with "..." when long */
};

/*
 * Parse untrusted bytes that must hold one JSON object, with every check the API
 * makes wherever a client's JSON comes in (request bodies, Batch input lines, batch
 * metadata): not empty; valid JSON (RFC 8259) with nothing but whitespace after the
 * value; an object; every string, member names included, well-formed UTF-8 (no
 * overlong forms, no surrogates: cJSON itself refuses unpaired \ud800 escapes); and
 * no string holding U+0000, escaped or raw. cJSON passes invalid bytes through, which
 * would make any echo of them invalid JSON, and its strings end at NUL, so "x\u0000y"
 * would silently read as "x": both are refused here, before anyone reads a field.
 * Where cJSON is looser than RFC 8259 (and than Python's json, so OpenAI's server),
 * this is strict: control bytes in strings, escapes other than RFC 8259's (cJSON
 * reads "\u12G4" as U+0000) and numbers such as "+1", ".5", "01" or "1." are syntax
 * faults. Numbers too large for a double (1e999) parse, as in Python, to infinity,
 * which every range check refuses.
 * Returns the object (caller deletes), or NULL with *f saying what and where.
 * Thread: any.
 */
cJSON *json_parse_checked(const char *text, size_t len, struct json_fault *f);

/*
 * One lower-case phrase for a UTF8 or NUL fault, naming its member:
 * "'prompt[1]' contains U+0000 (NUL), which is not accepted", "a member name in
 * 'metadata' is not valid UTF-8" (no final period). Thread: any.
 */
void json_fault_say(const struct json_fault *f, char *buf, size_t cap);

/*
 * json_parse_checked for a request body: the fault as a 400 in `e` (param null for
 * the body as a whole, else the member at fault: "prompt"). Returns the object
 * (caller deletes) or NULL. Every POST endpoint that takes JSON parses through this.
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

/*
 * Append `f` as a JSON number with the fewest decimal digits that still read back as
 * the same float (-0.1 rather than -0.10000000149011612), so float logprobs print as
 * what they are. Returns the new item (owned by `parent` when it is added): a raw
 * item holding the digits (cJSON_IsRaw, no valuedouble), a number from 1e6 on, null
 * for non-finite values (cJSON's rule). Thread: any.
 */
cJSON *json_float(float f);

#endif
