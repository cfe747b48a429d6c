/*
 * reply.h - the small response helpers every route handler uses.
 * Owns: nothing; each answers an exchange through conn.h.
 * Thread: loop.
 */
#ifndef H2O_SERVER_REPLY_H
#define H2O_SERVER_REPLY_H

#include "conn.h"

#include <cjson/cJSON.h>

#include <stdbool.h>

/* An OpenAI error response: status, optional error code, a message made of fmt
 * with one %s argument (NULL arg reads as ""). Thread: loop. */
void reply_error(struct exch *x, int status, const char *code, const char *fmt,
                 const char *arg);

/* A 200 JSON response of obj, which this frees. Thread: loop. */
void reply_json(struct exch *x, cJSON *obj);

/* The error response for a failed job store call: ENG_ENOTFOUND 404 and
 * ENG_EINVAL 400 with err_msg(); JOBSTORE_EFULL 507 (code "insufficient_storage")
 * saying that the server is out of space; anything else is logged and answered 500
 * without the details. Thread: loop. */
void reply_store_error(struct exch *x, int err);

/* The 503 for Files and Batches while the job store is not open (srv->js NULL: the
 * data dir was full at start-up; batchrun opens it once space is freed), code
 * "insufficient_storage", saying so. Thread: loop. */
void reply_store_closed(struct exch *x);

/* 405 unless the method is `method`; true when it is. Thread: loop. */
bool reply_method_is(struct exch *x, const char *method);

#endif
