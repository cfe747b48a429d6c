/*
 * batchrun.c - the batch runner's loop side (see batchrun.h): which batches run
 * here, the requests claimed and in flight, the results waiting to be committed,
 * and when to ask the store for what. The store work itself is batchrun_jobs.c,
 * reached only through jobs on the runner's storeq; turning a request into engine
 * requests and their events into a result line is batchrun_line.c.
 *
 * A batch's life here (br_batch.phase):
 *  RUN     claim requests a chunk at a time (jobstore_batch_claim, under a lease of
 *          cfg->batch_lease_s), hand them to the engine, renew the leases every
 *          third of a lease while any are held, commit results as they come (each
 *          commit takes every result waiting, so commits group themselves when the
 *          store is slower than the engine). When a claim finds nothing, either
 *          other replicas hold the rest (try again in a second: a dead one's leases
 *          run out) or every request is answered (the claim job completes the
 *          batch). A status other than in_progress, seen by a claim, a renew or a
 *          scan, ends the batch here.
 *  END     cancelled, finished elsewhere, or the server is draining: the lines in
 *          flight are cancelled, the results already answered are still committed,
 *          then one job gives back our leases (and, for a cancel made here, moves
 *          the batch to cancelled), and the batch is forgotten.
 *  EXPIRE  past its window: like END, but the last job answers batch_expired for
 *          the requests nobody else holds, and moves the batch to expired once
 *          every request is answered (each replica expires what it holds).
 *  FULL    (SQLite) a result did not fit on the disk: the batch goes to failed
 *          with insufficient_storage, now or at a later tick (docs/batch.md).
 *
 * Nothing is remembered here that the store does not know: a request is pending in
 * the store until its result is committed, so whatever happens to this process,
 * the store's pending requests are exactly the ones to run again (here after a
 * restart, or by any replica once our leases run out).
 *
 * Finding work: at start, and on a shared store every few seconds, a scan lists
 * the unfinished batches: in_progress ones are run here too, validating ones
 * nobody has stored yet are validated (at once when this replica is alone;
 * otherwise when their validator seems dead, two leases after they were made).
 *
 * Store errors: on a shared store (PostgreSQL) a failed job changed nothing (one
 * transaction) and is tried again a second later, results included, so a database
 * that goes away for a while only pauses the batches. On SQLite a failed result
 * write poisons the store (jobstore.h): everything stops until a restart.
 *
 * Seeds: a request without one gets a seed derived from its batch and custom_id,
 * so it samples the same tokens whichever replica runs it, however often.
 *
 * Owns: the batches, their claimed requests and waiting results, the validations,
 * the store queue and, for a shared store, the runner's own store handle; the lines
 * in flight are batchrun_line.c's.
 * Thread: loop.
 */
#include "batchrun.h"

#include "batchrun_impl.h"
#include "jobstore.h"
#include "srv.h"

#include "err.h"
#include "util.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Requests one feed call starts (or refuses) at most, so that a batch of lines the
 * API refuses one by one cannot hold the loop; the next event or tick goes on. */
#define BR_FEED_MAX 256
/* After a failed store job, and between claims of a batch whose requests are all
 * held: wait this long (ms). */
#define BR_RETRY_MS 1000
/* A shared store is scanned for batches other replicas made this often (ms): one
 * indexed query, cheap next to how soon replicas should join a new batch. */
#define BR_SCAN_MS 1000
/* Store failures are logged at most this often (ms), with a count of the rest. */
#define BR_LOG_MS 10000

static uint64_t now_ms(const struct batchrun *br)
{
    return uv_now(br->s->loop);
}

/* A store job failed: logged, at most every BR_LOG_MS (a database that is away
 * fails every job each second). */
static void log_store_error(struct batchrun *br, const struct br_job *j)
{
    br->st.store_errors++;
    const uint64_t now = now_ms(br);
    if (now < br->log_at) {
        br->log_skipped++;
        return;
    }
    br->log_at = now + BR_LOG_MS;
    log_error("batches%s%s: %s (retrying; %lld more store failures not logged since the "
              "last)",
              j->batch_id[0] ? ": batch " : "", j->batch_id, j->msg ? j->msg : err_name(j->err),
              (long long)br->log_skipped);
    br->log_skipped = 0;
}

/* ---- tracking ---- */

static struct br_batch *find_batch(struct batchrun *br, const char *id)
{
    for (struct br_batch *b = br->head; b; b = b->next)
        if (strcmp(b->id, id) == 0) return b;
    return NULL;
}

static struct br_batch *track(struct batchrun *br, const char *id, int64_t expires_at)
{
    struct br_batch *b = find_batch(br, id);
    if (b) return b;
    b = xcalloc(1, sizeof *b);
    snprintf(b->id, sizeof b->id, "%s", id);
    b->expires_at = expires_at;
    struct br_batch **p = &br->head;
    while (*p) p = &(*p)->next;
    *p = b;
    return b;
}

static void queue_clear(struct br_batch *b)
{
    jobstore_requests_free(b->queue, b->n_queue);
    b->queue = NULL;
    b->n_queue = b->i_queue = 0;
}

static void results_clear(struct br_batch *b)
{
    for (int i = 0; i < b->n_results; i++) {
        free(b->results[i].custom_id);
        free(b->results[i].line);
    }
    free(b->results);
    b->results = NULL;
    b->n_results = b->cap_results = 0;
}

static void untrack(struct batchrun *br, struct br_batch *b)
{
    CHECK(b->n_lines == 0);
    for (struct br_batch **p = &br->head; *p; p = &(*p)->next)
        if (*p == b) {
            *p = b->next;
            break;
        }
    queue_clear(b);
    results_clear(b);
    free(b);
}

/* Requests of b the store has leased to us: claimed, running, or answered and
 * not yet committed. */
static int64_t held(const struct br_batch *b)
{
    return (b->n_queue - b->i_queue) + b->n_lines + b->n_results + b->n_committing;
}

/* ---- store jobs ---- */

static void job_done(struct storeq_job *q);

static struct br_job *job_new(struct batchrun *br, enum br_job_kind kind, const char *batch_id)
{
    struct br_job *j = xcalloc(1, sizeof *j);
    j->q.work = batchrun_job_work;
    j->q.done = job_done;
    j->br = br;
    j->kind = kind;
    snprintf(j->batch_id, sizeof j->batch_id, "%s", batch_id ? batch_id : "");
    j->owner = br->owner;
    j->lease_s = br->lease_s;
    return j;
}

/* Queue j; false (j freed) once the runner is closed: nothing is deferred to a loop
 * that is ending, and the store keeps whatever was not done as pending. */
static bool submit(struct batchrun *br, struct br_job *j)
{
    if (br->closed || !br->q) {
        batchrun_job_free(j);
        return false;
    }
    br->st.store_jobs++;
    storeq_submit(br->q, &j->q);
    return true;
}

/* SQLite could not record a result: from here on nothing it was told can be
 * trusted until a restart re-reads the files, so everything stops. */
static void store_failed(struct batchrun *br)
{
    log_error("batch results can no longer be recorded; batches resume after a restart");
    br->store_failed = true;
    while (br->n_lines) batchrun_line_drop(br, br->n_lines - 1, true);
    for (struct br_batch *b = br->head; b; b = b->next) queue_clear(b);
}

/* ---- the end of a batch here ---- */

static void try_close(struct batchrun *br, struct br_batch *b);

/* b's status is `status`, not in_progress: stop running it here. A cancel is
 * finished (moved to cancelled) by whoever sees it first. */
static void batch_ended(struct batchrun *br, struct br_batch *b, enum jobstore_status status)
{
    if (b->phase != BR_RUN) return;
    b->phase = BR_END;
    b->end_cancel = status == JOBSTORE_CANCELLING;
    batchrun_line_drop_batch(br, b);
    queue_clear(b); /* the stop job gives their leases back */
    try_close(br, b);
}

static void begin_expire(struct batchrun *br, struct br_batch *b)
{
    b->phase = BR_EXPIRE;
    batchrun_line_drop_batch(br, b);
    queue_clear(b);
    try_close(br, b);
}

/* A result of b did not fit (JOBSTORE_EFULL): the store is intact and nothing was
 * counted twice, but b cannot go on, so it stops at once and goes to failed, now
 * or at a later tick when even that did not fit. Other batches go on: each fails
 * by itself when its own writes do not fit. */
static void batch_full(struct batchrun *br, struct br_batch *b, const char *cause)
{
    if (b->phase == BR_FULL) return;
    log_error("batch %s: %s", b->id, cause ? cause : "no space left");
    b->phase = BR_FULL;
    batchrun_line_drop_batch(br, b);
    queue_clear(b);
    results_clear(b);
    b->close_at = 0;
    try_close(br, b);
}

/* The last job of an ending batch, once nothing of it is running or waiting. */
static void try_close(struct batchrun *br, struct br_batch *b)
{
    if (b->phase == BR_RUN || b->closing || br->store_failed || now_ms(br) < b->close_at)
        return;
    if (b->phase != BR_FULL && (b->n_lines || b->n_results || b->committing)) return;
    static const enum br_job_kind kinds[] = {[BR_END] = BRJ_STOP, [BR_EXPIRE] = BRJ_EXPIRE,
                                             [BR_FULL] = BRJ_FAIL_FULL};
    struct br_job *j = job_new(br, kinds[b->phase], b->id);
    j->set_to = b->phase == BR_END && b->end_cancel;
    j->to = JOBSTORE_CANCELLED;
    b->closing = submit(br, j);
}

static void close_done(struct batchrun *br, struct br_job *j)
{
    struct br_batch *b = find_batch(br, j->batch_id);
    if (!b) return;
    b->closing = false;
    if (j->err) {
        if (j->err == JOBSTORE_EFULL && j->kind == BRJ_EXPIRE) {
            batch_full(br, b, j->msg);
        } else if (j->kind == BRJ_FAIL_FULL) {
            log_error("batch %s: cannot record its failure yet: %s", b->id, j->msg);
            b->close_at = now_ms(br) + BR_RETRY_MS;
        } else if (j->kind == BRJ_EXPIRE && !jobstore_shared(br->js)) {
            log_error("batch %s: %s", b->id, j->msg);
            store_failed(br);
        } else {
            log_store_error(br, j);
            b->close_at = now_ms(br) + BR_RETRY_MS;
        }
        return;
    }
    if (j->kind == BRJ_EXPIRE && j->status == JOBSTORE_IN_PROGRESS) {
        /* Others still hold some of it: they expire those, or their leases run
         * out; look again in a second. */
        b->close_at = now_ms(br) + BR_RETRY_MS;
        return;
    }
    if (j->released > 0)
        log_info("batch %s: gave back %lld leases", b->id, (long long)j->released);
    if (j->kind == BRJ_FAIL_FULL)
        log_error("batch %s: failed: no space left for its results", b->id);
    else if (j->have_status && (j->kind == BRJ_EXPIRE || j->set_to))
        log_info("batch %s: %s", b->id, jobstore_status_name(j->status));
    untrack(br, b);
}

/* ---- commits ---- */

/* Hand every waiting result of b to one commit job, unless one is in flight (its
 * done calls this again) or a retry is not due yet (the tick calls this again). */
void batchrun_commit_soon(struct batchrun *br, struct br_batch *b)
{
    if (b->committing || b->n_results == 0 || br->store_failed || br->closed ||
        now_ms(br) < b->commit_at)
        return;
    struct br_job *j = job_new(br, BRJ_COMMIT, b->id);
    j->results = b->results;
    j->n_results = b->n_results;
    b->results = NULL;
    b->n_results = b->cap_results = 0;
    b->n_committing = j->n_results;
    b->committing = submit(br, j);
    if (!b->committing) b->n_committing = 0;
}

static void commit_done(struct batchrun *br, struct br_job *j)
{
    int64_t committed = 0;
    for (int i = 0; j->outcome && i < j->n_results; i++)
        committed += j->outcome[i] == BR_COMMITTED;
    br->st.commits += committed > 0;
    br->st.results += committed;
    br->st.refused += j->n_refused;
    struct br_batch *b = find_batch(br, j->batch_id);
    if (!b) return;
    b->committing = false;
    b->n_committing = 0;
    /* What was not written waits for the next commit. */
    for (int i = 0; i < j->n_results; i++) {
        if (j->outcome && j->outcome[i] != BR_KEPT) continue;
        batchrun_keep_result(b, j->results[i].custom_id, j->results[i].ok, j->results[i].line);
        j->results[i].line = NULL;
    }
    if (j->n_refused)
        log_info("batch %s: %d results were recorded first by another replica (or the "
                 "batch ended)",
                 b->id, j->n_refused);
    if (j->err == JOBSTORE_EFULL) {
        batch_full(br, b, j->msg);
        return;
    }
    if (j->err && !jobstore_shared(br->js)) {
        log_error("batch %s: %s", b->id, j->msg);
        store_failed(br);
        return;
    }
    if (j->err) {
        log_store_error(br, j);
        b->commit_at = now_ms(br) + BR_RETRY_MS;
    }
    batchrun_commit_soon(br, b); /* results that came while this one ran */
    /* Nothing of b is held here any more: ask at once whether there is more, or
     * whether that was its last result (the claim finishes the batch then). */
    if (held(b) == 0) b->claim_at = 0;
    try_close(br, b);
    batchrun_feed(br);
}

/* ---- claims and feeding ---- */

static bool engine_ready(const struct batchrun *br)
{
    const struct srv *s = br->s;
    return br->q && !br->stopped && !br->closed && !br->store_failed && !s->draining &&
           s->bridge.eng && engine_state(s->bridge.eng) == ENGINE_READY;
}

/* Claim more when what is claimed and not started runs low: enough to keep about
 * one and a half times batch_max_in_flight leased (at least one more than runs), so
 * the engine never waits for a claim, and no more, so that a replica that dies
 * strands little (its leases must run out first) and replicas share a batch evenly.
 * One claim at a time, for the oldest batch that may have something to claim. */
static void claim_more(struct batchrun *br)
{
    if (br->claiming || !engine_ready(br)) return;
    const int32_t max = br->s->cfg->batch_max_in_flight;
    int64_t queued = 0;
    for (struct br_batch *b = br->head; b; b = b->next) queued += b->n_queue - b->i_queue;
    if (queued > max / 2) return;
    const int64_t want = (int64_t)max + MAX(max / 2, 1) - br->n_reqs - queued;
    if (want < 1) return;
    const uint64_t now = now_ms(br);
    for (struct br_batch *b = br->head; b; b = b->next) {
        if (b->phase != BR_RUN || b->claiming || now < b->claim_at) continue;
        struct br_job *j = job_new(br, BRJ_CLAIM, b->id);
        j->max = (int)MIN(want, 1 << 20);
        b->claiming = br->claiming = submit(br, j);
        return;
    }
}

static void claim_done(struct batchrun *br, struct br_job *j)
{
    br->claiming = false;
    struct br_batch *b = find_batch(br, j->batch_id);
    if (!b || b->phase != BR_RUN) {
        /* It ended meanwhile: its stop job (queued after this one) releases what
         * this claim took. */
        if (b) b->claiming = false;
        return;
    }
    b->claiming = false;
    const uint64_t now = now_ms(br);
    if (j->err) {
        log_store_error(br, j);
        b->claim_at = now + BR_RETRY_MS;
    } else if (j->n_reqs > 0) {
        br->st.claims++;
        br->st.lines_claimed += j->n_reqs;
        const int left = b->n_queue - b->i_queue;
        struct jobstore_request *q = xcalloc((size_t)(left + j->n_reqs), sizeof *q);
        if (left) memcpy(q, b->queue + b->i_queue, (size_t)left * sizeof *q);
        memcpy(q + left, j->reqs, (size_t)j->n_reqs * sizeof *q);
        free(b->queue); /* the started ones' strings are freed; the rest moved to q */
        free(j->reqs);
        j->reqs = NULL;
        b->queue = q;
        b->n_queue = left + j->n_reqs;
        b->i_queue = 0;
        j->n_reqs = 0;
        if (!b->renew_at) b->renew_at = now + br->renew_ms;
    } else if (j->have_status && j->status == JOBSTORE_IN_PROGRESS) {
        b->claim_at = now + BR_RETRY_MS; /* all held: a dead holder's leases run out */
    } else if (j->have_status) {
        if (j->status == JOBSTORE_COMPLETED || j->status == JOBSTORE_EXPIRED)
            log_info("batch %s: %s", b->id, jobstore_status_name(j->status));
        batch_ended(br, b, j->status);
    }
    batchrun_feed(br);
}

void batchrun_feed(struct batchrun *br)
{
    if (!br || !engine_ready(br)) return;
    const int32_t max = br->s->cfg->batch_max_in_flight;
    int looked = 0;
    for (struct br_batch *b = br->head; b; b = b->next) {
        if (b->phase != BR_RUN) continue;
        while (br->n_reqs < max && looked < BR_FEED_MAX && !br->store_failed &&
               b->i_queue < b->n_queue) {
            struct jobstore_request *r = &b->queue[b->i_queue++];
            batchrun_line_start(br, b, r);
            free(r->custom_id); /* started: the line has its own copies */
            free(r->body);
            r->custom_id = r->body = NULL;
            looked++;
        }
        if (b->n_queue && b->i_queue == b->n_queue) queue_clear(b);
        batchrun_commit_soon(br, b); /* lines the API refused */
    }
    claim_more(br);
}

/* ---- leases and scans ---- */

static void renew_due(struct batchrun *br, struct br_batch *b)
{
    if (b->renewing || b->closing || held(b) == 0 || now_ms(br) < b->renew_at) return;
    b->renewing = submit(br, job_new(br, BRJ_RENEW, b->id));
}

static void renew_done(struct batchrun *br, struct br_job *j)
{
    struct br_batch *b = find_batch(br, j->batch_id);
    if (!b) return;
    b->renewing = false;
    if (j->err) {
        log_store_error(br, j);
        b->renew_at = now_ms(br) + BR_RETRY_MS;
        return;
    }
    b->renew_at = now_ms(br) + br->renew_ms;
    if (j->status != JOBSTORE_IN_PROGRESS) batch_ended(br, b, j->status);
}

static bool checking(const struct batchrun *br, const char *id)
{
    for (const struct br_check *c = br->checks; c; c = c->next)
        if (strcmp(c->batch_id, id) == 0) return true;
    return false;
}

static void scan_due(struct batchrun *br)
{
    if (br->scanning || now_ms(br) < br->scan_at || (br->scanned && !jobstore_shared(br->js)))
        return;
    br->scanning = submit(br, job_new(br, BRJ_SCAN, NULL));
}

static void scan_done(struct batchrun *br, struct br_job *j)
{
    br->scanning = false;
    const uint64_t now = now_ms(br);
    if (j->err) {
        log_store_error(br, j);
        br->scan_at = now + BR_RETRY_MS;
        return;
    }
    br->scan_at = now + br->scan_ms;
    const bool alone = !jobstore_shared(br->js);
    const int64_t now_s = (int64_t)time(NULL);
    int resumed = 0;
    for (int i = 0; i < j->n_batches; i++) {
        const struct jobstore_batch *jb = &j->batches[i];
        if (jb->status == JOBSTORE_IN_PROGRESS && !find_batch(br, jb->id) && !br->stopped) {
            track(br, jb->id, jb->expires_at);
            resumed++;
        } else if (jb->status == JOBSTORE_VALIDATING && !checking(br, jb->id) &&
                   (alone || jb->created_at + 2 * br->lease_s <= now_s)) {
            /* Alone, nobody else is validating it; shared, its validator has had
             * two leases and is most likely dead. Twice is harmless: the requests
             * are stored once. */
            batchrun_validate(br, jb->id);
            resumed++;
        }
    }
    if (resumed && !br->scanned)
        log_info("resuming %d unfinished batch%s", resumed, resumed == 1 ? "" : "es");
    br->scanned = true;
    /* What runs here and is no longer in_progress (finished, cancelled elsewhere). */
    for (struct br_batch *b = br->head, *next; b; b = next) {
        next = b->next;
        if (b->phase != BR_RUN) continue;
        const struct jobstore_batch *found = NULL;
        for (int i = 0; i < j->n_batches && !found; i++)
            if (strcmp(j->batches[i].id, b->id) == 0) found = &j->batches[i];
        if (!found)
            batch_ended(br, b, JOBSTORE_COMPLETED); /* final: not listed */
        else if (found->status != JOBSTORE_IN_PROGRESS)
            batch_ended(br, b, found->status);
    }
    batchrun_feed(br);
}

/* ---- validation ---- */

static void check_free(struct batchrun *br, struct br_check *c)
{
    for (struct br_check **p = &br->checks; *p; p = &(*p)->next)
        if (*p == c) {
            *p = c->next;
            break;
        }
    br->n_checks--;
    batch_check_deinit(&c->chk);
    free(c);
}

static void check_work(uv_work_t *w)
{
    struct br_check *c = w->data;
    batch_check_file(&c->chk);
}

/* Loop: the file is read; store the outcome (a job), unless the server stops. */
static void check_done(uv_work_t *w, int status)
{
    struct br_check *c = w->data;
    struct batchrun *br = c->br;
    if (status != 0 || c->chk.abandoned || br->stopped) {
        check_free(br, c);
        return;
    }
    struct br_job *j = job_new(br, BRJ_CHECKED, c->batch_id);
    j->check = c;
    if (!submit(br, j)) check_free(br, c);
}

static void input_done(struct batchrun *br, struct br_job *j)
{
    struct br_check *c = j->check;
    if (j->err || !j->have_status || j->status != JOBSTORE_VALIDATING || br->stopped) {
        if (j->err) log_store_error(br, j);
        check_free(br, c);
        return;
    }
    if (j->msg) log_error("batch %s: %s", c->batch_id, j->msg); /* no input: it fails */
    c->work.data = c;
    int err = uv_queue_work(br->s->loop, &c->work, check_work, check_done);
    CHECK(err == 0); /* only fails for a NULL callback */
}

static void checked_done(struct batchrun *br, struct br_job *j)
{
    struct br_check *c = j->check;
    if (j->err) log_store_error(br, j);
    if (j->have_status) {
        log_info("batch %s: %s", c->batch_id, jobstore_status_name(j->status));
        if (j->status == JOBSTORE_IN_PROGRESS && !br->stopped)
            track(br, c->batch_id, j->expires_at);
    }
    check_free(br, c);
    batchrun_feed(br);
}

void batchrun_validate(struct batchrun *br, const char *batch_id)
{
    if (!br || br->stopped || checking(br, batch_id)) return;
    struct srv *s = br->s;
    struct br_check *c = xcalloc(1, sizeof *c);
    c->br = br;
    c->work.data = c;
    snprintf(c->batch_id, sizeof c->batch_id, "%s", batch_id);
    c->chk.model = xstrdup(s->model_id);
    c->chk.max_requests = s->cfg->batch_max_requests;
    c->chk.stop = &br->checks_stop;
    c->next = br->checks;
    br->checks = c;
    br->n_checks++;
    struct br_job *j = job_new(br, BRJ_INPUT, batch_id);
    j->check = c;
    if (!submit(br, j)) check_free(br, c);
}

/* ---- the jobs' return ---- */

static void job_done(struct storeq_job *q)
{
    struct br_job *j = (struct br_job *)q;
    struct batchrun *br = j->br;
    br->st.store_seconds += q->work_s;
    switch (j->kind) {
    case BRJ_CLAIM: claim_done(br, j); break;
    case BRJ_COMMIT: commit_done(br, j); break;
    case BRJ_RENEW: renew_done(br, j); break;
    case BRJ_STOP:
    case BRJ_EXPIRE:
    case BRJ_FAIL_FULL: close_done(br, j); break;
    case BRJ_SCAN: scan_done(br, j); break;
    case BRJ_INPUT: input_done(br, j); break;
    case BRJ_CHECKED: checked_done(br, j); break;
    }
    batchrun_job_free(j);
}

/* ---- the API's calls, the tick, life ---- */

void batchrun_cancel(struct batchrun *br, const char *batch_id)
{
    if (!br) return;
    struct br_batch *b = find_batch(br, batch_id);
    if (b && b->phase == BR_RUN) {
        batch_ended(br, b, JOBSTORE_CANCELLING);
        return;
    }
    if (b && b->phase == BR_END && !b->closing) { /* on its way out: cancel it there */
        b->end_cancel = true;
        return;
    }
    if (checking(br, batch_id)) return; /* its validation's end sees the cancel */
    /* Not run here (another replica runs it, or it was not seen yet): finish the
     * cancel now; whoever runs it sees it at its next renew. */
    struct br_job *j = job_new(br, BRJ_STOP, batch_id);
    j->set_to = true;
    j->to = JOBSTORE_CANCELLED;
    submit(br, j);
}

void batchrun_stats(const struct batchrun *br, struct batchrun_stats *out)
{
    memset(out, 0, sizeof *out);
    if (!br) return;
    *out = br->st;
    out->batches = 0;
    for (const struct br_batch *b = br->head; b; b = b->next) out->batches += b->phase == BR_RUN;
    out->requests = br->n_reqs;
}

static int attach(struct batchrun *br);

/* The server started with a data dir too full to open the store (srv_run.c serves
 * without it): try again once a second, and resume the batches once it opens.
 * Returns whether the store is open. */
static bool open_store(struct batchrun *br)
{
    struct srv *s = br->s;
    if (!s->js) {
        const uint64_t now = now_ms(br);
        if (s->draining || now < br->retry_at) return false;
        br->retry_at = now + 1000;
        if (jobstore_open(&s->js, srv_job_store(s->cfg))) return false;
        log_info("%s %s: the job store is open; Files and Batches are served",
                 srv_job_store_kind(s->cfg), srv_job_store_name(s->cfg));
    }
    if (attach(br)) {
        log_error("batches: %s", err_msg());
        return false;
    }
    return true;
}

void batchrun_tick(struct batchrun *br)
{
    if (!br || br->closed) return;
    if (!br->q && !open_store(br)) return;
    const int64_t now_s = (int64_t)time(NULL);
    for (struct br_batch *b = br->head, *next; b; b = next) {
        next = b->next;
        if (b->phase == BR_RUN && b->expires_at && now_s >= b->expires_at && !br->store_failed)
            begin_expire(br, b);
        renew_due(br, b);
        batchrun_commit_soon(br, b);
        try_close(br, b);
    }
    scan_due(br);
    batchrun_feed(br); /* the engine may have become ready since the last event */
}

void batchrun_stop(struct batchrun *br)
{
    if (!br || br->stopped) return;
    br->stopped = true;
    atomic_store(&br->checks_stop, true);
    for (struct br_batch *b = br->head, *next; b; b = next) {
        next = b->next;
        if (b->phase == BR_RUN) {
            b->phase = BR_END; /* not ended: given back, for others to run */
            b->end_cancel = false;
            batchrun_line_drop_batch(br, b);
            queue_clear(b);
            try_close(br, b);
        }
    }
    CHECK(br->n_lines == 0);
}

void batchrun_close(struct batchrun *br)
{
    if (!br || br->closed) return;
    batchrun_stop(br);
    /* Closed first: the jobs that run now (inline) hand nothing more to a queue
     * that would have to run it inside their own done callback. */
    br->closed = true;
    storeq_close(br->q);
}

/* Use s's store (SQLite), or a handle of our own on the same database (shared),
 * and look for work. */
static int attach(struct batchrun *br)
{
    struct srv *s = br->s;
    const bool shared = jobstore_shared(s->js);
    if (shared) {
        int err = jobstore_open(&br->js, srv_job_store(s->cfg));
        if (err) return err;
        br->own_js = true;
    } else {
        br->js = s->js;
    }
    br->q = storeq_create(s->loop, br->js, shared);
    br->scan_at = 0;
    scan_due(br);
    return 0;
}

int batchrun_create(struct srv *s, struct batchrun **out)
{
    *out = NULL;
    struct batchrun *br = xcalloc(1, sizeof *br);
    br->s = s;
    br->lease_s = s->cfg->batch_lease_s;
    br->renew_ms = (uint64_t)MAX(br->lease_s * 1000 / 3, 250);
    br->scan_ms = MIN(br->renew_ms, BR_SCAN_MS);
    /* Unique per process: a restarted replica must not find leases it does not know
     * as its own (they run out, or SQLite clears them at open). */
    char host[64] = "";
    gethostname(host, sizeof host - 1);
    char rnd[JOBSTORE_ID_MAX];
    jobstore_new_id("", rnd, sizeof rnd);
    snprintf(br->owner, sizeof br->owner, "%.63s:%d:%.8s", host, (int)getpid(), rnd);
    if (s->js) {
        int err = attach(br);
        if (err) {
            free(br);
            return err;
        }
    }
    *out = br;
    return 0;
}

void batchrun_destroy(struct batchrun *br)
{
    if (!br) return;
    CHECK(br->n_checks == 0); /* the loop ran until its work was done */
    while (br->n_lines) batchrun_line_drop(br, br->n_lines - 1, false);
    while (br->head) untrack(br, br->head);
    storeq_destroy(br->q);
    if (br->own_js) jobstore_close(br->js);
    free(br->lines);
    free(br);
}
