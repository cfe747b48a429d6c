/*
 * batchrun_impl.h - what the batch runner's two halves share: the jobs the loop
 * side (batchrun.c) hands to the store side (batchrun_jobs.c) through a storeq.
 *
 * A job carries copies in (ids, the owner name, results to commit) and brings
 * values out (claimed requests, a status, an error and its message); the store side
 * reads nothing else, so it may run on the thread pool while the loop goes on.
 * Batches are named by id, never by pointer: by the time a job is done its batch
 * may be gone from the loop's list.
 *
 * Private to batchrun*.c.
 */
#ifndef H2O_SERVER_BATCHRUN_IMPL_H
#define H2O_SERVER_BATCHRUN_IMPL_H

#include "batch_check.h"
#include "jobstore.h"
#include "storeq.h"

#include <stdbool.h>
#include <stdint.h>

struct batchrun;
struct br_check;

/* One answered request waiting to be committed: the line and its file (ok:
 * output, else error). Owns its strings. */
struct br_result {
    char *custom_id;
    char *line;
    bool ok;
};

/* What became of a result a commit job carried. */
enum br_outcome {
    BR_KEPT,      /* not written (the store failed first): commit it again later */
    BR_COMMITTED, /* in the output or error file, counted */
    BR_REFUSED,   /* answered before (another replica, after our lease ran out) or
                     the batch takes no more results (cancelled, expired): dropped */
};

enum br_job_kind {
    BRJ_CLAIM,     /* claim up to `max` requests; when none, the batch's status, and
                      completed when every request is answered */
    BRJ_COMMIT,    /* record `results` (one store call, then one by one if refused) */
    BRJ_RENEW,     /* renew our leases; the batch's status */
    BRJ_STOP,      /* release our leases; then move to `to` when set_to */
    BRJ_EXPIRE,    /* release our leases, what nobody holds -> batch_expired, and
                      expired once every request is answered (else in_progress:
                      another replica expires what it holds, or its leases run out) */
    BRJ_FAIL_FULL, /* settle what the store holds, then failed: insufficient_storage */
    BRJ_SCAN,      /* the unfinished batches, moving on those nobody needs to run */
    BRJ_INPUT,     /* a validation's start: the batch, and its input file opened */
    BRJ_CHECKED,   /* a validation's end: store its requests (or errors), in_progress */
};

struct br_job {
    struct storeq_job q;
    struct batchrun *br;
    enum br_job_kind kind;
    char batch_id[JOBSTORE_ID_MAX];
    const char *owner; /* the runner's (it outlives every job) */
    int64_t lease_s;

    /* in */
    int max;                    /* CLAIM */
    struct br_result *results;  /* COMMIT: [n_results], the job's until done */
    int n_results;
    enum jobstore_status to;    /* STOP, when set_to */
    bool set_to;
    bool validating;            /* FAIL_FULL: the batch never stored its requests */
    struct br_check *check;     /* INPUT, CHECKED: the validation (loop-owned struct;
                                   the store side fills chk.in / reads chk's results) */

    /* out */
    int err;                     /* 0, or the first store error */
    char *msg;                   /* its message (heap), for the loop's log */
    struct jobstore_request *reqs; /* CLAIM: [n_reqs] claimed, the job's until done */
    int n_reqs;
    enum br_outcome *outcome;    /* COMMIT: [n_results] */
    int n_refused;               /* COMMIT, EXPIRE: results already answered */
    bool have_status;            /* CLAIM (when none claimed), RENEW, STOP, EXPIRE,
                                    INPUT, CHECKED: status is the batch's now */
    enum jobstore_status status;
    int64_t expires_at;          /* CHECKED */
    int64_t renewed, released;   /* RENEW, STOP / EXPIRE */
    struct jobstore_batch *batches; /* SCAN: [n_batches], statuses after its moves */
    int n_batches;
};

/* A validation in flight: its store jobs, then batch_check_file on the pool. */
struct br_check {
    struct br_check *next; /* the runner's list */
    uv_work_t work;
    struct batchrun *br;
    char batch_id[JOBSTORE_ID_MAX];
    struct batch_check chk;
};

/* Run job j's store work (storeq's work callback for every kind). Thread: the
 * store's (pool or loop). */
void batchrun_job_work(struct jobstore *js, struct storeq_job *q);

/* Free what a job owns (results, claimed requests, batches, message) and the job.
 * Thread: loop. */
void batchrun_job_free(struct br_job *j);

#endif
