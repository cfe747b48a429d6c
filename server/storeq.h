/*
 * storeq.h - a serial queue of job store work for the loop thread: each job's work
 * runs with the queue's store, one job at a time in submission order, and its done
 * callback runs afterwards on the loop.
 *
 * Why: the batch runner's store calls are database round trips (PostgreSQL: a
 * network, a commit that waits for the server's disk, a connection that may hang
 * for as long as a cut network takes to notice). On the loop thread they would
 * stall every interactive request on the replica. With its own store handle
 * (its own connection) the runner's work runs on libuv's thread pool instead and
 * the loop only ever sees the outcomes.
 *
 * Two modes, one behaviour as far as a caller can tell:
 *  - pooled: work runs on libuv's thread pool. The store must be the queue's alone
 *    (nothing else calls it while the queue lives); one job at a time, so the
 *    store still has one user at a time, as jobstore.h requires.
 *  - inline: work runs on the loop, at the next loop iteration (never inside
 *    storeq_submit). For a store the loop shares with other callers (SQLite: one
 *    handle per data dir, whose calls are local disk writes).
 * In both, done runs on the loop after work, jobs complete in the order they were
 * submitted, and a job submitted from a done callback runs after those queued.
 *
 * Owns: the queue and the jobs while they are queued or running (a job's memory is
 * its submitter's again once done is called; done may free it). Not the store.
 * Thread: loop (work callbacks: the thread pool or the loop, see above).
 */
#ifndef H2O_SERVER_STOREQ_H
#define H2O_SERVER_STOREQ_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

struct jobstore;
struct storeq;

/* A job: embed it (anywhere) in the submitter's own struct. */
struct storeq_job {
    struct storeq_job *next;
    /* The store work: touches the job's own memory and the store, nothing the
     * loop owns. Runs on the pool or the loop (see the modes). */
    void (*work)(struct jobstore *js, struct storeq_job *j);
    /* On the loop, after work; owns the job again. */
    void (*done)(struct storeq_job *j);
    double work_s; /* seconds work took (set before done) */
};

/*
 * A queue over `js` (borrowed: the caller closes it after storeq_destroy), pooled
 * or inline (above). Thread: loop.
 */
struct storeq *storeq_create(uv_loop_t *loop, struct jobstore *js, bool pooled);

/* Queue j (work and done set). Thread: loop. */
void storeq_submit(struct storeq *q, struct storeq_job *j);

/* Jobs queued or running. Thread: loop. */
int32_t storeq_pending(const struct storeq *q);

/*
 * Stop the queue's use of the loop: jobs still queued (inline mode) run now, work
 * then done, and any submitted from here on run at once inside storeq_submit
 * (nothing is deferred to a loop that is ending). A pooled job already running
 * completes through the loop as usual. Call before the loop's last run (the inline
 * mode's timer is closed here). Thread: loop.
 */
void storeq_close(struct storeq *q);

/* Free the queue once nothing is queued or running (the loop has ended, or the
 * queue was closed and drained). NULL is a no-op. Thread: loop. */
void storeq_destroy(struct storeq *q);

#endif
