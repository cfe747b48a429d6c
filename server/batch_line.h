/*
 * batch_line.h - one line of the OpenAI Batch format, in and out, shared by
 * `h2oserve run-batch` and the server's Batches API so both read and write exactly
 * the same lines.
 *
 * Input:  {"custom_id":"r1","method":"POST","url":"/v1/completions","body":{...}}
 * Output: {"id":"batch_req_...","custom_id":"r1","response":{"status_code":200,
 *          "request_id":"cmpl-...","body":{...}},"error":null}
 * A line that is not a request at all has "response":null and an error
 * {"code","message"}; a request the API refuses has its error body as the response.
 *
 * Thread: any (no shared state; each set belongs to its caller).
 */
#ifndef H2O_SERVER_BATCH_LINE_H
#define H2O_SERVER_BATCH_LINE_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

/* Why a line is not a request. code is a static string. */
struct batch_line_error {
    const char *code;  /* invalid_json, missing_custom_id, invalid_custom_id,
                          invalid_method, invalid_url, invalid_body, model_not_found
                          (duplicate_custom_id is the caller's: batch_line_idset) */
    char param[160];   /* the field at fault ("custom_id", "body.prompt[1]"), or "" */
    char message[280];
};

/* The endpoints a Batch line may name. */
#define BATCH_LINE_COMPLETIONS "/v1/completions"
#define BATCH_LINE_CHAT "/v1/chat/completions"

/*
 * Check one input line: one JSON object (json_parse_checked: valid UTF-8 throughout,
 * no U+0000 in any string, nothing after it) with a non-empty string custom_id,
 * method POST, url equal to `endpoint` (NULL: either endpoint above, as
 * `h2oserve run-batch` and vLLM's run_batch take them line by line), and an object
 * body. *chat (when not NULL) says whether the url is the chat endpoint. A bad string
 * is the fault of the member it is in (invalid_custom_id; invalid_body with param
 * "body.prompt"; ...). When `model` is not NULL the body's "model" must equal it,
 * and "stream": true is refused. Returns the body (detached from the line; caller
 * owns it, cJSON_Delete), or NULL with *e filled. *custom_id is a heap copy of the
 * line's custom_id whenever it is a string (also on error; NULL otherwise, and NULL
 * for a line json_parse_checked refuses, so an id that is not clean UTF-8 never
 * reaches an output line). Uniqueness is the caller's (batch_line_idset).
 * Owns: the caller owns the returned body and *custom_id. Thread: any.
 */
cJSON *batch_line_parse(const char *text, size_t len, const char *endpoint,
                        const char *model, char **custom_id, bool *chat,
                        struct batch_line_error *e);

/* Whether a line holds nothing but whitespace (skipped: not a request). Both ways
 * in (batch_check.c, run_batch.c) skip exactly these lines. */
bool batch_line_blank(const char *text, size_t len);

/*
 * An output line (no newline; heap, caller frees): `id`, custom_id (NULL -> null),
 * and either a response {status_code, request_id (NULL -> null), body} when `body`
 * is not NULL (taken: the line owns it then) or response null, and error
 * {code, message} when err_code is not NULL (else null). Always valid UTF-8: bytes of
 * custom_id or err_message that are not become U+FFFD. Thread: any.
 */
char *batch_line_output(const char *id, const char *custom_id, int status,
                        const char *request_id, cJSON *body, const char *err_code,
                        const char *err_message);

/* A set of custom_ids (open addressing, strings copied). Zero-initialise. */
struct batch_line_idset {
    char **slot;
    size_t cap, n;
};

/* Insert s; false when it was already there. Thread: the set's owner. */
bool batch_line_idset_add(struct batch_line_idset *set, const char *s);

/* Free the set's strings and table (the set may be reused after). */
void batch_line_idset_free(struct batch_line_idset *set);

#endif
