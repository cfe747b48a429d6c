/*
 * batchrun_impl.h - what the batch runner's parts share: the jobs the loop side
 * (batchrun.c, with its lines in flight in batchrun_line.c) hands to the store side
 * (batchrun_jobs.c) through a storeq, and the loop side's state.
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
#include "batchrun.h"
#include "cmpl.h"
#include "jobstore.h"
#include "storeq.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

struct batchrun;
struct br_check;
struct cmpl_resp;

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

/* ---- batchrun.c and batchrun_line.c: the loop side's state ---- */

/* A request line in flight: engine ids base_id .. base_id + n_prompts - 1, each
 * registered with the bridge (context: the line) until the line is dropped. */
struct br_line {
    struct batchrun *br;
    struct br_batch *b;
    char *custom_id;
    struct cmpl_params params;
    struct cmpl_resp *resp;
    uint64_t base_id;
    int32_t n_prompts;
    char request_id[JOBSTORE_ID_MAX];
};

enum br_phase { BR_RUN, BR_END, BR_EXPIRE, BR_FULL };

struct br_batch {
    struct br_batch *next;
    char id[JOBSTORE_ID_MAX];
    int64_t expires_at;
    enum br_phase phase;
    bool end_cancel;                /* END: move it to cancelled after the release */
    struct jobstore_request *queue; /* claimed, not started: [i_queue, n_queue) */
    int n_queue, i_queue;
    struct br_result *results;      /* answered, waiting for a commit job */
    int n_results, cap_results;
    int32_t n_lines;                /* lines in flight */
    int32_t n_committing;           /* results in the commit job in flight */
    bool claiming, committing, renewing, closing; /* a job of that kind in flight */
    uint64_t claim_at, commit_at, renew_at, close_at; /* uv_now(): not before */
};

struct batchrun {
    struct srv *s;
    struct jobstore *js;     /* the runner's store: its own when shared, else s->js */
    bool own_js;
    struct storeq *q;        /* NULL until the store is open */
    char owner[JOBSTORE_OWNER_MAX];
    int64_t lease_s;
    uint64_t renew_ms, scan_ms;
    struct br_batch *head;   /* oldest first */
    struct br_line **lines;  /* in flight, by ascending base_id */
    int32_t n_lines, cap_lines;
    int32_t n_reqs;          /* engine requests in flight */
    struct br_check *checks; /* validations in flight */
    int32_t n_checks;
    bool claiming;           /* one claim job at a time */
    bool scanning, scanned;  /* a scan in flight; the first one done */
    uint64_t scan_at;
    bool stopped;            /* draining: nothing more goes to the engine */
    bool closed;             /* batchrun_close: no more store jobs */
    atomic_bool checks_stop; /* draining: validations give up (read on the pool) */
    bool store_failed;       /* SQLite: a result could not be recorded: stop until a
                                restart */
    uint64_t retry_at;       /* uv_now() of the next try to open a store that was full */
    uint64_t log_at;         /* store failures: the next one logged, and how many */
    int64_t log_skipped;     /*   were not since */
    struct batchrun_stats st;
};

/* Parse request r of batch b and hand it to the engine (a line in br->lines), or
 * keep why not as its error result. Thread: loop. */
void batchrun_line_start(struct batchrun *br, struct br_batch *b,
                         const struct jobstore_request *r);

/* Forget line k: its ids leave the bridge's registry (so late events are dropped),
 * and its engine requests are cancelled when `cancel`. Thread: loop. */
void batchrun_line_drop(struct batchrun *br, int32_t k, bool cancel);

/* Forget every line of b, cancelling its engine requests. Thread: loop. */
void batchrun_line_drop_batch(struct batchrun *br, struct br_batch *b);

/* Keep a result line of b (taken) for the next commit. Thread: loop. */
void batchrun_keep_result(struct br_batch *b, const char *custom_id, bool ok, char *line);

/* Hand every waiting result of b to one commit job, unless one is in flight (its
 * done calls this again) or a retry is not due yet (the tick does). Thread: loop. */
void batchrun_commit_soon(struct batchrun *br, struct br_batch *b);

/* Run job j's store work (storeq's work callback for every kind). Thread: the
 * store's (pool or loop). */
void batchrun_job_work(struct jobstore *js, struct storeq_job *q);

/* Free what a job owns (results, claimed requests, batches, message) and the job.
 * Thread: loop. */
void batchrun_job_free(struct br_job *j);

#endif
