/*
 * batchrun_jobs.c - the batch runner's store side: what each job (batchrun_impl.h)
 * does with the store, on the store's thread (libuv's pool for PostgreSQL, the loop
 * for SQLite; storeq.h).
 *
 * Everything here is a few store calls whose rules jobstore.h gives; what this file
 * adds is how the runner reads their outcomes when other replicas race it:
 *  - A state change another replica made first is not an error: the batch is read
 *    again and the job reports where it is now (settle). Two replicas finishing,
 *    cancelling or expiring the same batch at once both succeed, one of them by
 *    finding it done.
 *  - A group of results is one store call (one transaction, one fsync). The store
 *    refuses the whole group when one of them was answered already (another
 *    replica ran it after our lease ran out, or the batch was cancelled or
 *    expired), so then each is committed alone, and only those are dropped.
 * Owns: nothing; a job's memory is its submitter's. Thread: the store's.
 */
#include "batchrun_impl.h"

#include "batch_line.h"

#include "err.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Requests turned into batch_expired lines per store call. */
#define EXPIRE_PAGE 1024

static void fail(struct br_job *j, int err)
{
    if (j->err) return; /* the first one is the cause */
    j->err = err;
    free(j->msg);
    j->msg = xstrdup(err_msg());
}

/* Move the batch to `to`; when the state machine refuses (another replica moved it
 * first), read where it is instead. j->status: the batch's status after. */
static int settle(struct jobstore *js, struct br_job *j, enum jobstore_status to,
                  const char *errors)
{
    int err = jobstore_batch_set_status(js, j->batch_id, to, errors);
    if (!err) {
        j->status = to;
        j->have_status = true;
        return 0;
    }
    if (err != ENG_EINVAL) return err;
    struct jobstore_batch b;
    err = jobstore_batch_get(js, j->batch_id, &b);
    if (err) return err;
    j->status = b.status;
    j->have_status = true;
    jobstore_batch_deinit(&b);
    return 0;
}

/* Read the batch into *b (caller deinits) and note its status in j; false, with j
 * failed, when it cannot be read. */
static bool read_batch(struct jobstore *js, struct br_job *j, struct jobstore_batch *b)
{
    int err = jobstore_batch_get(js, j->batch_id, b);
    if (err) {
        fail(j, err);
        return false;
    }
    j->status = b->status;
    j->have_status = true;
    return true;
}

/* ---- claims ---- */

static void claim(struct jobstore *js, struct br_job *j)
{
    int err = jobstore_batch_claim(js, j->batch_id, j->owner, j->lease_s, j->max, &j->reqs,
                                   &j->n_reqs);
    if (err || j->n_reqs > 0) {
        if (err) fail(j, err);
        return;
    }
    /* Nothing to claim: the rest is leased to others (or to us), or every request
     * is answered, or the batch is not in_progress any more. */
    struct jobstore_batch b;
    if (!read_batch(js, j, &b)) return;
    const bool answered = b.completed + b.failed >= b.total;
    const bool late = b.expires_at && (int64_t)time(NULL) >= b.expires_at;
    jobstore_batch_deinit(&b);
    if (j->status != JOBSTORE_IN_PROGRESS || !answered) return;
    /* Past its window, the last answers may be another replica's batch_expired
     * lines: the batch is expired, not completed (so is one whose last result came
     * just before the window closed and was seen just after). */
    if (late) {
        err = settle(js, j, JOBSTORE_EXPIRED, NULL);
        if (err) fail(j, err);
        return;
    }
    /* The last result is in, whoever wrote it: finish the batch (the two steps
     * OpenAI shows; a replica that died between them left it finalizing, which
     * the scan completes). */
    err = settle(js, j, JOBSTORE_FINALIZING, NULL);
    if (!err && j->status == JOBSTORE_FINALIZING) err = settle(js, j, JOBSTORE_COMPLETED, NULL);
    if (err) fail(j, err);
}

static void renew(struct jobstore *js, struct br_job *j)
{
    int err = jobstore_batch_renew(js, j->batch_id, j->owner, j->lease_s, &j->renewed,
                                   &j->status);
    if (err)
        fail(j, err);
    else
        j->have_status = true;
}

static int release(struct jobstore *js, struct br_job *j)
{
    int err = jobstore_batch_release(js, j->batch_id, j->owner, &j->released);
    return err == ENG_ENOTFOUND ? 0 : err; /* deleted meanwhile: nothing is held */
}

static void stop(struct jobstore *js, struct br_job *j)
{
    int err = release(js, j);
    if (!err && j->set_to) err = settle(js, j, j->to, NULL);
    if (err) fail(j, err);
}

/* ---- results ---- */

/* Record rs[0..n) (outcomes in out), the group at once, else one at a time. Returns
 * 0 when each was committed or refused, or the store's error (those not reached
 * stay BR_KEPT). */
static int commit_results(struct jobstore *js, struct br_job *j,
                          const struct jobstore_result *rs, int n, enum br_outcome *out)
{
    for (int i = 0; i < n; i++) out[i] = BR_KEPT;
    int err = jobstore_batch_append_results(js, j->batch_id, rs, n);
    if (!err) {
        for (int i = 0; i < n; i++) out[i] = BR_COMMITTED;
        return 0;
    }
    if (err != ENG_EINVAL) return err;
    for (int i = 0; i < n; i++) {
        err = jobstore_batch_append_result(js, j->batch_id, rs[i].custom_id, rs[i].ok,
                                           rs[i].line);
        if (err == ENG_EINVAL) {
            out[i] = BR_REFUSED;
            j->n_refused++;
        } else if (err) {
            return err;
        } else {
            out[i] = BR_COMMITTED;
        }
    }
    return 0;
}

static void commit(struct jobstore *js, struct br_job *j)
{
    const int n = j->n_results;
    struct jobstore_result *rs = xcalloc((size_t)n, sizeof *rs);
    for (int i = 0; i < n; i++)
        rs[i] = (struct jobstore_result){j->results[i].custom_id, j->results[i].ok,
                                         j->results[i].line};
    j->outcome = xcalloc((size_t)n, sizeof *j->outcome);
    int err = commit_results(js, j, rs, n, j->outcome);
    if (err) fail(j, err);
    free(rs);
}

/* Past its window: what did not run goes to the error file as batch_expired, then
 * the batch is expired. Every replica that runs the batch does this at the same
 * time, so each takes its part as it would take work: it gives back its own
 * leases, then claims what nobody holds (a page at a time) and answers it
 * batch_expired. Requests another replica still holds are that replica's to
 * expire; once every request is answered, whoever sees it first moves the batch
 * to expired. Until then the job reports in_progress and the loop tries again. */
static void expire(struct jobstore *js, struct br_job *j)
{
    int err = release(js, j);
    while (!err) {
        struct jobstore_request *rs;
        int n;
        err = jobstore_batch_claim(js, j->batch_id, j->owner, j->lease_s, EXPIRE_PAGE, &rs, &n);
        if (err) break;
        if (n == 0) {
            jobstore_requests_free(rs, n); /* an empty array on some stores */
            break;
        }
        struct jobstore_result *lines = xcalloc((size_t)n, sizeof *lines);
        for (int i = 0; i < n; i++) {
            char id[JOBSTORE_ID_MAX];
            jobstore_new_id("batch_req_", id, sizeof id);
            lines[i] = (struct jobstore_result){
                rs[i].custom_id, false,
                batch_line_output(id, rs[i].custom_id, 0, NULL, NULL, "batch_expired",
                                  "This request could not be executed before the "
                                  "completion window expired.")};
        }
        enum br_outcome *out = xcalloc((size_t)n, sizeof *out);
        err = commit_results(js, j, lines, n, out);
        for (int i = 0; i < n; i++) free((char *)lines[i].line);
        free(lines);
        free(out);
        jobstore_requests_free(rs, n);
    }
    struct jobstore_batch b;
    if (err) {
        fail(j, err);
        return;
    }
    if (!read_batch(js, j, &b)) return;
    const bool answered = b.completed + b.failed >= b.total;
    jobstore_batch_deinit(&b);
    if (answered && j->status == JOBSTORE_IN_PROGRESS)
        err = settle(js, j, JOBSTORE_EXPIRED, NULL);
    if (err) fail(j, err);
}

/* The `errors` of a batch that failed for want of space (OpenAI's list of
 * {code, message, param, line}). Caller frees. */
static char *full_errors_json(void)
{
    cJSON *list = cJSON_CreateObject();
    cJSON_AddStringToObject(list, "object", "list");
    cJSON *data = cJSON_AddArrayToObject(list, "data");
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "code", "insufficient_storage");
    cJSON_AddStringToObject(e, "message",
                            "The batch's results could not be written: the server has no "
                            "space left on device in its data directory. Results written "
                            "before that are in the output and error files; the requests "
                            "not answered did not run.");
    cJSON_AddNullToObject(e, "param");
    cJSON_AddNullToObject(e, "line");
    cJSON_AddItemToArray(data, e);
    char *text = cJSON_PrintUnformatted(list);
    cJSON_Delete(list);
    return text;
}

/* Failed with the insufficient_storage error, after settling the results the store
 * wrote but could not count (jobstore_batch_recover; a no-op when there are none).
 * The disk is full, so these writes may fail too: then the reserve is given back
 * and they are tried once more. */
static void fail_full(struct jobstore *js, struct br_job *j)
{
    char *errors = full_errors_json();
    int err = 0;
    for (int attempt = 0; attempt < 2; attempt++) {
        err = j->validating ? 0 : jobstore_batch_recover(js, j->batch_id);
        if (!err) err = settle(js, j, JOBSTORE_FAILED, errors);
        if (err != JOBSTORE_EFULL || !jobstore_release_reserve(js)) break;
    }
    free(errors);
    if (err) fail(j, err);
}

/* ---- finding work ---- */

/* The unfinished batches, and on the way the moves nobody else needs to make:
 * a cancelling batch becomes cancelled (whoever cancelled it may have died before
 * it did), a finalizing one completed, and a validating one whose requests are
 * stored in_progress (its validator died between the two commits). Each listed
 * batch's status is the one after. */
static void scan(struct jobstore *js, struct br_job *j)
{
    int err = jobstore_unfinished_batches(js, &j->batches, &j->n_batches);
    for (int i = 0; !err && i < j->n_batches; i++) {
        struct jobstore_batch *b = &j->batches[i];
        enum jobstore_status to;
        if (b->status == JOBSTORE_CANCELLING)
            to = JOBSTORE_CANCELLED;
        else if (b->status == JOBSTORE_FINALIZING)
            to = JOBSTORE_COMPLETED;
        else if (b->status == JOBSTORE_VALIDATING && b->total > 0)
            to = JOBSTORE_IN_PROGRESS;
        else
            continue;
        snprintf(j->batch_id, sizeof j->batch_id, "%s", b->id);
        err = settle(js, j, to, NULL);
        if (!err) b->status = j->status;
    }
    j->batch_id[0] = '\0';
    j->have_status = false;
    if (err) fail(j, err);
}

/* ---- validation ---- */

static void input(struct jobstore *js, struct br_job *j)
{
    struct jobstore_batch b;
    if (!read_batch(js, j, &b)) return;
    if (b.status == JOBSTORE_VALIDATING) {
        struct batch_check *c = &j->check->chk;
        c->endpoint = xstrdup(b.endpoint);
        /* A stream of its own: the pool thread reads it while the store goes on. A
         * file that cannot be opened is checked as missing (c->in NULL), unless the
         * database was out of reach: then the batch waits for a later try. */
        int64_t bytes;
        int err = jobstore_file_open(js, b.input_file_id, &c->in, &bytes);
        if (err == ENG_EUNAVAILABLE) {
            fail(j, err);
        } else if (err) {
            free(j->msg);
            j->msg = xstrdup(err_msg()); /* logged; the check reports it */
        }
    }
    jobstore_batch_deinit(&b);
}

static void checked(struct jobstore *js, struct br_job *j)
{
    struct batch_check *c = &j->check->chk;
    struct jobstore_batch b;
    if (!read_batch(js, j, &b)) return;
    j->expires_at = b.expires_at;
    int err = 0;
    if (b.status == JOBSTORE_CANCELLING) {
        err = settle(js, j, JOBSTORE_CANCELLED, NULL);
    } else if (b.status == JOBSTORE_VALIDATING && c->read_failed && jobstore_shared(js)) {
        /* The database's stream broke, most likely its connection: not the file's
         * fault, so the batch stays validating for a later try. */
        err = err_set(ENG_EUNAVAILABLE, "the input file's stream broke off");
    } else if (b.status == JOBSTORE_VALIDATING && c->n_errors > 0) {
        char *text = batch_check_errors_json(c);
        err = settle(js, j, JOBSTORE_FAILED, text);
        free(text);
    } else if (b.status == JOBSTORE_VALIDATING) {
        /* Refused when another replica validated it first: settle then finds it
         * in_progress (or further). */
        err = jobstore_batch_add_requests(js, b.id, c->reqs, c->n_reqs);
        if (!err || err == ENG_EINVAL) err = settle(js, j, JOBSTORE_IN_PROGRESS, NULL);
        if (err == JOBSTORE_EFULL) {
            /* No room for its requests: it fails with the cause (or, if even that
             * does not fit, stays validating and is validated again later). */
            j->validating = true;
            fail_full(js, j);
            err = 0;
        }
    }
    jobstore_batch_deinit(&b);
    if (err) fail(j, err);
}

void batchrun_job_work(struct jobstore *js, struct storeq_job *q)
{
    struct br_job *j = (struct br_job *)q;
    switch (j->kind) {
    case BRJ_CLAIM: claim(js, j); break;
    case BRJ_COMMIT: commit(js, j); break;
    case BRJ_RENEW: renew(js, j); break;
    case BRJ_STOP: stop(js, j); break;
    case BRJ_EXPIRE: expire(js, j); break;
    case BRJ_FAIL_FULL: fail_full(js, j); break;
    case BRJ_SCAN: scan(js, j); break;
    case BRJ_INPUT: input(js, j); break;
    case BRJ_CHECKED: checked(js, j); break;
    }
}

void batchrun_job_free(struct br_job *j)
{
    for (int i = 0; i < j->n_results; i++) {
        free(j->results[i].custom_id);
        free(j->results[i].line);
    }
    free(j->results);
    free(j->outcome);
    jobstore_requests_free(j->reqs, j->n_reqs);
    jobstore_batches_free(j->batches, j->n_batches);
    free(j->msg);
    free(j);
}
