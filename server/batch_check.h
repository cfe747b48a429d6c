/*
 * batch_check.h - the check of a whole Batches API input file: every line read and
 * validated, the requests kept when all of them are good, the errors of the bad
 * ones otherwise (all or nothing: a batch never runs part of a bad file).
 *
 * Why a file of its own: it runs on libuv's thread pool (a 200 MB file must not
 * stall the loop), so it touches no server state: its input is copied in, its
 * results stay in the struct until the loop takes them (batchrun.c).
 * Owns (struct batch_check): the input stream (jobstore_file_open's, which may be
 * read on any thread), its copies of endpoint and model, the requests it kept and
 * the error list; batch_check_deinit frees them.
 * Thread: batch_check_file on a pool thread; the rest wherever the struct is.
 */
#ifndef H2O_SERVER_BATCH_CHECK_H
#define H2O_SERVER_BATCH_CHECK_H

#include "jobstore.h"

#include <cjson/cJSON.h>

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* Validation errors listed on a failed batch; the count of the rest is noted. */
#define BATCH_CHECK_MAX_ERRORS 100

struct batch_check {
    /* in: set before batch_check_file (owned) */
    FILE *in;               /* the input file's body; NULL: it cannot be read */
    char *endpoint, *model; /* heap copies */
    int32_t max_requests;
    const atomic_bool *stop;       /* true: the server is stopping, give up */
    /* out: filled by batch_check_file */
    struct jobstore_request *reqs; /* [n_reqs], in line order, when no line failed */
    int n_reqs, cap_reqs;
    cJSON *errors;                 /* array of {code, message, param, line} */
    int64_t n_errors;
    bool abandoned;                /* stopped early: the batch stays validating */
    bool read_failed;              /* a read failed (file_unreadable is listed); on a
                                      shared store that is a connection that may come
                                      back, and the runner tries again later */
};

/* Read and check every line of c->in (closed when done). Thread: any (a pool
 * thread). */
void batch_check_file(struct batch_check *c);

/* The failed batch's "errors" as JSON text ({"object":"list","data":[...]}, with a
 * too_many_errors entry when more than BATCH_CHECK_MAX_ERRORS were found); takes
 * the list out of c. Caller frees. Thread: any. */
char *batch_check_errors_json(struct batch_check *c);

/* Free what c owns (not c). Thread: any. */
void batch_check_deinit(struct batch_check *c);

#endif
