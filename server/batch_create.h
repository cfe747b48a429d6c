/*
 * batch_create.h - the body of POST /v1/batches, checked: JSON in, the batch's
 * input file, endpoint and metadata out, or the 400 a client gets. Pure (no store,
 * no sockets), so the unit tests and the fuzzer drive it with bytes; api_batches.c
 * then looks the file up and creates the batch.
 * Thread: any (no shared state).
 */
#ifndef H2O_SERVER_BATCH_CREATE_H
#define H2O_SERVER_BATCH_CREATE_H

#include "api_error.h"

#include <stddef.h>

/* OpenAI's metadata limits: 16 pairs, keys up to 64 characters, values up to 512. */
#define BATCH_CREATE_META_PAIRS 16
#define BATCH_CREATE_META_KEY 64
#define BATCH_CREATE_META_VALUE 512

/* A checked request. Every string is a heap copy, valid UTF-8 without NUL. */
struct batch_create {
    char *input_file_id; /* non-empty */
    char *endpoint;      /* "/v1/completions" or "/v1/chat/completions" */
    char *metadata;      /* the metadata object as compact JSON, or NULL when absent
                            or null */
};

/*
 * Check a POST /v1/batches body (len bytes, need not be NUL-terminated): one JSON
 * object (json_parse_object: UTF-8 throughout, no NUL, nothing after it) with a
 * non-empty string input_file_id, endpoint "/v1/completions" or
 * "/v1/chat/completions", completion_window
 * "24h" and an optional metadata object within OpenAI's limits (characters, not
 * bytes). A key given twice takes its last value, as in every other body. The checks
 * go in the order a user would fix them, and the first failure is the answer.
 * Returns 0 with *out filled (batch_create_free), or -1 with *out zeroed and a 400 in
 * *e naming the param. Owns: nothing of body. Thread: any.
 */
int batch_create_parse(const char *body, size_t len, struct batch_create *out,
                       struct api_error *e);

/* Free what *b owns and zero it; a zeroed struct is fine. Thread: any. */
void batch_create_free(struct batch_create *b);

#endif
